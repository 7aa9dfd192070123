"""Glue between a cluster snapshot, the instance catalog and the scheduling core.

Used by ``joiner plan``, the scanner's provisioning round, interruption replacement and
disruption simulation, so they all plan the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping

from joiner.domain import labels as wk
from joiner.domain.catalog import Catalog
from joiner.domain.model import InFlightClaim, InstanceType, KubeletConfig, NodeClass, NodePool, OfferingKey, Plan, Pod, PreferredNodeTerm
from joiner.domain.overlays import NodeOverlay, apply_overlays
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.scheduling import SchedulingProblem, solve
from joiner.domain.snapshot import Snapshot
from joiner.domain.volumes import VolumeTopology, apply_volumes

__all__ = ["instance_types_by_pool", "build_problem", "nominated_pods", "plan_snapshot", "zone_id_requirements", "with_zone_ids"]


def zone_id_requirements(requirements: Requirements, zone_ids: Mapping[str, str]) -> Requirements:
    """``requirements`` with a requirement on ``topology.k8s.aws/zone-id`` also stated on the
    zone: the zones whose id it allows (none when the ids are not known), so every zone choice
    of the planner and of the launch honours it."""
    wanted = requirements.get(wk.ZONE_ID)
    if wanted is None:
        return requirements
    return requirements.add(Requirement(wk.ZONE, False, frozenset(zone for zone, zone_id in zone_ids.items() if wanted.has(zone_id))))


def _zone_id_pod(pod: Pod, zone_ids: Mapping[str, str]) -> Pod:
    def topology(key: str) -> str:
        return wk.ZONE if key == wk.ZONE_ID else key  # one zone id per zone: the same domains

    return dataclasses.replace(
        pod,
        node_selector=zone_id_requirements(pod.node_selector, zone_ids),
        required_node_affinity=tuple(zone_id_requirements(term, zone_ids) for term in pod.required_node_affinity),
        preferred_node_affinity=tuple(PreferredNodeTerm(t.weight, zone_id_requirements(t.requirements, zone_ids)) for t in pod.preferred_node_affinity),
        pod_affinity=tuple(dataclasses.replace(t, topology_key=topology(t.topology_key)) for t in pod.pod_affinity),
        pod_anti_affinity=tuple(dataclasses.replace(t, topology_key=topology(t.topology_key)) for t in pod.pod_anti_affinity),
        topology_spread=tuple(dataclasses.replace(t, topology_key=topology(t.topology_key)) for t in pod.topology_spread),
    )


def _mentions_zone_id(pod: Pod) -> bool:
    return (
        wk.ZONE_ID in pod.node_selector
        or any(wk.ZONE_ID in term for term in pod.required_node_affinity)
        or any(wk.ZONE_ID in term.requirements for term in pod.preferred_node_affinity)
        or any(t.topology_key == wk.ZONE_ID for t in (*pod.pod_affinity, *pod.pod_anti_affinity))
        or any(t.topology_key == wk.ZONE_ID for t in pod.topology_spread)
    )


def with_zone_ids(pods: Iterable[Pod], pools: Iterable[NodePool], zone_ids: Mapping[str, str]) -> tuple[tuple[Pod, ...], tuple[NodePool, ...]]:
    """Pods and NodePools with zone-id requirements and topology keys restated on the zone
    (see :func:`zone_id_requirements`); objects that do not mention zone ids are kept as they are."""
    return (
        tuple(_zone_id_pod(p, zone_ids) if _mentions_zone_id(p) else p for p in pods),
        tuple(dataclasses.replace(p, requirements=zone_id_requirements(p.requirements, zone_ids)) if wk.ZONE_ID in p.requirements else p for p in pools),
    )


def instance_types_by_pool(
    node_pools: Iterable[NodePool],
    node_classes: Iterable[NodeClass],
    catalog: Catalog,
    overlays: Iterable[NodeOverlay] = (),
) -> dict[str, tuple[InstanceType, ...]]:
    """Instance types per NodePool, built as its NodeClass makes them (kubelet settings, root
    volume, instance-store policy: :meth:`~joiner.domain.catalog.Catalog.for_node_class`), with
    the NodeOverlays applied (:func:`joiner.domain.overlays.apply_overlays`).

    A NodePool whose NodeClass is missing gets no instance types: it cannot launch, and
    the plan says so for every pod that only it could host.
    """
    classes = {node_class.name: node_class for node_class in node_classes}
    pools = sorted(node_pools, key=lambda p: p.name)
    result: dict[str, tuple[InstanceType, ...]] = {}
    for pool in pools:
        node_class = classes.get(pool.node_class)
        result[pool.name] = catalog.for_node_class(node_class) if node_class is not None else ()
    overlays = tuple(overlays)
    if overlays:
        result = dict(apply_overlays(result, overlays, {pool.name: pool for pool in pools}).instance_types)
    return result


def nominated_pods(pods: Iterable[Pod], nodes: Collection[str], planned: Collection[str]) -> tuple[Pod, ...]:
    """The unbound pods nominated to one of ``nodes`` (and not among the ``planned`` keys), as
    if bound there: kube-scheduler keeps their requests free on that node from pods of equal
    or lower priority, so the plan must not count that room as free either."""
    return tuple(
        dataclasses.replace(pod, node_name=pod.nominated_node)
        for pod in pods
        if pod.node_name is None and pod.nominated_node in nodes and pod.key not in planned and not pod.deleting and not pod.is_terminal
    )


def build_problem(
    snapshot: Snapshot,
    catalog: Catalog,
    *,
    pending: Iterable[Pod] | None = None,
    in_flight: Iterable[InFlightClaim] = (),
    unavailable: frozenset[OfferingKey] = frozenset(),
    exclude_nodes: frozenset[str] = frozenset(),
) -> SchedulingProblem:
    """A scheduling problem for the snapshot's pending pods (or ``pending``).

    ``exclude_nodes`` removes nodes (and the pods bound to them) from the existing
    capacity: used to re-plan an interrupted node's pods or to simulate consolidation.
    """
    nodes = tuple(sorted((n for n in snapshot.nodes if n.name not in exclude_nodes and not n.deleting), key=lambda n: n.name))
    pods = tuple(sorted(snapshot.pending_pods if pending is None else pending, key=lambda p: p.key))
    bound = tuple(
        sorted(
            (
                *(p for p in snapshot.bound_pods if p.node_name not in exclude_nodes),
                *nominated_pods(snapshot.pods, {n.name for n in nodes if n.accepts_pods}, {p.key for p in pods}),
            ),
            key=lambda p: p.key,
        )
    )
    if snapshot.volumes_known:
        topology = apply_volumes(pods, bound, nodes, snapshot.volume_claims, snapshot.persistent_volumes, snapshot.storage_classes, snapshot.csi_nodes)
    else:  # the volume objects could not be read: plan as without volume topology rather than not at all
        topology = VolumeTopology(pods, {}, {})
    pending_pods, pools = with_zone_ids(topology.pods, (p for p in snapshot.node_pools if not p.deleting), catalog.zone_ids)
    bound_pods = with_zone_ids(bound, (), catalog.zone_ids)[0]
    return SchedulingProblem(
        pending=pending_pods,
        blocked=topology.blocked,
        free_attachments=topology.free_attachments,
        nodes=nodes,
        bound_pods=bound_pods,
        daemonsets=tuple(sorted(snapshot.daemonsets, key=lambda d: (d.namespace, d.name))),
        daemon_pods=snapshot.daemonset_pods,
        # A NodePool being deleted launches nothing new (its nodes stay until it is gone).
        node_pools=tuple(sorted(pools, key=lambda p: p.name)),
        instance_types=instance_types_by_pool(snapshot.node_pools, snapshot.node_classes, catalog, snapshot.node_overlays),
        in_flight=tuple(sorted(in_flight, key=lambda c: c.name)),
        unavailable=unavailable,
        catalog_names=frozenset(catalog.names),
        catalog_region=catalog.region or "",
        node_classes=frozenset(node_class.name for node_class in snapshot.node_classes),
    )


def plan_snapshot(snapshot: Snapshot, catalog: Catalog) -> Plan:
    """Plan launches for every pending pod of a snapshot."""
    return solve(build_problem(snapshot, catalog))


DEFAULT_KUBELET = KubeletConfig()
