"""``joiner uninstall [--kubeconfig FILE] [--context NAME] [--undo]``: remove Joiner's finalizers.

Joiner's ``joiner.dev/termination`` finalizer on Nodes and NodeClaim mirrors makes ``kubectl
delete`` drain (docs/disruption.md, "Delete to drain"). Once Joiner is gone nothing would
remove it, so this removes it from every Node and NodeClaim; ``make destroy`` runs it before
deleting the stack.

It first marks Joiner's Nodes (and, with their finalizer's removal, its NodeClaims) with the
``joiner.dev/uninstalling`` annotation: while it is there, a Joiner still running adds no
finalizer back (it releases any it finds). A mirror written meanwhile (409) is read again and
retried; an object that cannot be changed is reported and the others are still done (exit
status 1 when a finalizer is left). ``--undo`` removes the marker, so a Joiner kept running
adds its finalizers again. An unusable kubeconfig is one line, exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from joiner.cli.main import UsageError

if TYPE_CHECKING:
    from joiner.adapters.kubernetes import KubernetesClient

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "uninstall",
        help="remove Joiner's finalizers from Nodes and NodeClaims (run before deleting the stack)",
        description="Remove the joiner.dev/termination finalizer from every Node and NodeClaim, so no deletion waits on a Joiner that is gone; "
        "a Joiner still running adds none back while the joiner.dev/uninstalling marker this writes is there.",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--undo", action="store_true", help="remove the joiner.dev/uninstalling marker instead: a Joiner still deployed adds its finalizers again"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from joiner.ports import KubernetesError
    from joiner.services.deletion import remove_finalizers, remove_uninstall_marker

    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    kube = _client(kubeconfig, args.context)
    try:
        result = remove_uninstall_marker(kube) if args.undo else remove_finalizers(kube, datetime.now(UTC))
    except KubernetesError as error:
        raise UsageError(f"{type(error).__name__}: {error}") from None
    finally:
        kube.close()
    for item in result.unmarked:
        print(f"joiner uninstall: marker not written on {item}", file=sys.stderr)
    for item in result.failed:
        print(f"joiner uninstall: {'marker' if args.undo else 'finalizer'} not removed: {item}", file=sys.stderr)
    if args.undo:
        for item in result.changed:
            print(f"uninstall marker removed: {item}")
        print(f"uninstall marker removed from {len(result.changed)} object(s)")
    else:
        for item in result.changed:
            print(f"finalizer removed: {item}")
        print(f"{len(result.changed)} finalizer(s) removed")
    if result.failed:
        what = "uninstall marker(s)" if args.undo else "finalizer(s)"
        print(f"joiner uninstall: {len(result.failed)} {what} could not be removed: {', '.join(result.failed_objects)}", file=sys.stderr)
        return 1
    return 0


def _client(kubeconfig: str, context: str | None) -> KubernetesClient:
    """The cluster the kubeconfig names; :class:`UsageError` (one line) when it cannot be used."""
    import yaml

    from joiner.adapters.kubernetes import KubernetesClient

    def unusable(reason: str) -> UsageError:
        return UsageError(f"kubeconfig {kubeconfig} {reason}")

    if not os.path.exists(kubeconfig):
        raise UsageError(f"kubeconfig {kubeconfig} does not exist (pass --kubeconfig)")
    try:
        with open(kubeconfig, encoding="utf-8") as file:
            config: Any = yaml.safe_load(file)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise unusable(f"is not valid YAML{where}: {getattr(error, 'problem', None) or error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise unusable(f"cannot be read: {error}") from None
    if config is None:
        raise unusable("is empty")
    if not isinstance(config, dict):
        raise unusable("is not a kubeconfig (a mapping)")
    names = [str(c.get("name")) for c in config.get("contexts") or [] if isinstance(c, dict)]
    if context is None and not config.get("current-context"):
        raise unusable("has no current-context (pass --context NAME)")
    wanted = context or str(config.get("current-context"))
    if wanted not in names:
        raise unusable(f"has no context {wanted!r} (its contexts: {', '.join(names) or 'none'})")
    try:
        return KubernetesClient.from_kubeconfig(kubeconfig, context)
    except Exception as error:  # noqa: BLE001 - the kubeconfig loader raises its own types (and TypeError, KeyError)
        raise unusable(f"cannot be used: {' '.join(str(error).split())}") from None
