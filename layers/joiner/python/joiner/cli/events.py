"""``joiner events explain FILE``: what Joiner would do with one EventBridge event.

Pure and offline: the event is read and normalised as the interruption handler does (the
same size, depth, number and time bounds, less the window around the current time) and the
action decided for a node of a NodePool with the given settings. It cannot know whether
the instance is managed by Joiner, so the output says what it assumes. Prints one JSON
object; malformed input exits with status 2 and one line saying what is wrong.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from joiner.cli.main import UsageError
from joiner.cli.output import add_output_argument, columns, emit


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("events", help="inspect interruption events offline")
    commands = parser.add_subparsers(dest="events_command", required=True, metavar="SUBCOMMAND")
    explain = commands.add_parser("explain", help="print, as JSON, what Joiner would do with an EventBridge event file")
    explain.add_argument("file", help="the event JSON as EventBridge delivers it (the SQS message body); '-' for stdin")
    explain.add_argument("--rebalance", choices=("replace", "ignore"), default="replace", help="the NodePool's spec.interruption.rebalance (default replace)")
    explain.add_argument("--termination-grace-period", metavar="DURATION", help="the NodePool's terminationGracePeriod, e.g. 1h (default: none)")
    add_output_argument(explain, default="json")
    explain.set_defaults(handler=run_explain)


def explain_event(data: object, *, rebalance: str = "replace", termination_grace_period: str | None = None) -> dict[str, object]:
    """The explanation object for one event (raises ``UnparseableEvent`` / ``DurationError``)."""
    from joiner.domain.durations import parse_duration
    from joiner.domain.interruption import ACTION_UNMANAGED, decide_action
    from joiner.domain.model import NodePool
    from joiner.events import normalize

    event = normalize(data)  # type: ignore[arg-type]
    grace = parse_duration(termination_grace_period) if termination_grace_period else None
    pool = NodePool(name="default", rebalance=rebalance, termination_grace_period=grace)
    action = decide_action(event, None, pool)
    return {
        **event.to_dict(),
        **action.to_dict(),
        "assumes": (
            "instance owned by Joiner: its EC2 tags name this cluster (joiner.dev/cluster) and a claim in the "
            "state table recorded its instance id (Node labels prove nothing); "
            f"for an unmanaged instance the action is {ACTION_UNMANAGED!r}: acknowledged and counted, nothing done"
        ),
        "nodePool": {"rebalance": rebalance, "terminationGracePeriod": termination_grace_period},
    }


def run_explain(args: argparse.Namespace) -> int:
    from joiner.domain.durations import DurationError
    from joiner.events import UnparseableEvent, parse_body

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read event file {args.file!r}: {getattr(error, 'strerror', None) or error}") from None
    try:
        data = parse_body(text)
        result = explain_event(data, rebalance=args.rebalance, termination_grace_period=args.termination_grace_period)
    except UnparseableEvent as error:
        raise UsageError(f"{args.file}: {error}") from None
    except DurationError as error:
        raise UsageError(f"--termination-grace-period: {error}") from None
    emit(getattr(args, "output", "json"), result, lambda wide: _explain_table(result, wide))
    return 0


#: The fields ``-o table`` shows; ``-o wide`` shows every field.
_TABLE_FIELDS = ("kind", "instanceIds", "time", "deadline", "action", "reason", "drainDeadline")


def _explain_table(result: dict[str, object], wide: bool) -> str:
    def text(value: object) -> str:
        if isinstance(value, (list, tuple)):
            return ",".join(str(v) for v in value) or "-"
        if isinstance(value, dict):
            return ",".join(f"{k}={'-' if v is None else v}" for k, v in value.items()) or "-"
        return "-" if value is None or value == "" else str(value)

    keys = list(result) if wide else [key for key in _TABLE_FIELDS if key in result]
    return "\n".join(columns(("FIELD", "VALUE"), [(key, text(result[key])) for key in keys])) + "\n"
