"""What the scheduled functions (scanner, disruption, gc) share: the payload they accept and
the runtime they keep between warm invocations.

A scheduled function is invoked by its EventBridge rule with a ``Scheduled Event``, or by
hand (``aws lambda invoke``) with ``{}`` or a few named fields. Anything else is rejected
with one message naming the problem.

The envelope is checked field by field here (the fields and types of powertools'
``EventBridgeModel``) rather than with the pydantic parser: it is the one event these
functions receive every minute, and importing pydantic and building the parser models
would be a third of their cold start.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import datetime
from typing import Any

__all__ = ["SCHEDULED_EVENT", "ColdStart", "ScheduledEventError", "envelope_problems", "manual_run_fields"]

SCHEDULED_EVENT = "Scheduled Event"
#: The EventBridge envelope's string fields (``detail-type`` is checked with them).
_STRING_FIELDS = ("version", "id", "source", "account", "region", "detail-type")
#: EventBridge's ``time``: an RFC 3339 date-time (``2025-01-06T09:00:00Z``).
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})")


class ScheduledEventError(ValueError):
    """The invocation payload is neither a scheduled event nor a manual-run request."""


def manual_run_fields(
    event: Any,
    function: str,
    accepted: Collection[str] = (),
    error: type[ScheduledEventError] = ScheduledEventError,
) -> dict[str, Any]:
    """The fields of a manual run: ``{}`` for the scheduled event or an empty payload,
    else ``event`` when it names only ``accepted`` fields (their values are the caller's to
    check). Raises ``error`` with a message starting ``"<function>: "``."""
    if event is None or event == {}:
        return {}
    if not isinstance(event, dict):
        raise error(f"{function}: expected a JSON object, got {type(event).__name__}")
    if "detail-type" in event or "source" in event:
        problems = envelope_problems(event)
        if problems:
            raise error(f"{function}: malformed EventBridge event: {'; '.join(problems)}")
        if event["detail-type"] != SCHEDULED_EVENT:
            raise error(f"{function}: expected detail-type {SCHEDULED_EVENT!r}, got {event['detail-type']!r}")
        return {}
    unknown = sorted(str(key) for key in set(event) - set(accepted))
    if unknown:
        takes = f"only {', '.join(repr(name) for name in sorted(accepted))}" if accepted else "{}"
        raise error(f"{function}: unknown field(s) {', '.join(unknown)} (a manual run takes {takes})")
    return dict(event)


def envelope_problems(event: dict[str, Any]) -> list[str]:
    """What makes ``event`` not an EventBridge event, one ``"<field>: <problem>"`` each (empty: none)."""
    problems = [f"{name}: {'field required' if name not in event else 'must be a string'}" for name in _STRING_FIELDS if not isinstance(event.get(name), str)]
    moment = event.get("time")
    if not isinstance(moment, str):
        problems.append(f"time: {'field required' if 'time' not in event else 'must be a string'}")
    else:
        try:
            if not _RFC3339.fullmatch(moment):
                raise ValueError(moment)
            datetime.fromisoformat(moment)  # 3.11+ reads the "Z" suffix
        except ValueError:
            problems.append(f"time: not an RFC 3339 date-time: {moment[:64]!r}")
    resources = event.get("resources")
    if not isinstance(resources, list) or not all(isinstance(resource, str) for resource in resources):
        problems.append(f"resources: {'field required' if 'resources' not in event else 'must be a list of strings'}")
    if not isinstance(event.get("detail"), dict):
        problems.append(f"detail: {'field required' if 'detail' not in event else 'must be an object'}")
    return sorted(problems)


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
