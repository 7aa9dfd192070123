"""The deployment's customer-managed KMS key: the tables, the work queue and the alarm topic use it."""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

__all__ = ["JoinerKey", "alarm_source_conditions"]


class JoinerKey(Construct):
    """One symmetric key with yearly rotation.

    A single key (not one per resource) keeps the fixed cost at one key-month for the tables,
    the work queue and the alarm topic; the key policy lets CloudWatch alarms publish to the
    encrypted topic. The queues EventBridge writes to use SSE-SQS instead (infra/ingestion.py).
    """

    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description=f"Joiner ({cluster_name}): state tables, queues and alarm topic",
            enable_key_rotation=True,
            rotation_period=Duration.days(365),
            pending_window=Duration.days(30),
            removal_policy=RemovalPolicy.RETAIN,
        )
        # CloudWatch alarms publish to a KMS-encrypted topic only if CloudWatch may use the
        # key (documented key-policy statement for alarm actions on encrypted topics); only
        # for this account's alarms (confused-deputy guard).
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToEncryptedTopic",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions=alarm_source_conditions(Stack.of(self)),
            )
        )


def alarm_source_conditions(stack: Stack) -> dict[str, dict[str, str]]:
    """``aws:SourceAccount`` and ``aws:SourceArn``: requests CloudWatch makes for this
    account's alarms in this region, and no one else's."""
    return {
        "StringEquals": {"aws:SourceAccount": stack.account},
        "ArnLike": {"aws:SourceArn": stack.format_arn(service="cloudwatch", resource="alarm", resource_name="*", arn_format=ArnFormat.COLON_RESOURCE_NAME)},
    }
