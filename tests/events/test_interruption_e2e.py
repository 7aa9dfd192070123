"""Interruption and termination end to end: EventBridge put_events -> rule -> SQS -> the
Lambda handlers (real SQS events, partial batch responses) -> DynamoDB, EC2 (moto over
HTTP) and the Kubernetes emulator (PDB-aware eviction) over HTTP."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from joiner.domain import labels as wk
from joiner.domain.model import OfferingKey
from joiner.ports import ClaimRecord
from joiner.settings import get_settings
from tests.events.fixtures import FIXTURE_RESERVATION, KINDS
from tests.events.world import CLUSTER, REGION, T0, World
from tests.support.aws import CapacityReservationApi, FakeReservation
from tests.support.fakes import node_class_json
from testworld.lambdas import next_visible_in

#: The recording metrics stand in for EMF; powertools then has nothing to flush and says so.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

TOLERATE_ALL = [{"operator": "Exists"}]


def populate(world: World, node: str = "n1", **launch: object) -> str:
    instance = world.launch_node(node, **launch)  # type: ignore[arg-type]
    world.add_pod(f"{node}-web-1", node)
    world.add_pod(f"{node}-web-2", node)
    world.add_pod(f"{node}-logs", node, app="logs", daemonset=True, cpu="100m")
    world.add_pod(f"{node}-dns", node, app="dns", critical=True, cpu="100m")
    world.add_pod(f"{node}-proxy", node, app="proxy", daemonset=True, cpu="100m", tolerations=TOLERATE_ALL)
    return instance


def assert_cordoned(world: World, node: str) -> None:
    obj = world.node(node)
    assert obj is not None
    assert obj["spec"].get("unschedulable") is True
    assert {"key": wk.DISRUPTED_TAINT_KEY, "effect": "NoSchedule"} in [{k: t[k] for k in ("key", "effect")} for t in obj["spec"].get("taints") or []]
    assert obj["metadata"]["labels"]["node.kubernetes.io/exclude-from-external-load-balancers"] == "true"


def assert_terminated(world: World, node: str, instance: str, claim_id: str) -> None:
    assert world.node(node) is None
    assert world.instance_state(instance) in ("shutting-down", "terminated")
    claim = world.runtime.state.get_claim(claim_id)
    assert claim is not None and claim.state == "closed"
    assert world.runtime.state.get_item("TERMINATION", node) is None


def test_spot_warning_cordons_drains_in_order_and_terminates(world: World) -> None:
    instance = populate(world)
    world.publish("spot_interruption.json", instance)
    response, messages = world.deliver_interruptions()
    assert response == {"batchItemFailures": []} and len(messages) == 1

    assert_cordoned(world, "n1")
    # replace, then drain (issue 16 section 5): the pods keep running while the replacement boots
    assert world.evictions() == []
    assert world.runtime.state.get_item("TERMINATION", "n1")["phase"] == "replacing"
    unavailable = world.runtime.state.unavailable_offerings(world.clock.now())
    assert OfferingKey("c5.xlarge", "us-east-1a", "spot") in unavailable
    assert world.runtime.state.unavailable_offerings(world.clock.now() + timedelta(minutes=3, seconds=1)) == frozenset()
    assert world.runtime.state.get_claim("default-n1").state == "terminating"
    assert world.ready_replacements() != []
    world.advance(5)
    world.run_work_queue(max_invocations=1)
    # the replacement is Ready: the first drain step evicted the non-critical pods only
    assert sorted(world.evictions()) == ["default/n1-web-1", "default/n1-web-2"]
    assert world.clock.now() - T0 < timedelta(seconds=15)

    world.run_work_queue()
    assert world.evictions() == ["default/n1-web-1", "default/n1-web-2", "default/n1-logs", "default/n1-dns"]
    assert world.pods_on("n1") == ["default/n1-proxy"]  # tolerates the taint: left alone
    assert_terminated(world, "n1", instance, "default-n1")
    assert world.metrics.total("InterruptionActions", action="cordon-replace-drain") == 1
    assert world.metrics.total("NodesTerminated", reason="spot-interruption") == 1


@pytest.mark.parametrize("fixture", sorted(KINDS))
def test_every_kind_from_eventbridge_to_action(world: World, fixture: str) -> None:
    reserved = KINDS[fixture] in ("capacity-reservation-interruption", "capacity-block-expiration")
    instance = world.launch_node("n1", reservation=FIXTURE_RESERVATION if reserved else None)
    world.add_pod("web-1", "n1")
    world.publish(fixture, instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    kind = KINDS[fixture]
    if kind == "noop":
        assert world.node("n1")["spec"].get("unschedulable") is None
        assert world.metrics.total("InterruptionIgnored") == 1
        return
    if kind == "state-change":
        # the instance is going or gone: pods deleted at once, Node deleted, claim closed
        assert ("default/web-1", 0) in world.pod_deletions()
        assert_terminated(world, "n1", instance, "default-n1")
        return
    assert_cordoned(world, "n1")
    if kind == "rebalance-recommendation":
        assert world.evictions() == []  # waits for the replacement first
        stored = world.runtime.state.get_item("TERMINATION", "n1")
        assert stored["phase"] in ("replacing", "draining")
    else:
        # replace, then drain: nothing is evicted before the replacement is Ready
        assert world.evictions() == []
        stored = world.runtime.state.get_item("TERMINATION", "n1")
        assert stored["deadline"] is not None and stored["phase"] == "replacing"
        assert world.ready_replacements() != []
        world.run_work_queue(max_invocations=2)
        assert world.evictions() == ["default/web-1"]
        assert world.clock.now() - T0 <= timedelta(seconds=15)


def test_pdb_blocks_eviction_until_the_deadline_then_pods_are_deleted_in_time(world: World) -> None:
    instance = world.launch_node("n1")
    for index in range(3):
        world.add_pod(f"web-{index}", "n1", grace=30)
    world.add_pod("slow", "n1", app="slow", grace=600)
    world.add_pod("pinned", "n1", app="pinned", grace=20, annotations={wk.DO_NOT_DISRUPT: "true"})
    world.add_pdb("web", "web", min_available=3)  # no disruption allowed
    event = world.publish("spot_interruption.json", instance)
    world.deliver_interruptions()
    deadline = world.clock.now() + timedelta(seconds=120)
    assert world.evictions() == []
    assert ("default/slow", 120) in world.pod_deletions()  # grace longer than the notice: exactly the time left
    assert world.metrics.total("EvictionsBlocked") == 3
    world.run_work_queue()
    deletions = dict(world.pod_deletions())
    assert world.metrics.total("EvictionsBlocked") > 3  # retried with backoff
    assert deletions["default/web-0"] == 30 and deletions["default/pinned"] == 20
    assert "default/pinned" not in world.evictions()
    assert world.node("n1") is None
    assert world.clock.now() <= deadline + timedelta(seconds=6)
    assert event["detail"]["instance-id"] == instance


def test_duplicate_delivery_of_the_same_event_acts_once(world: World) -> None:
    instance = populate(world)
    world.publish("spot_interruption.json", instance)
    messages = world.receive(world.interruption)
    body = messages[0]["Body"]
    world.invoke(world.interruption_handler, messages, world.interruption)
    patches = len(world.emulator.requests("PATCH", "/api/v1/nodes/n1"))
    evictions = list(world.evictions())
    scheduled = len(world.queue_bodies(world.work))
    # EventBridge (at-least-once) delivers the very same event again
    world.sqs.send_message(QueueUrl=world.interruption.url, MessageBody=body)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert len(world.emulator.requests("PATCH", "/api/v1/nodes/n1")) == patches
    assert world.evictions() == evictions
    assert world.metrics.total("InterruptionActions") == 1
    assert len(world.queue_bodies(world.work)) == scheduled
    item = world.dynamodb.scan(TableName=world.settings.idempotency_table)["Items"]
    assert len(item) == 1 and item[0]["status"]["S"] == "COMPLETED"


def test_unparseable_and_unknown_messages_are_acknowledged(world: World) -> None:
    world.sqs.send_message(QueueUrl=world.interruption.url, MessageBody="this is not json")
    world.sqs.send_message(QueueUrl=world.interruption.url, MessageBody=json.dumps({"field1": "value1", "field2": "value2"}))
    world.sqs.send_message(
        QueueUrl=world.interruption.url,
        MessageBody=json.dumps({"id": "x", "source": "aws.s3", "detail-type": "Object Created", "time": "2025-01-06T09:00:00Z", "detail": {}}),
    )
    response, messages = world.deliver_interruptions()
    assert len(messages) == 3
    assert response == {"batchItemFailures": []}
    assert world.metrics.total("InterruptionUnparseable") == 3
    assert world.receive(world.interruption) == []


def test_unmanaged_instances_are_acknowledged_and_counted(world: World) -> None:
    instance = world.launch_node("stranger", managed=False)
    world.add_pod("web-1", "stranger")
    world.publish("spot_interruption.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.metrics.total("InterruptionUnmanaged") == 1
    assert world.node("stranger")["spec"].get("unschedulable") is None
    assert world.evictions() == []
    assert world.instance_state(instance) == "running"


def test_a_tagged_instance_without_a_claim_is_left_alone(world: World) -> None:
    """Ownership needs the instance's tags and a claim recording it (issue 10, defect 7): a
    tagged instance whose claim is gone is left to garbage collection, not drained."""
    instance = world.launch_node("lost", claim=False)
    world.add_pod("web-1", "lost")
    world.publish("spot_interruption.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.node("lost")["spec"].get("unschedulable") is None
    assert world.evictions() == []
    assert world.instance_state(instance) == "running"
    assert world.metrics.total("NotOwnedSkipped", path="interruption") == 1


def test_a_tagged_instance_whose_claim_has_not_recorded_it_yet_is_drained(world: World) -> None:
    """A launch whose invocation died after CreateFleet leaves its claim without the instance
    id; the instance's own joiner.dev/nodeclaim tag names that claim, which proves it ours."""
    instance = world.launch_node("fresh", claim=False)
    world.runtime.state.put_claim(
        ClaimRecord(
            claim_id="default-fresh",
            node_pool="default",
            state="reserved",
            created_at=T0 - timedelta(minutes=2),
        )
    )
    world.add_pod("web-1", "fresh")
    world.publish("spot_interruption.json", instance)
    world.deliver_interruptions()
    assert_cordoned(world, "fresh")
    assert world.metrics.total("NotOwnedSkipped", path="interruption") == 0


def test_a_node_never_registered_to_its_unrecorded_claim_is_still_found_and_drained(world: World) -> None:
    """A launch whose invocation died after CreateFleet: the claim records neither the instance
    nor a Node, and the Node carries no claim label yet (registration never matched it). The
    instance's own tag proves it ours; its Node is found by providerID and drained."""
    instance = world.launch_node("orphan", claim=False)
    node = world.node("orphan")
    labels = {k: v for k, v in node["metadata"]["labels"].items() if k != wk.NODECLAIM}
    world.emulator.apply({**node, "metadata": {**node["metadata"], "labels": labels}})
    world.runtime.state.put_claim(
        ClaimRecord(
            claim_id="default-orphan",
            node_pool="default",
            state="reserved",
            created_at=T0 - timedelta(minutes=1),
        )
    )
    world.add_pod("web-1", "orphan")
    world.publish("spot_interruption.json", instance)
    world.deliver_interruptions()
    assert_cordoned(world, "orphan")
    assert world.metrics.total("NotOwnedSkipped", path="interruption") == 0


@pytest.mark.parametrize("fixture", ["spot_interruption.json", "rebalance_recommendation.json"])
def test_labels_a_kubelet_may_set_on_itself_never_make_an_instance_ours(world: World, fixture: str) -> None:
    """Defect 7: an instance with no Joiner tags whose Node carries joiner.dev/nodepool and
    joiner.dev/initialized is neither cordoned, drained, replaced nor terminated."""
    instance = world.launch_node("stranger", managed=False)
    node = world.node("stranger")
    labels = {**node["metadata"]["labels"], wk.NODEPOOL: "default", wk.INITIALIZED: "true"}
    world.emulator.apply({**node, "metadata": {**node["metadata"], "labels": labels}})
    world.add_pod("web-1", "stranger")
    world.publish(fixture, instance)
    response, _ = world.deliver_interruptions()
    world.run_work_queue()
    assert response == {"batchItemFailures": []}
    assert world.node("stranger")["spec"].get("unschedulable") is None
    assert world.evictions() == []
    assert world.instance_state(instance) == "running"
    assert world.fleet_instances() == []
    assert world.metrics.total("InterruptionUnmanaged") == 1  # its Node's labels are never read


def test_a_failing_message_is_retried_within_seconds_then_dead_lettered(world: World) -> None:
    """The cluster cannot be read (reading the Node fails beyond the client's retries): the
    warning is reported failed and comes back 5, 10, 20 and 40 s later (its visibility cut
    by receive count), not after the queue's visibility timeout; the 6th receive moves it to
    the dead-letter queue."""
    instance = populate(world)
    world.emulator.fail_next("GET", r"/api/v1/nodes(/|$)", status=500, times=1000)
    world.publish("spot_interruption.json", instance)
    response, messages = world.deliver_interruptions()
    assert response == {"batchItemFailures": [{"itemIdentifier": messages[0]["MessageId"]}]}
    for delay in (5, 10, 20, 40):
        wait = next_visible_in(world.interruption.url, REGION)
        assert wait is not None and delay - 1 <= wait <= delay, (delay, wait)
        world.advance(wait + 0.01)
        response, again = world.deliver_interruptions()
        assert response["batchItemFailures"] == [{"itemIdentifier": messages[0]["MessageId"]}]
        assert again[0]["MessageId"] == messages[0]["MessageId"]
    assert world.metrics.total("InterruptionRetried") == 5
    world.advance(400)
    assert world.receive(world.interruption) == []  # the 6th receive moves it to the DLQ
    dead = world.sqs.receive_message(QueueUrl=world.interruption.dlq_url).get("Messages", [])
    assert [m["MessageId"] for m in dead] == [messages[0]["MessageId"]]
    # no idempotency record was left behind by the failures: a fixed cluster can replay the DLQ
    assert world.dynamodb.scan(TableName=world.settings.idempotency_table)["Items"] == []


def test_failures_mid_drain_are_retried_within_seconds_from_durable_state(world: World) -> None:
    instance = world.launch_node("n1")
    for name in ("a", "b", "c"):
        world.add_pod(name, "n1", app=name)
    world.add_pod("logs", "n1", app="logs", daemonset=True)
    world.add_pod("dns", "n1", app="dns", critical=True)
    world.publish("health_scheduled_change_arn.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.evictions() == [] and world.ready_replacements() != []
    # the eviction of "b" fails beyond the client's retries: "b" alone is retried later
    world.emulator.fail_next("POST", r"/namespaces/default/pods/b/eviction$", status=503, times=4)
    for _ in range(3):
        world.run_work_queue(max_invocations=1)
        if world.evictions():
            break
    assert sorted(world.evictions()) == ["default/a", "default/c"]
    assert world.runtime.state.get_item("TERMINATION", "n1")["progress"]["default/b"]["failed"] == 1
    assert world.node("n1")["spec"]["unschedulable"] is True
    for _ in range(4):  # the step scheduled before the replacement launch is stale by now; b's backoff is 5 s
        world.run_work_queue(max_invocations=1)
        if "default/b" in world.evictions():
            break
    assert sorted(world.evictions()) == ["default/a", "default/b", "default/c"]
    current = world.runtime.state.get_item("TERMINATION", "n1")["generation"]
    # the chain's next step, and each step's safety continuation (stale once its step ended)
    assert [b for b in world.queue_bodies(world.work) if b["generation"] == current] == [{"kind": "termination", "node": "n1", "generation": current}]
    # a continuation step fails as a whole (Kubernetes unreachable): it schedules its own
    # retry a few seconds later, from the state the last step left
    world.emulator.fail_next("GET", r"/api/v1/nodes/n1$", status=500, times=4)
    for _ in range(3):  # stale safety continuations come first and do nothing
        responses = world.run_work_queue(max_invocations=1)
        assert responses[0] == {"batchItemFailures": []}
        if world.metrics.total("TerminationStepFailed"):
            break
    assert world.metrics.total("TerminationStepFailed") == 1
    wait = next_visible_in(world.work.url, REGION)
    assert wait is not None and wait <= 5
    world.emulator.clear_faults()
    world.run_work_queue()
    assert world.evictions() == ["default/a", "default/c", "default/b", "default/logs", "default/dns"]
    assert_terminated(world, "n1", instance, "default-n1")


def test_rebalance_with_ignore_policy_acknowledges_only(world: World) -> None:
    world.node_pool(interruption={"rebalance": "ignore"})
    instance = populate(world)
    world.publish("rebalance_recommendation.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.node("n1")["spec"].get("unschedulable") is None
    assert world.metrics.total("InterruptionIgnored") == 1
    assert world.queue_bodies(world.work) == []


def test_termination_handler_acknowledges_invalid_work_messages(world: World) -> None:
    for body in ("garbage", json.dumps({"kind": "other"}), json.dumps({"kind": "termination", "node": ""})):
        world.sqs.send_message(QueueUrl=world.work.url, MessageBody=body)
    messages = world.receive(world.work)
    response = world.invoke(world.termination_handler, messages, world.work)
    assert response == {"batchItemFailures": []}
    assert world.metrics.total("WorkMessageInvalid") == 3


def test_replacement_is_launched_before_the_drain_ends(world: World) -> None:
    instance = populate(world)
    world.add_pdb("web", "web", min_available=2)  # holds the drain until the deadline
    world.publish("spot_interruption.json", instance)
    world.deliver_interruptions()
    replacements = [i for i in world.fleet_instances() if i["tags"].get(wk.NODECLAIM) != "default-n1"]
    assert replacements, "no replacement launched"
    assert all(i["tags"].get("joiner.dev/managed-by") == CLUSTER for i in replacements)
    # recorded with the termination; it avoids the interrupted offering and carries the node's pods
    stored = world.runtime.state.get_item("TERMINATION", "n1")
    assert stored["replacementClaims"]
    claims = [world.runtime.state.get_claim(c) for c in stored["replacementClaims"]]
    assert all(c.state == "launched" for c in claims)
    assert sorted(p for c in claims for p in c.pods) == ["default/n1-dns", "default/n1-web-1", "default/n1-web-2"]
    assert all((c.instance_type, c.zone, c.capacity_type) != ("c5.xlarge", "us-east-1a", "spot") for c in claims)
    assert world.node("n1") is not None  # the drain is still going on
    # a retried or duplicated event for the node never launches a second replacement
    world.publish("spot_interruption.json", instance)
    world.deliver_interruptions()
    assert len([i for i in world.fleet_instances() if i["tags"].get(wk.NODECLAIM) != "default-n1"]) == len(replacements)


def _replace_n1_beside_its_pods_own_claim(
    world: World, instance: str, own_claim: str, claim_instance: str, claim_node: str, claim_pods: tuple[str, ...]
) -> ClaimRecord:
    """Records ``own_claim`` (the id n1's pods derive) as initialized on ``claim_node``, sends a
    rebalance recommendation for n1's ``instance`` and returns the one replacement claim,
    checked to be launched and not ``own_claim``."""
    world.runtime.state.put_claim(
        ClaimRecord(
            claim_id=own_claim,
            node_pool="default",
            state="initialized",
            created_at=T0 - timedelta(hours=1),
            instance_id=claim_instance,
            instance_type="c5.xlarge",
            zone="us-east-1a",
            capacity_type="spot",
            node_name=claim_node,
            price=0.07,
            pods=claim_pods,
        )
    )
    world.publish("rebalance_recommendation.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    stored = world.runtime.state.get_item("TERMINATION", "n1")
    assert stored["replacementClaims"] and own_claim not in stored["replacementClaims"]
    (replacement,) = [world.runtime.state.get_claim(c) for c in stored["replacementClaims"]]
    assert replacement is not None and replacement.state == "launched"
    return replacement


def test_a_node_launched_for_exactly_its_pods_still_gets_a_replacement(world: World) -> None:
    """The node's claim was launched by the scanner for exactly the pods it runs, so the
    replacement plan derives the same claim id: that claim (its node is going) must not pass
    for the replacement."""
    from joiner.services.launcher import claim_id_for

    instance = world.launch_node("n1", claim=False)
    world.add_pod("n1-web-1", "n1", cpu="1")
    world.add_pod("n1-web-2", "n1", cpu="1")
    uids = [p["metadata"]["uid"] for p in world.kube.list_pods_on_node("n1")]
    own_claim = claim_id_for("default", uids)
    replacement = _replace_n1_beside_its_pods_own_claim(world, instance, own_claim, instance, "n1", ("default/n1-web-1", "default/n1-web-2"))
    assert replacement.instance_id != instance
    assert sorted(replacement.pods) == ["default/n1-web-1", "default/n1-web-2"]
    # rebalance: nothing is evicted before the replacement is Ready
    assert world.evictions() == []


def test_a_pod_whose_own_claim_went_to_another_node_still_gets_a_replacement(world: World) -> None:
    """kube-scheduler may bind a pod to another node than the one launched for it: the pod's
    own claim (same id as its replacement's first generation) is Ready on a healthy node and
    hosts other pods, so it must not pass for the replacement either."""
    from joiner.services.launcher import claim_id_for

    instance = world.launch_node("n1")
    other = world.launch_node("n2", claim=False)
    world.add_pod("n1-web-1", "n1", cpu="1")
    world.add_pod("n2-web-1", "n2", cpu="3")
    (uid,) = [p["metadata"]["uid"] for p in world.kube.list_pods_on_node("n1")]
    own_claim = claim_id_for("default", [uid])
    replacement = _replace_n1_beside_its_pods_own_claim(world, instance, own_claim, other, "n2", ("default/n1-web-1",))
    assert replacement.instance_id not in (instance, other)
    assert world.runtime.state.get_claim(own_claim).node_name == "n2"  # left as it was
    assert replacement.pods == ("default/n1-web-1",)


def test_cold_start_builds_the_runtime_from_the_environment(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "JOINER_CLUSTER_NAME": CLUSTER,
        "JOINER_STATE_TABLE": world.settings.state_table,
        "JOINER_IDEMPOTENCY_TABLE": world.settings.idempotency_table,
        "JOINER_INTERRUPTION_QUEUE_URL": world.interruption.url,
        "JOINER_WORK_QUEUE_URL": world.work.url,
        "JOINER_AWS_ENDPOINT_URL": world.moto.endpoint,
        "JOINER_KUBERNETES_HOST": world.emulator.url,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    world.interruption_handler.reset()
    try:
        instance = world.launch_node("n1")
        world.add_pod("web-1", "n1")
        world.publish("spot_interruption.json", instance, time=datetime.now(UTC))
        response, _ = world.deliver_interruptions()
        assert response == {"batchItemFailures": []}
        assert_cordoned(world, "n1")
        assert world.runtime.state.get_item("TERMINATION", "n1")["replacementClaims"]
        assert world.dynamodb.scan(TableName=world.settings.idempotency_table)["Count"] == 1
    finally:
        world.interruption_handler.reset()
        get_settings.cache_clear()


def register_replacement(world: World, claim_id: str, name: str) -> None:
    """What the kubelet and registration do once a replacement boots: a Ready Node for the claim."""
    claim = world.runtime.state.get_claim(claim_id)
    world.emulator.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {wk.NODEPOOL: claim.node_pool, wk.NODECLAIM: claim_id, wk.ZONE: claim.zone}},
            "spec": {"providerID": f"aws:///{claim.zone}/{claim.instance_id}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def test_rebalance_replaces_first_then_drains_once_the_replacement_is_ready(world: World) -> None:
    instance = populate(world)
    world.publish("rebalance_recommendation.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert_cordoned(world, "n1")
    stored = world.runtime.state.get_item("TERMINATION", "n1")
    assert stored["phase"] == "replacing" and stored["replacementClaims"]
    assert world.evictions() == []
    # the replacement is still booting: the continuation keeps waiting
    world.run_work_queue(max_invocations=2)
    assert world.evictions() == [] and world.node("n1") is not None
    for index, claim_id in enumerate(stored["replacementClaims"]):
        register_replacement(world, claim_id, f"replacement-{index}")
    world.run_work_queue()
    assert world.evictions() == ["default/n1-web-1", "default/n1-web-2", "default/n1-logs", "default/n1-dns"]
    assert_terminated(world, "n1", instance, "default-n1")


def test_a_burst_in_one_batch_is_replaced_together_and_never_onto_its_own_nodes(world: World) -> None:
    instances = {}
    for index in range(3):
        node = f"n{index}"
        instances[node] = world.launch_node(node, zone=("us-east-1a", "us-east-1b", "us-east-1c")[index])
        for pod in range(3):
            world.add_pod(f"{node}-web-{pod}", node, app=f"web-{index}", cpu="500m")
    for instance in instances.values():
        world.publish("spot_interruption.json", instance)
    response, messages = world.deliver_interruptions()
    assert len(messages) == 3 and response == {"batchItemFailures": []}
    hosted: set[str] = set()
    for node in instances:
        assert_cordoned(world, node)
        claims = world.runtime.state.get_item("TERMINATION", node)["replacementClaims"]
        assert claims, f"{node} has no replacement"
        hosted.update(pod for claim_id in claims for pod in world.runtime.state.get_claim(claim_id).pods)
    # every pod of the three nodes has new capacity: none was counted onto a node of the burst
    assert {f"default/n{i}-web-{p}" for i in range(3) for p in range(3)} <= hosted
    assert world.evictions() == []  # replace, then drain
    assert world.ready_replacements() != []
    world.run_work_queue(max_invocations=6)
    assert len(world.evictions()) == 9


def test_a_burst_on_one_offering_marks_it_unavailable_once(world: World) -> None:
    instances = [world.launch_node(f"n{index}", zone="us-east-1b") for index in range(3)]
    for instance in instances:
        world.publish("spot_interruption.json", instance)
    response, messages = world.deliver_interruptions()
    assert len(messages) == 3 and response == {"batchItemFailures": []}
    assert world.metrics.total("OfferingsMarkedUnavailable") == 1
    assert OfferingKey("c5.xlarge", "us-east-1b", "spot") in world.runtime.state.unavailable_offerings(world.clock.now())


def test_two_events_for_one_node_in_one_batch_act_once_and_keep_the_earlier_deadline(world: World) -> None:
    instance = populate(world)
    world.add_pdb("web", "web", min_available=2)
    world.publish("rebalance_recommendation.json", instance)
    world.publish("spot_interruption.json", instance)
    response, messages = world.deliver_interruptions()
    assert len(messages) == 2 and response == {"batchItemFailures": []}
    stored = world.runtime.state.get_item("TERMINATION", "n1")
    assert len(stored["events"]) == 2
    # both wait for the one replacement, the spot warning's deadline bounding the wait
    assert stored["phase"] == "replacing"
    assert stored["deadline"] is not None
    launched = [i for i in world.fleet_instances() if i["tags"].get(wk.NODECLAIM) != "default-n1"]
    assert len(launched) == len(stored["replacementClaims"])  # one replacement, not two


def test_a_replacement_plans_on_the_catalog_the_function_builds_from_ec2_under_its_own_role(world: World) -> None:
    """No catalog handed in: the interruption function builds it (DescribeInstanceTypes and
    Offerings on moto; the Pricing API, which moto lacks, falls back to the bundled prices),
    shares it in the state table, and the IAM guard evaluates those calls against its role."""
    from joiner.services.catalog import CATALOG_KIND
    from joiner.services.context import build_runtime

    runtime = build_runtime(
        world.settings,
        kube_port=world.kube,
        ec2_port=world.runtime.ec2,
        state_port=world.runtime.state,
        queue_port=world.runtime.queue,
        clock=world.clock,
        metric=world.metrics,
        sleep=world.clock.sleep,
    )
    world.interruption_handler.configure(runtime, dynamodb_client=world.dynamodb)
    instance = populate(world)
    world.publish("spot_interruption.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.metrics.total("InterruptionActions", action="cordon-replace-drain") == 1
    shared = world.runtime.state.get_item(CATALOG_KIND, world.settings.region)
    assert shared is not None and runtime.catalog.region == world.settings.region and "c5.large" in runtime.catalog


# ---------------------------------------------------------------- capacity reservations

#: Another reservation of the same type and zone, with less room than the one reclaimed.
OTHER_RESERVATION = "cr-0fedcba9876543210"


class ReservedWorld:
    """A NodeClass selecting two c5.xlarge reservations in us-east-1a (the one the fixtures
    reclaim has the most room, so a replacement would go there first), a NodePool that prefers
    reserved capacity, and every CreateFleet call's launch templates."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.api = CapacityReservationApi(
            [
                FakeReservation(FIXTURE_RESERVATION, "c5.xlarge", "us-east-1a", 8, tags=(("team", "ml"),)),
                FakeReservation(OTHER_RESERVATION, "c5.xlarge", "us-east-1a", 2, tags=(("team", "ml"),)),
            ]
        ).register(world.ec2)
        self.fleet_templates: list[list[str]] = []
        world.ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", self._capture)
        node_class = node_class_json("default", discovery=CLUSTER)
        node_class["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"team": "ml"}}]
        world.emulator.apply(node_class)
        world.node_pool(capacity_types=("reserved", "on-demand"))

    def _capture(self, params: dict, **_: object) -> None:
        self.fleet_templates.append([c["LaunchTemplateSpecification"]["LaunchTemplateId"] for c in params["LaunchTemplateConfigs"]])

    def targeted(self) -> set[str]:
        """The capacity reservations the launches so far targeted ("" for a template without one)."""
        found = set()
        for template in {t for call in self.fleet_templates for t in call}:
            data = self.world.ec2.describe_launch_template_versions(LaunchTemplateId=template)["LaunchTemplateVersions"][0]["LaunchTemplateData"]
            found.add(((data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}).get("CapacityReservationId", ""))
        return found

    def close(self) -> None:
        self.world.ec2.meta.events.unregister("before-call.ec2.DescribeCapacityReservations", self.api)
        self.world.ec2.meta.events.unregister("before-parameter-build.ec2.CreateFleet", self._capture)


def test_a_capacity_block_warning_drains_every_node_in_the_block_before_ec2_terminates_it(world: World) -> None:
    """The warning names the reservation, not instances: every Joiner node running in it is
    cordoned, replaced outside it (the block is marked unavailable until it ends) and drained
    by the time EC2 begins terminating, 10 minutes after the warning; nodes outside the block
    are left alone."""
    reserved = ReservedWorld(world)
    try:
        in_block = {name: populate(world, name, reservation=FIXTURE_RESERVATION) for name in ("n1", "n2")}
        world.launch_node("n3", capacity_type="on-demand")
        event = world.publish("capacity_block_expiration.json", "")
        assert event["detail"]["end-date"] == "2025-01-06T09:40:00Z"
        response, _ = world.deliver_interruptions()
        assert response == {"batchItemFailures": []}
        for name in in_block:
            assert_cordoned(world, name)
            stored = world.runtime.state.get_item("TERMINATION", name)
            assert stored["phase"] == "replacing" and datetime.fromisoformat(stored["deadline"]) == T0 + timedelta(minutes=10)
        assert world.node("n3")["spec"].get("unschedulable") is None
        block = OfferingKey("c5.xlarge", "us-east-1a", "reserved", reservation_id=FIXTURE_RESERVATION)
        assert block in world.runtime.state.unavailable_offerings(T0 + timedelta(minutes=39))  # until the block ends
        assert not any(k.reservation_id for k in world.runtime.state.unavailable_offerings(T0 + timedelta(minutes=41)))
        # the replacement never goes back into the block being reclaimed
        replacement_claims = sorted({c for name in in_block for c in world.runtime.state.get_item("TERMINATION", name)["replacementClaims"]})
        assert replacement_claims and reserved.fleet_templates
        assert reserved.targeted() == {OTHER_RESERVATION}
        assert world.metrics.total("InterruptionActions", action="cordon-replace-drain", kind="capacity-block-expiration") == 2

        world.ready_replacements()
        world.run_work_queue()
        for name, instance in in_block.items():
            assert_terminated(world, name, instance, f"default-{name}")
        assert world.clock.now() <= T0 + timedelta(minutes=10)
    finally:
        reserved.close()


def test_an_interruptible_reservations_warning_marks_that_reservation_unavailable(world: World) -> None:
    """Karpenter's interruption controller marks the reclaimed reservation unavailable: the
    replacement goes to another reservation of the same type and zone, not back into it."""
    reserved = ReservedWorld(world)
    try:
        instance = populate(world, "n1", reservation=FIXTURE_RESERVATION)
        world.publish("capacity_reservation_interruption.json", instance)
        response, _ = world.deliver_interruptions()
        assert response == {"batchItemFailures": []}
        assert_cordoned(world, "n1")
        marked = [k for k in world.runtime.state.unavailable_offerings(world.clock.now()) if k.reservation_id]
        assert [(k.instance_type, k.zone, k.capacity_type, k.reservation_id) for k in marked] == [("c5.xlarge", "us-east-1a", "reserved", FIXTURE_RESERVATION)]
        assert not any(k.reservation_id for k in world.runtime.state.unavailable_offerings(world.clock.now() + timedelta(minutes=3, seconds=1)))
        claims = world.runtime.state.get_item("TERMINATION", "n1")["replacementClaims"]
        assert claims and reserved.targeted() == {OTHER_RESERVATION}
    finally:
        reserved.close()
