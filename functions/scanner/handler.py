"""Scanner function: the periodic pending-pod scan (EventBridge schedule, every minute).

Accepts the EventBridge ``Scheduled Event`` (see :mod:`joiner.events.scheduled`) or, for
manual runs (``aws lambda invoke``), ``{}`` or ``{"mode": "economy" | "responsive"}``;
anything else is rejected with a message naming the problem. Runs
:func:`joiner.services.provisioning.run_scanner` and returns a small JSON summary
(rounds, claims launched, failures, unschedulable pods).

The runtime (settings, adapters, caches) is built on the first invocation and reused while
the execution environment lives.
"""

from __future__ import annotations

from typing import Any

from joiner.events.scheduled import ColdStart, ScheduledEventError, manual_run_fields
from joiner.observability import handler_entry, logger
from joiner.services.provisioning import run_scanner

MODES = ("economy", "responsive")

cold_start = ColdStart()
configure = cold_start.configure
reset = cold_start.reset


class ScannerEventError(ScheduledEventError):
    """The invocation payload is neither a scheduled event nor a manual-run request."""


def scan_mode(event: Any) -> str | None:
    """The mode an event asks for (None: the configured one). Raises :class:`ScannerEventError`."""
    fields = manual_run_fields(event, "scanner", ("mode",), ScannerEventError)
    if not fields:
        return None
    mode = fields.get("mode")
    if mode not in MODES:
        raise ScannerEventError(f"scanner: mode must be one of {', '.join(MODES)}, got {mode!r}")
    return str(mode)


@handler_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    mode = scan_mode(event)
    runtime = cold_start.runtime(context)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    summary = run_scanner(runtime, mode, remaining_ms=remaining)
    result = summary.to_dict()
    logger.info("scan finished", extra={"summary": result})
    return result
