"""The Kubernetes adapter over real HTTP against the local API emulator, and the emulator
semantics the adapter relies on (checked with the official client's typed APIs)."""
# The official client types request bodies as its models and custom objects as ``object``; these
# tests send and read raw dicts, as the client allows at run time.
# mypy: disable-error-code="arg-type,index,attr-defined,operator"

from __future__ import annotations

import base64
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import boto3
import kubernetes.client as k8s
import pytest
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from joiner.adapters.eks_auth import TOKEN_PREFIX
from joiner.adapters.kubernetes import KubernetesClient, is_pending_pod
from joiner.ports import EvictionOutcome, KubernetesError
from joiner.settings import Settings
from testworld.kube_emulator import EXPECTED_PODS_ANNOTATION, KubeEmulator

# ---------------------------------------------------------------- builders


def make_pod(
    name: str,
    namespace: str = "default",
    *,
    node: str | None = None,
    phase: str = "Pending",
    labels: dict[str, str] | None = None,
    unschedulable: bool = False,
    ready: bool | None = None,
    owner: tuple[str, str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    conditions = []
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"})
    if ready is not None:
        conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": "owner", "uid": f"uid-{owner[1]}"}]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase, "conditions": conditions, **status}}


def make_node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}, "spec": {}}


def make_pdb(name: str, selector: dict[str, str], namespace: str = "default", **budget: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": selector}, **budget},
    }


def node_pool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"}}}},
    }


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current


def typed_api(emulator: KubeEmulator) -> k8s.ApiClient:
    return k8s.ApiClient(k8s.Configuration(host=emulator.url))


# ---------------------------------------------------------------- reads


def test_lists_every_kind_with_type_meta(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("n1"))
    kube_emulator.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}},
        }
    )
    kube_emulator.apply(make_pdb("pdb", {"app": "web"}, minAvailable=1))
    kube_emulator.apply(
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "gvisor"}, "handler": "runsc", "overhead": {"podFixed": {"cpu": "250m"}}}
    )
    kube_emulator.apply(node_pool("default"))
    kube_emulator.apply(
        {
            "apiVersion": "joiner.dev/v1",
            "kind": "NodeClass",
            "metadata": {"name": "default"},
            "spec": {"role": "r", "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
        }
    )

    assert [(n["kind"], n["apiVersion"], n["metadata"]["name"]) for n in kube_client.list_nodes()] == [("Node", "v1", "n1")]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in kube_client.list_daemonsets()] == [("DaemonSet", "kube-system")]
    [pdb] = kube_client.list_pdbs()
    assert pdb["kind"] == "PodDisruptionBudget" and pdb["spec"]["minAvailable"] == 1
    [runtime_class] = kube_client.list_runtime_classes()
    assert runtime_class["kind"] == "RuntimeClass" and runtime_class["overhead"]["podFixed"]["cpu"] == "250m"
    assert [(p["kind"], p["metadata"]["name"]) for p in kube_client.list_node_pools()] == [("NodePool", "default")]
    assert [(c["kind"], c["spec"]["role"]) for c in kube_client.list_node_classes()] == [("NodeClass", "r")]


def test_get_node_returns_none_when_missing(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("n1", zone="a"))
    node = kube_client.get_node("n1")
    assert node is not None and node["metadata"]["labels"] == {"zone": "a"} and node["kind"] == "Node"
    assert kube_client.get_node("n2") is None


def test_pending_pods_follow_the_provisionable_rules(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_pod("wanted", unschedulable=True))
    kube_emulator.apply(make_pod("wanted-too", "team-b", unschedulable=True))
    kube_emulator.apply(make_pod("bound", node="n1", phase="Running", unschedulable=True))
    kube_emulator.apply(make_pod("daemon", unschedulable=True, owner=("apps/v1", "DaemonSet")))
    kube_emulator.apply(make_pod("mirror", unschedulable=True, owner=("v1", "Node")))
    kube_emulator.apply(make_pod("failed", phase="Failed", unschedulable=True))
    kube_emulator.apply(make_pod("not-yet-seen"))
    kube_emulator.apply(make_pod("preempting", unschedulable=True, nominatedNodeName="n2"))
    terminating = make_pod("terminating", unschedulable=True)
    terminating["metadata"]["finalizers"] = ["example.com/hold"]
    kube_emulator.apply(terminating)
    assert kube_emulator.delete("Pod", "terminating", "default")

    pending = kube_client.list_pending_pods()

    assert sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in pending) == [("default", "wanted"), ("team-b", "wanted-too")]
    assert all(p["kind"] == "Pod" for p in pending)
    [request] = kube_emulator.requests("GET", r"^/api/v1/pods$")
    assert request.params["fieldSelector"] == "spec.nodeName="


def test_pods_on_node_and_label_selectors(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_pod("a", node="n1", phase="Running", labels={"app": "web", "tier": "front"}))
    kube_emulator.apply(make_pod("b", "other", node="n1", phase="Running", labels={"app": "api", "tier": "db"}))
    kube_emulator.apply(make_pod("c", node="n2", phase="Running", labels={"app": "web"}))
    kube_emulator.apply(make_pod("d", labels={"app": "batch"}))

    assert sorted(p["metadata"]["name"] for p in kube_client.list_pods_on_node("n1")) == ["a", "b"]
    assert kube_client.list_pods_on_node("n3") == []
    names = lambda **kw: sorted(p["metadata"]["name"] for p in kube_client.list_pods(**kw))  # noqa: E731
    assert names(label_selector="app in (web,api),tier!=db") == ["a", "c"]
    assert names(label_selector="tier") == ["a", "b"]
    assert names(label_selector="!tier,app notin (web)") == ["d"]
    assert names(label_selector="app=web", field_selector="spec.nodeName=n2") == ["c"]
    assert names(field_selector="status.phase!=Running") == ["d"]
    assert names(field_selector="metadata.name=b,metadata.namespace=other") == ["b"]


def test_pages_through_lists_larger_than_a_page(kube_emulator: KubeEmulator, kube_sleeps: list[float]) -> None:
    for index in range(23):
        kube_emulator.apply(make_node(f"node-{index:02d}"))
    client = KubernetesClient(kube_emulator.url, page_size=5, sleep=kube_sleeps.append)

    nodes = client.list_nodes()

    assert [n["metadata"]["name"] for n in nodes] == [f"node-{i:02d}" for i in range(23)]
    requests = kube_emulator.requests("GET", "^/api/v1/nodes$")
    assert len(requests) == 5
    assert all(r.params["limit"] == "5" for r in requests)
    assert "continue" not in requests[0].params and all(r.params.get("continue") for r in requests[1:])


def test_default_page_size_is_500(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("z-last"))
    for index in range(500):
        kube_emulator.apply(make_pod(f"p{index:03d}", node="z-last", phase="Running"))

    assert len(kube_client.list_pods_on_node("z-last")) == 500 and len(kube_client.list_nodes()) == 1
    pages = kube_emulator.requests("GET", "^/api/v1/pods$")
    assert [r.params["limit"] for r in pages] == ["500"]
    kube_emulator.apply(make_pod("p500", node="z-last", phase="Running"))
    assert len(kube_client.list_pods_on_node("z-last")) == 501
    assert len(kube_emulator.requests("GET", "^/api/v1/pods$")) == 3


def test_expired_continuation_restarts_the_listing(kube_emulator: KubeEmulator, kube_sleeps: list[float]) -> None:
    for index in range(6):
        kube_emulator.apply(make_node(f"n{index}"))
    kube_emulator.fail_next("GET", "^/api/v1/nodes$", status=410, query="continue=")
    client = KubernetesClient(kube_emulator.url, page_size=4, sleep=kube_sleeps.append)

    assert [n["metadata"]["name"] for n in client.list_nodes()] == [f"n{i}" for i in range(6)]
    assert len(kube_emulator.requests("GET", "^/api/v1/nodes$")) == 4  # page 1, expired page 2, then pages 1 and 2
    assert kube_sleeps == []


def test_list_pages_fetches_the_next_page_while_the_caller_works(kube_emulator: KubeEmulator, kube_sleeps: list[float]) -> None:
    for index in range(13):
        kube_emulator.apply(make_node(f"node-{index:02d}"))
    client = KubernetesClient(kube_emulator.url, page_size=5, sleep=kube_sleeps.append)

    pages = client.list_pages("nodes")
    first, version = next(pages)
    deadline = time.monotonic() + 5
    while len(kube_emulator.requests("GET", "^/api/v1/nodes$")) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(kube_emulator.requests("GET", "^/api/v1/nodes$")) == 2  # the second page asked for before the caller wants it
    rest = [page for page, _ in pages]
    assert [n["metadata"]["name"] for n in first + [n for page in rest for n in page]] == [f"node-{i:02d}" for i in range(13)]
    assert version and len(kube_emulator.requests("GET", "^/api/v1/nodes$")) == 3


def test_list_pages_left_early_or_failing_later_keeps_the_client_usable(kube_emulator: KubeEmulator, kube_sleeps: list[float]) -> None:
    for index in range(12):
        kube_emulator.apply(make_node(f"n{index:02d}"))
    client = KubernetesClient(kube_emulator.url, page_size=4, sleep=kube_sleeps.append)
    pages = client.list_pages("nodes")
    next(pages)
    pages.close()  # the caller stops: the page fetched ahead is dropped
    assert len(client.list_nodes()) == 12

    kube_emulator.fail_next("GET", "^/api/v1/nodes$", status=410, query="continue=")
    with pytest.raises(KubernetesError) as failure:
        [page for page, _ in client.list_pages("nodes")]
    assert failure.value.status == 410  # an expired continuation while streaming: the caller lists again
    assert len(client.list_nodes()) == 12


# ---------------------------------------------------------------- writes


def test_patch_node_merges_labels_replaces_taints_and_sets_unschedulable(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    node = make_node("n1", keep="yes", drop="me")
    node["spec"]["taints"] = [{"key": "old", "effect": "NoSchedule"}, {"key": "startup", "effect": "NoExecute"}]
    stored = kube_emulator.apply(node)

    patched = kube_client.patch_node(
        "n1",
        {
            "metadata": {"labels": {"joiner.dev/nodepool": "default", "drop": None}, "annotations": {"joiner.dev/why": "test"}},
            "spec": {"taints": [{"key": "joiner.dev/disrupted", "effect": "NoSchedule"}], "unschedulable": True},
        },
    )

    assert patched["metadata"]["labels"] == {"keep": "yes", "joiner.dev/nodepool": "default"}
    assert patched["spec"] == {"taints": [{"key": "joiner.dev/disrupted", "effect": "NoSchedule"}], "unschedulable": True}
    assert int(patched["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])
    assert kube_emulator.get("Node", "n1") == {**patched}


def test_patch_node_with_stale_resource_version_conflicts(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    stale = kube_emulator.apply(make_node("n1"))["metadata"]["resourceVersion"]
    kube_client.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})

    with pytest.raises(KubernetesError) as raised:
        kube_client.patch_node("n1", {"metadata": {"resourceVersion": stale, "labels": {"a": "2"}}})

    assert raised.value.status == 409 and "the object has been modified" in str(raised.value)
    assert kube_emulator.get("Node", "n1")["metadata"]["labels"] == {"a": "1"}
    assert len(kube_emulator.requests("PATCH")) == 2  # a conflict is not retried


def test_patch_missing_node_fails_without_retrying(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    with pytest.raises(KubernetesError) as raised:
        kube_client.patch_node("ghost", {"spec": {"unschedulable": True}})
    assert raised.value.status == 404 and "PATCH /api/v1/nodes/ghost" in str(raised.value) and 'nodes "ghost" not found' in str(raised.value)
    assert len(kube_emulator.requests("PATCH")) == 1


def test_invalid_taint_is_rejected_with_the_field_named(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("n1"))
    with pytest.raises(KubernetesError) as raised:
        kube_client.patch_node("n1", {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})
    assert raised.value.status == 422 and 'taints[0].effect: Unsupported value: "Sometimes"' in str(raised.value)  # the real server says metadata.taints


def test_delete_node_with_uid_deletes_only_that_node(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("n1"))
    old_uid = kube_emulator.get("Node", "n1")["metadata"]["uid"]
    kube_emulator.delete("Node", "n1")
    kube_emulator.apply(make_node("n1"))  # the name is reused by a new instance
    new_uid = kube_emulator.get("Node", "n1")["metadata"]["uid"]
    assert new_uid != old_uid

    assert kube_client.delete_node("n1", uid=old_uid) is False  # 409: someone else's node
    assert kube_emulator.get("Node", "n1")["metadata"]["uid"] == new_uid
    assert len(kube_emulator.requests("DELETE", "/api/v1/nodes/n1")) == 1  # a 409 is not retried

    assert kube_client.delete_node("n1", uid=new_uid) is True
    assert kube_emulator.get("Node", "n1") is None
    assert kube_client.delete_node("n1", uid=new_uid) is True  # gone already: fine


def test_delete_node_is_idempotent(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_node("n1"))
    kube_client.delete_node("n1")
    kube_client.delete_node("n1")
    assert kube_emulator.get("Node", "n1") is None
    assert [(d.kind, d.name) for d in kube_emulator.deletions] == [("Node", "n1")]


def test_delete_pod_sends_the_grace_period(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    kube_emulator.apply(make_pod("p", "ns1", node="n1", phase="Running"))
    kube_client.delete_pod("ns1", "p", grace_seconds=30)
    kube_client.delete_pod("ns1", "p", grace_seconds=30)
    assert kube_emulator.get("Pod", "p", "ns1") is None
    [deletion] = kube_emulator.deletions
    assert (deletion.namespace, deletion.name, deletion.grace_period_seconds, deletion.via) == ("ns1", "p", 30, "delete")


def test_eviction_is_blocked_by_a_pdb_until_the_budget_frees(kube_emulator: KubeEmulator, kube_client: KubernetesClient, kube_sleeps: list[float]) -> None:
    kube_emulator.apply(make_pdb("web", {"app": "web"}, minAvailable=2))
    kube_emulator.apply(make_pod("web-1", node="n1", phase="Running", ready=True, labels={"app": "web"}))
    kube_emulator.apply(make_pod("web-2", node="n2", phase="Running", ready=True, labels={"app": "web"}))

    blocked = kube_client.evict_pod("default", "web-1", grace_seconds=20)

    assert blocked.status == "blocked"
    assert "disruption budget web needs 2 healthy pods and has 2 currently" in blocked.message
    assert kube_emulator.get("Pod", "web-1") is not None
    assert len(kube_emulator.requests("POST", "/eviction$")) == 1 and kube_sleeps == []  # a PDB answer is not retried
    assert kube_client.list_pdbs()[0]["status"]["disruptionsAllowed"] == 0

    kube_emulator.apply(make_pod("web-3", node="n3", phase="Running", ready=True, labels={"app": "web"}))
    assert kube_client.evict_pod("default", "web-1", grace_seconds=20) == EvictionOutcome("evicted")
    assert kube_emulator.get("Pod", "web-1") is None
    [deletion] = kube_emulator.deletions
    assert (deletion.name, deletion.via, deletion.grace_period_seconds) == ("web-1", "eviction", 20)

    assert kube_client.evict_pod("default", "web-2").status == "blocked"
    assert kube_client.evict_pod("default", "web-1").status == "gone"


def test_eviction_budget_percentages_and_unready_pods(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    budget = make_pdb("api", {"app": "api"}, maxUnavailable="34%")  # of 3 replicas: ceil(1.02) = 2 may be down, 1 must stay
    budget["metadata"]["annotations"] = {EXPECTED_PODS_ANNOTATION: "3"}
    kube_emulator.apply(budget)
    for index in range(3):
        kube_emulator.apply(make_pod(f"api-{index}", node="n1", phase="Running", ready=index != 2, labels={"app": "api"}))
    kube_emulator.apply(make_pod("api-pending", labels={"app": "api"}))  # Pending pods never need the budget

    assert kube_client.evict_pod("default", "api-pending").status == "evicted"
    # 2 healthy, 1 must stay: the unready pod may go, then one healthy pod, then no more.
    assert kube_client.evict_pod("default", "api-2").status == "evicted"
    assert kube_client.evict_pod("default", "api-0").status == "evicted"
    assert kube_client.evict_pod("default", "api-1").status == "blocked"


def test_create_event_deduplicates_and_moves_last_timestamp(kube_emulator: KubeEmulator) -> None:
    clock = FixedClock(datetime(2025, 3, 1, 12, 0, tzinfo=UTC))
    client = KubernetesClient(kube_emulator.url, clock=clock)
    pod = kube_emulator.apply(make_pod("web-1", "shop", unschedulable=True))

    client.create_event(pod, "NoCompatibleInstanceType", "no instance type satisfies cpu=64", "Warning")
    clock.current += timedelta(minutes=3)
    client.create_event(pod, "NoCompatibleInstanceType", "no instance type satisfies cpu=64", "Warning")
    client.create_event(pod, "Nominated", "will launch c5.large", "Normal")

    events = kube_emulator.list("Event", "shop")
    assert len(events) == 2
    [warning] = [e for e in events if e["type"] == "Warning"]
    assert warning["metadata"]["name"].startswith("web-1.")
    assert warning["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web-1",
        "namespace": "shop",
        "uid": pod["metadata"]["uid"],
        "resourceVersion": pod["metadata"]["resourceVersion"],
    }
    assert (warning["reason"], warning["source"], warning["count"]) == ("NoCompatibleInstanceType", {"component": "joiner"}, 1)
    assert (warning["firstTimestamp"], warning["lastTimestamp"]) == ("2025-03-01T12:00:00Z", "2025-03-01T12:03:00Z")


def test_events_of_cluster_scoped_objects_go_to_default(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    node = kube_emulator.apply(make_node("ip-10-0-0-1.ec2.internal"))
    pool = kube_emulator.apply(node_pool("default"))
    kube_client.create_event(node, "Cordoned", "cordoned for consolidation")
    kube_client.create_event(pool, "LimitReached", "cpu limit 1000 reached", "Warning")

    events = kube_emulator.list("Event", "default", field_selector="involvedObject.kind=NodePool")
    assert [(e["involvedObject"]["name"], e["involvedObject"]["apiVersion"]) for e in events] == [("default", "joiner.dev/v1")]
    assert "namespace" not in events[0]["involvedObject"]
    assert len(kube_emulator.list("Event", "default")) == 2
    with pytest.raises(ValueError, match="no metadata.name"):
        kube_client.create_event({"kind": "Pod", "metadata": {}}, "R", "m")


def test_patch_node_pool_status_touches_only_the_status(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    created = kube_emulator.apply(node_pool("default"))
    status = {"nodes": 3, "resources": {"cpu": "12", "memory": "48Gi"}, "conditions": [{"type": "Ready", "status": "True"}]}

    kube_client.patch_node_pool_status("default", status)
    kube_client.patch_node_pool_status("deleted-meanwhile", status)

    stored = kube_emulator.get("NodePool", "default")
    assert stored["status"] == status and stored["spec"] == created["spec"]
    assert stored["metadata"]["generation"] == 1
    [request] = kube_emulator.requests("PATCH", "/nodepools/default/status$")
    assert request.headers["Content-Type"] == "application/merge-patch+json"


# ---------------------------------------------------------------- retries


def test_throttling_is_retried_honouring_retry_after(kube_emulator: KubeEmulator, kube_client: KubernetesClient, kube_sleeps: list[float]) -> None:
    kube_emulator.apply(make_node("n1"))
    kube_emulator.fail_next("GET", "^/api/v1/nodes$", status=429, retry_after=3)

    assert [n["metadata"]["name"] for n in kube_client.list_nodes()] == ["n1"]
    assert len(kube_emulator.requests("GET", "^/api/v1/nodes$")) == 2
    assert kube_sleeps == [3.0]


def test_server_errors_give_up_after_bounded_attempts(kube_emulator: KubeEmulator, kube_client: KubernetesClient, kube_sleeps: list[float]) -> None:
    fault = kube_emulator.fail_next("GET", "^/api/v1/nodes$", status=500, times=10, message="etcd is sad")

    with pytest.raises(KubernetesError) as raised:
        kube_client.list_nodes()

    assert fault.hits == 4 and len(kube_emulator.requests("GET")) == 4
    assert raised.value.status == 500
    message = str(raised.value)
    assert "GET /api/v1/nodes" in message and "after 4 attempts" in message and "HTTP 500" in message and "etcd is sad" in message
    assert kube_sleeps == [0.25, 0.5, 1.0]  # full jitter pinned to its upper bound by the fixture


def test_backoff_jitter_is_drawn_below_the_exponential_cap(kube_emulator: KubeEmulator) -> None:
    sleeps: list[float] = []
    client = KubernetesClient(kube_emulator.url, sleep=sleeps.append, random=lambda: 0.5, max_attempts=6, backoff_base=1.0, backoff_cap=4.0)
    kube_emulator.fail_next(None, "^/api/v1/nodes$", status=503, times=5)
    assert client.list_nodes() == []
    assert sleeps == [0.5, 1.0, 2.0, 2.0, 2.0]


def test_timeouts_are_retried(kube_emulator: KubeEmulator, kube_sleeps: list[float]) -> None:
    kube_emulator.apply(make_node("n1"))
    kube_emulator.delay_next("GET", "^/api/v1/nodes$", 1.0)
    client = KubernetesClient(kube_emulator.url, timeout=(1.0, 0.3), sleep=kube_sleeps.append)

    assert [n["metadata"]["name"] for n in client.list_nodes()] == ["n1"]
    assert len(kube_sleeps) == 1


def test_dropped_connections_are_retried(kube_emulator: KubeEmulator, kube_client: KubernetesClient, kube_sleeps: list[float]) -> None:
    kube_emulator.apply(make_node("n1"))
    kube_emulator.disconnect_next("PATCH", "^/api/v1/nodes/n1$", times=2)

    assert kube_client.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})["metadata"]["labels"] == {"a": "b"}
    assert len(kube_sleeps) == 2


def test_unreachable_server_raises_after_bounded_attempts() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleeps: list[float] = []
    client = KubernetesClient(f"http://127.0.0.1:{port}", sleep=sleeps.append, timeout=(0.5, 0.5))

    with pytest.raises(KubernetesError) as raised:
        client.get_node("n1")

    assert raised.value.status is None and "GET /api/v1/nodes/n1 failed after 4 attempts" in str(raised.value)
    assert len(sleeps) == 3


def test_unauthorized_refreshes_the_token_once(kube_emulator: KubeEmulator) -> None:
    kube_emulator.handler.token = "fresh"
    tokens = iter(["stale", "fresh"])
    current = {"value": next(tokens)}
    client = KubernetesClient(kube_emulator.url, authorization=lambda: f"Bearer {current['value']}", invalidate=lambda: current.update(value=next(tokens)))

    assert client.list_nodes() == []
    assert [r.headers["Authorization"] for r in kube_emulator.requests()] == ["Bearer stale", "Bearer fresh"]

    kube_emulator.handler.token = "other"
    with pytest.raises(KubernetesError) as raised:
        KubernetesClient(kube_emulator.url, token="wrong").list_nodes()
    assert raised.value.status == 401


# ---------------------------------------------------------------- construction


def test_from_settings_for_local_runs(kube_emulator: KubeEmulator) -> None:
    kube_emulator.handler.token = "local-token"
    kube_emulator.apply(make_node("n1"))
    settings = Settings(
        cluster_name="c", region="us-east-1", state_table="t", idempotency_table="t", kubernetes_host=kube_emulator.url, kubernetes_token="local-token"
    )
    assert [n["metadata"]["name"] for n in KubernetesClient.from_settings(settings).list_nodes()] == ["n1"]


def test_from_settings_on_eks_uses_describe_cluster_and_signed_tokens(kube_emulator: KubeEmulator) -> None:
    presented: list[str | None] = []

    def authenticate(token: str | None) -> bool:
        presented.append(token)
        return token is not None and token.startswith(TOKEN_PREFIX)

    kube_emulator.handler.token = authenticate
    kube_emulator.apply(make_node("n1"))
    ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    settings = Settings(cluster_name="prod", region="eu-west-1", state_table="t", idempotency_table="t")
    with mock_aws():
        eks = boto3.client("eks", region_name="eu-west-1")
        sts = boto3.client("sts", region_name="eu-west-1")
        with Stubber(eks) as stub:
            stub.add_response(
                "describe_cluster",
                {
                    "cluster": {
                        "name": "prod",
                        "endpoint": kube_emulator.url,
                        "certificateAuthority": {"data": base64.b64encode(ca_pem.encode()).decode()},
                    }
                },
                {"name": "prod"},
            )
            client = KubernetesClient.from_settings(settings, eks_client=eks, sts_client=sts)
            stub.assert_no_pending_responses()
        assert [n["metadata"]["name"] for n in client.list_nodes()] == ["n1"]

    assert client._pool.connection_pool_kw["ca_cert_data"] == ca_pem  # the pool verifies the endpoint against the cluster CA
    assert client._pool.connection_pool_kw["cert_reqs"] == "CERT_REQUIRED"
    [token] = presented
    url = base64.urlsafe_b64decode(token[len(TOKEN_PREFIX) :] + "==").decode()
    assert urlparse(url).hostname == "sts.eu-west-1.amazonaws.com"
    assert parse_qs(urlparse(url).query)["Action"] == ["GetCallerIdentity"]


# ---------------------------------------------------------------- emulator semantics (official typed client)


def test_emulator_resource_versions_and_optimistic_concurrency(kube_emulator: KubeEmulator) -> None:
    core = k8s.CoreV1Api(typed_api(kube_emulator))
    created = core.create_node({"metadata": {"name": "n1"}})
    first = int(created.metadata.resource_version)
    listed = core.list_node()
    assert int(listed.metadata.resource_version) == first

    created.metadata.labels = {"a": "b"}
    replaced = core.replace_node("n1", created)
    assert int(replaced.metadata.resource_version) == first + 1 and replaced.metadata.uid == created.metadata.uid

    created.metadata.labels = {"a": "c"}  # still carries the first resourceVersion
    with pytest.raises(k8s.ApiException) as raised:
        core.replace_node("n1", created)
    assert raised.value.status == 409
    with pytest.raises(k8s.ApiException) as raised:
        core.create_node({"metadata": {"name": "n1"}})
    assert raised.value.status == 409 and "AlreadyExists" in raised.value.body


def test_emulator_custom_resources_need_merge_patch_and_resource_version(kube_emulator: KubeEmulator) -> None:
    api = typed_api(kube_emulator)
    custom = k8s.CustomObjectsApi(api)
    pool = custom.create_cluster_custom_object("joiner.dev", "v1", "nodepools", node_pool("p"))
    response = api.call_api(
        "PATCH",
        f"{kube_emulator.url}/apis/joiner.dev/v1/nodepools/p",
        header_params={"Content-Type": "application/strategic-merge-patch+json"},
        body={"spec": {}},
    )
    assert response.status == 415
    pool.pop("status", None)
    del pool["metadata"]["resourceVersion"]
    with pytest.raises(k8s.ApiException) as raised:
        custom.replace_cluster_custom_object("joiner.dev", "v1", "nodepools", "p", pool)
    assert raised.value.status == 422 and "must be specified for an update" in raised.value.body

    changed = custom.patch_cluster_custom_object("joiner.dev", "v1", "nodepools", "p", {"spec": {"weight": 5}, "status": {"nodes": 9}})
    assert changed["metadata"]["generation"] == 2 and "status" not in changed  # main resource ignores status
    status = custom.patch_cluster_custom_object_status("joiner.dev", "v1", "nodepools", "p", {"spec": {"weight": 1}, "status": {"nodes": 2}})
    assert status["spec"]["weight"] == 5 and status["status"] == {"nodes": 2} and status["metadata"]["generation"] == 2


def test_emulator_strategic_merge_and_json_patch_on_nodes(kube_emulator: KubeEmulator) -> None:
    core = k8s.CoreV1Api(typed_api(kube_emulator))
    kube_emulator.apply({**make_node("n1", a="1"), "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}})
    node = core.patch_node("n1", {"metadata": {"labels": {"b": "2"}, "finalizers": ["f/one"]}, "spec": {"taints": [{"key": "y", "effect": "NoExecute"}]}})
    assert node.metadata.labels == {"a": "1", "b": "2"} and [t.key for t in node.spec.taints] == ["y"]
    node = core.patch_node("n1", {"metadata": {"finalizers": ["f/two"]}})
    assert node.metadata.finalizers == ["f/two", "f/one"]  # strategic merge unions finalizers (the patch's first, as the real server)
    node = core.patch_node("n1", [{"op": "add", "path": "/spec/unschedulable", "value": True}, {"op": "remove", "path": "/metadata/labels/a"}])
    assert node.spec.unschedulable is True and node.metadata.labels == {"b": "2"}

    core.delete_node("n1")
    held = kube_emulator.get("Node", "n1")
    assert held["metadata"]["deletionTimestamp"]  # finalizers hold it
    core.patch_node("n1", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["f/one", "f/two"]}})
    assert kube_emulator.get("Node", "n1") is None


def test_emulator_selectors_reject_bad_input(kube_emulator: KubeEmulator) -> None:
    core = k8s.CoreV1Api(typed_api(kube_emulator))
    with pytest.raises(k8s.ApiException) as raised:
        core.list_pod_for_all_namespaces(field_selector="spec.priority=3")
    assert raised.value.status == 400 and "field label not supported: spec.priority" in raised.value.body
    with pytest.raises(k8s.ApiException) as raised:
        core.list_node(label_selector="a in (b")
    assert raised.value.status == 400


def test_emulator_binding_and_eviction_edge_cases(kube_emulator: KubeEmulator) -> None:
    core = k8s.CoreV1Api(typed_api(kube_emulator))
    kube_emulator.apply(make_pod("p", unschedulable=True, labels={"app": "x"}))
    core.create_namespaced_pod_binding("p", "default", {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}, _preload_content=False)
    bound = kube_emulator.get("Pod", "p")
    assert bound["spec"]["nodeName"] == "n1" and bound["status"]["conditions"][-1]["status"] == "True"
    assert KubernetesClient(kube_emulator.url).list_pending_pods() == []
    with pytest.raises(k8s.ApiException) as raised:
        core.create_namespaced_pod_binding("p", "default", {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n2"}})
    assert raised.value.status == 409

    kube_emulator.patch("Pod", "p", {"status": {"phase": "Running"}})
    kube_emulator.apply(make_pdb("one", {"app": "x"}, minAvailable=0))
    kube_emulator.apply(make_pdb("two", {"app": "x"}, maxUnavailable=1))
    with pytest.raises(k8s.ApiException) as raised:
        core.create_namespaced_pod_eviction("p", "default", {"metadata": {"name": "p"}})
    assert raised.value.status == 500 and "more than one PodDisruptionBudget" in raised.value.body


def test_emulator_registers_crds_created_through_the_api(kube_emulator: KubeEmulator) -> None:
    api = typed_api(kube_emulator)
    k8s.ApiextensionsV1Api(api).create_custom_resource_definition(
        {
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}}],
            },
        }
    )
    custom = k8s.CustomObjectsApi(api)
    custom.create_namespaced_custom_object("example.com", "v1", "ns1", "widgets", {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
    assert [w["metadata"]["name"] for w in custom.list_namespaced_custom_object("example.com", "v1", "ns1", "widgets")["items"]] == ["w"]


def test_is_pending_pod_requires_the_unschedulable_condition() -> None:
    pod = make_pod("p", unschedulable=True)
    assert is_pending_pod(pod)
    pod["status"]["conditions"][0]["status"] = "True"
    assert not is_pending_pod(pod)


def test_from_kubeconfig(kube_emulator: KubeEmulator, tmp_path: Any) -> None:
    kube_emulator.handler.token = "kubeconfig-token"
    kube_emulator.apply(make_node("n1"))
    path = tmp_path / "config"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: local\n"
        f"clusters: [{{name: local, cluster: {{server: '{kube_emulator.url}'}}}}]\n"
        "users: [{name: me, user: {token: kubeconfig-token}}]\n"
        "contexts: [{name: local, context: {cluster: local, user: me}}]\n"
    )
    client = KubernetesClient.from_kubeconfig(str(path))
    assert [n["metadata"]["name"] for n in client.list_nodes()] == ["n1"]


def test_paging_with_selectors_returns_each_match_once_in_order() -> None:
    names = st.sets(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), max_size=14)

    with KubeEmulator() as emulator:

        @settings(max_examples=25, deadline=None)
        @given(names=names, page_size=st.integers(1, 6), group=st.sampled_from(["a", "b"]))
        def check(names: set[str], page_size: int, group: str) -> None:
            for pod in emulator.list("Pod"):
                emulator.delete("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
            labels = {name: "a" if index % 3 else "b" for index, name in enumerate(sorted(names))}
            for name, label in labels.items():
                emulator.apply(make_pod(name, "ns", labels={"group": label}))
            before = len(emulator.requests("GET", "^/api/v1/pods$"))

            listed = KubernetesClient(emulator.url, page_size=page_size).list_pods(label_selector=f"group={group}")

            expected = sorted(name for name, label in labels.items() if label == group)
            assert [p["metadata"]["name"] for p in listed] == expected
            pages = len(emulator.requests("GET", "^/api/v1/pods$")) - before
            assert pages == max(1, -(-len(expected) // page_size))

        check()
