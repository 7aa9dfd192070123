"""Turn a raw EventBridge event (the SQS message body) into one :class:`InterruptionEvent`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import ValidationError, parse

from joiner.domain import interruption as di
from joiner.domain.interruption import InterruptionEvent
from joiner.events import models as m

__all__ = ["UnparseableEvent", "normalize", "normalize_body", "parse_time"]


class UnparseableEvent(ValueError):
    """Not JSON, not an EventBridge event, an unknown (source, detail-type), or a known
    type with missing/invalid fields. The message says which."""


def parse_time(value: str, *, where: str) -> datetime:
    """ISO 8601 (``2024-05-01T12:00:00Z``) or RFC 1123 (``Sat, 05 Jun 2016 15:10:09 GMT``,
    as AWS Health writes ``startTime``), as an aware UTC datetime."""
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            raise UnparseableEvent(f"{where}: cannot parse time {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _utc(moment: datetime) -> datetime:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def _instance(value: str, where: str) -> str:
    instance_id = di.instance_id_from_entity(value)
    if instance_id is None:
        raise UnparseableEvent(f"{where}: {value!r} is not an EC2 instance id")
    return instance_id


def _spot(event: m.SpotInterruptionEvent) -> InterruptionEvent:
    time = _utc(event.time)
    return InterruptionEvent(
        kind=di.SPOT_INTERRUPTION,
        event_id=event.id,
        instance_ids=(_instance(event.detail.instance_id, "detail.instance-id"),),
        deadline=time + di.SPOT_NOTICE,
        start_time=time,
        raw_detail_type=event.detail_type,
        detail=event.detail.instance_action,
    )


def _rebalance(event: m.RebalanceRecommendationEvent) -> InterruptionEvent:
    return InterruptionEvent(
        kind=di.REBALANCE_RECOMMENDATION,
        event_id=event.id,
        instance_ids=(_instance(event.detail.instance_id, "detail.instance-id"),),
        deadline=None,
        start_time=_utc(event.time),
        raw_detail_type=event.detail_type,
    )


def _state_change(event: m.StateChangeEvent) -> InterruptionEvent:
    time = _utc(event.time)
    state = event.detail.state.strip().lower()
    draining = state in di.DRAINING_STATES
    return InterruptionEvent(
        kind=di.STATE_CHANGE if draining else di.NOOP,
        event_id=event.id,
        instance_ids=(_instance(event.detail.instance_id, "detail.instance-id"),),
        deadline=time if draining else None,
        start_time=time,
        raw_detail_type=event.detail_type,
        state=state,
        detail="" if draining else f"instance state {state!r} needs no action",
    )


def _capacity_reservation(event: m.CapacityReservationInterruptionEvent) -> InterruptionEvent:
    time = _utc(event.time)
    stated = event.detail.instance_termination_time
    deadline = parse_time(stated, where="detail.instance-termination-time") if stated else time + di.CAPACITY_RESERVATION_NOTICE
    return InterruptionEvent(
        kind=di.CAPACITY_RESERVATION_INTERRUPTION,
        event_id=event.id,
        instance_ids=(_instance(event.detail.instance_id, "detail.instance-id"),),
        deadline=deadline,
        start_time=time,
        raw_detail_type=event.detail_type,
        detail=event.detail.instance_action,
    )


def _health(event: m.HealthEvent) -> InterruptionEvent:
    time = _utc(event.time)
    detail = event.detail

    def noop(why: str) -> InterruptionEvent:
        return InterruptionEvent(di.NOOP, event.id, (), None, time, event.detail_type, detail=why)

    if detail.service.upper() != "EC2":
        return noop(f"AWS Health event for service {detail.service!r}, not EC2")
    if detail.event_type_category != "scheduledChange":
        return noop(f"AWS Health event category {detail.event_type_category!r}, not scheduledChange")
    if (detail.status_code or "").lower() == "closed":
        return noop(f"AWS Health event {detail.event_type_code or event.id} is closed")
    values = [e.entity_value for e in detail.affected_entities] or list(event.resources)
    instance_ids = sorted({i for i in (di.instance_id_from_entity(v) for v in values) if i is not None})
    if not instance_ids:
        return noop("no EC2 instance among the affected entities")
    deadline = parse_time(detail.start_time, where="detail.startTime") if detail.start_time else None
    if deadline is not None:
        deadline = max(deadline, time + di.SCHEDULED_CHANGE_MIN_NOTICE)
    return InterruptionEvent(
        kind=di.SCHEDULED_CHANGE,
        event_id=event.id,
        instance_ids=tuple(instance_ids),
        deadline=deadline,
        start_time=time,
        raw_detail_type=event.detail_type,
        detail=detail.event_type_code,
    )


_PARSERS: dict[tuple[str, str], tuple[type[Any], Callable[[Any], InterruptionEvent]]] = {
    m.SPOT_INTERRUPTION_TYPE: (m.SpotInterruptionEvent, _spot),
    m.REBALANCE_TYPE: (m.RebalanceRecommendationEvent, _rebalance),
    m.STATE_CHANGE_TYPE: (m.StateChangeEvent, _state_change),
    m.CAPACITY_RESERVATION_TYPE: (m.CapacityReservationInterruptionEvent, _capacity_reservation),
    m.HEALTH_TYPE: (m.HealthEvent, _health),
}


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        location = ".".join(str(p) for p in item.get("loc", ())) or "event"
        parts.append(f"{location}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


def normalize(event: Mapping[str, Any]) -> InterruptionEvent:
    """The :class:`InterruptionEvent` for one EventBridge event dict; raises
    :class:`UnparseableEvent` naming the field that is wrong."""
    if not isinstance(event, Mapping):
        raise UnparseableEvent("event: expected a JSON object")
    try:
        header = parse(event=dict(event), model=m.EventHeader)
    except ValidationError as error:
        raise UnparseableEvent(f"not an EventBridge event ({_describe(error)})") from None
    entry = _PARSERS.get((header.source, header.detail_type))
    if entry is None:
        raise UnparseableEvent(f"unknown event type: source {header.source!r}, detail-type {header.detail_type!r}")
    model, convert = entry
    try:
        parsed = parse(event=dict(event), model=model)
    except ValidationError as error:
        raise UnparseableEvent(f"{header.detail_type} {header.id}: {_describe(error)}") from None
    try:
        return convert(parsed)
    except UnparseableEvent as error:
        raise UnparseableEvent(f"{header.detail_type} {header.id}: {error}") from None


def normalize_body(body: str | bytes) -> InterruptionEvent:
    """Parse an SQS message body (the raw EventBridge event JSON) and normalise it."""
    try:
        data = json.loads(body)
    except (TypeError, ValueError) as error:
        raise UnparseableEvent(f"message body is not JSON ({error})") from None
    return normalize(data)


