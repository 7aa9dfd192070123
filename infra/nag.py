"""cdk-nag (AwsSolutions) wiring and the justified acknowledgements Joiner needs.

cdk-nag 3 reports one finding per wildcard (``AwsSolutions-IAM5[Resource::...]``) and per
AWS-managed policy (``AwsSolutions-IAM4[Policy::...]``), and each must be acknowledged by
its full id. Rather than pasting generated ids (which contain logical ids and break when
the construct is used in another stack), :class:`JustifiedFindings` recomputes the
findings of every IAM policy and role under the Joiner construct the way cdk-nag does and
acknowledges a finding only when every statement producing it matches one of the
justifications below. A new wildcard that fits none of them still fails synth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import jsii
from aws_cdk import Acknowledgment, App, CfnResource, IAspect, Stack, Validations
from aws_cdk import aws_iam as iam
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

from infra.access import CLEAN_UP_READ_ACTIONS, CLUSTER_TAG, LAUNCH_READ_ACTIONS, LAUNCH_SHARED_RESOURCE_TYPES, PRICING_ACTIONS, READ_ACTIONS

__all__ = [
    "add_nag_checks",
    "acknowledge",
    "flatten_reference",
    "wildcard_findings",
    "JustifiedFindings",
    "Justification",
    "WILDCARD_JUSTIFICATIONS",
    "MANAGED_POLICY_JUSTIFICATIONS",
]


def add_nag_checks(app: App) -> None:
    """Run the AwsSolutions pack on ``app`` at synth: any unacknowledged finding fails it.

    Acknowledgements and their reasons are also written to each resource's template
    metadata (``cdk_nag.rules_to_suppress``), an audit trail compliance tools can read.
    """
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, write_suppressions_to_cloud_formation=True))


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def flatten_reference(value: Any) -> str:
    """cdk-nag's ``flattenCfnReference``: intrinsics as ``<Logical.Attr>``, ``${X}`` as ``<X>``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.replace("${", "<").replace("}", ">")
    if isinstance(value, dict):
        if "Fn::Join" in value:
            delimiter: str
            delimiter, items = value["Fn::Join"]
            return str(delimiter).join(flatten_reference(item) for item in items)
        if "Fn::Sub" in value:
            return flatten_reference(value["Fn::Sub"])
        if "Fn::GetAtt" in value:
            resource, attribute = value["Fn::GetAtt"]
            return f"<{flatten_reference(resource)}.{flatten_reference(attribute)}>"
        if "Fn::ImportValue" in value:
            return flatten_reference(value["Fn::ImportValue"])
        if "Ref" in value:
            return f"<{flatten_reference(value['Ref'])}>"
    return json.dumps(value, separators=(",", ":"))


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def wildcard_findings(document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """IAM5 findings of a resolved policy document -> the Allow statements producing each."""
    findings: dict[str, list[dict[str, Any]]] = {}
    for statement in _as_list(document.get("Statement")):
        if statement.get("Effect") != "Allow":
            continue
        for action in _as_list(statement.get("Action")):
            if isinstance(action, str) and "*" in action:
                findings.setdefault(f"Action::{action}", []).append(statement)
        for resource in _as_list(statement.get("Resource")):
            flat = flatten_reference(resource)
            if "*" in flat:
                findings.setdefault(f"Resource::{flat}", []).append(statement)
    return findings


@dataclass(frozen=True, slots=True)
class Justification:
    """Why a wildcard is acceptable; ``applies(finding, statement)`` decides per statement."""

    reason: str
    applies: Callable[[str, dict[str, Any]], bool]


def _actions(statement: dict[str, Any]) -> set[str]:
    return {action for action in _as_list(statement.get("Action")) if isinstance(action, str)}


def _has_cluster_tag_condition(statement: dict[str, Any]) -> bool:
    equals = (statement.get("Condition") or {}).get("StringEquals") or {}
    return any(key in equals for key in (f"aws:RequestTag/{CLUSTER_TAG}", f"aws:ResourceTag/{CLUSTER_TAG}"))


#: Actions AWS offers no resource-level permissions for; all are reads or telemetry.
RESOURCELESS_ACTIONS = frozenset(
    {*READ_ACTIONS, *LAUNCH_READ_ACTIONS, *CLEAN_UP_READ_ACTIONS, *PRICING_ACTIONS, "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
)
# Partition and region are tokens in environment-agnostic stacks and literals otherwise.
_PARTITION_REGION = r"(?:<AWS::Partition>|aws[a-z-]*):%s:(?:<AWS::Region>|[a-z]{2}(?:-[a-z]+)+-\d)"
_SHARED_LAUNCH_INPUT = re.compile(r"^Resource::arn:%s:\*?:(%s)/\*$" % (_PARTITION_REGION % "ec2", "|".join(LAUNCH_SHARED_RESOURCE_TYPES)))
_EC2_RESOURCE = re.compile(r"^Resource::arn:%s:\*?:[a-z-]+/\*$" % (_PARTITION_REGION % "ec2"))
_PUBLIC_AMI_PARAMETER = re.compile(r"^Resource::arn:%s::parameter/aws/service/[a-z0-9/*-]+/\*$" % (_PARTITION_REGION % "ssm"))
_TABLE_INDEXES = re.compile(r"^Resource::<[A-Za-z0-9]+\.Arn>/index/\*$")
_OWN_RESOURCE = re.compile(r"^<[A-Za-z0-9]+\.Arn>$")

WILDCARD_JUSTIFICATIONS: tuple[Justification, ...] = (
    Justification(
        "The EC2 Describe actions the functions call, pricing:GetProducts and X-Ray trace upload have no resource-level permissions; "
        "all are read-only or telemetry (the Describe actions are limited to this region by aws:RequestedRegion).",
        lambda finding, statement: finding == "Resource::*" and _actions(statement) <= RESOURCELESS_ACTIONS,
    ),
    Justification(
        f"EC2 writes are fenced by the {CLUSTER_TAG} tag: created resources must be tagged with this cluster "
        "(aws:RequestTag) and only resources carrying it can be terminated or deleted (aws:ResourceTag).",
        lambda finding, statement: bool(_EC2_RESOURCE.match(finding)) and _has_cluster_tag_condition(statement),
    ),
    Justification(
        "RunInstances/CreateFleet must read the AMI, its snapshots, the subnets, security groups and capacity "
        "reservations a NodeClass selects; these are chosen at run time, so the grant covers the type only. "
        "Spot instance requests are created by the fleet, which cannot tag them (as in Karpenter's policy).",
        lambda finding, statement: bool(_SHARED_LAUNCH_INPUT.match(finding)) and _actions(statement) <= {"ec2:RunInstances", "ec2:CreateFleet"},
    ),
    Justification(
        "Public EKS-optimised AMI parameters published by AWS (read-only ssm:GetParameter).",
        lambda finding, statement: bool(_PUBLIC_AMI_PARAMETER.match(finding)) and _actions(statement) <= {"ssm:GetParameter"},
    ),
    Justification(
        "The global secondary indexes of Joiner's own DynamoDB tables (CDK table grant).",
        lambda finding, statement: bool(_TABLE_INDEXES.match(finding)) and all(action.startswith("dynamodb:") for action in _actions(statement)),
    ),
    Justification(
        "KMS data-key actions on Joiner's own key only (CDK grant for the encrypted tables and queues).",
        lambda finding, statement: (
            finding in ("Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*")
            and all(isinstance(resource, dict) and _OWN_RESOURCE.match(flatten_reference(resource)) for resource in _as_list(statement.get("Resource")))
        ),
    ),
)

#: AWS-managed policy (name) -> why it is used instead of a custom one.
MANAGED_POLICY_JUSTIFICATIONS: dict[str, str] = {
    "AmazonEKSWorkerNodePolicy": "Required by EKS for worker nodes (kubelet); AWS keeps it current with EKS.",
    "AmazonEKS_CNI_Policy": "Required by the VPC CNI on worker nodes to manage pod ENIs and IPs.",
    "AmazonEC2ContainerRegistryPullOnly": "Worker nodes pull images from ECR (pull-only, no push).",
    "AmazonSSMManagedInstanceCore": "Session Manager access to nodes instead of SSH (no open ports).",
    "service-role/AWSLambdaVPCAccessExecutionRole": "Lambda needs ENI permissions to run in the cluster's VPC; "
    "the EC2 ENI actions have no resource-level permissions.",
}


@jsii.implements(IAspect)
class JustifiedFindings:
    """Aspect acknowledging the IAM4/IAM5 findings the justifications above cover."""

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, iam.CfnPolicy):
            document = Stack.of(node).resolve(node.policy_document)
            self._acknowledge_wildcards(node, document)
        elif isinstance(node, iam.CfnRole):
            for policy in _as_list(Stack.of(node).resolve(node.policies)):
                self._acknowledge_wildcards(node, policy.get("PolicyDocument") or policy.get("policyDocument") or {})
            for arn in _as_list(Stack.of(node).resolve(node.managed_policy_arns)):
                flat = flatten_reference(arn)
                name = flat.split(":iam::aws:policy/", 1)[1] if ":iam::aws:policy/" in flat else None
                if name in MANAGED_POLICY_JUSTIFICATIONS:
                    acknowledge(node, f"AwsSolutions-IAM4[Policy::{flat}]", MANAGED_POLICY_JUSTIFICATIONS[name])

    @staticmethod
    def _acknowledge_wildcards(node: CfnResource, document: dict[str, Any]) -> None:
        for finding, statements in wildcard_findings(document).items():
            reasons = [_first_reason(finding, statement) for statement in statements]
            if all(reason is not None for reason in reasons):
                acknowledge(node, f"AwsSolutions-IAM5[{finding}]", " ".join(sorted(set(filter(None, reasons)))))


def _first_reason(finding: str, statement: dict[str, Any], justifications: Iterable[Justification] = WILDCARD_JUSTIFICATIONS) -> str | None:
    for justification in justifications:
        if justification.applies(finding, statement):
            return justification.reason
    return None
