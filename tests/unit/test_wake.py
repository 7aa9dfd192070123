"""The watcher's batching window (pure) and its resilience to broken streams (scripted port)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.wake import BatchWindow, PendingBatch
from joiner.ports import JsonDict, KubernetesError, WatchEvent
from joiner.services.watcher import WATCH_POSITION_ID, WATCH_POSITION_KIND, run_watcher
from tests.support.fakes import FakeClock, fake_world

T0 = datetime(2025, 1, 6, 9, tzinfo=UTC)


@given(
    st.lists(st.floats(min_value=0, max_value=30, allow_nan=False), min_size=1, max_size=40),
    st.floats(min_value=0.1, max_value=5),
    st.floats(min_value=0, max_value=20),
)
def test_a_batch_is_due_idle_after_the_latest_pod_but_never_later_than_max_after_the_first(offsets: list[float], idle: float, extra: float) -> None:
    window = BatchWindow(idle, idle + extra)
    batch = PendingBatch()
    times = [T0 + timedelta(seconds=offset) for offset in sorted(offsets)]
    for index, moment in enumerate(times):
        batch = batch.add(f"pod-{index}", moment)
    due = batch.due_at(window)
    assert due is not None
    assert due <= times[0] + timedelta(seconds=window.max_seconds)
    assert due <= times[-1] + timedelta(seconds=window.idle_seconds)
    assert due == min(times[-1] + timedelta(seconds=idle), times[0] + timedelta(seconds=idle + extra))
    assert batch.is_due(due, window) and not batch.is_due(due - timedelta(microseconds=1), window)
    assert len(batch.pods) == len(times) and batch.add("pod-0", times[-1] + timedelta(days=1)) == batch


@pytest.mark.parametrize(("idle", "maximum"), [(0, 10), (2, 1), (1, 301)])
def test_a_window_out_of_bounds_is_one_clear_error(idle: float, maximum: float) -> None:
    with pytest.raises(ValueError, match="batch window"):
        BatchWindow(idle, maximum)


def pending(uid: str, version: int) -> JsonDict:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "default", "resourceVersion": str(version)},
        "spec": {},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }


class ScriptedWatch:
    """A pod watch that plays one script per call: events, then an error or the server's end."""

    def __init__(self, clock: FakeClock, scripts: list[tuple[list[WatchEvent], Exception | None]]) -> None:
        self.clock, self.scripts = clock, scripts
        self.versions: list[str] = []
        self.played = threading.Event()

    def list_unbound_pods(self) -> tuple[list[JsonDict], str]:
        return [], "4"

    def watch_unbound_pods(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        self.versions.append(resource_version)
        events, failure = self.scripts.pop(0) if self.scripts else ([], None)

        def play() -> Iterator[WatchEvent]:
            yield from events
            if failure is not None:
                raise failure
            time.sleep(0.05)  # let the invocation's thread take what was delivered
            self.clock.advance(timeout_seconds)  # the server held the stream open to its timeout
            self.played.set()

        return play()

    def plan_input_version(self, resource: str) -> str:
        return "2"

    def watch_plan_inputs(self, resource: str, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        def quiet() -> Iterator[WatchEvent]:
            self.played.wait(5)  # no NodePool changes: open until the pod script has played
            yield from ()

        return quiet()


class Planner:
    def __init__(self) -> None:
        self.wakes: list[tuple[str, int]] = []

    def wake(self, reason: str, pending_pods: int) -> None:
        self.wakes.append((reason, pending_pods))


def watcher_world() -> Any:
    world = fake_world()
    return world, world.runtime(settings=world.settings(scan_window_seconds=55.0))


def test_a_stream_that_breaks_resumes_from_the_last_version_it_delivered() -> None:
    world, runtime = watcher_world()
    port = ScriptedWatch(world.clock, [([WatchEvent("ADDED", pending("a", 5))], KubernetesError("connection reset"))])
    planner = Planner()
    summary = run_watcher(runtime, port, planner)
    assert port.versions[:2] == ["4", "5"]  # listed at 4; resumed after the event it saw
    assert summary.stream_errors == 1 and summary.relists == 1
    assert planner.wakes == [("batch", 1)]
    assert world.metrics.total("WatchErrors") == 1


def test_repeated_stream_failures_end_the_invocation_without_losing_the_batch() -> None:
    world, runtime = watcher_world()
    scripts: list[tuple[list[WatchEvent], Exception | None]] = [([WatchEvent("ADDED", pending("a", 5))], KubernetesError("reset"))]
    scripts += [([], KubernetesError("reset"))] * 4
    port = ScriptedWatch(world.clock, scripts)
    planner = Planner()
    with pytest.raises(KubernetesError, match="reset"):
        run_watcher(runtime, port, planner)
    assert sum(pods for _, pods in planner.wakes) == 1  # woken before giving up
    saved = runtime.state.get_item(WATCH_POSITION_KIND, WATCH_POSITION_ID)
    assert saved is not None and saved["resourceVersion"] == "5"


def test_bound_deleted_and_daemonset_pods_never_wake_the_planner() -> None:
    world, runtime = watcher_world()
    daemon = pending("ds", 6)
    daemon["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "u"}]
    scheduled = pending("ok", 7)
    scheduled["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    port = ScriptedWatch(
        world.clock,
        [
            (
                [
                    WatchEvent("ADDED", daemon),
                    WatchEvent("ADDED", scheduled),
                    WatchEvent("DELETED", pending("gone", 8)),
                    WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "9"}}),
                ],
                None,
            )
        ],
    )
    planner = Planner()
    summary = run_watcher(runtime, port, planner)
    assert planner.wakes == [] and summary.resource_version == "9"


@pytest.mark.parametrize(
    "saved",
    [
        None,
        {},
        {"resourceVersion": 12},
        {"resourceVersion": "x" * 500},
        {"resourceVersion": "1 OR 1"},
        {"pending": "uid-a"},
        {"pending": [1, None, "", "u" * 300]},
        {"planInputs": ["nodepools"]},
        ["not", "a", "dict"],
    ],
)
def test_a_malformed_saved_position_is_listed_again(saved: Any) -> None:
    from joiner.services.watcher import read_position

    versions, pending = read_position(saved)
    assert versions == {"pods": "", "nodepools": "", "nodeclasses": "", "nodes": ""} and pending == []


def test_a_saved_position_is_read_back() -> None:
    from joiner.services.watcher import read_position

    versions, pending = read_position({"resourceVersion": "812", "planInputs": {"nodepools": "90", "nodeclasses": "91", "nodes": "93"}, "pending": ["a", "b"]})
    assert versions == {"pods": "812", "nodepools": "90", "nodeclasses": "91", "nodes": "93"} and pending == ["a", "b"]
    # a position saved before the nodes stream existed: that stream starts at the current version
    versions, _ = read_position({"resourceVersion": "812", "planInputs": {"nodepools": "90", "nodeclasses": "91"}})
    assert versions == {"pods": "812", "nodepools": "90", "nodeclasses": "91", "nodes": ""}


class NodesForbidden(ScriptedWatch):
    """A cluster whose RBAC predates the watcher's Nodes stream: listing Nodes is refused (403)."""

    def plan_input_version(self, resource: str) -> str:
        if resource == "nodes":
            raise KubernetesError("Kubernetes GET /api/v1/nodes failed: HTTP 403: Forbidden", status=403)
        return "2"

    def watch_plan_inputs(self, resource: str, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        assert resource != "nodes", "a refused stream is not watched"
        return super().watch_plan_inputs(resource, resource_version, timeout_seconds)


def test_a_nodes_stream_rbac_refuses_leaves_the_pod_wake_ups_working() -> None:
    world, runtime = watcher_world()
    port = NodesForbidden(world.clock, [([WatchEvent("ADDED", pending("a", 5))], None)])
    planner = Planner()
    run_watcher(runtime, port, planner)
    assert planner.wakes == [("batch", 1)]
    assert world.metrics.total("WatchForbidden") == 1 and world.metrics.total("WatchErrors") == 0

    world, runtime = watcher_world()  # nothing saved: every stream's version is read
    other = ScriptedWatch(world.clock, [])

    def refused(resource: str) -> str:
        raise KubernetesError("HTTP 403: Forbidden", status=403)

    other.plan_input_version = refused  # type: ignore[method-assign]  # NodePools refused: that is no upgrade gap
    with pytest.raises(KubernetesError):
        run_watcher(runtime, other, Planner())
