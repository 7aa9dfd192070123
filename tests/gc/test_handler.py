"""The gc Lambda handler on moto (EC2 instances and launch templates, the DynamoDB state table,
in-process) and the Kubernetes API emulator over HTTP through the real adapters."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest
from moto import mock_aws

from joiner.adapters.aws import AwsClients
from joiner.adapters.ec2 import Ec2Adapter
from joiner.adapters.kubernetes import KubernetesClient
from joiner.adapters.state import StateAdapter
from joiner.domain import labels as wk
from joiner.ports import ClaimRecord
from joiner.services.context import Runtime, build_runtime
from joiner.services.gc import LEASE_NAME, TEMPLATE_MARK_KIND
from joiner.settings import Settings
from tests.support.fakes import FakeClock, RecordingMetrics, node_class_json, node_json
from testworld.aws import REGION, Network, create_network, create_state_table, fake_credentials, moto_amis
from testworld.kube_emulator import KubeEmulator
from testworld.lambdas import LambdaContext, scheduled_event
from testworld.lambdas import load_handler as load_function

CLUSTER = "test-cluster"
#: powertools warns when an invocation emitted no EMF metric (ours go to RecordingMetrics)
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

SCHEDULED_EVENT = scheduled_event("joiner-gc", datetime(2025, 1, 6, 9, tzinfo=UTC), region=REGION)


def load_handler() -> ModuleType:
    return load_function("gc")


@dataclass
class Aws:
    clients: AwsClients
    network: Network
    ami: str


@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    with fake_credentials(), mock_aws():
        clients = AwsClients(REGION)
        yield Aws(clients, create_network(clients.ec2, CLUSTER), moto_amis(clients.ec2)["x86_64"])


class Cluster:
    """One test's world: its own state table and emulator; moto instances launched now (real
    time), Joiner's clock two days later, so everything made here is old unless said otherwise."""

    def __init__(self, aws: Aws, emulator: KubeEmulator, clock: FakeClock) -> None:
        self.aws, self.ec2, self.emulator, self.clock = aws, aws.clients.ec2, emulator, clock
        self.metrics = RecordingMetrics()
        table = create_state_table(aws.clients.dynamodb, f"joiner-state-{uuid.uuid4().hex[:8]}")
        self.settings = Settings(cluster_name=CLUSTER, region=REGION, state_table=table, idempotency_table="unused", kubernetes_host=emulator.url)
        self.kube = KubernetesClient(emulator.url, sleep=lambda _: None, random=lambda: 1.0, timeout=(2.0, 5.0))
        self.runtime: Runtime = build_runtime(
            self.settings,
            kube_port=self.kube,
            ec2_port=Ec2Adapter(aws.clients.ec2, aws.clients.ssm, aws.clients.eks, CLUSTER, clock),
            state_port=StateAdapter(aws.clients.table(table), clock),
            clock=clock,
            metric=self.metrics,
            sleep=clock.sleep,
        )
        self.templates: list[str] = []
        emulator.apply(node_class_json("default", discovery=CLUSTER))

    def close(self) -> None:
        if self.templates:
            for template_id in self.templates:
                try:
                    self.ec2.delete_launch_template(LaunchTemplateId=template_id)
                except Exception:  # noqa: BLE001 - already deleted by the test
                    pass
        self.kube.close()

    def template(self, suffix: str) -> str:
        name = f"joiner-{CLUSTER}-default-amd64-{suffix:0>16}"
        tags = [{"Key": "joiner.dev/cluster", "Value": CLUSTER}, {"Key": "joiner.dev/nodeclass", "Value": "default"}]
        template_id = self.ec2.create_launch_template(
            LaunchTemplateName=name,
            LaunchTemplateData={"ImageId": self.aws.ami, "InstanceType": "c5.large"},
            TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}],
        )["LaunchTemplate"]["LaunchTemplateId"]
        self.templates.append(template_id)
        return template_id

    def instance(self, *, tagged: bool = True, claim: str | None = None, template: str | None = None) -> str:
        tags = {"Name": f"{CLUSTER}/default"}
        if tagged:
            tags.update({"joiner.dev/cluster": CLUSTER, f"kubernetes.io/cluster/{CLUSTER}": "owned", wk.NODEPOOL: "default"})
        if claim:
            tags[wk.NODECLAIM] = claim
        kwargs: dict[str, Any] = {"LaunchTemplate": {"LaunchTemplateId": template}} if template else {"ImageId": self.aws.ami, "InstanceType": "c5.large"}
        return self.ec2.run_instances(
            MinCount=1,
            MaxCount=1,
            SubnetId=self.aws.network.subnets["us-east-1a"],
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
            **kwargs,
        )["Instances"][0]["InstanceId"]

    def claim(self, claim_id: str, instance_id: str, node: str, state: str = "initialized") -> None:
        self.runtime.state.put_claim(
            ClaimRecord(
                claim_id=claim_id,
                node_pool="default",
                state=state,
                created_at=self.clock.now() - timedelta(hours=1),
                instance_id=instance_id,
                instance_type="c5.large",
                zone="us-east-1a",
                capacity_type="on-demand",
                node_name=node,
                launched_at=self.clock.now() - timedelta(hours=1),
            )
        )

    def node(self, name: str, instance_id: str, *, ready: bool, managed: bool = True) -> None:
        labels = {wk.NODEPOOL: "default", wk.NODECLAIM: f"claim-{name}"} if managed else {"eks.amazonaws.com/nodegroup": "ng"}
        self.emulator.apply(node_json(name, instance_id=instance_id, ready=ready, labels=labels))

    def state_of(self, instance_id: str) -> str:
        return self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"]

    def nodes(self) -> set[str]:
        return {n["metadata"]["name"] for n in self.emulator.list("Node")}


@pytest.fixture
def cluster(aws: Aws) -> Iterator[Cluster]:
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0) + timedelta(days=2))
    with KubeEmulator(clock=lambda: clock.now() - timedelta(days=2)) as emulator:
        world = Cluster(aws, emulator, clock)
        try:
            yield world
        finally:
            world.close()


@pytest.fixture
def handler(cluster: Cluster) -> Iterator[ModuleType]:
    module = load_handler()
    module.configure(cluster.runtime)
    yield module
    module.reset()


def test_a_scheduled_run_collects_leaks_and_leaves_healthy_and_foreign_nodes_alone(cluster: Cluster, handler: ModuleType) -> None:
    used, idle = cluster.template("a1"), cluster.template("b2")
    healthy = cluster.instance(claim="c-healthy", template=used)
    cluster.claim("c-healthy", healthy, "healthy")
    cluster.node("healthy", healthy, ready=True)
    orphan = cluster.instance()
    dead = cluster.instance(claim="c-dead")
    cluster.claim("c-dead", dead, "dead", state="registered")
    cluster.node("dead", dead, ready=False)
    foreign = cluster.instance(tagged=False)
    cluster.node("foreign", foreign, ready=False, managed=False)
    cluster.node("stray", "i-0123456789abcdef0", ready=False)  # its instance is long gone
    cluster.ec2.terminate_instances(InstanceIds=[dead, foreign])

    result = handler.handler(SCHEDULED_EVENT, LambdaContext())

    assert result == {
        "ran": True,
        "skippedReason": "",
        "terminatedInstances": [orphan],
        "closedClaims": ["c-dead"],
        "deletedNodes": ["dead", "stray"],
        "deletedLaunchTemplates": [],
        "kept": 0,
        "errors": 0,
    }
    assert cluster.state_of(orphan) in ("shutting-down", "terminated") and cluster.state_of(healthy) == "running"
    assert cluster.nodes() == {"healthy", "foreign"}
    assert {(d.kind, d.name) for d in cluster.emulator.deletions} == {("Node", "dead"), ("Node", "stray")}
    state = cluster.runtime.state
    assert state.get_claim("c-dead").state == "closed" and state.get_claim("c-healthy").state == "initialized"
    assert state.get_item(TEMPLATE_MARK_KIND, idle) == {"id": idle, "unusedSince": cluster.clock.now().isoformat()}
    assert state.get_item(TEMPLATE_MARK_KIND, used) is None
    assert state.acquire_lease(LEASE_NAME, "next-run", cluster.clock.now(), 1)  # released at the end of the run
    state.release_lease(LEASE_NAME, "next-run")
    assert cluster.metrics.total("GarbageCollected", kind="instance") == 1
    assert cluster.metrics.total("GarbageCollected", kind="node") == 2

    # a day later the unused template goes; the one the healthy node was launched from stays
    cluster.clock.advance(25 * 3600)
    later = handler.handler({}, LambdaContext(aws_request_id="request-2"))
    assert later["deletedLaunchTemplates"] == [idle] and not later["terminatedInstances"] and not later["deletedNodes"]
    remaining = {t["LaunchTemplateId"] for t in cluster.ec2.describe_launch_templates(LaunchTemplateIds=[used])["LaunchTemplates"]}
    assert remaining == {used}
    assert not [
        t
        for t in cluster.ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [f"joiner-{CLUSTER}-default-amd64-{'b2':0>16}"]}])[
            "LaunchTemplates"
        ]
    ]
    assert cluster.metrics.total("GarbageCollected", kind="launch-template") == 1


def test_a_young_node_and_a_ready_node_survive_even_with_their_instances_gone(cluster: Cluster, handler: ModuleType) -> None:
    ready = cluster.instance(claim="c-ready")
    cluster.claim("c-ready", ready, "ready")
    cluster.node("ready", ready, ready=True)
    cluster.ec2.terminate_instances(InstanceIds=[ready])
    # registered a minute ago on Joiner's clock
    cluster.emulator.handler.clock = lambda: cluster.clock.now() - timedelta(minutes=1)
    cluster.node("young", "i-0fedcba9876543210", ready=False)

    result = handler.handler(SCHEDULED_EVENT, LambdaContext())

    assert not result["deletedNodes"] and not result["closedClaims"] and result["kept"] == 2
    assert cluster.nodes() == {"ready", "young"} and cluster.runtime.state.get_claim("c-ready").state == "initialized"


def test_an_overlapping_run_does_nothing(cluster: Cluster, handler: ModuleType) -> None:
    orphan = cluster.instance()
    assert cluster.runtime.state.acquire_lease(LEASE_NAME, "other-invocation", cluster.clock.now(), 150)
    result = handler.handler(SCHEDULED_EVENT, LambdaContext())
    assert result["ran"] is False and "lease" in result["skippedReason"]
    assert cluster.state_of(orphan) == "running"
    assert cluster.metrics.total("GarbageCollectionSkipped") == 1


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({**SCHEDULED_EVENT, "detail-type": "EC2 Instance State-change Notification"}, "expected detail-type 'Scheduled Event'"),
        ({key: value for key, value in SCHEDULED_EVENT.items() if key != "time"}, "time"),
        ({"dryRun": True}, r"unknown field\(s\) dryRun"),
        (["not", "an", "object"], "expected a JSON object"),
    ],
)
def test_bad_events_are_rejected_and_collect_nothing(cluster: Cluster, handler: ModuleType, event: Any, message: str) -> None:
    orphan = cluster.instance()
    with pytest.raises(handler.GcEventError, match=message):
        handler.handler(event, LambdaContext())
    assert cluster.state_of(orphan) == "running"


def test_cold_start_builds_the_runtime_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from joiner.settings import get_settings

    module = load_handler()
    module.reset()
    monkeypatch.setenv("JOINER_CLUSTER_NAME", "from-env")
    monkeypatch.setenv("JOINER_STATE_TABLE", "table-from-env")
    get_settings.cache_clear()
    try:
        runtime = module.configure()
        assert runtime.settings.cluster_name == "from-env" and runtime.settings.state_table == "table-from-env"
        assert runtime.kube_port is None and runtime.ec2_port is None  # adapters are built on first use
    finally:
        module.reset()
        get_settings.cache_clear()
