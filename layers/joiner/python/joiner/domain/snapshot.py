"""Kubernetes objects (raw API JSON or YAML) to the domain model.

Two entry points: :func:`parse_objects` / :func:`load_snapshot_yaml` turn a whole cluster
dump into a :class:`Snapshot`, and the per-kind parsers (:func:`parse_pod`,
:func:`parse_node`, ...) let adapters convert objects they list from the API.

Everything here is strict in the way the API server is: a malformed field raises
:class:`SnapshotError` naming the object (``Pod default/web-1``) and the field path
(``spec.containers[0].resources.requests.cpu``), never a bare ``KeyError`` or
``TypeError``, and nothing is silently dropped. Kinds we do not model (ConfigMaps,
Services...) are skipped, so a ``kubectl get -A -o yaml`` dump can be fed directly.

Karpenter's ``karpenter.sh/v1`` NodePool and ``karpenter.k8s.aws/v1`` EC2NodeClass are
accepted as well: their shape is the one Joiner's CRDs copy, and Karpenter label keys are
mapped to Joiner's through :mod:`joiner.domain.labels`.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from joiner.domain import labels as wk
from joiner.domain import overlays as ov
from joiner.domain import volumes as vol
from joiner.domain.amis import ALIAS_PATTERN, AMI_FAMILY
from joiner.domain.bounded import (
    DEFAULT_LIMITS,
    InputError,
)
from joiner.domain.fields import (
    RESTRICTED_POOL_LABELS,
    Fields,
    SnapshotError,
    checked_object,
    describe,
    metadata_of,
    name_of,
    object_ref,
    selector_of,
)
from joiner.domain.model import (
    DEFAULT_SCHEDULER,
    INSTANCE_STORE_POLICIES,
    Budget,
    CSINode,
    DaemonSet,
    Disruption,
    HostPort,
    KubeletConfig,
    LabelSelector,
    Node,
    NodeClaim,
    NodeClass,
    NodeCondition,
    NodePool,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodAffinityTerm,
    PodDisruptionBudget,
    PreferredNodeTerm,
    SelectorTerm,
    StorageClass,
    Toleration,
    TopologySpreadConstraint,
)
from joiner.domain.overlays import NodeOverlay
from joiner.domain.quantity import QuantityError, parse_milli
from joiner.domain.requirements import Requirement, RequirementError, Requirements
from joiner.domain.resources import EMPTY, PODS, Resources
from joiner.domain.snapshot_yaml import gc_paused, load_snapshot_documents

__all__ = [
    "SnapshotError",
    "Snapshot",
    "parse_objects",
    "load_snapshot_yaml",
    "parse_pod",
    "PodSpecMemo",
    "parse_node",
    "parse_node_claim",
    "NODE_CLAIM_API_VERSIONS",
    "parse_daemonset",
    "parse_pdb",
    "parse_runtime_class",
    "parse_node_pool",
    "parse_node_class",
    "parse_node_overlay",
    "effective_requests",
    "MATCH_NOTHING",
    "DEFAULT_METADATA_OPTIONS",
    "DAEMONSET_DEFAULT_TOLERATIONS",
]

JOINER_V1 = "joiner.dev/v1"
KARPENTER_V1 = "karpenter.sh/v1"
KARPENTER_AWS_V1 = "karpenter.k8s.aws/v1"
JOINER_V1ALPHA1 = "joiner.dev/v1alpha1"
KARPENTER_V1ALPHA1 = "karpenter.sh/v1alpha1"

#: A selector no label set satisfies: how a ``null`` PDB selector (policy/v1: "selects no
#: pods") is represented, since an empty :class:`LabelSelector` selects everything.
MATCH_NOTHING = LabelSelector(match_expressions=(("", "In", ()),))

#: IMDS settings a NodeClass gets unless it says otherwise: IMDSv2 only, and a hop limit
#: of 1 so pods on the pod network cannot reach the node role's credentials.
DEFAULT_METADATA_OPTIONS: Mapping[str, object] = MappingProxyType(
    {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"}
)

#: Tolerations the DaemonSet controller adds to every DaemonSet pod
#: (``AddOrUpdateDaemonPodTolerations``); ``network-unavailable`` only with hostNetwork.
DAEMONSET_DEFAULT_TOLERATIONS: tuple[Toleration, ...] = (
    Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/disk-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/pid-pressure", "Exists", "", "NoSchedule"),
    Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule"),
)
_HOST_NETWORK_TOLERATION = Toleration("node.kubernetes.io/network-unavailable", "Exists", "", "NoSchedule")

_POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_CONSOLIDATION_POLICIES = ("WhenEmptyOrUnderutilized", "WhenEmpty")
_BUDGET_REASONS = ("Drifted", "Empty", "Expired", "Underutilized")
_REBALANCE = ("replace", "ignore")
_REPAIR = ("Enabled", "Disabled")
_BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")
_CRON_MACROS = ("@annually", "@yearly", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_PERCENT = re.compile(r"^[0-9]{1,18}%$")
_POD_LEVEL_RESOURCES = ("cpu", "memory")
#: AMI alias family -> amiFamily (Windows AMIs are not supported).
_AMI_FAMILIES = {"al2": "AL2", "al2023": "AL2023", "bottlerocket": "Bottlerocket"}
_AMI_FAMILY_NAMES = (*sorted(_AMI_FAMILIES.values()), "Custom")
_AMI_ALIAS = re.compile(r"^(al2023|al2|bottlerocket)@(latest|v[0-9][0-9.]*)$")
_RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")
_DEVICE_NAME = re.compile(r"^/dev/[a-z0-9]+$")
_EVICTION_SIGNALS = ("imagefs.available", "imagefs.inodesFree", "memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available")
_NODE_CLASS_REFS = {("joiner.dev", "NodeClass"), ("karpenter.k8s.aws", "EC2NodeClass")}


# ---------------------------------------------------------------- pods


def effective_requests(
    containers: Iterable[Resources],
    init_containers: Iterable[tuple[Resources, bool]] = (),
    overhead: Resources = EMPTY,
    pod_level: Resources | None = None,
) -> Resources:
    """A pod's scheduling request, by Kubernetes' rules (and Karpenter's ``Ceiling``).

    ``init_containers`` are ``(requests, restartable)`` in declaration order; restartable
    ones are sidecars and run alongside the app containers. Each ordinary init container
    runs with the sidecars declared before it, so its step is its request plus theirs.
    The result is the per-resource max of (app containers + sidecars) and the largest
    step; pod-level requests (``spec.resources``) replace the aggregate for the resources
    they name; then RuntimeClass overhead and one ``pods`` slot are added.
    """
    # The same steps as Resources arithmetic, on plain dicts kept as Resources keeps its items
    # (zeros dropped as they appear, so even the order of names is the same), and one
    # Resources at the end.
    total: dict[str, int] = {}
    for requests in containers:
        _add_into(total, requests)
    sidecars: dict[str, int] = {}
    largest_step: dict[str, int] = {}
    for requests, restartable in init_containers:
        if restartable:
            _add_into(sidecars, requests)
            _add_into(total, requests)
            _max_into(largest_step, sidecars)
        else:
            step = dict(requests.items())  # a zero left in it never wins the maximum below
            _add_into(step, sidecars)
            _max_into(largest_step, step)
    _max_into(total, largest_step)
    if pod_level:
        total.update(pod_level)
        total = {name: value for name, value in total.items() if value}
    _add_into(total, overhead)
    _add_into(total, {PODS: 1000})
    return Resources(total)


def _add_into(target: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        total = target.get(name, 0) + value
        if total:
            target[name] = total
        else:
            target.pop(name, None)


def _max_into(target: dict[str, int], other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > target.get(name, 0):
            if value:
                target[name] = value
            else:
                target.pop(name, None)


def _container_requests(fields: Fields, container: Mapping[str, Any], path: str) -> Resources:
    """Requests with Kubernetes defaulting: a resource with a limit and no request requests its limit."""
    resources = fields.mapping(container.get("resources"), f"{path}.resources")
    requests_raw = fields.mapping(resources.get("requests"), f"{path}.resources.requests")
    requests = fields.resources(requests_raw, f"{path}.resources.requests")
    limits = fields.resources(resources.get("limits"), f"{path}.resources.limits")
    defaulted = {name: value for name, value in limits.items() if name not in requests_raw}
    return requests + defaulted if defaulted else requests


def _host_ports(fields: Fields, container: Mapping[str, Any], path: str, host_network: bool) -> list[HostPort]:
    ports = []
    for item_path, item in fields.items(container.get("ports"), f"{path}.ports"):
        container_port = fields.integer(item.get("containerPort"), f"{item_path}.containerPort", minimum=1, maximum=65535)
        host_port = fields.integer(item.get("hostPort"), f"{item_path}.hostPort", minimum=0, maximum=65535)
        if host_port is None and host_network:
            host_port = container_port  # API defaulting: with hostNetwork the host port is the container port
        if not host_port:
            continue
        protocol = fields.string(item.get("protocol"), f"{item_path}.protocol", default="TCP", allowed=("TCP", "UDP", "SCTP"))
        host_ip = fields.string(item.get("hostIP"), f"{item_path}.hostIP", default="") or "0.0.0.0"
        ports.append(HostPort(host_port, protocol, host_ip))
    return ports


def _node_selector_term(fields: Fields, term: Mapping[str, Any], path: str) -> Requirements:
    requirements = fields.requirements(term.get("matchExpressions"), f"{path}.matchExpressions")
    by_name = []
    for item_path, item in fields.items(term.get("matchFields"), f"{path}.matchFields"):
        key = fields.string(item.get("key"), f"{item_path}.key", required=True)
        if key != "metadata.name":
            fields.fail(f"{item_path}.key", f"only metadata.name is supported in matchFields, got {key!r}")
        operator = fields.string(item.get("operator"), f"{item_path}.operator", required=True, allowed=("In", "NotIn"))
        values = fields.string_list(item.get("values"), f"{item_path}.values")
        try:
            by_name.append(Requirement.create(wk.HOSTNAME, operator, values))
        except RequirementError as error:
            fields.fail(item_path, str(error))
    return requirements.add(*by_name) if by_name else requirements


def _node_affinity(fields: Fields, value: object, path: str) -> tuple[tuple[Requirements, ...], tuple[PreferredNodeTerm, ...]]:
    if value is None:
        return (), ()
    affinity = fields.mapping(value, path)
    required_terms: list[Requirements] = []
    required_value = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required_value is not None:
        required_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
        required = fields.mapping(required_value, required_path)
        terms_path = f"{required_path}.nodeSelectorTerms"
        terms = [_node_selector_term(fields, term, term_path) for term_path, term in fields.items(required.get("nodeSelectorTerms"), terms_path)]
        if not terms:
            fields.fail(terms_path, "needs at least one term")
        # An empty term matches no node; terms are ORed, so it only matters when all are empty.
        required_terms = [term for term in terms if term]
        if not required_terms:
            fields.fail(terms_path, "every term is empty, and an empty term matches no node: this pod can never schedule")
    preferred = []
    preferred_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    for item_path, item in fields.items(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred_path):
        weight = fields.integer(item.get("weight"), f"{item_path}.weight", minimum=1, maximum=100)
        if weight is None:
            fields.fail(f"{item_path}.weight", "required")
        term = _node_selector_term(fields, fields.mapping(item.get("preference"), f"{item_path}.preference", required=True), f"{item_path}.preference")
        preferred.append(PreferredNodeTerm(weight, term))
    return tuple(required_terms), tuple(preferred)


def _affinity_term(fields: Fields, term: Mapping[str, Any], path: str, pod_labels: Mapping[str, str], weight: int | None) -> PodAffinityTerm:
    selector = fields.label_selector(term.get("labelSelector"), f"{path}.labelSelector")
    match_keys = fields.string_list(term.get("matchLabelKeys"), f"{path}.matchLabelKeys")
    mismatch_keys = fields.string_list(term.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys")
    if selector is not None and (match_keys or mismatch_keys):
        # As the API server does at admission: keys the pod carries become In / NotIn its value.
        extra = [(key, "In", (pod_labels[key],)) for key in match_keys if key in pod_labels]
        extra += [(key, "NotIn", (pod_labels[key],)) for key in mismatch_keys if key in pod_labels]
        selector = selector_of(selector.match_labels, (*selector.match_expressions, *extra))
    return PodAffinityTerm(
        topology_key=fields.string(term.get("topologyKey"), f"{path}.topologyKey", required=True),
        label_selector=selector,
        namespaces=frozenset(fields.string_list(term.get("namespaces"), f"{path}.namespaces")),
        namespace_selector=fields.label_selector(term.get("namespaceSelector"), f"{path}.namespaceSelector"),
        weight=weight,
        match_label_keys=tuple(match_keys),
    )


def _pod_affinity(fields: Fields, value: object, path: str, pod_labels: Mapping[str, str]) -> tuple[PodAffinityTerm, ...]:
    if value is None:
        return ()
    affinity = fields.mapping(value, path)
    terms = []
    required_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    for item_path, item in fields.items(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), required_path):
        terms.append(_affinity_term(fields, item, item_path, pod_labels, None))
    preferred_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    for item_path, item in fields.items(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred_path):
        weight = fields.integer(item.get("weight"), f"{item_path}.weight", minimum=1, maximum=100)
        if weight is None:
            fields.fail(f"{item_path}.weight", "required")
        term = fields.mapping(item.get("podAffinityTerm"), f"{item_path}.podAffinityTerm", required=True)
        terms.append(_affinity_term(fields, term, f"{item_path}.podAffinityTerm", pod_labels, weight))
    return tuple(terms)


def _topology_spread(fields: Fields, value: object, path: str, pod_labels: Mapping[str, str]) -> tuple[TopologySpreadConstraint, ...]:
    constraints = []
    for item_path, item in fields.items(value, path):
        max_skew = fields.integer(item.get("maxSkew"), f"{item_path}.maxSkew", minimum=1)
        if max_skew is None:
            fields.fail(f"{item_path}.maxSkew", "required")
        when = fields.string(
            item.get("whenUnsatisfiable"), f"{item_path}.whenUnsatisfiable", default="DoNotSchedule", allowed=("DoNotSchedule", "ScheduleAnyway")
        )
        min_domains = fields.integer(item.get("minDomains"), f"{item_path}.minDomains", minimum=1)
        if min_domains is not None and when != "DoNotSchedule":
            fields.fail(f"{item_path}.minDomains", "only allowed with whenUnsatisfiable: DoNotSchedule")
        selector = fields.label_selector(item.get("labelSelector"), f"{item_path}.labelSelector")
        match_keys = fields.string_list(item.get("matchLabelKeys"), f"{item_path}.matchLabelKeys")
        if selector is not None and match_keys:
            # kube-scheduler ANDs key=value for each listed key the pod carries; a null selector stays null.
            extra = [(key, pod_labels[key]) for key in match_keys if key in pod_labels]
            selector = selector_of((*selector.match_labels, *extra), selector.match_expressions)
        constraints.append(
            TopologySpreadConstraint(
                max_skew=max_skew,
                topology_key=fields.string(item.get("topologyKey"), f"{item_path}.topologyKey", required=True),
                when_unsatisfiable=when,
                label_selector=selector,
                min_domains=min_domains,
                match_label_keys=tuple(match_keys),
                node_affinity_policy=fields.string(
                    item.get("nodeAffinityPolicy"), f"{item_path}.nodeAffinityPolicy", default="Honor", allowed=("Honor", "Ignore")
                ),
                node_taints_policy=fields.string(item.get("nodeTaintsPolicy"), f"{item_path}.nodeTaintsPolicy", default="Ignore", allowed=("Honor", "Ignore")),
            )
        )
    return tuple(constraints)


def _owner(fields: Fields, metadata: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The controller owner reference, or the first owner when none is marked controller."""
    owners = list(fields.items(metadata.get("ownerReferences"), "metadata.ownerReferences"))
    if not owners:
        return None, None
    chosen_path, chosen = next(((p, o) for p, o in owners if o.get("controller") is True), owners[0])
    return (
        fields.string(chosen.get("kind"), f"{chosen_path}.kind", required=True),
        fields.string(chosen.get("name"), f"{chosen_path}.name", required=True),
    )


def _unschedulable_since(fields: Fields, status: Mapping[str, Any]) -> datetime | None:
    for item_path, condition in fields.items(status.get("conditions"), "status.conditions"):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" and condition.get("reason") == "Unschedulable":
            return fields.timestamp(condition.get("lastTransitionTime"), f"{item_path}.lastTransitionTime")
    return None


class PodSpecMemo:
    """What follows from a pod's spec and labels, remembered for the last few workloads.

    A list returns pods in key order, so the pods of one ReplicaSet or DaemonSet arrive
    together and share their spec; each such spec is then parsed once. A pod reuses the
    remembered parts only when its namespace, owner, labels and what the parse reads of its
    spec (:func:`_spec_read`) equal the remembered ones, so the result is always what a fresh
    parse would give. Holds at most ``capacity`` specs. One memo per reader; not thread-safe."""

    __slots__ = ("_capacity", "_entries", "_runtime_classes")

    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity
        self._entries: dict[tuple[str, str | None, str | None], tuple[dict[str, Any], Mapping[str, str], dict[str, Any]]] = {}
        self._runtime_classes: Mapping[str, Resources] | None = None

    def _derived(
        self,
        key: tuple[str, str | None, str | None],
        spec: Mapping[str, Any],
        labels: Mapping[str, str],
        runtime_classes: Mapping[str, Resources] | None,
        compute: Callable[[], dict[str, Any]],
    ) -> dict[str, Any]:
        if runtime_classes != self._runtime_classes:
            self._entries.clear()
            self._runtime_classes = runtime_classes
        rest = _spec_read(spec)
        found = self._entries.get(key)
        if found is not None and found[0] == rest and found[1] == labels:
            return found[2]
        derived = compute()
        if len(self._entries) >= self._capacity:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = (rest, labels, derived)
        return derived


#: Spec fields read for each pod apart (they differ between the pods of one workload).
_PER_POD_SPEC = frozenset({"nodeName", "volumes"})
#: Container fields :func:`_spec_derived` reads (a container's volume mounts name the pod's
#: own service-account volume, so the pods of one workload differ there).
_CONTAINER_FIELDS_READ = ("resources", "ports", "restartPolicy")


def _spec_read(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`_spec_derived` reads of ``spec``: every field but those read per pod, and of
    each container only :data:`_CONTAINER_FIELDS_READ` (anything not a mapping kept as it is)."""
    read = {name: value for name, value in spec.items() if name not in _PER_POD_SPEC}
    for name in ("containers", "initContainers"):
        items = read.get(name)
        if type(items) is list:
            read[name] = [tuple(item.get(f) for f in _CONTAINER_FIELDS_READ) if type(item) is dict else item for item in items]
    return read


def _pod(
    fields: Fields,
    *,
    namespace: str,
    name: str,
    metadata: Mapping[str, Any],
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    runtime_classes: Mapping[str, Resources] | None,
    spec_path: str,
    meta_path: str,
    owner: tuple[str | None, str | None],
    memo: PodSpecMemo | None = None,
) -> Pod:
    pod_labels = fields.string_map(metadata.get("labels"), f"{meta_path}.labels")

    def compute() -> dict[str, Any]:
        return _spec_derived(fields, spec, spec_path, pod_labels, runtime_classes, owner[0])

    derived = compute() if memo is None else memo._derived((namespace, *owner), spec, pod_labels, runtime_classes, compute)
    return Pod(
        volume_claims=_volume_claims(fields, spec.get("volumes"), f"{spec_path}.volumes", name),
        namespace=namespace,
        name=name,
        uid=fields.string(metadata.get("uid"), f"{meta_path}.uid", default=""),
        labels=pod_labels,
        annotations=fields.string_map(metadata.get("annotations"), f"{meta_path}.annotations"),
        node_name=fields.string(spec.get("nodeName"), f"{spec_path}.nodeName") or None,
        nominated_node=fields.string(status.get("nominatedNodeName"), "status.nominatedNodeName") or None,
        owner_kind=owner[0],
        owner_name=owner[1],
        phase=fields.string(status.get("phase"), "status.phase", default="Pending", allowed=_POD_PHASES),
        created=fields.timestamp(metadata.get("creationTimestamp"), f"{meta_path}.creationTimestamp"),
        deleting=fields.timestamp(metadata.get("deletionTimestamp"), f"{meta_path}.deletionTimestamp") is not None,
        unschedulable_since=_unschedulable_since(fields, status),
        ready=_pod_ready(status),
        **derived,
    )


def _spec_derived(
    fields: Fields,
    spec: Mapping[str, Any],
    spec_path: str,
    pod_labels: Mapping[str, str],
    runtime_classes: Mapping[str, Resources] | None,
    owner_kind: str | None,
) -> dict[str, Any]:
    """The :class:`Pod` fields that follow from its spec but for ``nodeName`` and ``volumes``,
    its labels and its owner's kind (see :class:`PodSpecMemo`)."""
    host_network = fields.boolean(spec.get("hostNetwork"), f"{spec_path}.hostNetwork")

    containers_path = f"{spec_path}.containers"
    containers = list(fields.items(spec.get("containers"), containers_path))
    if not containers:
        fields.fail(containers_path, "a pod needs at least one container")
    app_requests = [_container_requests(fields, c, p) for p, c in containers]
    ports = [port for p, c in containers for port in _host_ports(fields, c, p, host_network)]

    init_requests: list[tuple[Resources, bool]] = []
    for item_path, container in fields.items(spec.get("initContainers"), f"{spec_path}.initContainers"):
        restart = fields.string(container.get("restartPolicy"), f"{item_path}.restartPolicy", default="", allowed=("Always",))
        sidecar = restart == "Always"
        init_requests.append((_container_requests(fields, container, item_path), sidecar))
        if sidecar:
            ports += _host_ports(fields, container, item_path, host_network)

    overhead = EMPTY
    runtime_class = fields.string(spec.get("runtimeClassName"), f"{spec_path}.runtimeClassName")
    if spec.get("overhead") is not None:
        overhead = fields.resources(spec.get("overhead"), f"{spec_path}.overhead")
    elif runtime_class and runtime_classes and runtime_class in runtime_classes:
        overhead = runtime_classes[runtime_class]

    pod_level = None
    pod_resources = fields.mapping(spec.get("resources"), f"{spec_path}.resources")
    if pod_resources:
        pod_level_raw = fields.mapping(pod_resources.get("requests"), f"{spec_path}.resources.requests")
        requests = fields.resources(pod_level_raw, f"{spec_path}.resources.requests")
        limits = fields.resources(pod_resources.get("limits"), f"{spec_path}.resources.limits")
        merged = {n: v for n, v in limits.items() if n not in pod_level_raw}
        merged.update(requests)
        pod_level = Resources({n: v for n, v in merged.items() if n in _POD_LEVEL_RESOURCES or n.startswith("hugepages-")})

    affinity = fields.mapping(spec.get("affinity"), f"{spec_path}.affinity")
    required_nodes, preferred_nodes = _node_affinity(fields, affinity.get("nodeAffinity"), f"{spec_path}.affinity.nodeAffinity")
    node_selector = fields.string_map(spec.get("nodeSelector"), f"{spec_path}.nodeSelector")
    tolerations = fields.tolerations(spec.get("tolerations"), f"{spec_path}.tolerations")
    if owner_kind == "DaemonSet":
        extra = [t for t in DAEMONSET_DEFAULT_TOLERATIONS + ((_HOST_NETWORK_TOLERATION,) if host_network else ()) if t not in tolerations]
        tolerations = tolerations + tuple(extra)

    return {
        "requests": effective_requests(app_requests, init_requests, overhead, pod_level),
        "node_selector": Requirements.from_labels(node_selector),
        "required_node_affinity": required_nodes,
        "preferred_node_affinity": preferred_nodes,
        "tolerations": tolerations,
        "pod_affinity": _pod_affinity(fields, affinity.get("podAffinity"), f"{spec_path}.affinity.podAffinity", pod_labels),
        "pod_anti_affinity": _pod_affinity(fields, affinity.get("podAntiAffinity"), f"{spec_path}.affinity.podAntiAffinity", pod_labels),
        "topology_spread": _topology_spread(fields, spec.get("topologySpreadConstraints"), f"{spec_path}.topologySpreadConstraints", pod_labels),
        "host_ports": tuple(sorted(set(ports))),
        "priority": fields.integer(spec.get("priority"), f"{spec_path}.priority", default=0),
        "priority_class_name": fields.string(spec.get("priorityClassName"), f"{spec_path}.priorityClassName", default=""),
        "termination_grace_seconds": fields.seconds(
            spec.get("terminationGracePeriodSeconds"), f"{spec_path}.terminationGracePeriodSeconds", default=30, minimum=0
        ),
        "scheduling_gated": bool(fields.sequence(spec.get("schedulingGates"), f"{spec_path}.schedulingGates")),
        "scheduler_name": fields.string(spec.get("schedulerName"), f"{spec_path}.schedulerName") or DEFAULT_SCHEDULER,
    }


def _volume_claims(fields: Fields, value: object, path: str, pod_name: str) -> tuple[tuple[str, str | None], ...]:
    """The pod's persistent volume claims: ``persistentVolumeClaim`` volumes by claim name;
    generic ephemeral volumes by the claim Kubernetes creates for them (``<pod>-<volume>``)
    with their template's storage class ("" for the default class)."""
    claims: list[tuple[str, str | None]] = []
    for item_path, volume in fields.items(value, path):
        if volume.get("persistentVolumeClaim") is not None:
            pvc = fields.mapping(volume.get("persistentVolumeClaim"), f"{item_path}.persistentVolumeClaim")
            claims.append((fields.string(pvc.get("claimName"), f"{item_path}.persistentVolumeClaim.claimName", required=True), None))
            continue
        if volume.get("ephemeral") is not None:
            ephemeral = fields.mapping(volume.get("ephemeral"), f"{item_path}.ephemeral")
            volume_name = fields.string(volume.get("name"), f"{item_path}.name", required=True)
            template = fields.mapping(ephemeral.get("volumeClaimTemplate"), f"{item_path}.ephemeral.volumeClaimTemplate")
            template_spec = fields.mapping(template.get("spec"), f"{item_path}.ephemeral.volumeClaimTemplate.spec")
            storage_class = fields.string(template_spec.get("storageClassName"), f"{item_path}.ephemeral.volumeClaimTemplate.spec.storageClassName", default="")
            claims.append((f"{pod_name}-{volume_name}", storage_class))
    return tuple(claims)


def _pod_ready(status: Mapping[str, Any]) -> bool:
    """The pod's Ready condition is True (what a PodDisruptionBudget counts as healthy)."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def parse_pod(obj: Mapping[str, Any], runtime_classes: Mapping[str, Resources] | None = None, *, origin: str = "", memo: PodSpecMemo | None = None) -> Pod:
    """A v1 Pod. ``runtime_classes`` (name -> ``overhead.podFixed``) supplies overhead for
    pods naming a RuntimeClass but lacking ``spec.overhead`` (the admission controller
    normally copies it in; hand-written snapshots often do not). ``memo`` parses each
    workload's spec once when many pods are read in a row (:class:`PodSpecMemo`)."""
    obj = checked_object(obj, "Pod", origin)
    fields = Fields(object_ref("Pod", obj, namespaced=True, origin=origin))
    metadata = metadata_of(fields, obj)
    name = name_of(fields, metadata)
    namespace = fields.string(metadata.get("namespace"), "metadata.namespace", default="") or "default"
    return _pod(
        fields,
        namespace=namespace,
        name=name,
        metadata=metadata,
        spec=fields.mapping(obj.get("spec"), "spec", required=True),
        status=fields.mapping(obj.get("status"), "status"),
        runtime_classes=runtime_classes,
        spec_path="spec",
        meta_path="metadata",
        owner=_owner(fields, metadata),
        memo=memo,
    )


# ---------------------------------------------------------------- nodes, DaemonSets, PDBs, RuntimeClasses


def parse_node(obj: Mapping[str, Any], *, origin: str = "") -> Node:
    """A v1 Node; Karpenter label keys gain their Joiner equivalents."""
    obj = checked_object(obj, "Node", origin)
    fields = Fields(object_ref("Node", obj, namespaced=False, origin=origin))
    metadata = metadata_of(fields, obj)
    spec = fields.mapping(obj.get("spec"), "spec")
    status = fields.mapping(obj.get("status"), "status")
    ready = False
    conditions: dict[str, NodeCondition] = {}
    for item_path, condition in fields.items(status.get("conditions"), "status.conditions"):
        kind = fields.string(condition.get("type"), f"{item_path}.type", default="")
        state = fields.string(condition.get("status"), f"{item_path}.status", default="Unknown")
        if kind == "Ready":
            ready = state == "True"
        if kind and kind not in conditions:  # the API server keeps one entry per type; the first wins
            since = fields.timestamp(condition.get("lastTransitionTime"), f"{item_path}.lastTransitionTime")
            conditions[kind] = NodeCondition(kind, state, since)
    deletion_time = fields.timestamp(metadata.get("deletionTimestamp"), "metadata.deletionTimestamp")
    return Node(
        name=name_of(fields, metadata),
        labels=wk.normalize_labels(fields.string_map(metadata.get("labels"), "metadata.labels")),
        annotations=fields.string_map(metadata.get("annotations"), "metadata.annotations"),
        taints=fields.taints(spec.get("taints"), "spec.taints"),
        allocatable=fields.resources(status.get("allocatable"), "status.allocatable"),
        capacity=fields.resources(status.get("capacity"), "status.capacity"),
        provider_id=fields.string(spec.get("providerID"), "spec.providerID", default=""),
        unschedulable=fields.boolean(spec.get("unschedulable"), "spec.unschedulable"),
        ready=ready,
        created=fields.timestamp(metadata.get("creationTimestamp"), "metadata.creationTimestamp"),
        deleting=deletion_time is not None,
        conditions=tuple(conditions[k] for k in sorted(conditions)),
        finalizers=tuple(fields.string_list(metadata.get("finalizers"), "metadata.finalizers")),
        deletion_time=deletion_time,
    )


#: The NodeClaims a snapshot may hold: Joiner's mirrors and Karpenter's own.
NODE_CLAIM_API_VERSIONS = (JOINER_V1, KARPENTER_V1)
_CLAIM_STATES = ("reserved", "launched", "registered", "initialized", "terminating")
_CONDITION_STATUSES = ("True", "False", "Unknown")


def parse_node_claim(obj: Mapping[str, Any], *, origin: str = "") -> NodeClaim:
    """A ``joiner.dev/v1`` NodeClaim (Joiner's mirror: ``spec.nodePool``, the instance in
    ``status``) or a ``karpenter.sh/v1`` one (Karpenter's: its NodePool in the
    ``karpenter.sh/nodepool`` label, ``spec.nodeClassRef`` and ``spec.requirements`` required,
    the instance type, zone and capacity type in its labels or single-valued requirements)."""
    obj = checked_object(obj, "NodeClaim", origin)
    fields = Fields(object_ref("NodeClaim", obj, namespaced=False, origin=origin))
    api_version = fields.string(obj.get("apiVersion"), "apiVersion", required=True)
    if api_version not in NODE_CLAIM_API_VERSIONS:
        fields.fail("apiVersion", f"{api_version!r} is not supported (expected {' or '.join(NODE_CLAIM_API_VERSIONS)})")
    metadata = metadata_of(fields, obj)
    name = name_of(fields, metadata)
    labels = wk.normalize_labels(fields.string_map(metadata.get("labels"), "metadata.labels"))
    spec = fields.mapping(obj.get("spec"), "spec", required=True)
    status = fields.mapping(obj.get("status"), "status")
    for item_path, condition in fields.items(status.get("conditions"), "status.conditions"):
        fields.string(condition.get("type"), f"{item_path}.type", required=True)
        fields.string(condition.get("status"), f"{item_path}.status", required=True, allowed=_CONDITION_STATUSES)
        fields.timestamp(condition.get("lastTransitionTime"), f"{item_path}.lastTransitionTime")
    node_name = fields.string(status.get("nodeName"), "status.nodeName", default=None) or None
    provider_id = fields.string(status.get("providerID"), "status.providerID", default="")
    grace = None
    if api_version == JOINER_V1:
        node_pool = fields.string(spec.get("nodePool"), "spec.nodePool", required=True)
        node_class = fields.string(spec.get("nodeClass"), "spec.nodeClass", default=None) or None
        fields.string_list(spec.get("pods"), "spec.pods")
        fields.string(status.get("state"), "status.state", default=None, allowed=_CLAIM_STATES)
        instance_id = fields.string(status.get("instanceID"), "status.instanceID", default="")
        instance_type = fields.string(status.get("instanceType"), "status.instanceType", default=None) or None
        zone = fields.string(status.get("zone"), "status.zone", default=None) or None
        capacity_type = fields.string(status.get("capacityType"), "status.capacityType", default=None) or None
        price = fields.string(status.get("price"), "status.price", default=None)
        if price is not None and not re.match(r"^[0-9]+(\.[0-9]+)?$", price):
            fields.fail("status.price", f"expected US dollars per hour such as 0.3400, got {price!r}")
        if instance_id and not provider_id and zone:
            provider_id = f"aws:///{zone}/{instance_id}"
    else:
        node_pool = labels.get(wk.NODEPOOL) or ""
        if not node_pool:
            fields.fail("metadata.labels", "needs karpenter.sh/nodepool: the NodePool the claim belongs to (Karpenter sets it)")
        ref = fields.mapping(spec.get("nodeClassRef"), "spec.nodeClassRef", required=True)
        group = fields.string(ref.get("group"), "spec.nodeClassRef.group", required=True)
        kind = fields.string(ref.get("kind"), "spec.nodeClassRef.kind", required=True)
        node_class = fields.string(ref.get("name"), "spec.nodeClassRef.name", required=True)
        if (group, kind) not in _NODE_CLASS_REFS:
            expected = " or ".join(f"{g}/{k}" for g, k in sorted(_NODE_CLASS_REFS))
            fields.fail("spec.nodeClassRef", f"must reference {expected}, got {group}/{kind}")
        if spec.get("requirements") is None:
            fields.fail("spec.requirements", "required (Karpenter's NodeClaim lists the requirements it was launched for)")
        requirements = fields.requirements(spec.get("requirements"), "spec.requirements")

        def stated(key: str) -> str | None:
            value = labels.get(key)
            if value:
                return value
            requirement = requirements.get(key)
            return requirement.single_value() if requirement is not None else None

        instance_type, zone, capacity_type = stated(wk.INSTANCE_TYPE), stated(wk.ZONE), stated(wk.CAPACITY_TYPE)
        fields.duration(spec.get("expireAfter"), "spec.expireAfter", default=None)
        grace = fields.duration(spec.get("terminationGracePeriod"), "spec.terminationGracePeriod", default=None, allow_never=False)
        fields.taints(spec.get("taints"), "spec.taints")
        fields.taints(spec.get("startupTaints"), "spec.startupTaints")
        resources = fields.mapping(spec.get("resources"), "spec.resources")
        fields.resources(resources.get("requests"), "spec.resources.requests")
        fields.resources(status.get("capacity"), "status.capacity")
        fields.resources(status.get("allocatable"), "status.allocatable")
    if provider_id and not provider_id.startswith("aws://"):
        fields.fail("status.providerID", f"expected aws:///<zone>/<instance-id>, got {provider_id!r}")
    return NodeClaim(
        name=name,
        api_version=api_version,
        node_pool=node_pool,
        node_name=node_name,
        provider_id=provider_id,
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        node_class=node_class,
        labels=labels,
        created=fields.timestamp(metadata.get("creationTimestamp"), "metadata.creationTimestamp"),
        finalizers=tuple(fields.string_list(metadata.get("finalizers"), "metadata.finalizers")),
        deletion_time=fields.timestamp(metadata.get("deletionTimestamp"), "metadata.deletionTimestamp"),
        termination_grace_period=grace,
    )


def parse_daemonset(obj: Mapping[str, Any], runtime_classes: Mapping[str, Resources] | None = None, *, origin: str = "") -> DaemonSet:
    """An apps/v1 DaemonSet; its pod template becomes a Pod owned by the DaemonSet (with
    the tolerations the DaemonSet controller adds), used for per-node overhead."""
    obj = checked_object(obj, "DaemonSet", origin)
    fields = Fields(object_ref("DaemonSet", obj, namespaced=True, origin=origin))
    metadata = metadata_of(fields, obj)
    name = name_of(fields, metadata)
    namespace = fields.string(metadata.get("namespace"), "metadata.namespace", default="") or "default"
    spec = fields.mapping(obj.get("spec"), "spec", required=True)
    template = fields.mapping(spec.get("template"), "spec.template", required=True)
    pod = _pod(
        fields,
        namespace=namespace,
        name=name,
        metadata=fields.mapping(template.get("metadata"), "spec.template.metadata"),
        spec=fields.mapping(template.get("spec"), "spec.template.spec", required=True),
        status={},
        runtime_classes=runtime_classes,
        spec_path="spec.template.spec",
        meta_path="spec.template.metadata",
        owner=("DaemonSet", name),
    )
    return DaemonSet(namespace, name, pod)


def _int_or_percent(fields: Fields, value: object, path: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(fields.integer(value, path, minimum=0))
    if isinstance(value, str) and _PERCENT.match(value):
        if int(value[:-1]) > 100:
            fields.fail(path, f"percentage must be at most 100%, got {value!r}")
        return value
    fields.fail(path, f"expected a non-negative integer or a percentage such as '50%', got {describe(value)}")


def parse_pdb(obj: Mapping[str, Any], *, origin: str = "") -> PodDisruptionBudget:
    """A policy/v1 PodDisruptionBudget. A null selector selects no pods (policy/v1), an
    empty one every pod of the namespace."""
    obj = checked_object(obj, "PodDisruptionBudget", origin)
    fields = Fields(object_ref("PodDisruptionBudget", obj, namespaced=True, origin=origin))
    metadata = metadata_of(fields, obj)
    spec = fields.mapping(obj.get("spec"), "spec")
    status = fields.mapping(obj.get("status"), "status")
    min_available = _int_or_percent(fields, spec.get("minAvailable"), "spec.minAvailable")
    max_unavailable = _int_or_percent(fields, spec.get("maxUnavailable"), "spec.maxUnavailable")
    if min_available is not None and max_unavailable is not None:
        fields.fail("spec", "minAvailable and maxUnavailable cannot both be set")
    selector = fields.label_selector(spec.get("selector"), "spec.selector")
    return PodDisruptionBudget(
        namespace=fields.string(metadata.get("namespace"), "metadata.namespace", default="") or "default",
        name=name_of(fields, metadata),
        selector=MATCH_NOTHING if selector is None else selector,
        disruptions_allowed=fields.integer(status.get("disruptionsAllowed"), "status.disruptionsAllowed", minimum=0),
        min_available=min_available,
        max_unavailable=max_unavailable,
        unhealthy_pod_eviction_policy=fields.string(
            spec.get("unhealthyPodEvictionPolicy"), "spec.unhealthyPodEvictionPolicy", default="IfHealthyBudget", allowed=("IfHealthyBudget", "AlwaysAllow")
        ),
    )


def parse_runtime_class(obj: Mapping[str, Any], *, origin: str = "") -> tuple[str, Resources]:
    """A node.k8s.io/v1 RuntimeClass as ``(name, overhead.podFixed)``."""
    obj = checked_object(obj, "RuntimeClass", origin)
    fields = Fields(object_ref("RuntimeClass", obj, namespaced=False, origin=origin))
    name = name_of(fields, metadata_of(fields, obj))
    overhead = fields.mapping(obj.get("overhead"), "overhead")
    return name, fields.resources(overhead.get("podFixed"), "overhead.podFixed")


# ---------------------------------------------------------------- NodePools


def _budget(fields: Fields, item: Mapping[str, Any], path: str) -> Budget:
    nodes_value = item.get("nodes", "10%")
    if isinstance(nodes_value, int) and not isinstance(nodes_value, bool) and nodes_value >= 0:
        nodes_value = str(nodes_value)
    nodes = fields.string(nodes_value, f"{path}.nodes", required=True)
    if not _BUDGET_NODES.match(nodes):
        fields.fail(f"{path}.nodes", f"expected a node count such as '5' or a percentage from '0%' to '100%', got {nodes!r}")
    schedule = fields.string(item.get("schedule"), f"{path}.schedule")
    duration = fields.duration(item.get("duration"), f"{path}.duration", default=None, allow_never=False)
    if schedule is not None:
        if not (schedule in _CRON_MACROS or len(schedule.split()) == 5):
            fields.fail(f"{path}.schedule", f"expected a 5-field cron expression or one of {', '.join(_CRON_MACROS)}, got {schedule!r}")
        if duration is None or duration <= timedelta(0):
            fields.fail(f"{path}.duration", "a positive duration is required with a schedule")
    elif item.get("duration") is not None:
        fields.fail(f"{path}.schedule", "required when duration is set")
    reasons = [
        fields.string(r, f"{path}.reasons[{i}]", required=True, allowed=_BUDGET_REASONS)
        for i, r in enumerate(fields.sequence(item.get("reasons"), f"{path}.reasons"))
    ]
    return Budget(nodes=nodes, schedule=schedule, duration=duration, reasons=tuple(sorted(set(reasons))))


def _disruption(fields: Fields, value: object, path: str) -> Disruption:
    disruption = fields.mapping(value, path)
    budgets_value = disruption.get("budgets")
    if budgets_value is None:
        budgets: tuple[Budget, ...] = (Budget(),)
    else:
        budgets = tuple(_budget(fields, item, item_path) for item_path, item in fields.items(budgets_value, f"{path}.budgets"))
    min_savings = fields.mapping(disruption.get("minSavings"), f"{path}.minSavings")
    return Disruption(
        consolidation_policy=fields.string(
            disruption.get("consolidationPolicy"), f"{path}.consolidationPolicy", default="WhenEmptyOrUnderutilized", allowed=_CONSOLIDATION_POLICIES
        ),
        consolidate_after=fields.duration(disruption.get("consolidateAfter"), f"{path}.consolidateAfter", default=timedelta(0)),
        budgets=budgets,
        min_savings_per_hour=fields.number(min_savings.get("perHour"), f"{path}.minSavings.perHour", default=0.0, minimum=0.0),
        min_savings_percent=fields.number(min_savings.get("percent"), f"{path}.minSavings.percent", default=10.0, minimum=0.0, maximum=100.0),
        repair=fields.string(disruption.get("repair"), f"{path}.repair", default="Enabled", allowed=_REPAIR) == "Enabled",
    )


def parse_node_pool(obj: Mapping[str, Any], *, origin: str = "") -> NodePool:
    """A ``joiner.dev/v1`` or ``karpenter.sh/v1`` NodePool, with the brief's defaults:
    expireAfter 720h, consolidateAfter 0s, WhenEmptyOrUnderutilized, budgets ``[10%]``,
    minSavings 10 %, rebalance ``replace``, weight 0, no limits, NodeClass ``default``."""
    obj = checked_object(obj, "NodePool", origin)
    fields = Fields(object_ref("NodePool", obj, namespaced=False, origin=origin))
    metadata = metadata_of(fields, obj)
    name = name_of(fields, metadata)
    spec = fields.mapping(obj.get("spec"), "spec")
    template = fields.mapping(spec.get("template"), "spec.template")
    template_metadata = fields.mapping(template.get("metadata"), "spec.template.metadata")
    template_spec = fields.mapping(template.get("spec"), "spec.template.spec")

    labels = fields.string_map(template_metadata.get("labels"), "spec.template.metadata.labels")
    for key in sorted(labels):
        if wk.normalize_label_key(key) in RESTRICTED_POOL_LABELS:
            fields.fail(f"spec.template.metadata.labels.{key}", f"{key} is set by Joiner on each node and cannot be set by a NodePool")

    node_class = "default"
    ref_value = template_spec.get("nodeClassRef")
    if ref_value is not None:
        ref = fields.mapping(ref_value, "spec.template.spec.nodeClassRef")
        node_class = fields.string(ref.get("name"), "spec.template.spec.nodeClassRef.name", required=True)
        group = fields.string(ref.get("group"), "spec.template.spec.nodeClassRef.group")
        kind = fields.string(ref.get("kind"), "spec.template.spec.nodeClassRef.kind")
        if (group is not None or kind is not None) and (group, kind) not in _NODE_CLASS_REFS:
            expected = " or ".join(f"{g}/{k}" for g, k in sorted(_NODE_CLASS_REFS))
            fields.fail("spec.template.spec.nodeClassRef", f"must reference {expected}, got {group}/{kind}")

    limits_value = spec.get("limits")
    limits = None if limits_value is None else fields.resources(limits_value, "spec.limits", keep_zeros=True, crd=True)
    replicas = fields.integer(spec.get("replicas"), "spec.replicas", minimum=0)
    if replicas is not None:  # Karpenter's StaticCapacity rules (the CRD's CEL says the same)
        other = sorted(set(limits or {}) - {"nodes"})
        if other:
            fields.fail(f"spec.limits.{other[0]}", "only 'limits.nodes' is supported on static NodePools (spec.replicas is set)")
        if spec.get("weight") is not None:
            fields.fail("spec.weight", "'weight' is not supported on static NodePools (spec.replicas is set)")
    interruption = fields.mapping(spec.get("interruption"), "spec.interruption")
    return NodePool(
        name=name,
        requirements=fields.requirements(template_spec.get("requirements"), "spec.template.spec.requirements", node_pool=True),
        labels=labels,
        annotations=fields.string_map(template_metadata.get("annotations"), "spec.template.metadata.annotations"),
        taints=fields.taints(template_spec.get("taints"), "spec.template.spec.taints"),
        startup_taints=fields.taints(template_spec.get("startupTaints"), "spec.template.spec.startupTaints"),
        node_class=node_class,
        limits=limits,
        weight=fields.integer(spec.get("weight"), "spec.weight", default=0, minimum=1, maximum=100),
        expire_after=fields.duration(template_spec.get("expireAfter"), "spec.template.spec.expireAfter", default=timedelta(hours=720)),
        termination_grace_period=fields.duration(
            template_spec.get("terminationGracePeriod"), "spec.template.spec.terminationGracePeriod", default=None, allow_never=False
        ),
        disruption=_disruption(fields, spec.get("disruption"), "spec.disruption"),
        rebalance=fields.string(interruption.get("rebalance"), "spec.interruption.rebalance", default="replace", allowed=_REBALANCE),
        deleting=metadata.get("deletionTimestamp") is not None,
        replicas=replicas,
    )


# ---------------------------------------------------------------- NodeClasses


def _selector_terms(fields: Fields, value: object, path: str, allowed_keys: tuple[str, ...], id_prefix: str) -> tuple[SelectorTerm, ...]:
    id_pattern = re.compile(rf"^{id_prefix}-[0-9a-z]+$")
    terms = []
    for item_path, item in fields.items(value, path):
        unknown = sorted(set(item) - set(allowed_keys))
        if unknown:
            fields.fail(f"{item_path}.{unknown[0]}", f"not supported (a term may use {', '.join(allowed_keys)})")
        present = [key for key in allowed_keys if item.get(key) is not None]
        if not present:
            fields.fail(item_path, f"a term needs one of {', '.join(allowed_keys)}")
        for exclusive in ("id", "alias"):
            if exclusive in present and len(present) > 1:
                fields.fail(f"{item_path}.{exclusive}", f"{exclusive} cannot be combined with {', '.join(k for k in present if k != exclusive)}")
        if present == ["owner"]:
            fields.fail(f"{item_path}.owner", "owner needs name or tags in the same term")
        tags = fields.string_map(item.get("tags"), f"{item_path}.tags")
        if "tags" in present and not tags:
            fields.fail(f"{item_path}.tags", "must not be empty")
        for key, tag_value in tags.items():
            if not key or not tag_value:
                fields.fail(f"{item_path}.tags", "tag keys and values must not be empty (use '*' to match any value)")
        term_id = item.get("id")
        if isinstance(term_id, str) and not id_pattern.match(term_id):
            fields.fail(f"{item_path}.id", f"expected an id such as {id_prefix}-0123abcd, got {term_id!r}")
        terms.append(
            SelectorTerm(
                tags=tuple(sorted(tags.items())),
                id=fields.string(item.get("id"), f"{item_path}.id", required="id" in present) or None,
                name=fields.string(item.get("name"), f"{item_path}.name", required="name" in present) or None,
                alias=fields.string(item.get("alias"), f"{item_path}.alias", required="alias" in present) or None,
                owner=fields.string(item.get("owner"), f"{item_path}.owner", required="owner" in present) or None,
            )
        )
    return tuple(terms)


def _ami(fields: Fields, spec: Mapping[str, Any], *, launchable: bool) -> tuple[str, tuple[SelectorTerm, ...]]:
    """amiFamily and amiSelectorTerms; an alias implies its family, no terms mean ``<family>@latest``.

    ``launchable`` (a Joiner NodeClass, which the functions launch from) admits only what the
    launch path supports: amiFamily AL2023 and ``al2023@latest``/``al2023@vYYYYMMDD`` aliases,
    as the CRD's schema and CEL rules do. A Karpenter EC2NodeClass (planning only) keeps
    Karpenter's families."""
    if launchable:
        family = fields.string(spec.get("amiFamily"), "spec.amiFamily")
        if family is not None and family != AMI_FAMILY:
            fields.fail(
                "spec.amiFamily",
                f"{family!r} is not supported: Joiner launches {AMI_FAMILY} only (AL2 is end-of-life; Bottlerocket and Custom are not supported)",
            )
    else:
        family = fields.string(spec.get("amiFamily"), "spec.amiFamily", allowed=_AMI_FAMILY_NAMES)
    terms = _selector_terms(fields, spec.get("amiSelectorTerms"), "spec.amiSelectorTerms", ("alias", "id", "name", "owner", "tags"), "ami")
    aliases = [(i, term.alias) for i, term in enumerate(terms) if term.alias is not None]
    if aliases:
        index, alias = aliases[0]
        path = f"spec.amiSelectorTerms[{index}].alias"
        if len(terms) > 1:
            fields.fail(path, "an alias term must be the only AMI selector term")
        if launchable and not ALIAS_PATTERN.match(alias):
            fields.fail(path, f"expected al2023@latest or al2023@vYYYYMMDD (the EKS-optimised AL2023 AMIs Joiner launches), got {alias!r}")
        if not _AMI_ALIAS.match(alias):
            fields.fail(
                path,
                f"expected <family>@<version> with family one of {', '.join(sorted(_AMI_FAMILIES))} and version latest or v<digits> (e.g. al2023@latest), got {alias!r}",
            )
        implied = _AMI_FAMILIES[alias.partition("@")[0]]
        if family is not None and family != implied:
            fields.fail("spec.amiFamily", f"{family} contradicts alias {alias!r} (which implies {implied})")
        return implied, terms
    family = family or "AL2023"
    if terms:
        return family, terms
    if family == "Custom":
        fields.fail("spec.amiSelectorTerms", "required when amiFamily is Custom")
    alias_family = next(key for key, value in _AMI_FAMILIES.items() if value == family)
    return family, (SelectorTerm(alias=f"{alias_family}@latest"),)


def _kubelet(fields: Fields, value: object, path: str) -> KubeletConfig:
    kubelet = fields.mapping(value, path)
    eviction_hard = fields.string_map(kubelet.get("evictionHard"), f"{path}.evictionHard")
    for signal, threshold in eviction_hard.items():
        signal_path = f"{path}.evictionHard.{signal}"
        if signal not in _EVICTION_SIGNALS:
            fields.fail(signal_path, f"unknown eviction signal (expected one of {', '.join(_EVICTION_SIGNALS)})")
        if threshold.endswith("%"):
            try:
                percent = float(threshold[:-1])
            except ValueError:
                percent = -1.0
            if not 0 <= percent <= 100:
                fields.fail(signal_path, f"invalid percentage {threshold!r}")
        else:
            try:
                if parse_milli(threshold) < 0:
                    fields.fail(signal_path, f"must not be negative, got {threshold!r}")
            except QuantityError as error:
                fields.fail(signal_path, str(error))
    kube_reserved = kubelet.get("kubeReserved")
    for field_name in ("systemReserved", "kubeReserved"):
        for resource in sorted(fields.mapping(kubelet.get(field_name), f"{path}.{field_name}")):
            if resource not in _RESERVABLE:
                fields.fail(f"{path}.{field_name}.{resource}", f"cannot be reserved (expected one of {', '.join(_RESERVABLE)})")
    pods_per_core = fields.integer(kubelet.get("podsPerCore"), f"{path}.podsPerCore", minimum=0)
    return KubeletConfig(
        max_pods=fields.integer(kubelet.get("maxPods"), f"{path}.maxPods", minimum=1),
        pods_per_core=pods_per_core or None,  # the kubelet reads 0 as "no per-core limit"
        system_reserved=fields.resources(kubelet.get("systemReserved"), f"{path}.systemReserved", crd=True),
        # An explicit 0 replaces the EKS formula for that resource, so zeros are kept.
        kube_reserved=None if kube_reserved is None else fields.resources(kube_reserved, f"{path}.kubeReserved", keep_zeros=True, crd=True),
        eviction_hard=eviction_hard,
    )


def _block_device_mappings(fields: Fields, value: object, path: str) -> tuple[Mapping[str, object], ...]:
    mappings = []
    root_volumes = 0
    for item_path, item in fields.items(value, path):
        device_name = fields.string(item.get("deviceName"), f"{item_path}.deviceName", required=True)
        if not _DEVICE_NAME.match(device_name):
            fields.fail(f"{item_path}.deviceName", f"expected a device such as /dev/xvda, got {device_name!r}")
        ebs = fields.mapping(item.get("ebs"), f"{item_path}.ebs")
        if ebs.get("volumeSize") is not None:
            try:
                size = parse_milli(ebs["volumeSize"])
            except QuantityError as error:
                fields.fail(f"{item_path}.ebs.volumeSize", str(error))
            if size <= 0:
                fields.fail(f"{item_path}.ebs.volumeSize", f"must be positive, got {ebs['volumeSize']!r}")
        for flag in ("encrypted", "deleteOnTermination"):
            fields.boolean(ebs.get(flag), f"{item_path}.ebs.{flag}")
        if fields.boolean(item.get("rootVolume"), f"{item_path}.rootVolume"):
            root_volumes += 1
            if root_volumes > 1:
                fields.fail(f"{item_path}.rootVolume", "at most one block device mapping can be the root volume")
        mappings.append(copy.deepcopy(dict(item)))
    return tuple(mappings)


def _metadata_options(fields: Fields, value: object, path: str) -> Mapping[str, object]:
    given = fields.mapping(value, path)
    unknown = sorted(set(given) - set(DEFAULT_METADATA_OPTIONS))
    if unknown:
        fields.fail(f"{path}.{unknown[0]}", f"unknown option (expected {', '.join(DEFAULT_METADATA_OPTIONS)})")
    options = dict(DEFAULT_METADATA_OPTIONS)
    options["httpEndpoint"] = fields.string(given.get("httpEndpoint"), f"{path}.httpEndpoint", default="enabled", allowed=("enabled", "disabled"))
    options["httpProtocolIPv6"] = fields.string(given.get("httpProtocolIPv6"), f"{path}.httpProtocolIPv6", default="disabled", allowed=("enabled", "disabled"))
    options["httpPutResponseHopLimit"] = fields.integer(
        given.get("httpPutResponseHopLimit"), f"{path}.httpPutResponseHopLimit", default=1, minimum=1, maximum=64
    )
    options["httpTokens"] = fields.string(given.get("httpTokens"), f"{path}.httpTokens", default="required", allowed=("required", "optional"))
    return options


def _restricted_tag(key: str) -> bool:
    return (
        key.startswith("kubernetes.io/cluster/")
        or key in ("joiner.dev/cluster", wk.NODEPOOL, wk.NODECLAIM, wk.MANAGED_BY_TAG, "eks:eks-cluster-name")
        or key in ("karpenter.sh/nodepool", "karpenter.sh/nodeclaim", "karpenter.k8s.aws/ec2nodeclass")
    )


def parse_node_class(obj: Mapping[str, Any], *, origin: str = "") -> NodeClass:
    """A ``joiner.dev/v1`` NodeClass or ``karpenter.k8s.aws/v1`` EC2NodeClass.

    Defaults: amiFamily AL2023 with ``alias: al2023@latest``; metadataOptions IMDSv2
    only (``httpTokens: required``) with hop limit 1. ``role`` and ``instanceProfile``
    are exclusive; with neither, the deployment's node role (JOINER_NODE_ROLE) is used.
    EC2NodeClass fields Joiner does not model (detailedMonitoring,
    associatePublicIPAddress, ...) are ignored. ``instanceStorePolicy: RAID0`` makes the
    instance-store NVMe disks the node's ephemeral storage.
    """
    declared = obj.get("kind") if isinstance(obj, Mapping) else None
    kind = declared if isinstance(declared, str) else "NodeClass"
    obj = checked_object(obj, kind, origin)
    fields = Fields(object_ref(kind, obj, namespaced=False, origin=origin))
    name = name_of(fields, metadata_of(fields, obj))
    spec = fields.mapping(obj.get("spec"), "spec")
    family, ami_terms = _ami(fields, spec, launchable=kind == "NodeClass")
    role = fields.string(spec.get("role"), "spec.role") or None
    instance_profile = fields.string(spec.get("instanceProfile"), "spec.instanceProfile") or None
    if role and instance_profile:
        fields.fail("spec.instanceProfile", "set either role or instanceProfile, not both")
    tags = fields.string_map(spec.get("tags"), "spec.tags")
    for key in sorted(tags):
        if not key:
            fields.fail("spec.tags", "tag keys must not be empty")
        if _restricted_tag(key):
            fields.fail(f"spec.tags.{key}", "this tag is set by Joiner and cannot be overridden")
    return NodeClass(
        name=name,
        subnet_selector_terms=_selector_terms(fields, spec.get("subnetSelectorTerms"), "spec.subnetSelectorTerms", ("id", "tags"), "subnet"),
        security_group_selector_terms=_selector_terms(
            fields, spec.get("securityGroupSelectorTerms"), "spec.securityGroupSelectorTerms", ("id", "name", "tags"), "sg"
        ),
        ami_family=family,
        ami_selector_terms=ami_terms,
        role=role,
        instance_profile=instance_profile,
        kubelet=_kubelet(fields, spec.get("kubelet"), "spec.kubelet"),
        block_device_mappings=_block_device_mappings(fields, spec.get("blockDeviceMappings"), "spec.blockDeviceMappings"),
        tags=tags,
        metadata_options=_metadata_options(fields, spec.get("metadataOptions"), "spec.metadataOptions"),
        user_data=fields.string(spec.get("userData"), "spec.userData") or None,
        capacity_reservation_terms=_reservation_terms(fields, spec.get("capacityReservationSelectorTerms"), "spec.capacityReservationSelectorTerms"),
        instance_store_policy=fields.string(spec.get("instanceStorePolicy"), "spec.instanceStorePolicy", allowed=INSTANCE_STORE_POLICIES) or None,
    )


_OWNER_ID = re.compile(r"^[0-9]{12}$")


def _reservation_terms(fields: Fields, value: object, path: str) -> tuple[SelectorTerm, ...]:
    """Karpenter's ``capacityReservationSelectorTerms``: ``id`` alone, or ``tags`` with an
    optional ``ownerID`` (the reservation's account, for shared reservations)."""
    items = list(fields.items(value, path))
    if len(items) > 30:
        fields.fail(path, f"at most 30 terms, got {len(items)}")
    owners: list[str | None] = []
    plain: list[dict[str, Any]] = []
    for item_path, item in items:
        unknown = sorted(set(item) - {"id", "tags", "ownerID"})
        if unknown:
            fields.fail(f"{item_path}.{unknown[0]}", "not supported (a term may use id, tags, ownerID)")
        owner = fields.string(item.get("ownerID"), f"{item_path}.ownerID") or None
        if owner is not None and not _OWNER_ID.match(owner):
            fields.fail(f"{item_path}.ownerID", f"expected a 12-digit account id, got {owner!r}")
        if item.get("id") is not None and (item.get("tags") is not None or owner is not None):
            fields.fail(f"{item_path}.id", "id cannot be combined with tags or ownerID")
        if owner is not None and item.get("tags") is None:
            fields.fail(f"{item_path}.ownerID", "ownerID needs tags in the same term")
        owners.append(owner)
        plain.append({key: item[key] for key in ("id", "tags") if item.get(key) is not None})
    parsed = _selector_terms(fields, plain, path, ("id", "tags"), "cr")
    terms = [dataclasses.replace(term, owner=owner) for term, owner in zip(parsed, owners, strict=True)]
    return tuple(terms)


# ---------------------------------------------------------------- NodeOverlays


def parse_node_overlay(obj: Mapping[str, Any], *, origin: str = "") -> NodeOverlay:
    """A ``joiner.dev/v1alpha1`` or ``karpenter.sh/v1alpha1`` NodeOverlay, with the CRD's rules:
    requirements (Gt/Lt/Gte/Lte with one non-negative integer), at most one of ``price`` and
    ``priceAdjustment`` (Karpenter's patterns), ``capacity`` with extended resources only,
    weight 1..10000 (absent: 0)."""
    obj = checked_object(obj, "NodeOverlay", origin)
    fields = Fields(object_ref("NodeOverlay", obj, namespaced=False, origin=origin))
    name = name_of(fields, metadata_of(fields, obj))
    spec = fields.mapping(obj.get("spec"), "spec", required=True)
    if spec.get("requirements") is None:
        fields.fail("spec.requirements", "required (an empty list selects every instance type)")
    raw_requirements = fields.sequence(spec.get("requirements"), "spec.requirements")
    if len(raw_requirements) > 100:
        fields.fail("spec.requirements", f"at most 100 requirements, got {len(raw_requirements)}")
    for item_path, item in fields.items(raw_requirements, "spec.requirements"):
        operator, values = item.get("operator"), item.get("values")
        if operator in ("Gt", "Lt", "Gte", "Lte") and isinstance(values, list) and values and str(values[0]).startswith("-"):
            fields.fail(f"{item_path}.values", f"operator {operator} needs a single non-negative integer value")
    price = fields.string(spec.get("price"), "spec.price")
    adjustment = fields.string(spec.get("priceAdjustment"), "spec.priceAdjustment")
    if price is not None and adjustment is not None:
        fields.fail("spec", "cannot set both 'price' and 'priceAdjustment'")
    if price is not None and not ov.PRICE_PATTERN.match(price):
        fields.fail("spec.price", f"expected a non-negative decimal such as 0.42, got {price!r}")
    if adjustment is not None and not ov.PRICE_ADJUSTMENT_PATTERN.match(adjustment):
        fields.fail("spec.priceAdjustment", f"expected +N, -N, +N% or -N% (at most -100%), got {adjustment!r}")
    capacity = fields.resources(spec.get("capacity"), "spec.capacity")
    for resource in sorted(fields.mapping(spec.get("capacity"), "spec.capacity")):
        if resource in ov.RESTRICTED_CAPACITY:
            fields.fail(f"spec.capacity.{resource}", "an overlay adds extended resources only (not cpu, memory, ephemeral-storage or pods)")
    return NodeOverlay(
        name=name,
        requirements=fields.requirements(raw_requirements, "spec.requirements"),
        price_change=price if price is not None else adjustment,
        capacity=capacity,
        weight=fields.integer(spec.get("weight"), "spec.weight", default=0, minimum=1, maximum=ov.MAX_WEIGHT),
    )


# ---------------------------------------------------------------- snapshots


@dataclass(frozen=True)
class Snapshot:
    """A cluster's scheduling-relevant state, each collection sorted by name."""

    pods: tuple[Pod, ...] = ()
    nodes: tuple[Node, ...] = ()
    daemonsets: tuple[DaemonSet, ...] = ()
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    node_pools: tuple[NodePool, ...] = ()
    node_classes: tuple[NodeClass, ...] = ()
    runtime_classes: Mapping[str, Resources] = field(default_factory=lambda: MappingProxyType({}))
    volume_claims: tuple[PersistentVolumeClaim, ...] = ()
    persistent_volumes: tuple[PersistentVolume, ...] = ()
    storage_classes: tuple[StorageClass, ...] = ()
    csi_nodes: tuple[CSINode, ...] = ()
    node_overlays: tuple[NodeOverlay, ...] = ()
    #: NodeClaims (Joiner's mirrors and Karpenter's), by name: what a deletion of one drains
    node_claims: tuple[NodeClaim, ...] = ()
    #: False when the volume objects could not be read (an API error, RBAC not updated): the
    #: planner then places pending pods without volume topology, and consolidation moves
    #: no pod that has a persistent volume.
    volumes_known: bool = True
    #: ``apiVersion/kind`` of every object read, modelled or skipped (what a CLI tells the user
    #: about its input); not part of the snapshot's value.
    kinds_read: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def pending_pods(self) -> tuple[Pod, ...]:
        """Pods that need a node (:attr:`Pod.is_pending`)."""
        return tuple(pod for pod in self.pods if pod.is_pending)

    @property
    def daemonset_pods(self) -> tuple[Pod, ...]:
        """Pods a DaemonSet owns, bound or not (their requests are the DaemonSets' overhead)."""
        return tuple(pod for pod in self.pods if pod.is_daemonset_pod)

    @property
    def bound_pods(self) -> tuple[Pod, ...]:
        """Pods bound to a node and not finished (they occupy its capacity)."""
        return tuple(pod for pod in self.pods if pod.node_name is not None and not pod.is_terminal)


#: (apiVersion, kind) -> the collection it lands in.
_KINDS: dict[tuple[str, str], str] = {
    ("v1", "Pod"): "Pod",
    ("v1", "Node"): "Node",
    ("apps/v1", "DaemonSet"): "DaemonSet",
    ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("node.k8s.io/v1", "RuntimeClass"): "RuntimeClass",
    ("v1", "PersistentVolumeClaim"): "PersistentVolumeClaim",
    ("v1", "PersistentVolume"): "PersistentVolume",
    ("storage.k8s.io/v1", "StorageClass"): "StorageClass",
    ("storage.k8s.io/v1", "CSINode"): "CSINode",
    (JOINER_V1, "NodePool"): "NodePool",
    (KARPENTER_V1, "NodePool"): "NodePool",
    (JOINER_V1, "NodeClass"): "NodeClass",
    (KARPENTER_AWS_V1, "EC2NodeClass"): "NodeClass",
    (JOINER_V1ALPHA1, "NodeOverlay"): "NodeOverlay",
    (KARPENTER_V1ALPHA1, "NodeOverlay"): "NodeOverlay",
    (JOINER_V1, "NodeClaim"): "NodeClaim",
    (KARPENTER_V1, "NodeClaim"): "NodeClaim",
}
_MODELLED_KINDS = {kind: sorted(api for api, k in _KINDS if k == kind) for _, kind in _KINDS}
_NAMESPACED = {"Pod", "DaemonSet", "PodDisruptionBudget", "PersistentVolumeClaim"}


def _flatten(obj: object, origin: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    """Objects with their origin, expanding ``List`` and ``<Kind>List`` (items inherit the kind)."""
    if not isinstance(obj, Mapping):
        raise SnapshotError(origin, "", f"expected a Kubernetes object (a mapping with apiVersion and kind), got {describe(obj)}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        metadata = obj.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        ref = f"{origin} ({name})" if isinstance(name, str) and name else origin
        raise SnapshotError(ref, "kind", "required (every object needs apiVersion and kind)")
    if kind.endswith("List") and "items" in obj:
        fields = Fields(f"{kind} ({origin})")
        item_kind = kind[: -len("List")]
        api_version = obj.get("apiVersion")
        for index, item in enumerate(fields.sequence(obj.get("items"), "items")):
            item_origin = f"{origin} items[{index}]"
            if item_kind and isinstance(item, Mapping) and "kind" not in item:
                item = {**item, "kind": item_kind, **({"apiVersion": api_version} if "apiVersion" not in item else {})}
            yield from _flatten(item, item_origin)
        return
    yield obj, origin


def _collect(entries: Iterable[tuple[object, str]], *, strict: bool = False) -> Snapshot:
    objects = [flat for obj, origin in entries for flat in _flatten(obj, origin)]
    typed: list[tuple[str, Mapping[str, Any], str]] = []
    kinds_read: set[str] = set()
    for obj, origin in objects:
        kind = obj["kind"]
        api_version = obj.get("apiVersion")
        kinds_read.add(f"{api_version}/{kind}")
        if api_version is not None and not isinstance(api_version, str):
            ref = object_ref(kind, obj, namespaced=kind in _NAMESPACED, origin=origin)
            raise SnapshotError(ref, "apiVersion", f"expected a string such as v1 or joiner.dev/v1, got {describe(api_version)}")
        target = _KINDS.get((api_version, kind))  # type: ignore[arg-type]
        if target is None:
            if kind in _MODELLED_KINDS:
                ref = object_ref(kind, obj, namespaced=kind in _NAMESPACED, origin=origin)
                raise SnapshotError(ref, "apiVersion", f"{api_version!r} is not supported (expected {' or '.join(_MODELLED_KINDS[kind])})")
            continue  # ConfigMaps, Services, ...: not scheduling inputs
        if strict:
            _check_known_fields(obj, kind, origin)
        typed.append((target, obj, origin))

    seen: dict[tuple[str, str], str] = {}
    runtime_classes: dict[str, Resources] = {}
    for target, obj, origin in typed:
        if target == "RuntimeClass":
            name, overhead = parse_runtime_class(obj, origin=origin)
            _unique(seen, target, name, f"RuntimeClass {name}")
            runtime_classes[name] = overhead

    pods, nodes, daemonsets, pdbs, pools, classes, overlays, node_claims = [], [], [], [], [], [], [], []
    claimed_nodes: dict[str, str] = {}
    volume_objects: dict[str, list[Any]] = {field_name: [] for _, field_name in vol.VOLUME_KINDS.values()}
    for target, obj, origin in typed:
        if target in vol.VOLUME_KINDS:
            parse, field_name = vol.VOLUME_KINDS[target]
            item = parse(obj, origin=origin)
            key = vol.volume_object_key(item)
            _unique(seen, target, key, f"{target} {key}")
            volume_objects[field_name].append(item)
    claims: list[PersistentVolumeClaim] = volume_objects["volume_claims"]
    persistent_volumes: list[PersistentVolume] = volume_objects["persistent_volumes"]
    storage_classes: list[StorageClass] = volume_objects["storage_classes"]
    csi_nodes: list[CSINode] = volume_objects["csi_nodes"]
    for target, obj, origin in typed:
        if target == "Pod":
            pod = parse_pod(obj, runtime_classes, origin=origin)
            _unique(seen, target, pod.key, f"Pod {pod.key}")
            pods.append(pod)
        elif target == "Node":
            node = parse_node(obj, origin=origin)
            _unique(seen, target, node.name, f"Node {node.name}")
            nodes.append(node)
        elif target == "DaemonSet":
            daemonset = parse_daemonset(obj, runtime_classes, origin=origin)
            _unique(seen, target, f"{daemonset.namespace}/{daemonset.name}", f"DaemonSet {daemonset.namespace}/{daemonset.name}")
            daemonsets.append(daemonset)
        elif target == "PodDisruptionBudget":
            pdb = parse_pdb(obj, origin=origin)
            _unique(seen, target, f"{pdb.namespace}/{pdb.name}", f"PodDisruptionBudget {pdb.namespace}/{pdb.name}")
            pdbs.append(pdb)
        elif target == "NodePool":
            pool = parse_node_pool(obj, origin=origin)
            _unique(seen, target, pool.name, f"NodePool {pool.name}")
            pools.append(pool)
        elif target == "NodeClass":
            node_class = parse_node_class(obj, origin=origin)
            _unique(seen, target, node_class.name, f"{obj['kind']} {node_class.name}")
            classes.append(node_class)
        elif target == "NodeOverlay":
            overlay = parse_node_overlay(obj, origin=origin)
            _unique(seen, target, overlay.name, f"NodeOverlay {overlay.name}")
            overlays.append(overlay)
        elif target == "NodeClaim":
            claim = parse_node_claim(obj, origin=origin)
            ref = f"NodeClaim {claim.name} ({claim.api_version})"
            _unique(seen, target, claim.name, ref)
            if claim.node_name is not None:
                if claim.node_name in claimed_nodes:
                    raise SnapshotError(ref, "status.nodeName", f"node {claim.node_name} is already {claimed_nodes[claim.node_name]}'s")
                claimed_nodes[claim.node_name] = ref
            node_claims.append(claim)
    return Snapshot(
        pods=tuple(sorted(pods, key=lambda p: (p.namespace, p.name))),
        nodes=tuple(sorted(nodes, key=lambda n: n.name)),
        daemonsets=tuple(sorted(daemonsets, key=lambda d: (d.namespace, d.name))),
        pdbs=tuple(sorted(pdbs, key=lambda p: (p.namespace, p.name))),
        node_pools=tuple(sorted(pools, key=lambda p: p.name)),
        node_classes=tuple(sorted(classes, key=lambda c: c.name)),
        runtime_classes=MappingProxyType(dict(sorted(runtime_classes.items()))),
        volume_claims=tuple(sorted(claims, key=lambda c: (c.namespace, c.name))),
        persistent_volumes=tuple(sorted(persistent_volumes, key=lambda v: v.name)),
        storage_classes=tuple(sorted(storage_classes, key=lambda c: c.name)),
        csi_nodes=tuple(sorted(csi_nodes, key=lambda c: c.name)),
        kinds_read=frozenset(kinds_read),
        node_overlays=tuple(sorted(overlays, key=lambda o: o.name)),
        node_claims=tuple(sorted(node_claims, key=lambda c: c.name)),
    )


def _check_known_fields(obj: Mapping[str, Any], kind: str, origin: str) -> None:
    """kubectl's strict field validation: the first unknown field is an error."""
    from joiner.domain.known_fields import strict_problem

    problem = strict_problem(obj)
    if problem is not None:
        raise SnapshotError(object_ref(kind, obj, namespaced=kind in _NAMESPACED, origin=origin), *problem)


def _unique(seen: dict[tuple[str, str], str], kind: str, key: str, ref: str) -> None:
    if (kind, key) in seen:
        raise SnapshotError(ref, "metadata.name", f"appears twice (also at {seen[(kind, key)]})")
    seen[(kind, key)] = ref


def parse_objects(objects: Iterable[Mapping[str, Any]]) -> Snapshot:
    """A snapshot from Kubernetes objects (dicts as the API returns them).

    ``List`` / ``PodList``-style objects are expanded; kinds Joiner does not model are
    skipped; RuntimeClasses are read before pods whatever the order; a name repeated
    within a kind is an error.
    """
    return _collect((obj, f"object {index + 1}") for index, obj in enumerate(objects))


def load_snapshot_yaml(text: str, *, strict: bool = False, source: str = "snapshot") -> Snapshot:
    """A snapshot from multi-document YAML (``---`` separated objects, ``kind: List``
    documents, empty documents skipped). Syntax errors name ``source`` (the file), the line
    and the column; size, nesting, aliases and numbers are bounded
    (:data:`joiner.domain.bounded.DEFAULT_LIMITS`). ``strict``: a field the kind's schema
    does not know is an error (:mod:`joiner.domain.known_fields`), as with ``kubectl apply``."""
    with gc_paused():
        try:
            documents = load_snapshot_documents(text, DEFAULT_LIMITS)
        except InputError as error:
            raise SnapshotError(source, error.where, error.problem) from None
        return _collect(((document, f"document {index + 1}") for index, document in enumerate(documents) if document is not None), strict=strict)
