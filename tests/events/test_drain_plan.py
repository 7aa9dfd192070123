"""Drain planning (pure): order, skips, do-not-disrupt, PDB backoff, the deadline rule, done-ness."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.model import Pod, Toleration
from joiner.domain.termination import (
    GROUPS,
    PodProgress,
    TerminationState,
    backoff,
    cordon_patch,
    drain_group,
    fitting_grace,
    plan_drain,
    record_deletion,
    record_eviction,
    reschedulable_pods,
)

NOW = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


def pod(
    name: str,
    *,
    ds: bool = False,
    critical: bool = False,
    grace: int = 30,
    dnd: bool = False,
    mirror: bool = False,
    deleting: bool = False,
    phase: str = "Running",
    tolerations: tuple[Toleration, ...] = (),
) -> Pod:
    annotations = {}
    if dnd:
        annotations[wk.DO_NOT_DISRUPT] = "true"
    if mirror:
        annotations["kubernetes.io/config.mirror"] = "abc"
    return Pod(
        namespace="default",
        name=name,
        node_name="n1",
        phase=phase,
        deleting=deleting,
        owner_kind="DaemonSet" if ds else "ReplicaSet",
        owner_name="owner",
        priority_class_name="system-node-critical" if critical else "",
        termination_grace_seconds=grace,
        annotations=annotations,
        tolerations=tolerations,
    )


def keys(pods) -> list[str]:
    return [p.key for p in pods]


def test_groups_are_evicted_in_order_each_after_the_previous_is_clear() -> None:
    pods = [pod("app"), pod("logs", ds=True), pod("dns", critical=True), pod("cni", ds=True, critical=True)]
    step = plan_drain(pods, now=NOW, deadline=None)
    assert keys(step.evict) == ["default/app"] and step.group == "non-critical"
    # app is terminating: nothing new until it is gone
    step = plan_drain([pod("app", deleting=True), *pods[1:]], now=NOW, deadline=None)
    assert step.evict == () and ("default/app", "terminating") in step.waiting
    step = plan_drain(pods[1:], now=NOW, deadline=None)
    assert keys(step.evict) == ["default/logs"] and step.group == "non-critical-daemonset"
    # a DaemonSet pod that has been asked to leave clears its group at once
    progress = {"default/logs": record_eviction(None, "evicted", NOW)}
    step = plan_drain(pods[1:], now=NOW, deadline=None, progress=progress)
    assert keys(step.evict) == ["default/dns"] and step.group == "critical"
    step = plan_drain(pods[3:], now=NOW, deadline=None)
    assert keys(step.evict) == ["default/cni"] and step.group == "critical-daemonset"
    assert not step.empty
    step = plan_drain([pod("cni", ds=True, critical=True, deleting=True)], now=NOW, deadline=None)
    assert step.empty and step.finished and step.next_check_at is None


def test_mirror_terminal_and_tolerating_pods_are_skipped_and_do_not_hold_the_node() -> None:
    tolerates_all = (Toleration(operator="Exists"),)
    tolerates_key = (Toleration(key=wk.DISRUPTED_TAINT_KEY, operator="Exists", effect="NoSchedule"),)
    pods = [
        pod("static", mirror=True),
        pod("done", phase="Succeeded"),
        pod("failed", phase="Failed"),
        pod("proxy", ds=True, tolerations=tolerates_all),
        pod("agent", tolerations=tolerates_key),
    ]
    step = plan_drain(pods, now=NOW, deadline=NOW + timedelta(seconds=5))
    assert step.evict == () and step.delete == () and step.empty
    # a toleration for another taint does not count
    other = (Toleration(key="dedicated", operator="Exists"),)
    assert keys(plan_drain([pod("x", tolerations=other)], now=NOW, deadline=None).evict) == ["default/x"]


def test_do_not_disrupt_holds_without_a_deadline() -> None:
    step = plan_drain([pod("keep", dnd=True), pod("go")], now=NOW, deadline=None)
    assert keys(step.evict) == ["default/go"]
    assert ("default/keep", "do-not-disrupt") in step.waiting
    step = plan_drain([pod("keep", dnd=True)], now=NOW + timedelta(days=3), deadline=None)
    assert step.evict == () and step.delete == () and not step.finished
    assert step.next_check_at == NOW + timedelta(days=3, seconds=30)


def test_do_not_disrupt_is_deleted_so_its_grace_ends_by_the_deadline() -> None:
    deadline = NOW + timedelta(seconds=120)
    keep = pod("keep", dnd=True, grace=30)
    early = plan_drain([keep], now=NOW, deadline=deadline)
    assert early.delete == () and early.next_check_at == NOW + timedelta(seconds=30)  # idle poll: the annotation may go
    # the step wakes up when a pod's deletion window opens
    slow = pod("slow", dnd=True, grace=100)
    assert plan_drain([slow], now=NOW, deadline=deadline).next_check_at == deadline - timedelta(seconds=102)
    late = plan_drain([keep], now=deadline - timedelta(seconds=30), deadline=deadline)
    assert [(d.key, d.grace_seconds) for d in late.delete] == [("default/keep", 30)]
    later = plan_drain([keep], now=deadline - timedelta(seconds=12), deadline=deadline)
    assert [(d.key, d.grace_seconds) for d in later.delete] == [("default/keep", 12)]


def test_long_grace_pods_get_exactly_the_time_left_at_once() -> None:
    deadline = NOW + timedelta(seconds=120)
    slow = pod("slow", grace=600)
    step = plan_drain([slow, pod("fast")], now=NOW, deadline=deadline)
    assert [(d.key, d.grace_seconds) for d in step.delete] == [("default/slow", 120)]
    assert keys(step.evict) == ["default/fast"]  # the other pod is still evicted normally


def test_terminating_pod_whose_grace_ends_too_late_is_deleted_again_shorter() -> None:
    deadline = NOW + timedelta(seconds=60)
    terminating = pod("slow", grace=300, deleting=True)
    step = plan_drain([terminating], now=NOW, deadline=deadline, deletion_deadlines={"default/slow": NOW + timedelta(seconds=300)})
    assert [(d.key, d.grace_seconds) for d in step.delete] == [("default/slow", 60)]
    step = plan_drain([terminating], now=NOW, deadline=deadline, deletion_deadlines={"default/slow": NOW + timedelta(seconds=50)})
    assert step.delete == ()
    # our own earlier deletion already ends in time: not repeated
    progress = {"default/slow": record_deletion(None, 60, NOW)}
    step = plan_drain([terminating], now=NOW + timedelta(seconds=5), deadline=deadline, progress=progress)
    assert step.delete == ()


def test_blocked_eviction_backs_off_then_retries() -> None:
    progress = {"default/web": record_eviction(None, "blocked", NOW)}
    assert progress["default/web"].next_attempt_at == NOW + timedelta(seconds=5)
    step = plan_drain([pod("web")], now=NOW + timedelta(seconds=2), deadline=None, progress=progress)
    assert step.evict == () and step.next_check_at == NOW + timedelta(seconds=5)
    assert "PodDisruptionBudget" in dict(step.waiting)["default/web"]
    step = plan_drain([pod("web")], now=NOW + timedelta(seconds=5), deadline=None, progress=progress)
    assert keys(step.evict) == ["default/web"]
    again = record_eviction(progress["default/web"], "blocked", NOW + timedelta(seconds=5))
    assert again.blocked == 2 and again.next_attempt_at == NOW + timedelta(seconds=15)


def test_backoff_grows_and_caps() -> None:
    assert [backoff(n).total_seconds() for n in range(1, 8)] == [5, 10, 20, 40, 60, 60, 60]
    assert backoff(10_000).total_seconds() == 60


def test_deadline_passed_finishes_whatever_is_left() -> None:
    deadline = NOW
    step = plan_drain([pod("web", dnd=True)], now=NOW + timedelta(seconds=1), deadline=deadline)
    assert step.deadline_passed and step.finished and not step.empty
    assert [(d.key, d.grace_seconds) for d in step.delete] == [("default/web", 0)]


def test_reschedulable_pods_are_pending_copies() -> None:
    pods = [pod("b"), pod("a"), pod("ds", ds=True), pod("m", mirror=True), pod("gone", deleting=True), pod("done", phase="Succeeded")]
    result = reschedulable_pods(pods)
    assert keys(result) == ["default/a", "default/b"]
    assert all(p.node_name is None and p.is_pending for p in result)


def test_cordon_patch_keeps_existing_taints_and_is_idempotent() -> None:
    existing = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    patch = cordon_patch(existing)
    assert patch["spec"]["unschedulable"] is True
    assert patch["spec"]["taints"] == existing + [{"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}]
    assert patch["metadata"]["labels"] == {"node.kubernetes.io/exclude-from-external-load-balancers": "true"}
    assert cordon_patch(patch["spec"]["taints"])["spec"]["taints"] == patch["spec"]["taints"]


def test_termination_state_round_trips_and_tightens() -> None:
    state = TerminationState(
        node="n1",
        reason="spot-interruption",
        started_at=NOW,
        deadline=NOW + timedelta(minutes=2),
        instance_id="i-1",
        claim_id="c1",
        node_pool="default",
        generation=3,
        phase="replacing",
        replacement_claims=("c2",),
        replacement_deadline=NOW + timedelta(minutes=10),
        progress={"default/a": PodProgress(blocked=2, next_attempt_at=NOW), "default/b": record_deletion(None, 3, NOW)},
        events=("e1",),
    )
    assert TerminationState.from_dict(state.to_dict()) == state
    assert state.tightened(NOW + timedelta(minutes=5)) is state
    assert state.tightened(None) is state
    assert state.tightened(NOW).deadline == NOW
    assert TerminationState(node="n", reason="r", started_at=NOW).tightened(NOW).deadline == NOW


# ------------------------------------------------------------------ invariants

pods_strategy = st.lists(
    st.builds(
        lambda i, ds, critical, grace, dnd, mirror, deleting, tolerates: pod(
            f"p{i}",
            ds=ds,
            critical=critical,
            grace=grace,
            dnd=dnd,
            mirror=mirror,
            deleting=deleting,
            tolerations=(Toleration(operator="Exists"),) if tolerates else (),
        ),
        st.integers(0, 10_000),
        st.booleans(),
        st.booleans(),
        st.integers(0, 900),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans(),
    ),
    max_size=12,
    unique_by=lambda p: p.name,
)


@settings(max_examples=200, deadline=None)
@given(pods=pods_strategy, before=st.integers(-60, 1000), has_deadline=st.booleans())
def test_drain_invariants(pods: list[Pod], before: int, has_deadline: bool) -> None:
    deadline = NOW + timedelta(seconds=before) if has_deadline else None
    step = plan_drain(pods, now=NOW, deadline=deadline)
    evicted = set(keys(step.evict))
    deleted = {d.key for d in step.delete}
    by_key = {p.key: p for p in pods}
    assert not evicted & deleted
    for key in evicted:
        p = by_key[key]
        # never evict what must stay or is already going
        assert not (p.is_mirror or p.do_not_disrupt or p.deleting or p.tolerations)
        # evictions come from one group: the lowest with pods still in the way
        assert GROUPS[drain_group(p)] == step.group
    for d in step.delete:
        assert deadline is not None
        # the deadline rule: every deletion's grace ends by the deadline
        assert NOW + timedelta(seconds=d.grace_seconds) <= max(deadline, NOW)
        assert d.grace_seconds == fitting_grace(by_key[d.key], NOW, deadline)
        assert not by_key[d.key].is_mirror and not by_key[d.key].tolerations
    if step.empty:
        assert all(p.is_mirror or p.tolerations or (p.is_daemonset_pod and (p.deleting or p.key in deleted)) for p in pods)
    if not step.finished:
        assert step.next_check_at is not None and step.next_check_at > NOW
        if deadline is not None:
            assert step.next_check_at <= deadline


@settings(max_examples=150, deadline=None)
@given(
    graces=st.lists(st.integers(0, 300), min_size=1, max_size=6),
    notice=st.integers(0, 600),
    outcomes=st.lists(st.sampled_from(["evicted", "blocked", "failed"]), max_size=300),
    lateness=st.lists(st.floats(0, 2), max_size=300),
)
def test_whatever_the_evictions_answer_every_pod_is_gone_or_deleted_in_time(
    graces: list[int],
    notice: int,
    outcomes: list[str],
    lateness: list[float],
) -> None:
    """A drain followed step by step, each eviction answered evicted, blocked (429) or failed
    (500, 403, 5xx) at random and each step up to the 2 s slack late: by the deadline every
    pod has left, or its deletion was issued with a grace that ends by the deadline."""
    pods = {p.key: p for p in (pod(f"p{i}", grace=grace) for i, grace in enumerate(graces))}
    deadline = NOW + timedelta(seconds=notice)
    answers, delays = iter(outcomes), iter(lateness)
    progress: dict[str, PodProgress] = {}
    leaves: dict[str, datetime] = {}  # when each terminating pod's grace ends
    now = NOW
    for _ in range(1000):
        present = [replace(p, deleting=p.key in leaves) for key, p in pods.items() if key not in leaves or leaves[key] > now]
        step = plan_drain(present, now=now, deadline=deadline, progress=progress, deletion_deadlines=leaves)
        for p in step.evict:
            answer = next(answers, "failed")
            progress[p.key] = record_eviction(progress.get(p.key), answer, now, error="HTTP 500" if answer == "failed" else None)
            if answer == "evicted":
                leaves[p.key] = now + timedelta(seconds=p.termination_grace_seconds)
        for d in step.delete:
            progress[d.key] = record_deletion(progress.get(d.key), d.grace_seconds, now)
            ends = now + timedelta(seconds=d.grace_seconds)
            leaves[d.key] = min(ends, leaves.get(d.key, ends))
        if step.finished:
            break
        assert step.next_check_at is not None
        now = step.next_check_at + timedelta(seconds=next(delays, 0.0))
    else:
        raise AssertionError("the drain never finished")
    assert set(leaves) == set(pods), f"never removed: {sorted(set(pods) - set(leaves))}"
    assert all(ends <= max(deadline, NOW) for ends in leaves.values()), leaves


def test_a_duration_valued_do_not_disrupt_holds_the_drain_only_that_long() -> None:
    young = replace(pod("young"), annotations={wk.KARPENTER_DO_NOT_DISRUPT: "30m"}, created=NOW - timedelta(minutes=10))
    old = replace(pod("old"), annotations={wk.KARPENTER_DO_NOT_DISRUPT: "30m"}, created=NOW - timedelta(minutes=31))
    step = plan_drain([young, old], now=NOW, deadline=None)
    assert keys(step.evict) == ["default/old"]
    assert ("default/young", "do-not-disrupt") in step.waiting
    later = plan_drain([young], now=NOW + timedelta(minutes=21), deadline=None)
    assert keys(later.evict) == ["default/young"]
