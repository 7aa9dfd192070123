"""collect_garbage on the in-memory fakes: reading, executing, re-checks, lease, idempotency, metrics."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from joiner.domain import labels as wk
from joiner.domain.gc import KIND_CLAIM, KIND_INSTANCE, KIND_NODE, GcPolicy, plan_gc
from joiner.domain.resources import Resources
from joiner.ports import ClaimRecord, Ec2Error, InstanceRecord, KubernetesError
from joiner.services.gc import LEASE_NAME, TEMPLATE_MARK_KIND, collect_garbage, execute_plan, read_world
from joiner.services.termination import TERMINATION_KIND
from tests.support.fakes import EPOCH, FakeWorld, fake_world, node_class_json, node_json

HOUR_AGO = EPOCH - timedelta(hours=1)


@pytest.fixture
def world() -> FakeWorld:
    world = fake_world()
    world.kube.add("node_classes", node_class_json("default", discovery=world.cluster))
    return world


def add_instance(world: FakeWorld, instance_id: str, *, state: str = "running", claim: str | None = None, launched=HOUR_AGO, tags: dict | None = None) -> None:
    all_tags = {"joiner.dev/cluster": world.cluster, wk.NODEPOOL: "default", **({wk.NODECLAIM: claim} if claim else {}), **(tags or {})}
    world.ec2.instances[instance_id] = InstanceRecord(instance_id, "c5.large", "us-east-1a", state, launched, all_tags)


def add_claim(
    world: FakeWorld, claim_id: str, instance_id: str | None, *, state: str = "initialized", node: str | None = None, pool: str = "default", created=HOUR_AGO
) -> None:
    world.state.put_claim(ClaimRecord(claim_id, pool, state, created, instance_id=instance_id, node_name=node, launched_at=created if instance_id else None))
    world.state.reserve_capacity(pool, claim_id, Resources({"cpu": 2000}), None, Resources())


def add_node(world: FakeWorld, name: str, instance_id: str, *, ready: bool = False, managed: bool = True, created=HOUR_AGO) -> None:
    labels = {wk.NODEPOOL: "default", wk.NODECLAIM: f"claim-{name}"} if managed else {}
    world.kube.add("nodes", node_json(name, instance_id=instance_id, ready=ready, labels=labels, created=created))


def healthy(world: FakeWorld, n: int = 1) -> None:
    for index in range(n):
        add_instance(world, f"i-healthy{index}", claim=f"c-healthy{index}")
        add_claim(world, f"c-healthy{index}", f"i-healthy{index}", node=f"healthy{index}")
        add_node(world, f"healthy{index}", f"i-healthy{index}", ready=True)


def test_one_run_collects_every_kind_and_counts_each_action(world: FakeWorld) -> None:
    healthy(world, 2)
    add_instance(world, "i-orphan")  # no claim
    add_instance(world, "i-dead", state="terminated", claim="c-dead")
    add_claim(world, "c-dead", "i-dead", node="dead", pool="gpu")
    add_node(world, "dead", "i-dead")
    add_node(world, "stray", "i-vanished")  # a Joiner Node whose instance no longer exists
    unused = world.ec2.add_launch_template("joiner-test-cluster-old-amd64-0000000000000001", node_class="old", created=EPOCH - timedelta(days=3))
    world.state.put_item(TEMPLATE_MARK_KIND, unused.id, {"id": unused.id, "unusedSince": (EPOCH - timedelta(hours=2)).isoformat()})

    result = collect_garbage(world.runtime(), world.clock.now())

    assert result.ran and not result.errors
    assert result.terminated_instances == ("i-orphan",) and world.ec2.terminated == ["i-orphan"]
    assert result.closed_claims == ("c-dead",)
    closed = world.state.get_claim("c-dead")
    assert closed is not None and closed.state == "closed" and closed.closed_at == EPOCH and "terminated" in closed.reason
    assert "c-dead" not in world.state.reservations("gpu")
    assert result.deleted_nodes == ("dead", "stray")  # the claim's Node, then the orphaned one
    assert {n["metadata"]["name"] for n in world.kube.list_nodes()} == {"healthy0", "healthy1"}
    assert result.deleted_templates == (unused.id,) and world.ec2.deleted_templates == [unused.id]
    assert world.state.get_item(TEMPLATE_MARK_KIND, unused.id) is None
    for kind, total in (("instance", 1), ("claim", 1), ("node", 2), ("launch-template", 1)):
        assert world.metrics.total("GarbageCollected", kind=kind) == total
    # the healthy nodes are untouched
    assert all(world.state.get_claim(f"c-healthy{i}").state == "initialized" for i in range(2))
    assert "c-healthy0" in world.state.reservations("default")
    assert result.to_dict() == {
        "ran": True,
        "skippedReason": "",
        "terminatedInstances": ["i-orphan"],
        "closedClaims": ["c-dead"],
        "deletedNodes": ["dead", "stray"],
        "deletedLaunchTemplates": [unused.id],
        "kept": 0,
        "errors": 0,
    }


def test_a_second_run_is_a_no_op(world: FakeWorld) -> None:
    add_instance(world, "i-orphan")
    add_instance(world, "i-dead", state="terminated", claim="c-dead")
    add_claim(world, "c-dead", "i-dead", node="dead")
    add_node(world, "dead", "i-dead")
    collect_garbage(world.runtime(), world.clock.now())
    before = list(world.metrics.records)
    world.clock.advance(300)
    again = collect_garbage(world.runtime("invocation-2"), world.clock.now())
    assert again.ran and not again.terminated_instances and not again.closed_claims and not again.deleted_nodes
    assert [r for r in world.metrics.records if r[0] == "GarbageCollected"] == [r for r in before if r[0] == "GarbageCollected"]


def test_a_retried_execution_of_the_same_plan_does_nothing_twice(world: FakeWorld) -> None:
    add_instance(world, "i-dead", state="terminated", claim="c-dead")
    add_claim(world, "c-dead", "i-dead", node="dead")
    add_node(world, "dead", "i-dead")
    runtime = world.runtime()
    plan = plan_gc(read_world(runtime, EPOCH))
    first = execute_plan(runtime, plan, EPOCH)
    second = execute_plan(runtime, plan, EPOCH)  # e.g. the invocation retried after a timeout
    assert first.closed_claims == ("c-dead",) and first.deleted_nodes == ("dead",)
    assert not second.closed_claims and not second.deleted_nodes and not second.errors
    assert world.metrics.total("GarbageCollected", kind="claim") == 1 and world.metrics.total("GarbageCollected", kind="node") == 1


def test_a_held_lease_skips_the_run(world: FakeWorld) -> None:
    add_instance(world, "i-orphan")
    assert world.state.acquire_lease(LEASE_NAME, "someone-else", EPOCH, 150)
    result = collect_garbage(world.runtime(), EPOCH)
    assert not result.ran and "lease" in result.skipped_reason
    assert not world.ec2.terminated and world.metrics.total("GarbageCollectionSkipped") == 1
    assert world.state.lease_holder(LEASE_NAME)[0] == "someone-else"
    # once it expires, the next run proceeds and releases it afterwards
    later = EPOCH + timedelta(seconds=151)
    assert collect_garbage(world.runtime("invocation-2"), later).terminated_instances == ("i-orphan",)
    assert world.state.lease_holder(LEASE_NAME) is None


def test_the_lease_is_released_when_reading_fails(world: FakeWorld) -> None:
    world.ec2.fail("list_cluster_instances", Ec2Error("boom", code="RequestLimitExceeded"))
    with pytest.raises(Ec2Error):
        collect_garbage(world.runtime(), EPOCH)
    assert world.state.lease_holder(LEASE_NAME) is None


def test_a_failed_instance_lookup_acts_on_nothing(world: FakeWorld) -> None:
    add_claim(world, "c1", "i-1", node="n1")
    add_node(world, "n1", "i-1")
    add_instance(world, "i-orphan")
    world.ec2.fail("describe_instances", Ec2Error("boom", code="InternalError"))
    with pytest.raises(Ec2Error):
        collect_garbage(world.runtime(), EPOCH)
    assert not world.ec2.terminated and world.state.get_claim("c1").state == "initialized" and world.kube.get_node("n1")


def test_only_instances_missing_from_the_listing_are_described(world: FakeWorld) -> None:
    healthy(world)
    add_claim(world, "c-gone", "i-gone")
    add_node(world, "foreign", "i-foreign", managed=False)
    inputs = read_world(world.runtime(), EPOCH)
    assert set(inputs.described) == {"i-gone", "i-foreign"} and all(v is None for v in inputs.described.values())
    assert inputs.node_classes == frozenset({"default"})


def test_a_termination_in_progress_protects_its_node_claim_and_instance(world: FakeWorld) -> None:
    add_instance(world, "i-1", state="shutting-down", claim="c1")
    add_claim(world, "c1", "i-1", state="terminating", node="n1")
    add_node(world, "n1", "i-1")
    world.state.put_item(TERMINATION_KIND, "n1", {"node": "n1", "instanceId": "i-1", "claimId": "c1"})
    result = collect_garbage(world.runtime(), EPOCH)
    assert not result.closed_claims and not result.deleted_nodes and world.kube.get_node("n1")


def test_an_instance_whose_claim_appears_before_execution_is_not_terminated(world: FakeWorld) -> None:
    add_instance(world, "i-late", claim="c-late")
    runtime = world.runtime()
    plan = plan_gc(read_world(runtime, EPOCH))
    assert plan.targets(KIND_INSTANCE) == ("i-late",)
    add_claim(world, "c-late", None, state="reserved")  # written meanwhile
    result = execute_plan(runtime, plan, EPOCH)
    assert not result.terminated_instances and not world.ec2.terminated
    assert any(k.target == "i-late" and "re-check" in k.reason for k in result.kept)


def test_a_node_ready_again_at_execution_is_kept_with_its_claim(world: FakeWorld) -> None:
    add_instance(world, "i-1", state="terminated", claim="c1")
    add_claim(world, "c1", "i-1", node="n1")
    add_node(world, "n1", "i-1")
    runtime = world.runtime()
    plan = plan_gc(read_world(runtime, EPOCH))
    assert plan.targets(KIND_NODE) == ("n1",) and plan.targets(KIND_CLAIM) == ("c1",)
    world.kube.patch_node("n1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    result = execute_plan(runtime, plan, EPOCH)
    assert not result.deleted_nodes and not result.closed_claims
    assert world.kube.get_node("n1") and world.state.get_claim("c1").state == "initialized"


def test_a_node_replaced_under_the_same_name_is_not_deleted(world: FakeWorld) -> None:
    add_node(world, "n1", "i-1")
    runtime = world.runtime()
    plan = plan_gc(read_world(runtime, EPOCH))
    assert plan.targets(KIND_NODE) == ("n1",)
    world.kube.remove("nodes", None, "n1")
    add_node(world, "n1", "i-1")  # same name and providerID, new uid
    result = execute_plan(runtime, plan, EPOCH)
    assert not result.deleted_nodes and world.kube.get_node("n1")


def test_a_termination_started_before_execution_protects_the_node(world: FakeWorld) -> None:
    add_node(world, "n1", "i-1")
    runtime = world.runtime()
    plan = plan_gc(read_world(runtime, EPOCH))
    world.state.put_item(TERMINATION_KIND, "n1", {"node": "n1"})
    assert not execute_plan(runtime, plan, EPOCH).deleted_nodes


def test_a_claim_closed_meanwhile_is_not_closed_again(world: FakeWorld) -> None:
    add_claim(world, "c1", "i-1")
    runtime = world.runtime()
    plan = plan_gc(read_world(runtime, EPOCH + timedelta(minutes=10)))
    assert plan.targets(KIND_CLAIM) == ("c1",)
    world.state.update_claim("c1", state="closed", reason="registration timeout")
    result = execute_plan(runtime, plan, EPOCH)
    assert not result.closed_claims and world.state.get_claim("c1").reason == "registration timeout"
    assert "c1" not in world.state.reservations("default")  # a crashed close is finished


def test_one_failed_action_does_not_stop_the_others(world: FakeWorld) -> None:
    add_instance(world, "i-a")
    add_instance(world, "i-b")
    add_node(world, "n1", "i-1")
    add_node(world, "n2", "i-2")
    world.ec2.fail("terminate_instances", Ec2Error("denied", code="UnauthorizedOperation"))
    world.kube.fail("delete_node", KubernetesError("boom", status=500))
    result = collect_garbage(world.runtime(), EPOCH)
    assert result.terminated_instances == ("i-b",) and result.deleted_nodes == ("n2",)
    assert len(result.errors) == 2 and result.to_dict()["errors"] == 2
    assert world.metrics.total("GarbageCollectionErrors", kind="instance") == 1
    assert world.metrics.total("GarbageCollectionErrors", kind="node") == 1


def test_a_failed_node_deletion_keeps_its_claim_open(world: FakeWorld) -> None:
    add_instance(world, "i-1", state="terminated", claim="c1")
    add_claim(world, "c1", "i-1", node="n1")
    add_node(world, "n1", "i-1")
    world.kube.fail("delete_node", KubernetesError("boom", status=500))
    result = collect_garbage(world.runtime(), EPOCH)
    assert not result.closed_claims and world.state.get_claim("c1").state == "initialized"
    assert collect_garbage(world.runtime("invocation-2"), EPOCH).closed_claims == ("c1",)  # next run


def test_launch_templates_are_marked_then_deleted_after_a_day_unused(world: FakeWorld) -> None:
    healthy(world)
    used = world.ec2.add_launch_template("joiner-test-cluster-default-amd64-00000000000000aa", created=EPOCH - timedelta(days=3))
    record = world.ec2.instances["i-healthy0"]
    world.ec2.instances["i-healthy0"] = replace(record, tags={**record.tags, "aws:ec2launchtemplate:id": used.id})
    idle = world.ec2.add_launch_template("joiner-test-cluster-default-amd64-00000000000000bb", created=EPOCH - timedelta(days=3))
    first = collect_garbage(world.runtime(), world.clock.now())
    assert not first.deleted_templates
    assert world.state.get_item(TEMPLATE_MARK_KIND, idle.id) == {"id": idle.id, "unusedSince": EPOCH.isoformat()}
    assert world.state.get_item(TEMPLATE_MARK_KIND, used.id) is None
    world.clock.advance(23 * 3600)
    assert not collect_garbage(world.runtime("i2"), world.clock.now()).deleted_templates
    world.clock.advance(3600)
    third = collect_garbage(world.runtime("i3"), world.clock.now())
    assert third.deleted_templates == (idle.id,) and world.ec2.deleted_templates == [idle.id]
    assert world.state.get_item(TEMPLATE_MARK_KIND, idle.id) is None


def test_templates_of_this_cluster_only(world: FakeWorld) -> None:
    world.ec2.add_launch_template("joiner-other-default-amd64-0000000000000001", cluster="other", created=EPOCH - timedelta(days=9))
    world.ec2.add_launch_template("joiner-test-cluster-default-amd64-0000000000000002", created=EPOCH - timedelta(days=9))
    inputs = read_world(world.runtime(), EPOCH)
    assert [t.name for t in inputs.templates] == ["joiner-test-cluster-default-amd64-0000000000000002"]


def test_an_unreadable_node_class_list_keeps_templates_longer(world: FakeWorld) -> None:
    world.kube.fail("list_node_classes", KubernetesError("forbidden", status=403))
    assert read_world(world.runtime(), EPOCH).node_classes is None


def test_the_policy_is_honoured(world: FakeWorld) -> None:
    for n in range(3):
        add_instance(world, f"i-{n}")
    result = collect_garbage(world.runtime(), EPOCH, policy=GcPolicy(max_per_kind=1))
    assert result.terminated_instances == ("i-0",) and len(result.kept) == 2


def test_a_node_recreated_between_recheck_and_delete_survives_the_uid_precondition(world: FakeWorld) -> None:
    add_instance(world, "i-1", state="terminated", claim="c1")
    add_claim(world, "c1", "i-1", node="n1")
    add_node(world, "n1", "i-1")
    old_uid = world.kube.get_node("n1")["metadata"]["uid"]
    runtime = world.runtime()
    plan = plan_gc(read_world(runtime, EPOCH))
    read_node = world.kube.get_node
    deletions: list[tuple[str, str | None]] = []
    delete_node = world.kube.delete_node

    def get_then_replace(name: str):  # type: ignore[no-untyped-def]
        found = read_node(name)
        world.kube.remove("nodes", None, "n1")
        add_node(world, "n1", "i-1")  # re-created at once: same name and providerID, new uid
        return found

    def recording_delete(name: str, uid: str | None = None) -> bool:
        deletions.append((name, uid))
        return delete_node(name, uid=uid)

    world.kube.get_node = get_then_replace  # type: ignore[method-assign]
    world.kube.delete_node = recording_delete  # type: ignore[method-assign]
    result = execute_plan(runtime, plan, EPOCH)
    assert deletions == [("n1", old_uid)]
    assert not result.deleted_nodes and world.kube.get_node("n1")["metadata"]["uid"] not in (None, old_uid)
    assert not result.closed_claims and world.state.get_claim("c1").state == "initialized"  # its Node was not deleted
    assert any(k.target == "n1" and "replaced" in k.reason for k in result.kept)


def test_an_abandoned_reservation_whose_launch_is_recorded_meanwhile_is_not_closed(world: FakeWorld) -> None:
    add_claim(world, "c1", None, state="reserved", created=EPOCH - timedelta(hours=1))
    runtime = world.runtime()
    plan = plan_gc(read_world(runtime, EPOCH))
    assert plan.targets(KIND_CLAIM) == ("c1",)
    read_claim = world.state.get_claim

    def read_then_launch(claim_id: str):  # type: ignore[no-untyped-def]
        found = read_claim(claim_id)
        world.state.update_claim(claim_id, expected_state="reserved", state="launched", instance_id="i-late", launched_at=EPOCH)
        return found

    world.state.get_claim = read_then_launch  # type: ignore[method-assign]
    result = execute_plan(runtime, plan, EPOCH)
    world.state.get_claim = read_claim  # type: ignore[method-assign]
    assert not result.closed_claims and not result.errors
    claim = world.state.get_claim("c1")
    assert claim.state == "launched" and claim.instance_id == "i-late"
    assert "c1" in world.state.reservations("default")  # the launch keeps its reservation
    assert any(k.target == "c1" and "launched" in k.reason for k in result.kept)
