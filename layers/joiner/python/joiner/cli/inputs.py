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

__all__ = ["add_snapshot_arguments", "read_text", "load_snapshot_and_catalog"]


def add_snapshot_arguments(parser: argparse.ArgumentParser) -> None:
    """``SNAPSHOT``, ``--catalog FILE``, ``--region`` and ``-o table|wide|json|yaml``."""
    parser.add_argument("snapshot", help="YAML with Pods, Nodes, DaemonSets, PDBs, RuntimeClasses, NodePools and NodeClasses ('-' for stdin)")
    parser.add_argument("--catalog", help="instance catalog file (YAML/JSON); default: the bundled us-east-1 catalog (on-demand prices)")
    parser.add_argument("--region", default="us-east-1",
                        help="bundled catalog to plan with when no --catalog is given (bundled: us-east-1; "
                             "for another region export one with a catalog file)")
    from joiner.cli.output import add_output_argument

    add_output_argument(parser)


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
    try:
        snapshot = load_snapshot_yaml(text)
    except SnapshotError as error:
        raise UsageError(str(error)) from None
    region = getattr(args, "region", "us-east-1")
    if args.catalog and region != "us-east-1":
        raise UsageError("--region selects a bundled catalog: give --catalog or --region, not both")
    try:
        catalog = load_catalog_file(read_text(args.catalog, "catalog")) if args.catalog else load_bundled_catalog(region)
    except CatalogError as error:
        raise UsageError(f"catalog {args.catalog or '(bundled)'}: {error}") from None
    return snapshot, catalog
