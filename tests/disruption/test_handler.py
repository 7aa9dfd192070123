"""The disruption Lambda handler end to end: the scheduled event, moto (EC2, DynamoDB, SQS)
and the Kubernetes API emulator over HTTP through the real adapters; the drain continues
through the work queue and the termination handler."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from joiner.adapters.ec2 import ami_parameter_path
from joiner.domain import labels as wk
from joiner.services.termination import TERMINATION_KIND
from tests.events.world import CLUSTER, AwsBase, SqsTime, World, load_handler
from testworld.aws import K8S_VERSION, fake_credentials, put_public_parameter
from testworld.kube_emulator import KubeEmulator
from testworld.lambdas import LambdaContext, scheduled_event

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

SCHEDULED = scheduled_event("joiner-disruption", datetime(2025, 1, 6, 9, tzinfo=UTC))


@pytest.fixture
def world(aws_base: AwsBase, kube_emulator: KubeEmulator) -> Iterator[World]:
    with fake_credentials(), SqsTime() as sqs_time:
        built = World(aws_base, kube_emulator, sqs_time)
        kube_emulator.handler.clock = built.clock.now  # creation times on Joiner's clock
        built.node_pool(disruption={"consolidateAfter": "0s", "budgets": [{"nodes": "100%"}]})
        handler = load_handler("disruption")
        handler.configure(built.runtime)
        built.disruption_handler = handler  # type: ignore[attr-defined]
        try:
            yield built
        finally:
            handler.reset()
            built.close()


def initialized_node(world: World, name: str) -> str:
    instance = world.launch_node(name, capacity_type="on-demand")
    world.kube.patch_node(name, {"metadata": {"labels": {wk.INITIALIZED: "true"}}})
    return instance


def invoke(world: World, event: dict | None = None) -> dict:
    return world.disruption_handler.handler(SCHEDULED if event is None else event, LambdaContext(aws_request_id=str(uuid.uuid4())))  # type: ignore[attr-defined]


def test_scheduled_passes_validate_then_drain_an_empty_node(world: World) -> None:
    empty = initialized_node(world, "n1")
    initialized_node(world, "n2")
    world.add_pod("web-1", "n2", cpu="3")

    first = invoke(world)
    assert first["status"] == "computed" and first["executed"] == []
    assert [c["nodes"] for c in first["pending"]] == [["n1"]]
    assert world.node("n1")["spec"].get("unschedulable") is None

    world.advance(60)  # the next scheduled pass
    second = invoke(world)
    assert [c["method"] for c in second["executed"]] == ["emptiness"]
    assert world.node("n1") is None  # empty: drained in one step, Node deleted
    assert world.instance_state(empty) in ("shutting-down", "terminated")
    assert world.node("n2") is not None and world.pods_on("n2") == ["default/web-1"]
    assert world.runtime.state.get_claim("default-n1").state == "closed"


def test_consolidation_moves_pods_through_pdb_respecting_evictions(world: World) -> None:
    initialized_node(world, "n1")
    initialized_node(world, "n2")
    world.add_pod("web-1", "n1", cpu="1")
    world.add_pod("web-2", "n2", cpu="1")
    world.add_pod("guarded", "n2", app="db", cpu="100m", annotations={wk.DO_NOT_DISRUPT: "true"})

    first = invoke(world)
    (command,) = first["pending"]
    assert command["method"] == "consolidation" and command["nodes"] == ["n1"] and command["replacements"] == []
    world.advance(60)
    second = invoke(world)
    assert [c["nodes"] for c in second["executed"]] == [["n1"]]
    assert world.node("n1")["spec"]["unschedulable"] is True
    assert "default/web-1" in world.evictions()
    world.run_work_queue()
    assert world.node("n1") is None
    assert world.node("n2") is not None  # guarded by do-not-disrupt


def test_new_ami_in_ssm_drifts_the_node_and_replaces_it_on_the_new_ami(world: World) -> None:
    instance = initialized_node(world, "n1")
    world.add_pod("web-1", "n1", cpu="3")  # needs a replacement: nothing else can hold it
    old_ami = world.amis["x86_64"]
    assert world.ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["ImageId"] == old_ami

    assert invoke(world)["pending"] == []  # on the NodeClass's current AMI: not drifted

    images = world.ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}, {"Name": "owner-alias", "Values": ["amazon"]}])["Images"]
    new_ami = next(i["ImageId"] for i in sorted(images, key=lambda i: i["ImageId"]) if i["ImageId"] != old_ami)
    parameter = ami_parameter_path(K8S_VERSION, "amd64")
    put_public_parameter(parameter, new_ami)  # EKS publishes a new AL2023 AMI
    try:
        world.advance(301)  # the adapter caches SSM answers for 5 minutes
        first = invoke(world)
        (command,) = first["pending"]
        assert command["method"] == "drift" and command["nodes"] == ["n1"], first
        assert f"AMI {old_ami} is not the NodeClass's current amd64 AMI {new_ami}" in command["reason"]
        assert world.node("n1")["spec"].get("unschedulable") is None  # nothing done before validation

        world.advance(60)  # the next scheduled pass validates and executes
        second = invoke(world)
        assert [(c["method"], c["nodes"]) for c in second["executed"]] == [("drift", ["n1"])], second
        assert world.node("n1")["spec"]["unschedulable"] is True
        termination = world.runtime.state.get_item(TERMINATION_KIND, "n1")
        assert termination["reason"] == "disruption/drift" and termination["replacementClaims"]
        (replacement,) = [i["id"] for i in world.fleet_instances() if i["id"] != instance]
        launched = world.ec2.describe_instances(InstanceIds=[replacement])["Reservations"][0]["Instances"][0]
        assert launched["ImageId"] == new_ami
        assert world.evictions() == []  # the drain waits for the replacement to be Ready
    finally:
        put_public_parameter(parameter, old_ami)  # the moto server is shared by the module's tests


def test_rejects_other_events(world: World) -> None:
    from joiner_function_disruption import DisruptionEventError  # type: ignore[import-not-found]

    with pytest.raises(DisruptionEventError, match="unknown field"):
        invoke(world, {"mode": "fast"})
    with pytest.raises(DisruptionEventError, match="detail-type"):
        invoke(world, {**SCHEDULED, "detail-type": "Something Else"})
    assert invoke(world, {"dryRun": True})["status"] == "computed"
    assert world.settings.cluster_name == CLUSTER
