"""Garbage-collection function (EventBridge schedule, every 5 minutes).

Accepts the EventBridge ``Scheduled Event`` (see :mod:`joiner.events.scheduled`) or, for
manual runs (``aws lambda invoke``), ``{}``; anything else is rejected with a message naming
the problem. Runs :func:`joiner.services.gc.collect_garbage` and returns a small JSON
summary: ``{"ran", "skippedReason", "terminatedInstances", "closedClaims", "deletedNodes",
"deletedLaunchTemplates", "kept", "errors"}``.

The runtime (settings, adapters, caches) is built on the first invocation and reused while
the execution environment lives.
"""

from __future__ import annotations

from typing import Any

from joiner.events.scheduled import ColdStart, ScheduledEventError, manual_run_fields
from joiner.observability import handler_entry, logger
from joiner.services.gc import collect_garbage

cold_start = ColdStart()
configure = cold_start.configure
reset = cold_start.reset


class GcEventError(ScheduledEventError):
    """The invocation payload is neither a scheduled event nor a manual-run request."""


def check_event(event: Any) -> None:
    """Accept a scheduled event or ``{}``; raise :class:`GcEventError` naming the problem otherwise."""
    manual_run_fields(event, "gc", (), GcEventError)


@handler_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    check_event(event)
    runtime = cold_start.runtime(context)
    result = collect_garbage(runtime, runtime.clock.now())
    summary = result.to_dict()
    logger.info("gc finished", extra={"summary": summary})
    return summary
