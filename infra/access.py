"""Least-privilege IAM for the functions and their Kubernetes identity (EKS access entries).

Each function has its own role. EC2 writes are fenced by the ``joiner.dev/cluster`` tag:
resources are created only when the request tags them with this cluster's name, and
only resources carrying that tag can be terminated, re-tagged or deleted. The launch
path therefore has to tag every resource it creates (fleet, instance, volume, network
interface, spot request, launch template) with ``joiner.dev/cluster: <cluster>`` in its
``TagSpecifications``, as Karpenter does with its cluster tag.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

__all__ = [
    "CLUSTER_TAG", "KUBERNETES_GROUP", "CAPABILITIES", "FunctionAccess",
    "LAUNCH_CREATED_RESOURCE_TYPES", "LAUNCH_SHARED_RESOURCE_TYPES", "EXISTING_TAG_KEYS",
]

CLUSTER_TAG = "joiner.dev/cluster"
#: Kubernetes group of the functions' access entries; manifests/rbac.yaml binds it.
KUBERNETES_GROUP = "joiner:controller"

#: What each function may do beyond reading (every function may discover, use the tables
#: and send continuations to the work queue). Consumers get their queue through the
#: event source mapping.
CAPABILITIES: Mapping[str, frozenset[str]] = {
    "scanner": frozenset({"launch"}),
    "interruption": frozenset({"launch", "terminate"}),  # replacement on rebalance, terminate after drain
    "termination": frozenset({"terminate"}),
    "disruption": frozenset({"launch", "terminate"}),  # consolidation replaces, empty nodes are deleted
    "gc": frozenset({"terminate", "clean-up"}),  # leaked instances and stale launch templates
}

#: Resource types a launch creates: allowed only when the request tags them for this cluster.
LAUNCH_CREATED_RESOURCE_TYPES: tuple[str, ...] = (
    "fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request",
)
#: Existing resources a launch reads: AMIs, their snapshots, subnets, security groups, reservations.
LAUNCH_SHARED_RESOURCE_TYPES: tuple[str, ...] = ("image", "snapshot", "subnet", "security-group", "capacity-reservation")
#: Tag keys the functions may set on instances that already carry the cluster tag.
EXISTING_TAG_KEYS: tuple[str, ...] = ("joiner.dev/*", "Name", "kubernetes.io/cluster/*")


class FunctionAccess(Construct):
    """``roles``: one Lambda role per function, with policies per :data:`CAPABILITIES`.

    Policies: ``Discover`` (EC2 Describe*, EKS-optimised AMI parameters, price list, this
    cluster's DescribeCluster), ``Launch`` (CreateFleet/RunInstances/CreateLaunchTemplate/
    CreateTags on create under the request-tag condition, iam:PassRole for the node role
    to EC2 only), ``Terminate`` (TerminateInstances and re-tagging of this cluster's
    instances), ``CleanUp`` (DeleteLaunchTemplate of this cluster's templates). DynamoDB,
    SQS and KMS grants name our resources only.
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

        cluster_request_tag = {"StringEquals": {f"aws:RequestTag/{CLUSTER_TAG}": cluster_name}}
        cluster_resource_tag = {"StringEquals": {f"aws:ResourceTag/{CLUSTER_TAG}": cluster_name}}

        self.roles: dict[str, iam.Role] = {}
        # Lambda creates the functions' ENIs with the execution role; CDK attaches this policy
        # only to roles it creates itself.
        vpc_access = (
            [iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")] if in_vpc else []
        )
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
                iam.PolicyStatement(
                    sid="DescribeEc2InThisRegion",
                    actions=["ec2:Describe*"],
                    resources=["*"],
                    conditions={"StringEquals": {"aws:RequestedRegion": stack.region}},
                ),
                iam.PolicyStatement(
                    sid="ReadEksOptimizedAmiParameters",
                    actions=["ssm:GetParameter"],
                    resources=[
                        stack.format_arn(service="ssm", account="", resource="parameter", resource_name="aws/service/eks/optimized-ami/*"),
                        stack.format_arn(service="ssm", account="", resource="parameter", resource_name="aws/service/bottlerocket/*"),
                    ],
                ),
                iam.PolicyStatement(sid="ReadOnDemandPrices", actions=["pricing:GetProducts"], resources=["*"]),
                iam.PolicyStatement(sid="DescribeThisCluster", actions=["eks:DescribeCluster"], resources=[self.cluster_arn]),
            ],
            roles=list(self.roles.values()),
        )

        self.launch: iam.Policy | None = None
        launchers = holders("launch")
        if launchers:
            self.launch = iam.Policy(
                self,
                "Launch",
                statements=[
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
                        conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
                    ),
                ],
                roles=launchers,
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
                    iam.PolicyStatement(
                        sid="TagThisClustersInstances",
                        actions=["ec2:CreateTags"],
                        resources=ec2_arns(("instance",)),
                        conditions={
                            **cluster_resource_tag,
                            "ForAllValues:StringLike": {"aws:TagKeys": list(EXISTING_TAG_KEYS)},
                        },
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
            name: [self.discover, *(policy for capability, policy in by_capability.items()
                                    if capability in CAPABILITIES[name] and policy is not None)]
            for name in self.roles
        }
        for role in self.roles.values():
            state_table.grant_read_write_data(role)
            idempotency_table.grant_read_write_data(role)
            work_queue.grant_send_messages(role)

        self.access_entries: dict[str, eks.CfnAccessEntry] = {}
        if create_access_entries:
            for name, role in self.roles.items():
                self.access_entries[name] = eks.CfnAccessEntry(
                    self,
                    f"{name.capitalize()}AccessEntry",
                    cluster_name=cluster_name,
                    principal_arn=role.role_arn,
                    type="STANDARD",
                    kubernetes_groups=[KUBERNETES_GROUP],
                )
