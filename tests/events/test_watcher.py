"""Responsive mode's watcher over real HTTP: the pod watch against the emulator, its position
in the moto state table, the planner woken through lambda:Invoke (answered by a botocore hook
that runs the scanner handler as Lambda would) and evaluated by the IAM guard."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from joiner.adapters.kubernetes import KubernetesClient
from joiner.adapters.scanner_wake import LambdaScannerWaker
from joiner.adapters.state import StateAdapter
from joiner.clock import SystemClock
from joiner.services.context import Runtime, build_runtime
from joiner.services.provisioning import run_scanner
from joiner.services.watcher import WATCH_POSITION_ID, WATCH_POSITION_KIND, run_watcher
from joiner.settings import Settings
from tests.events.world import World
from tests.support.iam_guard import Guard
from testworld.lambdas import LambdaContext, load_handler

pytestmark = [pytest.mark.filterwarnings("ignore:No application metrics to publish")]

SCANNER = "test-cluster-scanner"


def pending_pod(name: str, cpu: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }


class RecordingPlanner:
    def __init__(self) -> None:
        self.wakes: list[tuple[float, str, int]] = []

    def wake(self, reason: str, pending_pods: int) -> None:
        self.wakes.append((time.monotonic(), reason, pending_pods))


def watcher_runtime(world: World, *, window: float = 3.0, idle: float = 0.3, maximum: float = 1.5) -> Runtime:
    """A runtime on the wall clock (the watcher waits on a real stream) sharing the world's table."""
    settings = dataclasses.replace(world.settings, scan_window_seconds=window, batch_idle_seconds=idle, batch_max_seconds=maximum, scanner_function=SCANNER)
    return build_runtime(
        settings,
        kube_port=KubernetesClient(world.emulator.url, timeout=(2.0, 10.0)),
        state_port=StateAdapter(world.base.dynamodb_resource.Table(settings.state_table), SystemClock()),
        metric=world.metrics,
    )


def later(seconds: float, action: Any) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.start()
    return timer


def test_a_burst_is_one_wake_up_after_the_idle_window(world: World) -> None:
    runtime = watcher_runtime(world)
    planner = RecordingPlanner()
    started = time.monotonic()
    timers = [
        later(0.5, lambda: world.emulator.apply(pending_pod("a"))),
        later(0.6, lambda: world.emulator.apply(pending_pod("b"))),
        later(0.7, lambda: world.emulator.apply(pending_pod("c"))),
    ]
    summary = run_watcher(runtime, runtime.kube, planner)
    for timer in timers:
        timer.join()
    assert [(reason, pods) for _, reason, pods in planner.wakes] == [("batch", 3)]
    woke_after = planner.wakes[0][0] - started
    assert 0.9 < woke_after < 1.8  # the last pod at 0.7 s + 0.3 s idle, not the 3 s window
    saved = runtime.state.get_item(WATCH_POSITION_KIND, WATCH_POSITION_ID)
    assert saved is not None and saved["resourceVersion"] == summary.resource_version
    uids = {world.emulator.get("Pod", name, "default")["metadata"]["uid"] for name in "abc"}  # type: ignore[index]
    assert set(saved["pending"]) == uids


def test_a_trickle_wakes_at_the_maximum_window_from_the_first_pod(world: World) -> None:
    runtime = watcher_runtime(world, window=4.0, idle=0.5, maximum=1.5)
    planner = RecordingPlanner()
    started = time.monotonic()
    timers = [later(0.3 + 0.25 * index, lambda index=index: world.emulator.apply(pending_pod(f"t{index}"))) for index in range(10)]
    run_watcher(runtime, runtime.kube, planner)
    for timer in timers:
        timer.join()
    first = planner.wakes[0][0] - started
    assert 1.6 < first < 2.4  # 0.3 s + 1.5 s maximum, although pods kept arriving every 0.25 s
    assert sum(pods for _, _, pods in planner.wakes) == 10  # every pod in exactly one wake-up


def test_a_pod_pending_between_watchers_is_replayed_and_known_pods_are_not_reported_again(world: World) -> None:
    runtime = watcher_runtime(world, window=1.5)
    planner = RecordingPlanner()
    world.emulator.apply(pending_pod("old"))
    run_watcher(runtime, runtime.kube, planner)  # first run lists: "old" is new to it
    assert [(reason, pods) for _, reason, pods in planner.wakes] == [("batch", 1)]
    world.emulator.apply(pending_pod("gap"))  # no watcher runs now
    world.emulator.patch("Pod", "old", {"metadata": {"labels": {"touched": "yes"}}})  # still pending, already reported
    planner.wakes.clear()
    summary = run_watcher(runtime, runtime.kube, planner)
    assert [(reason, pods) for _, reason, pods in planner.wakes] == [("batch", 1)]
    assert summary.relists == 0 and summary.events >= 2  # resumed from the saved position


def test_an_expired_position_falls_back_to_a_full_list(world: World) -> None:
    runtime = watcher_runtime(world, window=1.5)
    runtime.state.put_item(WATCH_POSITION_KIND, WATCH_POSITION_ID, {"resourceVersion": "1", "pending": []})
    world.emulator.handler.watch_history = 2
    for index in range(4):
        world.emulator.apply(pending_pod(f"p{index}"))
    planner = RecordingPlanner()
    summary = run_watcher(runtime, runtime.kube, planner)
    assert summary.relists == 1
    assert sum(pods for _, _, pods in planner.wakes) == 4  # nothing lost across the compaction


def test_a_batch_open_at_the_window_end_is_woken_before_the_position_is_saved(world: World) -> None:
    runtime = watcher_runtime(world, window=1.6, idle=1.5, maximum=5.0)
    planner = RecordingPlanner()
    timer = later(0.5, lambda: world.emulator.apply(pending_pod("late")))
    run_watcher(runtime, runtime.kube, planner)
    timer.join()
    assert [(reason, pods) for _, reason, pods in planner.wakes] == [("window end", 1)]


def test_a_dropped_watch_connection_is_opened_again(world: World) -> None:
    runtime = watcher_runtime(world, window=2.5)
    planner = RecordingPlanner()
    world.emulator.disconnect_next("GET", "/api/v1/pods", query="watch=true")
    timer = later(1.2, lambda: world.emulator.apply(pending_pod("after-break")))
    summary = run_watcher(runtime, runtime.kube, planner)
    timer.join()
    assert summary.stream_errors == 0  # the adapter retried the open
    assert sum(pods for _, _, pods in planner.wakes) == 1


class Body:
    """The raw HTTP body botocore reads an answer from."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data


def answer_invokes(client: Any, recorded: list[dict[str, Any]]) -> None:
    """lambda:Invoke answered by Lambda's asynchronous contract (202, queued) without a network call."""

    def before_send(request: Any, **_: Any) -> AWSResponse:
        kind = request.headers.get("X-Amz-Invocation-Type")
        recorded.append({"url": request.url, "type": kind.decode() if isinstance(kind, bytes) else kind, "payload": json.loads(request.body)})
        return AWSResponse(request.url, 202, {}, Body())  # type: ignore[arg-type]

    client.meta.events.register("before-send.lambda.Invoke", before_send)


def test_the_watcher_handler_wakes_the_scanner_with_its_own_role(world: World, iam_guard: Guard) -> None:
    runtime = watcher_runtime(world, window=2.0)
    recorded: list[dict[str, Any]] = []
    answer_invokes(runtime.aws_client("lambda"), recorded)
    watcher = load_handler("watcher")
    watcher.configure(runtime)
    timer = later(0.4, lambda: world.emulator.apply(pending_pod("web")))
    try:
        summary = watcher.handler({}, LambdaContext(aws_request_id=str(uuid.uuid4()), remaining_ms=62_000))
    finally:
        watcher.reset()
        timer.join()
    assert summary["wakeUps"] == 1 and summary["wokenPods"] == 1
    assert [(r["type"], r["payload"]) for r in recorded] == [("Event", {"mode": "economy"})]
    assert recorded[0]["url"].endswith(f"/functions/{SCANNER}/invocations")
    assert "lambda:InvokeFunction" in iam_guard.exercised["watcher"]
    with pytest.raises(watcher.WatcherEventError, match="unknown field"):
        watcher.handler({"mode": "economy"}, LambdaContext())


def test_a_planner_that_cannot_be_woken_fails_the_invocation_loudly(world: World) -> None:
    runtime = watcher_runtime(world)
    client = runtime.aws_client("lambda")
    throttled = json.dumps({"Type": "User", "message": "Rate exceeded"}).encode()
    client.meta.events.register(
        "before-send.lambda.Invoke",
        lambda request, **_: AWSResponse(request.url, 429, {"x-amzn-errortype": "TooManyRequestsException"}, Body(throttled)),  # type: ignore[arg-type]
    )
    from joiner.adapters.scanner_wake import ScannerWakeError

    with pytest.raises(ScannerWakeError, match=SCANNER):
        LambdaScannerWaker(client, SCANNER).wake("batch", 1)


def test_duplicate_wake_ups_never_launch_twice(world: World) -> None:
    """Two watchers overlap (a slow one and its successor) and both wake the planner for the
    same pods; the rounds they cause run one after another (reserved concurrency 1) and, for
    good measure, two at once on separate runtimes: one claim and one instance per pod set."""
    planners = [RecordingPlanner(), RecordingPlanner()]
    runtimes = [watcher_runtime(world, window=2.0), watcher_runtime(world, window=2.0)]
    threads = [threading.Thread(target=run_watcher, args=(rt, rt.kube, planner)) for rt, planner in zip(runtimes, planners, strict=True)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    world.emulator.apply(pending_pod("dup", cpu="3"))
    for thread in threads:
        thread.join()
    assert [len(planner.wakes) for planner in planners] == [1, 1]  # a real duplicate

    scanner = load_handler("scanner")
    scanner.configure(world.runtime)
    try:
        for _ in range(2):  # Lambda runs the queued invocations one at a time
            scanner.handler({"mode": "economy"}, LambdaContext(aws_request_id=str(uuid.uuid4())))
    finally:
        scanner.reset()
    second_world_runtime = build_runtime(
        world.settings,
        kube_port=world.kube,
        ec2_port=world.runtime.ec2,
        state_port=world.runtime.state,
        catalog_value=world.runtime.catalog_value,
        clock=world.clock,
        metric=world.metrics,
        sleep=world.clock.sleep,
    )
    overlapping = [threading.Thread(target=run_scanner, args=(rt, "economy")) for rt in (world.runtime, second_world_runtime)]
    for thread in overlapping:
        thread.start()
    for thread in overlapping:
        thread.join()
    ours = [i for i in world._instances() if i["id"] not in world.preexisting]
    assert len(ours) == 1, ours
    claims = world.runtime.state.open_claims()
    assert len(claims) == 1 and claims[0].instance_id == ours[0]["id"]


def test_settings_for_the_watcher_need_the_planner_name() -> None:
    with pytest.raises(ValueError, match="JOINER_PLANNER_FUNCTION"):
        LambdaScannerWaker(object(), Settings(cluster_name="c", region="us-east-1", state_table="t", idempotency_table="t").scanner_function)


def test_a_node_pool_change_while_pods_wait_wakes_the_planner_again(world: World) -> None:
    planner = RecordingPlanner()
    runtime = watcher_runtime(world, window=2.0)
    timer = later(0.4, lambda: world.emulator.patch("NodePool", "default", {"metadata": {"labels": {"edit": "1"}}}))
    run_watcher(runtime, runtime.kube, planner)
    timer.join()
    assert planner.wakes == []  # nothing pending: a NodePool edit alone plans nothing

    world.emulator.apply(pending_pod("stuck"))
    run_watcher(runtime, runtime.kube, planner)
    assert [(reason, pods) for _, reason, pods in planner.wakes] == [("batch", 1)]
    planner.wakes.clear()
    timer = later(0.4, lambda: world.emulator.patch("NodePool", "default", {"spec": {"limits": {"cpu": "500"}}}))
    run_watcher(runtime, runtime.kube, planner)  # "stuck" was reported before: only the edit brings it back
    timer.join()
    assert [(reason, pods) for _, reason, pods in planner.wakes] == [("batch", 1)]


def test_a_wake_up_lambda_refuses_is_made_again_not_forgotten(world: World) -> None:
    """lambda:Invoke answers TooManyRequestsException (beyond botocore's retries) for the whole
    first watcher: its batch was not accepted, so no saved position may take those pods as
    reported. The next watcher wakes the planner for them at once, not the minute tick."""
    runtime = watcher_runtime(world, window=2.0, idle=0.2, maximum=1.0)
    client = runtime.aws_client("lambda")
    throttled = json.dumps({"Type": "User", "message": "Rate exceeded"}).encode()
    refusing = {"on": True}
    sent: list[bool] = []
    accepted_at: list[float] = []

    def before_send(request: Any, **_: Any) -> AWSResponse:
        sent.append(refusing["on"])
        if not refusing["on"]:
            accepted_at.append(time.monotonic())
        if refusing["on"]:
            return AWSResponse(request.url, 429, {"x-amzn-errortype": "TooManyRequestsException"}, Body(throttled))  # type: ignore[arg-type]
        return AWSResponse(request.url, 202, {}, Body())  # type: ignore[arg-type]

    client.meta.events.register("before-send.lambda.Invoke", before_send)
    planner = LambdaScannerWaker(client, SCANNER)
    timer = later(0.3, lambda: world.emulator.apply(pending_pod("web")))
    first = run_watcher(runtime, runtime.kube, planner)
    timer.join()
    assert any(sent) and first.wake_ups == 0 and first.woken_pods == 0
    assert world.metrics.total("PlannerWakeFailures") >= 1
    saved = runtime.state.get_item(WATCH_POSITION_KIND, WATCH_POSITION_ID)
    uid = world.emulator.get("Pod", "web", "default")["metadata"]["uid"]  # type: ignore[index]
    assert saved is not None and saved["unwoken"] == [uid]

    refusing["on"] = False
    sent.clear()
    started = time.monotonic()
    second = run_watcher(runtime, runtime.kube, planner)
    assert second.wake_ups == 1 and second.woken_pods == 1, second
    assert sent == [False]
    assert accepted_at[0] - started < 1.0  # at once (the 0.2 s idle window), not at the window's end
    assert "unwoken" not in (runtime.state.get_item(WATCH_POSITION_KIND, WATCH_POSITION_ID) or {})


def test_a_refused_wake_up_is_tried_again_within_the_window(world: World) -> None:
    """A planner port that refuses its first wake-up: the batch stays open and the next try,
    WAKE_RETRY_SECONDS later in the same invocation, carries the same pods."""
    from joiner.services.watcher import WAKE_RETRY_SECONDS

    class RefusingOnce(RecordingPlanner):
        refused = 0

        def wake(self, reason: str, pending_pods: int) -> None:
            if not self.refused:
                self.refused += 1
                raise RuntimeError("TooManyRequestsException: Rate exceeded")
            super().wake(reason, pending_pods)

    runtime = watcher_runtime(world, window=4.0, idle=0.2, maximum=1.0)
    planner = RefusingOnce()
    started = time.monotonic()
    timers = [later(0.3, lambda: world.emulator.apply(pending_pod("a"))), later(0.35, lambda: world.emulator.apply(pending_pod("b")))]
    summary = run_watcher(runtime, runtime.kube, planner)
    for timer in timers:
        timer.join()
    assert planner.refused == 1 and [(reason, pods) for _, reason, pods in planner.wakes] == [("batch", 2)]
    assert summary.wake_ups == 1 and summary.woken_pods == 2
    assert WAKE_RETRY_SECONDS <= planner.wakes[0][0] - started < WAKE_RETRY_SECONDS + 1.5
    assert "unwoken" not in (runtime.state.get_item(WATCH_POSITION_KIND, WATCH_POSITION_ID) or {})


def test_a_node_joiner_launched_registering_while_pods_wait_wakes_the_planner(world: World) -> None:
    """The round it wakes nominates the pods the Node was launched for while it is not ready yet
    (joiner.services.nomination); its status updates and Nodes not Joiner's wake nothing."""
    planner = RecordingPlanner()
    runtime = watcher_runtime(world, window=2.0)
    world.emulator.apply(pending_pod("waiting"))
    run_watcher(runtime, runtime.kube, planner)
    assert [(reason, pods) for _, reason, pods in planner.wakes] == [("batch", 1)]
    planner.wakes.clear()

    def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}

    def others() -> None:
        world.emulator.apply(node("not-joiners", {"kubernetes.io/hostname": "not-joiners"}))
        world.emulator.apply(node("registered", {"joiner.dev/nodepool": "default", "joiner.dev/registered": "true"}))

    timer = later(0.4, others)
    run_watcher(runtime, runtime.kube, planner)
    timer.join()
    assert planner.wakes == []

    timer = later(0.4, lambda: world.emulator.apply(node("registering", {"joiner.dev/nodepool": "default"})))
    run_watcher(runtime, runtime.kube, planner)
    timer.join()
    assert [(reason, pods) for _, reason, pods in planner.wakes] == [("batch", 1)]
    planner.wakes.clear()

    timer = later(0.4, lambda: world.emulator.patch("Node", "registering", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
    run_watcher(runtime, runtime.kube, planner)
    timer.join()
    assert planner.wakes == []
