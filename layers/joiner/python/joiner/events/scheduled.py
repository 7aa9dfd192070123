"""What the scheduled functions (scanner, disruption, gc) share: the payload they accept and
the runtime they keep between warm invocations.

A scheduled function is invoked by its EventBridge rule with a ``Scheduled Event`` (parsed
with the powertools parser), or by hand (``aws lambda invoke``) with ``{}`` or a few named
fields. Anything else is rejected with one message naming the problem.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

__all__ = ["SCHEDULED_EVENT", "ScheduledEventError", "manual_run_fields", "ColdStart"]

SCHEDULED_EVENT = "Scheduled Event"


class ScheduledEventError(ValueError):
    """The invocation payload is neither a scheduled event nor a manual-run request."""


def manual_run_fields(
    event: Any, function: str, accepted: Collection[str] = (), error: type[ScheduledEventError] = ScheduledEventError,
) -> dict[str, Any]:
    """The fields of a manual run: ``{}`` for the scheduled event or an empty payload,
    else ``event`` when it names only ``accepted`` fields (their values are the caller's to
    check). Raises ``error`` with a message starting ``"<function>: "``."""
    if event is None or event == {}:
        return {}
    if not isinstance(event, dict):
        raise error(f"{function}: expected a JSON object, got {type(event).__name__}")
    if "detail-type" in event or "source" in event:
        from aws_lambda_powertools.utilities.parser import ValidationError, parse
        from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

        try:
            parsed = parse(event=event, model=EventBridgeModel)
        except ValidationError as invalid:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in invalid.errors())
            raise error(f"{function}: malformed EventBridge event: {problems}") from None
        if parsed.detail_type != SCHEDULED_EVENT:
            raise error(f"{function}: expected detail-type {SCHEDULED_EVENT!r}, got {parsed.detail_type!r}")
        return {}
    unknown = sorted(str(key) for key in set(event) - set(accepted))
    if unknown:
        takes = f"only {', '.join(repr(name) for name in sorted(accepted))}" if accepted else "{}"
        raise error(f"{function}: unknown field(s) {', '.join(unknown)} (a manual run takes {takes})")
    return dict(event)


class ColdStart:
    """The runtime of one execution environment: built from the settings on first use and
    reused while the environment lives; tests configure their own."""

    def __init__(self) -> None:
        self._runtime: Any = None

    def configure(self, runtime: Any = None) -> Any:
        """Use ``runtime`` (default: one built from the environment's settings)."""
        if runtime is None:
            from joiner.services.context import build_runtime
            from joiner.settings import get_settings

            runtime = build_runtime(get_settings())
        self._runtime = runtime
        return runtime

    def runtime(self, context: Any = None) -> Any:
        """The runtime, built if needed, owned by this invocation's request id."""
        runtime = self._runtime if self._runtime is not None else self.configure()
        runtime.invocation_id = getattr(context, "aws_request_id", None) or runtime.invocation_id
        return runtime

    def reset(self) -> None:
        """Forget the runtime (tests)."""
        self._runtime = None
