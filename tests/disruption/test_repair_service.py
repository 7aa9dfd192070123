"""Node repair and static NodePools in the disruption pass, on the in-memory fakes: a repair
launches its replacement, says which condition and for how long (event and metrics) and drains
at once; the 20 % rule writes NodeRepairBlocked; a static NodePool's surplus goes whatever the
budgets; an expired static node is replaced by a replica of its pool."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from joiner.domain import labels as wk
from joiner.ports import ClaimRecord
from joiner.services.disruption import run_disruption
from joiner.services.launcher import claim_id_for
from joiner.services.static_pools import static_identity
from joiner.services.termination import TERMINATION_KIND
from tests.disruption.builders import managed_node, pool, running_pod
from tests.support.fakes import DrainingKubernetes, FakeWorld, fake_world, node_class_json

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


@pytest.fixture
def world() -> FakeWorld:
    built = fake_world()
    built.kube = DrainingKubernetes(built.clock)
    return built


def node(world: FakeWorld, name: str, *, pool_name: str = "default", bad: tuple[str, str, timedelta] | None = None, **kwargs: Any) -> None:
    obj = managed_node(name, "c5.xlarge", created=world.clock.now() - timedelta(hours=2), pool=pool_name, **kwargs)
    if bad is not None:
        condition, status, since = bad
        obj["status"]["conditions"] = [c for c in obj["status"]["conditions"] if c["type"] != condition] + [
            {"type": condition, "status": status, "lastTransitionTime": (world.clock.now() - since).isoformat()}
        ]
    world.kube.add("nodes", obj)
    instance_id = obj["spec"]["providerID"].rsplit("/", 1)[-1]
    world.ec2.add_instance(instance_id, "c5.xlarge")
    world.state.put_claim(
        ClaimRecord(
            claim_id=f"claim-{name}",
            node_pool=pool_name,
            state="initialized",
            created_at=world.clock.now(),
            instance_id=instance_id,
            instance_type="c5.xlarge",
            zone="us-east-1a",
            capacity_type="on-demand",
            node_name=name,
            price=0.17,
            initialized_at=world.clock.now(),
        )
    )


def two_passes(world: FakeWorld) -> Any:
    runtime = world.runtime()
    first = run_disruption(runtime)
    world.clock.advance(20)
    return first, run_disruption(runtime)


def test_an_unhealthy_node_is_replaced_then_drained_at_once_with_its_condition_reported(world: FakeWorld) -> None:
    world.kube.add("node_classes", node_class_json("default"))
    world.kube.add("node_pools", pool(budgets=[{"nodes": "0"}]))
    node(world, "bad", bad=("KernelReady", "False", timedelta(minutes=31)))
    node(world, "ok1")
    node(world, "ok2")
    for name in ("bad", "ok1", "ok2"):
        world.kube.add("pods", running_pod(f"p-{name}", name, cpu="3500m"))
    first, second = two_passes(world)
    assert [(c.method, c.nodes) for c in first.pending] == [("repair", ("bad",))]
    assert [(c.method, c.nodes) for c in second.executed] == [("repair", ("bad",))]
    assert world.ec2.fleet_requests, "the replacement is launched before the drain"
    (event,) = [e for e in world.kube.events if e.reason == "NodeRepair"]
    assert event.name == "bad" and event.event_type == "Warning"
    assert "KernelReady=False for 31m20s (repair after 30m)" in event.message
    assert world.metrics.total("NodesRepaired", condition="KernelReady=False", nodePool="default") == 1
    assert world.metrics.values("NodeRepairUnhealthySeconds") == [31 * 60 + 20]
    assert world.state.get_claim("claim-bad").state in ("terminating", "closed")


def test_too_many_unhealthy_nodes_block_the_repair_with_an_event(world: FakeWorld) -> None:
    world.kube.add("node_classes", node_class_json("default"))
    world.kube.add("node_pools", pool())
    node(world, "bad1", bad=("Ready", "Unknown", timedelta(hours=1)))
    node(world, "bad2", bad=("Ready", "False", timedelta(minutes=1)))
    node(world, "ok")
    first, _ = two_passes(world)
    assert all(c.method != "repair" for c in first.pending)
    blocked = [e for e in world.kube.events if e.reason == "NodeRepairBlocked"]
    assert [e.name for e in blocked] == ["bad1"] and blocked[0].event_type == "Warning"
    assert "2 of the 3 nodes of nodepool default are unhealthy" in blocked[0].message
    assert world.state.get_item(TERMINATION_KIND, "bad1") is None


def test_a_static_surplus_is_removed_whatever_the_budgets(world: FakeWorld) -> None:
    world.kube.add("node_classes", node_class_json("default"))
    world.kube.add("node_pools", pool("fixed", replicas=1, budgets=[{"nodes": "0"}]))
    for name in ("s1", "s2"):
        node(world, name, pool_name="fixed")
    world.kube.add("pods", running_pod("p", "s1"))
    _, second = two_passes(world)
    assert [(c.method, c.nodes) for c in second.executed] == [("overprovisioned", ("s2",))]
    assert world.state.get_claim("claim-s2").state in ("terminating", "closed")
    assert world.state.get_claim("claim-s1").state == "initialized"


def test_an_expired_static_node_is_replaced_by_a_replica_of_its_pool(world: FakeWorld) -> None:
    world.kube.add("node_classes", node_class_json("default"))
    world.kube.add("node_pools", pool("fixed", replicas=1, expire_after="1h"))
    node(world, "s1", pool_name="fixed")
    _, second = two_passes(world)
    assert [(c.method, c.nodes) for c in second.executed] == [("expiration", ("s1",))]
    (request,) = world.ec2.fleet_requests
    assert request.tags[wk.NODECLAIM] == claim_id_for("fixed", static_identity(0), 0)
    termination = world.state.get_item(TERMINATION_KIND, "s1")
    assert termination is not None and termination.get("replacementClaims") == [claim_id_for("fixed", static_identity(0), 0)]
