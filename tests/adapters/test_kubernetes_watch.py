"""Pod watches over real HTTP against the emulator: the adapter's list-then-watch contract
(resume from a version, field selector semantics, 410 on a compacted version, broken streams)
and the emulator's watch semantics checked with the official client's own watch."""

from __future__ import annotations

import threading
import time
from typing import Any

import kubernetes.client as k8s
import kubernetes.watch
import pytest

from joiner.adapters.kubernetes import KubernetesClient
from joiner.ports import KubernetesError, WatchEvent, WatchExpired
from tests.adapters.test_kubernetes import make_node, make_pod
from testworld.kube_emulator import KubeEmulator


def names(events: list[WatchEvent]) -> list[tuple[str, str]]:
    return [(event.type, event.object["metadata"]["name"]) for event in events]


def test_lists_unbound_pods_with_the_list_version(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("n1"))
    kube_emulator.apply(make_pod("bound", node="n1"))
    kube_emulator.apply(make_pod("waiting", unschedulable=True))
    pods, version = kube_client.list_unbound_pods()
    assert [pod["metadata"]["name"] for pod in pods] == ["waiting"]
    assert version == str(kube_emulator.resource_version)


def test_watch_replays_changes_after_the_version_and_drops_bound_pods(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("n1"))
    kube_emulator.apply(make_pod("before", unschedulable=True))
    _, version = kube_client.list_unbound_pods()
    kube_emulator.apply(make_pod("web", unschedulable=True))
    kube_emulator.patch("Pod", "web", {"metadata": {"labels": {"tier": "front"}}})
    kube_emulator.apply(make_pod("web", node="n1", labels={"tier": "front"}))  # bound: leaves spec.nodeName=
    kube_emulator.apply(make_pod("elsewhere", node="n1"))  # never unbound: never seen
    kube_emulator.delete("Pod", "before")
    started = time.monotonic()
    events = list(kube_client.watch_unbound_pods(version, timeout_seconds=1))
    assert names(events) == [("ADDED", "web"), ("MODIFIED", "web"), ("DELETED", "web"), ("DELETED", "before")]
    assert int(events[-1].resource_version) == kube_emulator.resource_version
    assert 0.9 < time.monotonic() - started < 5  # the server ends the stream at timeoutSeconds


def test_watch_streams_changes_made_while_it_is_open(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    _, version = kube_client.list_unbound_pods()
    seen: list[WatchEvent] = []

    def watch() -> None:
        seen.extend(kube_client.watch_unbound_pods(version, timeout_seconds=3))

    reader = threading.Thread(target=watch)
    reader.start()
    time.sleep(0.3)
    kube_emulator.apply(make_pod("late", unschedulable=True))
    deadline = time.monotonic() + 2
    while not seen and time.monotonic() < deadline:
        time.sleep(0.02)
    assert names(seen) == [("ADDED", "late")]  # delivered while the stream is still open
    reader.join()


def test_a_compacted_version_raises_watch_expired(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.handler.watch_history = 3
    kube_emulator.apply(make_node("n1"))
    _, version = kube_client.list_unbound_pods()
    for index in range(5):
        kube_emulator.apply(make_pod(f"p{index}", unschedulable=True))
    with pytest.raises(WatchExpired, match="too old resource version"):
        list(kube_client.watch_unbound_pods(version, timeout_seconds=1))
    _, fresh = kube_client.list_unbound_pods()
    assert list(kube_client.watch_unbound_pods(fresh, timeout_seconds=1)) == []


def test_watch_open_is_retried_and_a_broken_stream_is_an_error(kube_emulator: KubeEmulator, kube_client: KubernetesClient, kube_sleeps: list[float]) -> None:
    _, version = kube_client.list_unbound_pods()
    kube_emulator.fail_next("GET", "/api/v1/pods", status=503, times=1, query="watch=true")
    assert list(kube_client.watch_unbound_pods(version, timeout_seconds=1)) == []
    assert len(kube_sleeps) == 1
    kube_emulator.fail_next("GET", "/api/v1/pods", status=403, times=1, query="watch=true")
    with pytest.raises(KubernetesError, match="HTTP 403"):
        kube_client.watch_unbound_pods(version, timeout_seconds=1)


@pytest.mark.parametrize(("version", "timeout"), [("", 5), ("12", 0), ("12", 4000)])
def test_watch_arguments_are_checked(kube_client: KubernetesClient, version: str, timeout: int) -> None:
    with pytest.raises(ValueError, match="watch_unbound_pods"):
        kube_client.watch_unbound_pods(version, timeout)


def test_official_client_watch_sees_the_same_stream(kube_emulator: KubeEmulator) -> None:
    configuration = k8s.Configuration(host=kube_emulator.url)
    api = k8s.CoreV1Api(k8s.ApiClient(configuration))
    listed = api.list_pod_for_all_namespaces(field_selector="spec.nodeName=")
    kube_emulator.apply(make_pod("typed", unschedulable=True))
    seen: list[tuple[str, Any]] = []
    for event in kubernetes.watch.Watch().stream(  # type: ignore[no-untyped-call]
        api.list_pod_for_all_namespaces, field_selector="spec.nodeName=", resource_version=listed.metadata.resource_version, timeout_seconds=1
    ):
        seen.append((event["type"], event["object"].metadata.name))
    assert seen == [("ADDED", "typed")]


def test_plan_inputs_are_versioned_and_watched(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("n1"))
    version = kube_client.plan_input_version("nodepools")
    assert version == str(kube_emulator.resource_version)
    kube_emulator.apply(
        {
            "apiVersion": "joiner.dev/v1",
            "kind": "NodePool",
            "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "d"}}}},
        }
    )
    events = list(kube_client.watch_plan_inputs("nodepools", version, timeout_seconds=1))
    assert [(e.type, e.object["kind"], e.object["metadata"]["name"]) for e in events] == [("ADDED", "NodePool", "p")]
    assert list(kube_client.watch_plan_inputs("nodeclasses", version, timeout_seconds=1)) == []
    with pytest.raises(ValueError, match="nodepools, nodeclasses or nodes"):
        kube_client.plan_input_version("pods")


def test_a_trimmed_unbound_pod_is_judged_pending_exactly_as_the_full_one() -> None:
    """The watcher's list keeps each pod trimmed (memory); what it decides must not change."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from joiner.adapters.kubernetes import is_pending_pod, pending_view

    conditions = st.lists(
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["PodScheduled", "Ready"]),
                "status": st.sampled_from(["True", "False"]),
                "reason": st.sampled_from(["Unschedulable", "SchedulerError", ""]),
            }
        ),
        max_size=3,
    )
    owners = st.lists(
        st.fixed_dictionaries(
            {
                "apiVersion": st.sampled_from(["apps/v1", "v1", "batch/v1"]),
                "kind": st.sampled_from(["DaemonSet", "Node", "ReplicaSet", "Job"]),
                "name": st.just("o"),
                "controller": st.booleans(),
            }
        ),
        max_size=2,
    )

    @settings(max_examples=300, deadline=None)
    @given(conditions, owners, st.sampled_from([None, "n1"]), st.sampled_from([None, "n2"]), st.sampled_from([None, "Running", "Failed"]), st.booleans())
    def check(conds: list[dict[str, str]], refs: list[dict[str, object]], node: str | None, nominated: str | None, phase: str | None, deleting: bool) -> None:
        meta: dict[str, object] = {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "ownerReferences": refs,
            "managedFields": [{"manager": "x" * 100}],
            "labels": {"a": "b"},
        }
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        status: dict[str, object] = {"conditions": conds, "containerStatuses": [{"name": "c"}]}
        if phase:
            status["phase"] = phase
        if nominated:
            status["nominatedNodeName"] = nominated
        spec: dict[str, object] = {"containers": [{"name": "c", "image": "i"}]}
        if node:
            spec["nodeName"] = node
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
        view = pending_view(pod)
        assert is_pending_pod(view) == is_pending_pod(pod)
        assert view["metadata"]["uid"] == "u" and "managedFields" not in view["metadata"] and len(str(view)) < len(str(pod))

    check()


def test_a_catch_up_waits_for_a_slow_servers_headers_longer_than_for_an_idle_stream(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    """A loaded server that answers the watch late still has its backlog read: only silence
    after the headers means caught up."""
    nodes, version = next(kube_client.list_pages("nodes"))
    kube_emulator.apply(make_node("late"))
    kube_emulator.delay_next("GET", "/api/v1/nodes", 1.0, query="watch=true")
    events = list(kube_client.changes_since("nodes", version, idle_seconds=0.2))
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "late")]
    started = time.monotonic()
    assert list(kube_client.changes_since("nodes", events[-1].resource_version, idle_seconds=0.2)) == []
    assert time.monotonic() - started < 1.0  # an idle stream still ends after its idle time
