"""Where the functions run: outside any VPC (public API endpoint) or in given private subnets."""

from __future__ import annotations

from aws_cdk import Fn
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

__all__ = ["FunctionNetwork"]


class FunctionNetwork(Construct):
    """For private clusters: the VPC, the subnets, one security group for the functions and,
    when asked for, ``endpoints``: an interface endpoint per name in ``interface_endpoints``.

    The VPC is referenced by id (no lookup, so synth stays offline); the subnets are the
    ones given. Without ``security_group_id`` a group is created that allows only HTTPS
    out: the EKS API server and AWS endpoints (through VPC endpoints or NAT) are all 443.
    Remember to allow this group in the cluster security group's inbound 443 rule.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc_id: str,
        subnet_ids: tuple[str, ...],
        security_group_id: str | None,
        interface_endpoints: tuple[str, ...] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc.from_vpc_attributes(self, "Vpc", vpc_id=vpc_id, availability_zones=Fn.get_azs())
        self.subnets = ec2.SubnetSelection(subnets=[ec2.Subnet.from_subnet_id(self, f"Subnet{index}", subnet_id) for index, subnet_id in enumerate(subnet_ids)])
        if security_group_id is not None:
            self.security_group: ec2.ISecurityGroup = ec2.SecurityGroup.from_security_group_id(self, "SecurityGroup", security_group_id, mutable=False)
        else:
            group = ec2.SecurityGroup(
                self,
                "SecurityGroup",
                vpc=self.vpc,
                description="Joiner functions: HTTPS out to the EKS API and AWS endpoints",
                allow_all_outbound=False,
            )
            group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "EKS API server and AWS service endpoints")
            self.security_group = group
        self.endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {}
        if not interface_endpoints:
            return
        # The endpoints admit HTTPS from the functions' group only; private DNS makes the
        # default SDK endpoints resolve to them.
        endpoint_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="Joiner VPC endpoints: HTTPS from the Joiner functions",
        )
        endpoint_group.add_ingress_rule(ec2.Peer.security_group_id(self.security_group.security_group_id), ec2.Port.tcp(443), "Joiner functions")
        for name in interface_endpoints:
            self.endpoints[name] = ec2.InterfaceVpcEndpoint(
                self,
                f"{name.capitalize()}Endpoint",
                vpc=self.vpc,
                service=ec2.InterfaceVpcEndpointAwsService(name),
                subnets=self.subnets,
                security_groups=[endpoint_group],
                private_dns_enabled=True,
                open=False,
            )
