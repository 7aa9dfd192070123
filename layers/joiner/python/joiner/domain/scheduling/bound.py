"""What many scheduling problems over one cluster share: indexes of its bound pods.

A disruption pass solves several problems over the same cluster (each consolidation
simulation excludes other candidates' nodes). Built once from the pass's bound pods and
handed to each :class:`~joiner.domain.scheduling.problem.SchedulingProblem` with that same
tuple, a :class:`BoundIndex` spares every simulation its walk over all of them: the pods
sorted, grouped by node and by label set, each node's usage, which label sets a topology
selector selects. A simulation's excluded nodes are simply absent from its problem's nodes:
every index is read through the nodes the engine targets, so pods on other nodes count for
nothing, as if they had been filtered out. A problem whose ``bound_pods`` is not the indexed
tuple ignores the index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from joiner.domain.model import DaemonSet, HostPort, LabelSelector, Pod, PodAffinityTerm
from joiner.domain.resources import Resources

__all__ = ["BoundIndex", "LabelGroup", "NodeUsage"]


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """What a node's bound, non-terminal pods take: requests, host ports, DaemonSets present."""

    used: Resources
    ports: tuple[HostPort, ...]
    daemonsets: frozenset[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class LabelGroup:
    """Live bound pods of one namespace sharing one label set, counted per node."""

    namespace: str
    labels: Mapping[str, str]
    signature: frozenset[tuple[str, str]]
    per_node: tuple[tuple[str, int], ...]


class BoundIndex:
    """Lazily built indexes over ``pods`` (one cluster's bound pods); not thread-safe."""

    __slots__ = ("source", "_canonical", "_by_node", "_usage", "_label_groups", "_anti", "_by_pair", "_selected", "_running")

    def __init__(self, pods: tuple[Pod, ...]) -> None:
        self.source = pods
        self._canonical: tuple[Pod, ...] | None = None
        self._by_node: dict[str, list[Pod]] | None = None
        self._usage: dict[str, NodeUsage] = {}
        self._label_groups: tuple[LabelGroup, ...] | None = None
        self._anti: tuple[tuple[Pod, tuple[PodAffinityTerm, ...]], ...] | None = None
        self._by_pair: dict[tuple[str, str], list[int]] | None = None
        self._selected: dict[tuple[frozenset[str] | None, LabelSelector], tuple[LabelGroup, ...]] = {}
        self._running: tuple[tuple[DaemonSet, ...], tuple[Pod, ...], tuple[DaemonSet, ...]] | None = None

    def serves(self, pods: tuple[Pod, ...]) -> bool:
        """Whether ``pods`` is the indexed tuple (as given, or as :meth:`canonical` sorted it)."""
        return pods is self.source or (self._canonical is not None and pods is self._canonical)

    def canonical(self) -> tuple[Pod, ...]:
        """The pods in (namespace, name, uid) order."""
        if self._canonical is None:
            self._canonical = tuple(sorted(self.source, key=lambda p: (p.namespace, p.name, p.uid)))
        return self._canonical

    def by_node(self) -> dict[str, list[Pod]]:
        """Non-terminal pods by node name, in canonical order (read-only)."""
        if self._by_node is None:
            found: dict[str, list[Pod]] = {}
            for pod in self.canonical():
                if pod.node_name is None or pod.is_terminal:
                    continue
                found.setdefault(pod.node_name, []).append(pod)
            self._by_node = found
        return self._by_node

    def usage(self, node: str) -> NodeUsage:
        found = self._usage.get(node)
        if found is None:
            pods = self.by_node().get(node, [])
            ports: list[HostPort] = []
            present = set()
            for pod in pods:
                ports.extend(pod.host_ports)
                if pod.is_daemonset_pod and pod.owner_name:
                    present.add((pod.namespace, pod.owner_name))
            found = NodeUsage(Resources.total(pod.requests for pod in pods), tuple(ports), frozenset(present))
            self._usage[node] = found
        return found

    def label_groups(self) -> tuple[LabelGroup, ...]:
        """Live pods (neither deleting nor terminal) by namespace and label set, in the order
        their first pod comes in canonical order."""
        if self._label_groups is None:
            counts: dict[tuple[str, frozenset[tuple[str, str]]], tuple[Mapping[str, str], dict[str, int]]] = {}
            by_identity: dict[tuple[str, int], frozenset[tuple[str, str]]] = {}
            for pod in self.canonical():
                if pod.deleting or pod.is_terminal or pod.node_name is None:
                    continue
                signature = by_identity.get((pod.namespace, id(pod.labels)))
                if signature is None:
                    signature = frozenset(pod.labels.items())
                    by_identity[(pod.namespace, id(pod.labels))] = signature
                entry = counts.get((pod.namespace, signature))
                if entry is None:
                    entry = (pod.labels, {})
                    counts[(pod.namespace, signature)] = entry
                per_node = entry[1]
                per_node[pod.node_name] = per_node.get(pod.node_name, 0) + 1
            self._label_groups = tuple(
                LabelGroup(namespace, labels, signature, tuple(per_node.items())) for (namespace, signature), (labels, per_node) in counts.items()
            )
        return self._label_groups

    def required_anti(self) -> tuple[tuple[Pod, tuple[PodAffinityTerm, ...]], ...]:
        """Live bound pods with required anti-affinity terms, and those terms."""
        if self._anti is None:
            found = []
            for pod in self.canonical():
                if pod.deleting or pod.is_terminal or pod.node_name is None:
                    continue
                required = tuple(t for t in pod.pod_anti_affinity if t.weight is None)
                if required:
                    found.append((pod, required))
            self._anti = tuple(found)
        return self._anti

    def selected(self, namespaces: frozenset[str] | None, selector: LabelSelector | None) -> tuple[LabelGroup, ...]:
        """The label groups a term over ``namespaces`` (None: any) with ``selector`` selects, in
        :meth:`label_groups` order; remembered per term, found through the selector's first
        ``matchLabels`` pair where it has one."""
        if selector is None:
            return ()
        key = (namespaces, selector)
        found = self._selected.get(key)
        if found is None:
            groups = self.label_groups()
            if self._by_pair is None:
                by_pair: dict[tuple[str, str], list[int]] = {}
                for position, group in enumerate(groups):
                    for pair in group.signature:
                        by_pair.setdefault(pair, []).append(position)
                self._by_pair = by_pair
            candidates: Iterable[LabelGroup]
            if selector.match_labels:
                candidates = (groups[i] for i in self._by_pair.get(selector.match_labels[0], ()))
            else:
                candidates = groups
            found = tuple(g for g in candidates if (namespaces is None or g.namespace in namespaces) and selector.matches(g.labels))
            self._selected[key] = found
        return found

    def running(
        self,
        daemonsets: tuple[DaemonSet, ...],
        daemon_pods: tuple[Pod, ...],
        compute: Callable[[tuple[DaemonSet, ...], Iterable[Pod]], tuple[DaemonSet, ...]],
    ) -> tuple[DaemonSet, ...]:
        """``compute(daemonsets, pods)`` over these pods and ``daemon_pods``, remembered for
        equal ``daemonsets`` and ``daemon_pods`` (compared item by item, identical items at once)."""
        last = self._running
        if last is not None and last[0] == daemonsets and last[1] == daemon_pods:
            return last[2]
        result = compute(daemonsets, (*self.canonical(), *daemon_pods))
        self._running = (daemonsets, daemon_pods, result)
        return result
