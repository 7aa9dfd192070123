"""Small constructors for scheduling tests (model objects built directly)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from joiner.domain import labels as wk
from joiner.domain.model import (
    DaemonSet,
    HostPort,
    InstanceType,
    LabelSelector,
    Node,
    NodePool,
    Offering,
    Pod,
    PodAffinityTerm,
    PreferredNodeTerm,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)
from joiner.domain.quantity import parse_milli
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.resources import Resources

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def res(**quantities: object) -> Resources:
    return Resources({name.replace("_", "-"): parse_milli(value) for name, value in quantities.items()})  # type: ignore[arg-type]


def req(key: str, operator: str, *values: str, min_values: int | None = None) -> Requirement:
    return Requirement.create(key, operator, values, min_values)


def reqs(*items: Requirement) -> Requirements:
    return Requirements(items)


def instance_type(
    name: str,
    cpu: float,
    memory_gib: float,
    price: float,
    *,
    pods: int = 110,
    zones: Iterable[str] = ZONES,
    capacity_types: Iterable[str] = ("on-demand",),
    spot_price: float | None = None,
    arch: str = "amd64",
    extra: Mapping[str, str] | None = None,
    gpus: int = 0,
    overhead: Resources | None = None,
) -> InstanceType:
    capacity = {"cpu": int(cpu * 1000), "memory": int(memory_gib * 2**30 * 1000), "pods": pods * 1000}
    if gpus:
        capacity["nvidia.com/gpu"] = gpus * 1000
    labels = {wk.INSTANCE_TYPE: name, wk.ARCH: arch, wk.OS: "linux"}
    if "." in name:
        labels[wk.INSTANCE_FAMILY] = name.split(".")[0]
    labels.update(extra or {})
    offerings = []
    for zone in zones:
        for ct in capacity_types:
            offerings.append(Offering(zone, ct, spot_price if (ct == "spot" and spot_price is not None) else price))
    return InstanceType(name, Resources(capacity), overhead or Resources(), Requirements.from_labels(labels), tuple(offerings))


def pod(
    name: str,
    cpu: object = "1",
    memory: object = "1Gi",
    *,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    required: Iterable[Requirements] = (),
    preferred: Iterable[tuple[int, Requirements]] = (),
    tolerations: Iterable[Toleration] = (),
    affinity: Iterable[PodAffinityTerm] = (),
    anti_affinity: Iterable[PodAffinityTerm] = (),
    spread: Iterable[TopologySpreadConstraint] = (),
    host_ports: Iterable[int] = (),
    node_name: str | None = None,
    extra: Mapping[str, object] | None = None,
    owner: tuple[str, str] | None = None,
) -> Pod:
    requests = {"cpu": parse_milli(cpu), "memory": parse_milli(memory), "pods": 1000}  # type: ignore[arg-type]
    for key, value in (extra or {}).items():
        requests[key] = parse_milli(value)  # type: ignore[arg-type]
    return Pod(
        namespace=namespace,
        name=name,
        uid=f"uid-{namespace}-{name}",
        labels=dict(labels or {}),
        requests=Resources(requests),
        node_selector=Requirements.from_labels(node_selector or {}),
        required_node_affinity=tuple(required),
        preferred_node_affinity=tuple(PreferredNodeTerm(w, r) for w, r in preferred),
        tolerations=tuple(tolerations),
        pod_affinity=tuple(affinity),
        pod_anti_affinity=tuple(anti_affinity),
        topology_spread=tuple(spread),
        host_ports=tuple(HostPort(p) for p in host_ports),
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        owner_kind=owner[0] if owner else None,
        owner_name=owner[1] if owner else None,
    )


def selector(**match: str) -> LabelSelector:
    return LabelSelector(tuple(sorted(match.items())))


def term(key: str, weight: int | None = None, namespaces: Iterable[str] = (), namespace_selector: LabelSelector | None = None, **match: str) -> PodAffinityTerm:
    return PodAffinityTerm(key, selector(**match), frozenset(namespaces), namespace_selector, weight)


def spread(key: str, max_skew: int = 1, when: str = "DoNotSchedule", min_domains: int | None = None, **match: str) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(max_skew, key, when, selector(**match), min_domains)


def node_pool(
    name: str = "default",
    *,
    requirements: Iterable[Requirement] = (),
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    startup_taints: Iterable[Taint] = (),
    limits: Resources | None = None,
    weight: int = 0,
) -> NodePool:
    return NodePool(
        name=name,
        requirements=Requirements(requirements),
        labels=dict(labels or {}),
        taints=tuple(taints),
        startup_taints=tuple(startup_taints),
        limits=limits,
        weight=weight,
    )


def node(
    name: str,
    cpu: float = 4,
    memory_gib: float = 16,
    *,
    pods: int = 110,
    zone: str = "us-east-1a",
    pool: str | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    instance: str = "m5.xlarge",
    capacity_type: str = "on-demand",
    ready: bool = True,
) -> Node:
    all_labels = {wk.HOSTNAME: name, wk.ZONE: zone, wk.INSTANCE_TYPE: instance, wk.CAPACITY_TYPE: capacity_type, wk.ARCH: "amd64", wk.OS: "linux"}
    if pool:
        all_labels[wk.NODEPOOL] = pool
        all_labels[wk.INITIALIZED] = "true"
    all_labels.update(labels or {})
    allocatable = Resources({"cpu": int(cpu * 1000), "memory": int(memory_gib * 2**30 * 1000), "pods": pods * 1000})
    return Node(name=name, labels=all_labels, taints=tuple(taints), allocatable=allocatable, capacity=allocatable, ready=ready)


def daemonset(
    name: str,
    cpu: object = "100m",
    memory: object = "128Mi",
    *,
    tolerations: Iterable[Toleration] = (),
    node_selector: Mapping[str, str] | None = None,
    host_ports: Iterable[int] = (),
) -> DaemonSet:
    template = pod(
        name, cpu, memory, tolerations=tolerations, node_selector=node_selector, owner=("DaemonSet", name), namespace="kube-system", host_ports=host_ports
    )
    return DaemonSet("kube-system", name, template)
