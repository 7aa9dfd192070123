"""Garbage-collection function (EventBridge schedule, every 5 minutes).

Accepts the EventBridge ``Scheduled Event`` (parsed with the powertools parser) or, for
manual runs (``aws lambda invoke``), ``{}``; anything else is rejected with a message naming
the problem. Runs :func:`joiner.services.gc.collect_garbage` and returns a small JSON
summary: ``{"ran", "skippedReason", "terminatedInstances", "closedClaims", "deletedNodes",
"deletedLaunchTemplates", "kept", "errors"}``.

The runtime (settings, adapters, caches) is built on the first invocation and reused while
the execution environment lives.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import ValidationError, parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

from joiner.observability import handler_entry, logger
from joiner.services.gc import collect_garbage

SCHEDULED_EVENT = "Scheduled Event"

_cold: dict[str, Any] = {}


class GcEventError(ValueError):
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


def reset() -> None:
    """Forget the cold-start runtime (tests)."""
    _cold.clear()


def check_event(event: Any) -> None:
    """Accept a scheduled event or ``{}``; raise :class:`GcEventError` naming the problem otherwise."""
    if event is None or event == {}:
        return
    if not isinstance(event, dict):
        raise GcEventError(f"gc: expected a JSON object, got {type(event).__name__}")
    if "detail-type" in event or "source" in event:
        try:
            parsed = parse(event=event, model=EventBridgeModel)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
            raise GcEventError(f"gc: malformed EventBridge event: {problems}") from None
        if parsed.detail_type != SCHEDULED_EVENT:
            raise GcEventError(f"gc: expected detail-type {SCHEDULED_EVENT!r}, got {parsed.detail_type!r}")
        return
    raise GcEventError(f"gc: unknown field(s) {', '.join(sorted(map(str, event)))} (a manual run takes {{}})")


@handler_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    check_event(event)
    runtime = _cold.get("runtime") or configure()
    runtime.invocation_id = getattr(context, "aws_request_id", None) or runtime.invocation_id
    result = collect_garbage(runtime, runtime.clock.now())
    summary = result.to_dict()
    logger.info("gc finished", extra={"summary": summary})
    return summary
