"""Turn a raw EventBridge event (the SQS message body) into one :class:`InterruptionEvent`.

Every way an event can be wrong raises :class:`UnparseableEvent` and nothing else: the body
is read with :func:`joiner.domain.bounded.load_json` (at most 256 KiB, 32 levels deep,
64-bit integers), and times are bounded so no deadline arithmetic can overflow:

* every time lies between 1970 and 2200 (:func:`joiner.domain.bounded.time_in_range`);
* a time in ``detail`` (a Health ``startTime``, an ``instance-termination-time``, a Capacity
  Block's ``end-date``) lies within
  :data:`MAX_DETAIL_TIME_OFFSET` of the event's ``time``;
* with ``now`` (the interruption handler passes its clock), the event's ``time`` is at most
  :data:`MAX_EVENT_AGE` old (SQS keeps a message 14 days, a redrive from the dead-letter
  queue as long again) and at most :data:`MAX_EVENT_LEAD` ahead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import ValidationError, parse

from joiner.domain import interruption as di
from joiner.domain.bounded import (
    EARLIEST_TIME,
    EVENT_LIMITS,
    LATEST_TIME,
    InputError,
    load_json,
    time_in_range,
)
from joiner.domain.interruption import InterruptionEvent
from joiner.events import models as m

__all__ = ["MAX_DETAIL_TIME_OFFSET", "MAX_EVENT_AGE", "MAX_EVENT_LEAD", "UnparseableEvent", "normalize", "normalize_body", "parse_body", "parse_time"]

#: Oldest event ``time`` accepted, relative to ``now``.
MAX_EVENT_AGE = timedelta(days=30)
#: Furthest event ``time`` accepted ahead of ``now`` (clock skew, not notice).
MAX_EVENT_LEAD = timedelta(days=1)
#: Furthest a time in ``detail`` may lie from the event's ``time``, either way.
MAX_DETAIL_TIME_OFFSET = timedelta(days=366)


class UnparseableEvent(ValueError):
    """Not JSON, not an EventBridge event, an unknown (source, detail-type), or a known
    type with missing/invalid fields. The message says which."""


def parse_time(value: str, *, where: str) -> datetime:
    """ISO 8601 (``2024-05-01T12:00:00Z``) or RFC 1123 (``Sat, 05 Jun 2016 15:10:09 GMT``,
    as AWS Health writes ``startTime``), as an aware UTC datetime."""
    if not isinstance(value, str) or len(value) > 64:
        raise UnparseableEvent(f"{where}: expected a time such as 2024-05-01T12:00:00Z")
    text = value.strip()
    try:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        raise UnparseableEvent(f"{where}: cannot parse time {value!r}") from None
    return _utc(moment, where, value)


def _utc(moment: datetime, where: str = "time", raw: object = None) -> datetime:
    """``moment`` in UTC, if inside the accepted window (checked before converting: turning
    ``9999-12-31T23:59:59-01:00`` into UTC overflows)."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if not time_in_range(moment):
        shown = raw if isinstance(raw, str) else moment.isoformat()
        raise UnparseableEvent(f"{where}: time {shown!r} is out of range (expected a time between {EARLIEST_TIME.year} and {LATEST_TIME.year})")
    return moment.astimezone(UTC)


def _detail_time(value: str, where: str, event_time: datetime) -> datetime:
    moment = parse_time(value, where=where)
    if abs(moment - event_time) > MAX_DETAIL_TIME_OFFSET:
        raise UnparseableEvent(f"{where}: time {value!r} is more than {MAX_DETAIL_TIME_OFFSET.days} days from the event's time")
    return moment


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
    deadline = _detail_time(stated, "detail.instance-termination-time", time) if stated else time + di.CAPACITY_RESERVATION_NOTICE
    return InterruptionEvent(
        kind=di.CAPACITY_RESERVATION_INTERRUPTION,
        event_id=event.id,
        instance_ids=(_instance(event.detail.instance_id, "detail.instance-id"),),
        deadline=deadline,
        start_time=time,
        raw_detail_type=event.detail_type,
        detail=event.detail.instance_action,
    )


_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
_RESERVATION_ARN = re.compile(r"^arn:aws[a-z-]*:ec2:[^:]*:[^:]*:capacity-reservation/(cr-[0-9a-f]{8,17})$")


def _reservation_id(event: m.CapacityBlockExpirationEvent) -> str:
    stated = (event.detail.capacity_reservation_id or "").strip()
    if stated:
        if not _RESERVATION_ID.match(stated):
            raise UnparseableEvent(f"detail.capacity-reservation-id: {stated!r} is not a capacity reservation id")
        return stated
    found = sorted({match.group(1) for value in event.resources if (match := _RESERVATION_ARN.match(value.strip()))})
    if len(found) != 1:
        raise UnparseableEvent("detail.capacity-reservation-id: missing (and resources name no single capacity reservation)")
    return found[0]


def _capacity_block(event: m.CapacityBlockExpirationEvent) -> InterruptionEvent:
    """EC2 terminates the block's instances from ten minutes after the warning (40 minutes
    before the block's end, so from 30 minutes before it): the deadline is the earlier of
    ``time`` + 10 min and ``end-date`` - 30 min, never before ``time``."""
    time = _utc(event.time)
    reservation_id = _reservation_id(event)
    end = _detail_time(event.detail.end_date, "detail.end-date", time) if event.detail.end_date else None
    deadline = time + di.CAPACITY_BLOCK_NOTICE
    if end is not None:
        deadline = max(time, min(deadline, end - di.CAPACITY_BLOCK_RECLAIM_LEAD))
    return InterruptionEvent(
        kind=di.CAPACITY_BLOCK_EXPIRATION,
        event_id=event.id,
        instance_ids=(),
        deadline=deadline,
        start_time=time,
        raw_detail_type=event.detail_type,
        detail=reservation_id,
        capacity_reservation_id=reservation_id,
        reservation_end=end,
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
    # Without a startTime the change may start at once: drain by the shortest notice, so
    # do-not-disrupt pods and PodDisruptionBudgets cannot hold the drain forever.
    deadline = _detail_time(detail.start_time, "detail.startTime", time) if detail.start_time else time + di.SCHEDULED_CHANGE_MIN_NOTICE
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
    **dict.fromkeys(m.CAPACITY_BLOCK_TYPES, (m.CapacityBlockExpirationEvent, _capacity_block)),
}


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        location = ".".join(str(p) for p in item.get("loc", ())) or "event"
        parts.append(f"{location}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


def normalize(event: Mapping[str, Any], *, now: datetime | None = None) -> InterruptionEvent:
    """The :class:`InterruptionEvent` for one EventBridge event dict; raises
    :class:`UnparseableEvent` naming the field that is wrong. With ``now``, an event whose
    ``time`` is stale or ahead of ``now`` (see the module docstring) is unparseable too."""
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
        normalized = convert(parsed)
    except UnparseableEvent as error:
        raise UnparseableEvent(f"{header.detail_type} {header.id}: {error}") from None
    if now is not None:
        age = now - normalized.start_time
        if age > MAX_EVENT_AGE or -age > MAX_EVENT_LEAD:
            when = "older" if age > MAX_EVENT_AGE else "later"
            limit = MAX_EVENT_AGE if age > MAX_EVENT_AGE else MAX_EVENT_LEAD
            raise UnparseableEvent(
                f"{header.detail_type} {header.id}: time {normalized.start_time.isoformat()} is {when} than {limit.days} day(s) from now ({now.isoformat()})"
            )
    return normalized


def parse_body(body: object) -> Any:
    """The JSON of an SQS message body, within :data:`joiner.domain.bounded.EVENT_LIMITS`;
    raises :class:`UnparseableEvent`."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            raise UnparseableEvent("message body is not UTF-8") from None
    if not isinstance(body, str):
        raise UnparseableEvent(f"message body: expected text, got {type(body).__name__}")
    try:
        return load_json(body, EVENT_LIMITS)
    except InputError as error:
        raise UnparseableEvent(f"message body: {error}") from None


def normalize_body(body: str | bytes, *, now: datetime | None = None) -> InterruptionEvent:
    """Parse an SQS message body (the raw EventBridge event JSON) and normalise it."""
    return normalize(parse_body(body), now=now)
