"""Durations and times from users' objects at their extremes: any int64 grace period, Go
durations past Go's maximum that a CRD's pattern admits, timestamps from year 1 to 9999.

Each is clamped or rejected (one clear error) where it enters the domain, so no domain
function that adds a duration to a time overflows, whatever the object said and whenever
(between 1970 and 2200) the clock reads.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.bounded import EARLIEST_TIME, LATEST_TIME, MAX_INT
from joiner.domain.disruption import budget_active, disruption_cost
from joiner.domain.durations import MAX_DURATION, MAX_SECONDS, DurationError, clamp_seconds, parse_duration
from joiner.domain.interruption import SPOT_INTERRUPTION, InterruptionEvent, decide_action
from joiner.domain.node_pods import parse_node_pods
from joiner.domain.snapshot import SnapshotError, parse_node_pool, parse_pod
from joiner.domain.termination import (
    drain_start_by,
    fitting_grace,
    plan_drain,
    record_deletion,
    record_eviction,
    step_retry_delay,
)
from joiner.services.drain_step import assume_applied

INT64 = st.integers(-MAX_INT, MAX_INT)  # what joiner.domain.bounded reads as 64-bit
#: Every instant Joiner's clock or an accepted input can hold.
ACCEPTED = st.datetimes(
    min_value=EARLIEST_TIME.replace(tzinfo=None), max_value=(LATEST_TIME - timedelta(microseconds=1)).replace(tzinfo=None), timezones=st.just(UTC)
)
#: Any time an object can spell, with any UTC offset: year 1 to year 9999.
ANY_TIME = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.builds(lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-23 * 60, 23 * 60)),
)
EDGE_TIMES = st.sampled_from(
    [
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:59:59-01:00",
        "2199-12-31T23:59:59Z",
        "1970-01-01T00:00:00Z",
        "2200-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
    ]
)
#: Go durations as objects write them: ordinary, Go's maximum, past it (the CRD's pattern admits any count of hours).
GO_DURATIONS = st.one_of(
    st.sampled_from(["0s", "30s", "720h", "Never", "2562047h", "2562047h47m16.854775807s", "2562048h", "99999999999999h", "9" * 60 + "h"]),
    st.integers(0, 10**30).map(lambda hours: f"{hours}h"),
)


def _stamp(moment: datetime) -> str:
    return moment.isoformat()


@given(INT64)
def test_clamped_seconds_add_to_any_accepted_time(seconds: int) -> None:
    clamped = clamp_seconds(seconds)
    assert 0 <= clamped <= MAX_SECONDS
    assert clamped == seconds if 0 <= seconds <= MAX_SECONDS else clamped in (0, MAX_SECONDS)
    assert LATEST_TIME + timedelta(seconds=clamped) >= LATEST_TIME - timedelta(seconds=clamped)
    assert EARLIEST_TIME - timedelta(seconds=clamped) - timedelta(minutes=1) < EARLIEST_TIME


@given(GO_DURATIONS)
def test_durations_past_gos_maximum_clamp_where_objects_are_read(text: str) -> None:
    clamped = parse_duration(text, clamp=True)
    try:
        strict = parse_duration(text)
    except DurationError as error:
        assert "too large" in str(error)
        assert clamped == MAX_DURATION
    else:
        assert clamped == strict
    assert clamped is None or clamped <= MAX_DURATION


def _raw_pod(grace: int, created: str, deleting: str | None, toleration: int, dnd: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "default", "uid": "u", "creationTimestamp": created, "annotations": {wk.DO_NOT_DISRUPT: dnd}}
    if deleting is not None:
        metadata["deletionTimestamp"] = deleting
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": "n1",
            "terminationGracePeriodSeconds": grace,
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": toleration}],
            "containers": [{"name": "c", "image": "i"}],
        },
        "status": {"phase": "Running"},
    }


@settings(max_examples=300, deadline=None)
@given(
    grace=st.one_of(st.integers(0, 2**63 - 1), st.sampled_from([0, 30, MAX_SECONDS, MAX_SECONDS + 1, 10**14, 2**63 - 1])),
    created=st.one_of(EDGE_TIMES, ANY_TIME.map(_stamp)),
    deleting=st.one_of(st.none(), EDGE_TIMES, ANY_TIME.map(_stamp)),
    toleration=INT64,
    dnd=st.one_of(st.sampled_from(["true", "false", "typo"]), GO_DURATIONS),
    now=ACCEPTED,
    deadline=st.one_of(st.none(), ACCEPTED, st.sampled_from([EARLIEST_TIME, LATEST_TIME - timedelta(microseconds=1)])),
    failures=st.integers(0, 10**6),
)
def test_no_drain_function_overflows_on_any_pod_an_api_server_accepts(
    grace: int,
    created: str,
    deleting: str | None,
    toleration: int,
    dnd: str,
    now: datetime,
    deadline: datetime | None,
    failures: int,
) -> None:
    raw = _raw_pod(grace, created, deleting, toleration, dnd)
    try:
        parsed = parse_pod(raw)
    except SnapshotError as error:  # only a time outside 1970..2200 is refused, with one clear message
        assert "out of range" in str(error) and "Timestamp" in str(error)
    else:
        assert parsed.termination_grace_seconds == min(grace, MAX_SECONDS)
        assert all(0 <= (t.toleration_seconds or 0) <= MAX_SECONDS for t in parsed.tolerations)
    # the termination handler's own reading never refuses a pod (it is drained whatever it says)
    pods, deletion_deadlines = parse_node_pods([raw])
    (pod,) = pods
    assert pod.termination_grace_seconds == min(grace, MAX_SECONDS)
    pod.protected_at(now)
    progress = {pod.key: record_eviction(None, "blocked", now)}
    step = plan_drain(pods, now=now, deadline=deadline, progress=progress, deletion_deadlines=deletion_deadlines)
    step_retry_delay(failures, now, deadline)
    if deadline is not None:
        start = drain_start_by(pods, deadline)
        assert start <= deadline
        left = fitting_grace(pod, now, deadline)
        assert 0 <= left <= max(0, int((deadline - now).total_seconds()))
        record = record_deletion(None, left, now)
        assert record.delete_by is not None and (now >= deadline or record.delete_by <= deadline)
        for deletion in step.delete:  # the deadline rule: every deletion's grace ends by the deadline
            assert now + timedelta(seconds=deletion.grace_seconds) <= max(now, deadline)
        done = {"evicted": [], "gone": [], "deleted": [d.key for d in step.delete], "blocked": [], "failed": []}
        assume_applied(pods, deletion_deadlines, done, step.delete, now)
    assume_applied(pods, deletion_deadlines, {"evicted": [pod.key], "gone": [], "deleted": [], "blocked": [], "failed": []}, (), now)


def _node_pool(expire: str, consolidate: str, grace: str, budget: str) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodePool",
        "metadata": {"name": "x"},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"name": "d"}, "expireAfter": expire, "terminationGracePeriod": grace}},
            "disruption": {"consolidateAfter": consolidate, "budgets": [{"nodes": "0", "schedule": "@daily", "duration": budget}]},
        },
    }


@settings(max_examples=150, deadline=None)
@given(
    expire=GO_DURATIONS,
    consolidate=GO_DURATIONS,
    grace=GO_DURATIONS.filter(lambda t: t != "Never"),
    budget=GO_DURATIONS.filter(lambda t: t != "Never" and parse_duration(t, clamp=True) != timedelta(0)),
    now=ACCEPTED,
    created=ACCEPTED,
    event_time=ACCEPTED,
)
def test_no_disruption_or_interruption_rule_overflows_on_any_node_pool_the_crd_admits(
    expire: str,
    consolidate: str,
    grace: str,
    budget: str,
    now: datetime,
    created: datetime,
    event_time: datetime,
) -> None:
    pool = parse_node_pool(_node_pool(expire, consolidate, grace, budget))
    durations = (pool.expire_after, pool.disruption.consolidate_after, pool.termination_grace_period, *(b.duration for b in pool.disruption.budgets))
    assert all(d is None or timedelta(0) <= d <= MAX_DURATION for d in durations)
    for b in pool.disruption.budgets:
        budget_active(b.schedule, b.duration, now)
    disruption_cost([], now - created, pool.expire_after)
    event = InterruptionEvent(SPOT_INTERRUPTION, "e", ("i-0123456789abcdef0",), event_time + timedelta(minutes=2), event_time, "spot")
    action = decide_action(event, None, pool)
    assert action.deadline is not None and action.deadline <= event_time + timedelta(minutes=2)


def test_an_int64_grace_period_is_clamped_not_refused() -> None:
    """Regression: 100000000000000 s is valid to the API server and overflowed every date."""
    pod = parse_pod(_raw_pod(100_000_000_000_000, "2025-01-01T00:00:00Z", None, MAX_INT, "true"))
    assert pod.termination_grace_seconds == MAX_SECONDS
    deadline = datetime(2025, 1, 6, 9, 2, tzinfo=UTC)
    assert drain_start_by([pod], deadline) < deadline - timedelta(days=365 * 290)
