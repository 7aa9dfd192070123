"""What kube-scheduler does with a ``status.nominatedNodeName`` another component wrote (KEP-5278,
"NominatedNodeName for expectation", on by default since 1.35), pinned on the tier's version.

Joiner nominates the pods it launched a node for to that node (joiner.services.nomination), so
that the scheduler tries them there first and keeps the node's room for them (equal and lower
priority pods see the nominated pods' requests as taken on it). Two facts decide when that works:

* a nomination written before the Node exists survives until the Node registers, and is then
  cleared: a registering Node carries the ``node.kubernetes.io/not-ready`` taint, its arrival
  requeues the pods (NodeResourcesFit), the attempt fails on the taint, preemption finds no
  victim and returns ``NewPostFilterResultWithNominatedNode("")``
  (pkg/scheduler/framework/preemption/preemption.go), which ``handleSchedulingFailure`` writes
  back to the pod (the KEP's "the scheduler never clears it" is not implemented in this version);
* a nomination written while the Node exists but is still tainted survives (a Node's Ready
  condition alone requeues nothing) and is honoured when the taint is lifted: the nominated pods
  go there, the others do not.

Each test starts its own control plane: the Nodes here must not take other tests' pods.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realkube.conftest import RealKube as SessionKube
from testworld.real_world import NOT_READY_TAINT, RealKube

pytestmark = [pytest.mark.real_kube, pytest.mark.slow]

NS = "default"
MERGE = "application/merge-patch+json"


@pytest.fixture
def kube(real_kube: SessionKube, tmp_path: Path) -> Iterator[RealKube]:
    plane = RealKube.start(tmp_path / "plane")
    try:
        plane.admin.request(
            "POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}, ok=(409,)
        )
        yield plane
    finally:
        plane.stop()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _register(kube: RealKube, name: str, cpu: str, *, ready: bool) -> None:
    """As a kubelet registers: the Node with its status (allocatable); the API server's
    TaintNodesByCondition admission adds the not-ready taint."""
    resources = {"cpu": cpu, "memory": "16Gi", "pods": "110"}
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "lastTransitionTime": _now(),
        "lastHeartbeatTime": _now(),
    }
    kube.node_api(name).create(
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": resources, "allocatable": resources, "conditions": [condition]},
        },
    )


def _make_ready(kube: RealKube, name: str) -> None:
    condition = {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": _now(), "lastHeartbeatTime": _now()}
    kube.node_api(name).request("PATCH", f"/api/v1/nodes/{name}/status", {"status": {"conditions": [condition]}}, content_type=MERGE)


def _lift_not_ready(kube: RealKube, name: str) -> None:
    node = kube.admin.get(f"/api/v1/nodes/{name}")
    kept = [t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] != NOT_READY_TAINT]
    kube.admin.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": {"taints": kept or None}},
        content_type=MERGE,
    )


def _tainted(kube: RealKube, name: str) -> bool:
    node = kube.admin.get(f"/api/v1/nodes/{name}")
    return any(t["key"] == NOT_READY_TAINT for t in (node.get("spec") or {}).get("taints") or [])


def _pod(kube: RealKube, name: str, node: str | None = None) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}
    if node:
        spec["nodeName"] = node
    kube.admin.create(f"/api/v1/namespaces/{NS}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def _pods(kube: RealKube) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.admin.get(f"/api/v1/namespaces/{NS}/pods")["items"]}


def _nominate(kube: RealKube, names: list[str], node: str) -> None:
    for name in names:
        kube.admin.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": {"nominatedNodeName": node}}, content_type=MERGE)


def _until(what: str, check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.1)


def _message(pod: dict[str, Any]) -> str:
    condition: dict[str, Any] = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    return str(condition.get("message", "")) if condition.get("status") == "False" else ""


def _waves(kube: RealKube) -> tuple[list[str], list[str]]:
    """A full node (node-a) and two waves of four one-CPU pods, all found unschedulable."""
    _register(kube, "node-a", "1", ready=True)
    _lift_not_ready(kube, "node-a")
    _pod(kube, "a0", "node-a")
    first, second = [f"w1-{i}" for i in range(4)], [f"w2-{i}" for i in range(4)]
    for name in first + second:
        _pod(kube, name)
    _until("every pod found unschedulable", lambda: all("Insufficient cpu" in _message(_pods(kube)[n]) for n in first + second))
    return first, second


def test_a_nomination_made_before_the_node_exists_is_cleared_when_the_node_registers(kube: RealKube) -> None:
    first, _ = _waves(kube)
    _nominate(kube, first, "node-b")
    time.sleep(1.0)
    assert all(_pods(kube)[n]["status"].get("nominatedNodeName") == "node-b" for n in first), "nothing requeues them: kept"
    _register(kube, "node-b", "4", ready=False)
    _until("the nominations cleared", lambda: not any(_pods(kube)[n]["status"].get("nominatedNodeName") for n in first))
    assert _tainted(kube, "node-b"), "cleared while the Node was still not ready, before it could take a pod"


def test_a_nomination_made_while_the_node_is_not_ready_is_honoured(kube: RealKube) -> None:
    first, second = _waves(kube)
    _register(kube, "node-b", "4", ready=False)
    _until("the pods tried against the tainted Node", lambda: all("untolerated taint" in _message(_pods(kube)[n]) for n in first + second))
    _nominate(kube, first, "node-b")
    _make_ready(kube, "node-b")
    time.sleep(1.0)
    assert all(_pods(kube)[n]["status"].get("nominatedNodeName") == "node-b" for n in first), "the Ready condition requeues nothing"
    _lift_not_ready(kube, "node-b")
    _until("the nominated pods bound", lambda: all(_pods(kube)[n]["spec"].get("nodeName") for n in first))
    pods = _pods(kube)
    assert {pods[n]["spec"]["nodeName"] for n in first} == {"node-b"}
    assert not any(pods[n]["spec"].get("nodeName") for n in second), "the node's room was kept for the nominated pods"
