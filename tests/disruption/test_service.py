"""The disruption pass on in-memory fakes: lease, 15 s validation, execution through the
termination machinery, replacements through the provisioning path."""

from __future__ import annotations

from typing import Any

import pytest

from joiner.domain import labels as wk
from joiner.ports import ClaimRecord
from joiner.services.disruption import COMMAND_KIND, EMPTY_KIND, LEASE_NAME, PENDING_ID, run_disruption
from joiner.services.termination import TERMINATION_KIND
from tests.disruption.builders import managed_node, pool, running_pod
from tests.support.fakes import DrainingKubernetes, FakeWorld, fake_world, node_class_json

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


@pytest.fixture
def world() -> FakeWorld:
    built = fake_world()
    built.kube = DrainingKubernetes(built.clock)
    return built


def node(world: FakeWorld, name: str, instance_type: str = "c5.xlarge", **kwargs: Any) -> None:
    obj = managed_node(name, instance_type, created=world.clock.now(), **kwargs)
    world.kube.add("nodes", obj)
    instance_id = obj["spec"]["providerID"].rsplit("/", 1)[-1]
    world.ec2.add_instance(instance_id, instance_type)
    world.state.put_claim(
        ClaimRecord(
            claim_id=f"claim-{name}",
            node_pool="default",
            state="initialized",
            created_at=world.clock.now(),
            instance_id=instance_id,
            instance_type=instance_type,
            zone="us-east-1a",
            capacity_type="on-demand",
            node_name=name,
            price={"c5.xlarge": 0.17, "c5.2xlarge": 0.34}[instance_type],
            initialized_at=world.clock.now(),
        )
    )


def cluster(world: FakeWorld, **pool_args: Any) -> None:
    world.kube.add("node_classes", node_class_json("default"))
    world.kube.add("node_pools", pool(**pool_args))


def test_empty_node_is_validated_15_seconds_later_then_terminated(world: FakeWorld) -> None:
    cluster(world)
    node(world, "n1")
    node(world, "busy", "c5.2xlarge")
    world.kube.add("pods", running_pod("p", "busy", cpu="7", created=world.clock.now()))
    runtime = world.runtime()

    first = run_disruption(runtime)
    assert first.status == "computed" and first.executed == ()
    assert [c.nodes for c in first.pending] == [("n1",)]
    assert world.state.get_item(COMMAND_KIND, PENDING_ID)["status"] == "pending"
    assert world.state.get_item(EMPTY_KIND, "n1") is not None
    assert world.kube.get("nodes", None, "n1")["spec"].get("unschedulable") is None  # nothing done yet

    world.clock.advance(5)
    assert run_disruption(runtime).status == "waiting"  # too early to validate

    world.clock.advance(15)
    second = run_disruption(runtime)
    assert [c.nodes for c in second.executed] == [("n1",)] and second.dropped == ()
    # an empty node drains in one step: instance terminated, Node deleted, claim closed
    assert world.kube.get("nodes", None, "n1") is None
    assert world.ec2.terminated and world.state.get_claim("claim-n1").state == "closed"
    assert world.state.get_item(COMMAND_KIND, PENDING_ID) is None
    assert world.metrics.total("NodesDisrupted", method="emptiness") == 1
    assert world.state.lease_holder(LEASE_NAME) is None  # released


def test_changed_world_drops_the_command_at_validation(world: FakeWorld) -> None:
    cluster(world)
    node(world, "n1")
    runtime = world.runtime()
    assert [c.nodes for c in run_disruption(runtime).pending] == [("n1",)]
    world.kube.add("pods", running_pod("late", "n1", cpu="3", created=world.clock.now()))  # a pod landed on it
    world.clock.advance(20)
    result = run_disruption(runtime)
    assert result.executed == ()
    assert result.dropped == ((("n1",), "a node is no longer empty"),)
    assert world.kube.get("nodes", None, "n1") is not None and not world.ec2.terminated
    assert world.metrics.total("DisruptionCommandsDropped") == 1


def test_replacement_launches_first_and_the_drain_waits_for_it(world: FakeWorld) -> None:
    cluster(world)
    node(world, "big", "c5.2xlarge")
    world.kube.add("pods", running_pod("p", "big", cpu="1", created=world.clock.now()))
    runtime = world.runtime()
    (command,) = run_disruption(runtime).pending
    assert command.method == "consolidation" and command.replacements
    world.clock.advance(16)
    result = run_disruption(runtime)
    assert [c.nodes for c in result.executed] == [("big",)], result
    (request,) = world.ec2.fleet_requests
    assert request.overrides[0].instance_type == "c5.large" and "c5.2xlarge" not in {o.instance_type for o in request.overrides}
    termination = world.state.get_item(TERMINATION_KIND, "big")
    assert termination["phase"] == "replacing" and termination["replacementClaims"]
    assert termination["reason"] == "disruption/consolidation"
    assert isinstance(world.kube, DrainingKubernetes)
    assert world.kube.evictions == []  # nothing evicted before the replacement is Ready
    assert world.kube.get("nodes", None, "big")["spec"]["unschedulable"] is True
    assert any(t["key"] == wk.DISRUPTED_TAINT_KEY for t in world.kube.get("nodes", None, "big")["spec"]["taints"])


def test_lease_held_by_another_invocation_means_no_action(world: FakeWorld) -> None:
    cluster(world)
    node(world, "n1")
    assert world.state.acquire_lease(LEASE_NAME, "someone-else", world.clock.now(), 150)
    result = run_disruption(world.runtime())
    assert result.status == "busy"
    assert world.state.get_item(COMMAND_KIND, PENDING_ID) is None


def test_dry_run_persists_nothing(world: FakeWorld) -> None:
    cluster(world)
    node(world, "n1")
    result = run_disruption(world.runtime(), dry_run=True)
    assert [c.nodes for c in result.pending] == [("n1",)]
    assert world.state.get_item(COMMAND_KIND, PENDING_ID) is None


@pytest.mark.parametrize("tags", [{"Name": "not-joiner"}, {"joiner.dev/cluster": "another-cluster"}], ids=["untagged", "other-cluster"])
def test_an_empty_node_whose_instance_is_not_ours_is_never_disrupted(world: FakeWorld, tags: dict[str, str]) -> None:
    """Issue 10, defect 7: labels a kubelet may set on itself (joiner.dev/nodepool,
    joiner.dev/initialized) never make an instance Joiner's; its own tags decide."""
    cluster(world)
    node(world, "n1")
    instance_id = world.kube.get("nodes", None, "n1")["spec"]["providerID"].rsplit("/", 1)[-1]
    world.ec2.add_instance(instance_id, tags=tags)
    runtime = world.runtime()
    assert run_disruption(runtime).pending == ()
    world.clock.advance(20)
    assert run_disruption(runtime).executed == ()
    assert world.kube.get("nodes", None, "n1")["spec"].get("unschedulable") is None
    assert not world.ec2.terminated
    assert world.metrics.total("NotOwnedSkipped", path="disruption") >= 1


def test_an_empty_node_without_a_claim_is_never_disrupted(world: FakeWorld) -> None:
    """A tagged instance is still not Joiner's to disrupt without a claim recording it."""
    cluster(world)
    obj = managed_node("n1", created=world.clock.now())
    world.kube.add("nodes", obj)
    world.ec2.add_instance(obj["spec"]["providerID"].rsplit("/", 1)[-1])
    assert run_disruption(world.runtime()).pending == ()
    assert world.metrics.total("NotOwnedSkipped", path="disruption") == 1


def test_ownership_rule() -> None:
    from joiner.domain.ownership import not_owned_reason

    ours = {"joiner.dev/cluster": "c"}
    assert not_owned_reason("i-1", ours, "i-1", "c") is None
    assert not_owned_reason("i-1", ours, "", "c") is None  # the claim has not recorded its instance yet
    assert "another instance" in str(not_owned_reason("i-1", ours, "i-2", "c"))
    assert "no claim" in str(not_owned_reason("i-1", ours, None, "c"))
    assert "not found" in str(not_owned_reason("i-1", None, "i-1", "c"))
    assert "'d' in its" in str(not_owned_reason("i-1", {"joiner.dev/cluster": "d"}, "i-1", "c"))
    assert "no joiner.dev/cluster" in str(not_owned_reason("i-1", {}, "i-1", "c"))
    assert "providerID" in str(not_owned_reason(None, ours, "i-1", "c"))


def test_why_nodes_are_not_disrupted_is_told_in_events_rate_limited(world: FakeWorld) -> None:
    """Issue 13 item 12: DisruptionBlocked on the Node (do-not-disrupt, a budget) and on the
    NodePool its budget held back, Unconsolidatable on a node consolidation declined; the same
    message again only after 15 minutes."""
    cluster(world, budgets=[{"nodes": "1"}], consolidate_after="0s", min_savings={"perHour": 1.0})
    node(world, "guarded")
    world.kube.add("pods", running_pod("keep", "guarded", annotations={wk.KARPENTER_DO_NOT_DISRUPT: "true"}, created=world.clock.now()))
    node(world, "busy", "c5.2xlarge")
    world.kube.add("pods", running_pod("p", "busy", cpu="3", created=world.clock.now()))
    runtime = world.runtime()
    world.clock.advance(60)
    run_disruption(runtime)
    events = {(e.kind, e.name, e.reason): e.message for e in world.kube.events}
    assert events[("Node", "guarded", "DisruptionBlocked")] == "pod default/keep has the do-not-disrupt annotation"
    assert events[("Node", "busy", "Unconsolidatable")].startswith("saving $0.3400/h is below the $1.0")
    seen = len(world.kube.events)
    world.clock.advance(60)
    run_disruption(runtime)
    assert len(world.kube.events) == seen  # unchanged messages within 15 minutes: no new event
    world.clock.advance(16 * 60)
    run_disruption(runtime)
    assert len(world.kube.events) > seen


def test_the_pass_remembers_where_single_node_consolidation_stopped(world: FakeWorld) -> None:
    from joiner.services.disruption import CURSOR_ID, CURSOR_KIND

    cluster(world, types=["c5.xlarge"])
    spread = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]
            }
        }
    }
    for i in range(3):
        node(world, f"n{i}")
        world.kube.add("pods", running_pod(f"p{i}", f"n{i}", cpu="500m", created=world.clock.now(), extra_spec=spread))
    world.clock.advance(3600)
    runtime = world.runtime()
    world.state.put_item(CURSOR_KIND, CURSOR_ID, {"node": 7})  # malformed: the pass starts over
    summary = run_disruption(runtime)
    assert summary.status == "computed" and summary.pending == () and summary.candidates_considered == 3
    assert world.state.get_item(CURSOR_KIND, CURSOR_ID)["node"] in {"n0", "n1", "n2"}
