"""The soak's fault gate (testworld.chaos) on real clients: a death strikes after the call
took effect and every later call of the invocation dies; throttling answers without a request;
claim writes and drain steps are told apart from other calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from joiner.adapters.kubernetes import KubernetesClient
from testworld.chaos import Armed, Gate, LambdaDeath, call_tags
from testworld.kube_emulator import KubeEmulator

REGION = "us-east-1"


@pytest.fixture
def ec2() -> Iterator[tuple[Gate, Any]]:
    with mock_aws():
        session = boto3.Session(region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
        gate = Gate("scanner")
        gate.install_aws(session)
        yield gate, session.client("ec2")


def _fleet(client: Any) -> dict[str, Any]:
    image = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    template = client.create_launch_template(LaunchTemplateName="soak", LaunchTemplateData={"ImageId": image})["LaunchTemplate"]
    return {
        "Type": "instant",
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template["LaunchTemplateId"], "Version": "1"},
                "Overrides": [{"InstanceType": "c5.large", "AvailabilityZone": "us-east-1a"}],
            }
        ],
    }


def _instances(client: Any) -> list[str]:
    return [i["InstanceId"] for r in client.describe_instances()["Reservations"] for i in r["Instances"]]


def test_a_death_after_create_fleet_keeps_the_instance_and_kills_every_later_call(ec2: tuple[Gate, Any]) -> None:
    gate, client = ec2
    request = _fleet(client)
    gate.arm(Armed(crash=("crash-after-launch", 1)))
    with pytest.raises(LambdaDeath, match="died after ec2.CreateFleet"):
        client.create_fleet(**request)
    with pytest.raises(LambdaDeath, match="is gone"):
        client.describe_instances()
    assert not issubclass(LambdaDeath, Exception)  # `except Exception` in a handler cannot survive it
    gate.arm(Armed())
    assert len(_instances(client)) == 1  # the call took effect; only its answer was lost


def test_a_crash_counts_only_its_kind_of_call(ec2: tuple[Gate, Any]) -> None:
    gate, client = ec2
    request = _fleet(client)
    gate.arm(Armed(crash=("crash-after-launch", 2)))
    client.create_fleet(**request)  # the first CreateFleet survives
    _instances(client)  # other calls do not count
    with pytest.raises(LambdaDeath):
        client.create_fleet(**request)
    assert gate.counts["CreateFleet"] == 2 and gate.dead


def test_throttling_answers_chosen_ec2_calls_without_a_request(ec2: tuple[Gate, Any]) -> None:
    gate, client = ec2
    client.run_instances(ImageId=client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"], MinCount=1, MaxCount=1)
    gate.arm(Armed(throttle_ec2=frozenset({2})))
    assert len(_instances(client)) == 1
    with pytest.raises(ClientError) as raised:
        client.describe_instances()
    assert raised.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert len(_instances(client)) == 1 and gate.throttled == 1


def test_capacity_errors_answer_the_chosen_overrides(ec2: tuple[Gate, Any]) -> None:
    gate, client = ec2
    request = _fleet(client)
    gate.arm(Armed(capacity=lambda instance_type, zone, capacity_type: instance_type == "c5.large"))
    answer = client.create_fleet(**request)
    assert answer["Instances"] == [] and [e["ErrorCode"] for e in answer["Errors"]] == ["InsufficientInstanceCapacity"]
    gate.arm(Armed())
    assert client.create_fleet(**request)["Instances"]


def test_claim_writes_and_drain_steps_are_told_apart() -> None:
    assert "claim-write" in call_tags("dynamodb.UpdateItem", b'{"Key": {"pk": {"S": "CLAIM#c-1"}, "sk": {"S": "CLAIM"}}}')
    assert "claim-write" not in call_tags("dynamodb.UpdateItem", '{"Key": {"pk": {"S": "LEASE#provisioning"}}}')
    assert "claim-write" not in call_tags("dynamodb.GetItem", '{"Key": {"pk": {"S": "CLAIM#c-1"}}}')
    assert "drain" in call_tags("k8s.POST /api/v1/namespaces/default/pods/web-1/eviction")
    assert "drain" in call_tags("k8s.DELETE /api/v1/namespaces/default/pods/web-1")
    assert "drain" not in call_tags("k8s.DELETE /api/v1/nodes/node-1")
    assert call_tags("ec2.CreateFleet") == {"call", "CreateFleet"}


def test_a_death_mid_drain_strikes_after_the_eviction_took_effect() -> None:
    with KubeEmulator() as emulator:
        for name in ("web-1", "web-2"):
            emulator.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "pause"}]},
                }
            )
        client = KubernetesClient(emulator.url, sleep=lambda seconds: None)
        gate = Gate("termination")
        gate.install_kubernetes(client._pool)
        gate.arm(Armed(crash=("crash-mid-drain", 1)))
        with pytest.raises(LambdaDeath, match="eviction"):
            client.evict_pod("default", "web-1")
        with pytest.raises(LambdaDeath):
            client.evict_pod("default", "web-2")
        assert emulator.get("Pod", "web-1", "default") is None
        assert emulator.get("Pod", "web-2", "default") is not None
        client.close()
