"""The simulator's kube-scheduler keeps what the real one does with nominations: a pod's
nominated node is tried first and its room is kept from other pods of equal priority."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.support.fakes import small_catalog
from testworld.cluster import SimulatedCluster
from testworld.kube_emulator import KubeEmulator

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _node(name: str) -> dict[str, Any]:
    resources = {"cpu": "2", "memory": "8Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": resources, "allocatable": resources, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _pending(name: str, created: str, nominated: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]},
        "status": status,
    }


def test_a_nominated_pod_gets_its_node_before_an_older_pod() -> None:
    with KubeEmulator() as emulator:
        cluster = SimulatedCluster(emulator, small_catalog(), "us-east-1", lambda: NOW)
        emulator.apply(_node("n1"))
        emulator.apply(_pending("a-older", "2026-11-27T11:00:00Z"))
        emulator.apply(_pending("b-launched-for", "2026-11-27T11:30:00Z", nominated="n1"))
        cluster.reconcile()
        bound = {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") for p in emulator.list("Pod")}
        assert bound == {"a-older": None, "b-launched-for": "n1"}


def test_a_nominated_pod_that_does_not_fit_its_node_leaves_the_room_to_others() -> None:
    with KubeEmulator() as emulator:
        cluster = SimulatedCluster(emulator, small_catalog(), "us-east-1", lambda: NOW)
        emulator.apply(_node("n1"))
        emulator.apply(_node("n2"))
        emulator.apply(_pending("a-older", "2026-11-27T11:00:00Z", nominated="gone"))  # no such node: nothing held
        emulator.apply(_pending("b-later", "2026-11-27T11:30:00Z", nominated="n2"))
        cluster.reconcile()
        bound = {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") for p in emulator.list("Pod")}
        assert bound == {"a-older": "n1", "b-later": "n2"}
