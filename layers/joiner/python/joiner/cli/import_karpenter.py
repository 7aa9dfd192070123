"""``joiner import-karpenter FILE [-o OUTPUT [--force]]``: Karpenter v1 manifests to Joiner's.

A pure YAML transform: ``karpenter.sh/v1`` NodePools become ``joiner.dev/v1`` NodePools,
``karpenter.k8s.aws/v1`` EC2NodeClasses become ``joiner.dev/v1`` NodeClasses and
``karpenter.sh/v1alpha1`` NodeOverlays become ``joiner.dev/v1alpha1`` NodeOverlays; every
other document is passed through unchanged. Requirement keys are renamed
(``karpenter.sh/capacity-type`` -> ``joiner.dev/capacity-type``,
``karpenter.k8s.aws/instance-*`` -> ``joiner.dev/instance-*``); what Joiner cannot express
is dropped with one warning line on stderr naming the object and field. Malformed input
(including input over the size, nesting, alias and number bounds of
:mod:`joiner.domain.bounded`) exits with status 2 and one line. The translation itself is
:mod:`joiner.domain.karpenter`, which the functions also apply to Karpenter's objects in the
cluster when the deployment opts in.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from joiner.cli.main import UsageError
from joiner.domain.karpenter import KARPENTER_NODECLASS_API, KARPENTER_NODEPOOL_API, Conversion, ConversionError, convert_documents

__all__ = ["register", "run", "convert_documents", "Conversion", "ConversionError"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "import-karpenter",
        help="convert Karpenter v1 NodePools and EC2NodeClasses to Joiner NodePools and NodeClasses",
        description="Convert karpenter.sh/v1 NodePool and karpenter.k8s.aws/v1 EC2NodeClass documents to "
        "joiner.dev/v1; other documents pass through unchanged. Warnings go to stderr.",
    )
    parser.add_argument("file", help="multi-document YAML ('-' for stdin)")
    parser.add_argument("-o", "--output", help="write here instead of stdout (an existing file only with --force)")
    parser.add_argument("--force", action="store_true", help="overwrite the --output file if it exists")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    if args.output and not args.force and Path(args.output).exists():
        raise UsageError(f"{args.output!r} exists; not overwriting it without --force")
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {args.file!r}: {getattr(error, 'strerror', None) or error}") from None
    from joiner.domain.bounded import InputError, load_yaml_all

    try:
        documents = [document for document in load_yaml_all(text) if document is not None]
    except InputError as error:
        where = f" at {error.where}" if error.where else ""
        raise UsageError(f"{args.file}: invalid YAML{where}: {error.problem}") from None
    if not documents:
        raise UsageError(
            f"{args.file}: no Kubernetes objects (an empty file?); give Karpenter NodePools and EC2NodeClasses, "
            "e.g. kubectl get nodepools.karpenter.sh,ec2nodeclasses -o yaml"
        )
    try:
        conversion = convert_documents(documents)
    except ConversionError as error:
        raise UsageError(f"{args.file}: {error}") from None
    if not conversion.converted:
        print(
            f"joiner import-karpenter: warning: {args.file} holds no {KARPENTER_NODEPOOL_API} NodePool or "
            f"{KARPENTER_NODECLASS_API} EC2NodeClass: every document is passed through unchanged",
            file=sys.stderr,
        )
    for warning in conversion.warnings:
        print(f"joiner import-karpenter: warning: {warning}", file=sys.stderr)

    class NoAliasDumper(yaml.SafeDumper):
        """Plain manifests: repeated values are written out, never as YAML anchors."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    output = yaml.dump_all(conversion.documents, Dumper=NoAliasDumper, sort_keys=False, explicit_start=True, default_flow_style=False)
    if args.output:
        _write_whole(Path(args.output), output, overwrite=bool(args.force))
    else:
        sys.stdout.write(output)
    return 0


def _write_whole(target: Path, text: str, *, overwrite: bool) -> None:
    """Write ``text`` to ``target`` all or nothing: into a temporary file beside it, then
    renamed over it (``overwrite``) or linked to its name only if that is still free, so a
    file created meanwhile is not clobbered and a failed write leaves nothing half-written."""
    import os
    import tempfile

    try:
        handle, temporary = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise UsageError(f"cannot write {str(target)!r}: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        if overwrite:
            os.replace(temporary, target)
        else:
            try:
                os.link(temporary, target)
            except FileExistsError:
                raise UsageError(f"{str(target)!r} exists; not overwriting it without --force") from None
    except OSError as error:
        raise UsageError(f"cannot write {str(target)!r}: {error.strerror or error}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
