"""NodeClaim mirror conditions: transition times as Kubernetes keeps them, reasons, Events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.nodeclaims import (
    MirrorCondition,
    disrupting_condition,
    disruption_reason,
    node_claim_object,
    status_differs,
    terminated_event,
    transition_events,
    with_conditions,
)
from joiner.ports import ClaimRecord

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
STATUSES = ("True", "False", "Unknown")
#: from year 1 to 9999, second precision (what the RFC 3339 timestamps carry)
MOMENTS = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59), timezones=st.just(UTC)).map(
    lambda moment: moment.replace(microsecond=0)
)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in conditions}


@given(first=st.sampled_from(STATUSES), second=st.sampled_from(STATUSES), earlier=MOMENTS, later=MOMENTS)
def test_a_condition_keeps_its_transition_time_while_its_status_holds_and_moves_when_it_changes(
    first: str,
    second: str,
    earlier: datetime,
    later: datetime,
) -> None:
    current = with_conditions([], [MirrorCondition("Drifted", first, "Reason", "", earlier)])
    assert current[0]["lastTransitionTime"] == stamp(earlier)
    updated = with_conditions(current, [MirrorCondition("Drifted", second, "Other", "a new message", later)])
    assert updated[0]["status"] == second and updated[0]["reason"] == "Other" and updated[0]["message"] == "a new message"
    assert updated[0]["lastTransitionTime"] == stamp(earlier if first == second else later)


@given(now=MOMENTS)
def test_an_undated_change_takes_now_and_an_undated_unchanged_condition_keeps_its_time(now: datetime) -> None:
    current = with_conditions([], [MirrorCondition("Consolidatable", "False", "NotConsolidatable", "", T0)])
    same = with_conditions(current, [MirrorCondition("Consolidatable", "False", "NotConsolidatable")], now)
    assert same[0]["lastTransitionTime"] == stamp(T0)
    changed = with_conditions(current, [MirrorCondition("Consolidatable", "True", "Consolidatable")], now)
    assert changed[0]["lastTransitionTime"] == stamp(now)


def claim(**fields: Any) -> ClaimRecord:
    base: dict[str, Any] = {
        "claim_id": "default-c1",
        "node_pool": "default",
        "state": "launched",
        "created_at": T0,
        "instance_id": "i-0123456789abcdef0",
        "instance_type": "m5.large",
        "zone": "us-east-1a",
        "capacity_type": "spot",
        "price": 0.05,
        "launched_at": T0 + timedelta(seconds=3),
    }
    base.update(fields)
    return ClaimRecord(**base)


def test_the_mirror_dates_each_condition_and_a_later_version_keeps_the_dates_of_what_did_not_change() -> None:
    first = node_claim_object(claim(), None, now=T0 + timedelta(seconds=5))
    conditions = by_type(first["status"]["conditions"])
    assert conditions["Launched"]["lastTransitionTime"] == stamp(T0 + timedelta(seconds=3))  # the record's moment
    assert conditions["Registered"]["lastTransitionTime"] == stamp(T0)  # waiting since the claim exists
    assert all(c.get("lastTransitionTime") for c in conditions.values())

    registered = claim(state="registered", node_name="n1", registered_at=T0 + timedelta(seconds=40))
    second = by_type(node_claim_object(registered, None, first["status"]["conditions"], now=T0 + timedelta(seconds=60))["status"]["conditions"])
    assert second["Registered"]["lastTransitionTime"] == stamp(T0 + timedelta(seconds=40))
    assert second["Launched"]["lastTransitionTime"] == stamp(T0 + timedelta(seconds=3))
    assert second["Initialized"]["lastTransitionTime"] == stamp(T0)  # still Unknown: unchanged

    # terminating: Disrupting turns True now; the progress already shown stays True with its dates
    terminating = claim(state="terminating", reason="spot-interruption")
    third = by_type(node_claim_object(terminating, None, list(second.values()), now=T0 + timedelta(minutes=5))["status"]["conditions"])
    assert (third["Disrupting"]["status"], third["Disrupting"]["reason"]) == ("True", "SpotInterruption")
    assert third["Disrupting"]["lastTransitionTime"] == stamp(T0 + timedelta(minutes=5))
    assert third["Registered"]["status"] == "True" and third["Registered"]["lastTransitionTime"] == stamp(T0 + timedelta(seconds=40))


def test_a_finding_of_another_pass_is_kept_and_only_time_differences_write_nothing() -> None:
    finding = MirrorCondition("Drifted", "True", "Drifted", "AMI changed", T0)
    first = node_claim_object(claim(), None, now=T0, updates=[finding])
    later = node_claim_object(claim(), None, first["status"]["conditions"], now=T0 + timedelta(hours=3))
    assert by_type(later["status"]["conditions"])["Drifted"]["message"] == "AMI changed"
    assert not status_differs(first, later)
    undated = {"status": dict(first["status"], conditions=[{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in first["status"]["conditions"]])}
    assert status_differs(undated, first)  # a mirror written before conditions had times gets them


def test_disruption_reasons_read_as_karpenters() -> None:
    assert [disruption_reason(f"disruption/{m}") for m in ("drift", "consolidation", "emptiness", "expiration")] == [
        "Drifted",
        "Underutilized",
        "Empty",
        "Expired",
    ]
    assert disruption_reason("spot-interruption") == "SpotInterruption"
    assert disruption_reason("capacity-block-expiration") == "CapacityBlockExpiration"
    assert disruption_reason("") == disruption_reason("--/--") == "Terminating"
    assert disruption_reason("9 lives") == "Lives"


@given(st.text(max_size=300))
def test_every_reason_is_a_valid_condition_reason(text: str) -> None:
    reason = disruption_reason(text)
    assert 0 < len(reason) <= 128 and reason[0].isascii() and reason[0].isalpha() and reason.isascii() and reason.isalnum()


def test_events_name_what_turned_true_in_order_and_nothing_else() -> None:
    launched = node_claim_object(claim(), None, now=T0)["status"]["conditions"]
    assert [e.reason for e in transition_events(None, launched)] == ["Launched"]
    assert transition_events(launched, launched) == []
    ready = node_claim_object(claim(state="initialized", node_name="n1"), None, launched, now=T0)["status"]["conditions"]
    assert [e.reason for e in transition_events(launched, ready)] == ["Registered", "Initialized"]
    disrupting = with_conditions(ready, [disrupting_condition("disruption/consolidation", "underutilized: pods fit elsewhere")], T0)
    (event,) = transition_events(ready, disrupting)
    assert (event.reason, event.message) == ("Disrupting", "Disrupting NodeClaim: Underutilized (underutilized: pods fit elsewhere)")
    assert terminated_event(claim(state="closed", reason="spot-interruption")).message == "instance i-0123456789abcdef0 terminated; spot-interruption"
    assert terminated_event(claim(state="closed", instance_id=None, reason="")).message == "no instance launched"


def test_a_deadline_is_in_the_disrupting_message() -> None:
    condition = disrupting_condition("spot-interruption", deadline=T0 + timedelta(minutes=2))
    assert condition.message == "spot interruption; drain deadline 2025-01-06T09:02:00Z"
