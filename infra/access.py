"""Least-privilege IAM for the functions and their Kubernetes identity (EKS access entries).

Each function has its own role, granted what its code calls and nothing else (the test
suite's IAM guard, ``tests/support/iam_guard.py``, evaluates every AWS request the
handlers make against these policies and lists grants no test exercises). EC2 writes are
fenced by the ``joiner.dev/cluster`` tag: resources are created only when the request
tags them with this cluster's name, and only resources carrying that tag can be
terminated or deleted. The launch path therefore tags every resource it creates (fleet,
instance, volume and network interface, launch template) with
``joiner.dev/cluster: <cluster>``, as Karpenter does with its cluster tag. Spot instance
requests are authorised without a request tag, as in Karpenter's policy: an instant EC2
Fleet cannot tag them (its TagSpecifications accept ``fleet`` and ``instance``), and
Joiner's launch templates serve both capacity types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aws_cdk import Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

if TYPE_CHECKING:
    from infra.cluster_image import ClusterImageBucket

__all__ = [
    "CAPABILITIES",
    "CLEAN_UP_READ_ACTIONS",
    "CLUSTER_TAG",
    "EBS_KEY_ACTIONS",
    "EC2_SERVICE_PRINCIPALS",
    "EKS_AMI_PARAMETERS",
    "IDEMPOTENCY_TABLE_ACTIONS",
    "KUBERNETES_GROUP",
    "KUBERNETES_GROUP_BY_FUNCTION",
    "LAUNCH_CREATED_RESOURCE_TYPES",
    "LAUNCH_READ_ACTIONS",
    "LAUNCH_SHARED_RESOURCE_TYPES",
    "QUEUE_PRODUCER_KEY_ACTIONS",
    "PRICING_ACTIONS",
    "READ_ACTIONS",
    "STATE_TABLE_ACTIONS",
    "STATE_TABLE_ACTIONS_BY_FUNCTION",
    "TABLE_KEY_ACTIONS",
    "FunctionAccess",
    "grant_table",
]

CLUSTER_TAG = "joiner.dev/cluster"
#: What EC2 does with a customer-managed EBS key on the launching caller's behalf (encrypted
#: volumes from a launch): the grant (for AWS resources only) and the data-key calls.
EBS_KEY_ACTIONS: tuple[str, ...] = (
    "kms:Decrypt",
    "kms:DescribeKey",
    "kms:GenerateDataKeyWithoutPlaintext",
    "kms:ReEncryptFrom",
    "kms:ReEncryptTo",
)
#: What ``iam:PassedToService`` holds when the node role is passed to EC2, per partition.
EC2_SERVICE_PRINCIPALS: tuple[str, ...] = ("ec2.amazonaws.com", "ec2.amazonaws.com.cn")
#: Kubernetes group of the functions' access entries; manifests/rbac.yaml binds it.
KUBERNETES_GROUP = "joiner:controller"
#: The watcher only lists and watches pods, Nodes, NodePools and NodeClasses (manifests/rbac.yaml).
KUBERNETES_GROUP_BY_FUNCTION: Mapping[str, str] = {"watcher": "joiner:watcher"}

#: What each function may do beyond reading instances and its cluster and using the state
#: table. ``idempotency``: the powertools idempotency table (interruption events);
#: ``continue``: send drain continuations to the work queue (whoever begins or continues a
#: termination); ``image-read``/``image-write``: the cluster state's image (every function
#: that reads the cluster restores it when cold; the scanner writes it). Consumers get their queue through the event source mapping.
CAPABILITIES: Mapping[str, frozenset[str]] = {
    # launches nodes; terminates an instance whose node never registered; writes the cluster
    # state's image after its round
    "scanner": frozenset({"launch", "terminate", "image-read", "image-write"}),
    # replacement on rebalance, terminate after drain
    "interruption": frozenset({"launch", "terminate", "idempotency", "continue", "image-read"}),
    "termination": frozenset({"terminate", "continue"}),
    # consolidation replaces, empty nodes are deleted
    "disruption": frozenset({"launch", "terminate", "continue", "image-read"}),
    # leaked instances and stale launch templates
    "gc": frozenset({"terminate", "clean-up", "image-read"}),
    # responsive mode: watches pods, wakes the scanner (granted by infra/functions.py), keeps its
    # watch position in the state table; reads no instances
    "watcher": frozenset({"no-instance-reads"}),
}
#: The state-table calls of a function that does not use the whole adapter.
STATE_TABLE_ACTIONS_BY_FUNCTION: Mapping[str, tuple[str, ...]] = {"watcher": ("dynamodb:GetItem", "dynamodb:PutItem")}

#: EC2 reads every function makes (instance records prove ownership before any action).
READ_ACTIONS: tuple[str, ...] = ("ec2:DescribeInstances",)
#: EC2 reads of the launch path: selectors, AMIs, launch templates, spot prices, and the
#: instance types, zone offerings and zone ids the run-time catalog is built from (services/catalog.py).
LAUNCH_READ_ACTIONS: tuple[str, ...] = (
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
)
#: On-demand prices of the run-time catalog (the Price List API has no resources and is served
#: from us-east-1, eu-central-1 and ap-south-1 only, so no aws:RequestedRegion condition).
PRICING_ACTIONS: tuple[str, ...] = ("pricing:GetProducts",)
#: EC2 reads of launch-template garbage collection.
CLEAN_UP_READ_ACTIONS: tuple[str, ...] = ("ec2:DescribeLaunchTemplates",)
#: The public SSM parameters alias AMI selectors read: the EKS-optimised AL2023 AMIs of every
#: Kubernetes version, architecture and variant (standard, nvidia, neuron), and nothing else
#: (joiner.domain.amis.al2023_parameter builds every name read).
EKS_AMI_PARAMETERS = "aws/service/eks/optimized-ami/*/amazon-linux-2023/*"
#: DynamoDB calls of the state adapter (joiner.adapters.state) and of powertools' idempotency layer.
STATE_TABLE_ACTIONS: tuple[str, ...] = (
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:Scan",
    "dynamodb:UpdateItem",
)
IDEMPOTENCY_TABLE_ACTIONS: tuple[str, ...] = ("dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
#: What DynamoDB does with a table's customer-managed key on the caller's behalf (the
#: key-use permissions AWS documents for principals of a CMK-encrypted table; CDK's own set).
TABLE_KEY_ACTIONS: tuple[str, ...] = ("kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*")
QUEUE_PRODUCER_KEY_ACTIONS: tuple[str, ...] = ("kms:Decrypt", "kms:GenerateDataKey")
#: Resource types a launch creates: allowed only when the request tags them for this cluster.
LAUNCH_CREATED_RESOURCE_TYPES: tuple[str, ...] = ("fleet", "instance", "volume", "network-interface", "launch-template")
#: Existing resources a launch uses (AMIs, their snapshots, subnets, security groups,
#: reservations) and spot instance requests, which an instant fleet cannot tag.
LAUNCH_SHARED_RESOURCE_TYPES: tuple[str, ...] = (
    "image",
    "snapshot",
    "subnet",
    "security-group",
    "capacity-reservation",
    "spot-instances-request",
)


def grant_table(table: dynamodb.ITable, role: iam.IRole, actions: tuple[str, ...]) -> None:
    """``actions`` on the table and its indexes, and the table key's use (:data:`TABLE_KEY_ACTIONS`)."""
    table.grant(role, *actions)
    if table.encryption_key is not None:
        table.encryption_key.grant(role, *TABLE_KEY_ACTIONS)


class FunctionAccess(Construct):
    """``roles``: one Lambda role per function, with policies per :data:`CAPABILITIES`.

    Policies: ``Discover`` (every role: this cluster's DescribeCluster), ``ReadInstances``
    (every role but the watcher's: :data:`READ_ACTIONS` in this region), ``Launch`` (the launch path's reads, the EKS AMI parameters,
    CreateFleet/RunInstances/CreateLaunchTemplate and CreateTags on create under the
    request-tag condition, iam:PassRole for the node role to EC2 only), ``Terminate``
    (TerminateInstances of this cluster's instances), ``CleanUp`` (DescribeLaunchTemplates,
    DeleteLaunchTemplate of this cluster's templates). The state table is granted to every
    role; the idempotency table and SendMessage to the work queue only per
    :data:`CAPABILITIES`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        function_names: tuple[str, ...],
        node_role_arn: str,
        state_table: dynamodb.ITable,
        idempotency_table: dynamodb.ITable,
        work_queue: sqs.IQueue,
        create_access_entries: bool,
        cluster_image: ClusterImageBucket | None = None,
        ebs_kms_key_arn: str | None = None,
        in_vpc: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        unknown = sorted(set(function_names) - set(CAPABILITIES))
        if unknown:
            raise ValueError(f"FunctionAccess: no capabilities defined for function(s) {', '.join(unknown)}")
        stack = Stack.of(self)
        self.cluster_arn = stack.format_arn(service="eks", resource="cluster", resource_name=cluster_name)

        def ec2_arns(resource_types: tuple[str, ...]) -> list[str]:
            arns = []
            for resource_type in resource_types:
                # AMIs and snapshots are owned by other accounts (Amazon's EKS AMIs): account "".
                account = "" if resource_type in ("image", "snapshot") else "*"
                arns.append(stack.format_arn(service="ec2", account=account, resource=resource_type, resource_name="*"))
            return arns

        in_this_region = {"StringEquals": {"aws:RequestedRegion": stack.region}}
        cluster_request_tag = {"StringEquals": {f"aws:RequestTag/{CLUSTER_TAG}": cluster_name}}
        cluster_resource_tag = {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": cluster_name}}

        self.roles: dict[str, iam.Role] = {}
        # Lambda creates the functions' ENIs with the execution role; CDK attaches this policy
        # only to roles it creates itself.
        vpc_access = [iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")] if in_vpc else []
        for name in function_names:
            self.roles[name] = iam.Role(
                self,
                f"{name.capitalize()}Role",
                assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                description=f"Joiner {name} function ({cluster_name})",
                managed_policies=vpc_access,
            )

        def holders(capability: str) -> list[iam.Role]:
            return [role for name, role in self.roles.items() if capability in CAPABILITIES[name]]

        self.discover = iam.Policy(
            self,
            "Discover",
            statements=[
                iam.PolicyStatement(sid="DescribeThisCluster", actions=["eks:DescribeCluster"], resources=[self.cluster_arn]),
            ],
            roles=list(self.roles.values()),
        )
        self.read_instances = iam.Policy(
            self,
            "ReadInstances",
            statements=[
                iam.PolicyStatement(
                    sid="DescribeInstancesInThisRegion",
                    actions=list(READ_ACTIONS),
                    resources=["*"],
                    conditions=in_this_region,
                ),
            ],
            roles=[role for name, role in self.roles.items() if "no-instance-reads" not in CAPABILITIES[name]],
        )

        self.launch: iam.Policy | None = None
        launchers = holders("launch")
        if launchers:
            self.launch = iam.Policy(
                self,
                "Launch",
                statements=[
                    iam.PolicyStatement(
                        sid="DescribeLaunchInputsInThisRegion",
                        actions=list(LAUNCH_READ_ACTIONS),
                        resources=["*"],
                        conditions=in_this_region,
                    ),
                    iam.PolicyStatement(sid="ReadOnDemandPrices", actions=list(PRICING_ACTIONS), resources=["*"]),
                    iam.PolicyStatement(
                        sid="ReadEksOptimizedAmiParameters",
                        actions=["ssm:GetParameter"],
                        resources=[stack.format_arn(service="ssm", account="", resource="parameter", resource_name=EKS_AMI_PARAMETERS)],
                    ),
                    iam.PolicyStatement(
                        sid="LaunchFromSharedInputs",
                        actions=["ec2:RunInstances", "ec2:CreateFleet"],
                        resources=ec2_arns(LAUNCH_SHARED_RESOURCE_TYPES),
                    ),
                    iam.PolicyStatement(
                        sid="LaunchWithThisClustersTemplates",
                        actions=["ec2:RunInstances", "ec2:CreateFleet"],
                        resources=ec2_arns(("launch-template",)),
                        conditions=cluster_resource_tag,
                    ),
                    iam.PolicyStatement(
                        sid="CreateOnlyTaggedForThisCluster",
                        actions=["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
                        resources=ec2_arns(LAUNCH_CREATED_RESOURCE_TYPES),
                        conditions=cluster_request_tag,
                    ),
                    iam.PolicyStatement(
                        sid="TagOnCreate",
                        actions=["ec2:CreateTags"],
                        resources=ec2_arns(LAUNCH_CREATED_RESOURCE_TYPES),
                        conditions={
                            "StringEquals": {
                                f"aws:RequestTag/{CLUSTER_TAG}": cluster_name,
                                "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                            }
                        },
                    ),
                    iam.PolicyStatement(
                        sid="PassNodeRoleToEc2",
                        actions=["iam:PassRole"],
                        resources=[node_role_arn],
                        # EC2's service principal is ec2.amazonaws.com.cn in the China regions.
                        conditions={"StringEquals": {"iam:PassedToService": list(EC2_SERVICE_PRINCIPALS)}},
                    ),
                ],
                roles=launchers,
            )
            if ebs_kms_key_arn is not None:
                # Karpenter's controller policy for an encrypted-by-default account: launches with a
                # customer-managed EBS key fail (Client.InvalidKMSKey.InvalidState) without these.
                self.launch.add_statements(
                    iam.PolicyStatement(sid="UseTheEbsKeyForLaunchedVolumes", actions=list(EBS_KEY_ACTIONS), resources=[ebs_kms_key_arn]),
                    iam.PolicyStatement(
                        sid="GrantTheEbsKeyToEc2Volumes",
                        actions=["kms:CreateGrant"],
                        resources=[ebs_kms_key_arn],
                        conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
                    ),
                )

        self.terminate: iam.Policy | None = None
        terminators = holders("terminate")
        if terminators:
            self.terminate = iam.Policy(
                self,
                "Terminate",
                statements=[
                    iam.PolicyStatement(
                        sid="TerminateThisClustersInstances",
                        actions=["ec2:TerminateInstances"],
                        resources=ec2_arns(("instance",)),
                        conditions=cluster_resource_tag,
                    ),
                ],
                roles=terminators,
            )

        self.clean_up: iam.Policy | None = None
        cleaners = holders("clean-up")
        if cleaners:
            self.clean_up = iam.Policy(
                self,
                "CleanUp",
                statements=[
                    iam.PolicyStatement(
                        sid="DescribeLaunchTemplatesInThisRegion",
                        actions=list(CLEAN_UP_READ_ACTIONS),
                        resources=["*"],
                        conditions=in_this_region,
                    ),
                    iam.PolicyStatement(
                        sid="DeleteThisClustersLaunchTemplates",
                        actions=["ec2:DeleteLaunchTemplate"],
                        resources=ec2_arns(("launch-template",)),
                        conditions=cluster_resource_tag,
                    ),
                ],
                roles=cleaners,
            )

        #: function name -> the capability policies attached to its role (functions depend on them,
        #: so no invocation runs before its permissions exist)
        by_capability = {"launch": self.launch, "terminate": self.terminate, "clean-up": self.clean_up}
        self.policies: dict[str, list[iam.Policy]] = {
            name: [
                self.discover,
                *([] if "no-instance-reads" in CAPABILITIES[name] else [self.read_instances]),
                *(policy for capability, policy in by_capability.items() if capability in CAPABILITIES[name] and policy is not None),
            ]
            for name in self.roles
        }
        for name, role in self.roles.items():
            grant_table(state_table, role, STATE_TABLE_ACTIONS_BY_FUNCTION.get(name, STATE_TABLE_ACTIONS))
            if "idempotency" in CAPABILITIES[name]:
                grant_table(idempotency_table, role, IDEMPOTENCY_TABLE_ACTIONS)
            if cluster_image is not None and "image-read" in CAPABILITIES[name]:
                cluster_image.grant_read(role)
            if cluster_image is not None and "image-write" in CAPABILITIES[name]:
                cluster_image.grant_write(role)
            if "continue" in CAPABILITIES[name]:
                work_queue.grant(role, "sqs:SendMessage")
                if work_queue.encryption_master_key is not None:
                    # A producer on a KMS-encrypted queue needs the data-key actions (SQS documentation).
                    work_queue.encryption_master_key.grant(role, *QUEUE_PRODUCER_KEY_ACTIONS)

        self.access_entries: dict[str, eks.CfnAccessEntry] = {}
        if create_access_entries:
            for name, role in self.roles.items():
                self.access_entries[name] = eks.CfnAccessEntry(
                    self,
                    f"{name.capitalize()}AccessEntry",
                    cluster_name=cluster_name,
                    principal_arn=role.role_arn,
                    type="STANDARD",
                    kubernetes_groups=[KUBERNETES_GROUP_BY_FUNCTION.get(name, KUBERNETES_GROUP)],
                )
