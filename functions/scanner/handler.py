"""Scanner function: the periodic pending-pod scan (EventBridge schedule, every minute).

Accepts the EventBridge ``Scheduled Event`` (parsed with the powertools parser) or, for
manual runs (``aws lambda invoke``), ``{}`` or ``{"mode": "economy" | "responsive"}``;
anything else is rejected with a message naming the problem. Runs
:func:`joiner.services.provisioning.run_scanner` and returns a small JSON summary
(rounds, claims launched, failures, unschedulable pods).

The runtime (settings, adapters, caches) is built on the first invocation and reused while
the execution environment lives.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import ValidationError, parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

from joiner.observability import handler_entry, logger
from joiner.services.provisioning import run_scanner

SCHEDULED_EVENT = "Scheduled Event"
MODES = ("economy", "responsive")

_cold: dict[str, Any] = {}


class ScannerEventError(ValueError):
    """The invocation payload is neither a scheduled event nor a manual-run request."""


def configure(runtime: Any = None) -> Any:
    """The runtime for this execution environment (built from the settings on first use;
    tests pass their own)."""
    if runtime is None:
        from joiner.services.context import build_runtime
        from joiner.settings import get_settings

        runtime = build_runtime(get_settings())
    _cold["runtime"] = runtime
    return runtime


def scan_mode(event: Any) -> str | None:
    """The mode an event asks for (None: the configured one). Raises :class:`ScannerEventError`."""
    if event is None or event == {}:
        return None
    if not isinstance(event, dict):
        raise ScannerEventError(f"scanner: expected a JSON object, got {type(event).__name__}")
    if "detail-type" in event or "source" in event:
        try:
            parsed = parse(event=event, model=EventBridgeModel)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
            raise ScannerEventError(f"scanner: malformed EventBridge event: {problems}") from None
        if parsed.detail_type != SCHEDULED_EVENT:
            raise ScannerEventError(f"scanner: expected detail-type {SCHEDULED_EVENT!r}, got {parsed.detail_type!r}")
        return None
    unknown = sorted(set(event) - {"mode"})
    if unknown:
        raise ScannerEventError(f"scanner: unknown field(s) {', '.join(unknown)} (a manual run takes only 'mode')")
    mode = event.get("mode")
    if mode not in MODES:
        raise ScannerEventError(f"scanner: mode must be one of {', '.join(MODES)}, got {mode!r}")
    return str(mode)


@handler_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    mode = scan_mode(event)
    runtime = _cold.get("runtime") or configure()
    runtime.invocation_id = getattr(context, "aws_request_id", None) or runtime.invocation_id
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    summary = run_scanner(runtime, mode, remaining_ms=remaining)
    result = summary.to_dict()
    logger.info("scan finished", extra={"summary": result})
    return result
