"""Snapshot builders for disruption tests: managed nodes, running pods, NodePools with
disruption settings, decided against the small test catalog."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.disruption import Decision, DisruptionInput, NodeFacts, decide
from joiner.domain.planning import instance_types_by_pool
from joiner.domain.snapshot import Snapshot, parse_objects
from tests.support.fakes import node_class_json, node_json, node_pool_json, pod_json, small_catalog

T0 = datetime(2025, 1, 6, 9, 30, tzinfo=UTC)
DAY = timedelta(days=1)
CATALOG = small_catalog()
CPU = {"c5.large": "2", "c5.xlarge": "4", "c5.2xlarge": "8", "m5.large": "2", "m6g.large": "2"}
MEMORY = {"c5.large": "4Gi", "c5.xlarge": "8Gi", "c5.2xlarge": "16Gi", "m5.large": "8Gi", "m6g.large": "8Gi"}
ALL_TYPES = ["c5.large", "c5.xlarge", "c5.2xlarge", "m5.large"]


def managed_node(
    name: str,
    instance_type: str = "c5.xlarge",
    *,
    zone: str = "us-east-1a",
    capacity_type: str = "on-demand",
    pool: str = "default",
    created: datetime = T0 - DAY,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    labels: Mapping[str, str] | None = None,
    initialized: bool = True,
    managed: bool = True,
) -> dict[str, Any]:
    extra = {wk.NODEPOOL: pool, wk.CAPACITY_TYPE: capacity_type, wk.NODECLAIM: f"claim-{name}"} if managed else {}
    if initialized and managed:
        extra[wk.INITIALIZED] = "true"
    extra.update(labels or {})
    node = node_json(
        name,
        instance_id=f"i-{abs(hash(name)) % 10**12:012d}",
        zone=zone,
        instance_type=instance_type,
        cpu=CPU[instance_type],
        memory=MEMORY[instance_type],
        labels=extra,
        taints=taints,
        created=created,
    )
    if annotations:
        node["metadata"]["annotations"] = dict(annotations)
    return node


def running_pod(
    name: str,
    node: str,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    app: str = "web",
    created: datetime = T0 - DAY,
    annotations: Mapping[str, str] | None = None,
    owner: str = "ReplicaSet",
    extra_spec: Mapping[str, Any] | None = None,
    phase: str = "Running",
    priority: int | None = None,
) -> dict[str, Any]:
    pod = pod_json(name, cpu=cpu, memory=memory, labels={"app": app}, node_name=node, created=created, uid=f"uid-{name}", extra_spec=extra_spec)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": f"{app}-{owner.lower()}", "uid": f"uid-{app}", "controller": True}]
    if annotations:
        pod["metadata"]["annotations"] = dict(annotations)
    if priority is not None:
        pod["spec"]["priority"] = priority
    pod["status"]["phase"] = phase
    return pod


def pool(
    name: str = "default",
    *,
    types: Sequence[str] = ALL_TYPES,
    capacity_types: Sequence[str] = ("on-demand",),
    consolidate_after: str = "0s",
    policy: str = "WhenEmptyOrUnderutilized",
    budgets: Sequence[Mapping[str, Any]] | None = None,
    min_savings: Mapping[str, Any] | None = None,
    expire_after: str = "720h",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    repair: str | None = None,
    replicas: int | None = None,
    limits: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    obj = node_pool_json(
        name,
        requirements=[
            {"key": wk.INSTANCE_TYPE, "operator": "In", "values": list(types)},
            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)},
        ],
        labels=labels,
        taints=taints,
    )
    disruption: dict[str, Any] = {"consolidationPolicy": policy, "consolidateAfter": consolidate_after, "budgets": list(budgets or [{"nodes": "100%"}])}
    if min_savings is not None:
        disruption["minSavings"] = dict(min_savings)
    if repair is not None:
        disruption["repair"] = repair
    obj["spec"]["disruption"] = disruption
    obj["spec"]["template"]["spec"]["expireAfter"] = expire_after
    if replicas is not None:
        obj["spec"]["replicas"] = replicas
    if limits is not None:
        obj["spec"]["limits"] = dict(limits)
    return obj


def pdb(name: str, app: str, *, allowed: int, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": app}}, "minAvailable": 1},
        "status": {"disruptionsAllowed": allowed},
    }


def snapshot(*objects: Mapping[str, Any], node_class: bool = True) -> Snapshot:
    items = [copy.deepcopy(dict(o)) for o in objects]
    if node_class:
        items.append(node_class_json("default"))
    return parse_objects(items)


def disruption_input(snap: Snapshot, *, now: datetime = T0, facts: Mapping[str, NodeFacts] | None = None, **extra: Any) -> DisruptionInput:
    types = instance_types_by_pool(snap.node_pools, snap.node_classes, CATALOG)
    return DisruptionInput(snapshot=snap, instance_types=types, now=now, facts=dict(facts or {}), **extra)


def run(*objects: Mapping[str, Any], now: datetime = T0, facts: Mapping[str, NodeFacts] | None = None, **extra: Any) -> Decision:
    return decide(disruption_input(snapshot(*objects), now=now, facts=facts, **extra))
