"""End-to-end harness for the interruption and termination functions.

Real parts: EventBridge ``put_events`` -> rule -> SQS (with a redrive policy) on moto over
HTTP (:class:`~tests.support.aws.SerialMotoServer`), DynamoDB state and idempotency tables,
EC2 instances, and the Kubernetes API emulator (PDB-aware eviction) over HTTP through the
real Kubernetes adapter. Messages are received from SQS and handed to the Lambda handlers
as real SQS events; messages a handler does not report as failed are deleted, as the
Lambda event source mapping does.

Time: one :class:`FakeClock` drives Joiner; :class:`SqsTime` moves moto's SQS clock with
it so delayed continuations and visibility timeouts expire without waiting.

The network, AMIs and EKS cluster are built once per moto server (:class:`AwsBase`); each
:class:`World` gets its own tables, queues and rule, so tests never see each other's state.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import urllib3

from infra.deployment import INTERRUPTION_VISIBILITY_SECONDS, WORK_MAX_RECEIVE_COUNT, WORK_VISIBILITY_SECONDS
from joiner.adapters.ec2 import Ec2Adapter
from joiner.adapters.kubernetes import KubernetesClient
from joiner.adapters.queue import SqsQueue
from joiner.adapters.state import StateAdapter
from joiner.domain import labels as wk
from joiner.domain.catalog import load_bundled_catalog
from joiner.ports import ClaimRecord
from joiner.services.context import build_runtime
from joiner.settings import Settings
from tests.events.fixtures import load_event
from tests.support.fakes import FakeClock, RecordingMetrics, node_class_json, node_pool_json
from testworld.aws import REGION, SerialMotoServer, create_eks_cluster, create_network, create_state_table, moto_amis, put_eks_ami_parameters
from testworld.kube_emulator import KubeEmulator
from testworld.lambdas import LambdaContext, SqsTime, next_visible_in, queue_messages, sqs_event
from testworld.lambdas import load_handler as _load_handler
from testworld.stack import (
    LocalQueue,
    create_dead_lettered_queue,
    create_idempotency_table,
    route_interruptions,
)

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "test-cluster"
T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
STATE_TABLE = "joiner-state"
IDEMPOTENCY_TABLE = "joiner-idempotency"


_AMIS: dict[str, str] = {}


def _amis(ec2: Any) -> dict[str, str]:
    """moto's built-in AMIs (the same after every reset); looking them up takes a second, so once."""
    if not _AMIS:
        _AMIS.update(moto_amis(ec2))
    return dict(_AMIS)


def load_handler(name: str) -> ModuleType:
    """``functions/<name>/handler.py`` as a module (each function directory is its own code asset)."""
    return _load_handler(name, ROOT / "functions")


class AwsBase:
    """What every test's world shares on one moto server: clients, the VPC network, the AMI
    parameters and the EKS cluster (built once; each world adds its own tables and queues)."""

    def __init__(self, moto: SerialMotoServer) -> None:
        urllib3.PoolManager().request("POST", f"{moto.endpoint}/moto-api/reset")
        self.moto = moto

        def client(service: str) -> Any:
            return boto3.client(service, endpoint_url=moto.endpoint, region_name=REGION)

        self.ec2, self.ssm, self.eks = client("ec2"), client("ssm"), client("eks")
        self.sqs, self.events, self.dynamodb = client("sqs"), client("events"), client("dynamodb")
        self.dynamodb_resource = boto3.resource("dynamodb", endpoint_url=moto.endpoint, region_name=REGION)
        self.network = create_network(self.ec2, CLUSTER)
        self.amis = _amis(self.ec2)
        put_eks_ami_parameters(self.amis)
        create_eks_cluster(self.eks, CLUSTER, list(self.network.subnets.values()))
        self.worlds = 0


class World:
    """One test's cluster: its own tables, queues and EventBridge rule on the shared moto
    server, the emulator, a runtime with the real adapters, the two handlers."""

    def __init__(self, base: AwsBase, emulator: KubeEmulator, sqs_time: SqsTime) -> None:
        base.worlds += 1
        suffix = f"{base.worlds:03d}"
        self.base = base
        self.moto = base.moto
        self.emulator = emulator
        self.sqs_time = sqs_time
        self.clock = FakeClock(T0)
        self.metrics = RecordingMetrics()
        self.ec2, self.ssm, self.eks = base.ec2, base.ssm, base.eks
        self.sqs, self.events, self.dynamodb = base.sqs, base.events, base.dynamodb
        self.network, self.amis = base.network, base.amis
        self.rule = f"joiner-interruptions-{suffix}"
        state_table = create_state_table(self.dynamodb, f"{STATE_TABLE}-{suffix}")
        idempotency_table = create_idempotency_table(self.dynamodb, f"{IDEMPOTENCY_TABLE}-{suffix}")
        self.interruption = create_dead_lettered_queue(self.sqs, f"joiner-interruption-{suffix}", INTERRUPTION_VISIBILITY_SECONDS)
        self.work = create_dead_lettered_queue(self.sqs, f"joiner-work-{suffix}", WORK_VISIBILITY_SECONDS, WORK_MAX_RECEIVE_COUNT)
        route_interruptions(self.events, self.rule, self.interruption.arn)
        self.preexisting = {i["id"] for i in self._instances()}
        #: capacity reservation -> the instances launched into it (moto knows no reservations)
        self.reservations: dict[str, list[str]] = {}
        self.ec2.meta.events.register("before-parameter-build.ec2.DescribeInstances", self._reservation_filter)

        self.settings = Settings(
            cluster_name=CLUSTER,
            region=REGION,
            state_table=state_table,
            idempotency_table=idempotency_table,
            interruption_queue_url=self.interruption.url,
            work_queue_url=self.work.url,
            kubernetes_host=emulator.url,
            aws_endpoint_url=self.moto.endpoint,
        )
        self.kube_sleeps: list[float] = []
        self.kube = KubernetesClient(emulator.url, sleep=self.kube_sleeps.append, random=lambda: 1.0, timeout=(2.0, 5.0))
        self.runtime = build_runtime(
            self.settings,
            kube_port=self.kube,
            ec2_port=Ec2Adapter(self.ec2, self.ssm, self.eks, CLUSTER, self.clock),
            state_port=StateAdapter(base.dynamodb_resource.Table(state_table), self.clock),
            queue_port=SqsQueue(self.sqs, self.work.url),
            # moto's spot price history is dummy data (0.00001 for every type): plan with the
            # bundled on-demand prices, as these tests were written for.
            catalog_value=load_bundled_catalog(REGION),
            clock=self.clock,
            metric=self.metrics,
            sleep=self.clock.sleep,
        )
        self.interruption_handler = load_handler("interruption")
        self.termination_handler = load_handler("termination")
        self.interruption_handler.configure(self.runtime, dynamodb_client=self.dynamodb)
        self.termination_handler.configure(self.runtime)

        emulator.apply(node_class_json("default", discovery=CLUSTER))

    def close(self) -> None:
        self.ec2.meta.events.unregister("before-parameter-build.ec2.DescribeInstances", self._reservation_filter)
        self.events.remove_targets(Rule=self.rule, Ids=["queue"])
        self.events.delete_rule(Name=self.rule)
        self.kube.close()
        self.interruption_handler.reset()
        self.termination_handler.reset()

    # ------------------------------------------------------------ setup

    def node_pool(self, name: str = "default", *, capacity_types: Sequence[str] = ("spot", "on-demand"), **spec: Any) -> None:
        pool = node_pool_json(
            name,
            requirements=[
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "c5.xlarge", "c5.2xlarge", "m5.large", "m5.xlarge"]},
                {"key": "joiner.dev/capacity-type", "operator": "In", "values": list(capacity_types)},
            ],
        )
        pool["spec"].update(spec)
        self.emulator.apply(pool)

    def launch_node(
        self,
        name: str,
        *,
        pool: str = "default",
        capacity_type: str = "spot",
        instance_type: str = "c5.xlarge",
        zone: str = "us-east-1a",
        managed: bool = True,
        claim: bool = True,
        reservation: str | None = None,
    ) -> str:
        """An EC2 instance (tagged as Joiner launches it when ``managed``), its claim, and its Node;
        with ``reservation``, launched into that capacity reservation (capacity type ``reserved``)."""
        if reservation:
            capacity_type = "reserved"
        tags = {"Name": f"{CLUSTER}/{pool}"}
        claim_id = f"{pool}-{name}"
        if managed:
            tags.update(
                {
                    "joiner.dev/cluster": CLUSTER,
                    f"kubernetes.io/cluster/{CLUSTER}": "owned",
                    wk.NODEPOOL: pool,
                    wk.NODECLAIM: claim_id,
                    wk.MANAGED_BY_TAG: CLUSTER,
                }
            )
        instance = self.ec2.run_instances(
            ImageId=self.amis["x86_64"],
            MinCount=1,
            MaxCount=1,
            InstanceType=instance_type,
            SubnetId=self.network.subnets[zone],
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
        )["Instances"][0]
        instance_id = instance["InstanceId"]
        if reservation:
            self.reservations.setdefault(reservation, []).append(instance_id)
        labels = {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
            wk.INSTANCE_TYPE: instance_type,
            wk.ZONE: zone,
            wk.REGION: REGION,
        }
        if managed:
            labels.update({wk.NODEPOOL: pool, wk.NODECLAIM: claim_id, wk.CAPACITY_TYPE: capacity_type})
            if reservation:
                labels.update(wk.with_alias_labels({wk.CAPACITY_RESERVATION_ID: reservation}))
        resources = {"cpu": "4", "memory": "8Gi", "pods": "58"}
        self.emulator.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"providerID": f"aws:///{zone}/{instance_id}"},
                "status": {"capacity": resources, "allocatable": resources, "conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
        if managed and claim:
            self.runtime.state.put_claim(
                ClaimRecord(
                    claim_id=claim_id,
                    node_pool=pool,
                    state="initialized",
                    created_at=T0 - timedelta(hours=1),
                    instance_id=instance_id,
                    instance_type=instance_type,
                    zone=zone,
                    capacity_type=capacity_type,
                    node_name=name,
                    price=0.07,
                )
            )
        return instance_id

    def _reservation_filter(self, params: dict[str, Any], **_: Any) -> None:
        """EC2's ``capacity-reservation-id`` filter of DescribeInstances, which moto lacks: the
        instances :meth:`launch_node` put into the reservation, as an ``instance-id`` filter."""
        for item in params.get("Filters") or []:
            if item.get("Name") == "capacity-reservation-id":
                ids = [i for reservation in item.get("Values") or [] for i in self.reservations.get(reservation, [])]
                item["Name"], item["Values"] = "instance-id", ids or ["i-00000000000000000"]

    def add_pod(
        self,
        name: str,
        node: str,
        *,
        namespace: str = "default",
        app: str = "web",
        cpu: str = "500m",
        grace: int = 30,
        daemonset: bool = False,
        critical: bool = False,
        annotations: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        owner = {"apiVersion": "apps/v1", "kind": "DaemonSet" if daemonset else "ReplicaSet", "name": f"{app}-owner", "uid": f"uid-{app}", "controller": True}
        spec: dict[str, Any] = {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
        }
        if critical:
            spec["priorityClassName"] = "system-node-critical"
        if tolerations:
            spec["tolerations"] = [dict(t) for t in tolerations]
        self.emulator.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "labels": {"app": app},
                    "annotations": dict(annotations or {}),
                    "ownerReferences": [owner],
                },
                "spec": spec,
                "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]},
            }
        )

    def add_pdb(self, name: str, app: str, *, min_available: int | str, namespace: str = "default") -> None:
        self.emulator.apply(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": {"matchLabels": {"app": app}}, "minAvailable": min_available},
            }
        )

    def ready_replacements(self) -> list[str]:
        """Register a Ready Node for every launched claim that has none yet (the replacements'
        kubelets joining); returns their claim ids."""
        named = {((n.get("metadata") or {}).get("labels") or {}).get(wk.NODECLAIM) for n in self.emulator.list("Node")}
        joined = []
        for claim in sorted(self.runtime.state.open_claims(), key=lambda c: c.claim_id):
            if claim.claim_id in named or not claim.instance_id or claim.state not in ("launched", "registered", "initialized"):
                continue
            zone = claim.zone or "us-east-1a"
            name = f"ip-{claim.claim_id}"
            labels = {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                wk.INSTANCE_TYPE: claim.instance_type or "c5.xlarge",
                wk.ZONE: zone,
                wk.REGION: REGION,
                wk.NODEPOOL: claim.node_pool,
                wk.NODECLAIM: claim.claim_id,
                wk.CAPACITY_TYPE: claim.capacity_type or "on-demand",
            }
            resources = {"cpu": "4", "memory": "8Gi", "pods": "58"}
            self.emulator.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"providerID": f"aws:///{zone}/{claim.instance_id}"},
                    "status": {"capacity": resources, "allocatable": resources, "conditions": [{"type": "Ready", "status": "True"}]},
                }
            )
            joined.append(claim.claim_id)
        return joined

    # ------------------------------------------------------------ time

    def advance(self, seconds: float) -> None:
        """Move Joiner's clock and moto's SQS clock together."""
        self.clock.advance(seconds)
        self.sqs_time.advance(seconds)

    # ------------------------------------------------------------ events and queues

    def publish(self, fixture: str, instance_id: str, *, time: datetime | None = None, **edits: Any) -> dict[str, Any]:
        """Put the fixture event (re-targeted at ``instance_id``) on the default bus, as AWS would."""
        event = load_event(fixture, instance_id=instance_id, time=time or self.clock.now())
        for key, value in edits.items():
            event["detail"][key] = value
        answer = self.events.put_events(
            Entries=[
                {
                    "Source": event["source"],
                    "DetailType": event["detail-type"],
                    "Detail": json.dumps(event["detail"]),
                    "Resources": event.get("resources") or [],
                    "Time": datetime.fromisoformat(event["time"].replace("Z", "+00:00")),
                }
            ]
        )
        assert answer["FailedEntryCount"] == 0, answer
        return event

    def receive(self, queue: LocalQueue, limit: int = 10) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        while len(messages) < limit:
            got = self.sqs.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=min(10, limit - len(messages)), AttributeNames=["All"]).get("Messages", [])
            if not got:
                break
            messages.extend(got)
        return messages

    def invoke(self, handler: ModuleType, messages: Sequence[Mapping[str, Any]], queue: LocalQueue) -> dict[str, Any]:
        """Invoke a handler with ``messages`` and delete those not reported as failed."""
        response = handler.handler(sqs_event(messages, queue.arn, region=REGION), LambdaContext(aws_request_id=str(uuid.uuid4())))
        failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        for message in messages:
            if message["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=queue.url, ReceiptHandle=message["ReceiptHandle"])
        return response

    def deliver_interruptions(self, limit: int = 10) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        messages = self.receive(self.interruption, limit)
        assert messages, "no interruption message in the queue"
        return self.invoke(self.interruption_handler, messages, self.interruption), messages

    def queue_bodies(self, queue: LocalQueue) -> list[dict[str, Any]]:
        """Bodies of every message in a queue, delayed or not, without receiving them (moto's view)."""
        return queue_messages(queue.url, REGION)

    def run_work_queue(self, max_invocations: int = 40) -> list[dict[str, Any]]:
        """Deliver work-queue continuations as they come due, jumping the clock to each; returns the responses."""
        responses = []
        for _ in range(max_invocations):
            wait = next_visible_in(self.work.url, REGION)
            if wait is None:
                break
            if wait > 0:
                self.advance(wait + 0.01)
            messages = self.receive(self.work)
            if messages:
                responses.append(self.invoke(self.termination_handler, messages, self.work))
        return responses

    # ------------------------------------------------------------ reading the world

    def node(self, name: str) -> dict[str, Any] | None:
        return self.emulator.get("Node", name)

    def pods_on(self, node: str) -> list[str]:
        return sorted(
            f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self.emulator.list("Pod") if (p.get("spec") or {}).get("nodeName") == node
        )

    def evictions(self) -> list[str]:
        return [f"{d.namespace}/{d.name}" for d in self.emulator.deletions if d.kind == "Pod" and d.via == "eviction"]

    def pod_deletions(self) -> list[tuple[str, int | None]]:
        return [(f"{d.namespace}/{d.name}", d.grace_period_seconds) for d in self.emulator.deletions if d.kind == "Pod" and d.via != "eviction"]

    def instance_state(self, instance_id: str) -> str:
        reservations = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        return reservations[0]["Instances"][0]["State"]["Name"]

    def _instances(self) -> list[dict[str, Any]]:
        result = []
        for reservation in self.ec2.describe_instances()["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                result.append({"id": instance["InstanceId"], "type": instance["InstanceType"], "tags": tags, "state": instance["State"]["Name"]})
        return result

    def fleet_instances(self) -> list[dict[str, Any]]:
        """Instances this world's tests launched with a claim tag (nodes and replacements)."""
        return [i for i in self._instances() if i["id"] not in self.preexisting and wk.NODECLAIM in i["tags"]]
