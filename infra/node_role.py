"""The IAM role (and instance profile) of the nodes Joiner launches."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.config import created_node_role_name

__all__ = ["NodeRole", "NODE_MANAGED_POLICIES"]

#: AWS-managed policies every EKS worker node needs (kubelet, VPC CNI, image pulls, SSM access).
NODE_MANAGED_POLICIES: tuple[str, ...] = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",
)


class NodeRole(Construct):
    """Either an existing role (``node_role_arn``, named ``existing_role_name``) or a created
    ``JoinerNodeRole-<cluster>-<region>`` (:func:`infra.config.created_node_role_name`: IAM
    names are account-wide) with :data:`NODE_MANAGED_POLICIES` and an instance profile of the
    same name.

    ``role_arn`` and ``role_name`` are what the launch policy may pass to EC2 and what
    ``JOINER_NODE_ROLE`` names. For a created role with ``create_access_entry``, an EKS
    access entry of type ``EC2_LINUX`` lets its nodes join the cluster. An existing role
    is assumed to be able to join already (it usually backs a managed node group) and
    must have an instance profile of the same name, or NodeClasses must name one.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        node_role_arn: str | None,
        existing_role_name: str | None,
        create_access_entry: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.created = node_role_arn is None
        self.access_entry: eks.CfnAccessEntry | None = None
        self.instance_profile: iam.InstanceProfile | None = None
        if node_role_arn is not None:
            assert existing_role_name is not None
            self.role: iam.IRole = iam.Role.from_role_arn(self, "Role", node_role_arn, mutable=False)
            self.role_arn = node_role_arn
            self.role_name: str = existing_role_name
            return
        role_name = created_node_role_name(cluster_name, Stack.of(self).region)
        role = iam.Role(
            self,
            "Role",
            role_name=role_name,
            description=f"Nodes launched by Joiner for EKS cluster {cluster_name}",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in NODE_MANAGED_POLICIES],
        )
        self.role = role
        self.role_arn = role.role_arn
        self.role_name = role.role_name
        self.instance_profile = iam.InstanceProfile(self, "InstanceProfile", instance_profile_name=role_name, role=role)
        if create_access_entry:
            self.access_entry = eks.CfnAccessEntry(self, "AccessEntry", cluster_name=cluster_name, principal_arn=role.role_arn, type="EC2_LINUX")
