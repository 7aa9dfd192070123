"""``joiner status``: what a deployed Joiner is doing, read from its state table and the cluster.

AWS credentials and region are found as the AWS CLI finds them, the cluster as ``kubectl``
does (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``; ``--context``). The state table
is ``--table``, or the ``StateTableName`` output of ``--stack`` (CloudFormation).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from joiner.cli.main import UsageError
from joiner.cli.output import add_output_argument, emit

#: infra.stack.stack_name_for: the stack `make deploy` creates is Joiner-<cluster>.
DEFAULT_STACK_PREFIX = "Joiner-"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("status", help="show NodePools, claims in flight, terminations and pending pods of a running Joiner")
    parser.add_argument("--table", help="the state table (default: the StateTableName output of --stack)")
    parser.add_argument("--stack", help="the Joiner stack whose StateTableName output names the table (default: Joiner-<cluster>, with --cluster)")
    parser.add_argument("--cluster", help="the EKS cluster name, to find the default stack")
    parser.add_argument("--region", help="AWS region (default: as the AWS CLI finds it)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--at", help="evaluate ages and expiries as of this ISO 8601 time (default: now)")
    add_output_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from joiner.adapters.kubernetes import KubernetesClient
    from joiner.adapters.state import StateAdapter
    from joiner.clock import FixedClock
    from joiner.ports import KubernetesError, StateError
    from joiner.services.status import collect_status

    session = boto3.session.Session(region_name=args.region) if args.region else boto3.session.Session()
    if not session.region_name:
        raise UsageError("no AWS region: pass --region or set AWS_REGION")
    table = args.table or _table_from_stack(session, args)
    kubeconfig = args.kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or os.path.expanduser("~/.kube/config")
    if not os.path.exists(kubeconfig):
        raise UsageError(f"kubeconfig {kubeconfig} does not exist (pass --kubeconfig)")

    at = _parse_at(args.at) if args.at else datetime.now(UTC)

    try:
        kube = KubernetesClient.from_kubeconfig(kubeconfig, args.context)
        state = StateAdapter(session.resource("dynamodb").Table(table), FixedClock(at))
        status = collect_status(state, kube, at)
    except (KubernetesError, StateError, ClientError, BotoCoreError) as error:
        raise UsageError(f"{type(error).__name__}: {error}") from None
    except Exception as error:  # noqa: BLE001 - the kubeconfig loader raises its own types
        if type(error).__module__.startswith("kubernetes"):
            raise UsageError(f"kubeconfig {kubeconfig}: {error}") from None
        raise
    data = status.to_dict()
    emit(args.output, data, lambda wide: render_table(data, wide=wide))
    return 0


def _parse_at(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--at {text!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise UsageError(f"--at {text!r} needs a time zone (Z or +hh:mm)")
    return moment


def _table_from_stack(session: Any, args: argparse.Namespace) -> str:
    from botocore.exceptions import BotoCoreError, ClientError

    stack = args.stack or (DEFAULT_STACK_PREFIX + args.cluster if args.cluster else None)
    if not stack:
        raise UsageError("give --table, --stack or --cluster")
    try:
        stacks = session.client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    except (ClientError, BotoCoreError) as error:
        raise UsageError(f"stack {stack}: {error}") from None
    for output in (stacks[0].get("Outputs") or []) if stacks else []:
        if str(output.get("OutputKey", "")).startswith(("StateTableName", "JoinerStateTableName")):
            return str(output["OutputValue"])
    raise UsageError(f"stack {stack} has no StateTableName output")


def _rows(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]


def _quantities(values: dict[str, str], names: Iterable[str] | None = None) -> str:
    """``cpu=4,memory=16Gi``; with ``names``, exactly those resources (absent ones as 0)."""
    keys = sorted(values) if names is None else sorted(names)
    return ",".join(f"{k}={values.get(k, '0')}" for k in keys) or "-"


def _shared(*columns: dict[str, str]) -> set[str]:
    """The resources CAPACITY and RESERVED both show: what either has."""
    return {key for column in columns for key in column}


def render_table(status: dict[str, Any], *, wide: bool = False) -> str:
    """The sections of ``joiner status`` as kubectl-like tables (``wide``: messages in full)."""
    out: list[str] = []
    pools = status["nodePools"]
    out += ["NODEPOOLS"] + (
        _rows(
            ("NAME", "NODECLASS", "READY", "NODES", "CAPACITY", "RESERVED", "LIMITS", "IN FLIGHT"),
            [
                (
                    p["name"],
                    str(p["nodeClass"] or "-"),
                    str(p["ready"] or "-"),
                    str(p["nodes"]),
                    _quantities(p["capacity"], _shared(p["capacity"], p["reserved"])),
                    _quantities(p["reserved"], _shared(p["capacity"], p["reserved"])),
                    _quantities(p["limits"]),
                    str(p["inFlight"]),
                )
                for p in pools
            ],
        )
        if pools
        else ["  none"]
    )
    claims = status["claimsInFlight"]
    out += ["", "CLAIMS IN FLIGHT"] + (
        _rows(
            ("CLAIM", "NODEPOOL", "STATE", "TYPE", "CAPACITY", "ZONE", "NODE", "PODS", "AGE"),
            [
                (
                    c["claim"],
                    c["nodePool"],
                    c["state"],
                    str(c["instanceType"] or "-"),
                    str(c["capacityType"] or "-"),
                    str(c["zone"] or "-"),
                    str(c["node"] or "-"),
                    str(c["pods"]),
                    c["age"],
                )
                for c in claims
            ],
        )
        if claims
        else ["  none"]
    )
    terminations = status["terminations"]
    out += ["", "TERMINATIONS"] + (
        _rows(
            ("NODE", "REASON", "PHASE", "DEADLINE", "AGE"),
            [(str(t["node"]), str(t["reason"]), str(t["phase"]), str(t["deadline"] or "-"), str(t["age"] or "-")) for t in terminations],
        )
        if terminations
        else ["  none"]
    )
    pending = status["pendingPods"]
    out += ["", "PENDING PODS"] + (
        _rows(("POD", "AGE", "REASON"), [(p["pod"], str(p["age"] or "-"), p["reason"] or "-") for p in pending]) if pending else ["  none"]
    )
    unavailable = status["unavailableOfferings"]
    if unavailable:
        out += ["", "UNAVAILABLE OFFERINGS"] + _rows(
            ("TYPE", "ZONE", "CAPACITY"),
            [(u["instanceType"], u["zone"], u["capacityType"] + (f" ({u['reservationId']})" if u.get("reservationId") else "")) for u in unavailable],
        )
    decisions = status["recentDecisions"]
    out += ["", "RECENT DECISIONS"] + (
        _rows(
            ("TIME", "OBJECT", "REASON", "MESSAGE"),
            [(d["time"], d["object"], str(d["reason"]), str(d["message"] or "") if wide else str(d["message"] or "")[:120]) for d in decisions],
        )
        if decisions
        else ["  none"]
    )
    return "\n".join(out) + "\n"
