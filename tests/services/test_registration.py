"""Registration: Nodes matched to claims by providerID, labels, initialization, timeouts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from joiner.domain import labels as wk
from joiner.domain.catalog import load_bundled_catalog
from joiner.domain.model import NODECLASS_HASH_KEY, NODEPOOL_HASH_KEY, NodePool, Taint
from joiner.domain.resources import Resources
from joiner.domain.snapshot import parse_node
from joiner.ports import ClaimRecord
from joiner.services.registration import REGISTRATION_TIMEOUT, reconcile_registration
from tests.support.fakes import FakeWorld, fake_world, node_json

STARTUP = Taint("example.com/agent-not-ready", "", "NoSchedule")


@pytest.fixture
def world() -> FakeWorld:
    return fake_world()


def launched_claim(world: FakeWorld, claim_id: str = "default-abc", instance_id: str = "i-00000000000000001", *, minutes_ago: float = 2) -> ClaimRecord:
    launched_at = world.clock.now() - timedelta(minutes=minutes_ago)
    claim = ClaimRecord(
        claim_id=claim_id,
        node_pool="default",
        state="launched",
        created_at=launched_at,
        instance_id=instance_id,
        instance_type="c5.large",
        zone="us-east-1a",
        capacity_type="spot",
        price=0.03,
        pods=("default/web",),
        reserved=Resources({"cpu": 2000}),
        launched_at=launched_at,
    )
    world.ec2.add_instance(instance_id, "c5.large")
    world.state.put_claim(claim)
    world.state.reserve_capacity("default", claim_id, claim.reserved, Resources({"cpu": 10_000}), Resources())
    return claim


def nodes(world: FakeWorld) -> list:
    return [parse_node(obj) for obj in world.kube.list_nodes()]


def register(world: FakeWorld, pools: dict[str, NodePool] | None = None):  # type: ignore[no-untyped-def]
    return reconcile_registration(world.runtime(), world.state.open_claims(), nodes(world), pools or {"default": NodePool("default")}, world.clock.now())


def test_a_node_with_the_claims_instance_registers_it_labels_it_and_keeps_the_reservation(world: FakeWorld) -> None:
    claim = launched_claim(world)
    world.kube.add("nodes", node_json("ip-10-0-0-1", instance_id=claim.instance_id, ready=False))
    result = register(world)

    assert result.registered == (claim.claim_id,) and result.initialized == ()
    stored = world.state.get_claim(claim.claim_id)
    assert stored is not None and stored.state == "registered" and stored.node_name == "ip-10-0-0-1"
    assert stored.registered_at == world.clock.now()
    # the reservation is the NodePool's usage figure until the capacity is gone
    assert world.state.reservations("default") == {claim.claim_id: Resources({"cpu": 2000})}
    labels = world.kube.get("nodes", None, "ip-10-0-0-1")["metadata"]["labels"]
    assert labels[wk.NODECLAIM] == claim.claim_id and labels[wk.NODEPOOL] == "default"
    assert labels[wk.CAPACITY_TYPE] == "spot" and labels[wk.REGISTERED] == "true" and wk.INITIALIZED not in labels
    assert result.node_pools == {"ip-10-0-0-1": "default"}
    assert world.metrics.total("NodesRegistered") == 1


def test_the_template_hashes_of_the_claim_are_stamped_on_the_node_once(world: FakeWorld) -> None:
    claim = launched_claim(world)
    world.state.update_claim(claim.claim_id, pool_hash="feedc0ffee123456", class_hash="c1a55c1a55c1a55c")
    world.kube.add("nodes", node_json("ip-10-0-0-1", instance_id=claim.instance_id, ready=False))
    register(world)
    annotations = world.kube.get("nodes", None, "ip-10-0-0-1")["metadata"].get("annotations") or {}
    assert annotations[NODEPOOL_HASH_KEY] == "feedc0ffee123456" and annotations[NODECLASS_HASH_KEY] == "c1a55c1a55c1a55c"
    patches = len(world.kube.node_patches)
    register(world)
    assert len(world.kube.node_patches) == patches  # a settled node is not patched again


def test_initialized_only_once_ready_and_startup_taints_are_gone(world: FakeWorld) -> None:
    claim = launched_claim(world)
    pools = {"default": NodePool("default", startup_taints=(STARTUP,))}
    world.kube.add("nodes", node_json("n1", instance_id=claim.instance_id, taints=[STARTUP.to_dict()]))
    assert register(world, pools).initialized == ()

    world.kube.patch_node("n1", {"spec": {"taints": []}})
    world.clock.advance(30)
    result = register(world, pools)
    assert result.initialized == (claim.claim_id,) and result.registered == ()
    stored = world.state.get_claim(claim.claim_id)
    assert stored is not None and stored.state == "initialized" and stored.initialized_at == world.clock.now()
    assert world.kube.get("nodes", None, "n1")["metadata"]["labels"][wk.INITIALIZED] == "true"


def test_labels_already_set_are_kept_and_a_settled_node_is_not_patched_again(world: FakeWorld) -> None:
    claim = launched_claim(world)
    world.kube.add("nodes", node_json("n1", instance_id=claim.instance_id, labels={wk.CAPACITY_TYPE: "on-demand"}))
    register(world)
    labels = world.kube.get("nodes", None, "n1")["metadata"]["labels"]
    assert labels[wk.CAPACITY_TYPE] == "on-demand"  # set "if missing"
    patches = len(world.kube.node_patches)
    register(world)
    assert len(world.kube.node_patches) == patches


def test_no_node_within_the_timeout_terminates_and_closes_the_claim(world: FakeWorld) -> None:
    claim = launched_claim(world, minutes_ago=REGISTRATION_TIMEOUT.total_seconds() / 60 - 1)
    assert register(world).timed_out == ()
    assert world.ec2.terminated == []

    world.clock.advance(61)
    result = register(world)
    assert result.timed_out == (claim.claim_id,) and result.claims == ()
    assert world.ec2.terminated == [claim.instance_id]
    stored = world.state.get_claim(claim.claim_id)
    assert stored is not None and stored.state == "closed" and stored.reason == "registration timeout"
    assert world.state.reservations("default") == {}
    assert world.metrics.total("RegistrationTimeouts") == 1


def test_a_failing_termination_keeps_the_claim_for_the_next_round(world: FakeWorld) -> None:
    claim = launched_claim(world, minutes_ago=20)
    world.ec2.fail("terminate_instances")
    result = register(world)
    assert result.timed_out == () and [c.claim_id for c in result.claims] == [claim.claim_id] and result.errors
    assert world.state.get_claim(claim.claim_id).state == "launched"  # type: ignore[union-attr]
    assert world.state.reservations("default")  # still counted
    assert register(world).timed_out == (claim.claim_id,)


def test_one_broken_node_does_not_block_the_others(world: FakeWorld) -> None:
    first = launched_claim(world, "default-a", "i-0000000000000000a")
    second = launched_claim(world, "default-b", "i-0000000000000000b")
    world.kube.add("nodes", node_json("n-a", instance_id=first.instance_id))
    world.kube.add("nodes", node_json("n-b", instance_id=second.instance_id))
    world.kube.fail("patch_node")
    result = register(world)
    assert set(result.registered) == {"default-a", "default-b"} and len(result.errors) == 1
    assert result.labeled_nodes == ("n-b",)
    register(world)  # the next round labels the first
    assert wk.NODECLAIM in world.kube.get("nodes", None, "n-a")["metadata"]["labels"]


def test_nodes_of_other_instances_and_deleting_nodes_do_not_register_claims(world: FakeWorld) -> None:
    claim = launched_claim(world)
    world.kube.add("nodes", node_json("other", instance_id="i-0fffffffffffffff0"))
    leaving = node_json("leaving", instance_id=claim.instance_id)
    leaving["metadata"]["deletionTimestamp"] = "2025-01-06T09:00:00Z"
    world.kube.add("nodes", leaving)
    result = register(world)
    assert result.registered == () and [c.state for c in result.claims] == ["launched"]


def test_every_alias_label_is_patched_in_the_round_the_node_registers_while_its_startup_taint_holds() -> None:
    """kube-scheduler matches keys literally: a Node must carry every alias the planner accepts
    (derived from the alias table: adding an alias without labelling nodes with it fails here),
    and carry it before the startup taint lets pods land on it."""
    world = fake_world(catalog=load_bundled_catalog("us-east-1"))
    claim = launched_claim(world)
    pools = {"default": NodePool("default", startup_taints=(STARTUP,))}
    world.kube.add("nodes", node_json("n1", instance_id=claim.instance_id, labels={}, taints=[STARTUP.to_dict()]))
    result = register(world, pools)

    assert result.registered == (claim.claim_id,) and result.initialized == () and not result.errors
    node = world.kube.get("nodes", None, "n1")
    assert node["spec"]["taints"] == [STARTUP.to_dict()]  # still tainted: nothing can have bound yet
    labels = node["metadata"]["labels"]
    expected = {wk.INSTANCE_TYPE: "c5.large", wk.ZONE: "us-east-1a", wk.CAPACITY_TYPE: "spot", wk.NODEPOOL: "default"}
    assert {key: labels.get(key) for key in expected} == expected
    # attributes c5.large lacks (a GPU, local NVMe, ...) carry neither spelling
    type_labels = load_bundled_catalog("us-east-1").instance_type("c5.large").requirements.labels()
    for alias, key in wk.KARPENTER_ALIASES.items():
        if (key.startswith("joiner.dev/instance-") and key not in type_labels) or key == wk.CAPACITY_RESERVATION_ID:
            assert alias not in labels and key not in labels  # a spot node runs in no capacity reservation
        else:
            assert key in labels and labels.get(alias) == labels[key], (alias, key)
    assert labels["karpenter.sh/capacity-type"] == "spot" and labels["karpenter.k8s.aws/instance-family"] == "c5"

    world.kube.patch_node("n1", {"spec": {"taints": []}})  # the agent lifts its startup taint
    assert register(world, pools).initialized == (claim.claim_id,)


def test_registration_keeps_alias_labels_the_kubelet_or_user_set() -> None:
    world = fake_world(catalog=load_bundled_catalog("us-east-1"))
    claim = launched_claim(world)
    world.kube.add("nodes", node_json("n1", instance_id=claim.instance_id, labels={"karpenter.k8s.aws/instance-family": "custom"}))
    register(world)
    labels = world.kube.get("nodes", None, "n1")["metadata"]["labels"]
    assert labels["karpenter.k8s.aws/instance-family"] == "custom" and labels["karpenter.k8s.aws/instance-size"] == "large"
