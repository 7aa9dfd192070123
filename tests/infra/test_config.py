"""Deployment settings: context parsing and one-line errors naming the key."""

from __future__ import annotations

import pytest

from infra.config import ConfigError, JoinerConfig


def from_context(**context):
    return JoinerConfig.from_context(context.get)


def test_defaults_and_command_line_strings_are_parsed():
    config = from_context(
        clusterName="prod",
        subnetIds="subnet-0123456789abcdef0, subnet-0123456789abcdef1",
        vpcId="vpc-0123456789abcdef0",
        vpcEndpoints="existing",
        logRetentionDays="90",
        createAccessEntry="false",
    )
    assert config.subnet_ids == ("subnet-0123456789abcdef0", "subnet-0123456789abcdef1")
    assert (config.log_retention_days, config.create_access_entry, config.scanner_mode) == (90, False, "responsive")
    assert config.existing_node_role_name is None and config.in_vpc
    assert from_context(clusterName="a", subnetIds='["subnet-0123456789abcdef0"]', vpcId="vpc-0123456789abcdef0", vpcEndpoints="create").subnet_ids == (
        "subnet-0123456789abcdef0",
    )


def test_a_dashboard_only_when_asked_for():
    assert from_context(clusterName="prod").dashboard is None
    assert from_context(clusterName="prod", dashboard="true").dashboard == "Joiner-prod"
    assert from_context(clusterName="prod", dashboard=True, dashboardName="ops").dashboard == "ops"
    assert from_context(clusterName="prod", dashboardName="ops").dashboard == "ops"  # a name asks for one


def test_reading_karpenters_objects_is_off_unless_asked_for():
    assert from_context(clusterName="prod").read_karpenter_crds is False
    assert from_context(clusterName="prod", readKarpenterCrds="true").read_karpenter_crds is True
    assert from_context(clusterName="prod", readKarpenterCrds=False).read_karpenter_crds is False


def test_cdk_json_types_are_accepted():
    config = from_context(clusterName="prod", logRetentionDays=7, createAccessEntry=True, scannerMode="economy")
    assert (config.log_retention_days, config.create_access_entry, config.scanner_mode) == (7, True, "economy")


def test_node_role_name_comes_from_the_arn_path():
    config = from_context(clusterName="prod", nodeRoleArn="arn:aws:iam::123456789012:role/team/eks/NodeRole")
    assert config.existing_node_role_name == "NodeRole"


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({}, "context 'clusterName': is required"),
        ({"clusterName": "-bad"}, "context 'clusterName': '-bad' is not a valid EKS cluster name"),
        ({"clusterName": "a", "region": "mars-1"}, "context 'region'"),
        ({"clusterName": "a", "vpcId": "vpc-0123456789abcdef0"}, "context 'vpcId': needs subnetIds"),
        ({"clusterName": "a", "subnetIds": "subnet-0123456789abcdef0"}, "context 'subnetIds': needs vpcId"),
        (
            {"clusterName": "a", "vpcId": "vpc-0123456789abcdef0", "subnetIds": "sub-1", "vpcEndpoints": "existing"},
            "context 'subnetIds': 'sub-1' is not a subnet id",
        ),
        (
            {"clusterName": "a", "vpcId": "vpc-0123456789abcdef0", "subnetIds": "subnet-0123456789abcdef0"},
            (
                "context 'vpcEndpoints': in a VPC, say how the functions reach AWS APIs: 'create' (the stack creates interface endpoints "
                "for ec2, ssm, eks, sqs, sts, lambda, xray)"
            ),
        ),
        (
            {"clusterName": "a", "vpcId": "vpc-0123456789abcdef0", "subnetIds": "subnet-0123456789abcdef0", "vpcEndpoints": "nat"},
            "context 'vpcEndpoints': must be 'create' or 'existing'",
        ),
        ({"clusterName": "a", "vpcEndpoints": "create"}, "context 'vpcEndpoints': needs vpcId"),
        ({"clusterName": "a", "securityGroupId": "sg-0123456789abcdef0"}, "context 'securityGroupId': needs vpcId"),
        ({"clusterName": "a", "scannerMode": "fast"}, "context 'scannerMode': must be 'responsive' or 'economy'"),
        ({"clusterName": "a", "logRetentionDays": "31"}, "context 'logRetentionDays': must be one of 1, 3, 5"),
        ({"clusterName": "a", "logRetentionDays": "month"}, "context 'logRetentionDays': 'month' is not a whole number"),
        (
            {"clusterName": "a", "alarmEmail": "ops@example.com", "alarmTopicArn": "arn:aws:sns:us-east-1:123456789012:t"},
            "context 'alarmEmail': give either alarmEmail",
        ),
        ({"clusterName": "a", "alarmEmail": "ops"}, "context 'alarmEmail': 'ops' is not an e-mail address"),
        ({"clusterName": "a", "alarmTopicArn": "arn:aws:sqs:us-east-1:123456789012:q"}, "context 'alarmTopicArn'"),
        ({"clusterName": "a", "nodeRoleArn": "NodeRole"}, "context 'nodeRoleArn': 'NodeRole' is not an IAM role ARN"),
        ({"clusterName": "a", "createAccessEntry": "maybe"}, "context 'createAccessEntry': must be true or false"),
        ({"clusterName": "a", "dashboard": "sometimes"}, "context 'dashboard': must be true or false"),
        ({"clusterName": "a", "readKarpenterCrds": "perhaps"}, "context 'readKarpenterCrds': must be true or false"),
        ({"clusterName": "a", "dashboard": 3}, "context 'dashboard': must be true or false"),
        ({"clusterName": "a", "logLevel": "loud"}, "context 'logLevel': must be one of DEBUG, INFO, WARNING, ERROR, got 'LOUD'"),
        ({"clusterName": "a", "dashboardName": "my dashboard"}, "context 'dashboardName': 'my dashboard' is not a dashboard name"),
        ({"clusterName": "a", "pendingPodAgeAlarmSeconds": "10"}, "context 'pendingPodAgeAlarmSeconds': must be a whole number from 60 to 86400"),
        ({"clusterName": "a", "pendingPodAgeAlarmSeconds": "5m"}, "context 'pendingPodAgeAlarmSeconds': '5m' is not a whole number"),
        ({"clusterName": "a", "interruptionQueueAgeAlarmSeconds": 120}, "context 'interruptionQueueAgeAlarmSeconds': must be a whole number from 5 to 110"),
        ({"clusterName": "a", "capacityErrorsAlarmThreshold": True}, "context 'capacityErrorsAlarmThreshold': must be a whole number"),
        ({"clusterName": "a", "capacityErrorsAlarmThreshold": "1" * 500}, "context 'capacityErrorsAlarmThreshold'"),
    ],
)
def test_bad_settings_fail_with_one_line_naming_the_key(context, message):
    with pytest.raises(ConfigError) as error:
        from_context(**context)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_synth_entry_point_reports_bad_settings_with_exit_2(capsys, tmp_path):
    from infra.synth import main

    assert main(["-c", "clusterName=demo", "-c", "scannerMode=fast", "--no-bundling", "--out", str(tmp_path)]) == 2
    assert "infra.synth: context 'scannerMode'" in capsys.readouterr().err
