"""The domain model: frozen dataclasses for pods, nodes, NodePools, NodeClasses, instance
types and plans. Parsing from Kubernetes objects lives in :mod:`joiner.domain.snapshot`.

Collections inside frozen dataclasses are tuples or read-only mappings; label and
annotation mappings are plain dicts by convention and must not be mutated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from joiner.domain import labels as wk
from joiner.domain.requirements import Requirements
from joiner.domain.resources import EMPTY, Resources

__all__ = [
    "instance_id_of",
    "POD_DELETION_COST",
    "DEFAULT_SCHEDULER",
    "Taint",
    "Toleration",
    "LabelSelector",
    "PodAffinityTerm",
    "TopologySpreadConstraint",
    "PreferredNodeTerm",
    "HostPort",
    "Pod",
    "Node",
    "NodeClaim",
    "NodeCondition",
    "DaemonSet",
    "PodDisruptionBudget",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
    "Budget",
    "Disruption",
    "NodePool",
    "SelectorTerm",
    "KubeletConfig",
    "NodeClass",
    "Offering",
    "InstanceType",
    "NodeClaimPlan",
    "ExistingNodePlan",
    "UnschedulablePod",
    "Plan",
    "InFlightClaim",
    "OfferingKey",
    "CRITICAL_PRIORITY_CLASSES",
    "do_not_disrupt_grace",
    "INSTANCE_STORE_RAID0",
    "INSTANCE_STORE_POLICIES",
]

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
#: The ReplicaSet controller's per-pod deletion preference (an int32 annotation).
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: ``spec.schedulerName`` of a pod kube-scheduler schedules (the API server's default).
DEFAULT_SCHEDULER = "default-scheduler"
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
#: ``instanceStorePolicy: RAID0``: nodeadm stripes the instance-store NVMe disks into one array
#: that holds the kubelet's and containerd's data, so it is the node's ephemeral storage.
INSTANCE_STORE_RAID0 = "RAID0"
INSTANCE_STORE_POLICIES = (INSTANCE_STORE_RAID0,)


def instance_id_of(provider_id: str) -> str | None:
    """``i-...`` from a providerID ``aws:///<zone>/<instance-id>``; None for any other."""
    if not provider_id.startswith("aws://"):
        return None
    tail = provider_id.rsplit("/", 1)[-1]
    return tail if tail.startswith("i-") else None


@dataclass(frozen=True, slots=True, order=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def to_dict(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes toleration matching: empty key with Exists tolerates everything."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


def tolerates_all(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...], *, ignore_prefer: bool = True) -> Taint | None:
    """The first taint (NoSchedule/NoExecute; PreferNoSchedule unless ignored) not tolerated, or None."""
    for taint in taints:
        if ignore_prefer and taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector. ``match_expressions`` reuse the requirements algebra
    (In, NotIn, Exists, DoesNotExist) without key normalisation concerns for pod labels."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.match_expressions:
            present = key in labels
            if operator == "In":
                if not present or labels[key] not in values:
                    return False
            elif operator == "NotIn":
                if present and labels[key] in values:
                    return False
            elif operator == "Exists":
                if not present:
                    return False
            elif operator == "DoesNotExist":
                if present:
                    return False
            else:
                return False
        return True

    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A pod (anti-)affinity term. ``weight`` is None for required terms.

    ``namespaces`` empty and ``namespace_selector`` None mean the pod's own namespace; an
    empty (non-None) namespace selector means all namespaces.
    """

    topology_key: str
    label_selector: LabelSelector | None
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None
    weight: int | None = None
    match_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    match_label_keys: tuple[str, ...] = ()
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


@dataclass(frozen=True, slots=True)
class PreferredNodeTerm:
    weight: int
    requirements: Requirements


@dataclass(frozen=True, slots=True, order=True)
class HostPort:
    port: int
    protocol: str = "TCP"
    host_ip: str = "0.0.0.0"

    def conflicts(self, other: HostPort) -> bool:
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wildcard = ("0.0.0.0", "::", "")
        return self.host_ip in wildcard or other.host_ip in wildcard or self.host_ip == other.host_ip


def do_not_disrupt_grace(value: str) -> timedelta | Literal[True] | None:
    """What a do-not-disrupt annotation value means, as Karpenter reads it: ``True`` protects
    for good (exactly ``"true"``); a timedelta protects for that long (a positive Go duration,
    rounded up to the microsecond); ``None`` means nothing (``"false"``, ``"0s"``, ``"Never"``,
    negative durations, typos: Karpenter treats them as if the annotation were absent)."""
    from joiner.domain.durations import DurationError, go_duration_nanoseconds

    if value == "true":
        return True
    try:
        nanoseconds = go_duration_nanoseconds(value)
    except DurationError:
        return None
    if nanoseconds <= 0:
        return None
    return timedelta(microseconds=-(-nanoseconds // 1000))


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as the scheduler sees it. ``requests`` already holds the effective request:
    max(containers + sidecars, largest init step) + RuntimeClass overhead + one ``pods``."""

    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    requests: Resources = EMPTY
    node_selector: Requirements = Requirements()
    required_node_affinity: tuple[Requirements, ...] = ()
    preferred_node_affinity: tuple[PreferredNodeTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    priority: int = 0
    priority_class_name: str = ""
    node_name: str | None = None
    #: ``status.nominatedNodeName`` of an unbound pod: kube-scheduler tries that node first and
    #: keeps the pod's requests free on it from pods of equal or lower priority.
    nominated_node: str | None = None
    owner_kind: str | None = None
    owner_name: str | None = None
    phase: str = "Pending"
    created: datetime | None = None
    deleting: bool = False
    termination_grace_seconds: int = 30
    unschedulable_since: datetime | None = None
    scheduling_gated: bool = False
    #: ``spec.schedulerName``: the scheduler that binds it (a nomination means something only
    #: to kube-scheduler, :data:`DEFAULT_SCHEDULER`).
    scheduler_name: str = DEFAULT_SCHEDULER
    #: The Ready condition is True (a PodDisruptionBudget's healthy pod).
    ready: bool = True
    #: Its persistent volumes: (claim name, storage class of an ephemeral volume's claim
    #: template or None for a ``persistentVolumeClaim`` volume), in spec order.
    volume_claims: tuple[tuple[str, str | None], ...] = ()
    #: Volumes it attaches, per CSI driver: ((driver, count), ...), set by
    #: :func:`joiner.domain.volumes.apply_volumes` for the scheduler's attach limits.
    volume_attachments: tuple[tuple[str, int], ...] = ()
    #: Node requirements its volumes add (set by :func:`joiner.domain.volumes.apply_volumes`):
    #: kept apart from its node selector and affinity, so a topology spread constraint counts
    #: the domains the pod's own affinity allows, as kube-scheduler does.
    volume_requirements: Requirements = Requirements()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_daemonset_pod(self) -> bool:
        return self.owner_kind == "DaemonSet"

    @property
    def by_default_scheduler(self) -> bool:
        """kube-scheduler binds it (``spec.schedulerName`` is :data:`DEFAULT_SCHEDULER`)."""
        return self.scheduler_name == DEFAULT_SCHEDULER

    @property
    def is_mirror(self) -> bool:
        return wk.MIRROR_POD_ANNOTATION in self.annotations

    @property
    def is_terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def is_critical(self) -> bool:
        return self.priority_class_name in CRITICAL_PRIORITY_CLASSES

    @property
    def do_not_disrupt(self) -> bool:
        """The pod carries a do-not-disrupt annotation that counts (``"true"`` or a positive Go
        duration: see :meth:`protected_at` for whether it still protects)."""
        return any(do_not_disrupt_grace(value) is not None for value in self._do_not_disrupt_values())

    def protected_at(self, now: datetime) -> bool:
        """Whether the do-not-disrupt annotation protects the pod at ``now``, Karpenter's rule:
        ``"true"`` always; a positive Go duration (``"30m"``, Karpenter's grace period) for that
        long after the pod was created (always while the creation time is unknown); any other
        value (``"false"``, ``"Never"``, a typo) is as if the annotation were absent."""
        for value in self._do_not_disrupt_values():
            grace = do_not_disrupt_grace(value)
            if grace is True:
                return True
            if isinstance(grace, timedelta) and (self.created is None or now < self.created + grace):
                return True
        return False

    def _do_not_disrupt_values(self) -> tuple[str, ...]:
        values = (self.annotations.get(wk.DO_NOT_DISRUPT), self.annotations.get(wk.KARPENTER_DO_NOT_DISRUPT))
        return tuple(v for v in values if v is not None)

    @property
    def deletion_cost(self) -> int:
        try:
            return int(self.annotations.get(POD_DELETION_COST, "0"))
        except ValueError:
            return 0

    @property
    def is_pending(self) -> bool:
        """Needs a node: unbound, not terminal, not DaemonSet-owned, not being deleted, not gated."""
        return self.node_name is None and not self.is_terminal and not self.is_daemonset_pod and not self.deleting and not self.scheduling_gated


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One ``status.conditions`` entry of a Node: its type, status (``True``, ``False``,
    ``Unknown``) and when the status last changed (None: not given)."""

    type: str
    status: str
    last_transition: datetime | None = None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    allocatable: Resources = EMPTY
    capacity: Resources = EMPTY
    provider_id: str = ""
    unschedulable: bool = False
    ready: bool = False
    created: datetime | None = None
    deleting: bool = False
    conditions: tuple[NodeCondition, ...] = ()
    #: ``metadata.finalizers`` and ``metadata.deletionTimestamp`` (delete to drain reads them)
    finalizers: tuple[str, ...] = ()
    deletion_time: datetime | None = None

    def condition(self, kind: str) -> NodeCondition | None:
        """The condition of type ``kind``, None when the Node does not report it."""
        return next((c for c in self.conditions if c.type == kind), None)

    @property
    def instance_id(self) -> str | None:
        """``i-...`` from ``aws:///<zone>/<instance-id>``."""
        return instance_id_of(self.provider_id)

    @property
    def node_pool(self) -> str | None:
        return self.labels.get(wk.NODEPOOL)

    @property
    def disrupted(self) -> bool:
        """It carries Joiner's ``joiner.dev/disrupted`` taint: its drain has begun."""
        return any(t.key == wk.DISRUPTED_TAINT_KEY for t in self.taints)

    @property
    def accepts_pods(self) -> bool:
        """kube-scheduler may still bind pods to it once it is ready: not being deleted,
        cordoned or disrupted. Only such a Node's nominations hold pods back from planning."""
        return not self.deleting and not self.unschedulable and not self.disrupted


@dataclass(frozen=True, slots=True)
class NodeClaim:
    """A NodeClaim as a cluster snapshot holds it: Joiner's ``joiner.dev/v1`` mirror of one
    of its claims, or Karpenter's ``karpenter.sh/v1`` NodeClaim (``api_version`` says which).
    ``instance_type``, ``zone`` and ``capacity_type`` are what the object states (the mirror's
    status; Karpenter's labels, else its single-valued requirements), None when it does not."""

    name: str
    api_version: str
    node_pool: str
    node_name: str | None = None
    provider_id: str = ""
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    node_class: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    created: datetime | None = None
    finalizers: tuple[str, ...] = ()
    deletion_time: datetime | None = None
    #: Karpenter's ``spec.terminationGracePeriod`` (the mirror has none: Joiner reads its NodePool's)
    termination_grace_period: timedelta | None = None

    @property
    def deleting(self) -> bool:
        return self.deletion_time is not None

    @property
    def instance_id(self) -> str | None:
        """``i-...`` from ``aws:///<zone>/<instance-id>``."""
        return instance_id_of(self.provider_id)


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    """What scheduling needs of a PVC: its class, the volume it is bound to (if any), and
    whether kube-scheduler would take it as bound (``bind_completed``: the
    ``pv.kubernetes.io/bind-completed`` annotation), lost or being deleted."""

    namespace: str
    name: str
    storage_class: str | None = None
    volume_name: str | None = None
    bind_completed: bool = True
    lost: bool = False
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    """A PV's node affinity (its required terms, ORed) and its CSI driver."""

    name: str
    node_affinity: tuple[Requirements, ...] = ()
    driver: str | None = None
    #: A ``local`` or ``hostPath`` volume: its hostname term does not follow a rescheduled pod.
    node_local: bool = False
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class StorageClass:
    """``volume_binding_mode`` is ``Immediate`` or ``WaitForFirstConsumer``;
    ``allowed_topologies`` its terms (ORed); ``default`` marks the cluster's default class."""

    name: str
    provisioner: str = ""
    volume_binding_mode: str = "Immediate"
    allowed_topologies: tuple[Requirements, ...] = ()
    default: bool = False


@dataclass(frozen=True, slots=True)
class CSINode:
    """Per CSI driver, how many volumes the node may attach (``allocatable.count``; drivers
    that state no limit are absent)."""

    name: str
    attach_limits: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DaemonSet:
    namespace: str
    name: str
    pod: Pod  # the pod template as a Pod (requests, selectors, tolerations)


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: int | None = None  # status.disruptionsAllowed when known
    min_available: str | None = None
    max_unavailable: str | None = None
    #: ``AlwaysAllow``: a pod that is not Ready may be evicted whatever the budget allows.
    unhealthy_pod_eviction_policy: str = "IfHealthyBudget"

    def selects(self, pod: Pod) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class Budget:
    """A disruption budget: ``nodes`` is ``"N"`` or ``"P%"``; ``schedule``/``duration`` bound
    when it is active; ``reasons`` empty means all reasons."""

    nodes: str = "10%"
    schedule: str | None = None
    duration: timedelta | None = None
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Disruption:
    consolidation_policy: str = "WhenEmptyOrUnderutilized"
    consolidate_after: timedelta | None = timedelta(0)  # None = Never
    budgets: tuple[Budget, ...] = (Budget(),)
    min_savings_per_hour: float = 0.0
    min_savings_percent: float = 10.0
    #: Node auto repair (``spec.disruption.repair``: ``Enabled``, the default, or ``Disabled``).
    repair: bool = True


@dataclass(frozen=True, slots=True)
class NodePool:
    name: str
    requirements: Requirements = Requirements()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    node_class: str = "default"
    limits: Resources | None = None  # None: unlimited; a resource absent from limits is unlimited; an explicit 0 is kept (Resources.keeping_zeros)
    weight: int = 0
    expire_after: timedelta | None = timedelta(days=30)  # None = Never
    termination_grace_period: timedelta | None = None
    disruption: Disruption = Disruption()
    rebalance: str = "replace"  # "replace" or "ignore"
    #: The NodePool has a deletionTimestamp: nothing new launches from it (Karpenter's rule).
    deleting: bool = False
    #: ``spec.replicas``: a static NodePool keeping exactly this many nodes whatever the pods
    #: need (Karpenter's StaticCapacity); None: nodes follow the pending pods.
    replicas: int | None = None

    @property
    def static(self) -> bool:
        return self.replicas is not None

    def template_requirements(self) -> Requirements:
        """Requirements plus template labels and the nodepool label, as a launch would carry."""
        extra = dict(self.labels)
        extra[wk.NODEPOOL] = self.name
        return self.requirements.intersect(Requirements.from_labels(extra))


#: Node annotation (and claim field) holding :func:`nodepool_hash` of the NodePool at launch.
NODEPOOL_HASH_KEY = "joiner.dev/nodepool-hash"


def nodepool_hash(pool: NodePool) -> str:
    """Hash of the NodePool template fields a node carries from launch (labels,
    annotations, taints, startup taints, NodeClass). Requirements are checked on their own
    (a widened requirement must not drift every node)."""
    material = {
        "labels": sorted(pool.labels.items()),
        "annotations": sorted(pool.annotations.items()),
        "taints": sorted(t.to_dict().items() for t in pool.taints),
        "startupTaints": sorted(t.to_dict().items() for t in pool.startup_taints),
        "nodeClass": pool.node_class,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=list).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One subnet/security-group/AMI selector term; terms OR, fields within a term AND.

    ``alias`` (``al2023@latest``) and ``owner`` are used by AMI terms only."""

    tags: tuple[tuple[str, str], ...] = ()
    id: str | None = None
    name: str | None = None
    alias: str | None = None
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class KubeletConfig:
    max_pods: int | None = None
    pods_per_core: int | None = None
    system_reserved: Resources = EMPTY
    kube_reserved: Resources | None = None  # None: EKS formulas
    eviction_hard: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeClass:
    name: str
    subnet_selector_terms: tuple[SelectorTerm, ...] = ()
    security_group_selector_terms: tuple[SelectorTerm, ...] = ()
    ami_family: str = "AL2023"
    ami_selector_terms: tuple[SelectorTerm, ...] = ()  # empty: EKS-optimised AL2023 from SSM (the parser writes alias al2023@latest)
    role: str | None = None
    instance_profile: str | None = None
    kubelet: KubeletConfig = KubeletConfig()
    block_device_mappings: tuple[Mapping[str, object], ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    metadata_options: Mapping[str, object] = field(default_factory=dict)
    user_data: str | None = None
    #: On-demand capacity reservations nodes may launch into (``id``, or ``tags`` with an
    #: optional ``owner`` account): Karpenter's ``capacityReservationSelectorTerms``.
    capacity_reservation_terms: tuple[SelectorTerm, ...] = ()
    #: ``RAID0``: the instance-store NVMe disks, striped by nodeadm, hold the node's ephemeral
    #: storage (Karpenter's ``instanceStorePolicy``); None: the root volume does.
    instance_store_policy: str | None = None


#: Node annotation (and claim field) holding :func:`nodeclass_hash` of the NodeClass at launch.
NODECLASS_HASH_KEY = "joiner.dev/nodeclass-hash"


def nodeclass_hash(node_class: NodeClass) -> str:
    """Hash of the NodeClass fields a node carries from launch that drift cannot read off the
    instance itself (AMI, subnets and security groups are compared with the instance): role or
    instance profile, kubelet settings, block devices, instance-store policy, metadata options,
    tags and user data."""
    kubelet = node_class.kubelet
    material = {
        "role": node_class.role,
        "instanceProfile": node_class.instance_profile,
        "kubelet": {
            "maxPods": kubelet.max_pods,
            "podsPerCore": kubelet.pods_per_core,
            "systemReserved": sorted(kubelet.system_reserved.items()),
            "kubeReserved": sorted(kubelet.kube_reserved.items()) if kubelet.kube_reserved is not None else None,
            "evictionHard": sorted(kubelet.eviction_hard.items()),
        },
        "blockDeviceMappings": [dict(mapping) for mapping in node_class.block_device_mappings],
        "metadataOptions": dict(node_class.metadata_options),
        "tags": sorted(node_class.tags.items()),
        "userData": node_class.user_data,
    }
    if node_class.instance_store_policy is not None:  # absent when unset: hashes of older nodes stay valid
        material["instanceStorePolicy"] = node_class.instance_store_policy
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True, order=True)
class OfferingKey:
    """An offering (instance type, zone, capacity type). With ``reservation_id`` (capacity type
    ``reserved``) it stands for that one capacity reservation: marked unavailable, the
    reservation counts as full while other reservations of the same type and zone are still
    offered."""

    instance_type: str
    zone: str
    capacity_type: str
    reservation_id: str = ""


@dataclass(frozen=True, slots=True, order=True)
class Offering:
    zone: str
    capacity_type: str
    price: float
    available: bool = True


@dataclass(frozen=True, slots=True)
class InstanceType:
    """An instance type as a NodeClass's kubelet settings make it: ``allocatable`` is
    ``capacity - overhead`` (kube/system reserved and eviction threshold)."""

    name: str
    capacity: Resources
    overhead: Resources
    requirements: Requirements  # arch, os, instance-type, family, category, ... as single values
    offerings: tuple[Offering, ...]

    @property
    def allocatable(self) -> Resources:
        return self.capacity - self.overhead

    def cheapest_offering(self, requirements: Requirements | None = None, unavailable: frozenset[OfferingKey] = frozenset()) -> Offering | None:
        """Cheapest available offering whose zone and capacity type the requirements allow.

        Ties break on (price, capacity type, zone) so the choice is deterministic.
        """
        best: Offering | None = None
        for offering in self.offerings:
            if not offering.available:
                continue
            if unavailable and OfferingKey(self.name, offering.zone, offering.capacity_type) in unavailable:
                continue
            if requirements is not None:
                if wk.ZONE in requirements and not requirements[wk.ZONE].has(offering.zone):
                    continue
                if wk.CAPACITY_TYPE in requirements and not requirements[wk.CAPACITY_TYPE].has(offering.capacity_type):
                    continue
            if best is None or (offering.price, offering.capacity_type, offering.zone) < (best.price, best.capacity_type, best.zone):
                best = offering
        return best


@dataclass(frozen=True, slots=True)
class InFlightClaim:
    """Capacity launched or being launched but not yet a Node: counts against limits and
    can take pending pods in the next plan."""

    name: str
    node_pool: str
    instance_type: str
    zone: str
    capacity_type: str
    allocatable: Resources
    capacity: Resources
    requirements: Requirements
    pods: tuple[str, ...] = ()

    @classmethod
    def launched_as(cls, name: str, pool: NodePool, instance_type: InstanceType, zone: str, capacity_type: str, pods: tuple[str, ...]) -> InFlightClaim:
        """The claim ``name`` launched as ``instance_type`` in ``zone``: what its Node will offer,
        labelled as the pool's template, the zone, the capacity type and the claim."""
        requirements = instance_type.requirements.intersect(pool.template_requirements()).intersect(
            Requirements.from_labels({wk.ZONE: zone, wk.CAPACITY_TYPE: capacity_type, wk.NODECLAIM: name})
        )
        return cls(
            name=name,
            node_pool=pool.name,
            instance_type=instance_type.name,
            zone=zone,
            capacity_type=capacity_type,
            allocatable=instance_type.allocatable,
            capacity=instance_type.capacity,
            requirements=requirements,
            pods=pods,
        )


@dataclass(frozen=True, slots=True)
class NodeClaimPlan:
    """One node to launch: the pods it carries and every instance type that fits them,
    ordered by cheapest available offering."""

    node_pool: str
    instance_types: tuple[str, ...]
    zones: tuple[str, ...]
    capacity_types: tuple[str, ...]
    pods: tuple[str, ...]
    price: float
    requirements: Requirements
    requests: Resources  # pods' requests plus DaemonSet overhead

    def to_dict(self) -> dict[str, object]:
        return {
            "nodePool": self.node_pool,
            "instanceTypes": list(self.instance_types),
            "zones": list(self.zones),
            "capacityTypes": list(self.capacity_types),
            "pods": list(self.pods),
            "price": round(self.price, 6),
        }


@dataclass(frozen=True, slots=True)
class ExistingNodePlan:
    name: str
    pods: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "pods": list(self.pods)}


@dataclass(frozen=True, slots=True)
class UnschedulablePod:
    pod: str
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"pod": self.pod, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Plan:
    node_claims: tuple[NodeClaimPlan, ...]
    existing_nodes: tuple[ExistingNodePlan, ...]
    unschedulable: tuple[UnschedulablePod, ...]

    @property
    def cost_per_hour(self) -> float:
        return sum(claim.price for claim in self.node_claims)

    def to_dict(self) -> dict[str, object]:
        return {
            "nodeClaims": [c.to_dict() for c in self.node_claims],
            "existingNodes": [n.to_dict() for n in self.existing_nodes],
            "unschedulable": [u.to_dict() for u in self.unschedulable],
            "costPerHour": round(self.cost_per_hour, 6),
        }
