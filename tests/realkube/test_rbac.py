"""RBAC proven like IAM: every KubernetesPort method each Joiner function calls, run through the
real adapter (joiner.adapters.kubernetes.KubernetesClient) as that function's identity, against
a real API server with manifests/rbac.yaml applied. A 403 fails the test (tests/realkube/conftest.py
reads it from the audit log); the session report lists what rbac.yaml grants each identity that
no test exercised."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from joiner.adapters.kubernetes import KubernetesClient
from joiner.domain.nodeclaims import involved_object, node_claim_object
from joiner.ports import ClaimRecord, KubernetesPort
from tests.realkube.access import function_groups
from tests.realkube.conftest import RealKube

pytestmark = pytest.mark.real_kube

PAUSE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class World:
    """Objects every identity's reads can find (made once per module, as admin)."""

    namespace: str
    tag: str
    node: dict[str, Any]
    pending_pod: str
    bound_pod: str
    daemonset: str
    pdb: str
    runtime_class: str
    storage_class: str
    volume: str
    claim: str
    node_class: str
    node_pool: dict[str, Any]


def pod(name: str, tag: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"joiner-test": tag, "app": tag}},
        "spec": {"containers": [{"name": "c", "image": PAUSE, "resources": {"requests": {"cpu": "100m"}}}], **spec},
    }


def node(name: str, tag: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"joiner-test": tag}}}


def node_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": "JoinerNodeRole-test",
            "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": "test"}}],
            "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": "test"}}],
        },
    }


def node_pool(name: str, node_class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": node_class_name}}}},
    }


@pytest.fixture(scope="module")
def world(real_kube: RealKube) -> World:
    admin, unique = real_kube.admin, real_kube.unique
    ns, tag = real_kube.namespace("rbac"), unique("tag")
    the_node = admin.create("/api/v1/nodes", node(unique("node"), tag))
    pending, bound = unique("pending"), unique("bound")
    # Nothing can place it (no node has the label): the real scheduler marks it Unschedulable.
    admin.create(f"/api/v1/namespaces/{ns}/pods", pod(pending, tag, nodeSelector={"joiner-test/nowhere": "true"}))
    admin.create(f"/api/v1/namespaces/{ns}/pods", pod(bound, tag, nodeName=the_node["metadata"]["name"]))
    daemonset = unique("ds")
    admin.create(
        f"/apis/apps/v1/namespaces/{ns}/daemonsets",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": daemonset},
            "spec": {
                "selector": {"matchLabels": {"ds": daemonset}},
                "template": {"metadata": {"labels": {"ds": daemonset}}, "spec": {"containers": [{"name": "c", "image": PAUSE}]}},
            },
        },
    )
    pdb = unique("pdb")
    admin.create(
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": pdb},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": tag}}},
        },
    )
    runtime_class = unique("rc")
    admin.create(
        "/apis/node.k8s.io/v1/runtimeclasses",
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {"name": runtime_class},
            "handler": "runc",
            "overhead": {"podFixed": {"cpu": "250m"}},
        },
    )
    storage_class = unique("sc")
    admin.create(
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": storage_class},
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    volume, claim = unique("pv"), unique("pvc")
    admin.create(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123456789abcdef0"},
            },
        },
    )
    admin.create(
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class, "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    admin.create(
        "/apis/storage.k8s.io/v1/csinodes",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": the_node["metadata"]["name"]},
            "spec": {"drivers": [{"name": "ebs.csi.aws.com", "nodeID": "i-0123", "allocatable": {"count": 25}}]},
        },
    )
    the_class = unique("nc")
    admin.create("/apis/joiner.dev/v1/nodeclasses", node_class(the_class))
    the_pool = admin.create("/apis/joiner.dev/v1/nodepools", node_pool(unique("np"), the_class))
    return World(ns, tag, the_node, pending, bound, daemonset, pdb, runtime_class, storage_class, volume, claim, the_class, the_pool)


def names(objects: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objects}


def eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout} s: {check.__doc__ or check}")
        time.sleep(0.2)


# ---------------------------------------------------------------- one operation per port method

Operation = Callable[[RealKube, KubernetesClient, World], None]


def list_pods(kube: RealKube, client: KubernetesClient, w: World) -> None:
    assert names(client.list_pods(label_selector=f"joiner-test={w.tag}")) == {w.pending_pod, w.bound_pod}


def iter_nodes(kube: RealKube, client: KubernetesClient, w: World) -> None:
    assert w.node["metadata"]["name"] in names(list(client.iter_nodes()))


def list_pages(kube: RealKube, client: KubernetesClient, w: World) -> None:
    pages = list(client.list_pages("pods"))
    assert {w.pending_pod, w.bound_pod} <= {p["metadata"]["name"] for items, _ in pages for p in items}
    assert all(int(version) > 0 for _, version in pages)
    assert w.node["metadata"]["name"] in {n["metadata"]["name"] for items, _ in client.list_pages("nodes") for n in items}
    mirrors = list(client.list_pages("nodeclaims"))  # the mirrors a sync and delete to drain keep
    assert mirrors and all(item["kind"] == "NodeClaim" and item["apiVersion"] == "joiner.dev/v1" for items, _ in mirrors for item in items)


def changes_since(kube: RealKube, client: KubernetesClient, w: World) -> None:
    """A watch resumed from a list's version replays what changed since, then ends once idle."""
    (_, version), *_ = client.list_pages("pods")
    new = kube.unique("changed")
    kube.admin.create(f"/api/v1/namespaces/{w.namespace}/pods", pod(new, kube.unique("tag"), nodeSelector={"joiner-test/nowhere": "true"}))

    def replayed() -> bool:
        """the new pod's creation is among the changes since the list"""
        return any(e.type == "ADDED" and e.object["metadata"]["name"] == new for e in client.changes_since("pods", version))

    eventually(replayed)
    assert list(client.changes_since("nodes", next(iter(client.list_pages("nodes")))[1])) is not None
    assert list(client.changes_since("nodeclaims", next(iter(client.list_pages("nodeclaims")))[1])) is not None
    # A catch-up leaves the watch mid-stream: the connection it used must not serve the next
    # request (it would read the watch's next chunk as a status line).
    for _ in range(3):
        list(client.changes_since("pods", version))
        assert client.get_node(w.node["metadata"]["name"]) is not None


def list_pending_pods(kube: RealKube, client: KubernetesClient, w: World) -> None:
    def pending() -> bool:
        """the scheduler marked the pod Unschedulable and the adapter reports it pending"""
        return w.pending_pod in names(client.list_pending_pods())

    eventually(pending)
    assert w.bound_pod not in names(client.list_pending_pods())


def list_unbound_pods(kube: RealKube, client: KubernetesClient, w: World) -> None:
    pods, version = client.list_unbound_pods()
    assert w.pending_pod in names(pods) and w.bound_pod not in names(pods)
    assert int(version) > 0


def watch_unbound_pods(kube: RealKube, client: KubernetesClient, w: World) -> None:
    _, version = client.list_unbound_pods()
    new = kube.unique("watched")
    kube.admin.create(f"/api/v1/namespaces/{w.namespace}/pods", pod(new, kube.unique("tag"), nodeSelector={"joiner-test/nowhere": "true"}))
    events = client.watch_unbound_pods(version, 10)
    try:
        assert any(e.type == "ADDED" and e.object["metadata"]["name"] == new for e in events)
    finally:
        events.close()  # type: ignore[attr-defined]


def _watch_plan_input(resource: str) -> Operation:
    def operation(kube: RealKube, client: KubernetesClient, w: World) -> None:
        version = client.plan_input_version(resource)
        name = kube.unique("watched")
        if resource == "nodes":  # one Joiner registered (outside the selector), then one registering
            kube.admin.create(
                "/api/v1/nodes",
                {
                    **node(kube.unique("registered"), w.tag),
                    "metadata": {"name": kube.unique("registered"), "labels": {"joiner.dev/nodepool": "p", "joiner.dev/registered": "true"}},
                },
            )
            kube.admin.create("/api/v1/nodes", {**node(name, w.tag), "metadata": {"name": name, "labels": {"joiner.dev/nodepool": "p"}}})
        else:
            obj = node_pool(name, w.node_class) if resource == "nodepools" else node_class(name)
            kube.admin.create(f"/apis/joiner.dev/v1/{resource}", obj)
        events = client.watch_plan_inputs(resource, version, 10)
        try:
            seen = []
            for event in events:
                seen.append(event.object["metadata"]["name"])
                if seen[-1] == name:
                    assert event.type == "ADDED"
                    break
            assert seen[-1:] == [name] and not any(n.startswith("registered") for n in seen), seen
        finally:
            events.close()  # type: ignore[attr-defined]

    return operation


def list_pods_on_node(kube: RealKube, client: KubernetesClient, w: World) -> None:
    assert names(client.list_pods_on_node(w.node["metadata"]["name"])) == {w.bound_pod}


def list_nodes(kube: RealKube, client: KubernetesClient, w: World) -> None:
    assert w.node["metadata"]["name"] in names(client.list_nodes())


def get_node(kube: RealKube, client: KubernetesClient, w: World) -> None:
    found = client.get_node(w.node["metadata"]["name"])
    assert found is not None and found["metadata"]["uid"] == w.node["metadata"]["uid"]
    assert client.get_node(kube.unique("missing")) is None


def list_daemonsets(kube: RealKube, client: KubernetesClient, w: World) -> None:
    assert w.daemonset in names(client.list_daemonsets())


def list_pdbs(kube: RealKube, client: KubernetesClient, w: World) -> None:
    assert w.pdb in names(client.list_pdbs())


def list_runtime_classes(kube: RealKube, client: KubernetesClient, w: World) -> None:
    found = {o["metadata"]["name"]: o for o in client.list_runtime_classes()}
    assert found[w.runtime_class]["overhead"] == {"podFixed": {"cpu": "250m"}}


def list_volume_objects(kube: RealKube, client: KubernetesClient, w: World) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in client.list_volume_objects()}
    assert {
        ("PersistentVolumeClaim", w.claim),
        ("PersistentVolume", w.volume),
        ("StorageClass", w.storage_class),
        ("CSINode", w.node["metadata"]["name"]),
    } <= kinds


def list_node_pools(kube: RealKube, client: KubernetesClient, w: World) -> None:
    assert w.node_pool["metadata"]["name"] in names(client.list_node_pools())


def list_node_classes(kube: RealKube, client: KubernetesClient, w: World) -> None:
    assert w.node_class in names(client.list_node_classes())


def patch_node(kube: RealKube, client: KubernetesClient, w: World) -> None:
    name = kube.admin.create("/api/v1/nodes", node(kube.unique("node"), w.tag))["metadata"]["name"]
    taints = [{"key": "joiner.dev/disrupting", "effect": "NoSchedule"}]
    patched = client.patch_node(name, {"metadata": {"labels": {"joiner.dev/registered": "true"}}, "spec": {"unschedulable": True, "taints": taints}})
    assert patched["metadata"]["labels"]["joiner.dev/registered"] == "true" and patched["spec"]["unschedulable"] is True
    assert {"key": "joiner.dev/disrupting", "effect": "NoSchedule"} in patched["spec"]["taints"]


def delete_node(kube: RealKube, client: KubernetesClient, w: World) -> None:
    created = kube.admin.create("/api/v1/nodes", node(kube.unique("node"), w.tag))
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    assert client.delete_node(name, uid="00000000-0000-0000-0000-000000000000") is False  # someone else's node: 409
    assert client.get_node(name) is not None
    assert client.delete_node(name, uid=uid) is True
    assert client.get_node(name) is None
    assert client.delete_node(name) is True  # already gone


def evict_pod(kube: RealKube, client: KubernetesClient, w: World) -> None:
    name = kube.unique("evicted")
    kube.admin.create(f"/api/v1/namespaces/{w.namespace}/pods", pod(name, kube.unique("tag")))
    assert client.evict_pod(w.namespace, name, grace_seconds=0).status == "evicted"
    assert client.evict_pod(w.namespace, name).status == "gone"


def delete_pod(kube: RealKube, client: KubernetesClient, w: World) -> None:
    name = kube.unique("deleted")
    kube.admin.create(f"/api/v1/namespaces/{w.namespace}/pods", pod(name, kube.unique("tag")))
    client.delete_pod(w.namespace, name, grace_seconds=0)
    client.delete_pod(w.namespace, name)  # already gone
    status, _ = kube.admin.request("GET", f"/api/v1/namespaces/{w.namespace}/pods/{name}", ok=(404,))
    assert status == 404


def nominate_pod(kube: RealKube, client: KubernetesClient, w: World) -> None:
    name = kube.unique("nominated")
    created = kube.admin.create(f"/api/v1/namespaces/{w.namespace}/pods", pod(name, kube.unique("tag"), nodeSelector={"joiner-test/nowhere": "true"}))
    uid = created["metadata"]["uid"]
    assert client.nominate_pod(w.namespace, name, "00000000-0000-0000-0000-000000000000", "elsewhere") is False  # another pod of that name: 422
    assert client.nominate_pod(w.namespace, name, uid, "registering-node") is True
    assert kube.admin.get(f"/api/v1/namespaces/{w.namespace}/pods/{name}")["status"]["nominatedNodeName"] == "registering-node"
    assert client.nominate_pod(w.namespace, kube.unique("gone"), uid, "registering-node") is False


def create_event(kube: RealKube, client: KubernetesClient, w: World) -> None:
    involved = kube.admin.get(f"/api/v1/namespaces/{w.namespace}/pods/{w.pending_pod}")
    reason = kube.unique("Reason").replace("-", "")
    client.create_event(involved, reason, "no NodePool fits", "Warning")
    client.create_event(involved, reason, "no NodePool fits", "Warning")  # the same again: 409, then a patch
    events = [e for e in kube.admin.get(f"/api/v1/namespaces/{w.namespace}/events")["items"] if e["reason"] == reason]
    assert len(events) == 1 and events[0]["involvedObject"]["uid"] == involved["metadata"]["uid"]
    # ... and one on a cluster-scoped object goes to the default namespace
    client.create_event(w.node_pool, reason, "pool event")
    assert any(e["reason"] == reason for e in kube.admin.get("/api/v1/namespaces/default/events")["items"])


def patch_node_pool_status(kube: RealKube, client: KubernetesClient, w: World) -> None:
    name = w.node_pool["metadata"]["name"]
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    client.patch_node_pool_status(name, {"resources": {"cpu": "4", "memory": "16Gi", "nodes": "1"}, "nodes": 1, "conditions": [ready]})
    status = kube.admin.get(f"/apis/joiner.dev/v1/nodepools/{name}")["status"]
    assert status["nodes"] == 1 and status["resources"]["memory"] == "16Gi" and status["conditions"][0]["status"] == "True"
    client.patch_node_pool_status(kube.unique("gone"), {"nodes": 0})  # a NodePool deleted meanwhile: skipped


def patch_node_class_status(kube: RealKube, client: KubernetesClient, w: World) -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}
    status = {
        "subnets": [{"id": "subnet-0a", "zone": "us-east-1a"}],
        "securityGroups": [{"id": "sg-0a"}],
        "amis": [{"id": "ami-0a", "name": "al2023", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}],
        "conditions": [ready],
    }
    client.patch_node_class_status(w.node_class, status)
    stored = kube.admin.get(f"/apis/joiner.dev/v1/nodeclasses/{w.node_class}")["status"]
    assert stored["amis"][0]["id"] == "ami-0a" and stored["subnets"] == status["subnets"]


def node_claims(kube: RealKube, client: KubernetesClient, w: World) -> None:
    """The mirror's whole life as sync_node_claims and mirror_claim write it: read, create, status,
    spec/metadata, an Event on it, delete."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    claim = ClaimRecord(
        claim_id=kube.unique("claim"),
        node_pool=w.node_pool["metadata"]["name"],
        state="launched",
        created_at=now,
        instance_id="i-0123456789abcdef0",
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type="spot",
        price=0.05,
        pods=("default/a",),
        launched_at=now,
    )
    desired = node_claim_object(claim, w.node_pool, now=now)
    name = desired["metadata"]["name"]
    assert client.get_node_claim(name) is None
    created = client.create_node_claim({k: v for k, v in desired.items() if k != "status"})
    assert created is not None and created["metadata"]["uid"]
    assert client.create_node_claim({k: v for k, v in desired.items() if k != "status"}) is None  # exists
    assert client.patch_node_claim(name, {"status": desired["status"]}, status=True) is True
    found = client.get_node_claim(name)
    assert found is not None and found["metadata"]["uid"] == created["metadata"]["uid"]
    assert found["status"]["conditions"] == desired["status"]["conditions"]
    reason = kube.unique("Launched").replace("-", "")
    client.create_event(involved_object(found), reason, "instance i-0123456789abcdef0")
    assert any(
        e["reason"] == reason and e["involvedObject"]["uid"] == created["metadata"]["uid"] and e["involvedObject"]["kind"] == "NodeClaim"
        for e in kube.admin.get("/api/v1/namespaces/default/events")["items"]
    )
    assert client.patch_node_claim(name, {"spec": dict(desired["spec"], pods=["default/b"])}) is True
    mirror = next(m for m in client.list_node_claims() if m["metadata"]["name"] == name)
    assert mirror["spec"]["pods"] == ["default/b"] and mirror["status"] == kube.admin.get(f"/apis/joiner.dev/v1/nodeclaims/{name}")["status"]
    assert mirror["metadata"]["ownerReferences"][0]["uid"] == w.node_pool["metadata"]["uid"]
    assert client.delete_node_claim(name, uid="00000000-0000-0000-0000-000000000000") is False  # another object now
    assert client.delete_node_claim(name, uid=mirror["metadata"]["uid"]) is True
    assert name not in names(client.list_node_claims())
    assert client.patch_node_claim(name, {"spec": desired["spec"]}) is False  # gone


def node_overlays(kube: RealKube, client: KubernetesClient, w: World) -> None:
    """Listing NodeOverlays and writing the status the scanner computes."""
    name = kube.unique("overlay")
    kube.admin.create(
        "/apis/joiner.dev/v1alpha1/nodeoverlays",
        {
            "apiVersion": "joiner.dev/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": name},
            "spec": {
                "requirements": [{"key": "joiner.dev/nodepool", "operator": "In", "values": [w.node_pool["metadata"]["name"]]}],
                "priceAdjustment": "-10%",
            },
        },
    )
    assert name in names(client.list_node_overlays())


def patch_node_overlay_status(kube: RealKube, client: KubernetesClient, w: World) -> None:
    name = kube.unique("overlay")
    kube.admin.create(
        "/apis/joiner.dev/v1alpha1/nodeoverlays",
        {
            "apiVersion": "joiner.dev/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": name},
            "spec": {"requirements": [], "capacity": {"example.com/gpu-slice": "4"}},
        },
    )
    ready = {"type": "Ready", "status": "False", "reason": "Conflict", "message": "conflicts with NodeOverlay b", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    client.patch_node_overlay_status(name, {"instanceTypes": ["m5.large"], "instanceTypeCount": 1, "nodePools": ["default"], "conditions": [ready]})
    stored = kube.admin.get(f"/apis/joiner.dev/v1alpha1/nodeoverlays/{name}")["status"]
    assert stored["instanceTypes"] == ["m5.large"] and stored["conditions"][0]["reason"] == "Conflict"
    client.patch_node_overlay_status(kube.unique("gone"), {"instanceTypes": []})  # deleted meanwhile: skipped


def set_node_finalizer(kube: RealKube, client: KubernetesClient, w: World) -> None:
    """Delete to drain: Joiner's finalizer added and removed by strategic merge, others kept."""
    name = kube.unique("node")
    kube.admin.create("/api/v1/nodes", dict(node(name, w.tag), metadata={"name": name, "finalizers": ["example.com/keep"]}))
    assert client.set_node_finalizer(name, "joiner.dev/termination", True) is True
    assert sorted(kube.admin.get(f"/api/v1/nodes/{name}")["metadata"]["finalizers"]) == ["example.com/keep", "joiner.dev/termination"]
    assert client.set_node_finalizer(name, "joiner.dev/termination", False) is True
    assert kube.admin.get(f"/api/v1/nodes/{name}")["metadata"]["finalizers"] == ["example.com/keep"]
    assert client.set_node_finalizer(kube.unique("gone"), "joiner.dev/termination", False) is False


OPERATIONS: dict[str, Operation] = {
    "iter_nodes": iter_nodes,
    "list_pages": list_pages,
    "changes_since": changes_since,
    "list_pending_pods": list_pending_pods,
    "list_unbound_pods": list_unbound_pods,
    "watch_unbound_pods": watch_unbound_pods,
    "watch_plan_inputs(nodepools)": _watch_plan_input("nodepools"),
    "watch_plan_inputs(nodeclasses)": _watch_plan_input("nodeclasses"),
    "watch_plan_inputs(nodes)": _watch_plan_input("nodes"),
    "nominate_pod": nominate_pod,
    "list_pods_on_node": list_pods_on_node,
    "get_node": get_node,
    "list_daemonsets": list_daemonsets,
    "list_pdbs": list_pdbs,
    "list_runtime_classes": list_runtime_classes,
    "list_volume_objects": list_volume_objects,
    "list_node_pools": list_node_pools,
    "list_node_classes": list_node_classes,
    "patch_node": patch_node,
    "delete_node": delete_node,
    "evict_pod": evict_pod,
    "delete_pod": delete_pod,
    "create_event": create_event,
    "patch_node_pool_status": patch_node_pool_status,
    "patch_node_class_status": patch_node_class_status,
    "node_claims": node_claims,
    "set_node_finalizer": set_node_finalizer,
    "list_node_overlays": node_overlays,
    "patch_node_overlay_status": patch_node_overlay_status,
}

#: What the provisioning round reads and writes (joiner.services.provisioning: read(), registration,
#: events, NodePool and NodeClass status, the mirrors of the claims it launches and registers).
_PROVISIONING = (
    "list_pages",
    "changes_since",
    "iter_nodes",
    "list_pending_pods",
    "list_daemonsets",
    "list_runtime_classes",
    "list_node_pools",
    "list_node_classes",
    "list_volume_objects",
    "list_node_overlays",
    "patch_node",
    "create_event",
    "node_claims",
)
#: Beginning and continuing a termination (joiner.services.termination), the claim's mirror
#: written as it begins (Disrupting) and ends (Terminated, deleted).
_TERMINATION = (
    "iter_nodes",
    "get_node",
    "list_pods_on_node",
    "patch_node",
    "set_node_finalizer",
    "evict_pod",
    "delete_pod",
    "delete_node",
    "create_event",
    "node_claims",
)

#: The KubernetesPort methods each function's services call.
USES: dict[str, tuple[str, ...]] = {
    "scanner": (*_PROVISIONING, "nominate_pod", "patch_node_pool_status", "patch_node_class_status", "patch_node_overlay_status"),  # and the mirrors' sync
    # replacement rounds (provisioning's reads and launch) and the termination it begins
    "interruption": tuple(dict.fromkeys((*_PROVISIONING, "get_node", *_TERMINATION))),
    "termination": _TERMINATION,
    # candidates, budgets, replacements, terminations begun, mirrors' findings
    "disruption": tuple(dict.fromkeys((*_PROVISIONING, "list_pdbs", "get_node", *_TERMINATION, "node_claims"))),
    "gc": ("iter_nodes", "list_pages", "changes_since", "get_node", "list_node_classes", "list_node_pools", "delete_node", "set_node_finalizer", "node_claims"),
    "watcher": ("list_unbound_pods", "watch_unbound_pods", "watch_plan_inputs(nodepools)", "watch_plan_inputs(nodeclasses)", "watch_plan_inputs(nodes)"),
}


def test_every_function_has_an_identity_and_uses() -> None:
    assert {f"joiner:{f}" for f in USES} == set(function_groups())
    assert set().union(*USES.values()) == set(OPERATIONS)


def test_every_port_method_but_the_clis_is_exercised() -> None:
    methods = {m for m in dir(KubernetesPort) if not m.startswith("_")}
    # list_pods and list_nodes: `joiner status` (the CLI, run with the user's own credentials)
    exercised = {op.split("(")[0] for op in OPERATIONS} | {
        "plan_input_version",
        "list_node_claims",
        "get_node_claim",
        "create_node_claim",
        "patch_node_claim",
        "delete_node_claim",
        "list_pods",
        "list_nodes",
    }
    assert methods - exercised == set()


@pytest.mark.parametrize(("function", "operation"), [(f, op) for f, ops in USES.items() for op in ops])
def test_function_identity_may_do_what_it_does(real_kube: RealKube, world: World, function: str, operation: str) -> None:
    client = real_kube.client(function, max_attempts=1)
    try:
        OPERATIONS[operation](real_kube, client, world)
    finally:
        client.close()


def _access(kube: RealKube, user: str, groups: tuple[str, ...], verb: str, resource: str, group: str = "", sub: str = "") -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": [*groups, "system:authenticated"],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource, "subresource": sub},
        },
    }
    return bool(kube.admin.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get("allowed"))


@pytest.mark.parametrize(
    ("function", "verb", "resource", "group", "sub"),
    [
        ("watcher", "delete", "nodes", "", ""),
        ("watcher", "patch", "nodes", "", ""),
        ("watcher", "create", "pods", "", "eviction"),
        ("watcher", "patch", "nodepools", "joiner.dev", "status"),
        ("watcher", "get", "pods", "", ""),
        ("scanner", "create", "pods", "", ""),
        ("scanner", "get", "secrets", "", ""),
        ("scanner", "list", "configmaps", "", ""),
        ("scanner", "update", "nodeclaims", "joiner.dev", ""),
        ("scanner", "delete", "nodepools", "joiner.dev", ""),
        ("scanner", "update", "nodeoverlays", "joiner.dev", ""),
        ("watcher", "list", "nodeoverlays", "joiner.dev", ""),
        ("gc", "create", "clusterrolebindings", "rbac.authorization.k8s.io", ""),
    ],
)
def test_what_rbac_does_not_grant(real_kube: RealKube, function: str, verb: str, resource: str, group: str, sub: str) -> None:
    user = f"joiner:{function}"
    assert not _access(real_kube, user, function_groups()[user], verb, resource, group, sub)
