"""Drains under faults (issue 10, defects 4 and 5), end to end: EventBridge -> SQS -> the
Lambda handlers -> moto over HTTP and the Kubernetes emulator over HTTP.

Failures come from the emulator as the API server gives them (an eviction of a pod two
PodDisruptionBudgets select answers 500), from its HTTP fault hooks (403, 503 beyond the
client's retries) and from botocore event hooks on the EC2 client (a slow CreateFleet);
Joiner's own code is never replaced.

The question every test asks: at the reclaim, is any pod still on the node, and did
every pod's shutdown end by then?
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from joiner.domain import labels as wk
from joiner.observability import logger
from tests.events.world import REGION, World
from testworld.lambdas import next_visible_in

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

#: EC2's two-minute spot interruption notice.
NOTICE = timedelta(minutes=2)
PODS = ("web-0", "web-1", "web-2")


class Timeline:
    """When each pod deletion or eviction was accepted (Joiner's clock), as the work queue is run."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.seen = 0
        self.removals: dict[str, tuple[datetime, int | None, str]] = {}

    def note(self) -> None:
        deletions = [d for d in self.world.emulator.deletions if d.kind == "Pod"]
        for record in deletions[self.seen :]:
            key = f"{record.namespace}/{record.name}"
            self.removals.setdefault(key, (self.world.clock.now(), record.grace_period_seconds, record.via))
        self.seen = len(deletions)

    def run_until(self, until: datetime) -> None:
        """Deliver work-queue continuations as they come due, up to ``until``."""
        self.note()
        for _ in range(200):
            wait = next_visible_in(self.world.work.url, REGION)
            if wait is None or self.world.clock.now() + timedelta(seconds=wait) > until:
                break
            if wait > 0:
                self.world.advance(wait + 0.01)
            messages = self.world.receive(self.world.work)
            if messages:
                self.world.invoke(self.world.termination_handler, messages, self.world.work)
            self.note()

    def shutdown_ends(self, key: str) -> datetime:
        """When the pod's shutdown ends at the latest (an eviction uses the pod's own 30 s grace)."""
        at, grace, _ = self.removals[key]
        return at + timedelta(seconds=30 if grace is None else grace)


def three_pods(world: World, node: str = "n1") -> str:
    instance = world.launch_node(node)
    for name in PODS:
        world.add_pod(name, node, app="web", grace=30)
    return instance


def assert_nothing_left_at_reclaim(world: World, timeline: Timeline, reclaim: datetime) -> None:
    timeline.run_until(reclaim - timedelta(seconds=1))
    assert world.pods_on("n1") == [], f"pods still on the node one second before the reclaim: {world.pods_on('n1')}"
    for name in PODS:
        key = f"default/{name}"
        assert key in timeline.removals, f"{key} was never evicted nor deleted"
        assert timeline.shutdown_ends(key) <= reclaim, f"{key}'s shutdown ends after the reclaim: {timeline.removals[key]}"


# ---------------------------------------------------------------- defect 4


def test_a_pod_two_budgets_select_is_deleted_in_time_not_left_on_the_node(world: World) -> None:
    """The API server answers 500 to the eviction of a pod two PodDisruptionBudgets select.
    The drain must not abort: the step goes on, the next one is scheduled within seconds
    and the deadline rule deletes the pods so their grace ends by the reclaim."""
    instance = three_pods(world)
    world.add_pdb("web-a", "web", min_available=0)
    world.add_pdb("web-b", "web", min_available=0)
    reclaim = world.clock.now() + NOTICE
    world.publish("spot_interruption.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}  # the drain owns the node now; the event is done
    wait = next_visible_in(world.work.url, REGION)
    assert wait is not None and wait <= 10, f"next drain step in {wait} s"
    assert world.ready_replacements() != []  # the drain starts once the replacement is Ready

    timeline = Timeline(world)
    assert_nothing_left_at_reclaim(world, timeline, reclaim)
    assert world.metrics.total("EvictionsFailed") >= 3
    assert {via for _, _, via in timeline.removals.values()} == {"delete"}  # evictions never succeeded
    assert world.evictions() == []


@pytest.mark.parametrize(("status", "times"), [(403, 1000), (503, 1000), (500, 1000)])
def test_one_pod_whose_eviction_keeps_failing_holds_back_no_other_pod(world: World, status: int, times: int) -> None:
    """403 (forbidden) and 5xx beyond the client's retries on web-1's eviction only: web-0
    and web-2 are evicted in the first step, web-1 is retried with a backoff, then deleted by
    the deadline rule in time."""
    instance = three_pods(world)
    world.emulator.fail_next("POST", r"/namespaces/default/pods/web-1/eviction$", status=status, times=times)
    reclaim = world.clock.now() + NOTICE
    world.publish("spot_interruption.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.ready_replacements() != []
    for _ in range(3):
        world.run_work_queue(max_invocations=1)
        if world.evictions():
            break
    assert sorted(world.evictions()) == ["default/web-0", "default/web-2"]
    stored = world.runtime.state.get_item("TERMINATION", "n1")
    assert stored["progress"]["default/web-1"]["failed"] == 1

    timeline = Timeline(world)
    assert_nothing_left_at_reclaim(world, timeline, reclaim)
    at, grace, via = timeline.removals["default/web-1"]
    assert via == "delete" and grace is not None and at + timedelta(seconds=grace) <= reclaim
    assert world.metrics.total("EvictionsFailed") >= 2  # retried before the deadline rule took over
    world.emulator.clear_faults()


def test_a_failing_step_is_retried_within_seconds_not_after_the_visibility_timeout(world: World) -> None:
    """Listing the node's pods fails beyond the client's retries in a continuation step: the
    step schedules its own retry a few seconds later (the work queue's visibility timeout,
    721 s, is far beyond the reclaim) and the drain finishes in time."""
    instance = three_pods(world)
    world.add_pdb("web", "web", min_available=3)  # nothing may be evicted: only the deadline rule can empty the node
    reclaim = world.clock.now() + NOTICE
    world.publish("spot_interruption.json", instance)
    world.deliver_interruptions()
    world.emulator.fail_next("GET", r"/api/v1/pods$", status=500, times=8)  # two steps' worth of attempts
    timeline = Timeline(world)
    assert_nothing_left_at_reclaim(world, timeline, reclaim)
    assert world.metrics.total("TerminationStepFailed") == 2
    world.emulator.clear_faults()


def test_a_warning_whose_cordon_fails_leaves_a_drain_that_starts_within_seconds(world: World) -> None:
    """Cordoning the node answers 500 beyond the client's retries while the spot warning is
    handled. The warning must not wait for its redelivery (the interruption queue's
    visibility timeout, 361 s, is past the reclaim): it is acknowledged with a termination
    request whose step runs a second later, cordons and drains in time."""
    instance = three_pods(world)
    reclaim = world.clock.now() + NOTICE
    world.emulator.fail_next("PATCH", r"/api/v1/nodes/n1$", status=500, times=4)  # the interruption's attempts only
    world.publish("spot_interruption.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.metrics.total("InterruptionDeferredToTermination") == 1
    wait = next_visible_in(world.work.url, REGION)
    assert wait is not None and wait <= 2, f"first drain step in {wait} s"
    timeline = Timeline(world)
    assert_nothing_left_at_reclaim(world, timeline, reclaim)
    world.emulator.clear_faults()


# ---------------------------------------------------------------- defect 5


class SlowCreateFleet:
    """A botocore ``before-call`` hook that holds every CreateFleet for ``seconds`` (wall clock)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, **_: Any) -> None:
        with self.lock:
            self.calls += 1
        time.sleep(self.seconds)


def test_a_spot_warning_never_waits_behind_a_rebalance_of_the_same_node(world: World) -> None:
    """A rebalance recommendation and a spot warning for one instance in one batch, the
    replacement launch slowed to 5 s: the spot warning must not wait for the launch (its
    record used to give up after 3 s and come back after the 361 s visibility timeout,
    leaving every pod on the node at the reclaim)."""
    instance = three_pods(world)
    reclaim = world.clock.now() + NOTICE
    world.publish("rebalance_recommendation.json", instance)
    world.publish("spot_interruption.json", instance)
    slow = SlowCreateFleet(5.0)
    world.ec2.meta.events.register("before-call.ec2.CreateFleet", slow)
    try:
        response, messages = world.deliver_interruptions()
    finally:
        world.ec2.meta.events.unregister("before-call.ec2.CreateFleet", slow)
    assert len(messages) == 2
    assert slow.calls >= 1, "the replacement launch never reached CreateFleet"
    assert response == {"batchItemFailures": []}
    # the pods keep running while the replacement launches (replace, then drain); the spot
    # warning's deadline bounds the wait (below: the replacement never becomes Ready)
    assert world.evictions() == []
    assert world.runtime.state.get_item("TERMINATION", "n1")["deadline"] is not None
    # one replacement for the node's pods, never two
    replacements = [i for i in world.fleet_instances() if i["tags"].get(wk.NODECLAIM) != "default-n1"]
    assert replacements, "the rebalance's replacement was not launched"
    promised = [pod for i in replacements for pod in world.runtime.state.get_claim(i["tags"][wk.NODECLAIM]).pods]
    assert sorted(promised) == [f"default/{name}" for name in PODS]

    timeline = Timeline(world)
    assert_nothing_left_at_reclaim(world, timeline, reclaim)


def test_a_spot_warning_never_waits_behind_a_slow_drain_step(world: World) -> None:
    """A scheduled change is draining the node (a PodDisruptionBudget blocks every
    eviction) when a spot warning arrives while a continuation step holds the node's lease
    for seconds (the API server slow to answer the evictions). The warning must not give
    up and come back after the 361 s visibility timeout: its deadline reaches the drain at
    once and the deadline rule empties the node by the reclaim."""
    instance = three_pods(world)
    world.add_pdb("web", "web", min_available=3)
    world.publish("health_scheduled_change_arn.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.ready_replacements() != []
    for _ in range(3):
        world.run_work_queue(max_invocations=1)
        if world.metrics.total("EvictionsBlocked"):
            break
    assert world.metrics.total("EvictionsBlocked") == 3

    # the next continuation step answers slowly: 2 s per eviction, three pods
    wait = next_visible_in(world.work.url, REGION)
    assert wait is not None
    world.advance(wait + 5.01)  # past the blocked evictions' backoff
    step_messages = world.receive(world.work)
    world.emulator.delay_next("POST", r"/pods/web-\d/eviction$", 2.0, times=3)
    step = threading.Thread(target=world.invoke, args=(world.termination_handler, step_messages, world.work))
    step.start()
    try:
        deadline = time.monotonic() + 5
        while not world.emulator.requests("POST", r"/pods/web-\d/eviction$")[3:] and time.monotonic() < deadline:
            time.sleep(0.05)  # the slow step has begun and holds the lease
        reclaim = world.clock.now() + NOTICE
        world.publish("spot_interruption.json", instance)
        response, _ = world.deliver_interruptions()
    finally:
        step.join()
    assert response == {"batchItemFailures": []}

    timeline = Timeline(world)
    assert_nothing_left_at_reclaim(world, timeline, reclaim)


# ---------------------------------------------------------------- a dependency's outage


class Outage:
    """A botocore ``before-call`` hook failing every call of a client (as after botocore's own
    retries) while Joiner's clock is before ``until``."""

    def __init__(self, world: World, until: datetime, code: str = "ServiceUnavailable") -> None:
        self.world = world
        self.until = until
        self.code = code
        self.failed = 0

    def __call__(self, model: Any, **_: Any) -> None:
        from botocore.exceptions import ClientError

        if self.world.clock.now() < self.until:
            self.failed += 1
            response: Any = {"Error": {"Code": self.code, "Message": "simulated outage"}, "ResponseMetadata": {"HTTPStatusCode": 503}}
            raise ClientError(response, model.name)


def test_a_drain_outlives_a_dynamodb_outage_of_several_minutes(world: World) -> None:
    """DynamoDB fails every call for 12 minutes right after a spot warning started the drain.
    Every continuation fails on its lease and is redelivered, later each time, so none is
    dead-lettered during the outage (it used to be after 5 receives, 20 s apart: the drain then
    waited for gc's 20-minute stall sweep): the drain finishes once DynamoDB is back."""
    instance = three_pods(world)
    world.publish("spot_interruption.json", instance)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    outage = Outage(world, world.clock.now() + timedelta(minutes=12))
    events = world.base.dynamodb_resource.meta.client.meta.events
    events.register("before-call.dynamodb", outage)
    try:
        world.run_work_queue(max_invocations=200)
    finally:
        events.unregister("before-call.dynamodb", outage)
    dead = world.sqs.get_queue_attributes(QueueUrl=world.work.dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
    assert dead["Attributes"]["ApproximateNumberOfMessages"] == "0", f"a continuation was dead-lettered at {world.clock.now()}"
    assert outage.failed >= 10, f"only {outage.failed} DynamoDB calls failed: the outage was not met"
    assert world.clock.now() >= outage.until
    assert world.node("n1") is None, "the drain did not finish after the outage"
    assert world.instance_state(instance) in ("shutting-down", "terminated")
    assert world.runtime.state.get_item("TERMINATION", "n1") is None


class _LogLines(logging.Handler):
    """The structured log lines (powertools' JSON) Joiner's logger writes."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(logger.registered_formatter)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def test_a_continuation_dead_lettered_by_a_longer_outage_names_its_node_and_gc_resumes_the_drain(
    world: World,
) -> None:
    """An outage past the redelivery schedule (an hour): the continuation is dead-lettered on
    its last receive, logged with the node and counted (the dead-letter queue's alarm cannot
    name it); gc's stalled-termination sweep then resumes the drain, which finishes."""
    from joiner.services.termination import OUTAGE_BUDGET, WORK_MAX_RECEIVES, resume_stalled_terminations

    instance = three_pods(world)
    world.publish("spot_interruption.json", instance)
    world.deliver_interruptions()
    outage = Outage(world, world.clock.now() + timedelta(hours=1))
    events = world.base.dynamodb_resource.meta.client.meta.events
    events.register("before-call.dynamodb", outage)
    lines = _LogLines()
    underlying = logging.getLogger(logger.name)  # powertools' Logger writes through it
    underlying.addHandler(lines)
    try:
        world.run_work_queue(max_invocations=300)
    finally:
        events.unregister("before-call.dynamodb", outage)
        underlying.removeHandler(lines)
    dead = world.sqs.get_queue_attributes(QueueUrl=world.work.dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
    dead_lettered = int(dead["Attributes"]["ApproximateNumberOfMessages"])
    assert dead_lettered >= 1  # the chain's message (and the safety continuations sent before the outage)
    assert world.metrics.total("WorkMessageDeadLettered") == dead_lettered
    logged = [json.loads(line) for line in lines.lines if "dead-lettered" in line]
    assert len(logged) == dead_lettered and {entry["node"] for entry in logged} == {"n1"}
    assert all(entry["level"] == "ERROR" and entry["receives"] == WORK_MAX_RECEIVES for entry in logged)
    assert world.clock.now() - (outage.until - timedelta(hours=1)) > OUTAGE_BUDGET
    world.advance((outage.until - world.clock.now()).total_seconds() + 1)
    assert resume_stalled_terminations(world.runtime, world.clock.now()) == ["n1"]  # what gc runs every few minutes
    world.run_work_queue()
    assert world.node("n1") is None
    assert world.runtime.state.get_item("TERMINATION", "n1") is None
