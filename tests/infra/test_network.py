"""Functions in a VPC without NAT: every AWS API they call needs an interface endpoint, the
watcher's lambda:InvokeFunction included (responsive mode wakes the scanner through it)."""

from __future__ import annotations

import json

import pytest

from infra.config import INTERFACE_ENDPOINTS
from tests.infra.conftest import Synthesized, synthesize


@pytest.fixture(scope="module")
def synthesized_endpoints(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(
        {
            "clusterName": "vpc-cluster",
            "region": "eu-west-1",
            "vpcId": "vpc-0123456789abcdef0",
            "subnetIds": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
            "vpcEndpoints": "create",
        },
        tmp_path_factory.mktemp("cdk-endpoints"),
    )


def test_every_interface_endpoint_the_functions_call_is_created_in_their_subnets(synthesized_endpoints: Synthesized) -> None:
    endpoints = synthesized_endpoints.resources("AWS::EC2::VPCEndpoint").values()
    services = {json.dumps(e["Properties"]["ServiceName"]).split(".")[-1].strip('"]}') for e in endpoints}
    assert services == set(INTERFACE_ENDPOINTS) and "lambda" in services
    function_group = next(key for key in synthesized_endpoints.resources("AWS::EC2::SecurityGroup") if "NetworkSecurityGroup" in key)
    for endpoint in endpoints:
        properties = endpoint["Properties"]
        assert properties["VpcEndpointType"] == "Interface" and properties["PrivateDnsEnabled"] is True
        assert properties["SubnetIds"] == ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
        assert properties["VpcId"] == "vpc-0123456789abcdef0"
    (group,) = [g for key, g in synthesized_endpoints.resources("AWS::EC2::SecurityGroup").items() if "EndpointSecurityGroup" in key]
    assert group["Properties"]["SecurityGroupIngress"] == [
        {
            "Description": "Joiner functions",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
            "SourceSecurityGroupId": {"Fn::GetAtt": [function_group, "GroupId"]},
        }
    ]
    assert synthesized_endpoints.nag_violations == []


def test_economy_mode_needs_no_lambda_endpoint() -> None:
    from infra.config import JoinerConfig

    vpc = dict(cluster_name="c", vpc_id="vpc-0123456789abcdef0", subnet_ids=("subnet-0123456789abcdef0",), vpc_endpoints="create")
    assert "lambda" not in JoinerConfig(**vpc, scanner_mode="economy").interface_endpoints_needed  # type: ignore[arg-type]
    assert "lambda" in JoinerConfig(**vpc).interface_endpoints_needed  # type: ignore[arg-type]


def test_existing_endpoints_create_nothing(synthesized_private: Synthesized) -> None:
    assert not synthesized_private.resources("AWS::EC2::VPCEndpoint")
