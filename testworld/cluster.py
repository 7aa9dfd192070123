"""What a real cluster does around Joiner, simulated on the Kubernetes API emulator — and only that:

* **kubelet**: once an instance has booted (a configurable delay after launch), registers its
  Node with the labels and taints from the instance's user data (``--node-labels``,
  ``--register-with-taints`` in the nodeadm ``NodeConfig`` Joiner wrote), the well-known labels
  its type and zone imply, capacity and allocatable from the bundled catalog, ``Ready``; marks
  the pods bound to it ``Running`` and ``Ready``;
* **node lifecycle controller / pod GC**: the Node of a terminated instance is deleted with
  the pods still bound to it (those pods are *lost*);
* **ReplicaSet controller**: keeps each workload at its replica count, creating pods (which
  start pending) and deleting pending ones first when scaling down;
* **disruption controller** (PodDisruptionBudget ``expectedPods``): the replica count of the
  workloads a budget selects, so an evicted pod counts as unavailable until its successor is
  Ready (the emulator computes the rest of the budget's status on every eviction);
* **kube-scheduler**: binds each pending pod to a Ready, schedulable node whose labels match
  its node selector and required node affinity *literally* (no alias keys: see
  :mod:`testworld.node_match`), whose taints it tolerates and whose
  allocatable resources fit (least-allocated node first, as the default scoring prefers);
  marks the rest ``PodScheduled=False, reason=Unschedulable``.

Not simulated: pod (anti-)affinity and topology spread in the scheduler, preemption,
startup-taint removal, DaemonSets, container start-up time, graceful pod shutdown (pods
leave as soon as they are evicted or deleted).
"""

from __future__ import annotations

import base64
import functools
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import yaml

from joiner.domain import labels as wk
from joiner.domain.catalog import Catalog
from joiner.domain.model import INSTANCE_STORE_POLICIES, InstanceType, KubeletConfig, Node, Pod, Taint
from joiner.domain.resources import EMPTY, Resources
from joiner.domain.snapshot import SnapshotError, parse_node, parse_pod
from joiner.domain.userdata import NODECONFIG_CONTENT_TYPE, UserDataError, parse_user_data
from testworld.kube_emulator import EXPECTED_PODS_ANNOTATION, DeletionRecord, KubeEmulator, selector_object_matches
from testworld.node_match import node_affinity_misfit, untolerated_taint
from testworld.scenario import Workload

__all__ = ["BootSpec", "KubeHarness", "PodRecord", "SimulatedCluster", "kubelet_registration", "quantities", "stamp"]

WORKLOAD_LABEL = "joiner.dev/sim-workload"


class KubeHarness(Protocol):
    """What the simulation does to the cluster: the emulator's harness API
    (:class:`~testworld.kube_emulator.KubeEmulator`), or the same on a real API server
    (:class:`testworld.real_world.RealHarness`)."""

    @property
    def url(self) -> str: ...

    @property
    def deletions(self) -> list[DeletionRecord]: ...

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...

    def list(
        self, kind: str, namespace: str | None = None, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> list[dict[str, Any]]: ...

    def patch(self, kind: str, name: str, patch: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]: ...

    def delete(self, kind: str, name: str, namespace: str | None = None, *, grace_period_seconds: int | None = None) -> bool: ...


def stamp(when: datetime) -> str:
    """RFC 3339 as the API server writes it."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def quantities(resources: Resources) -> dict[str, str]:
    return {name: (f"{value}m" if name == "cpu" else str(value // 1000)) for name, value in sorted(resources.items())}


@dataclass(frozen=True)
class BootSpec:
    """What the kubelet of a booted instance registers with."""

    labels: dict[str, str]
    taints: tuple[Taint, ...]
    kubelet: KubeletConfig
    #: nodeadm's ``spec.instance.localStorage.strategy`` (``RAID0``), or None.
    instance_store_policy: str | None = None


def _split_flag(flags: Iterable[str], name: str) -> list[str]:
    values: list[str] = []
    for flag in flags:
        if flag.startswith(f"--{name}="):
            values.extend(item for item in flag.split("=", 1)[1].split(",") if item)
    return values


def kubelet_registration(user_data_b64: str | None) -> BootSpec:
    """Labels, taints and kubelet settings from an instance's (base64) user data, as nodeadm
    would hand them to the kubelet. Unparseable or absent user data registers a bare node."""
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    max_pods: int | None = None
    local_storage: str | None = None
    if user_data_b64:
        try:
            text = base64.b64decode(user_data_b64).decode()
            parts = parse_user_data(text)
        except (ValueError, UserDataError):
            parts = []
        for part in parts:
            if part.content_type.split(";")[0].strip() != NODECONFIG_CONTENT_TYPE:
                continue
            try:
                document = yaml.safe_load(part.content) or {}
            except yaml.YAMLError:
                continue
            strategy = (((document.get("spec") or {}).get("instance") or {}).get("localStorage") or {}).get("strategy")
            if strategy in INSTANCE_STORE_POLICIES:
                local_storage = strategy
            kubelet = (document.get("spec") or {}).get("kubelet") or {}
            flags = [str(f) for f in kubelet.get("flags") or []]
            for item in _split_flag(flags, "node-labels"):
                key, _, value = item.partition("=")
                labels[key] = value
            for item in _split_flag(flags, "register-with-taints"):
                head, _, effect = item.rpartition(":")
                key, _, value = head.partition("=")
                taints.append(Taint(key=key, value=value or "", effect=effect))
            config = kubelet.get("config") or {}
            if isinstance(config.get("maxPods"), int):
                max_pods = config["maxPods"]
    return BootSpec(labels, tuple(taints), KubeletConfig(max_pods=max_pods), local_storage)


@dataclass
class PodRecord:
    """One pod's life in simulated time."""

    key: str
    workload: str
    created: datetime
    bound: datetime | None = None
    node: str | None = None
    gone: datetime | None = None
    lost: bool = False

    def pending_seconds(self, end: datetime) -> float:
        """Creation to binding (or to its deletion or ``end`` if never bound)."""
        until = self.bound or self.gone or end
        return max(0.0, (until - self.created).total_seconds())


@dataclass
class SimulatedCluster:
    """kubelet, node lifecycle, ReplicaSet controller and kube-scheduler on ``emulator``."""

    emulator: KubeHarness
    catalog: Catalog
    region: str
    now: Callable[[], datetime]
    note: Callable[[str, str, str], None] = lambda source, event, action: None
    workloads: dict[str, Workload] = field(default_factory=dict)
    replicas: dict[str, int] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)
    #: instance id -> node name registered by the kubelet
    registered: dict[str, str] = field(default_factory=dict)
    node_ready_at: dict[str, datetime] = field(default_factory=dict)
    #: how long a kubelet's Node is registered but not Ready, within its boot (none here)
    not_ready_seconds: float = 0.0
    _serial: int = 0

    # ------------------------------------------------------------ workloads

    def add_workload(self, workload: Workload) -> None:
        """Declare a workload (its pods are created by :meth:`reconcile`)."""
        self.workloads[workload.name] = workload
        self.replicas[workload.name] = workload.replicas

    def scale(self, name: str, replicas: int) -> None:
        """Set a workload's replica count."""
        self.replicas[name] = replicas

    # ------------------------------------------------------------ kubelet

    def register_node(self, instance_id: str, name: str, instance_type: str, zone: str, boot: BootSpec, *, ready: bool = True) -> dict[str, Any]:
        """The kubelet of ``instance_id`` registers its Node, Ready (this kubelet has no
        not-ready phase: :attr:`not_ready_seconds` is 0)."""
        if not ready:
            raise ValueError("the emulated kubelet registers its Node Ready")
        node = self.emulator.apply(self.node_object(instance_id, name, instance_type, zone, boot))
        self.registered[instance_id] = name
        self.node_ready_at[name] = self.now()
        return node

    def mark_ready(self, name: str) -> None:
        """The kubelet of a Node registered not ready reports Ready."""
        self.node_ready_at[name] = self.now()

    def node_object(self, instance_id: str, name: str, instance_type: str, zone: str, boot: BootSpec) -> dict[str, Any]:
        """The Node the kubelet registers: labels, taints and providerID, capacity and
        allocatable from the catalog, Ready."""
        info: InstanceType | None = self.catalog.instance_type(instance_type, boot.kubelet, instance_store_policy=boot.instance_store_policy)
        capacity = info.capacity if info is not None else EMPTY
        allocatable = info.allocatable if info is not None else EMPTY
        arch = "amd64"
        if info is not None and wk.ARCH in info.requirements:
            arch = info.requirements[wk.ARCH].single_value() or arch
        labels = {
            wk.HOSTNAME: name,
            wk.ARCH: arch,
            wk.OS: "linux",
            wk.INSTANCE_TYPE: instance_type,
            wk.ZONE: zone,
            wk.REGION: self.region,
            "beta.kubernetes.io/instance-type": instance_type,
            "beta.kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": "linux",
            "failure-domain.beta.kubernetes.io/zone": zone,
            "failure-domain.beta.kubernetes.io/region": self.region,
            **boot.labels,
        }
        spec: dict[str, Any] = {"providerID": f"aws:///{zone}/{instance_id}"}
        if boot.taints:
            spec["taints"] = [t.to_dict() for t in boot.taints]
        now = stamp(self.now())
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {
                "capacity": quantities(capacity),
                "allocatable": quantities(allocatable),
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": now, "lastHeartbeatTime": now}],
                "nodeInfo": {"architecture": arch, "operatingSystem": "linux", "kubeletVersion": "v1.31.0-eks"},
            },
        }

    def set_node_condition(self, name: str, condition: str, status: str, reason: str, message: str = "") -> None:
        """A kubelet or the EKS node monitoring agent reports ``condition`` in ``status`` on
        Node ``name`` (the transition time now when the status changes); the other conditions stay."""
        node = self.emulator.get("Node", name)
        if node is None:
            return
        conditions = [dict(c) for c in (node.get("status") or {}).get("conditions") or []]
        now = stamp(self.now())
        previous = next((c for c in conditions if c.get("type") == condition), None)
        since = previous.get("lastTransitionTime") if previous is not None and previous.get("status") == status else now
        updated = {"type": condition, "status": status, "reason": reason, "message": message, "lastTransitionTime": since, "lastHeartbeatTime": now}
        self._write_node_conditions(name, [*(c for c in conditions if c.get("type") != condition), updated])

    def _write_node_conditions(self, name: str, conditions: list[dict[str, Any]]) -> None:
        self.emulator.patch("Node", name, {"status": {"conditions": conditions}})

    def instance_gone(self, instance_id: str) -> list[str]:
        """The instance died: the node lifecycle controller deletes its Node and pod GC the
        pods still bound to it (returned: they were lost)."""
        name = self.registered.get(instance_id)
        if name is None or self.emulator.get("Node", name) is None:
            return []
        lost = []
        for pod in self.emulator.list("Pod", field_selector=f"spec.nodeName={name}"):
            meta = pod["metadata"]
            if not _goes_with_its_node(pod):
                lost.append(f"{meta['namespace']}/{meta['name']}")
                record = self.pods.get(f"{meta['namespace']}/{meta['name']}")
                if record is not None:
                    record.lost = True
            self.emulator.delete("Pod", meta["name"], meta["namespace"], grace_period_seconds=0)
        self.emulator.delete("Node", name)
        return lost

    # ------------------------------------------------------------ the control loop

    def reconcile(self) -> None:
        """One pass of the controllers: pod GC for vanished nodes, ReplicaSets, kubelet pod
        status, the scheduler."""
        pods = self.emulator.list("Pod")
        nodes = {n["metadata"]["name"]: n for n in self.emulator.list("Node")}
        now = self.now()
        live: list[dict[str, Any]] = []
        for pod in pods:
            key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound and bound not in nodes:  # its node was deleted under it
                record = self.pods.get(key)
                if record is not None:
                    record.lost = True
                self.note("pod-gc", f"pod {key} orphaned", f"node {bound} is gone: deleted")
                self.emulator.delete("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"], grace_period_seconds=0)
                continue
            live.append(pod)
        seen = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in live}
        for key, record in self.pods.items():
            if record.gone is None and key not in seen:
                record.gone = now
        live = self._replicasets(live)
        self._budget_expectations()
        self._kubelet_status(live)
        self._schedule(live, nodes)

    def _replicasets(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_workload: dict[str, list[dict[str, Any]]] = {name: [] for name in self.workloads}
        others = []
        for pod in pods:
            name = (pod["metadata"].get("labels") or {}).get(WORKLOAD_LABEL)
            if name in by_workload and not pod["metadata"].get("deletionTimestamp"):
                by_workload[name].append(pod)
            else:
                others.append(pod)
        result = list(others)
        for name, current in by_workload.items():
            wanted = self.replicas.get(name, 0)
            workload = self.workloads[name]
            if len(current) > wanted:
                # pending pods first, then the newest (the ReplicaSet controller's ranking, roughly)
                current.sort(key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), p["metadata"].get("creationTimestamp", "")), reverse=False)
                doomed = current[: len(current) - wanted]
                for pod in doomed:
                    self.emulator.delete("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"], grace_period_seconds=workload.termination_grace_seconds)
                    record = self.pods.get(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
                    if record is not None:
                        record.gone = self.now()
                self.note("replicaset", f"{name} scaled to {wanted}", f"deleted {len(doomed)} pod{'s' if len(doomed) != 1 else ''}")
                current = current[len(doomed) :]
            elif len(current) < wanted:
                created = [self._create_pod(workload) for _ in range(wanted - len(current))]
                self.note("replicaset", f"{name}: {len(current)}/{wanted} pods", f"created {len(created)} pod{'s' if len(created) != 1 else ''}")
                current.extend(created)
            result.extend(current)
        return result

    def _budget_expectations(self) -> None:
        """What the disruption controller reads from the pods' owners: a budget expects the
        replicas of every workload whose pods it selects (pods of no workload count as found)."""
        for pdb in self.emulator.list("PodDisruptionBudget"):
            meta = pdb["metadata"]
            selector = (pdb.get("spec") or {}).get("selector")
            expected = sum(
                self.replicas.get(name, 0)
                for name, workload in self.workloads.items()
                if workload.namespace == meta.get("namespace")
                and selector_object_matches(selector, {"app": workload.name, **workload.labels, WORKLOAD_LABEL: workload.name})
            )
            if (meta.get("annotations") or {}).get(EXPECTED_PODS_ANNOTATION) != str(expected):
                self.emulator.patch(
                    "PodDisruptionBudget", meta["name"], {"metadata": {"annotations": {EXPECTED_PODS_ANNOTATION: str(expected)}}}, meta.get("namespace")
                )

    def _create_pod(self, workload: Workload) -> dict[str, Any]:
        self._serial += 1
        name = f"{workload.name}-{uuid.uuid4().hex[:5]}"
        labels = {"app": workload.name, **workload.labels, WORKLOAD_LABEL: workload.name}
        pod = self.emulator.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": workload.namespace,
                    "uid": str(uuid.uuid4()),
                    "labels": labels,
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{workload.name}-rs", "uid": f"rs-{workload.name}", "controller": True}
                    ],
                },
                "spec": workload.pod_spec(),
                "status": {"phase": "Pending"},
            }
        )
        key = f"{workload.namespace}/{name}"
        self.pods[key] = PodRecord(key=key, workload=workload.name, created=self.now())
        return pod

    def _kubelet_status(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            status = pod.get("status") or {}
            if node and status.get("phase") == "Pending" and node in self.node_ready_at:
                conditions = [c for c in status.get("conditions") or [] if c.get("type") not in ("Ready", "ContainersReady", "Initialized")]
                now = stamp(self.now())
                conditions += [{"type": t, "status": "True", "lastTransitionTime": now} for t in ("Initialized", "ContainersReady", "Ready")]
                self.emulator.patch(
                    "Pod", pod["metadata"]["name"], {"status": {"phase": "Running", "conditions": conditions, "startTime": now}}, pod["metadata"]["namespace"]
                )

    def _schedule(self, pods: list[dict[str, Any]], nodes: Mapping[str, dict[str, Any]]) -> None:
        parsed_nodes: dict[str, Node] = {}
        for name, raw in nodes.items():
            try:
                node = parse_node(raw)
            except SnapshotError:
                continue
            if node.ready and not node.unschedulable and not node.deleting:
                parsed_nodes[name] = node
        used: dict[str, Resources] = dict.fromkeys(parsed_nodes, EMPTY)
        pending: list[tuple[Pod, dict[str, Any]]] = []
        for raw in pods:
            try:
                pod = parse_pod(raw)
            except SnapshotError:
                continue
            if pod.node_name:
                if pod.node_name in used and not pod.is_terminal:
                    used[pod.node_name] = used[pod.node_name] + pod.requests
            elif pod.is_pending:
                pending.append((pod, raw))
        pending.sort(key=lambda item: (-item[0].priority, item[1]["metadata"].get("creationTimestamp", ""), item[0].key))
        # kube-scheduler keeps a node's room for the pods nominated to it (equal priority here)
        # and tries a pod's nominated node first
        held: dict[str, Resources] = {}
        for pod, _ in pending:
            if pod.nominated_node in parsed_nodes:
                held[pod.nominated_node] = held.get(pod.nominated_node, EMPTY) + pod.requests
        unschedulable: dict[str, str] = {}
        bound: list[tuple[str, str]] = []
        for pod, raw_pod in pending:
            best: tuple[float, str] | None = None
            reasons: dict[str, int] = {}
            for name, node in parsed_nodes.items():
                others = held.get(name, EMPTY) - (pod.requests if pod.nominated_node == name else EMPTY)
                reason = self._misfit(pod, raw_pod, node, nodes[name], used[name] + others)
                if reason:
                    reasons[reason] = reasons.get(reason, 0) + 1
                    continue
                after = used[name] + pod.requests
                cpu = node.allocatable.get("cpu", 0) or 1
                memory = node.allocatable.get("memory", 0) or 1
                score = (after.get("cpu", 0) / cpu + after.get("memory", 0) / memory) / 2
                if name == pod.nominated_node:
                    score = -1.0
                if best is None or (score, name) < best:
                    best = (score, name)
            if best is None:
                total = len(nodes)
                detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
                unschedulable[pod.key] = f"0/{total} nodes are available" + (f": {detail}." if detail else ".")
                continue
            name = best[1]
            used[name] = used[name] + pod.requests
            if pod.nominated_node in held:
                held[pod.nominated_node] = held[pod.nominated_node] - pod.requests
            assert isinstance(self.emulator, KubeEmulator), "the simulated scheduler binds on the emulator"
            self.emulator._call(
                functools.partial(
                    self.emulator.handler.bind,  # noqa: SLF001
                    pod.namespace,
                    pod.name,
                    {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod.name}, "target": {"apiVersion": "v1", "kind": "Node", "name": name}},
                )
            )
            record = self.pods.get(pod.key)
            if record is not None and record.bound is None:
                record.bound, record.node = self.now(), name
            bound.append((pod.key, name))
        if bound:
            targets = sorted({node for _, node in bound})
            self.note("scheduler", f"{len(bound)} pod{'s' if len(bound) != 1 else ''} bound", "to " + ", ".join(targets))
        newly = 0
        now = stamp(self.now())
        for pod, raw in pending:
            message = unschedulable.get(pod.key)
            if message is None:
                continue
            conditions = [c for c in (raw.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
            if conditions and conditions[0].get("reason") == "Unschedulable" and conditions[0].get("message") == message:
                continue
            since = conditions[0].get("lastTransitionTime") if conditions and conditions[0].get("reason") == "Unschedulable" else now
            if not (conditions and conditions[0].get("reason") == "Unschedulable"):
                newly += 1
            self.emulator.patch(
                "Pod",
                pod.name,
                {
                    "status": {
                        "phase": "Pending",
                        "conditions": [
                            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": since or now},
                        ],
                    }
                },
                pod.namespace,
            )
        if newly:
            self.note("scheduler", f"{newly} pod{'s' if newly != 1 else ''} unschedulable", "marked PodScheduled=False (Unschedulable)")

    @staticmethod
    def _misfit(pod: Pod, raw_pod: Mapping[str, Any], node: Node, raw_node: Mapping[str, Any], used: Resources) -> str | None:
        """kube-scheduler's filters. Selectors, affinity and taints are matched on the raw
        objects (:mod:`testworld.node_match`): the parsed ones have alias keys
        translated, which kube-scheduler never does."""
        reason = node_affinity_misfit(raw_pod, raw_node)
        if reason:
            return reason
        taint = untolerated_taint(raw_pod, raw_node)
        if taint is not None:
            key, value = taint.get("key"), taint.get("value")
            return f"had untolerated taint {{{key}: {value}}}" if value else f"had untolerated taint {{{key}}}"
        free = node.allocatable - used
        short = pod.requests.exceeding(free)
        if short:
            return f"Insufficient {short[0]}"
        return None

    # ------------------------------------------------------------ reading

    def pending_pods(self) -> int:
        """Pods of the workloads not bound to a node."""
        return sum(1 for p in self.pods.values() if p.gone is None and p.bound is None)

    def pods_on(self, node: str) -> list[str]:
        """Pods bound to ``node`` but DaemonSet and static ones."""
        out = []
        for pod in self.emulator.list("Pod", field_selector=f"spec.nodeName={node}"):
            if not _goes_with_its_node(pod):
                out.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        return sorted(out)


def _goes_with_its_node(pod: Mapping[str, Any]) -> bool:
    """A DaemonSet pod or a static (mirror) pod: it lives and dies with its node, never lost."""
    meta = pod.get("metadata") or {}
    owner = (meta.get("ownerReferences") or [{}])[0].get("kind")
    return owner == "DaemonSet" or wk.MIRROR_POD_ANNOTATION in (meta.get("annotations") or {})
