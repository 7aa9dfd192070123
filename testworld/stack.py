"""What the CDK stack (and the EKS cluster it serves) would create, built on a moto server:
the state and idempotency tables, the interruption queue and the work queue with their
dead-letter queues, the EventBridge rule routing EC2 and Health events to the interruption
queue, a VPC with discovery-tagged subnets and security groups, the EKS cluster and the EKS
AMI parameters (moto has none). Redrive, visibility and routing are the deployment's
(:mod:`infra.deployment`).

Development-only (moto); used by ``joiner demo``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import boto3

from infra.deployment import (
    INTERRUPTION_RULES,
    INTERRUPTION_VISIBILITY_SECONDS,
    MAX_RECEIVE_COUNT,
    WORK_MAX_RECEIVE_COUNT,
    WORK_VISIBILITY_SECONDS,
)
from joiner.settings import Settings
from testworld.aws import (
    REGION,
    ZONES,
    Network,
    create_eks_cluster,
    create_network,
    create_state_table,
    moto_amis,
    put_eks_ami_parameters,
)

__all__ = ["EVENT_RULE_PATTERN", "LocalQueue", "LocalStack", "create_idempotency_table", "create_dead_lettered_queue", "route_interruptions"]

#: One rule routing every event kind of the deployment's interruption rules (which it has one
#: each of, with detail filters) to the interruption queue.
EVENT_RULE_PATTERN = {
    "source": sorted({rule.source for rule in INTERRUPTION_RULES}),
    "detail-type": [detail_type for rule in INTERRUPTION_RULES for detail_type in rule.detail_types],
}


@dataclass(frozen=True)
class LocalQueue:
    """A queue with its dead-letter queue."""

    name: str
    url: str
    arn: str
    dlq_url: str


def create_idempotency_table(dynamodb: Any, name: str) -> str:
    """The powertools idempotency table (key ``id``, TTL ``expiration``), as the stack makes it."""
    dynamodb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
    )
    dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiration"})
    return name


def state_bucket_name(cluster: str) -> str:
    """A valid S3 bucket name for ``cluster``'s image bucket (lower case, at most 63)."""
    cleaned = "".join(c if c.isalnum() or c == "-" else "-" for c in cluster.lower()).strip("-") or "cluster"
    return f"{cleaned[:48]}-state-image"


def create_state_bucket(s3: Any, name: str, region: str) -> str:
    """The cluster state's image bucket, as the stack makes it (private)."""
    if region == "us-east-1":
        s3.create_bucket(Bucket=name)
    else:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})
    s3.put_public_access_block(
        Bucket=name,
        PublicAccessBlockConfiguration={"BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True},
    )
    return name


def create_dead_lettered_queue(sqs: Any, name: str, visibility: int, max_receive_count: int = MAX_RECEIVE_COUNT) -> LocalQueue:
    """A queue redriving to ``<name>-dlq`` after ``max_receive_count`` receives."""
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(visibility),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}),
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return LocalQueue(name, url, arn, dlq_url)


def route_interruptions(events: Any, rule: str, queue_arn: str) -> None:
    """The EventBridge rule sending :data:`EVENT_RULE_PATTERN` events to the queue."""
    events.put_rule(Name=rule, EventPattern=json.dumps(EVENT_RULE_PATTERN))
    events.put_targets(Rule=rule, Targets=[{"Id": "queue", "Arn": queue_arn}])


class LocalStack:
    """The stack's resources for ``cluster`` on the moto server at ``endpoint``.

    Build with :meth:`create`; :meth:`settings` gives the functions' settings pointed at the
    moto server and a local Kubernetes API.
    """

    def __init__(self, endpoint: str, cluster: str, region: str = REGION) -> None:
        self.endpoint = endpoint
        self.cluster = cluster
        self.region = region
        self.ec2 = self.client("ec2")
        self.sqs = self.client("sqs")
        self.events = self.client("events")
        self.dynamodb = self.client("dynamodb")
        self.state_table = f"{cluster}-state"
        self.idempotency_table = f"{cluster}-idempotency"
        self.state_bucket = state_bucket_name(cluster)
        self.rule = f"{cluster}-interruptions"
        self.network: Network | None = None
        self.amis: dict[str, str] = {}
        self.interruption: LocalQueue | None = None
        self.work: LocalQueue | None = None

    def client(self, service: str) -> Any:
        """A boto3 client on the moto server."""
        return boto3.client(service, endpoint_url=self.endpoint, region_name=self.region)

    def create(self, zones: Sequence[str] = ZONES) -> LocalStack:
        """Create everything (once per fresh moto server)."""
        self.network = create_network(self.ec2, self.cluster, zones)
        self.amis = moto_amis(self.ec2)
        put_eks_ami_parameters(self.amis, region=self.region)
        # GPU and Inferentia/Trainium types launch the NVIDIA and Neuron variants (x86_64 only for Neuron).
        put_eks_ami_parameters(self.amis, region=self.region, variant="nvidia")
        put_eks_ami_parameters({"x86_64": self.amis["x86_64"]}, region=self.region, variant="neuron")
        create_eks_cluster(self.client("eks"), self.cluster, list(self.network.subnets.values()))
        create_state_table(self.dynamodb, self.state_table)
        create_idempotency_table(self.dynamodb, self.idempotency_table)
        create_state_bucket(self.client("s3"), self.state_bucket, self.region)
        self.interruption = create_dead_lettered_queue(self.sqs, f"{self.cluster}-interruption", INTERRUPTION_VISIBILITY_SECONDS)
        self.work = create_dead_lettered_queue(self.sqs, f"{self.cluster}-work", WORK_VISIBILITY_SECONDS, WORK_MAX_RECEIVE_COUNT)
        route_interruptions(self.events, self.rule, self.interruption.arn)
        return self

    def settings(self, kubernetes_host: str, *, scanner_mode: str = "economy", node_role: str = "") -> Settings:
        """The functions' settings for this stack (moto endpoint, local Kubernetes API)."""
        assert self.interruption is not None and self.work is not None, "call create() first"
        return Settings(
            cluster_name=self.cluster,
            region=self.region,
            state_table=self.state_table,
            idempotency_table=self.idempotency_table,
            state_bucket=self.state_bucket,
            interruption_queue_url=self.interruption.url,
            work_queue_url=self.work.url,
            scanner_mode=scanner_mode,
            kubernetes_host=kubernetes_host,
            aws_endpoint_url=self.endpoint,
            node_role=node_role,
        )
