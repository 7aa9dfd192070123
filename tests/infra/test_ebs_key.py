"""Launches whose volumes a customer-managed EBS key encrypts: EC2 uses the key for the
launching role, so the role needs the grant (``-c ebsKmsKeyArn=...``), evaluated by the IAM guard."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from tests.infra.conftest import EBS_KEY, Synthesized
from tests.support.iam_guard import authorizations, bind, deployment_of
from tests.support.iam_policy import evaluate

REGION = "eu-west-1"
TEMPLATE = {
    "ImageId": "ami-1",
    "SecurityGroupIds": ["sg-1"],
    "IamInstanceProfile": {"Name": "MyNodeRole"},
    "BlockDeviceMappings": [{"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 20, "Encrypted": True, "KmsKeyId": EBS_KEY}}],
    "TagSpecifications": [{"ResourceType": t, "Tags": [{"Key": "joiner.dev/cluster", "Value": "c"}]} for t in ("instance", "volume", "network-interface")],
}


class _State:
    def tags(self, resource_id: str) -> dict[str, str]:
        return {"joiner.dev/cluster": "c"}

    def launch_template(self, template_id: str | None, name: str | None, version: str | None) -> tuple[str, dict[str, Any]]:
        return "lt-1", TEMPLATE

    def image_snapshots(self, image_id: str) -> list[str]:
        return []


def _deployment(synthesized: Synthesized) -> Any:
    """The guard evaluates the roles' own policies; the private variant's roles also carry the
    AWS-managed VPC access policy (network interfaces only, no KMS), left out here."""
    template = copy.deepcopy(synthesized.template)
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::IAM::Role":
            resource["Properties"].pop("ManagedPolicyArns", None)
    return deployment_of(template)


def _key_decisions(synthesized: Synthesized, cluster: str) -> dict[str, bool]:
    deployment = _deployment(synthesized)
    settings = SimpleNamespace(cluster_name=cluster, region=REGION, node_role="MyNodeRole")
    binding = bind(deployment, "scanner", settings)
    statements = [binding.resolve(s) for s in deployment.statements["scanner"]]
    params = {
        "Type": "instant",
        "LaunchTemplateConfigs": [
            {"LaunchTemplateSpecification": {"LaunchTemplateId": "lt-1", "Version": "1"}, "Overrides": [{"InstanceType": "m5.large", "SubnetId": "subnet-1"}]}
        ],
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
    }
    needed = authorizations("ec2", "CreateFleet", params, region=REGION, state=_State())  # type: ignore[arg-type]
    return {a.action: evaluate(statements, a).allowed for a in needed if a.action.startswith("kms:")}


def test_a_launch_encrypting_volumes_with_the_key_is_granted_its_use(synthesized_private: Synthesized) -> None:
    decisions = _key_decisions(synthesized_private, "private-cluster")
    assert set(decisions) == {
        "kms:CreateGrant",
        "kms:Decrypt",
        "kms:DescribeKey",
        "kms:GenerateDataKeyWithoutPlaintext",
        "kms:ReEncryptFrom",
        "kms:ReEncryptTo",
    }
    assert all(decisions.values()), decisions


def test_without_ebs_kms_key_arn_the_launch_is_denied_the_key(synthesized: Synthesized) -> None:
    assert not any(_key_decisions(synthesized, "demo").values())


@pytest.mark.parametrize("for_resource", ["false", None])
def test_the_grant_is_for_aws_resources_only(synthesized_private: Synthesized, for_resource: str | None) -> None:
    from tests.support.iam_policy import Authorization

    deployment = _deployment(synthesized_private)
    binding = bind(deployment, "scanner", SimpleNamespace(cluster_name="private-cluster", region=REGION))
    statements = [binding.resolve(s) for s in deployment.statements["scanner"]]
    context = {} if for_resource is None else {"kms:GrantIsForAWSResource": for_resource}
    absent = ("kms:GrantIsForAWSResource",) if for_resource is None else ()
    assert not evaluate(statements, Authorization("kms:CreateGrant", EBS_KEY, context, absent)).allowed
    # and only where launches happen
    gc = [binding.resolve(s) for s in deployment.statements["gc"]]
    assert not evaluate(gc, Authorization("kms:CreateGrant", EBS_KEY, {"kms:GrantIsForAWSResource": "true"}, ())).allowed
