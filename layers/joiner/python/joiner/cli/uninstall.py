"""``joiner uninstall [--kubeconfig FILE] [--context NAME]``: remove Joiner's finalizers.

Joiner's ``joiner.dev/termination`` finalizer on Nodes and NodeClaim mirrors makes ``kubectl
delete`` drain (docs/disruption.md, "Delete to drain"). Once Joiner is gone nothing would
remove it, so this removes it from every Node and NodeClaim; ``make destroy`` runs it before
deleting the stack. Safe to run at any time (a running Joiner adds the finalizer again to the
Nodes it manages unless it is deployed with ``JOINER_DELETE_TO_DRAIN=false``).
"""

from __future__ import annotations

import argparse
import os

from joiner.cli.main import UsageError

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "uninstall", help="remove Joiner's finalizers from Nodes and NodeClaims (run before deleting the stack)",
        description="Remove the joiner.dev/termination finalizer from every Node and NodeClaim, so no deletion waits on a Joiner that is gone.",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from joiner.adapters.kubernetes import KubernetesClient
    from joiner.ports import KubernetesError
    from joiner.services.deletion import remove_finalizers

    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    if not os.path.exists(kubeconfig):
        raise UsageError(f"kubeconfig {kubeconfig} does not exist (pass --kubeconfig)")
    try:
        kube = KubernetesClient.from_kubeconfig(kubeconfig, args.context)
        removed = remove_finalizers(kube)
    except KubernetesError as error:
        raise UsageError(f"{type(error).__name__}: {error}") from None
    for item in removed:
        print(f"finalizer removed: {item}")
    print(f"{len(removed)} finalizer(s) removed")
    return 0
