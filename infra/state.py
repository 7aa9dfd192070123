"""DynamoDB: the state table (claims, limit reservations, leases, unavailable offerings,
generic records) and the powertools idempotency table."""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct

__all__ = ["StateTables"]


class StateTables(Construct):
    """``state``: ``pk``/``sk`` strings, TTL ``expiresAt``, GSIs ``byInstance`` (``instanceId``),
    ``byNodePool`` (``nodePool``/``sk``) and ``byOpenClaim`` (``openClaim``/``pk``: sparse, only
    claims not closed carry ``openClaim``), all projecting all attributes.
    ``idempotency``: ``id`` string, TTL ``expiration`` (powertools' layout).

    Both tables: on-demand billing (Joiner's traffic is spiky and small), point-in-time
    recovery, the customer-managed key, and kept when the stack is deleted: the state table
    is the record of which instances Joiner launched.
    """

    def __init__(self, scope: Construct, construct_id: str, *, key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        common: dict[str, Any] = dict(
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=key,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True),
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.state_table = dynamodb.Table(
            self,
            "StateTable",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            time_to_live_attribute="expiresAt",
            **common,
        )
        self.state_table.add_global_secondary_index(
            index_name="byInstance",
            partition_key=dynamodb.Attribute(name="instanceId", type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        self.state_table.add_global_secondary_index(
            index_name="byNodePool",
            partition_key=dynamodb.Attribute(name="nodePool", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        self.state_table.add_global_secondary_index(
            index_name="byOpenClaim",
            partition_key=dynamodb.Attribute(name="openClaim", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            projection_type=dynamodb.ProjectionType.ALL,
        )
        self.idempotency_table = dynamodb.Table(
            self,
            "IdempotencyTable",
            partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
            time_to_live_attribute="expiration",
            **common,
        )
