"""Normalisation of every event kind to one InterruptionEvent (pure), and the action decided for it."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain import interruption as di
from joiner.domain.interruption import InterruptionEvent, decide_action, instance_id_from_entity
from joiner.domain.model import NodePool
from joiner.events import UnparseableEvent, normalize, normalize_body, parse_time
from joiner.ports import ClaimRecord
from tests.events.fixtures import FIXTURE_INSTANCE, FIXTURE_RESERVATION, KINDS, load_event
from tests.events.fuzz import event_bodies

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_fixture_normalises_to_its_kind(name: str) -> None:
    event = normalize(load_event(name))
    assert event.kind == KINDS[name]
    if event.kind == di.CAPACITY_BLOCK_EXPIRATION:  # names its reservation: its instances are looked up
        assert event.instance_ids == () and event.capacity_reservation_id == FIXTURE_RESERVATION
    else:
        assert event.instance_ids == (FIXTURE_INSTANCE,)
    assert event.start_time == T0
    assert event.event_id == load_event(name)["id"]


def test_spot_deadline_is_two_minutes_after_the_event_time() -> None:
    event = normalize(load_event("spot_interruption.json", time=T0 + timedelta(seconds=17)))
    assert event.deadline == T0 + timedelta(seconds=137)
    assert event.detail == "terminate"


def test_capacity_reservation_uses_the_stated_termination_time_else_two_minutes() -> None:
    raw = load_event("capacity_reservation_interruption.json")
    raw["detail"]["instance-termination-time"] = "2024-05-01T12:05:00Z"
    assert normalize(raw).deadline == T0 + timedelta(minutes=5)
    del raw["detail"]["instance-termination-time"]
    assert normalize(raw).deadline == T0 + timedelta(minutes=2)


@pytest.mark.parametrize("detail_type", ["Capacity Block Reservation Expiration Warning", "Capacity Block Expiration Warning"])
def test_a_capacity_block_warning_names_its_reservation_and_drains_before_ec2_terminates(detail_type: str) -> None:
    """EC2 warns 40 minutes before the block ends that its instances begin terminating 10
    minutes later: the drain's deadline is then, well before the block's end."""
    raw = load_event("capacity_block_expiration.json")
    raw["detail-type"] = detail_type
    event = normalize(raw)
    assert (event.kind, event.capacity_reservation_id, event.instance_ids) == (di.CAPACITY_BLOCK_EXPIRATION, FIXTURE_RESERVATION, ())
    assert event.deadline == T0 + timedelta(minutes=10)
    assert event.reservation_end == T0 + timedelta(minutes=40)
    assert event.to_dict()["capacityReservationId"] == FIXTURE_RESERVATION


def test_a_capacity_block_reservation_id_may_come_from_resources_and_must_be_one() -> None:
    raw = load_event("capacity_block_expiration.json")
    del raw["detail"]["capacity-reservation-id"]
    assert normalize(raw).capacity_reservation_id == FIXTURE_RESERVATION
    raw["resources"] = []
    with pytest.raises(UnparseableEvent, match="capacity-reservation-id"):
        normalize(raw)
    raw["detail"]["capacity-reservation-id"] = "i-0b662ef9931388ba0"
    with pytest.raises(UnparseableEvent, match="not a capacity reservation id"):
        normalize(raw)


@settings(max_examples=200, deadline=None)
@given(
    end=st.one_of(st.none(), st.integers(min_value=-366 * 86400, max_value=366 * 86400)),
    time=st.datetimes(min_value=datetime(1971, 1, 2), max_value=datetime(2198, 1, 1), timezones=st.just(UTC)),
)
def test_a_capacity_block_deadline_is_never_before_the_warning_nor_after_ec2_begins_terminating(end: int | None, time: datetime) -> None:
    raw = load_event("capacity_block_expiration.json")
    raw["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ")
    if end is None:
        del raw["detail"]["end-date"]
    else:
        raw["detail"]["end-date"] = (time.replace(microsecond=0) + timedelta(seconds=end)).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = normalize(raw)
    assert event.deadline is not None
    assert event.start_time <= event.deadline <= event.start_time + di.CAPACITY_BLOCK_NOTICE
    if event.reservation_end is not None:
        assert event.deadline <= max(event.start_time, event.reservation_end - di.CAPACITY_BLOCK_RECLAIM_LEAD)


def test_health_start_time_in_rfc1123_and_iso_forms() -> None:
    assert normalize(load_event("health_scheduled_change.json")).deadline == datetime(2024, 5, 1, 14, 0, tzinfo=UTC)
    assert normalize(load_event("health_scheduled_change_arn.json")).deadline == datetime(2024, 5, 3, 9, 0, tzinfo=UTC)


def test_health_start_time_already_passed_still_leaves_two_minutes() -> None:
    raw = load_event("health_scheduled_change.json")
    raw["detail"]["startTime"] = "Wed, 01 May 2024 11:00:00 GMT"  # maintenance already under way
    assert normalize(raw).deadline == T0 + timedelta(minutes=2)


def test_health_without_a_start_time_drains_by_event_time_plus_two_minutes() -> None:
    """Issue 13: without a deadline do-not-disrupt pods and PDBs would hold the drain forever."""
    raw = load_event("health_scheduled_change.json")
    del raw["detail"]["startTime"]
    assert normalize(raw).deadline == T0 + timedelta(minutes=2)


def test_health_accepts_arns_and_bare_ids_and_skips_other_entities() -> None:
    raw = load_event("health_scheduled_change.json")
    raw["detail"]["affectedEntities"] = [
        {"entityValue": "arn:aws:ec2:us-east-1:123456789012:instance/i-0aaaaaaaaaaaaaaa1"},
        {"entityValue": "i-0bbbbbbbbbbbbbbb2"},
        {"entityValue": "h-0123456789abcdef0"},  # a dedicated host: not ours to drain
        {"entityValue": "i-0aaaaaaaaaaaaaaa1"},  # the same instance twice
    ]
    assert normalize(raw).instance_ids == ("i-0aaaaaaaaaaaaaaa1", "i-0bbbbbbbbbbbbbbb2")


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("service", "RDS", "service"),
        ("eventTypeCategory", "issue", "category"),
        ("statusCode", "closed", "closed"),
    ],
)
def test_health_events_that_need_nothing_are_noop(field: str, value: str, why: str) -> None:
    raw = load_event("health_scheduled_change_arn.json")
    raw["detail"][field] = value
    event = normalize(raw)
    assert event.kind == di.NOOP
    assert why in event.detail
    assert decide_action(event, None, NodePool("default")).kind == di.ACTION_NONE


def test_instance_id_from_entity() -> None:
    assert instance_id_from_entity("i-0b662ef9931388ba0") == "i-0b662ef9931388ba0"
    assert instance_id_from_entity("i-12345678") == "i-12345678"
    assert instance_id_from_entity("arn:aws:ec2:us-east-1:123456789012:instance/i-0b662ef9931388ba0") == "i-0b662ef9931388ba0"
    assert instance_id_from_entity("arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0") == "i-0b662ef9931388ba0"
    assert instance_id_from_entity("arn:aws-us-gov:ec2:us-gov-west-1:123456789012:instance/i-0b662ef9931388ba0") == "i-0b662ef9931388ba0"
    for bad in ("", "i-", "vol-0b662ef9931388ba0", "arn:aws:ec2:us-east-1:1:volume/vol-1", "i-XYZ12345", "arn:aws:s3:::bucket/i-0b662ef9931388ba0"):
        assert instance_id_from_entity(bad) is None


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({"field1": "value1", "field2": "value2"}), "not an EventBridge event"),
        (json.dumps({"id": "x", "source": "aws.s3", "detail-type": "Object Created"}), "unknown event type"),
    ],
)
def test_unparseable_bodies_say_what_is_wrong(body: str, fragment: str) -> None:
    with pytest.raises(UnparseableEvent, match=fragment):
        normalize_body(body)


def test_known_type_with_a_missing_field_names_the_field() -> None:
    raw = load_event("spot_interruption.json")
    del raw["detail"]["instance-id"]
    with pytest.raises(UnparseableEvent, match=r"detail\.instance-id"):
        normalize(raw)
    raw = load_event("spot_interruption.json")
    raw["detail"]["instance-id"] = "vol-0123"
    with pytest.raises(UnparseableEvent, match="not an EC2 instance id"):
        normalize(raw)
    raw = load_event("health_scheduled_change.json")
    raw["detail"]["startTime"] = "next tuesday"
    with pytest.raises(UnparseableEvent, match="startTime"):
        normalize(raw)


def test_parse_time_is_utc() -> None:
    assert parse_time("2024-05-01T14:00:00+02:00", where="x") == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_time("Wed, 01 May 2024 14:00:00 GMT", where="x") == datetime(2024, 5, 1, 14, 0, tzinfo=UTC)


# ------------------------------------------------------------------ decide_action


def _claim(state: str = "initialized", capacity_type: str = "spot") -> ClaimRecord:
    return ClaimRecord(claim_id="c1", node_pool="default", state=state, created_at=T0, instance_id=FIXTURE_INSTANCE, capacity_type=capacity_type)


def test_unmanaged_when_no_claim_and_no_pool() -> None:
    event = normalize(load_event("spot_interruption.json"))
    action = decide_action(event, None, None)
    assert action.kind == di.ACTION_UNMANAGED and not action.acts


def test_spot_cordons_replaces_and_marks_unavailable_with_the_event_deadline() -> None:
    event = normalize(load_event("spot_interruption.json"))
    action = decide_action(event, _claim(), NodePool("default"))
    assert action.kind == di.ACTION_CORDON_REPLACE_DRAIN
    assert action.mark_unavailable and action.replace and action.wait_for_replacement and action.urgent
    assert action.deadline == T0 + timedelta(minutes=2)


@pytest.mark.parametrize("name", ["capacity_reservation_interruption.json", "capacity_block_expiration.json"])
def test_a_reservations_warning_marks_the_reservation_unavailable_and_replaces_before_its_deadline(name: str) -> None:
    """Karpenter's interruption controller marks the reservation unavailable, so the
    replacement never targets the capacity being reclaimed."""
    event = normalize(load_event(name))
    action = decide_action(event, _claim(capacity_type="reserved"), NodePool("default"))
    assert action.kind == di.ACTION_CORDON_REPLACE_DRAIN
    assert action.mark_unavailable and action.replace and action.wait_for_replacement and action.urgent
    assert action.deadline == event.deadline


def test_termination_grace_period_caps_the_deadline() -> None:
    event = normalize(load_event("health_scheduled_change_arn.json"))
    pool = NodePool("default", termination_grace_period=timedelta(hours=1))
    assert decide_action(event, _claim(), pool).deadline == T0 + timedelta(hours=1)
    assert decide_action(event, _claim(), NodePool("default")).deadline == datetime(2024, 5, 3, 9, 0, tzinfo=UTC)
    spot = normalize(load_event("spot_interruption.json"))
    assert decide_action(spot, _claim(), pool).deadline == T0 + timedelta(minutes=2)


def test_rebalance_follows_the_node_pool_policy() -> None:
    event = normalize(load_event("rebalance_recommendation.json"))
    replace = decide_action(event, _claim(), NodePool("default"))
    assert replace.kind == di.ACTION_REPLACE_THEN_DRAIN and replace.wait_for_replacement and replace.deadline is None
    ignore = decide_action(event, _claim(), NodePool("default", rebalance="ignore"))
    assert ignore.kind == di.ACTION_NONE and "ignore" in ignore.reason


@pytest.mark.parametrize("name", ["state_change_stopping.json", "state_change_stopped.json", "state_change_shutting_down.json", "state_change_terminated.json"])
def test_state_changes_delete_the_node_now(name: str) -> None:
    event = normalize(load_event(name))
    action = decide_action(event, _claim(), NodePool("default"))
    assert action.kind == di.ACTION_DELETE_NODE
    assert action.deadline == T0
    assert not action.replace


def test_running_state_and_closed_claims_need_nothing() -> None:
    assert decide_action(normalize(load_event("state_change_running.json")), _claim(), NodePool("default")).kind == di.ACTION_NONE
    spot = normalize(load_event("spot_interruption.json"))
    assert decide_action(spot, _claim(state="closed"), NodePool("default")).kind == di.ACTION_NONE


def test_managed_by_label_alone_still_acts() -> None:
    spot = normalize(load_event("spot_interruption.json"))
    assert decide_action(spot, None, NodePool("default")).kind == di.ACTION_CORDON_REPLACE_DRAIN


def test_event_requires_aware_times_and_known_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        InterruptionEvent("bogus", "id", (), None, T0, "x")
    with pytest.raises(ValueError, match="timezone"):
        InterruptionEvent(di.SPOT_INTERRUPTION, "id", (), None, datetime(2024, 1, 1), "x")


# ---------------------------------------------------------------- hostile bodies (issue 10, defect 6)


@settings(max_examples=300, deadline=None)
@given(body=event_bodies(), now=st.none() | st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)))
def test_any_body_normalises_or_is_unparseable(body: str, now: datetime | None) -> None:
    """Whatever the body, reading it gives an event or UnparseableEvent, nothing else, and
    every time of an accepted event is in the window deadline arithmetic is safe in."""
    try:
        event = normalize_body(body, now=now)
    except UnparseableEvent as error:
        assert str(error)
        return
    for moment in (event.start_time, event.deadline):
        assert moment is None or datetime(1970, 1, 1, tzinfo=UTC) <= moment < datetime(2201, 1, 1, tzinfo=UTC)
    if now is not None:
        assert now - timedelta(days=30) <= event.start_time <= now + timedelta(days=1)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda e: e.update(time="9999-12-31T23:59:59Z"), "time: time '9999-12-31T23:59:59"),
        (lambda e: e.update(time="1969-12-31T23:59:59Z"), "out of range"),
        (lambda e: e["detail"].update(startTime="9999-12-31T23:59:59-01:00"), "detail.startTime: time '9999-12-31T23:59:59-01:00' is out of range"),
        (lambda e: e["detail"].update(startTime="Fri, 31 Dec 9999 23:59:59 -0100"), "detail.startTime"),
        (lambda e: e["detail"].update(startTime="2026-05-02T12:00:00Z"), "more than 366 days from the event's time"),
    ],
)
def test_times_outside_the_window_are_unparseable(edit, fragment: str) -> None:  # type: ignore[no-untyped-def]
    event = load_event("health_scheduled_change.json")
    edit(event)
    with pytest.raises(UnparseableEvent, match=re.escape(fragment)):
        normalize(event)


def test_the_clock_window() -> None:
    event = load_event("spot_interruption.json", time=T0)
    assert normalize(event, now=T0 + timedelta(days=30)).start_time == T0
    assert normalize(event, now=T0 - timedelta(days=1)).start_time == T0
    with pytest.raises(UnparseableEvent, match="older than 30 day"):
        normalize(event, now=T0 + timedelta(days=30, seconds=1))
    with pytest.raises(UnparseableEvent, match="later than 1 day"):
        normalize(event, now=T0 - timedelta(days=1, seconds=1))


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("[" * 5000 + "]" * 5000, "nested more than 32 levels deep"),
        ('{"id": ' + "9" * 401 + "}", "401 characters"),
        ('{"id": 1e999}', "out of range"),
        ('{"id": NaN}', "NaN is not valid JSON"),
        (" " * (256 * 1024 + 1), "more than the 262,144 allowed"),
    ],
)
def test_bodies_over_the_bounds_are_unparseable(body: str, fragment: str) -> None:
    with pytest.raises(UnparseableEvent, match=re.escape(fragment)):
        normalize_body(body)
