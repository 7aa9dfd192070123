"""services/termination.py with in-memory fakes: durable multi-step drains, PDB backoff,
deadlines, stale and duplicate continuations, crash recovery, the lease."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from joiner.domain import labels as wk
from joiner.domain.resources import Resources
from joiner.ports import ClaimRecord, KubernetesError
from joiner.services.context import build_runtime
from joiner.services.termination import (
    LEASE_TTL_SECONDS,
    SAFETY_DELAY_SECONDS,
    TERMINATION_KIND,
    TerminationBusy,
    TerminationRequest,
    begin_termination,
    continue_termination,
    handle_continuation,
    resume_stalled_terminations,
)
from joiner.settings import Settings
from tests.support.fakes import EPOCH, DrainingKubernetes, FakeClock, FakeEc2, FakeQueue, FakeState, RecordingMetrics, node_json, pod_json

SETTINGS = Settings(cluster_name="test-cluster", region="us-east-1", state_table="state", idempotency_table="idem")
INSTANCE = "i-00000000000000001"


class ChainQueue(FakeQueue):
    """The work queue, with each step's safety continuation (same generation, sent before the
    step acts, stale once the step ends) kept apart in ``safety``: ``messages`` is the step
    chain itself. Tests of crashes mid-step deliver ``safety`` explicitly."""

    def __init__(self) -> None:
        super().__init__()
        self.safety: list[tuple[dict[str, Any], int]] = []

    def send(self, body: dict[str, Any], delay_seconds: int = 0, dedup_id: str | None = None) -> None:
        if delay_seconds == SAFETY_DELAY_SECONDS and "generation" in body:
            self.safety.append((dict(body), delay_seconds))
            return
        super().send(body, delay_seconds, dedup_id)


class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.kube = DrainingKubernetes(self.clock)
        self.ec2 = FakeEc2(cluster_name=SETTINGS.cluster_name, clock=self.clock)
        self.ec2.add_instance(INSTANCE)
        self.state = FakeState()
        self.queue = ChainQueue()
        self.metrics = RecordingMetrics()
        self.runtime = build_runtime(
            SETTINGS,
            kube_port=self.kube,
            ec2_port=self.ec2,
            state_port=self.state,
            queue_port=self.queue,
            clock=self.clock,
            metric=self.metrics,
            sleep=self.clock.sleep,
        )
        self.kube.add("nodes", node_json("n1", instance_id=INSTANCE, labels={wk.NODEPOOL: "default", wk.NODECLAIM: "c1"}))
        self.state.put_claim(ClaimRecord("c1", "default", "initialized", EPOCH, instance_id=INSTANCE, node_name="n1", capacity_type="spot"))
        self.state.reserve_capacity("default", "c1", Resources.of(cpu=2000), None, Resources())

    def pod(self, name: str, *, ds: bool = False, critical: bool = False, grace: int = 30, annotations: dict[str, str] | None = None) -> None:
        extra: dict[str, Any] = {"terminationGracePeriodSeconds": grace}
        if critical:
            extra["priorityClassName"] = "system-cluster-critical"
        obj = pod_json(name, node_name="n1", cpu="100m", extra_spec=extra)
        if ds:
            obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name, "uid": "u", "controller": True}]
        if annotations:
            obj["metadata"]["annotations"] = annotations
        self.kube.add("pods", obj)

    def next_message(self) -> tuple[dict[str, Any], int]:
        body, delay, _ = self.queue.messages.pop(0)
        return body, delay

    def run_until_done(self, max_steps: int = 50) -> list[str]:
        """Deliver continuations one by one, advancing the clock by each delay; returns statuses."""
        statuses = []
        for _ in range(max_steps):
            if not self.queue.messages:
                break
            body, delay = self.next_message()
            self.clock.advance(delay)
            self.kube.finish_terminating()
            statuses.append(handle_continuation(self.runtime, body, self.clock.now()).status)
        return statuses


@pytest.fixture
def world() -> World:
    return World()


def test_begin_cordons_and_evicts_the_first_group_then_schedules_a_continuation(world: World) -> None:
    world.pod("app")
    world.pod("logs", ds=True)
    result = begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", EPOCH + timedelta(minutes=2)), EPOCH)
    node = world.kube.get("nodes", None, "n1")
    assert node["spec"]["unschedulable"] is True
    assert {"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"] == "true"
    assert result.status == "started" and result.evicted == ("default/app",)
    assert world.kube.evictions == ["default/app"]
    assert world.state.get_claim("c1").state == "terminating"
    body, delay = world.next_message()
    assert body == {"kind": "termination", "node": "n1", "generation": 1} and delay == 5
    assert world.state.get_item(TERMINATION_KIND, "n1")["generation"] == 1
    assert world.kube.events_for("n1", "Terminating")


def test_drain_runs_to_completion_in_group_order_and_cleans_up(world: World) -> None:
    world.pod("app")
    world.pod("logs", ds=True)
    world.pod("dns", critical=True)
    world.pod("cni", ds=True, critical=True)
    begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", None), EPOCH)
    statuses = world.run_until_done()
    assert statuses[-1] == "terminated"
    assert world.kube.evictions == ["default/app", "default/logs", "default/dns", "default/cni"]
    assert world.kube.get("nodes", None, "n1") is None
    assert world.ec2.terminated == [INSTANCE]
    claim = world.state.get_claim("c1")
    assert claim.state == "closed" and claim.closed_at is not None
    assert world.state.reservations("default") == {}
    assert world.state.get_item(TERMINATION_KIND, "n1") is None
    assert world.metrics.total("NodesTerminated", reason="spot-interruption") == 1


def test_pdb_blocked_eviction_is_retried_with_backoff(world: World) -> None:
    world.pod("web")
    world.kube.block("default/web", times=2)
    result = begin_termination(world.runtime, TerminationRequest("n1", "scheduled-change", None), EPOCH)
    assert result.blocked == ("default/web",)
    _, delay = world.next_message()
    assert delay == 5
    world.queue.messages.clear()
    world.clock.advance(5)
    second = continue_termination(world.runtime, "n1", world.clock.now(), generation=1)
    assert second.blocked == ("default/web",)
    _, delay = world.next_message()
    assert delay == 10  # backoff doubled
    world.clock.advance(10)
    third = continue_termination(world.runtime, "n1", world.clock.now(), generation=2)
    assert third.evicted == ("default/web",)
    assert world.kube.blocked == ["default/web", "default/web"]
    assert world.metrics.total("EvictionsBlocked") == 2


def test_deadline_deletes_what_is_left_with_a_grace_that_ends_in_time(world: World) -> None:
    world.pod("web", grace=30)
    world.pod("slow", grace=600)
    world.pod("pinned", annotations={wk.DO_NOT_DISRUPT: "true"}, grace=20)
    world.kube.block("default/web")  # a PDB that never allows it
    deadline = EPOCH + timedelta(seconds=120)
    begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", deadline), EPOCH)
    # slow's grace is longer than the time left: deleted at once with exactly the time left
    assert world.kube.deletions == [("default/slow", 120)]
    statuses = world.run_until_done()
    assert statuses[-1] == "terminated"
    deletions = dict(world.kube.deletions)
    assert deletions["default/web"] == 30 and deletions["default/pinned"] == 20
    assert "default/pinned" not in world.kube.evictions  # do-not-disrupt is never evicted
    # every deletion was issued early enough for its grace to end by the deadline
    assert world.clock.now() <= deadline + timedelta(seconds=5)


def test_state_change_deadline_in_the_past_deletes_everything_at_once(world: World) -> None:
    world.pod("web")
    result = begin_termination(world.runtime, TerminationRequest("n1", "state-change", EPOCH), EPOCH + timedelta(seconds=3))
    assert result.status == "terminated"
    assert world.kube.deletions == [("default/web", 0)]
    assert world.kube.get("nodes", None, "n1") is None


def test_stale_and_duplicate_continuations_are_dropped(world: World) -> None:
    world.pod("web", grace=10)
    begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", None), EPOCH)
    body, _ = world.next_message()
    world.clock.advance(1)
    first = handle_continuation(world.runtime, body, world.clock.now())
    assert first.status == "draining" and first.generation == 2
    # the same message delivered again (SQS at-least-once): stale, nothing done
    again = handle_continuation(world.runtime, body, world.clock.now())
    assert again.status == "stale"
    assert len(world.queue.messages) == 1  # only the chain's own next message
    assert continue_termination(world.runtime, "nope", world.clock.now(), generation=3).status == "unknown"


def test_a_failed_eviction_fails_its_pod_alone_and_a_failed_step_is_retried_within_seconds(world: World) -> None:
    for name in ("a", "b", "c"):
        world.pod(name)
    world.kube.fail("evict_pod", KubernetesError("internal error", status=500), times=1)
    result = begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", None), EPOCH)
    # the failure is a's alone: b and c are evicted in the same step, a is retried after a backoff
    assert result.failed == ("default/a",)
    assert sorted(result.evicted) == ["default/b", "default/c"]
    assert ("default/a", "eviction failed 1 time(s) (HTTP 500); retrying") in result.waiting
    assert world.metrics.total("EvictionsFailed") == 1
    body, delay = world.next_message()
    assert delay == 5
    world.clock.advance(delay)
    world.kube.finish_terminating()
    again = handle_continuation(world.runtime, body, world.clock.now())
    assert again.evicted == ("default/a",)

    # a step that fails as a whole (listing the pods times out) schedules its own retry
    # within seconds: the chain never waits for the work queue's visibility timeout
    world.pod("d")
    body, _ = world.next_message()
    world.kube.fail("list_pods_on_node", KubernetesError("timeout", status=504))
    world.clock.advance(5)
    failed = handle_continuation(world.runtime, body, world.clock.now())
    assert failed.status == "retrying" and "timeout" in failed.error
    body, delay = world.next_message()
    assert delay == 5 and body["generation"] == failed.generation
    assert world.metrics.total("TerminationStepFailed") == 1
    world.clock.advance(delay)
    world.kube.finish_terminating()
    resumed = handle_continuation(world.runtime, body, world.clock.now())
    assert resumed.evicted == ("default/d",)
    assert world.state.get_item(TERMINATION_KIND, "n1")["stepFailures"] == 0


def test_a_held_lease_makes_the_step_retry_later(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from joiner.services import termination

    monkeypatch.setattr(termination, "LEASE_WAIT_SECONDS", 0.2)
    world.pod("web")
    assert world.state.acquire_lease("termination/n1", "someone-else", EPOCH, 120)
    # a continuation finding the lease held comes back a few seconds later (never the
    # work queue's visibility timeout): the same message, sent again
    busy = continue_termination(world.runtime, "n1", EPOCH, generation=3)
    assert busy.status == "busy" and world.next_message() == ({"kind": "termination", "node": "n1", "generation": 3}, termination.BUSY_RETRY_SECONDS)
    busy = continue_termination(world.runtime, "n1", EPOCH)
    assert busy.status == "busy" and world.next_message() == ({"kind": "termination", "node": "n1"}, termination.BUSY_RETRY_SECONDS)
    assert world.metrics.total("TerminationBusyRequeued") == 2
    started = time.monotonic()
    with pytest.raises(TerminationBusy):
        begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", None), EPOCH)
    assert time.monotonic() - started >= 0.2  # begin waits a little for the holder before giving up
    assert world.kube.evictions == []
    # once the holder is done, a waiting begin goes ahead
    world.state.release_lease("termination/n1", "someone-else")
    assert begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", None), EPOCH).evicted == ("default/web",)


def test_an_urgent_event_never_waits_for_a_held_lease(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spot warning finding the node's lease held leaves its deadline as a request and a
    generation-less step a second ahead; the holder's own step takes the request before
    scheduling its successor."""
    from joiner.services import drain_step, termination, termination_store

    monkeypatch.setattr(termination, "LEASE_WAIT_SECONDS", 0.05)
    monkeypatch.setattr(termination_store, "SLOW_STEP_SECONDS", 0.0)  # the holder's step counts as slow
    world.pod("web", grace=30)
    world.kube.block("default/web", times=100)
    begin_termination(world.runtime, TerminationRequest("n1", "scheduled-change", EPOCH + timedelta(days=2), event_id="health"), EPOCH)
    world.queue.messages.clear()
    holder = termination_store.TerminationLease(world.runtime, "n1", EPOCH)
    holder.acquire()
    deadline = EPOCH + timedelta(seconds=120)
    queued = begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", deadline, event_id="spot"), EPOCH)
    assert queued.status == "queued"
    assert world.next_message() == ({"kind": "termination", "node": "n1"}, 1)
    # the holder's step (begun before the request) takes it before it schedules its successor
    stored = termination_store.load_state(world.runtime, "n1")
    assert stored is not None
    result = drain_step.run_step(world.runtime, stored, EPOCH, holder)
    holder.__exit__()
    assert result.next_step_in == 1
    merged = world.state.get_item(TERMINATION_KIND, "n1")
    assert merged["deadline"] == deadline.isoformat() and merged["events"] == ["health", "spot"]
    assert world.state.get_item(termination.REQUEST_KIND, "n1") is None
    statuses = world.run_until_done()
    assert statuses[-1] == "terminated"
    assert dict(world.kube.deletions)["default/web"] <= 30
    assert world.clock.now() <= deadline


def test_a_request_bounds_a_rebalance_replacement_wait_by_the_reclaim(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spot warning behind a rebalance (issue 16 section 5): the replacement is still
    awaited, but the drain starts by the reclaim less the pods' grace period and a margin."""
    from joiner.domain.termination import DRAIN_MARGIN
    from joiner.services import drain_step, termination, termination_store

    monkeypatch.setattr(termination, "LEASE_WAIT_SECONDS", 0.05)
    monkeypatch.setattr(termination_store, "SLOW_STEP_SECONDS", 0.0)
    world.pod("web")
    world.state.put_claim(ClaimRecord("r1", "default", "launched", EPOCH, instance_id="i-00000000000000002"))
    waiting = begin_termination(
        world.runtime, TerminationRequest("n1", "rebalance-recommendation", None, replacement_claims=("r1",), wait_for_replacement=True), EPOCH
    )
    assert waiting.status == "started" and waiting.phase == "replacing"
    world.queue.messages.clear()
    holder = termination_store.TerminationLease(world.runtime, "n1", EPOCH)
    holder.acquire()
    deadline = EPOCH + timedelta(seconds=120)
    assert begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", deadline, event_id="spot"), EPOCH).status == "queued"
    world.queue.messages.clear()  # the request's own step is lost: the holder's step must take the request
    stored = termination_store.load_state(world.runtime, "n1")
    assert stored is not None
    result = drain_step.run_step(world.runtime, stored, EPOCH, holder)
    holder.__exit__()
    assert result.status == "replacing" and result.next_step_in == 5  # polled every 5 s under a deadline
    assert world.state.get_item(TERMINATION_KIND, "n1")["deadline"] == deadline.isoformat()
    drain_by = deadline - timedelta(seconds=30) - DRAIN_MARGIN  # the pod's default 30 s grace
    while world.clock.now() < drain_by:
        body, _ = world.next_message()
        world.clock.advance(5)
        result = handle_continuation(world.runtime, body, world.clock.now())
        if world.clock.now() < drain_by:
            assert result.status == "replacing" and result.evicted == ()
    assert result.evicted == ("default/web",)


def test_a_request_left_for_a_holder_that_died_starts_the_termination(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from joiner.services import termination

    monkeypatch.setattr(termination, "LEASE_WAIT_SECONDS", 0.05)
    world.pod("web")
    assert world.state.acquire_lease("termination/n1", "died-before-saving", EPOCH, 2)
    deadline = EPOCH + timedelta(seconds=120)
    queued = begin_termination(
        world.runtime, TerminationRequest("n1", "spot-interruption", deadline, instance_id=INSTANCE, claim_id="c1", event_id="spot"), EPOCH
    )
    assert queued.status == "queued" and world.state.get_item(TERMINATION_KIND, "n1") is None
    body, delay = world.next_message()
    assert delay == 1
    world.clock.advance(5)  # the dead holder's lease has expired
    started = handle_continuation(world.runtime, body, world.clock.now())
    assert started.evicted == ("default/web",)
    stored = world.state.get_item(TERMINATION_KIND, "n1")
    assert stored["deadline"] == deadline.isoformat() and stored["events"] == ["spot"]
    assert world.state.get_claim("c1").state == "terminating"


def test_a_second_event_tightens_the_deadline_and_supersedes_the_chain(world: World) -> None:
    world.pod("pinned", annotations={wk.KARPENTER_DO_NOT_DISRUPT: "true"}, grace=10)
    first = begin_termination(world.runtime, TerminationRequest("n1", "rebalance-recommendation", None, event_id="e1"), EPOCH)
    assert first.status == "started" and first.evicted == ()
    old_body, _ = world.next_message()
    world.clock.advance(2)
    second = begin_termination(
        world.runtime, TerminationRequest("n1", "spot-interruption", world.clock.now() + timedelta(seconds=120), event_id="e2"), world.clock.now()
    )
    assert second.status == "updated"
    stored = world.state.get_item(TERMINATION_KIND, "n1")
    assert stored["events"] == ["e1", "e2"] and stored["deadline"] is not None
    assert handle_continuation(world.runtime, old_body, world.clock.now()).status == "stale"
    assert world.run_until_done()[-1] == "terminated"
    assert ("default/pinned", 10) in world.kube.deletions


def test_rebalance_waits_for_the_replacement_before_draining(world: World) -> None:
    world.pod("web")
    world.state.put_claim(ClaimRecord("c2", "default", "launched", EPOCH, instance_id="i-00000000000000002"))
    result = begin_termination(
        world.runtime, TerminationRequest("n1", "rebalance-recommendation", None, replacement_claims=("c2",), wait_for_replacement=True), EPOCH
    )
    assert result.status == "started" and result.phase == "replacing" and world.kube.evictions == []
    assert world.kube.get("nodes", None, "n1")["spec"]["unschedulable"] is True  # cordoned meanwhile
    body, delay = world.next_message()
    assert delay == 15
    world.clock.advance(delay)
    assert handle_continuation(world.runtime, body, world.clock.now()).status == "replacing"
    # the replacement registers and becomes Ready
    world.kube.add("nodes", node_json("n2", instance_id="i-00000000000000002", labels={wk.NODECLAIM: "c2"}))
    body, delay = world.next_message()
    world.clock.advance(delay)
    step = handle_continuation(world.runtime, body, world.clock.now())
    assert step.status == "draining" and step.evicted == ("default/web",)
    assert world.kube.events_for("n1", "DrainStarted")


def test_a_repeated_rebalance_keeps_waiting_and_a_spot_warning_ends_the_wait(world: World) -> None:
    world.pod("web")
    world.state.put_claim(ClaimRecord("c2", "default", "launched", EPOCH, instance_id="i-00000000000000002"))
    begin_termination(
        world.runtime, TerminationRequest("n1", "rebalance-recommendation", None, replacement_claims=("c2",), wait_for_replacement=True, event_id="r1"), EPOCH
    )
    again = begin_termination(world.runtime, TerminationRequest("n1", "rebalance-recommendation", None, wait_for_replacement=True, event_id="r2"), EPOCH)
    assert again.phase == "replacing" and world.kube.evictions == []
    spot = begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", EPOCH + timedelta(minutes=2), event_id="s1"), EPOCH)
    assert spot.phase == "draining" and spot.evicted == ("default/web",)
    assert world.state.get_item(TERMINATION_KIND, "n1")["replacementClaims"] == ["c2"]


def test_a_replacement_ready_when_the_drain_must_start_is_reported_ready(world: World) -> None:
    """A spot drain waiting for its replacement must start by the deadline less the pods'
    grace: when the replacement is Ready at that very moment, the event says so, not that it
    was not Ready in time."""
    from joiner.domain.termination import DRAIN_MARGIN

    world.pod("web")
    world.state.put_claim(ClaimRecord("r1", "default", "launched", EPOCH, instance_id="i-00000000000000002"))
    world.kube.add("nodes", node_json("n2", instance_id="i-00000000000000002", labels={wk.NODECLAIM: "r1"}))
    deadline = EPOCH + timedelta(seconds=30) + DRAIN_MARGIN  # the drain must start now (the pod's 30 s grace)
    result = begin_termination(
        world.runtime, TerminationRequest("n1", "spot-interruption", deadline, replacement_claims=("r1",), wait_for_replacement=True), EPOCH
    )
    assert result.evicted == ("default/web",)
    (started,) = world.kube.events_for("n1", "DrainStarted")
    assert started.message == "replacement ready; draining"


def test_rebalance_drains_anyway_when_the_replacement_fails(world: World) -> None:
    world.pod("web")
    world.state.put_claim(ClaimRecord("c2", "default", "closed", EPOCH))
    result = begin_termination(
        world.runtime, TerminationRequest("n1", "rebalance-recommendation", None, replacement_claims=("c2",), wait_for_replacement=True), EPOCH
    )
    assert result.evicted == ("default/web",)


def test_node_already_gone_just_cleans_up(world: World) -> None:
    world.kube.remove("nodes", None, "n1")
    result = begin_termination(world.runtime, TerminationRequest("n1", "state-change", EPOCH, instance_id=INSTANCE, claim_id="c1", node_pool="default"), EPOCH)
    assert result.status == "terminated"
    assert world.state.get_claim("c1").state == "closed"
    assert world.ec2.terminated == [INSTANCE]


def test_malformed_continuations_are_rejected() -> None:
    world = World()
    for body in ({"kind": "other", "node": "n1"}, {"kind": "termination"}, {"kind": "termination", "node": "n1", "generation": "2"}):
        with pytest.raises(ValueError, match="work message"):
            handle_continuation(world.runtime, body, EPOCH)


def test_stalled_terminations_are_resumed(world: World) -> None:
    world.pod("pinned", annotations={wk.DO_NOT_DISRUPT: "true"})
    begin_termination(world.runtime, TerminationRequest("n1", "rebalance-recommendation", None), EPOCH)
    world.queue.messages.clear()  # the continuation is lost
    assert resume_stalled_terminations(world.runtime, EPOCH + timedelta(minutes=5)) == []
    assert resume_stalled_terminations(world.runtime, EPOCH + timedelta(minutes=25)) == ["n1"]
    body, _ = world.next_message()
    assert body["generation"] == 1


def test_the_drained_node_is_deleted_by_uid_and_a_node_recreated_under_its_name_survives(world: World) -> None:
    world.pod("app")
    drained_uid = world.kube.get("nodes", None, "n1")["metadata"]["uid"]
    begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", None), EPOCH)
    deletions: list[tuple[str, str | None]] = []
    delete_node = world.kube.delete_node

    def recreate_then_delete(name: str, uid: str | None = None) -> bool:
        deletions.append((name, uid))
        world.kube.remove("nodes", None, name)  # a new instance registered under the reused DNS name
        world.kube.add("nodes", node_json(name, instance_id="i-00000000000000002"))
        return delete_node(name, uid=uid)

    world.kube.delete_node = recreate_then_delete  # type: ignore[method-assign]
    statuses = world.run_until_done()
    assert statuses[-1] == "terminated"
    assert deletions == [("n1", drained_uid)]
    survivor = world.kube.get("nodes", None, "n1")
    assert survivor is not None and survivor["metadata"]["uid"] != drained_uid
    assert world.ec2.terminated == [INSTANCE] and world.state.get_claim("c1").state == "closed"


def test_an_instance_whose_own_tags_do_not_name_the_cluster_is_never_terminated(world: World) -> None:
    """Defect 7's last guard: whatever began the termination, the instance's own tags decide."""
    world.ec2.add_instance(INSTANCE, tags={"Name": "someone-else"})
    result = begin_termination(world.runtime, TerminationRequest("n1", "state-change", EPOCH, instance_id=INSTANCE, claim_id="c1", node_pool="default"), EPOCH)
    assert result is not None
    assert world.ec2.terminated == []
    assert world.metrics.total("NotOwnedSkipped", path="termination") == 1


class _EnvironmentGone(BaseException):
    """The Lambda execution environment died (nothing after it runs, not even a release)."""


def _die_after_evictions(world: World, monkeypatch: pytest.MonkeyPatch, evictions: int) -> None:
    """The invocation dies right after its ``evictions``-th eviction; the lease's release
    never reaches the table (a dead environment makes no calls)."""
    evict = world.kube.evict_pod
    seen = {"n": 0}

    def dying_evict(namespace: str, name: str) -> Any:
        outcome = evict(namespace, name)
        seen["n"] += 1
        if seen["n"] == evictions:
            monkeypatch.setattr(world.state, "release_lease", lambda name, owner: None)
            monkeypatch.setattr(world.kube, "evict_pod", evict)
            raise _EnvironmentGone
        return outcome

    monkeypatch.setattr(world.kube, "evict_pod", dying_evict)


def test_a_step_that_dies_mid_drain_is_resumed_by_its_safety_continuation_within_seconds(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 10 (crash-mid-drain): the first step dies after one eviction, holding the lease
    and with no successor scheduled. Its safety continuation, sent before it acted, runs the
    step again once the dead step's lease has expired: the drain goes on about half a minute
    later, long before the 2-minute deadline, instead of after the work queue's visibility
    timeout."""
    for name in ("a", "b", "c"):
        world.pod(name)
    _die_after_evictions(world, monkeypatch, 1)
    deadline = EPOCH + timedelta(minutes=2)
    with pytest.raises(_EnvironmentGone):
        begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", deadline, instance_id=INSTANCE, claim_id="c1"), EPOCH)
    assert world.kube.evictions == ["default/a"] and world.queue.messages == []
    stored = world.state.get_item(TERMINATION_KIND, "n1")
    assert stored is not None and stored["deadline"] == deadline.isoformat()  # saved before the step acted
    ((body, delay),) = world.queue.safety
    assert body == {"kind": "termination", "node": "n1", "generation": stored["generation"]}
    assert delay < 60
    world.clock.advance(delay)
    resumed = handle_continuation(world.runtime, body, world.clock.now())
    assert resumed.status == "draining" and set(resumed.evicted) == {"default/b", "default/c"}
    assert world.run_until_done()[-1] == "terminated"
    assert world.clock.now() < deadline


def test_a_safety_continuation_of_a_step_that_ended_is_stale(world: World) -> None:
    world.pod("pinned", annotations={wk.DO_NOT_DISRUPT: "true"})
    begin_termination(world.runtime, TerminationRequest("n1", "rebalance-recommendation", None), EPOCH)
    ((safety, delay),) = world.queue.safety
    world.clock.advance(delay)
    assert handle_continuation(world.runtime, safety, world.clock.now()).status == "stale"
    assert world.kube.evictions == []


def test_a_step_that_loses_its_lease_stops_acting(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step renews its lease between actions; when it cannot (it stalled past the lease's
    expiry and another invocation took the node), it stops evicting at once and reports busy."""
    from joiner.services import termination, termination_store

    monkeypatch.setattr(termination_store, "LEASE_RENEW_SECONDS", 0.0)  # renew before every action
    for name in ("a", "b", "c"):
        world.pod(name)
        world.kube.block(f"default/{name}", times=1)  # the first step's evictions are refused (PDB)
    begin_termination(world.runtime, TerminationRequest("n1", "rebalance-recommendation", None), EPOCH)
    assert world.kube.evictions == []
    evict = world.kube.evict_pod

    def stall_then_lose(namespace: str, name: str) -> Any:
        outcome = evict(namespace, name)
        world.clock.advance(termination.LEASE_TTL_SECONDS + 1)
        world.state.acquire_lease("termination/n1", "the-safety-continuation", world.clock.now(), termination.LEASE_TTL_SECONDS)
        return outcome

    monkeypatch.setattr(world.kube, "evict_pod", stall_then_lose)
    body, delay = world.next_message()
    world.clock.advance(delay)
    result = handle_continuation(world.runtime, body, world.clock.now())
    assert result.status == "busy"
    assert len(world.kube.evictions) == 1  # the other two are left to the lease's new holder
    assert world.state.acquire_lease("termination/n1", "the-safety-continuation", world.clock.now(), 5)  # still theirs


def test_a_step_that_dies_between_scheduling_and_saving_its_successor_is_carried_on(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Soak seed 73: a step died right after it saved its next generation and before it sent
    that generation's message, so its safety continuation (one generation behind) was
    dropped as stale and the drain stopped 105 s before the reclaim. Now a step schedules
    its successor first and saves second: a death between the two leaves a message one
    generation ahead of the stored state, which runs the next step."""
    for name in ("a", "b"):
        world.pod(name)
    world.pod("pinned", annotations={wk.DO_NOT_DISRUPT: "true"})  # keeps the drain going past the first step
    deadline = EPOCH + timedelta(minutes=2)
    real_put = world.state.put_item
    calls = {"saves": 0}

    def dying_put(kind: str, item_id: str, data: Any, **options: Any) -> Any:
        if kind == TERMINATION_KIND and data.get("generation", 0) >= 1:
            calls["saves"] += 1
            monkeypatch.setattr(world.state, "put_item", real_put)
            monkeypatch.setattr(world.state, "release_lease", lambda name, owner: None)
            raise _EnvironmentGone  # the step's closing save never happens
        return real_put(kind, item_id, data, **options)

    monkeypatch.setattr(world.state, "put_item", dying_put)
    with pytest.raises(_EnvironmentGone):
        begin_termination(world.runtime, TerminationRequest("n1", "spot-interruption", deadline, instance_id=INSTANCE, claim_id="c1"), EPOCH)
    assert calls["saves"] == 1 and sorted(world.kube.evictions) == ["default/a", "default/b"]
    stored = world.state.get_item(TERMINATION_KIND, "n1")
    assert stored is not None and stored["generation"] == 0  # the successor's generation was never saved
    body, delay = world.next_message()
    assert body["generation"] == 1 and delay < 60  # ... but its message was sent
    world.clock.advance(LEASE_TTL_SECONDS + 1)  # the dead step's lease expires
    carried = handle_continuation(world.runtime, body, world.clock.now())
    assert carried.status in ("draining", "terminated") and carried.generation >= 1
    assert world.run_until_done()[-1] == "terminated"
    assert world.clock.now() <= deadline


@pytest.mark.parametrize("grace", [100_000_000_000_000, 2**63 - 1])
@pytest.mark.parametrize("malformed", [False, True])
def test_a_grace_period_longer_than_any_date_range_still_drains_a_spot_node_by_its_deadline(world: World, grace: int, malformed: bool) -> None:
    """terminationGracePeriodSeconds is any int64 >= 0 to the API server; one past what a
    datetime can add (100000000000000 s, about 3 million years) once raised OverflowError in
    drain_start_by and plan_drain, wedging the spot drain. The grace is clamped where it is
    read (by the snapshot parser, and for a pod the parser rejects), so the pod is deleted
    with the time left and the node terminated by the deadline."""
    world.pod("web")
    world.pod("forever", grace=grace)
    if malformed:  # a field the drain does not need is malformed: the reduced pod path
        world.kube.get("pods", "default", "forever")["spec"]["priority"] = "high"
    world.state.put_claim(ClaimRecord("r1", "default", "launched", EPOCH, instance_id="i-00000000000000002"))
    deadline = EPOCH + timedelta(seconds=120)
    first = begin_termination(
        world.runtime, TerminationRequest("n1", "spot-interruption", deadline, replacement_claims=("r1",), wait_for_replacement=True), EPOCH
    )
    assert first.status in ("started", "draining")
    statuses = world.run_until_done()
    assert statuses[-1] == "terminated"
    deletions = dict(world.kube.deletions)
    assert deletions["default/forever"] == 120  # exactly the time left: the drain started at once
    assert world.ec2.terminated == [INSTANCE]
    assert world.clock.now() <= deadline + timedelta(seconds=5)
