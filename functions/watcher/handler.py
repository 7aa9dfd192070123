"""Watcher function (responsive mode; EventBridge schedule, every minute).

Accepts the EventBridge ``Scheduled Event`` or ``{}`` (manual runs); anything else is
rejected with a message naming the problem. Runs :func:`joiner.services.watcher.run_watcher`:
a watch on unbound pods for most of the minute, waking the scanner function (asynchronous
``lambda:InvokeFunction`` of ``JOINER_PLANNER_FUNCTION`` with ``{"mode": "economy"}``) per
batch of newly pending pods. Returns the :class:`~joiner.services.watcher.WatchSummary`.
"""

from __future__ import annotations

from typing import Any

from joiner.adapters.scanner_wake import LambdaScannerWaker
from joiner.events.scheduled import ColdStart, ScheduledEventError, manual_run_fields
from joiner.observability import handler_entry, logger
from joiner.services.watcher import run_watcher

cold_start = ColdStart()
configure = cold_start.configure
reset = cold_start.reset


class WatcherEventError(ScheduledEventError):
    """The invocation payload is neither a scheduled event nor a manual-run request."""


@handler_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    manual_run_fields(event, "watcher", (), WatcherEventError)
    runtime = cold_start.runtime(context)
    scanner = LambdaScannerWaker(runtime.aws_client("lambda"), runtime.settings.scanner_function)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    summary = run_watcher(runtime, runtime.kube, scanner, remaining_ms=remaining).to_dict()
    logger.info("watch finished", extra={"summary": summary})
    return summary
