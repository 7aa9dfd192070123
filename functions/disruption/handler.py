"""Disruption function: the scheduled disruption pass (EventBridge schedule, every minute).

Accepts the EventBridge ``Scheduled Event`` (parsed with the powertools parser) or, for
manual runs (``aws lambda invoke``), ``{}`` or ``{"dryRun": true}`` (decide and validate,
act on nothing, persist nothing); anything else is rejected with a message naming the
problem. Runs :func:`joiner.services.disruption.run_disruption` and returns its summary
(commands executed, dropped at validation, pending for the next pass).

The runtime (settings, adapters, caches) is built on the first invocation and reused while
the execution environment lives.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import ValidationError, parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

from joiner.observability import handler_entry, logger

SCHEDULED_EVENT = "Scheduled Event"

_cold: dict[str, Any] = {}


class DisruptionEventError(ValueError):
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


def dry_run_requested(event: Any) -> bool:
    """Whether the event asks for a dry run. Raises :class:`DisruptionEventError`."""
    if event is None or event == {}:
        return False
    if not isinstance(event, dict):
        raise DisruptionEventError(f"disruption: expected a JSON object, got {type(event).__name__}")
    if "detail-type" in event or "source" in event:
        try:
            parsed = parse(event=event, model=EventBridgeModel)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
            raise DisruptionEventError(f"disruption: malformed EventBridge event: {problems}") from None
        if parsed.detail_type != SCHEDULED_EVENT:
            raise DisruptionEventError(f"disruption: expected detail-type {SCHEDULED_EVENT!r}, got {parsed.detail_type!r}")
        return False
    unknown = sorted(set(event) - {"dryRun"})
    if unknown:
        raise DisruptionEventError(f"disruption: unknown field(s) {', '.join(unknown)} (a manual run takes only 'dryRun')")
    if not isinstance(event.get("dryRun"), bool):
        raise DisruptionEventError(f"disruption: dryRun must be true or false, got {event.get('dryRun')!r}")
    return bool(event["dryRun"])


@handler_entry
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from joiner.services.disruption import run_disruption

    dry_run = dry_run_requested(event)
    runtime = _cold.get("runtime") or configure()
    runtime.invocation_id = getattr(context, "aws_request_id", None) or runtime.invocation_id
    summary = run_disruption(runtime, dry_run=dry_run)
    result = summary.to_dict()
    logger.info("disruption pass finished", extra={"summary": result})
    return result
