"""The simulator's world on a real control plane (``Simulation(..., kube="real")``, ``joiner demo
--kube real``): etcd, kube-apiserver and kube-scheduler built by ``make kube``
(:mod:`testworld.real_kube`) instead of the API emulator and the simulated scheduler.

* :class:`RealKube` starts the control plane for one run (its own etcd, a fresh cluster: runs
  never see each other's objects), installs ``manifests/crds`` and ``manifests/rbac.yaml`` as
  shipped (server-side apply, strict field validation), and gives each Joiner function a bearer
  token for ``joiner:<function>`` in the Kubernetes groups of its EKS access entry.
* :class:`RealHarness` is the emulator's harness API (``apply``, ``get``, ``list``, ``patch``,
  ``delete``, ``deletions``, ``url``) on that API server, as the cluster's own controllers (an
  admin identity); ``deletions`` are Joiner's pod deletions, evictions and Node deletions as the
  API server's audit log recorded them.
* :class:`RealCluster` is :class:`testworld.cluster.SimulatedCluster` with kubelets that
  register their Node as ``system:node:<name>`` (group ``system:nodes``, through impersonation by
  the admin: the Node authorizer and the NodeRestriction admission plugin see the node's own
  identity; the token file is fixed when the API server starts, node names are not), write its
  status through the ``status`` subresource, mark the pods bound to it Running and Ready and
  finish the deletion of its terminating pods; a node lifecycle controller that lifts the
  ``node.kubernetes.io/not-ready`` taint TaintNodesByCondition put on the new Node once it reports
  Ready; a disruption controller writing PodDisruptionBudget status; and **no scheduler of its
  own**: kube-scheduler binds. Simulated time stands still while the run waits for
  kube-scheduler to be done with the pending pods (:meth:`RealCluster.wait_for_scheduler`).

Time: simulated time runs faster than real time, and the API server stamps ``creationTimestamp``,
``deletionTimestamp`` and the scheduler's condition times in real time, so an object looks older to
Joiner than it is in simulated time by how far the simulated clock was ahead when it was created.
"""

from __future__ import annotations

import builtins
import contextlib
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from joiner.domain.model import Node, Pod
from joiner.domain.resources import EMPTY, Resources
from joiner.domain.snapshot import SnapshotError, parse_node, parse_pod
from testworld.cluster import BootSpec, SimulatedCluster, stamp
from testworld.kube_emulator import EXPECTED_PODS_ANNOTATION, DeletionRecord, pdb_status, selector_object_matches
from testworld.real_kube import (
    ADMIN,
    CRDS,
    RBAC,
    ROOT,
    SCHEDULER,
    Api,
    ApiError,
    AuditedRequest,
    AuditLog,
    ControlPlane,
    Identity,
    installed_bin_dir,
    manifests,
    new_token,
)

__all__ = ["NOT_READY_TAINT", "InstallError", "install", "RealCluster", "RealHarness", "RealKube", "SchedulerDisagreement", "joiner_groups"]

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
JsonDict = dict[str, Any]

#: kind -> (apiVersion, collection path with {namespace}, namespaced)
KINDS: Mapping[str, tuple[str, str, bool]] = {
    "Pod": ("v1", "/api/v1/namespaces/{namespace}/pods", True),
    "Node": ("v1", "/api/v1/nodes", False),
    "Event": ("v1", "/api/v1/namespaces/{namespace}/events", True),
    "Namespace": ("v1", "/api/v1/namespaces", False),
    "ServiceAccount": ("v1", "/api/v1/namespaces/{namespace}/serviceaccounts", True),
    "PodDisruptionBudget": ("policy/v1", "/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", True),
    "DaemonSet": ("apps/v1", "/apis/apps/v1/namespaces/{namespace}/daemonsets", True),
    "RuntimeClass": ("node.k8s.io/v1", "/apis/node.k8s.io/v1/runtimeclasses", False),
    "PriorityClass": ("scheduling.k8s.io/v1", "/apis/scheduling.k8s.io/v1/priorityclasses", False),
    "StorageClass": ("storage.k8s.io/v1", "/apis/storage.k8s.io/v1/storageclasses", False),
    "NodePool": ("joiner.dev/v1", "/apis/joiner.dev/v1/nodepools", False),
    "NodeClass": ("joiner.dev/v1", "/apis/joiner.dev/v1/nodeclasses", False),
    "NodeClaim": ("joiner.dev/v1", "/apis/joiner.dev/v1/nodeclaims", False),
}


def joiner_groups() -> dict[str, tuple[str, ...]]:
    """Function -> the Kubernetes groups of its EKS access entry (infra/access.py)."""
    from infra.access import CAPABILITIES, KUBERNETES_GROUP, KUBERNETES_GROUP_BY_FUNCTION

    return {name: (KUBERNETES_GROUP_BY_FUNCTION.get(name, KUBERNETES_GROUP),) for name in CAPABILITIES}


def _collection(kind: str, namespace: str | None) -> str:
    if kind not in KINDS:
        raise KeyError(f"no API path known for kind {kind!r} (testworld.real_world.KINDS)")
    _, path, namespaced = KINDS[kind]
    return path.format(namespace=namespace or "default") if namespaced else path


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


@dataclass
class RealKube:
    """One run's control plane: started by :meth:`start`, stopped by :meth:`stop`."""

    plane: ControlPlane
    admin: Api
    audit: AuditLog
    version: str
    functions: dict[str, str]  # function -> user

    @classmethod
    def start(cls, work: Path, groups: Mapping[str, tuple[str, ...]] | None = None, bin_dir: Path | None = None) -> RealKube:
        """Starts etcd, kube-apiserver and kube-scheduler in ``work`` (binaries from ``make kube``)
        and installs the shipped CRDs and RBAC. Raises FileNotFoundError when they are not built."""
        groups = dict(groups if groups is not None else joiner_groups())
        identities = {ADMIN: Identity(ADMIN, ("system:masters",), new_token()), SCHEDULER: Identity(SCHEDULER, (), new_token())}
        functions = {}
        for function, its_groups in groups.items():
            user = f"joiner:{function}"
            identities[user] = Identity(user, tuple(its_groups), new_token())
            functions[function] = user
        plane = ControlPlane(bin_dir or installed_bin_dir(), work, identities)
        try:
            plane.start()
            admin = plane.api(ADMIN)
            install(admin)
            version = str(admin.get("/version").get("gitVersion"))
        except BaseException:
            plane.stop()
            raise
        return cls(plane, admin, AuditLog(plane.audit_log), version, functions)

    def stop(self) -> list[str]:
        return self.plane.stop()

    @property
    def url(self) -> str:
        return self.plane.url

    @property
    def ca_file(self) -> str:
        return self.plane.ca_file

    def token(self, function: str) -> str:
        return self.plane.identities[self.functions[function]].token

    def node_api(self, node: str) -> Api:
        """The kubelet of ``node``: ``system:node:<node>`` in ``system:nodes``."""
        return self.plane.api(ADMIN, impersonate=(f"system:node:{node}", ("system:nodes", "system:authenticated")))

    def settled_audit(self, timeout: float = 5.0) -> list[AuditedRequest]:
        """The audit log's new requests up to a marker request made now (the log is written as
        requests complete: everything before the marker is in once the marker is)."""
        marker = f"audit-marker-{secrets.token_hex(4)}"
        self.admin.request("GET", f"/api/v1/namespaces/{marker}", ok=(404,))
        found: list[AuditedRequest] = []
        deadline = time.monotonic() + timeout
        while True:
            found += self.audit.new()
            if any(r.name == marker for r in found) or time.monotonic() > deadline:
                return found
            time.sleep(0.01)


class InstallError(RuntimeError):
    """A manifest the API server refused, or a CRD it did not establish; the message names it."""


def install(admin: Api, *paths: Path) -> None:
    """``paths`` (default manifests/crds and manifests/rbac.yaml) server-side applied with strict
    field validation, and the CRDs established. Raises :class:`InstallError` naming the file and
    object the server refused (with its answer), or the CRD that does not get established."""
    paths = paths or (CRDS, RBAC)
    for path, obj in manifests(*paths):
        try:
            admin.apply(obj)
        except ApiError as error:
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            raise InstallError(f"the API server refused {shown} ({obj.get('kind')} {obj['metadata']['name']}):\n{error}") from error
    deadline = time.monotonic() + 30
    for _, crd in manifests(*paths):
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        name = crd["metadata"]["name"]
        while True:
            got = admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = {c["type"]: c for c in (got.get("status") or {}).get("conditions") or []}
            if conditions.get("Established", {}).get("status") == "True":
                break
            if conditions.get("NamesAccepted", {}).get("status") == "False" or time.monotonic() > deadline:
                raise InstallError(f"CRD {name} not established: {list(conditions.values())}")
            time.sleep(0.05)


class RealHarness:
    """The emulator's harness API on the real API server, as the cluster's controllers (admin)."""

    def __init__(self, kube: RealKube) -> None:
        self.kube = kube
        self.admin = kube.admin
        self._deletions: list[DeletionRecord] = []
        #: every request of a Joiner identity the audit log recorded (for the RBAC report)
        self.joiner_requests: list[AuditedRequest] = []
        self._joiner_users = set(kube.functions.values())
        self._namespaces: set[str] = set()

    @property
    def url(self) -> str:
        return self.kube.url

    def path(self, kind: str, name: str, namespace: str | None = None) -> str:
        return f"{_collection(kind, namespace)}/{_quote(name)}"

    def ensure_namespace(self, namespace: str) -> None:
        """The namespace and its ``default`` ServiceAccount (the controller manager, which is not
        running, would make the account; the ServiceAccount admission plugin wants it)."""
        if namespace in self._namespaces:
            return
        self.admin.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, ok=(409,))
        self.admin.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
            ok=(409,),
        )
        self._namespaces.add(namespace)

    def apply(self, obj: Mapping[str, Any]) -> JsonDict:
        """Server-side apply (strict, forced) as the admin; creates or updates. Pods are created."""
        kind = str(obj.get("kind"))
        meta = dict(obj.get("metadata") or {})
        for system in ("uid", "resourceVersion", "creationTimestamp", "generation"):
            meta.pop(system, None)
        body = {**obj, "metadata": meta}
        _, _, namespaced = KINDS[kind] if kind in KINDS else ("", "", bool(meta.get("namespace")))
        if namespaced:
            self.ensure_namespace(meta.get("namespace") or "default")
        if kind == "Pod":
            body.pop("status", None)
            result: JsonDict = self.admin.create(_collection(kind, meta.get("namespace")), body)
            return result
        import yaml

        path = self.path(kind, meta["name"], meta.get("namespace"))
        applied: JsonDict = self.admin.request(
            "PATCH",
            path,
            yaml.safe_dump(body).encode(),
            content_type="application/apply-patch+yaml",
            query={"fieldManager": "joiner-simulation", "fieldValidation": "Strict", "force": "true"},
        )[1]
        return applied

    def get(self, kind: str, name: str, namespace: str | None = None) -> JsonDict | None:
        status, body = self.admin.request("GET", self.path(kind, name, namespace), ok=(404,))
        return None if status == 404 else dict(body)

    def list(self, kind: str, namespace: str | None = None, *, label_selector: str | None = None, field_selector: str | None = None) -> builtins.list[JsonDict]:
        from urllib.parse import quote

        api_version, path, namespaced = KINDS[kind]
        if namespaced and namespace is None:
            group_path = path.split("/namespaces/", 1)[0]
            path = f"{group_path}/{path.rsplit('/', 1)[1]}"
        elif namespaced:
            path = path.format(namespace=namespace)
        items: list[JsonDict] = []
        token = ""
        while True:
            query = {"limit": "500"}
            if label_selector:
                query["labelSelector"] = quote(label_selector, safe="")
            if field_selector:
                query["fieldSelector"] = quote(field_selector, safe="")
            if token:
                query["continue"] = quote(token, safe="")
            body = self.admin.request("GET", path, query=query)[1]
            for item in body.get("items") or []:
                items.append({"apiVersion": api_version, "kind": kind, **item})
            token = (body.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def patch(self, kind: str, name: str, patch: Mapping[str, Any], namespace: str | None = None, *, status: bool = False) -> JsonDict:
        """JSON merge patch as the admin (``status``: on the status subresource); KeyError when missing."""
        path = self.path(kind, name, namespace) + ("/status" if status else "")
        code, body = self.admin.request("PATCH", path, dict(patch), content_type="application/merge-patch+json", ok=(404,))
        if code == 404:
            raise KeyError(f"{kind} {namespace + '/' if namespace else ''}{name} not found")
        return dict(body)

    def delete(self, kind: str, name: str, namespace: str | None = None, *, grace_period_seconds: int | None = None) -> bool:
        """Delete as the admin; False when it did not exist."""
        options: JsonDict = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        code, _ = self.admin.request("DELETE", self.path(kind, name, namespace), options, ok=(404,))
        return code != 404

    @property
    def deletions(self) -> builtins.list[DeletionRecord]:
        """Joiner's accepted deletions so far (pods deleted or evicted, Nodes, NodeClaims), from the audit log."""
        for request in self.kube.settled_audit():
            if request.user not in self._joiner_users:
                continue
            self.joiner_requests.append(request)
            record = _deletion(request)
            if record is not None:
                self._deletions.append(record)
        return list(self._deletions)


def _deletion(request: AuditedRequest) -> DeletionRecord | None:
    if not 200 <= request.code < 300:
        return None
    body = request.body or {}
    if request.resource == "pods" and request.verb == "delete" and not request.subresource:
        grace = body.get("gracePeriodSeconds")
        return DeletionRecord("Pod", request.namespace, request.name, grace if isinstance(grace, int) else None, "delete", body.get("propagationPolicy"))
    if request.resource == "pods" and request.verb == "create" and request.subresource == "eviction":
        grace = (body.get("deleteOptions") or {}).get("gracePeriodSeconds")
        return DeletionRecord("Pod", request.namespace, request.name, grace if isinstance(grace, int) else None, "eviction")
    if request.verb == "delete" and request.resource in ("nodes", "nodeclaims") and not request.subresource:
        return DeletionRecord("Node" if request.resource == "nodes" else "NodeClaim", None, request.name, None, "delete")
    return None


@dataclass(frozen=True)
class SchedulerDisagreement:
    """A pod kube-scheduler left pending although the simulation's model says it fits a node."""

    at: datetime
    pod: str
    fits: str
    message: str


@dataclass
class RealCluster(SimulatedCluster):
    """kubelets, node lifecycle, ReplicaSet and disruption controllers on the real API server;
    kube-scheduler binds (see the module docstring)."""

    kube: RealKube | None = None
    #: longest real time to wait for kube-scheduler to bind a pod the model says fits
    scheduler_patience: float = 5.0
    #: how long a kubelet's Node is registered but not Ready (the CNI starting) within its boot
    not_ready_seconds: float = 10.0
    disagreements: list[SchedulerDisagreement] = field(default_factory=list)
    scheduler_wait_seconds: float = 0.0
    _unschedulable_noted: set[str] = field(default_factory=set)

    @property
    def _kube(self) -> RealKube:
        assert self.kube is not None, "RealCluster needs kube"
        return self.kube

    @property
    def _harness(self) -> RealHarness:
        assert isinstance(self.emulator, RealHarness)
        return self.emulator

    # ------------------------------------------------------------ kubelet

    def register_node(self, instance_id: str, name: str, instance_type: str, zone: str, boot: BootSpec, *, ready: bool = True) -> dict[str, Any]:
        """The kubelet registers its Node as ``system:node:<name>`` (labels, taints, providerID),
        then reports its status (capacity, allocatable, Ready or, with ``ready=False``, not ready
        yet: its network is still coming up) through ``nodes/status``; once Ready, the node
        lifecycle controller lifts the not-ready taint."""
        node_api = self._kube.node_api(name)
        obj = self.node_object(instance_id, name, instance_type, zone, boot)
        status = obj.pop("status")
        if not ready:
            status["conditions"] = [
                {**condition, "status": "False", "reason": "KubeletNotReady", "message": "container runtime network not ready: cni plugin not initialized"}
                if condition.get("type") == "Ready"
                else condition
                for condition in status.get("conditions") or []
            ]
        node_api.create("/api/v1/nodes", obj)
        node_api.request("PATCH", f"/api/v1/nodes/{_quote(name)}/status", {"status": status}, content_type="application/merge-patch+json")
        self.registered[instance_id] = name
        if ready:
            self.mark_ready(name)
        registered = self._harness.get("Node", name)
        assert registered is not None
        return registered

    def mark_ready(self, name: str) -> None:
        """The kubelet reports Ready; the node lifecycle controller lifts the not-ready taint."""
        self.set_node_condition(name, "Ready", "True", "KubeletReady", "kubelet is posting ready status")
        self._lift_not_ready(name)
        self.node_ready_at[name] = self.now()

    def _write_node_conditions(self, name: str, conditions: list[dict[str, Any]]) -> None:
        """As the node's kubelet, through ``nodes/status``."""
        self._kube.node_api(name).request(
            "PATCH", f"/api/v1/nodes/{_quote(name)}/status", {"status": {"conditions": conditions}}, content_type="application/merge-patch+json", ok=(404,)
        )

    def _lift_not_ready(self, name: str) -> None:
        """The node lifecycle controller: a Ready node loses TaintNodesByCondition's not-ready taint."""
        for _ in range(5):
            node = self._harness.get("Node", name)
            if node is None:
                return
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
            if len(kept) == len(taints):
                return
            code, _ = self._harness.admin.request(
                "PATCH",
                f"/api/v1/nodes/{_quote(name)}",
                {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": {"taints": kept or None}},
                content_type="application/merge-patch+json",
                ok=(409,),
            )
            if code != 409:
                return

    def _kubelet_status(self, pods: list[dict[str, Any]]) -> None:
        """Each kubelet, as its node: finishes the deletion of its terminating pods (no graceful
        shutdown is simulated) and marks its new pods Running and Ready."""
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or node not in self.node_ready_at:
                continue
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{_quote(meta['name'])}"
            kubelet = self._kube.node_api(node)
            if meta.get("deletionTimestamp"):
                kubelet.request(
                    "DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}, ok=(404, 409)
                )
                continue
            status = pod.get("status") or {}
            if status.get("phase") != "Pending":
                continue
            conditions = [c for c in status.get("conditions") or [] if c.get("type") not in ("Ready", "ContainersReady", "Initialized")]
            now = stamp(self.now())
            conditions += [{"type": t, "status": "True", "lastTransitionTime": now} for t in ("Initialized", "ContainersReady", "Ready")]
            kubelet.request(
                "PATCH",
                path + "/status",
                {"status": {"phase": "Running", "conditions": conditions, "startTime": now}},
                content_type="application/merge-patch+json",
                ok=(404,),
            )

    # ------------------------------------------------------------ disruption controller

    def _budget_expectations(self) -> None:
        """The disruption controller: each budget's status from its pods and the replicas of the
        workloads it selects (written as the controller does, through ``status``)."""
        budgets = self._harness.list("PodDisruptionBudget")
        if not budgets:
            return
        pods = self._harness.list("Pod")
        for pdb in budgets:
            meta = pdb["metadata"]
            selector = (pdb.get("spec") or {}).get("selector")
            expected = sum(
                self.replicas.get(name, 0)
                for name, workload in self.workloads.items()
                if workload.namespace == meta.get("namespace")
                and selector_object_matches(selector, {"app": workload.name, **workload.labels, "joiner.dev/sim-workload": workload.name})
            )
            declared = {**pdb, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), EXPECTED_PODS_ANNOTATION: str(expected)}}}
            in_namespace = [p for p in pods if p["metadata"].get("namespace") == meta.get("namespace")]
            status = pdb_status(declared, in_namespace)
            current = pdb.get("status") or {}
            keys = ("observedGeneration", "expectedPods", "currentHealthy", "desiredHealthy", "disruptionsAllowed")
            if all(current.get(k) == status[k] for k in keys) and not current.get("disruptedPods"):
                continue
            status["disruptedPods"] = None
            for condition in status["conditions"]:
                condition["lastTransitionTime"] = stamp(self.now())
            with contextlib.suppress(KeyError):
                self._harness.patch("PodDisruptionBudget", meta["name"], {"status": status}, meta.get("namespace"), status=True)

    # ------------------------------------------------------------ ReplicaSet controller

    def _create_pod(self, workload: Any) -> dict[str, Any]:
        self._harness.ensure_namespace(workload.namespace)
        return super()._create_pod(workload)

    # ------------------------------------------------------------ kube-scheduler

    def _schedule(self, pods: list[dict[str, Any]], nodes: Mapping[str, dict[str, Any]]) -> None:
        """kube-scheduler binds: wait for it (:meth:`wait_for_scheduler`), then record what it did."""
        started = time.monotonic()
        current = self.wait_for_scheduler()
        self.scheduler_wait_seconds += time.monotonic() - started
        bound: list[tuple[str, str]] = []
        newly: list[str] = []
        for raw in current:
            meta = raw["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            node = (raw.get("spec") or {}).get("nodeName")
            record = self.pods.get(key)
            if node and record is not None and record.bound is None:
                record.bound, record.node = self.now(), node
                bound.append((key, node))
            if not node and _unschedulable(raw) and key not in self._unschedulable_noted:
                self._unschedulable_noted.add(key)
                newly.append(key)
        if bound:
            targets = sorted({node for _, node in bound})
            self.note("kube-scheduler", f"{len(bound)} pod{'s' if len(bound) != 1 else ''} bound", "to " + ", ".join(targets))
        if newly:
            self.note("kube-scheduler", f"{len(newly)} pod{'s' if len(newly) != 1 else ''} unschedulable", "marked PodScheduled=False (Unschedulable)")

    def wait_for_scheduler(self) -> list[dict[str, Any]]:
        """Waits (real time; simulated time stands still) until kube-scheduler is done with the
        pending pods: every unbound pod attempted (a ``PodScheduled`` condition), its active queue
        empty and its count of scheduling attempts unchanged twice in a row (pods it found
        unschedulable wait in its backoff queue for a cluster event), and no unbound pod that the model places on a node
        (allocatable minus what is bound there, selectors, affinity, taints) — unless that lasts
        :attr:`scheduler_patience` seconds, then recorded as a :class:`SchedulerDisagreement`.
        Returns the pods as last listed."""
        deadline = time.monotonic() + self.scheduler_patience
        quiet = 0
        last_attempts = -1.0
        while True:
            pods = self._harness.list("Pod")
            unbound = [
                p
                for p in pods
                if not (p.get("spec") or {}).get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") in (None, "Pending")
            ]
            if not unbound:
                return pods
            attempted = all(_scheduled_condition(p) for p in unbound)
            metrics = self._kube.plane.scheduler_metrics(("scheduler_pending_pods", "scheduler_schedule_attempts_total"))
            active = sum(v for k, v in metrics.items() if k.startswith("scheduler_pending_pods") and 'queue="active"' in k)
            attempts = sum(v for k, v in metrics.items() if k.startswith("scheduler_schedule_attempts_total"))
            fits = self._model_fits(pods, unbound) if attempted and not active else {}
            if attempted and not active and not fits and attempts == last_attempts:
                quiet += 1
                if quiet >= 2:
                    return pods
            else:
                quiet = 0
            last_attempts = attempts
            if time.monotonic() > deadline:
                if fits:
                    for key, node in sorted(fits.items()):
                        raw = next(p for p in unbound if f"{p['metadata']['namespace']}/{p['metadata']['name']}" == key)
                        condition = _scheduled_condition(raw) or {}
                        self.disagreements.append(SchedulerDisagreement(self.now(), key, node, str(condition.get("message", ""))))
                        self.note("kube-scheduler", f"pod {key} left pending", f"the model places it on {node}: {condition.get('message', '')}")
                return pods
            time.sleep(0.02)

    def _model_fits(self, pods: Iterable[Mapping[str, Any]], unbound: Iterable[Mapping[str, Any]]) -> dict[str, str]:
        """Unbound pod -> a node the model says it fits now (each pod alone)."""
        raw_nodes = {n["metadata"]["name"]: n for n in self._harness.list("Node")}
        parsed: dict[str, Node] = {}
        for name, raw in raw_nodes.items():
            try:
                node = parse_node(raw)
            except SnapshotError:
                continue
            if node.ready and not node.unschedulable and not node.deleting:
                parsed[name] = node
        used: dict[str, Resources] = dict.fromkeys(parsed, EMPTY)
        for raw_bound in pods:
            name = (raw_bound.get("spec") or {}).get("nodeName")
            if name in used:
                try:
                    bound = parse_pod(raw_bound)
                except SnapshotError:
                    continue
                if not bound.is_terminal:
                    used[name] = used[name] + bound.requests
        fits: dict[str, str] = {}
        for raw_pending in unbound:
            try:
                pod: Pod = parse_pod(raw_pending)
            except SnapshotError:
                continue
            for name, node in sorted(parsed.items()):
                if self._misfit(pod, raw_pending, node, raw_nodes[name], used[name]) is None:
                    fits[pod.key] = name
                    break
        return fits


def _scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition  # type: ignore[no-any-return]
    return None


def _unschedulable(pod: Mapping[str, Any]) -> bool:
    condition = _scheduled_condition(pod)
    return condition is not None and condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
