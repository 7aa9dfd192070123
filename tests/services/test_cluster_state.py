"""The container's cluster model stays equal to a fresh list of the cluster, whatever changes,
resumes, refusals and partial catch-ups it goes through, and lists again only when it must."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.ports import JsonDict, KubernetesError, WatchEvent, WatchExpired
from joiner.services.cluster_state import ClusterCache
from tests.support.cluster_parsers import node_or_none as _node
from tests.support.cluster_parsers import pod_or_none as _pod


class LogKube:
    """Pods and Nodes with a bounded change log, as the API server's watch cache keeps them."""

    def __init__(self, history: int = 6) -> None:
        self.objects: dict[str, dict[str, JsonDict]] = {"pods": {}, "nodes": {}}
        self.log: dict[str, list[tuple[int, str, JsonDict]]] = {"pods": [], "nodes": []}
        self.floor = {"pods": 0, "nodes": 0}
        self.version = 1
        self.history = history
        self.lists = 0
        self.catch_ups = 0
        self.ready_fraction = 1.0  # how much of the backlog a catch-up gets before the stream idles
        self.break_stream = False

    def write(self, resource: str, kind: str, obj: JsonDict | None, name: str) -> None:
        self.version += 1
        if obj is None:
            old = self.objects[resource].pop(name, None)
            if old is None:
                return
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self.version)}}
            self.log[resource].append((self.version, "DELETED", gone))
        else:
            kind_of = "MODIFIED" if name in self.objects[resource] else "ADDED"
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.objects[resource][name] = obj
            self.log[resource].append((self.version, kind_of, obj))
        while len(self.log[resource]) > self.history:
            self.floor[resource] = self.log[resource].pop(0)[0]

    def list_pages(self, resource: str) -> Iterator[tuple[list[JsonDict], str]]:
        self.lists += 1
        items = [self.objects[resource][k] for k in sorted(self.objects[resource])]
        for start in range(0, max(1, len(items)), 2):
            yield items[start : start + 2], str(self.version)

    def changes_since(self, resource: str, resource_version: str) -> Iterator[WatchEvent]:
        self.catch_ups += 1
        since = int(resource_version)
        if since < self.floor[resource]:
            raise WatchExpired("too old")
        ready = [entry for entry in self.log[resource] if entry[0] > since]
        cut = int(len(ready) * self.ready_fraction)
        for index, (_, kind_of, obj) in enumerate(ready[:cut]):
            if self.break_stream and index == 1:
                raise KubernetesError("stream broke")
            yield WatchEvent(kind_of, obj)


def pod(name: str, node: str | None, cpu: int) -> JsonDict:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": f"{cpu}m"}}}]}
    if node:
        spec["nodeName"] = node
    status = {} if node else {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec, "status": status}


def node(name: str, cpu: int) -> JsonDict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"k": "v"}},
        "status": {"allocatable": {"cpu": str(cpu), "pods": "10"}, "capacity": {"cpu": str(cpu), "pods": "10"}},
    }


def view(cache: ClusterCache, kube: LogKube) -> tuple[Any, Any, Any]:
    found = cache.read(kube, {}, _pod, _node)  # type: ignore[arg-type]
    return (
        [(e.pod.key, e.pod.node_name, e.pod.requests, e.marked_unschedulable, e.reference is not None) for e in found.pods],
        [(n.name, n.allocatable) for n in found.nodes],
        found.how,
    )


#: Changes to the cluster: a pod or Node created or changed, or deleted.
changes = (
    st.tuples(st.just("pod"), st.integers(0, 5), st.sampled_from([None, "n0", "n1"]), st.integers(1, 4000)),
    st.tuples(st.just("delete-pod"), st.integers(0, 5)),
    st.tuples(st.just("node"), st.integers(0, 2), st.integers(1, 64)),
    st.tuples(st.just("delete-node"), st.integers(0, 2)),
)

operations = st.lists(st.one_of(*changes, st.tuples(st.just("read"), st.sampled_from([1.0, 0.5, 0.0]), st.booleans())), max_size=40)


def change(kube: LogKube, op: tuple[Any, ...]) -> bool:
    """Apply ``op`` if it is one of :data:`changes`; whether it was."""
    if op[0] == "pod":
        kube.write("pods", "Pod", pod(f"p{op[1]}", op[2], op[3]), f"ns/p{op[1]}")
    elif op[0] == "delete-pod":
        kube.write("pods", "Pod", None, f"ns/p{op[1]}")
    elif op[0] == "node":
        kube.write("nodes", "Node", node(f"n{op[1]}", op[2]), f"n{op[1]}")
    elif op[0] == "delete-node":
        kube.write("nodes", "Node", None, f"n{op[1]}")
    else:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(operations)
def test_the_model_always_equals_a_fresh_list(ops: list[tuple[Any, ...]]) -> None:
    kube, now = LogKube(), [0.0]
    cache = ClusterCache(clock=lambda: now[0])
    for op in [*ops, ("read", 1.0, False)]:
        if not change(kube, op):
            kube.ready_fraction, kube.break_stream = op[1], op[2]
            seen = view(cache, kube)
            kube.ready_fraction, kube.break_stream = 1.0, False
            if op[1] == 1.0 and not op[2]:
                fresh = view(ClusterCache(), kube)
                assert seen[:2] == fresh[:2]
            now[0] += 1.0
    # A caught-up model equals the cluster, with everything read at most once more.
    assert view(cache, kube)[:2] == view(ClusterCache(), kube)[:2]


def test_reads_follow_changes_and_list_again_only_when_they_must() -> None:
    kube, now = LogKube(history=3), [0.0]
    cache = ClusterCache(clock=lambda: now[0], resync_after=600)
    kube.write("pods", "Pod", pod("a", "n0", 100), "ns/a")
    assert view(cache, kube)[2] == {"pods": "list", "nodes": "list"} and kube.lists == 2
    kube.write("pods", "Pod", pod("b", None, 100), "ns/b")
    pods, _, how = view(cache, kube)
    assert how == {"pods": "changes", "nodes": "changes"} and kube.lists == 2
    assert [p[0] for p in pods] == ["ns/a", "ns/b"] and pods[1][3] and pods[1][4]  # unbound: marked, with a reference
    for index in range(5):  # more changes than the server keeps: the resume is refused
        kube.write("pods", "Pod", pod("b", None, 100 + index), "ns/b")
    now[0] += 1
    view(cache, kube)
    assert kube.lists == 3  # pods listed again; nodes resumed
    now[0] += 601
    assert view(cache, kube)[2] == {"pods": "list", "nodes": "list"}  # the periodic resync
    assert (
        cache.read(
            kube,  # type: ignore[arg-type]
            {"kata": __import__("joiner.domain.resources", fromlist=["Resources"]).Resources({"cpu": 100})},
            _pod,
            _node,
        ).how["pods"]
        == "list"
    )  # RuntimeClasses changed: overhead may differ


def test_a_resync_reuses_pods_at_the_same_version() -> None:
    kube, now = LogKube(), [0.0]
    cache = ClusterCache(clock=lambda: now[0], resync_after=10)
    kube.write("pods", "Pod", pod("a", "n0", 100), "ns/a")
    kube.write("pods", "Pod", pod("b", "n0", 100), "ns/b")
    first = cache.read(kube, {}, _pod, _node)  # type: ignore[arg-type]
    kube.write("pods", "Pod", pod("b", "n1", 100), "ns/b")
    now[0] += 11
    second = cache.read(kube, {}, _pod, _node)  # type: ignore[arg-type]
    assert second.how["pods"] == "list"
    assert second.pods[0] is first.pods[0]  # unchanged: not parsed again
    assert second.pods[1].pod.node_name == "n1"


def test_a_listing_pauses_the_cycle_collector_and_restores_it_even_when_it_fails() -> None:
    import gc

    from joiner.services.cluster_state import collector_paused

    seen: list[bool] = []

    class Listing(LogKube):
        def list_pages(self, resource: str) -> Any:
            seen.append(gc.isenabled())
            if resource == "nodes":
                raise KubernetesError("down", status=503)
            return super().list_pages(resource)

    assert gc.isenabled()
    with pytest.raises(KubernetesError):
        ClusterCache().read(Listing(), {}, _pod, _node)  # type: ignore[arg-type]
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()


def test_nodes_and_mirrors_as_last_read_ask_nothing_unless_never_read() -> None:
    kube, now = LogKube(), [0.0]
    kube.objects["nodeclaims"], kube.log["nodeclaims"], kube.floor["nodeclaims"] = {}, [], 0
    cache = ClusterCache(clock=lambda: now[0], resync_after=600)
    port: Any = kube  # the port's methods this cache calls
    kube.write("nodes", "Node", node("n0", 1), "n0")
    kube.write("nodeclaims", "NodeClaim", {"metadata": {"name": "m0"}}, "m0")
    assert [n.name for n in cache.nodes(port, _node, refresh=False)] == ["n0"] and kube.lists == 1  # never read: listed
    assert set(cache.node_claims(port, refresh=False)) == {"m0"} and kube.lists == 2
    kube.write("nodes", "Node", node("n1", 1), "n1")
    kube.write("nodeclaims", "NodeClaim", {"metadata": {"name": "m1"}}, "m1")
    calls = (kube.lists, kube.catch_ups)
    assert [n.name for n in cache.nodes(port, _node, refresh=False)] == ["n0"]  # as last read: not asked
    assert set(cache.node_claims(port, refresh=False)) == {"m0"} and (kube.lists, kube.catch_ups) == calls
    assert [n.name for n in cache.nodes(port, _node)] == ["n0", "n1"]  # refreshed: the change since
    assert set(cache.node_claims(port)) == {"m0", "m1"} and kube.lists == 2


def _job_pod(index: int) -> JsonDict:
    obj = pod(f"job-{index}", "n1", 100)
    obj["metadata"]["labels"] = {"controller-uid": f"uid-{index:04d}", "job-name": f"job-{index}"}
    return obj


@pytest.mark.parametrize("resync", [False, True], ids=["caught-up", "resynced"])
def test_the_warm_model_keeps_nothing_of_pods_long_gone(resync: bool) -> None:
    """Short-lived pods with labels of their own (a Job's controller-uid) leave nothing
    behind once they are gone, whether the model follows changes or lists again."""
    kube = LogKube(history=10_000)
    kube.write("nodes", "", node("n1", 64), "n1")
    for index in range(5):
        kube.write("pods", "", pod(f"web-{index}", "n1", 100), f"ns/web-{index}")
    now = [0.0]
    cache = ClusterCache(clock=lambda: now[0], interner_slack=64)
    cache.read(kube, {}, _pod, _node)  # type: ignore[arg-type]
    fresh = ClusterCache(interner_slack=64)
    fresh.read(kube, {}, _pod, _node)  # type: ignore[arg-type]
    baseline = fresh.interned_values()
    for wave in range(50):
        for index in range(wave * 10, wave * 10 + 10):
            kube.write("pods", "", _job_pod(index), f"ns/job-{index}")
        cache.read(kube, {}, _pod, _node)  # type: ignore[arg-type]
        for index in range(wave * 10, wave * 10 + 10):
            kube.write("pods", "", None, f"ns/job-{index}")
    if resync:
        now[0] += cache.resync_after + 1
    read = cache.read(kube, {}, _pod, _node)  # type: ignore[arg-type]
    assert [entry.pod.name for entry in read.pods] == [f"web-{index}" for index in range(5)]
    assert read.how["pods"] == ("list" if resync else "changes")
    assert cache.interned_values() <= 2 * 5 + 64 + baseline
