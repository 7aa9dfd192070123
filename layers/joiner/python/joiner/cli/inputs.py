"""What ``joiner plan`` and ``joiner disrupt`` share: a cluster snapshot, an instance
catalog and an output format, read with one clear line (exit status 2) on bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from joiner.cli.main import UsageError

if TYPE_CHECKING:
    from joiner.domain.catalog import Catalog
    from joiner.domain.snapshot import Snapshot

__all__ = ["add_snapshot_arguments", "input_name", "read_text", "load_snapshot_and_catalog", "KARPENTER_GROUPS"]


def add_snapshot_arguments(parser: argparse.ArgumentParser) -> None:
    """``SNAPSHOT``, ``--catalog FILE``, ``--region`` and ``-o table|wide|json|yaml``."""
    parser.add_argument("snapshot", help="YAML with Pods, Nodes, DaemonSets, PDBs, RuntimeClasses, NodePools, NodeClasses and NodeClaims ('-' for stdin)")
    parser.add_argument("--catalog", help="instance catalog file (YAML/JSON); default: the bundled us-east-1 catalog (on-demand prices)")
    parser.add_argument(
        "--region",
        default="us-east-1",
        help="bundled catalog to plan with when no --catalog is given (bundled: us-east-1; for another region export one with a catalog file)",
    )
    from joiner.cli.output import add_output_argument

    add_output_argument(parser)


#: apiVersion prefixes of Karpenter's kinds (``joiner import-karpenter`` converts them).
KARPENTER_GROUPS = ("karpenter.sh/", "karpenter.k8s.aws/")


def input_name(path: str) -> str:
    """How messages name an input file (``-``: standard input)."""
    return "<stdin>" if path == "-" else path


def read_text(path: str, what: str) -> str:
    """The file's text (``-``: standard input); a :class:`UsageError` naming it otherwise."""
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {what} {path!r}: {getattr(error, 'strerror', None) or error}") from None


def load_snapshot_and_catalog(args: argparse.Namespace) -> tuple[Snapshot, Catalog]:
    """The snapshot and catalog the arguments name (the bundled catalog by default)."""
    from joiner.domain.catalog import CatalogError, load_bundled_catalog, load_catalog_file
    from joiner.domain.snapshot import SnapshotError, load_snapshot_yaml

    text = read_text(args.snapshot, "snapshot")
    source = input_name(args.snapshot)
    try:
        snapshot = load_snapshot_yaml(text, strict=True, source=source)
    except SnapshotError as error:
        raise UsageError(f"{source}: {error}" if error.object_ref != source else str(error)) from None
    if not snapshot.kinds_read:
        raise UsageError(
            f"{source}: no Kubernetes objects (an empty file?); give Pods, Nodes, NodePools and NodeClasses, "
            "e.g. kubectl get pods,nodes,daemonsets,pdb,nodepools,nodeclasses -A -o yaml"
        )
    # Karpenter's NodeClaims are read as they are (a deletion's drain plan); its configuration
    # kinds are the ones import-karpenter converts.
    karpenter = sorted(k for k in snapshot.kinds_read if k.startswith(KARPENTER_GROUPS) and not k.endswith("/NodeClaim"))
    if karpenter:
        print(
            f"joiner {args.command}: hint: {source} holds Karpenter objects ({', '.join(karpenter)}); they are read as "
            f"Joiner's here, and `joiner import-karpenter {args.snapshot}` converts them to manifests to apply",
            file=sys.stderr,
        )
    region = getattr(args, "region", "us-east-1")
    if args.catalog and region != "us-east-1":
        raise UsageError("--region selects a bundled catalog: give --catalog or --region, not both")
    try:
        catalog = load_catalog_file(read_text(args.catalog, "catalog")) if args.catalog else load_bundled_catalog(region)
    except CatalogError as error:
        raise UsageError(f"catalog {args.catalog or '(bundled)'}: {error}") from None
    return snapshot, catalog
