"""The scanner handler on moto: an instance whose node never registered is terminated with
the scanner's own role (the IAM guard evaluates the TerminateInstances against it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from joiner.domain import labels as wk
from joiner.ports import ClaimRecord
from joiner.services.registration import REGISTRATION_TIMEOUT
from tests.events.world import CLUSTER, T0, AwsBase, SqsTime, World
from tests.support.iam_guard import Guard
from testworld.aws import fake_credentials
from testworld.kube_emulator import KubeEmulator
from testworld.lambdas import LambdaContext, load_handler

pytestmark = [pytest.mark.filterwarnings("ignore:No application metrics to publish")]


@pytest.fixture
def world(aws_base: AwsBase, kube_emulator: KubeEmulator) -> Iterator[World]:
    with fake_credentials(), SqsTime() as sqs_time:
        built = World(aws_base, kube_emulator, sqs_time)
        try:
            yield built
        finally:
            built.close()


def test_scanner_terminates_an_instance_whose_node_never_registered(world: World, iam_guard: Guard) -> None:
    world.node_pool()
    tags = {"joiner.dev/cluster": CLUSTER, f"kubernetes.io/cluster/{CLUSTER}": "owned", wk.NODEPOOL: "default", wk.NODECLAIM: "default-lost"}
    instance_id = world.ec2.run_instances(
        ImageId=world.amis["x86_64"],
        MinCount=1,
        MaxCount=1,
        InstanceType="c5.xlarge",
        SubnetId=world.network.subnets["us-east-1a"],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )["Instances"][0]["InstanceId"]
    launched_at = T0 - REGISTRATION_TIMEOUT - timedelta(minutes=1)
    world.runtime.state.put_claim(
        ClaimRecord(
            claim_id="default-lost",
            node_pool="default",
            state="launched",
            created_at=launched_at,
            launched_at=launched_at,
            instance_id=instance_id,
            instance_type="c5.xlarge",
            zone="us-east-1a",
            capacity_type="on-demand",
            price=0.17,
        )
    )
    scanner = load_handler("scanner")
    scanner.configure(world.runtime)
    try:
        scanner.handler({"mode": "economy"}, LambdaContext(aws_request_id=str(uuid.uuid4())))
    finally:
        scanner.reset()
    (state,) = [i["State"]["Name"] for r in world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"] for i in r["Instances"]]
    assert state in ("shutting-down", "terminated")
    claim = world.runtime.state.get_claim("default-lost")
    assert claim is not None and claim.state == "closed"
    # allowed by the scanner's role (a denial would have failed this test in the guard's teardown)
    assert "ec2:TerminateInstances" in iam_guard.exercised["scanner"]
