"""The scheduling problem: what the scheduling core is asked to place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from joiner.domain.model import DaemonSet, InFlightClaim, InstanceType, Node, NodePool, OfferingKey, Pod
from joiner.domain.resources import Resources
from joiner.domain.scheduling.bound import BoundIndex

__all__ = ["SchedulingProblem"]


@dataclass(frozen=True)
class SchedulingProblem:
    """Pods to place and everything that constrains where they can go.

    ``instance_types`` holds, per NodePool name, the instance types as that pool's
    NodeClass kubelet settings make them. ``in_flight`` are launches that are not Nodes
    yet: their capacity takes pods and counts against limits. ``unavailable`` offerings
    (recent capacity errors) are never chosen. ``pool_usage``, when non-empty, replaces
    the usage computed from Nodes labelled ``joiner.dev/nodepool`` plus in-flight claims.
    ``catalog_names`` (every type of the catalog, when known) and ``catalog_region`` let a
    requirement naming a type the catalog lacks say so.
    """

    pending: tuple[Pod, ...]
    nodes: tuple[Node, ...] = ()
    bound_pods: tuple[Pod, ...] = ()
    daemonsets: tuple[DaemonSet, ...] = ()
    node_pools: tuple[NodePool, ...] = ()
    instance_types: Mapping[str, tuple[InstanceType, ...]] = field(default_factory=dict)
    in_flight: tuple[InFlightClaim, ...] = ()
    unavailable: frozenset[OfferingKey] = frozenset()
    pool_usage: Mapping[str, Resources] = field(default_factory=dict)
    catalog_names: frozenset[str] = frozenset()
    catalog_region: str = ""
    #: The NodeClasses that exist (None: not known), so a NodePool naming another one is
    #: reported as such rather than as having no instance types.
    node_classes: frozenset[str] | None = None
    #: Pods that must wait whatever the capacity (their volumes cannot be placed yet), with
    #: the reason: reported unschedulable, never placed.
    blocked: Mapping[str, str] = field(default_factory=dict)
    #: Per existing node, per CSI driver, how many more volumes it may attach.
    free_attachments: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: Pods DaemonSets own, bound or not (``bound_pods`` may hold some of them too): each
    #: DaemonSet's newest pod gives its requests (Karpenter's representative pod).
    daemon_pods: tuple[Pod, ...] = ()
    #: Indexes over ``bound_pods`` shared by the problems solved over one cluster (used only
    #: while ``bound_pods`` is the tuple it indexes); never part of the problem's value.
    bound_index: BoundIndex | None = field(default=None, compare=False, repr=False)

    def canonical(self) -> SchedulingProblem:
        """The same problem with every collection in a total order, so any input order
        plans identically. Static NodePools (``spec.replicas``) never launch for pods (their
        nodes are existing capacity like any other): they are left out."""
        return SchedulingProblem(
            pending=tuple(sorted(self.pending, key=lambda p: (p.namespace, p.name, p.uid))),
            nodes=tuple(sorted(self.nodes, key=lambda n: n.name)),
            bound_pods=self._canonical_bound(),
            daemonsets=tuple(sorted(self.daemonsets, key=lambda d: (d.namespace, d.name))),
            node_pools=tuple(sorted((p for p in self.node_pools if not p.static), key=lambda p: (-p.weight, p.name))),
            instance_types={name: tuple(sorted(types, key=lambda t: t.name)) for name, types in sorted(self.instance_types.items())},
            in_flight=tuple(sorted(self.in_flight, key=lambda c: c.name)),
            unavailable=self.unavailable,
            pool_usage=dict(sorted(self.pool_usage.items())),
            catalog_names=self.catalog_names,
            catalog_region=self.catalog_region,
            node_classes=self.node_classes,
            blocked=dict(sorted(self.blocked.items())),
            free_attachments={name: dict(sorted(free.items())) for name, free in sorted(self.free_attachments.items())},
            daemon_pods=tuple(sorted(self.daemon_pods, key=lambda p: (p.namespace, p.name, p.uid))),
            bound_index=self.bound_index,
        )

    def shared_index(self) -> BoundIndex | None:
        """The bound-pod index when it indexes this problem's ``bound_pods``."""
        index = self.bound_index
        return index if index is not None and index.serves(self.bound_pods) else None

    def _canonical_bound(self) -> tuple[Pod, ...]:
        index = self.shared_index()
        if index is not None:
            return index.canonical()
        return tuple(sorted(self.bound_pods, key=lambda p: (p.namespace, p.name, p.uid)))
