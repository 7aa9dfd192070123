"""Disruption function: the scheduled disruption pass (EventBridge schedule, every minute).

Accepts the EventBridge ``Scheduled Event`` (see :mod:`joiner.events.scheduled`) or, for
manual runs (``aws lambda invoke``), ``{}`` or ``{"dryRun": true}`` (decide and validate,
act on nothing, persist nothing); anything else is rejected with a message naming the
problem. Runs :func:`joiner.services.disruption.run_disruption` and returns its summary
(commands executed, dropped at validation, pending for the next pass).

The runtime (settings, adapters, caches) is built on the first invocation and reused while
the execution environment lives.
"""

from __future__ import annotations

from typing import Any

from joiner.events.scheduled import ColdStart, ScheduledEventError, manual_run_fields
from joiner.observability import handler_entry, logger

cold_start = ColdStart()
configure = cold_start.configure
reset = cold_start.reset


class DisruptionEventError(ScheduledEventError):
    """The invocation payload is neither a scheduled event nor a manual-run request."""


def dry_run_requested(event: Any) -> bool:
    """Whether the event asks for a dry run. Raises :class:`DisruptionEventError`."""
    fields = manual_run_fields(event, "disruption", ("dryRun",), DisruptionEventError)
    if not fields:
        return False
    if not isinstance(fields.get("dryRun"), bool):
        raise DisruptionEventError(f"disruption: dryRun must be true or false, got {fields.get('dryRun')!r}")
    return bool(fields["dryRun"])


def _handle_deletions(runtime: Any, *, just_read: bool) -> None:
    """``kubectl delete nodeclaim/node`` drains start within the minute (:mod:`joiner.services.deletion`);
    ``just_read``: the pass went through to its end, having just read Nodes and mirrors."""
    from joiner.services.deletion import handle_deletions

    try:
        handle_deletions(runtime, runtime.clock.now(), just_read=just_read)
    except Exception:  # noqa: BLE001 - never fails the pass; the next pass or gc tries again
        logger.exception("delete-to-drain pass failed")


@handler_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from joiner.services.disruption import run_disruption

    dry_run = dry_run_requested(event)
    runtime = cold_start.runtime(context)
    summary = run_disruption(runtime, dry_run=dry_run)
    result = summary.to_dict()
    if not dry_run:
        _handle_deletions(runtime, just_read=summary.status == "computed")
    logger.info("disruption pass finished", extra={"summary": result})
    return result
