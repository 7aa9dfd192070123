"""The provisioning round and the scanner loop, on the in-memory fakes (fast), then end to
end against moto (EC2 Fleet, launch templates, SSM, EKS, DynamoDB) and the Kubernetes
emulator over HTTP."""

from __future__ import annotations

import contextlib
import itertools
import threading
from datetime import timedelta
from typing import Any

import pytest

from joiner.domain import labels as wk
from joiner.domain.launch import client_token
from joiner.domain.model import OfferingKey, nodeclass_hash, nodepool_hash
from joiner.domain.resources import Resources
from joiner.domain.snapshot import parse_node_class, parse_node_pool
from joiner.ports import ClaimRecord, Ec2Error
from joiner.services.launcher import MAX_LAUNCH_ATTEMPTS, UNAVAILABLE_FOR, claim_id_for
from joiner.services.planning_round import LIMIT_REACHED
from joiner.services.provisioning import LEASE_NAME, LEASE_TTL_SECONDS, ORPHAN_AFTER, RoundResult, provision, run_scanner
from tests.support.fakes import (
    EPOCH,
    FakeClock,
    FakeKubernetes,
    FakeState,
    FakeWorld,
    RecordingMetrics,
    fake_world,
    node_class_json,
    node_json,
    node_pool_json,
    pod_json,
    small_catalog,
)

CPU = 1000  # milli


def setup_cluster(world: FakeWorld, *, pods: int = 3, cpu: str = "1", pool: dict | None = None) -> None:
    world.kube.add("node_classes", node_class_json(discovery=world.cluster))
    world.kube.add("node_pools", pool or node_pool_json())
    for index in range(pods):
        world.kube.add("pods", pod_json(f"web-{index}", cpu=cpu, memory="256Mi"))


def test_a_public_ipv4_address_is_priced_in_zones_whose_subnet_assigns_one(world: FakeWorld) -> None:
    import dataclasses

    world.ec2.subnets = [dataclasses.replace(s, map_public_ip=s.zone != "us-east-1c") for s in world.ec2.subnets]
    root_volume = 20 * 0.08 / 730
    on_demand_c5 = [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["c5.xlarge"]}, {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]
    setup_cluster(world, pods=1, pool=node_pool_json(requirements=on_demand_c5))
    (launched,) = provision(world.runtime(), world.clock.now()).launched
    (request,) = world.ec2.fleet_requests
    # The zone without public addresses is $0.005/h cheaper: the fleet tries it first.
    assert request.overrides[0].zone == "us-east-1c" and launched.zone == "us-east-1c"
    assert launched.price == pytest.approx(0.17 + root_volume)
    public = fake_world()
    public.ec2.subnets = [dataclasses.replace(s, map_public_ip=True) for s in public.ec2.subnets]
    setup_cluster(public, pods=1, pool=node_pool_json(requirements=on_demand_c5))
    (launched,) = provision(public.runtime(), public.clock.now()).launched
    assert launched.price == pytest.approx(0.17 + root_volume + 0.005)


def spot_and_on_demand_pool(**kwargs: object) -> dict:
    return node_pool_json(
        requirements=[
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "c5.xlarge"]},
            {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
        ],
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
def world() -> FakeWorld:
    return fake_world()


# ---------------------------------------------------------------- launching


def test_pending_pods_become_one_launched_claim_with_tags_events_and_metrics(world: FakeWorld) -> None:
    setup_cluster(world, pods=3)
    result = provision(world.runtime(), world.clock.now())

    assert result.ran and result.pending_pods == 3
    assert len(result.launched) == 1 and not result.failures and not result.unschedulable
    launched = result.launched[0]
    assert launched.node_pool == "default" and sorted(launched.pods) == ["default/web-0", "default/web-1", "default/web-2"]
    assert launched.claim_id == claim_id_for("default", [p["metadata"]["uid"] for p in world.kube.list_pods()])

    (request,) = world.ec2.fleet_requests
    assert request.client_token == client_token(launched.claim_id, 0)
    assert request.capacity_type == "on-demand"
    assert request.tags[wk.NODECLAIM] == launched.claim_id and request.tags[wk.NODEPOOL] == "default"
    assert request.tags["joiner.dev/cluster"] == "test-cluster" and request.tags["kubernetes.io/cluster/test-cluster"] == "owned"
    assert request.tags["Name"] == "test-cluster/default"
    # 3 x 1 CPU needs more than a c5.large: the cheapest fitting type leads, only pool types are offered
    assert {o.instance_type for o in request.overrides} <= {"c5.xlarge", "c5.2xlarge"}
    assert request.overrides[0].instance_type == "c5.xlarge"
    assert {o.subnet_id for o in request.overrides} <= {s.id for s in world.ec2.subnets}

    claim = world.state.get_claim(launched.claim_id)
    assert claim is not None and claim.state == "launched"
    assert (
        claim.instance_id == launched.instance_id and claim.instance_type == "c5.xlarge" and claim.price == pytest.approx(0.17 + 20 * 0.08 / 730)
    )  # c5.xlarge and its 20Gi gp3 root volume
    assert claim.launched_at == world.clock.now() and sorted(claim.pods) == sorted(launched.pods)
    pool = parse_node_pool(world.kube.list_node_pools()[0])
    assert claim.pool_hash == nodepool_hash(pool) != ""  # stamped on the Node at registration (template drift)
    node_class = parse_node_class(world.kube.list_node_classes()[0])
    assert claim.class_hash == nodeclass_hash(node_class) != ""
    reservation = world.state.reservations("default")[launched.claim_id]
    assert reservation["nodes"] == 1000 and reservation["cpu"] == 4 * CPU  # the launched c5.xlarge, not the largest candidate
    assert claim.reserved == reservation

    nominated = [e for e in world.kube.events if e.reason == "Nominated"]
    assert sorted(e.name for e in nominated) == ["web-0", "web-1", "web-2"]
    assert all(launched.claim_id in e.message for e in nominated)
    # on the NodePool, and on the claim's NodeClaim (written at launch, not at the next sync)
    assert [(e.kind, e.name) for e in world.kube.events if e.reason == "Launched"] == [("NodePool", "default"), ("NodeClaim", launched.claim_id)]
    assert world.metrics.total("ClaimsLaunched") == 1 and world.metrics.total("ScanCompleted") == 1
    assert world.metrics.total("PodsPending") == 3
    assert world.metrics.values("ManagedCostPerHour") == [pytest.approx(0.17 + 20 * 0.08 / 730, abs=1e-6)]
    assert world.state.lease_holder(LEASE_NAME) is None  # released after the round


def test_an_idle_round_emits_only_the_heartbeat(world: FakeWorld) -> None:
    """Each metric series costs $0.30 a month once emitted: an idle cluster pays for one."""
    setup_cluster(world, pods=0)
    result = provision(world.runtime(), world.clock.now())
    assert result.ran and result.pending_pods == 0
    assert {name for name, _, _, _ in world.metrics.records} == {"ScanCompleted"}


def test_launch_template_carries_pool_labels_and_taints(world: FakeWorld) -> None:
    pool = node_pool_json(labels={"team": "a"}, taints=[{"key": "dedicated", "value": "a", "effect": "NoSchedule"}])
    setup_cluster(world, pods=1, pool=pool)
    world.kube.add("pods", pod_json("tolerant", cpu="1", tolerations=[{"key": "dedicated", "operator": "Exists"}]))
    result = provision(world.runtime(), world.clock.now())

    assert len(result.launched) == 1
    # the untolerating pod cannot go to the tainted pool and says why
    assert result.reason_for("default/web-0") is not None
    inputs = world.ec2.template_inputs[world.ec2.fleet_requests[0].launch_template.id]
    assert inputs["labels"]["team"] == "a" and inputs["labels"][wk.NODEPOOL] == "default"
    assert [t.key for t in inputs["taints"]] == ["dedicated"]


def test_pods_not_yet_marked_unschedulable_are_left_to_kube_scheduler(world: FakeWorld) -> None:
    setup_cluster(world, pods=0)
    fresh = pod_json("fresh")
    fresh["status"] = {"phase": "Pending"}
    world.kube.add("pods", fresh)
    result = provision(world.runtime(), world.clock.now())
    assert result.pending_pods == 0 and not world.ec2.fleet_requests


def test_spot_is_preferred_when_the_pool_allows_both(world: FakeWorld) -> None:
    setup_cluster(world, pods=1, pool=spot_and_on_demand_pool())
    result = provision(world.runtime(), world.clock.now())
    assert result.launched[0].capacity_type == "spot"
    assert world.ec2.fleet_requests[0].capacity_type == "spot"


# ---------------------------------------------------------------- idempotency


def test_second_round_for_the_same_pods_launches_nothing(world: FakeWorld) -> None:
    setup_cluster(world, pods=3)
    first = provision(world.runtime("invocation-1"), world.clock.now())
    world.clock.advance(30)
    second = provision(world.runtime("invocation-2"), world.clock.now())

    assert len(first.launched) == 1
    assert second.ran and second.pending_pods == 3 and not second.launched and not second.unschedulable
    assert len(world.ec2.fleet_requests) == 1 and len(world.ec2.running_instances()) == 1


def test_pods_about_to_bind_to_their_claims_just_ready_node_get_no_second_claim(world: FakeWorld) -> None:
    """Registration marks a claim initialized as its Node turns Ready, in the round that reads
    the pods kube-scheduler has not bound yet: they are waiting for that claim, not for a new one."""
    setup_cluster(world, pods=3)
    (launched,) = provision(world.runtime("invocation-1"), world.clock.now()).launched
    world.state.update_claim(launched.claim_id, state="initialized", node_name="ip-10-0-0-9.ec2.internal")
    world.clock.advance(60)
    second = provision(world.runtime("invocation-2"), world.clock.now())

    assert second.pending_pods == 3 and not second.launched
    assert len(world.ec2.fleet_requests) == 1


def _wave_two_registers_not_ready(world: FakeWorld) -> tuple[Any, str]:
    """Wave 2 (3 one-CPU pods) got a claim; its Node registered but is not Ready yet; wave 3
    (3 more) became pending meanwhile."""
    setup_cluster(world, pods=3)
    (launched,) = provision(world.runtime("invocation-1"), world.clock.now()).launched
    world.kube.add(
        "nodes",
        node_json(
            "registering",
            instance_id=launched.instance_id,
            zone=launched.zone,
            instance_type="c5.xlarge",
            cpu="3",
            memory="8Gi",
            ready=False,
            labels={wk.NODEPOOL: "default"},
            taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
        ),
    )
    for index in range(3):
        world.kube.add("pods", pod_json(f"late-{index}", cpu="1", memory="256Mi"))
    world.clock.advance(20)
    return launched, "registering"


def test_a_registering_nodes_own_pods_are_nominated_to_it_and_the_others_get_their_own_node(world: FakeWorld) -> None:
    """kube-scheduler binds pending pods in its own order: without the nominations, wave 3 could
    take the room wave 2's node was launched for."""
    launched, node = _wave_two_registers_not_ready(world)
    second = provision(world.runtime("invocation-2"), world.clock.now())

    assert second.registration.registered == (launched.claim_id,)
    assert dict(second.nominated) == dict.fromkeys(launched.pods, node)
    assert sorted(world.kube.nominations) == sorted((key, node) for key in launched.pods)
    for key in launched.pods:
        assert world.kube.get("pods", "default", key.split("/")[1])["status"]["nominatedNodeName"] == node
    # the nominated pods wait for their node and take its room: wave 3 gets a node of its own
    assert second.pending_pods == 3
    (late,) = second.launched
    assert sorted(late.pods) == ["default/late-0", "default/late-1", "default/late-2"]
    assert world.metrics.total("PodsNominated") == 3
    assert world.metrics.values("PodsPending") == [3, 6]  # the nominated pods are still pending to the user (and the age alarm)

    world.clock.advance(20)
    third = provision(world.runtime("invocation-3"), world.clock.now())
    assert not third.nominated and not third.launched and len(world.kube.nominations) == 3  # nominated once


def test_pods_nominated_elsewhere_or_to_a_ready_node_are_left_alone(world: FakeWorld) -> None:
    launched, node = _wave_two_registers_not_ready(world)
    preempting = world.kube.get("pods", "default", "web-0")
    preempting["status"]["nominatedNodeName"] = "another-node"  # kube-scheduler's own (preemption): kept
    world.kube.add("pods", preempting)
    second = provision(world.runtime("invocation-2"), world.clock.now())
    assert sorted(second.nominated) == ["default/web-1", "default/web-2"]
    assert world.kube.get("pods", "default", "web-0")["status"]["nominatedNodeName"] == "another-node"
    # a nomination to a Node that does not exist does not hold a pod back: planned as pending
    assert second.pending_pods == 4

    ready = fake_world()
    launched, node = _wave_two_registers_not_ready(ready)
    registering = ready.kube.get("nodes", None, node)
    registering["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    registering["spec"]["taints"] = []
    ready.kube.add("nodes", registering)
    assert not provision(ready.runtime("invocation-2"), ready.clock.now()).nominated  # Ready: kube-scheduler binds them now


class CrashingState(FakeState):
    """Dies (once) right after EC2 answered: the claim stays ``reserved``."""

    def __init__(self) -> None:
        super().__init__()
        self.crash = True

    def update_claim(self, claim_id: str, **fields: Any) -> ClaimRecord:
        if self.crash and fields.get("state") == "launched":
            self.crash = False
            raise ConnectionError("Lambda timed out")
        return super().update_claim(claim_id, **fields)


def test_a_crash_between_launch_and_record_launches_once_and_is_adopted_later() -> None:
    world = fake_world()
    world.state = CrashingState()
    setup_cluster(world, pods=2)

    first = provision(world.runtime("invocation-1"), world.clock.now())
    (claim,) = world.state.open_claims()
    assert claim.state == "reserved" and len(first.launched) == 1  # EC2 launched, recording failed

    world.clock.advance(20)  # the retry: the claim may still be in a live round's hands
    second = provision(world.runtime("invocation-2"), world.clock.now())
    assert not second.launched and second.existing_claims == (claim.claim_id,)

    world.clock.advance(ORPHAN_AFTER.total_seconds())
    third = provision(world.runtime("invocation-3"), world.clock.now())
    assert third.orphans_adopted == (claim.claim_id,) and not third.launched
    assert [r.client_token for r in world.ec2.fleet_requests] == [client_token(claim.claim_id, 0)]
    assert len(world.ec2.running_instances()) == 1
    recorded = world.state.get_claim(claim.claim_id)
    assert recorded is not None and recorded.state == "launched" and recorded.instance_id == first.launched[0].instance_id
    assert list(world.state.reservations("default")) == [claim.claim_id]  # reserved once, kept until registration


def test_a_crash_after_create_fleet_then_a_changed_pending_set_never_buys_twice_for_the_same_pods() -> None:
    """Issue 10, defect 2: the round dies after CreateFleet, before its claim is ``launched``.
    New pods arrive, so the next round's pending set (and so its claim ids) differ; the
    ``reserved`` claim still holds web-0..2 and nothing else may be bought for them."""
    world = fake_world()
    world.state = CrashingState()
    setup_cluster(world, pods=3)
    first = provision(world.runtime("invocation-1"), world.clock.now())
    (crashed,) = world.state.open_claims()
    assert crashed.state == "reserved" and len(first.launched) == 1

    for name in ("web-3", "web-4"):  # five 1-CPU pods fit one c5.2xlarge: a new claim id
        world.kube.add("pods", pod_json(name, cpu="1", memory="256Mi"))
    world.clock.advance(20)
    second = provision(world.runtime("invocation-2"), world.clock.now())

    promised: dict[str, list[str]] = {}
    for claim in world.state.open_claims():
        for pod in claim.pods:
            promised.setdefault(pod, []).append(claim.claim_id)
    assert {pod: claims for pod, claims in promised.items() if len(claims) > 1} == {}
    assert [sorted(launched.pods) for launched in second.launched] == [["default/web-3", "default/web-4"]]
    assert crashed.claim_id in second.existing_claims
    assert len(world.ec2.running_instances()) == 2

    world.clock.advance(ORPHAN_AFTER.total_seconds())  # then the orphan is adopted, never launched again
    third = provision(world.runtime("invocation-3"), world.clock.now())
    assert third.orphans_adopted == (crashed.claim_id,) and not third.launched
    assert len(world.ec2.running_instances()) == 2


def test_orphaned_reservation_is_adopted_or_closed(world: FakeWorld) -> None:
    setup_cluster(world, pods=0)
    stale = ClaimRecord("default-orphan", "default", "reserved", world.clock.now(), pods=("default/gone",), reserved=Resources({"cpu": 2000}))
    world.state.put_claim(stale)
    world.state.reserve_capacity("default", stale.claim_id, stale.reserved, None, Resources())
    world.clock.advance(600)
    result = provision(world.runtime(), world.clock.now())
    assert result.orphans_closed == ("default-orphan",)
    closed = world.state.get_claim("default-orphan")
    assert closed is not None and closed.state == "closed" and closed.reason == "launch abandoned"
    assert world.state.reservations("default") == {}


# ---------------------------------------------------------------- limits


def test_limits_hold_and_refused_pods_say_limit_reached(world: FakeWorld) -> None:
    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}], limits={"cpu": "4"})
    setup_cluster(world, pods=5, cpu="1500m", pool=pool)  # one pod per c5.large: five nodes wanted, two allowed
    result = provision(world.runtime(), world.clock.now())

    assert len(result.launched) == 2
    refused = [u for u in result.unschedulable if u.reason == f'nodepool "default": {LIMIT_REACHED} (cpu)']
    assert len(refused) == 3
    assert sum(r.get("cpu") for r in world.state.reservations("default").values()) == 4 * CPU
    assert world.metrics.total("LimitReached") == 3
    events = [e for e in world.kube.events if e.reason == "FailedScheduling"]
    assert len(events) == 3 and all(LIMIT_REACHED in e.message and e.event_type == "Warning" for e in events)


def test_registered_nodes_keep_their_reservation_and_count_once_against_the_limit(world: FakeWorld) -> None:
    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}], limits={"cpu": "6"})
    setup_cluster(world, pods=2, cpu="1500m", pool=pool)
    first = provision(world.runtime(), world.clock.now())
    assert len(first.launched) == 2
    for index, launched in enumerate(first.launched):
        world.kube.add("nodes", node_json(f"node-{index}", instance_id=launched.instance_id, zone=launched.zone))
        for key in launched.pods:
            world.kube.bind("default", key.split("/")[1], f"node-{index}")
    world.kube.add("pods", pod_json("late-0", cpu="1500m", memory="256Mi"))
    world.kube.add("pods", pod_json("late-1", cpu="1500m", memory="256Mi"))
    world.clock.advance(60)
    second = provision(world.runtime("invocation-2"), world.clock.now())

    assert set(second.registration.registered) == {launch.claim_id for launch in first.launched}
    # registration moves nothing: the reservations stay until the capacity is gone...
    assert set(world.state.reservations("default")) == {launch.claim_id for launch in first.launched} | {launch.claim_id for launch in second.launched}
    # ...and a registered Node is not counted a second time: 2 + 2 + 2 CPU fit the 6-CPU limit
    assert len(second.launched) == 1
    refused = [p for p in ("default/late-0", "default/late-1") if LIMIT_REACHED in (second.reason_for(p) or "")]
    assert len(refused) == 1


def test_a_reservation_left_behind_by_a_closed_or_missing_claim_is_released_by_the_next_round(world: FakeWorld) -> None:
    """A caller died between closing a claim and releasing its reservation (every path does
    both, in that order), or a reservation has no claim record at all (records are written
    before reservations): the next round releases it, so the limit is not held forever."""
    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}], limits={"cpu": "2"})
    setup_cluster(world, pods=1, cpu="1500m", pool=pool)
    world.state.put_claim(ClaimRecord("default-gone", "default", "closed", world.clock.now(), reason="registration timeout"))
    world.state.reserve_capacity("default", "default-gone", Resources({"cpu": 2000, "nodes": 1000}), None, Resources())
    world.state.reserve_capacity("default", "default-unrecorded", Resources({"cpu": 2000, "nodes": 1000}), None, Resources())
    result = provision(world.runtime(), world.clock.now())
    assert len(result.launched) == 1 and not result.failures
    assert "default-gone" not in world.state.reservations("default")
    assert "default-unrecorded" not in world.state.reservations("default")


class Signalling:
    """Delegates to a port and sets ``event`` on the first call: "this scanner holds the lease now"."""

    def __init__(self, port: object, event: threading.Event) -> None:
        self._port = port
        self._event = event

    def __getattr__(self, name: str) -> object:
        attribute = getattr(self._port, name)
        if not callable(attribute):
            return attribute

        def call(*args: object, **kwargs: object) -> object:
            self._event.set()
            return attribute(*args, **kwargs)

        return call


def test_two_scanners_racing_past_an_expired_lease_stay_within_the_limit() -> None:
    """Scanner B starts while A still runs but after A's lease expired (A's clock is behind).
    Each read the cluster at a different moment (B's view has other pods), so they plan
    different claims; both read "nothing reserved" and then reserve in lock-step. The
    conditional reservation lets exactly the limit through."""
    world = fake_world()
    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}], limits={"cpu": "6"})
    setup_cluster(world, pods=4, cpu="1500m", pool=pool)
    view_b = FakeKubernetes()
    view_b.add("node_classes", node_class_json(discovery=world.cluster))
    view_b.add("node_pools", pool)
    for index in range(4, 8):
        view_b.add("pods", pod_json(f"web-{index}", cpu="1500m", memory="256Mi", uid=f"uid-b-{index}"))
    barrier = threading.Barrier(2)

    class LockStep(FakeState):
        def reserve_capacity(self, *args: object, **kwargs: object) -> bool:  # type: ignore[override]
            try:
                barrier.wait(timeout=1)
            except threading.BrokenBarrierError:
                pass
            return super().reserve_capacity(*args, **kwargs)  # type: ignore[arg-type]

    world.state = LockStep()
    a_holds_lease = threading.Event()
    start = world.clock.now()
    results: dict[str, object] = {}
    runtimes = {
        "a": world.runtime("a", kube_port=Signalling(world.kube, a_holds_lease)),
        "b": world.runtime("b", kube_port=view_b),
    }

    def scan(owner: str, offset: int) -> None:
        results[owner] = provision(runtimes[owner], start + timedelta(seconds=offset))

    thread_a = threading.Thread(target=scan, args=("a", 0))
    thread_a.start()
    assert a_holds_lease.wait(timeout=5)
    thread_b = threading.Thread(target=scan, args=("b", 2 * 60))
    thread_b.start()
    thread_a.join()
    thread_b.join()

    assert all(r.ran for r in results.values())  # type: ignore[attr-defined]
    assert len(world.ec2.running_instances()) == 3  # 6 CPU / 2 per c5.large, whoever won each race
    assert sum(r.get("cpu") for r in world.state.reservations("default").values()) == 6 * CPU
    refused = [f for r in results.values() for f in r.failures if f.reason == "LimitReached"]  # type: ignore[attr-defined]
    assert len(refused) == 3 and all(LIMIT_REACHED in f.message for f in refused)


class PausingState:
    """Delegates to a state port; the first ``reserve_capacity`` waits until ``resume`` is set
    (``paused`` tells the test it got there): a round frozen between reading and reserving."""

    def __init__(self, port: FakeState, paused: threading.Event, resume: threading.Event) -> None:
        self._port = port
        self._paused = paused
        self._resume = resume

    def __getattr__(self, name: str) -> object:
        return getattr(self._port, name)

    def reserve_capacity(self, *args: object, **kwargs: object) -> bool:
        if not self._paused.is_set():
            self._paused.set()
            assert self._resume.wait(timeout=10)
        return self._port.reserve_capacity(*args, **kwargs)  # type: ignore[arg-type]


def running_cpu(world: FakeWorld) -> int:
    return sum(world.catalog.instance_type(r.instance_type).capacity.get("cpu", 0) for r in world.ec2.running_instances())


def test_a_paused_round_and_a_registration_in_between_never_exceed_the_limit() -> None:
    """Issue 10, defect 3. Round A reads the cluster while claim C1 is launched but not yet a
    Node, and pauses before reserving. C1's Node registers; round B (after A's lease expired)
    registers C1 and launches for another pod. A's reservation must then be refused: before
    the fix it passed against A's stale "in use" figure (C1's capacity had moved from
    "reserved" to "in use") and 6 CPU ran under a 4-CPU limit."""
    world = fake_world()
    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}], limits={"cpu": "4"})
    setup_cluster(world, pods=1, cpu="1500m", pool=pool)
    (c1,) = provision(world.runtime("round-0"), world.clock.now()).launched
    world.kube.add("pods", pod_json("a-only", cpu="1500m", memory="256Mi"))

    paused, resume = threading.Event(), threading.Event()
    runtime_a = world.runtime("round-a", state_port=PausingState(world.state, paused, resume))
    start = world.clock.now() + timedelta(seconds=30)
    results: dict[str, RoundResult] = {}
    thread_a = threading.Thread(target=lambda: results.setdefault("a", provision(runtime_a, start)))
    thread_a.start()
    assert paused.wait(timeout=10)

    world.kube.add("nodes", node_json("node-c1", instance_id=c1.instance_id, zone=c1.zone))
    world.kube.bind("default", "web-0", "node-c1")
    world.kube.remove("pods", "default", "a-only")  # the pending set changed: B plans another pod
    world.kube.add("pods", pod_json("b-only", cpu="1500m", memory="256Mi"))
    second = provision(world.runtime("round-b"), start + timedelta(seconds=LEASE_TTL_SECONDS + 1))
    assert second.registration.registered == (c1.claim_id,) and len(second.launched) == 1

    resume.set()
    thread_a.join(timeout=10)
    assert not thread_a.is_alive()
    assert running_cpu(world) <= 4 * CPU
    assert [f.reason for f in results["a"].failures] == ["LimitReached"]
    assert LIMIT_REACHED in (results["a"].reason_for("default/a-only") or "")


# ---------------------------------------------------------------- capacity errors


def test_capacity_error_falls_back_to_on_demand_in_the_same_invocation(world: FakeWorld) -> None:
    setup_cluster(world, pods=1, pool=spot_and_on_demand_pool())
    for name in ("c5.large", "c5.xlarge"):
        for subnet in world.ec2.subnets:
            world.ec2.insufficient.add(OfferingKey(name, subnet.zone, "spot"))
    now = world.clock.now()
    result = provision(world.runtime(), now)

    first, second = world.ec2.fleet_requests
    assert first.capacity_type == "spot" and second.capacity_type == "on-demand"
    assert (first.client_token, second.client_token) == (client_token(result.launched[0].claim_id, 0), client_token(result.launched[0].claim_id, 1))
    assert len(result.launched) == 1 and result.launched[0].capacity_type == "on-demand" and result.launched[0].attempts == 2
    assert not result.unschedulable and not result.failures
    key = OfferingKey("c5.large", "us-east-1a", "spot")
    assert key in result.capacity_errors and world.state.unavailable_until(key) == now + UNAVAILABLE_FOR
    assert world.metrics.total("CapacityErrors") == len(result.capacity_errors) == 6
    # within three minutes the next round does not try them again; afterwards it does
    assert key in world.state.unavailable_offerings(now + timedelta(minutes=2, seconds=59))
    assert key not in world.state.unavailable_offerings(now + UNAVAILABLE_FOR)


def test_capacity_error_on_one_type_falls_back_to_another_type(world: FakeWorld) -> None:
    pool = node_pool_json(
        requirements=[
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "m5.large"]},
            {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]
    )
    setup_cluster(world, pods=1, pool=pool)
    world.ec2.insufficient |= {OfferingKey("c5.large", s.zone, "on-demand") for s in world.ec2.subnets}
    result = provision(world.runtime(), world.clock.now())
    # EC2 Fleet falls through to the next override inside the same call
    assert result.launched[0].instance_type == "m5.large" and len(world.ec2.fleet_requests) == 1
    assert {k.instance_type for k in result.capacity_errors} == {"c5.large"}


def test_no_capacity_anywhere_gives_up_explains_and_releases(world: FakeWorld) -> None:
    setup_cluster(world, pods=2, pool=spot_and_on_demand_pool(limits={"cpu": "100"}))
    world.ec2.insufficient |= {OfferingKey(t, s.zone, c) for t in ("c5.large", "c5.xlarge") for s in world.ec2.subnets for c in ("spot", "on-demand")}
    result = provision(world.runtime(), world.clock.now())

    assert not result.launched
    # every wave re-plans without the failed offerings: c5.xlarge spot, 2 x c5.large spot,
    # then the same on-demand, and gives up after MAX_LAUNCH_ATTEMPTS plans
    assert result.plans == MAX_LAUNCH_ATTEMPTS
    assert [(r.capacity_type, r.overrides[0].instance_type) for r in world.ec2.fleet_requests] == [
        ("spot", "c5.xlarge"),
        ("spot", "c5.large"),
        ("spot", "c5.large"),
        ("on-demand", "c5.xlarge"),
        ("on-demand", "c5.large"),
        ("on-demand", "c5.large"),
    ]
    assert sorted(u.pod for u in result.unschedulable) == ["default/web-0", "default/web-1"]
    assert world.state.reservations("default") == {}
    assert all(c.state == "closed" for c in world.state.claims_by_node_pool("default"))
    assert world.metrics.total("InsufficientCapacity") == 2
    assert any(r[0] == "LaunchFailures" and r[3] == {"reason": "InsufficientCapacity"} for r in world.metrics.records)
    messages = [e.message for e in world.kube.events if e.reason == "FailedScheduling"]
    assert (
        messages
        == ["Joiner: insufficient capacity after 4 attempts: InsufficientInstanceCapacity: c5.large on-demand in us-east-1a, us-east-1b, us-east-1c"] * 2
    )
    # a later round tries again under a new claim id (the closed one is never reused)
    world.ec2.insufficient.clear()
    world.clock.advance(200)
    again = provision(world.runtime("invocation-2"), world.clock.now())
    assert len(again.launched) == 1 and again.launched[0].claim_id not in {
        c.claim_id for c in world.state.claims_by_node_pool("default") if c.state == "closed"
    }


def test_throttled_create_fleet_is_reported_and_the_reservation_returned(world: FakeWorld) -> None:
    setup_cluster(world, pods=1, pool=node_pool_json(limits={"cpu": "100"}))
    world.ec2.fail("create_fleet", Ec2Error("Request limit exceeded.", code="RequestLimitExceeded"))
    result = provision(world.runtime(), world.clock.now())
    assert [f.reason for f in result.failures] == ["RequestLimitExceeded"]
    assert "RequestLimitExceeded" in result.reason_for("default/web-0")
    assert world.state.reservations("default") == {}
    assert any(r[0] == "LaunchFailures" and r[3] == {"reason": "RequestLimitExceeded"} for r in world.metrics.records)


# ---------------------------------------------------------------- lease


def test_a_cached_launch_template_deleted_by_gc_is_recreated_and_the_launch_retried_once(world: FakeWorld) -> None:
    setup_cluster(world, pods=1)
    runtime = world.runtime()  # one execution environment: its caches outlive the round
    first = provision(runtime, world.clock.now())
    (launched,) = first.launched
    (template_id,) = {r.launch_template.id for r in world.ec2.fleet_requests}
    world.ec2.delete_launch_template(template_id)  # the gc function, elsewhere

    world.clock.advance(20)  # within the 60 s cache
    world.kube.add("pods", pod_json("api", cpu="1500m", memory="256Mi"))
    second = provision(runtime, world.clock.now())
    (relaunched,) = second.launched
    assert not second.failures and not second.unschedulable
    requests = world.ec2.fleet_requests[1:]
    assert len(requests) == 2  # the stale template, then the re-created one
    assert requests[0].client_token == requests[1].client_token == client_token(relaunched.claim_id, 0)
    assert world.ec2.calls.count("ensure_launch_template") == 2
    assert template_id in {i for i, _ in world.ec2.template_records.items()}  # re-created under the same name
    assert len(world.ec2.running_instances()) == 2
    assert world.state.get_claim(relaunched.claim_id).state == "launched"


def test_a_template_missing_twice_fails_the_claim_without_looping(world: FakeWorld) -> None:
    from joiner.ports import LaunchTemplateNotFound, LaunchTemplateRef

    setup_cluster(world, pods=1)
    gone = LaunchTemplateNotFound("gone", "InvalidLaunchTemplateId.NotFound", LaunchTemplateRef("lt-x", "x"))
    world.ec2.fail("create_fleet", gone, times=2)
    result = provision(world.runtime(), world.clock.now())
    assert not result.launched and [f.reason for f in result.failures] == ["InvalidLaunchTemplateId.NotFound"]
    assert world.ec2.calls.count("create_fleet") == 2 and world.ec2.calls.count("ensure_launch_template") == 2
    assert world.state.open_claims() == [] and world.state.reservations("default") == {}


class ClosingState(FakeState):
    """Another writer (gc closing an abandoned reservation, or another round) gets to the
    claim just before this round records its launch."""

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__()
        self.current = current

    def update_claim(self, claim_id: str, **fields: Any) -> ClaimRecord:
        if self.current and fields.get("state") == "launched" and fields.get("expected_state") in ("reserved", ("reserved",)):
            rival, self.current = self.current, {}
            super().update_claim(claim_id, **rival)
        return super().update_claim(claim_id, **fields)


def test_a_claim_closed_while_its_launch_is_recorded_terminates_the_instance() -> None:
    world = fake_world()
    world.state = ClosingState({"state": "closed", "reason": "garbage collected: abandoned", "closed_at": EPOCH})
    setup_cluster(world, pods=2)
    result = provision(world.runtime(), world.clock.now())

    assert not result.launched and [f.reason for f in result.failures] == ["ClaimClosed"]
    (instance_id,) = world.ec2.terminated
    assert world.ec2.running_instances() == []
    (claim,) = world.state.claims_by_node_pool("default")
    assert claim.state == "closed" and claim.reason == "garbage collected: abandoned" and claim.instance_id is None
    assert world.state.reservations("default") == {}
    assert world.metrics.total("LaunchFailures") == 1

    # the pods stay pending and the next round launches for them under a new claim
    world.clock.advance(60)
    again = provision(world.runtime("invocation-2"), world.clock.now())
    (launched,) = again.launched
    assert launched.claim_id != claim.claim_id and len(world.ec2.running_instances()) == 1


def test_a_launch_adopted_concurrently_is_kept() -> None:
    world = fake_world()
    setup_cluster(world, pods=1)
    adopted: dict[str, object] = {}

    class AdoptingState(FakeState):
        def update_claim(self, claim_id: str, **fields: Any) -> ClaimRecord:
            if not adopted and fields.get("expected_state") == "reserved" and fields.get("state") == "launched":
                adopted.update(fields)
                rival = {k: v for k, v in fields.items() if k != "expected_state"}
                super().update_claim(claim_id, **rival)  # the same instance, recorded by another round
            return super().update_claim(claim_id, **fields)

    world.state = AdoptingState()
    result = provision(world.runtime(), world.clock.now())
    (launched,) = result.launched
    assert not result.failures and world.ec2.terminated == []
    assert world.state.get_claim(launched.claim_id).instance_id == launched.instance_id


def test_an_overlapping_invocation_does_nothing_while_the_lease_is_held(world: FakeWorld) -> None:
    setup_cluster(world, pods=2)
    now = world.clock.now()
    assert world.state.acquire_lease(LEASE_NAME, "other-invocation", now, 60)
    skipped = provision(world.runtime(), now)
    assert not skipped.ran and not world.ec2.fleet_requests and "list_pages(pods)" not in world.kube.calls
    assert world.metrics.total("ScanSkipped") == 1
    assert world.state.lease_holder(LEASE_NAME)[0] == "other-invocation"  # not released by us

    world.clock.advance(61)  # the holder died: its lease expires
    assert provision(world.runtime(), world.clock.now()).ran


# ---------------------------------------------------------------- explanations and bad input


def test_unschedulable_pods_get_one_failed_scheduling_event_with_the_reason(world: FakeWorld) -> None:
    setup_cluster(world, pods=1)
    world.kube.add("pods", pod_json("huge", cpu="64"))
    world.kube.add("pods", pod_json("gpu", cpu="1", node_selector={"joiner.dev/instance-gpu-name": "a100"}))
    runtime = world.runtime()
    result = provision(runtime, world.clock.now())

    assert len(result.launched) == 1
    assert {u.pod for u in result.unschedulable} == {"default/huge", "default/gpu"}
    events = [e for e in world.kube.events if e.reason == "FailedScheduling"]
    assert sorted(e.name for e in events) == ["gpu", "huge"]
    for event in events:
        assert event.message == f"Joiner: {result.reason_for('default/' + event.name)}" and event.event_type == "Warning"
    world.clock.advance(5)
    provision(runtime, world.clock.now())  # same reasons: not repeated within minutes
    assert len([e for e in world.kube.events if e.reason == "FailedScheduling"]) == 2


def test_a_pod_changed_between_rounds_is_planned_as_it_is_now(world: FakeWorld) -> None:
    """Parsed pods are reused across rounds by (uid, resourceVersion): an edit is never missed."""
    setup_cluster(world, pods=0)
    big = world.kube.add("pods", pod_json("resized", cpu="64"))
    runtime = world.runtime()
    assert provision(runtime, world.clock.now()).reason_for("default/resized")
    smaller = pod_json("resized", cpu="1", uid=big["metadata"]["uid"])
    world.kube.add("pods", smaller)
    world.clock.advance(10)
    result = provision(runtime, world.clock.now())
    assert [launch.pods for launch in result.launched] == [("default/resized",)] and not result.unschedulable


def test_a_malformed_pod_is_reported_and_does_not_block_the_others(world: FakeWorld) -> None:
    setup_cluster(world, pods=2)
    world.kube.add("pods", pod_json("broken", cpu="lots"))
    result = provision(world.runtime(), world.clock.now())
    assert len(result.launched) == 1 and result.pending_pods == 2
    assert any("broken" in message and "cpu" in message for message in result.invalid_objects)
    (event,) = world.kube.events_for("broken", "FailedScheduling")
    assert "spec.containers[0].resources.requests.cpu" in event.message


def test_missing_node_class_is_explained_and_marks_the_pool_not_ready(world: FakeWorld) -> None:
    world.kube.add("node_pools", node_pool_json(node_class="absent"))
    world.kube.add("pods", pod_json("web"))
    result = provision(world.runtime(), world.clock.now())
    assert not result.launched and result.reason_for("default/web")
    (name, status) = world.kube.status_patches[-1]
    ready = status["conditions"][-1]
    assert name == "default" and ready["status"] == "False" and "absent" in ready["message"]


def test_an_invalid_node_pool_is_reported_on_the_object_and_in_its_status(world: FakeWorld) -> None:
    setup_cluster(world, pods=1)
    broken = node_pool_json("broken", limits={"cpu": "many"})
    world.kube.add("node_pools", broken)
    result = provision(world.runtime(), world.clock.now())
    assert len(result.launched) == 1  # the valid pool still works
    (event,) = world.kube.events_for("broken", "InvalidSpec")
    assert "spec.limits.cpu" in event.message and event.event_type == "Warning"
    status = dict(world.kube.status_patches)["broken"]
    assert status["conditions"][-1]["reason"] == "InvalidSpec" and "spec.limits.cpu" in status["conditions"][-1]["message"]


def test_node_pool_status_reports_nodes_and_resources_and_is_not_rewritten_unchanged(world: FakeWorld) -> None:
    setup_cluster(world, pods=0)
    world.kube.add("nodes", node_json("n1", instance_id="i-0123", labels={wk.NODEPOOL: "default"}, cpu="2", memory="4Gi"))
    runtime = world.runtime()
    provision(runtime, world.clock.now())
    (name, status) = world.kube.status_patches[-1]
    assert status["nodes"] == 1 and status["resources"]["cpu"] == "2" and status["resources"]["nodes"] == "1"
    assert status["conditions"][-1]["status"] == "True"
    provision(runtime, world.clock.now())
    assert len(world.kube.status_patches) == 1


# ---------------------------------------------------------------- the scanner loop


def test_economy_mode_runs_one_round(world: FakeWorld) -> None:
    setup_cluster(world, pods=1)
    summary = run_scanner(world.runtime(), "economy")
    assert summary.rounds == 1 and summary.to_dict()["claimsLaunched"] == 1 and not world.clock.sleeps


def test_responsive_mode_batches_a_burst_into_one_round(world: FakeWorld) -> None:
    setup_cluster(world, pods=0)
    start = world.clock.now()
    arrivals = {10: ["a-0", "a-1"], 11: ["a-2"], 12: ["a-3"]}

    def sleep(seconds: float) -> None:
        world.clock.sleep(seconds)
        elapsed = round((world.clock.now() - start).total_seconds())
        for name in arrivals.pop(elapsed, []):
            world.kube.add("pods", pod_json(name, cpu="500m", memory="128Mi"))

    summary = run_scanner(world.runtime(), "responsive", sleep=sleep)

    assert summary.rounds == 2  # the opening round and one for the burst
    burst = summary.results[1]
    assert burst.pending_pods == 4 and len(burst.launched) == 1 and len(burst.launched[0].pods) == 4
    assert 55 - 2 <= (world.clock.now() - start).total_seconds() <= 55
    assert world.state.lease_holder(LEASE_NAME) is None


def test_responsive_mode_does_not_wait_longer_than_batch_max(world: FakeWorld) -> None:
    setup_cluster(world, pods=0)
    start = world.clock.now()
    times: list[float] = []

    def sleep(seconds: float) -> None:
        world.clock.sleep(seconds)
        elapsed = round((world.clock.now() - start).total_seconds())
        if 5 <= elapsed <= 30:  # a new pod every second for 25 s
            world.kube.add("pods", pod_json(f"p-{elapsed}", cpu="100m", memory="64Mi"))

    runtime = world.runtime(settings=world.settings(batch_max_seconds=10))
    original = runtime.state.acquire_lease

    def recording(*args: object, **kwargs: object) -> bool:
        times.append((world.clock.now() - start).total_seconds())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    runtime.state.acquire_lease = recording  # type: ignore[method-assign]
    summary = run_scanner(runtime, "responsive", sleep=sleep)
    # first pod at 5 s, then one every second: a round at most 10 s after a batch began
    assert times[:4] == [0, 15, 26, 31]
    assert summary.rounds >= 4


def test_responsive_mode_stops_before_the_lambda_timeout(world: FakeWorld) -> None:
    setup_cluster(world, pods=0)
    start = world.clock.now()
    deadline = start + timedelta(seconds=30)

    def remaining_ms() -> int:
        return int((deadline - world.clock.now()).total_seconds() * 1000)

    run_scanner(world.runtime(), "responsive", remaining_ms=remaining_ms)
    assert (deadline - world.clock.now()).total_seconds() >= 14  # ROUND_RESERVE_SECONDS left over


def test_responsive_mode_keeps_scanning_after_a_failed_round(world: FakeWorld) -> None:
    setup_cluster(world, pods=1)
    world.kube.fail("list_pages(pods)")
    summary = run_scanner(world.runtime(), "responsive")
    assert summary.errors == 1 and summary.rounds >= 1
    assert summary.to_dict()["claimsLaunched"] == 1
    assert world.metrics.total("ScanErrors") == 1


# ---------------------------------------------------------------- the fake state keeps the adapter's promises


@pytest.fixture(scope="module")
def dynamodb_clients():  # type: ignore[no-untyped-def]
    from moto import mock_aws

    from joiner.adapters.aws import AwsClients
    from testworld.aws import REGION, fake_credentials

    with fake_credentials(), mock_aws():
        yield AwsClients(REGION)


_tables = itertools.count()


@pytest.fixture(params=["fake", "dynamodb"])
def any_state(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """The same assertions hold for the fake and for the DynamoDB adapter (on moto)."""
    if request.param == "fake":
        return FakeState()
    from joiner.adapters.state import StateAdapter
    from testworld.aws import create_state_table

    clients = request.getfixturevalue("dynamodb_clients")
    name = create_state_table(clients.dynamodb, f"contract-{next(_tables)}")
    return StateAdapter(clients.table(name), FakeClock(), open_index_settle=timedelta(0))  # open claims from the index


def test_state_contract_claims(any_state) -> None:  # type: ignore[no-untyped-def]
    now = EPOCH
    claim = ClaimRecord("default-1", "default", "reserved", now, pods=("default/a",), reserved=Resources({"cpu": 2000}))
    assert any_state.put_claim(claim) is True
    assert any_state.put_claim(claim) is False
    updated = any_state.update_claim("default-1", state="launched", instance_id="i-1", launched_at=now)
    assert updated.state == "launched" and updated.instance_id == "i-1" and updated.reserved == Resources({"cpu": 2000})
    assert any_state.claim_by_instance("i-1").claim_id == "default-1"
    with pytest.raises(LookupError):
        any_state.update_claim("missing", state="closed")
    any_state.update_claim("default-1", state="closed", closed_at=now, reason="test")
    assert any_state.open_claims() == [] and any_state.get_claim("default-1").state == "closed"
    assert any_state.get_claim("default-1").pool_hash == ""
    any_state.put_claim(ClaimRecord("default-2", "default", "reserved", now, pool_hash="0123456789abcdef", class_hash="fedcba9876543210"))
    stored = any_state.get_claim("default-2")
    assert (stored.pool_hash, stored.class_hash) == ("0123456789abcdef", "fedcba9876543210")


def test_state_contract_reservations(any_state) -> None:  # type: ignore[no-untyped-def]
    limits = Resources({"cpu": 6000})
    two = Resources({"cpu": 2000, "memory": 4 * 2**30 * 1000})
    assert any_state.reserve_capacity("p", "a", two, limits, Resources({"cpu": 2000}))
    assert any_state.reserve_capacity("p", "b", two, limits, Resources({"cpu": 2000}))
    assert not any_state.reserve_capacity("p", "c", two, limits, Resources({"cpu": 2000}))  # 2 + 4 + 2 > 6
    assert any_state.reserve_capacity("p", "a", two, limits, Resources({"cpu": 6000}))  # idempotent per claim
    assert any_state.reserved_capacity("p")["cpu"] == 4000
    any_state.release_capacity("p", "a")
    any_state.release_capacity("p", "a")
    assert any_state.reserved_capacity("p")["cpu"] == 2000
    assert any_state.reserve_capacity("p", "c", two, limits, Resources({"cpu": 2000}))
    assert any_state.reserve_capacity("q", "x", two, None, Resources())  # no limits: always
    zero = Resources.keeping_zeros({"cpu": 0})
    assert not any_state.reserve_capacity("r", "y", two, zero, Resources())


def test_state_contract_shrinking_a_reservation(any_state) -> None:  # type: ignore[no-untyped-def]
    from joiner.ports import StateError

    four = Resources({"cpu": 4000, "nodes": 1000})
    two = Resources({"cpu": 2000, "nodes": 1000})
    assert any_state.reserve_capacity("p", "a", four, None, Resources())
    assert any_state.reserve_capacity("p", "b", two, None, Resources())
    any_state.shrink_reservation("p", "a", two)
    assert any_state.reservations("p") == {"a": two, "b": two}
    assert any_state.reserved_capacity("p") == Resources({"cpu": 4000, "nodes": 2000})
    with pytest.raises(StateError):
        any_state.shrink_reservation("p", "a", four)  # never grows: that would skip the limit check
    any_state.shrink_reservation("p", "unknown", two)  # nothing held: nothing to do
    any_state.release_capacity("p", "a")
    any_state.shrink_reservation("p", "a", Resources({"cpu": 1000}))  # released meanwhile: a no-op
    assert any_state.reservations("p") == {"b": two} and any_state.reserved_capacity("p") == two


def test_state_contract_open_claims_follow_each_claims_state(any_state) -> None:  # type: ignore[no-untyped-def]
    now = EPOCH
    for claim_id in ("p-1", "p-2", "p-3"):
        any_state.put_claim(ClaimRecord(claim_id, "p", "reserved", now))
    assert {c.claim_id for c in any_state.open_claims()} == {"p-1", "p-2", "p-3"}  # the writer sees its writes at once
    any_state.update_claim("p-2", state="closed", closed_at=now, reason="test")
    any_state.update_claim("p-3", state="launched", instance_id="i-3")
    assert {c.claim_id: c.state for c in any_state.open_claims()} == {"p-1": "reserved", "p-3": "launched"}
    any_state.update_claim("p-2", state="terminating")  # re-opened
    assert {c.claim_id for c in any_state.open_claims()} == {"p-1", "p-2", "p-3"}
    any_state.put_claim(ClaimRecord("p-4", "p", "closed", now, closed_at=now))
    assert "p-4" not in {c.claim_id for c in any_state.open_claims()}


def test_state_contract_reservations_add_up_to_the_total(any_state) -> None:  # type: ignore[no-untyped-def]
    limits = Resources({"cpu": 8000})
    three, two = Resources({"cpu": 3000, "nodes": 1000}), Resources({"cpu": 2000, "nodes": 1000})
    assert any_state.reserve_capacity("p", "a", three, limits, Resources())
    assert any_state.reserve_capacity("p", "b", three, limits, Resources())
    any_state.release_capacity("p", "a")
    assert any_state.reserve_capacity("p", "a", two, limits, Resources())  # released, then reserved anew: the new amount
    assert not any_state.reserve_capacity("p", "c", three, limits, Resources({"cpu": 1000}))  # 5 + 3 + 1 > 8
    any_state.shrink_reservation("p", "b", Resources({"cpu": 1000}))  # a resource left out is returned whole
    held = any_state.reservations("p")
    assert held == {"a": two, "b": Resources({"cpu": 1000})}
    assert any_state.reserved_capacity("p") == sum(held.values(), Resources()) == Resources({"cpu": 3000, "nodes": 1000})
    for claim_id in ("a", "b", "a"):
        any_state.release_capacity("p", claim_id)
    assert any_state.reservations("p") == {} and any_state.reserved_capacity("p") == Resources()


def test_state_contract_lease_and_unavailable(any_state) -> None:  # type: ignore[no-untyped-def]
    now = EPOCH
    assert any_state.acquire_lease("provisioning", "a", now, 60)
    assert not any_state.acquire_lease("provisioning", "b", now + timedelta(seconds=59), 60)
    assert any_state.acquire_lease("provisioning", "a", now + timedelta(seconds=30), 60)  # renew
    assert not any_state.acquire_lease("provisioning", "b", now + timedelta(seconds=89), 60)
    assert any_state.acquire_lease("provisioning", "b", now + timedelta(seconds=91), 60)
    any_state.release_lease("provisioning", "a")  # not the holder: no effect
    assert not any_state.acquire_lease("provisioning", "a", now + timedelta(seconds=92), 60)
    any_state.release_lease("provisioning", "b")
    assert any_state.acquire_lease("provisioning", "a", now + timedelta(seconds=93), 60)

    key = OfferingKey("c5.large", "us-east-1a", "spot")
    any_state.mark_unavailable(key, now + UNAVAILABLE_FOR, "InsufficientInstanceCapacity")
    assert any_state.unavailable_offerings(now + timedelta(seconds=179)) == frozenset({key})
    assert any_state.unavailable_offerings(now + timedelta(seconds=181)) == frozenset()


# ---------------------------------------------------------------- end to end: moto over HTTP + the Kubernetes emulator


E2E_CLUSTER = "test-cluster"
E2E_TABLE = "joiner-state"


@pytest.fixture(scope="module")
def moto_server():  # type: ignore[no-untyped-def]
    from testworld.aws import SerialMotoServer, fake_credentials

    with fake_credentials():
        server = SerialMotoServer()
        server.start()
        try:
            yield server
        finally:
            server.stop()


class E2E:
    """A cluster on moto (EC2, SSM, EKS, DynamoDB over HTTP) and the Kubernetes emulator,
    driven through the real adapters."""

    def __init__(self, server, emulator) -> None:  # type: ignore[no-untyped-def]
        import urllib3

        from joiner.adapters.aws import AwsClients
        from testworld.aws import REGION, create_eks_cluster, create_network, create_state_table, moto_amis, put_eks_ami_parameters

        urllib3.PoolManager().request("POST", f"{server.endpoint}/moto-api/reset")
        self.server = server
        self.emulator = emulator
        self.clock = FakeClock()
        self.metrics = RecordingMetrics()
        self.clients = AwsClients(REGION, server.endpoint)
        self.network = create_network(self.clients.ec2, E2E_CLUSTER)
        create_eks_cluster(self.clients.eks, E2E_CLUSTER, list(self.network.subnets.values()))
        put_eks_ami_parameters(moto_amis(self.clients.ec2))
        create_state_table(self.clients.dynamodb, E2E_TABLE)
        self.kube_sleeps: list[float] = []
        self.kube_clients: list = []
        emulator.apply(node_class_json(discovery=E2E_CLUSTER))

    def runtime(self, invocation_id: str = "invocation-1", *, clock: FakeClock | None = None, clients=None, catalog=None):  # type: ignore[no-untyped-def]
        from joiner.adapters.ec2 import Ec2Adapter
        from joiner.adapters.kubernetes import KubernetesClient
        from joiner.adapters.state import StateAdapter
        from joiner.services.context import build_runtime
        from joiner.settings import Settings
        from testworld.aws import REGION

        clock = clock or self.clock
        clients = clients or self.clients
        kube = KubernetesClient(self.emulator.url, sleep=self.kube_sleeps.append, random=lambda: 1.0, timeout=(2.0, 5.0))
        self.kube_clients.append(kube)
        settings = Settings(
            cluster_name=E2E_CLUSTER,
            region=REGION,
            state_table=E2E_TABLE,
            idempotency_table=E2E_TABLE,
            kubernetes_host=self.emulator.url,
            aws_endpoint_url=self.server.endpoint,
        )
        return build_runtime(
            settings,
            kube_port=kube,
            ec2_port=Ec2Adapter(clients.ec2, clients.ssm, clients.eks, E2E_CLUSTER, clock, default_instance_profile=f"JoinerNodeRole-{E2E_CLUSTER}"),
            state_port=StateAdapter(clients.table(E2E_TABLE), clock),
            catalog_value=catalog or small_catalog(),
            clock=clock,
            sleep=clock.sleep,
            metric=self.metrics,
            invocation_id=invocation_id,
        )

    def instances(self) -> list[dict]:
        reservations = self.clients.ec2.describe_instances(
            Filters=[{"Name": "tag:joiner.dev/cluster", "Values": [E2E_CLUSTER]}, {"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )["Reservations"]
        return sorted((i for r in reservations for i in r["Instances"]), key=lambda i: i["InstanceId"])

    def close(self) -> None:
        for kube in self.kube_clients:
            kube.close()


@pytest.fixture
def e2e(moto_server, kube_emulator):  # type: ignore[no-untyped-def]
    world = E2E(moto_server, kube_emulator)
    yield world
    world.close()


def tags_of(instance: dict) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


@pytest.mark.slow
def test_e2e_pending_pods_launch_tagged_instances_that_register(e2e: E2E) -> None:
    import base64

    e2e.emulator.apply(node_pool_json(labels={"team": "a"}))
    for index in range(3):
        e2e.emulator.apply(pod_json(f"web-{index}", cpu="1", memory="256Mi"))

    first = provision(e2e.runtime("invocation-1"), e2e.clock.now())
    (launched,) = first.launched
    (instance,) = e2e.instances()
    tags = tags_of(instance)
    assert instance["InstanceId"] == launched.instance_id and instance["InstanceType"] == "c5.xlarge"
    assert instance["SubnetId"] in e2e.network.subnets.values()  # never the untagged decoy subnet
    assert tags["joiner.dev/nodeclaim"] == launched.claim_id and tags["joiner.dev/nodepool"] == "default"
    assert tags["joiner.dev/cluster"] == E2E_CLUSTER and tags[f"kubernetes.io/cluster/{E2E_CLUSTER}"] == "owned"
    assert tags["joiner.dev/managed-by"] == E2E_CLUSTER and tags["Name"] == f"{E2E_CLUSTER}/default"
    template = instance.get("LaunchTemplate") or {}
    versions = e2e.clients.ec2.describe_launch_template_versions(
        LaunchTemplateId=template.get("LaunchTemplateId") or e2e.clients.ec2.describe_launch_templates()["LaunchTemplates"][0]["LaunchTemplateId"]
    )
    user_data = base64.b64decode(versions["LaunchTemplateVersions"][0]["LaunchTemplateData"]["UserData"]).decode()
    assert E2E_CLUSTER in user_data and "joiner.dev/nodepool=default" in user_data and "team=a" in user_data
    claim = e2e.runtime().state.get_claim(launched.claim_id)
    assert claim is not None and claim.state == "launched" and claim.instance_id == launched.instance_id
    nominated = [e for e in e2e.emulator.list("Event") if e["reason"] == "Nominated"]
    assert sorted(e["involvedObject"]["name"] for e in nominated) == ["web-0", "web-1", "web-2"]

    # a duplicate invocation for the same pods launches nothing
    e2e.clock.advance(20)
    second = provision(e2e.runtime("invocation-2"), e2e.clock.now())
    assert not second.launched and second.pending_pods == 3 and len(e2e.instances()) == 1

    # the kubelet registers; the next round records it and labels the Node
    e2e.emulator.apply(node_json("ip-10-0-1-5", instance_id=launched.instance_id, zone=launched.zone, instance_type="c5.xlarge", cpu="4", memory="8Gi"))
    e2e.clock.advance(40)
    third = provision(e2e.runtime("invocation-3"), e2e.clock.now())
    assert third.registration.registered == (launched.claim_id,) and third.registration.initialized == (launched.claim_id,)
    labels = e2e.emulator.get("Node", "ip-10-0-1-5")["metadata"]["labels"]
    assert labels[wk.NODECLAIM] == launched.claim_id and labels[wk.NODEPOOL] == "default" and labels[wk.INITIALIZED] == "true"
    status = e2e.emulator.get("NodePool", "default")["status"]
    assert status["nodes"] == 1 and status["resources"]["cpu"] == "4"


@pytest.mark.slow
def test_e2e_capacity_errors_fall_back_in_the_same_invocation(e2e: E2E) -> None:
    from tests.support.aws import inject_capacity_errors

    e2e.emulator.apply(spot_and_on_demand_pool())
    e2e.emulator.apply(pod_json("web", cpu="1", memory="256Mi"))
    runtime = e2e.runtime()
    ec2_client = e2e.clients.ec2
    injector = inject_capacity_errors(ec2_client, lambda instance_type, zone: injector.calls == 1)  # the first call: nothing anywhere
    try:
        result = provision(runtime, e2e.clock.now())
    finally:
        ec2_client.meta.events.unregister("before-call.ec2.CreateFleet", injector.before_call)
        ec2_client.meta.events.unregister("after-call.ec2.CreateFleet", injector.after_call)

    assert injector.calls == 2
    (launched,) = result.launched
    assert launched.capacity_type == "on-demand" and launched.attempts == 2
    (instance,) = e2e.instances()
    assert instance.get("InstanceLifecycle") != "spot"
    assert tags_of(instance)["joiner.dev/client-token"] == client_token(launched.claim_id, 1)
    unavailable = runtime.state.unavailable_offerings(e2e.clock.now())
    assert OfferingKey("c5.large", "us-east-1a", "spot") in unavailable and all(k.capacity_type == "spot" for k in unavailable)
    assert runtime.state.unavailable_offerings(e2e.clock.now() + UNAVAILABLE_FOR) == frozenset()


@pytest.mark.slow
def test_e2e_api_faults_are_retried_then_reported(e2e: E2E, monkeypatch: pytest.MonkeyPatch) -> None:
    from joiner.ports import KubernetesError
    from tests.support.aws import ErrorInjector, inject_error

    botocore_sleeps: list[float] = []
    monkeypatch.setattr("botocore.endpoint.time.sleep", botocore_sleeps.append)
    e2e.emulator.apply(node_pool_json(limits={"cpu": "100"}))
    e2e.emulator.apply(pod_json("web", cpu="1", memory="256Mi"))

    # transient: two 500s listing pods and two throttled CreateFleet attempts are absorbed by retries
    e2e.emulator.fail_next("GET", "/api/v1/pods", status=500, times=2)
    transient = inject_error(e2e.clients.ec2, "CreateFleet", ErrorInjector(failures=2))
    try:
        result = provision(e2e.runtime("invocation-1"), e2e.clock.now())
    finally:
        e2e.clients.ec2.meta.events.unregister("before-send.ec2.CreateFleet", transient)
    assert len(result.launched) == 1 and transient.attempts == 3 and len(e2e.kube_sleeps) == 2
    reserved_before = e2e.runtime().state.reserved_capacity("default")
    assert reserved_before["cpu"] == 2000  # shrunk from the largest candidate to the c5.large launched

    # persistent throttling: reported on the pod and in metrics, the reservation returned
    e2e.emulator.apply(pod_json("late", cpu="1", memory="256Mi", node_selector={"topology.kubernetes.io/zone": "us-east-1c"}))
    persistent = inject_error(e2e.clients.ec2, "CreateFleet", ErrorInjector())
    e2e.clock.advance(30)
    runtime = e2e.runtime("invocation-2")
    try:
        failed = provision(runtime, e2e.clock.now())
    finally:
        e2e.clients.ec2.meta.events.unregister("before-send.ec2.CreateFleet", persistent)
    assert persistent.attempts == 5 and not failed.launched
    assert [f.reason for f in failed.failures] == ["RequestLimitExceeded"]
    events = [e for e in e2e.emulator.list("Event") if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "late"]
    assert len(events) == 1 and "RequestLimitExceeded" in events[0]["message"]
    assert runtime.state.reserved_capacity("default") == reserved_before  # the failed claim's was returned

    # the Kubernetes API down for longer than the client's retries: the round fails loudly
    e2e.emulator.fail_next("GET", "/api/v1/pods", status=500, times=10)
    with pytest.raises(KubernetesError) as error:
        provision(e2e.runtime("invocation-3"), e2e.clock.now())
    assert error.value.status == 500
    assert runtime.state.acquire_lease(LEASE_NAME, "someone-else", e2e.clock.now(), 60)  # released despite the failure


@pytest.mark.slow
def test_e2e_two_scanners_racing_never_exceed_the_limit_nor_launch_twice(e2e: E2E) -> None:
    """Two invocations in threads against DynamoDB/EC2 over HTTP; B's clock is past A's
    lease, so both run their rounds at the same time."""
    from joiner.adapters.aws import AwsClients
    from testworld.aws import REGION

    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}], limits={"cpu": "6"})
    e2e.emulator.apply(pool)
    for index in range(8):
        e2e.emulator.apply(pod_json(f"web-{index}", cpu="1500m", memory="256Mi"))
    runtimes = [
        e2e.runtime("scanner-a", clock=FakeClock(EPOCH), clients=AwsClients(REGION, e2e.server.endpoint)),
        e2e.runtime("scanner-b", clock=FakeClock(EPOCH + timedelta(minutes=2)), clients=AwsClients(REGION, e2e.server.endpoint)),
    ]
    a_holds_lease = threading.Event()
    runtimes[0].kube_port = Signalling(runtimes[0].kube_port, a_holds_lease)
    results: list = []
    errors: list = []

    def scan(runtime) -> None:  # type: ignore[no-untyped-def]
        try:
            results.append(provision(runtime, runtime.clock.now()))
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=scan, args=(r,)) for r in runtimes]
    threads[0].start()
    assert a_holds_lease.wait(timeout=10)
    e2e.emulator.apply(pod_json("web-8", cpu="1500m", memory="256Mi"))  # B reads a later cluster
    threads[1].start()
    for thread in threads:
        thread.join(timeout=60)

    assert not errors and len(results) == 2 and all(r.ran for r in results)
    instances = e2e.instances()
    assert len(instances) <= 3  # 6 CPU of c5.large
    claims = [tags_of(i)["joiner.dev/nodeclaim"] for i in instances]
    assert len(claims) == len(set(claims))  # never two instances for one claim
    assert runtimes[0].state.reserved_capacity("default")["cpu"] <= 6000


@pytest.mark.slow
def test_e2e_a_paused_round_and_a_registration_in_between_never_exceed_the_limit(e2e: E2E) -> None:
    """Issue 10, defect 3 over HTTP: round A (its own DynamoDB client) is held by a botocore
    hook just before its conditional reservation, after reading the cluster without C1's
    Node. C1's Node registers; round B registers it and launches. A's reservation must fail."""
    from joiner.adapters.aws import AwsClients
    from testworld.aws import REGION

    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}], limits={"cpu": "4"})
    e2e.emulator.apply(pool)
    e2e.emulator.apply(pod_json("web-0", cpu="1500m", memory="256Mi"))
    (c1,) = provision(e2e.runtime("round-0"), e2e.clock.now()).launched
    e2e.emulator.apply(pod_json("a-only", cpu="1500m", memory="256Mi"))

    clients_a = AwsClients(REGION, e2e.server.endpoint)
    paused, resume = threading.Event(), threading.Event()

    def hold_reservation(params: dict, **_: object) -> None:
        """The reservation: one transaction of the claim's reservation item and the pool total."""

        def key(action: dict) -> str:
            body = next(iter(action.values()))
            pk = (body.get("Key") or body.get("Item") or {}).get("pk")
            return str(pk.get("S", "") if isinstance(pk, dict) else pk)

        reserving = any(key(action).startswith("POOL#") and "Put" in action for action in params.get("TransactItems", []))
        if reserving and not paused.is_set():
            paused.set()
            assert resume.wait(timeout=30)

    clients_a.table(E2E_TABLE).meta.client.meta.events.register("before-parameter-build.dynamodb.TransactWriteItems", hold_reservation)
    start = e2e.clock.now() + timedelta(seconds=30)
    runtime_a = e2e.runtime("round-a", clock=FakeClock(start), clients=clients_a)
    results: dict[str, object] = {}
    thread_a = threading.Thread(target=lambda: results.setdefault("a", provision(runtime_a, start)))
    thread_a.start()
    assert paused.wait(timeout=30)

    e2e.emulator.apply(node_json("node-c1", instance_id=c1.instance_id, zone=c1.zone, instance_type="c5.large", cpu="2", memory="4Gi"))
    e2e.emulator.delete("Pod", "web-0", "default")  # kube-scheduler binds it (the emulator: re-created bound)
    e2e.emulator.apply(pod_json("web-0", cpu="1500m", memory="256Mi", node_name="node-c1"))
    e2e.emulator.delete("Pod", "a-only", "default")
    e2e.emulator.apply(pod_json("b-only", cpu="1500m", memory="256Mi"))
    e2e.clock.advance(30 + LEASE_TTL_SECONDS + 1)
    second = provision(e2e.runtime("round-b"), e2e.clock.now())
    assert second.registration.registered == (c1.claim_id,) and len(second.launched) == 1

    resume.set()
    thread_a.join(timeout=60)
    assert not thread_a.is_alive()
    running = e2e.instances()
    assert len(running) == 2 and all(i["InstanceType"] == "c5.large" for i in running)  # 4 CPU
    assert [f.reason for f in results["a"].failures] == ["LimitReached"]  # type: ignore[attr-defined]


def _item_pk(params: dict) -> str:
    pk = (params.get("Item") or params.get("Key") or {}).get("pk")
    return str(pk.get("S", "") if isinstance(pk, dict) else pk or "")


def test_e2e_a_claim_record_that_cannot_be_written_holds_no_reservation(e2e: E2E) -> None:
    """DynamoDB refuses the claim records (throttled past botocore's retries): the round fails
    for those claims, and nothing it reserved outlives it, so two other 1.5-CPU pods fit a
    4-CPU limit five minutes later (and the pool's reserved total is its open claims')."""
    from botocore.exceptions import ClientError

    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]}], limits={"cpu": "4"})
    e2e.emulator.apply(pool)
    for name in ("web-0", "web-1"):
        e2e.emulator.apply(pod_json(name, cpu="1500m", memory="256Mi"))

    def throttle_claims(params: dict, **_: object) -> None:
        if _item_pk(params).startswith("CLAIM#"):
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"}}, "PutItem")

    events = e2e.clients.table(E2E_TABLE).meta.client.meta.events
    events.register("before-parameter-build.dynamodb.PutItem", throttle_claims)
    try:
        with contextlib.suppress(Exception):
            first = provision(e2e.runtime("round-0"), e2e.clock.now())
            assert not first.launched
    finally:
        events.unregister("before-parameter-build.dynamodb.PutItem", throttle_claims)
    assert e2e.instances() == []

    for name in ("web-0", "web-1"):
        e2e.emulator.delete("Pod", name, "default")
    for name in ("job-0", "job-1"):
        e2e.emulator.apply(pod_json(name, cpu="1500m", memory="256Mi"))
    e2e.clock.advance(5 * 60)
    later = provision(e2e.runtime("round-1"), e2e.clock.now())
    assert not [f.reason for f in later.failures] and len(later.launched) == 2
    state = e2e.runtime("check").state
    held = state.reservations("default")
    assert set(held) == {c.claim_id for c in state.open_claims()}
    assert state.reserved_capacity("default")["cpu"] == sum(r["cpu"] for r in held.values()) == 4000


def test_e2e_a_lagging_open_claims_index_never_buys_the_same_pods_twice(e2e: E2E) -> None:
    """Container A launches a claim for two pods; a third pod arrives and container B's round
    runs while DynamoDB's open-claims index does not show A's claim yet (real GSIs lag; moto's
    never do, so the lag is injected on B's client). The three pods would make one claim of
    another id: B must see A's claim in flight and buy nothing more."""
    from joiner.adapters.aws import AwsClients
    from joiner.adapters.state import OPEN_INDEX_SETTLE
    from testworld.aws import REGION

    pool = node_pool_json(requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.2xlarge"]}])
    e2e.emulator.apply(pool)
    e2e.runtime("first-deployment").state.open_claims()  # the table's first read starts the index's settle period
    e2e.clock.advance(OPEN_INDEX_SETTLE.total_seconds() + 1)
    for name in ("web-0", "web-1"):
        e2e.emulator.apply(pod_json(name, cpu="1500m", memory="256Mi"))
    (first,) = provision(e2e.runtime("container-a"), e2e.clock.now()).launched
    e2e.emulator.apply(pod_json("web-2", cpu="1500m", memory="256Mi"))

    def index_lags(parsed: dict, **_: object) -> None:
        if parsed.get("Items") is not None:
            parsed["Items"] = [item for item in parsed["Items"] if item.get("sk", {}).get("S") != "CLAIM"]

    clients_b = AwsClients(REGION, e2e.server.endpoint)
    clients_b.table(E2E_TABLE).meta.client.meta.events.register_first("after-call.dynamodb.Query", index_lags)
    e2e.clock.advance(LEASE_TTL_SECONDS + 1)
    second = provision(e2e.runtime("container-b", clients=clients_b), e2e.clock.now())

    promised = [pod for claim in e2e.runtime("check").state.open_claims() for pod in claim.pods]
    assert len(promised) == len(set(promised)), promised  # no pod promised to two open claims
    assert not second.launched and len(e2e.instances()) == 1  # the third pod fits the c5.2xlarge in flight


@pytest.mark.slow
def test_e2e_a_launch_template_deleted_behind_the_adapters_back_is_recreated_in_the_same_round(e2e: E2E) -> None:
    e2e.emulator.apply(node_pool_json())
    e2e.emulator.apply(pod_json("web", cpu="1", memory="256Mi"))
    runtime = e2e.runtime()  # one execution environment for both rounds: its caches hold the template
    first = provision(runtime, e2e.clock.now())
    (launched,) = first.launched
    (template,) = e2e.clients.ec2.describe_launch_templates(Filters=[{"Name": "tag:joiner.dev/cluster", "Values": [E2E_CLUSTER]}])["LaunchTemplates"]
    e2e.clients.ec2.delete_launch_template(LaunchTemplateId=template["LaunchTemplateId"])  # gc, in its own function

    e2e.clock.advance(20)  # the 60 s cache still names the deleted template
    e2e.emulator.apply(pod_json("api", cpu="3", memory="256Mi"))  # does not fit the first claim
    second = provision(runtime, e2e.clock.now())

    assert not second.failures and not second.unschedulable
    (relaunched,) = second.launched
    assert relaunched.claim_id != launched.claim_id and relaunched.attempts == 1
    (recreated,) = e2e.clients.ec2.describe_launch_templates(Filters=[{"Name": "tag:joiner.dev/cluster", "Values": [E2E_CLUSTER]}])["LaunchTemplates"]
    assert recreated["LaunchTemplateName"] == template["LaunchTemplateName"]
    assert recreated["LaunchTemplateId"] != template["LaunchTemplateId"]
    instances = {i["InstanceId"]: i for i in e2e.instances()}
    assert set(instances) == {launched.instance_id, relaunched.instance_id}
    assert tags_of(instances[relaunched.instance_id])["joiner.dev/client-token"] == client_token(relaunched.claim_id, 0)
    claim = runtime.state.get_claim(relaunched.claim_id)
    assert claim is not None and claim.state == "launched" and claim.instance_id == relaunched.instance_id


def test_the_fleet_request_leaves_out_metal_and_accelerator_types_the_pods_do_not_need() -> None:
    """Karpenter's ExoticInstanceTypeFilter: the bundled catalog's 60 cheapest fitting types for
    a 40-CPU pod include metal and GPU types; none is in the request."""
    from joiner.domain.catalog import load_bundled_catalog

    world = fake_world(catalog=load_bundled_catalog())
    world.kube.add("node_classes", node_class_json(discovery=world.cluster))
    world.kube.add(
        "node_pools",
        node_pool_json(
            requirements=[
                {"key": "joiner.dev/instance-cpu", "operator": "Gt", "values": ["40"]},
            ]
        ),
    )
    world.kube.add("pods", pod_json("big", cpu="40", memory="64Gi"))
    result = provision(world.runtime(), world.clock.now())
    assert len(result.launched) == 1, result
    (request,) = world.ec2.fleet_requests
    offered = {o.instance_type for o in request.overrides}
    assert offered and not any("metal" in name for name in offered)
    assert not any(name.startswith(("g4", "g5", "g6", "p3", "p4", "p5", "inf", "trn", "dl1")) for name in offered)


def test_a_pool_requiring_dedicated_tenancy_launches_dedicated_instances(world: FakeWorld) -> None:
    """Karpenter's instance-tenancy requirement: Placement.Tenancy dedicated in the launch
    template, and the Node labelled with it; a pool allowing both launches default tenancy."""
    dedicated = node_pool_json(requirements=[{"key": "karpenter.k8s.aws/instance-tenancy", "operator": "In", "values": ["dedicated"]}])
    setup_cluster(world, pods=1, pool=dedicated)
    result = provision(world.runtime(), world.clock.now())
    assert len(result.launched) == 1 and not result.unschedulable
    inputs = world.ec2.template_inputs[world.ec2.fleet_requests[0].launch_template.id]
    assert inputs["tenancy"] == "dedicated"
    assert inputs["labels"][wk.INSTANCE_TENANCY] == "dedicated" and inputs["labels"]["karpenter.k8s.aws/instance-tenancy"] == "dedicated"


def test_the_default_tenancy_template_and_the_zone_id_label(world: FakeWorld) -> None:
    from joiner.ports import ClaimRecord
    from joiner.services.registration import claim_labels

    setup_cluster(world, pods=1)
    provision(world.runtime(), world.clock.now())
    inputs = world.ec2.template_inputs[world.ec2.fleet_requests[0].launch_template.id]
    assert inputs["tenancy"] == "default" and inputs["labels"][wk.INSTANCE_TENANCY] == "default"
    claim = ClaimRecord(claim_id="c-1", node_pool="default", state="registered", created_at=world.clock.now(), zone="us-east-1b")
    labels = claim_labels(claim, initialized=False, zone_ids=world.ec2.zone_ids())
    assert labels[wk.ZONE_ID] == "use1-az2" and labels["topology.ebs.csi.aws.com/zone"] == "us-east-1b"
