"""Everything derived from a :class:`SchedulingProblem` that stays fixed while planning.

Shared by the optimising run and the first-fit-decreasing baseline so that instance-type
filtering, shapes and compatibility checks are computed once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from joiner.domain import labels as wk
from joiner.domain.model import DaemonSet, Node, NodePool, Pod, Taint
from joiner.domain.requirements import Requirements
from joiner.domain.resources import EMPTY, Resources
from joiner.domain.scheduling.problem import SchedulingProblem
from joiner.domain.scheduling.shapes import NEGATIVE_OPERATORS, NODES_LIMIT, Pool, Shape, ShapeRegistry, format_taint, untolerated
from joiner.domain.scheduling.variants import Variant

__all__ = ["Context", "EPHEMERAL_TAINT_KEYS"]

#: Taints a node carries while it starts; ignored on nodes that are not ready/initialized.
EPHEMERAL_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/network-unavailable",
        "node.cloudprovider.kubernetes.io/uninitialized",
    }
)


class Context:
    """Pools, dimensions, shapes and static-compatibility caches for one problem."""

    def __init__(self, problem: SchedulingProblem) -> None:
        problem = problem.canonical()
        self.problem = problem
        names: set[str] = set()
        for pod in problem.pending:
            names.update(name for name, value in pod.requests.items() if value > 0)
        # Every resource a DaemonSet requests: a type too small for the DaemonSets in any of
        # them cannot host the pending pods, whatever those request.
        for daemon in problem.daemonsets:
            names.update(name for name, value in daemon.pod.requests.items() if value > 0)
        self.dims: tuple[str, ...] = tuple(sorted(names))
        self.dim_index = {name: i for i, name in enumerate(self.dims)}
        usage = self._usage(problem)
        index = problem.shared_index()
        if index is not None:
            daemonsets = index.running(problem.daemonsets, problem.daemon_pods, _as_running)
        else:
            daemonsets = _as_running(problem.daemonsets, (*problem.bound_pods, *problem.daemon_pods))
        self.pools = [
            Pool(i, pool, problem.instance_types.get(pool.name, ()), daemonsets, self.dims, problem.unavailable, usage.get(pool.name, EMPTY))
            for i, pool in enumerate(problem.node_pools)
        ]
        self.any_prefer_no_schedule = any(pool.has_prefer_no_schedule for pool in self.pools)
        self.registry = ShapeRegistry()
        self.template_shapes = [self.registry.get(pool, pool.template) for pool in self.pools]
        for pool in problem.node_pools:
            for key, value in pool.template_requirements().labels().items():
                self.registry.values_by_key.setdefault(key, set()).add(value)
            for key, requirement in pool.requirements.items():
                if not requirement.complement:
                    self.registry.values_by_key.setdefault(key, set()).update(requirement.values)
        for node in problem.nodes:
            for key, value in node.labels.items():
                self.registry.values_by_key.setdefault(wk.normalize_label_key(key), set()).add(value)
        self.static_ids: dict[tuple[object, ...], int] = {}
        self._pool_checks: dict[tuple[int, int], Shape | str] = {}

    @staticmethod
    def _usage(problem: SchedulingProblem) -> dict[str, Resources]:
        limited = {pool.name: pool.limits for pool in problem.node_pools if pool.limits}
        computed: dict[str, Resources] = {}
        nodes_count: dict[str, int] = {}
        for node in problem.nodes:
            name = node.labels.get(wk.NODEPOOL) or node.labels.get("karpenter.sh/nodepool")
            if name in limited:
                computed[name] = computed.get(name, EMPTY) + node.capacity
                nodes_count[name] = nodes_count.get(name, 0) + 1
        for claim in problem.in_flight:
            if claim.node_pool in limited:
                computed[claim.node_pool] = computed.get(claim.node_pool, EMPTY) + claim.capacity
                nodes_count[claim.node_pool] = nodes_count.get(claim.node_pool, 0) + 1
        result: dict[str, Resources] = {}
        for name in limited:
            if problem.pool_usage:
                base = problem.pool_usage.get(name, EMPTY)
            else:
                base = computed.get(name, EMPTY)
            if NODES_LIMIT not in base:
                base = base + Resources({NODES_LIMIT: 1000 * nodes_count.get(name, 0)})
            result[name] = base
        return result

    def static_id(self, variant: Variant) -> int:
        found = self.static_ids.get(variant.static_key)
        if found is None:
            found = len(self.static_ids)
            self.static_ids[variant.static_key] = found
        return found

    def pool_check(self, pool: Pool, variant: Variant) -> Shape | str:
        """The pool template shape merged with the pod's requirements, or why the pod
        cannot use the pool at all (taints, requirements)."""
        key = (pool.index, variant.sid)
        found = self._pool_checks.get(key)
        if found is None:
            found = self._check_pool(pool, variant)
            self._pool_checks[key] = found
        return found

    def _check_pool(self, pool: Pool, variant: Variant) -> Shape | str:
        taint = untolerated(variant.tolerations, pool.taints)
        if taint is not None:
            return f"taint {format_taint(taint)} not tolerated"
        hostname = variant.requirements.get(wk.HOSTNAME)
        if hostname is not None and hostname.operator() not in NEGATIVE_OPERATORS:
            return f"incompatible requirements, key {wk.HOSTNAME}, a new node's hostname is not known in advance"
        if not pool.types:
            known = self.problem.node_classes
            if known is not None and pool.pool.node_class not in known:
                return f"its NodeClass {pool.pool.node_class!r} does not exist"
            return "no instance types available"
        return self.template_shapes[pool.index].merge(variant.sid, variant.requirements)


def _as_running(daemonsets: tuple[DaemonSet, ...], pods: Iterable[Pod]) -> tuple[DaemonSet, ...]:
    """Each DaemonSet with the requests of its newest pod (by creation time; bound or not,
    whatever its phase), when it has any, else its template's: Karpenter's representative
    pod (a LimitRange or a mutating webhook may have changed the requests, and after a
    rollout the newest pod has the new ones). Only the requests are taken: the pod's node
    affinity is the controller's pin to its own node, the template's says where it runs."""
    newest: dict[tuple[str, str], Pod] = {}
    seen: set[tuple[str, str, str]] = set()
    # Pods in name order, replaced only by a strictly newer one: the first of equal creation
    # times wins, as in Karpenter's pass over the listed pods; no creation time is oldest.
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name, p.uid)):
        if pod.owner_kind != "DaemonSet" or not pod.owner_name or (pod.namespace, pod.name, pod.uid) in seen:
            continue
        seen.add((pod.namespace, pod.name, pod.uid))
        key = (pod.namespace, pod.owner_name)
        current = newest.get(key)
        if current is None or (pod.created is not None and (current.created is None or pod.created > current.created)):
            newest[key] = pod
    result = []
    for daemon in daemonsets:
        found = newest.get((daemon.namespace, daemon.name))
        result.append(daemon if found is None else replace(daemon, pod=replace(daemon.pod, requests=found.requests)))
    return tuple(result)


def node_labels(node: Node) -> dict[str, str]:
    labels = wk.normalize_labels(dict(node.labels))
    labels.setdefault(wk.HOSTNAME, node.name)
    return labels


def node_pool_of(pools: list[Pool], name: str | None) -> Pool | None:
    for pool in pools:
        if pool.name == name:
            return pool
    return None


def pool_startup_taints(node_pools: tuple[NodePool, ...], name: str | None) -> tuple[Taint, ...]:
    for pool in node_pools:
        if pool.name == name:
            return pool.startup_taints
    return ()


def requirements_labels(requirements: Requirements) -> dict[str, str]:
    return requirements.labels()
