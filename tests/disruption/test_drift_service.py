"""NodeClass drift in the scheduled pass, on fakes: the instances' image, subnet and
security groups (one DescribeInstances) against what the NodeClass resolves to now."""

from __future__ import annotations

import dataclasses

import pytest

from joiner.domain.resources import Resources
from joiner.domain.snapshot import parse_node_class
from joiner.ports import ClaimRecord, FleetOverride, FleetRequest
from joiner.services.disruption import DRIFT_UNKNOWN_METRIC, read_input, run_disruption
from joiner.services.termination import TERMINATION_KIND
from tests.disruption.builders import managed_node, pool, running_pod
from tests.support.fakes import DrainingKubernetes, FakeWorld, fake_world, node_class_json

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

CURRENT_AMI = "ami-amd64-131"  # what FakeEc2.resolve_ami answers for Kubernetes 1.31, amd64


@pytest.fixture
def world() -> FakeWorld:
    built = fake_world()
    built.kube = DrainingKubernetes(built.clock)
    built.kube.add("node_classes", node_class_json("default"))
    built.kube.add("node_pools", pool(types=["c5.xlarge"]))
    return built


def launch(world: FakeWorld, name: str, *, ami: str = CURRENT_AMI, security_groups: tuple[str, ...] = ("sg-00000001",), subnet: str = "subnet-00000001") -> str:
    """An instance launched as Joiner does (launch template + fleet on the fake), its claim and
    its initialized Node, with a pod that needs a replacement if the node goes."""
    node_class = parse_node_class(node_class_json("default"))
    cluster = world.ec2.describe_cluster(world.cluster)
    template = world.ec2.ensure_launch_template(node_class, "amd64", cluster, security_groups, ami)
    result = world.ec2.create_fleet(
        FleetRequest(
            client_token=f"token-{name}",
            launch_template=template,
            capacity_type="on-demand",
            overrides=(FleetOverride("c5.xlarge", subnet, "us-east-1a"),),
            tags={"joiner.dev/cluster": world.cluster},
        )
    )
    instance_id = result.instances[0].instance_id
    node = managed_node(name, "c5.xlarge", created=world.clock.now())
    node["spec"]["providerID"] = f"aws:///us-east-1a/{instance_id}"
    world.kube.add("nodes", node)
    world.kube.add("pods", running_pod(f"{name}-pod", name, cpu="3", created=world.clock.now()))
    world.state.put_claim(
        ClaimRecord(
            claim_id=f"claim-{name}",
            node_pool="default",
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
    return instance_id


def test_fake_instances_carry_their_launch_inputs(world: FakeWorld) -> None:
    instance_id = launch(world, "n1", ami="ami-x", security_groups=("sg-b", "sg-a"))
    (record,) = world.ec2.describe_instances([instance_id])
    assert (record.image_id, record.subnet_id, record.security_group_ids) == ("ami-x", "subnet-00000001", ("sg-a", "sg-b"))


def test_node_on_an_old_ami_is_drifted_validated_and_replaced(world: FakeWorld) -> None:
    launch(world, "old", ami="ami-amd64-130")
    launch(world, "current")
    runtime = world.runtime()
    world.ec2.calls.clear()

    first = run_disruption(runtime)
    (command,) = first.pending
    assert command.method == "drift" and command.nodes == ("old",)
    assert f"AMI ami-amd64-130 is not the NodeClass's current amd64 AMI {CURRENT_AMI}" in command.reason
    assert world.ec2.calls.count("describe_instances") == 1  # one batched call for every candidate

    world.clock.advance(16)
    second = run_disruption(runtime)
    assert [c.nodes for c in second.executed] == [("old",)] and second.dropped == ()
    termination = world.state.get_item(TERMINATION_KIND, "old")
    assert termination["reason"] == "disruption/drift" and termination["replacementClaims"]
    assert world.ec2.fleet_requests[-1].overrides[0].instance_type == "c5.xlarge"
    assert world.state.get_item(TERMINATION_KIND, "current") is None


def test_subnet_and_security_group_drift(world: FakeWorld) -> None:
    launch(world, "moved", subnet="subnet-0000dead")
    launch(world, "current")
    (command,) = run_disruption(world.runtime(), dry_run=True).pending
    assert command.nodes == ("moved",) and "subnet subnet-0000dead is no longer selected" in command.reason

    world.kube.remove("nodes", None, "moved")
    launch(world, "grouped", security_groups=("sg-00000001", "sg-0000beef"))
    (command,) = run_disruption(world.runtime(), dry_run=True).pending
    assert command.nodes == ("grouped",) and "security groups sg-00000001,sg-0000beef differ" in command.reason


def test_current_nodes_are_not_drifted(world: FakeWorld) -> None:
    launch(world, "a")
    launch(world, "b")
    inp = read_input(world.runtime(), world.clock.now())
    assert inp.facts["a"].launch is not None and inp.facts["a"].launch.image_id == CURRENT_AMI
    assert inp.node_classes["default"].ami_by_arch == {"amd64": CURRENT_AMI}
    assert run_disruption(world.runtime(), dry_run=True).pending == ()


def test_missing_instance_is_counted_not_drifted(world: FakeWorld) -> None:
    instance_id = launch(world, "old", ami="ami-amd64-130")
    launch(world, "current")
    del world.ec2.instances[instance_id]  # EC2 does not know it (any more)
    result = run_disruption(world.runtime(), dry_run=True)
    assert result.pending == ()
    assert world.metrics.total(DRIFT_UNKNOWN_METRIC, input="instance") == 1


def test_failed_lookups_are_counted_not_drifted(world: FakeWorld) -> None:
    launch(world, "old", ami="ami-amd64-130")
    launch(world, "current")
    world.ec2.fail("resolve_ami")
    assert run_disruption(world.runtime(), dry_run=True).pending == ()
    assert world.metrics.total(DRIFT_UNKNOWN_METRIC, input="ami") == 1

    world.ec2.fail("describe_instances")
    assert run_disruption(world.runtime(), dry_run=True).pending == ()
    assert world.metrics.total(DRIFT_UNKNOWN_METRIC, input="instance") == 2  # both candidates unknown

    # with the lookups working again, the old node is drifted
    (command,) = run_disruption(world.runtime(), dry_run=True).pending
    assert command.method == "drift" and command.nodes == ("old",)


def test_instance_without_security_groups_is_unknown(world: FakeWorld) -> None:
    instance_id = launch(world, "n1")
    launch(world, "n2")
    world.ec2.instances[instance_id] = dataclasses.replace(world.ec2.instances[instance_id], security_group_ids=())
    assert read_input(world.runtime(), world.clock.now()).facts["n1"].launch.security_groups is None  # type: ignore[union-attr]
    assert run_disruption(world.runtime(), dry_run=True).pending == ()


def test_pool_usage_counts_a_registered_node_once_whether_or_not_its_claim_holds_a_reservation(world: FakeWorld) -> None:
    """Registration keeps a claim's limit reservation (issue 10, defect 3): the usage disruption
    plans against is that reservation or, for a Node no reservation covers, its capacity;
    never both."""
    limited = pool(types=["c5.xlarge"])
    limited["spec"]["limits"] = {"cpu": "100"}
    world.kube.add("node_pools", limited)
    launch(world, "reserved")
    launch(world, "legacy")  # a claim released at registration by an older version
    world.state.reserve_capacity("default", "claim-reserved", Resources({"cpu": 4000, "nodes": 1000}), None, Resources())
    usage = read_input(world.runtime(), world.clock.now()).pool_usage["default"]
    assert usage["cpu"] == 8000 and usage["nodes"] == 2000
