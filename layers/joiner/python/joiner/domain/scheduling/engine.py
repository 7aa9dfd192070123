"""The constraint-aware placement loop (Karpenter's ``scheduler.go`` semantics).

Pods are grouped into entries of identical pods and taken in first-fit-decreasing order
(CPU, then memory, descending). Each pod tries, in order: existing nodes, in-flight
claims, the claims this plan already opened (in creation order), then a new claim from
each NodePool by weight. A target accepts a pod when its taints are tolerated, its
requirements (for a claim: the claim's requirements merged with the pod's) are
compatible, host ports are free, every topology group allows one of its domains and an
instance type still fits. Identical pods are placed in bulk when their topology terms
allow it (e.g. a hostname anti-affinity pod takes one per node).

Speed comes from never re-checking what cannot change: every rejection that is final
(static incompatibility, resources for a pod size, anti-affinity, hostname spread) is
remembered in a :class:`SkipIndex` so later scans start past it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import ge

from joiner.domain import labels as wk
from joiner.domain.model import DaemonSet, HostPort, Pod, PodAffinityTerm, Taint, TopologySpreadConstraint
from joiner.domain.requirements import Requirements
from joiner.domain.resources import EMPTY, Resources
from joiner.domain.scheduling.bound import BoundIndex
from joiner.domain.scheduling.context import EPHEMERAL_TAINT_KEYS, Context, node_labels
from joiner.domain.scheduling.problem import SchedulingProblem
from joiner.domain.scheduling.shapes import Pool, PoolType, Shape, TypeKey, format_taint, untolerated
from joiner.domain.scheduling.topology import (
    AFFINITY,
    ANTI,
    INVERSE,
    SPREAD,
    UNLIMITED,
    SkipIndex,
    TopologyGroup,
    group_key_for_spread,
    hard_taints,
    resolve_namespaces,
)
from joiner.domain.scheduling.variants import PodSpec, RelaxState, Variant, effective_selector, spec_signature
from joiner.domain.volumes import EBS_CSI_DRIVER, ebs_attach_limit

__all__ = ["Engine", "Target", "Entry"]

FAIL_STATIC, FAIL_SIZE, FAIL_GROUP, FAIL_OTHER = range(4)
_EMPTY_SET: frozenset[str] = frozenset()
_ROOT = RelaxState()


@dataclass(frozen=True, slots=True)
class _DomainSource:
    """One NodePool template (``shape``) or existing node (``labels``) offering ``domains``."""

    domains: frozenset[str]
    taints: tuple[Taint, ...]
    shape: Shape | None = None
    labels: Mapping[str, str] | None = None


class Target:
    """A place pods can go: an existing node, an in-flight claim or a planned claim."""

    __slots__ = (
        "idx",
        "fixed",
        "name",
        "hostname",
        "host_set",
        "labels",
        "label_sets",
        "taints",
        "pool",
        "shape",
        "used",
        "remaining",
        "pods",
        "ports",
        "static_cache",
        "reservation",
        "new_pods",
        "price_cache",
        "volume_free",
    )

    def __init__(self, name: str, hostname: str, fixed: bool) -> None:
        self.idx = -1
        self.fixed = fixed
        self.name = name
        self.hostname = hostname
        self.host_set = frozenset((hostname,))
        self.labels: dict[str, str] = {}
        self.label_sets: dict[str, frozenset[str]] = {}
        self.taints: tuple[Taint, ...] = ()
        self.pool: Pool | None = None
        self.shape: Shape | None = None
        self.used: list[int] = []
        self.remaining: list[int] = []
        self.pods: list[Pod] = []
        self.ports: list[HostPort] = []
        self.static_cache: dict[int, object] = {}
        self.reservation: tuple[int, ...] | None = None
        self.new_pods = 0
        self.price_cache: tuple[object, tuple[int, ...], float] | None = None
        #: Per CSI driver, volumes an existing node may still attach (None: no stated limit).
        self.volume_free: dict[str, int] | None = None

    def label_domains(self, key: str) -> frozenset[str]:
        found = self.label_sets.get(key)
        if found is None:
            value = self.labels.get(key)
            found = frozenset((value,)) if value is not None else _EMPTY_SET
            self.label_sets[key] = found
        return found


class Entry:
    """Identical pending pods waiting for placement."""

    __slots__ = ("eid", "spec", "variant", "pods", "reasons")

    def __init__(self, eid: int, spec: PodSpec, variant: Variant, pods: list[Pod]) -> None:
        self.eid = eid
        self.spec = spec
        self.variant = variant
        self.pods = pods
        self.reasons: list[tuple[str, str]] = []

    def sort_key(self) -> tuple[int, int, str]:
        return (-self.spec.cpu, -self.spec.memory, self.pods[0].key if self.pods else "")


class Engine:
    """One planning run over a :class:`Context`; ``optimize`` defers unconstrained pods
    to the cost packer instead of first-fit."""

    def __init__(self, ctx: Context, optimize: bool) -> None:
        self.ctx = ctx
        self.optimize = optimize
        self.dims = ctx.dims
        self.ndims = len(ctx.dims)
        self.targets: list[Target] = []
        self.n_fixed = 0
        self.specs: dict[tuple[object, ...], PodSpec] = {}
        self.own_groups: dict[tuple[object, ...], TopologyGroup] = {}
        self.inverse_groups: dict[tuple[object, ...], TopologyGroup] = {}
        self.static_skip: dict[int, SkipIndex] = {}
        self.size_skip: dict[tuple[int, ...], SkipIndex] = {}
        self.reserved: dict[int, list[int]] = {pool.index: [0] * len(pool.limited) for pool in ctx.pools}
        self.claims_opened = 0
        self.node_info: dict[str, tuple[dict[str, str], tuple[Taint, ...]]] = {}
        self._sources: dict[str, list[_DomainSource]] = {}
        self._taint_class_cache: dict[str, list[tuple[frozenset[str], tuple[Taint, ...]]]] = {}
        self._selected_cache: dict[int, list[TopologyGroup]] = {}
        self._own_by_pair: dict[tuple[str, str], list[TopologyGroup]] = {}
        self._own_unkeyed: list[TopologyGroup] = []
        self._inverse_select_cache: dict[int, list[TopologyGroup]] = {}
        self.fail_kind = FAIL_OTHER
        self.fail_group: TopologyGroup | None = None
        self.fail_reason = ""
        self._no_fit_texts: dict[tuple[Resources, Resources], str] = {}
        self._reservation: tuple[int, ...] | None = None
        self.deferred: list[Entry] = []
        self.unschedulable: list[Entry] = []
        self._entry_ids = 0
        self._build_specs()
        #: Some pod attaches volumes: new claims get their EBS attach limit.
        self._has_volumes = any(spec.volumes for spec in self.specs.values())
        self._ebs_limits: dict[int, int] = {}
        self._build_fixed_targets()
        self._build_topology()

    # ------------------------------------------------------------------ setup

    def _build_specs(self) -> None:
        self.pod_specs: list[tuple[Pod, PodSpec]] = []
        for pod in self.ctx.problem.pending:
            signature = spec_signature(pod)
            spec = self.specs.get(signature)
            if spec is None:
                spec = PodSpec(len(self.specs), pod)
                self.specs[signature] = spec
            self.pod_specs.append((pod, spec))

    def _daemon_overhead_for_node(
        self, daemonsets: Iterable[DaemonSet], labels: dict[str, str], taints: tuple[Taint, ...], present: frozenset[tuple[str, str]]
    ) -> Resources:
        total = EMPTY
        for daemon in daemonsets:
            if (daemon.namespace, daemon.name) in present:
                continue
            pod = daemon.pod
            if untolerated(pod.tolerations, taints) is not None:
                continue
            terms = [pod.node_selector.intersect(t) for t in pod.required_node_affinity] or [pod.node_selector]
            if not any(term.matches_labels(labels) for term in terms):
                continue
            total = total + pod.requests
        return total

    def _vector(self, resources: Resources) -> list[int]:
        return [resources.get(d, 0) for d in self.dims]

    def _build_fixed_targets(self) -> None:
        problem = self.ctx.problem
        pools_by_name = {pool.name: pool for pool in self.ctx.pools}
        index = problem.shared_index()
        bound_by_node: dict[str, list[Pod]]
        if index is not None:
            bound_by_node = index.by_node()
        else:
            bound_by_node = {}
            for pod in problem.bound_pods:
                if pod.node_name is None or pod.is_terminal:
                    continue
                bound_by_node.setdefault(pod.node_name, []).append(pod)
        nodes = []
        for node in problem.nodes:
            labels = node_labels(node)
            taints = node.taints
            pool_name = labels.get(wk.NODEPOOL)
            if pool_name is not None and (not node.ready or labels.get(wk.INITIALIZED) != "true"):
                startup = set()
                for np in problem.node_pools:
                    if np.name == pool_name:
                        startup = set(np.startup_taints)
                taints = tuple(t for t in taints if t.key not in EPHEMERAL_TAINT_KEYS and t not in startup)
            self.node_info[node.name] = (labels, taints)
            if node.deleting or node.unschedulable:
                continue
            initialized = node.ready and (pool_name is None or labels.get(wk.INITIALIZED) == "true")
            nodes.append((0 if initialized else 1, node.name, node, labels, taints))
        nodes.sort(key=lambda item: (item[0], item[1]))
        for _, _, node, labels, taints in nodes:
            target = Target(node.name, labels[wk.HOSTNAME], True)
            target.labels = labels
            target.taints = taints
            free = problem.free_attachments.get(node.name)
            if free:
                target.volume_free = dict(free)
            if index is not None:
                usage = index.usage(node.name)
                used, present = usage.used, usage.daemonsets
                target.ports.extend(usage.ports)
            else:
                bound = bound_by_node.get(node.name, [])
                used = Resources.total(pod.requests for pod in bound)
                found: set[tuple[str, str]] = set()
                for pod in bound:
                    if pod.host_ports:
                        target.ports.extend(pod.host_ports)
                    if pod.is_daemonset_pod and pod.owner_name:
                        found.add((pod.namespace, pod.owner_name))
                present = frozenset(found)
            overhead = self._daemon_overhead_for_node(problem.daemonsets, labels, taints, present)
            remaining = node.allocatable - used - overhead
            target.remaining = self._vector(remaining)
            self._add_target(target)
        for claim in problem.in_flight:
            pool = pools_by_name.get(claim.node_pool)
            labels = dict(claim.requirements.labels())
            if pool is not None:
                for pt in pool.types:
                    if pt.name == claim.instance_type:
                        labels.update((k, v) for k, v in pt.keys.items() if isinstance(v, str))
                labels.update(pool.template.labels())
            labels.update({wk.ZONE: claim.zone, wk.CAPACITY_TYPE: claim.capacity_type, wk.INSTANCE_TYPE: claim.instance_type, wk.NODEPOOL: claim.node_pool})
            labels[wk.HOSTNAME] = claim.name
            target = Target(claim.name, claim.name, True)
            target.labels = labels
            target.taints = pool.taints if pool is not None else ()
            target.pool = pool
            self.node_info[claim.name] = (labels, target.taints)
            overhead = self._daemon_overhead_for_node(problem.daemonsets, labels, target.taints, frozenset())
            target.remaining = self._vector(claim.allocatable - overhead)
            self._add_target(target)
        self.n_fixed = len(self.targets)

    def _add_target(self, target: Target) -> None:
        target.idx = len(self.targets)
        self.targets.append(target)

    def _build_topology(self) -> None:
        for spec in self.specs.values():
            for spread in spec.all_spreads():
                self._spread_group(spec, spread)
            for term in spec.all_affinity_terms():
                self._term_group(AFFINITY, spec, term)
            for term in spec.all_anti_terms():
                self._term_group(ANTI, spec, term)
            for term in spec.anti_required:
                self._inverse_group(spec.namespace, spec.labels, term)
        index = self.ctx.problem.shared_index()
        bound_inverse: list[tuple[Pod, list[TopologyGroup]]] = []
        if index is not None:
            for pod, required in index.required_anti():
                if pod.node_name in self.node_info:
                    bound_inverse.append((pod, [self._inverse_group(pod.namespace, pod.labels, t) for t in required]))
        else:
            for pod in self.ctx.problem.bound_pods:
                if pod.deleting or pod.is_terminal or pod.node_name not in self.node_info:
                    continue
                required_terms = [t for t in pod.pod_anti_affinity if t.weight is None]
                if required_terms:
                    bound_inverse.append((pod, [self._inverse_group(pod.namespace, pod.labels, t) for t in required_terms]))
        own = list(self.own_groups.values())
        if own and index is not None:
            self._count_indexed(index, own)
            own = []
        by_labels: dict[tuple[str, frozenset[tuple[str, str]]], list[TopologyGroup]] = {}
        #: the same, by the identity of a pod's labels (pods of one workload share the mapping;
        #: every pod, and so its labels, lives as long as this loop)
        by_identity: dict[tuple[str, int], list[TopologyGroup]] = {}
        if own:
            for pod in self.ctx.problem.bound_pods:
                if pod.deleting or pod.is_terminal:
                    continue
                info = self.node_info.get(pod.node_name or "")
                if info is None:
                    continue
                selecting = by_identity.get((pod.namespace, id(pod.labels)))
                if selecting is None:
                    signature = (pod.namespace, frozenset(pod.labels.items()))
                    selecting = by_labels.get(signature)
                    if selecting is None:
                        selecting = [g for g in own if g.selects(pod.namespace, pod.labels)]
                        by_labels[signature] = selecting
                    by_identity[(pod.namespace, id(pod.labels))] = selecting
                labels, taints = info
                for group in selecting:
                    if group.kind == SPREAD and group.filters_nodes and not self._filter_matches_labels(group, labels, taints):
                        continue
                    domain = labels.get(group.key)
                    if domain is not None:
                        group.add((domain,), 1)
        for pod, groups in bound_inverse:
            labels, _ = self.node_info[pod.node_name or ""]
            for group in groups:
                domain = labels.get(group.key)
                if domain is not None:
                    group.add((domain,), 1)
        for spec in self.specs.values():
            self.prepare(spec.variant(_ROOT))

    def _count_indexed(self, index: BoundIndex, own: list[TopologyGroup]) -> None:
        """The own groups' counts of bound pods, from the shared index: per group, the label
        sets it selects, then their pods per targeted node."""
        node_info = self.node_info
        for group in own:
            filters = group.kind == SPREAD and group.filters_nodes
            for label_group in index.selected(group.namespaces, group.selector):
                for node_name, count in label_group.per_node:
                    info = node_info.get(node_name)
                    if info is None:
                        continue
                    labels, taints = info
                    if filters and not self._filter_matches_labels(group, labels, taints):
                        continue
                    domain = labels.get(group.key)
                    if domain is not None:
                        group.add((domain,), count)

    def _spread_group(self, spec: PodSpec, spread: TopologySpreadConstraint) -> TopologyGroup:
        selector = effective_selector(spread.label_selector, spread.match_label_keys, spec.labels)
        node_filter = None
        if spread.node_affinity_policy != "Ignore":
            if spec.required_terms:
                node_filter = tuple(spec.node_selector.intersect(t) for t in spec.required_terms)
            elif spec.node_selector:
                node_filter = (spec.node_selector,)
        tolerations = spec.tolerations if spread.node_taints_policy == "Honor" else None
        key = group_key_for_spread(spread, spec.namespace, selector, node_filter, tolerations)
        group = self.own_groups.get(key)
        if group is None:
            group = TopologyGroup(
                len(self.own_groups) + len(self.inverse_groups),
                SPREAD,
                spread.topology_key,
                frozenset((spec.namespace,)),
                selector,
                spread.max_skew,
                spread.min_domains,
                node_filter,
                tolerations,
                spread.node_affinity_policy != "Ignore",
            )
            self._register_own(key, group)
        return group

    def _term_group(self, kind: int, spec: PodSpec, term: PodAffinityTerm) -> TopologyGroup:
        selector = effective_selector(term.label_selector, term.match_label_keys, spec.labels)
        namespaces = resolve_namespaces(term, spec.namespace)
        key = (kind, term.topology_key, namespaces, selector)
        group = self.own_groups.get(key)
        if group is None:
            group = TopologyGroup(len(self.own_groups) + len(self.inverse_groups), kind, term.topology_key, namespaces, selector)
            self._register_own(key, group)
        return group

    def _register_own(self, key: tuple[object, ...], group: TopologyGroup) -> None:
        """Add an own group, indexed by its selector's first ``matchLabels`` pair (a pod
        without that label cannot be selected) for :meth:`prepare`'s lookup."""
        self.own_groups[key] = group
        selector = group.selector
        if selector is None:
            return
        if selector.match_labels:
            self._own_by_pair.setdefault(selector.match_labels[0], []).append(group)
        else:
            self._own_unkeyed.append(group)

    def _inverse_group(self, namespace: str, labels: Mapping[str, str], term: PodAffinityTerm) -> TopologyGroup:
        selector = effective_selector(term.label_selector, term.match_label_keys, labels)
        namespaces = resolve_namespaces(term, namespace)
        key = (INVERSE, term.topology_key, namespaces, selector)
        group = self.inverse_groups.get(key)
        if group is None:
            group = TopologyGroup(len(self.own_groups) + len(self.inverse_groups), INVERSE, term.topology_key, namespaces, selector)
            self.inverse_groups[key] = group
        return group

    def selects(self, group: TopologyGroup, spec: PodSpec) -> bool:
        found = group.select_cache.get(spec.index)
        if found is None:
            found = group.selects(spec.namespace, spec.labels)
            group.select_cache[spec.index] = found
        return found

    def prepare(self, variant: Variant) -> Variant:
        """Bind a variant to this run's topology groups (idempotent)."""
        if variant.sid >= 0:
            return variant
        spec = variant.spec
        variant.sid = self.ctx.static_id(variant)
        variant.size = tuple(spec.requests.get(d, 0) for d in self.dims)
        own = [self._spread_group(spec, s) for s in variant.spreads]
        own += [self._term_group(AFFINITY, spec, t) for t in variant.affinity_terms]
        own += [self._term_group(ANTI, spec, t) for t in variant.anti_terms]
        inverse = self._inverse_select_cache.get(spec.index)
        if inverse is None:
            inverse = [g for g in self.inverse_groups.values() if self.selects(g, spec)]
            self._inverse_select_cache[spec.index] = inverse
        variant.groups = own + inverse
        variant.monotonic_groups = [(g, g.self_skip if g.kind == SPREAD and self.selects(g, spec) else g.skip) for g in variant.groups if g.monotonic]
        variant.bulk_groups = [g for g in own if g.kind in (SPREAD, ANTI) and self.selects(g, spec)]
        selected = self._selected_cache.get(spec.index)
        if selected is None:
            candidates = list(self._own_unkeyed)
            for pair in spec.labels.items():
                candidates.extend(self._own_by_pair.get(pair, ()))
            candidates.sort(key=lambda g: g.gid)
            selected = [g for g in candidates if self.selects(g, spec)]
            self._selected_cache[spec.index] = selected
        variant.selected_by = selected
        variant.inverse_owned = [self._inverse_group(spec.namespace, spec.labels, t) for t in spec.anti_required]
        return variant

    def is_free(self, spec: PodSpec) -> bool:
        """Pods no topology term involves and that attach no volumes: the cost packer may place
        them anywhere."""
        variant = spec.variant(_ROOT)
        return (
            not spec.has_pod_constraints
            and not variant.selected_by
            and not variant.groups
            and len(spec.required_terms) <= 1
            and not spec.volumes  # attach limits are per node: the cost packer does not track them
        )

    # ------------------------------------------------------------------ topology

    def _filter_matches_labels(self, group: TopologyGroup, labels: dict[str, str], taints: tuple[Taint, ...]) -> bool:
        if group.node_filter is not None and not any(r.matches_labels(labels) for r in group.node_filter):
            return False
        if group.filter_tolerations is not None and untolerated(group.filter_tolerations, hard_taints(taints)) is not None:
            return False
        return True

    def filter_matches(self, group: TopologyGroup, target: Target, shape: Shape | None) -> bool:
        if target.fixed:
            key: object = ("t", target.idx)
            found = group.filter_cache.get(key)
            if found is None:
                found = self._filter_matches_labels(group, target.labels, target.taints)
                group.filter_cache[key] = found
            return found
        assert shape is not None
        key = shape.sid
        found = group.filter_cache.get(key)
        if found is None:
            found = True
            if group.node_filter is not None and not any(shape.requirements.compatible(r) is None for r in group.node_filter):
                found = False
            if found and group.filter_tolerations is not None and untolerated(group.filter_tolerations, hard_taints(shape.pool.taints)) is not None:
                found = False
            group.filter_cache[key] = found
        return found

    def sources(self, key: str) -> list[_DomainSource]:
        """Where ``key``'s domains come from: every NodePool's template (the values its nodes
        could carry) and every existing node (its value)."""
        found = self._sources.get(key)
        if found is None:
            found = []
            for pool, shape in zip(self.ctx.pools, self.ctx.template_shapes):
                domains = shape.domains(key)
                if domains:
                    found.append(_DomainSource(domains, pool.taints, shape=shape))
            for labels, taints in self.node_info.values():
                value = labels.get(key)
                if value is not None:
                    found.append(_DomainSource(frozenset((value,)), taints, labels=labels))
            self._sources[key] = found
        return found

    def _taint_classes(self, key: str) -> list[tuple[frozenset[str], tuple[Taint, ...]]]:
        """``key``'s sources reduced to their distinct (domains, hard taints): all a spread
        without a node filter tells its sources apart by."""
        found = self._taint_class_cache.get(key)
        if found is None:
            seen: dict[tuple[frozenset[str], tuple[Taint, ...]], None] = {}
            for source in self.sources(key):
                seen.setdefault((source.domains, hard_taints(source.taints)), None)
            found = list(seen)
            self._taint_class_cache[key] = found
        return found

    def eligible(self, group: TopologyGroup, variant: Variant) -> frozenset[str]:
        """The spread's domains for this pod: those of the sources its taints policy lets in
        and, under ``nodeAffinityPolicy: Honor``, only sources its *required* node affinity
        and selector can use, restricted to the values those allow for the key (Karpenter
        builds this filter from required terms only: a preference being tried as required
        never narrows the domains). The pod counts only through its tolerations, so the
        answer is shared by every variant tolerating the same."""
        found = group.eligible_cache.get(variant.sid)
        if found is not None:
            return found
        tolerations = variant.tolerations if group.filter_tolerations is not None else None
        found = group.eligible_by_tolerations.get(tolerations)
        if found is None:
            domains: set[str] = set()
            terms = group.node_filter if group.honor_affinity else None
            if terms is None:
                for source_domains, taints in self._taint_classes(group.key):
                    if tolerations is not None and untolerated(tolerations, taints) is not None:
                        continue
                    domains.update(source_domains)
            else:
                for source in self.sources(group.key):
                    if tolerations is not None and untolerated(tolerations, hard_taints(source.taints)) is not None:
                        continue
                    for term in terms:
                        if source.shape is not None:
                            if source.shape.requirements.compatible(term) is not None:
                                continue
                        elif source.labels is not None and not term.matches_labels(source.labels):
                            continue
                        requirement = term.get(group.key)
                        domains.update(d for d in source.domains if requirement is None or requirement.has(d))
            found = frozenset(domains)
            group.eligible_by_tolerations[tolerations] = found
        group.eligible_cache[variant.sid] = found
        return found

    def _spread_min(self, group: TopologyGroup, variant: Variant) -> int:
        if group.hostname:
            return 0
        eligible = self.eligible(group, variant)
        counts = group.counts
        low = min((counts.get(d, 0) for d in eligible), default=0)
        if group.min_domains is not None and len(eligible) < group.min_domains:
            low = 0
        return low

    def allowed(self, group: TopologyGroup, variant: Variant, domains: frozenset[str]) -> frozenset[str]:
        """The domains among ``domains`` the group lets this pod use (Karpenter's
        ``TopologyGroup.Get``, with deterministic choices)."""
        kind = group.kind
        counts = group.counts
        if kind in (ANTI, INVERSE):
            free = domains if not group.positive else frozenset(d for d in domains if not counts.get(d))
            if kind == ANTI and len(free) > 1 and self.selects(group, variant.spec):
                # Self anti-affinity: commit to one domain so the next replica can use
                # another (Karpenter blocks every domain the claim might land in, which
                # places one replica per batch).
                return frozenset((min(free),))
            return free
        if kind == AFFINITY:
            requirement = variant.requirements.get(group.key)
            positive = group.positive
            if positive and (requirement is None or any(requirement.has(d) for d in positive)):
                return frozenset(d for d in domains if d in positive and (requirement is None or requirement.has(d)))
            if self.selects(group, variant.spec) and domains:
                return frozenset((min(domains),))
            return _EMPTY_SET
        low = self._spread_min(group, variant)
        increment = 1 if self.selects(group, variant.spec) else 0
        best = None
        best_count = 0
        for domain in sorted(domains) if len(domains) > 1 else domains:
            count = counts.get(domain, 0) + increment
            if count - low <= group.max_skew and (best is None or count < best_count):
                best, best_count = domain, count
        return frozenset((best,)) if best is not None else _EMPTY_SET

    def domains_of(self, target: Target, shape: Shape | None, key: str) -> frozenset[str]:
        if key == wk.HOSTNAME:
            return target.host_set
        if target.fixed:
            return target.label_domains(key)
        return shape.domains(key)  # type: ignore[union-attr]

    def bulk_cap(self, group: TopologyGroup, variant: Variant, target: Target, shape: Shape | None) -> int:
        if group.kind == ANTI:
            return 1
        if group.filters_nodes and not self.filter_matches(group, target, shape):
            return UNLIMITED
        domains = self.domains_of(target, shape, group.key)
        if len(domains) != 1:
            return UNLIMITED
        (domain,) = domains
        low = self._spread_min(group, variant)
        return max(1, group.max_skew + low - group.counts.get(domain, 0))

    def record(self, variant: Variant, target: Target, shape: Shape | None, count: int) -> None:
        for group in variant.selected_by:
            if group.kind == SPREAD and group.filters_nodes and not self.filter_matches(group, target, shape):
                continue
            domains = self.domains_of(target, shape, group.key)
            if group.kind == ANTI or len(domains) == 1:
                group.add(domains, count)
        for group in variant.inverse_owned:
            group.add(self.domains_of(target, shape, group.key), count)

    # ------------------------------------------------------------------ fitting

    def _fixed_static(self, target: Target, variant: Variant) -> object:
        taint = untolerated(variant.tolerations, target.taints)
        if taint is not None:
            return f"taint {format_taint(taint)} not tolerated"
        if not variant.requirements.matches_labels(target.labels):
            return "node labels do not satisfy requirements"
        return True

    def claim_fit(self, target: Target, shape: Shape, size: tuple[int, ...], want: int, max_price: float | None = None) -> int:
        """How many pods of ``size`` (up to ``want``) the claim can take with ``shape``."""
        pool = shape.pool
        self._reservation = None
        if pool.limited or shape.min_values or max_price is not None:
            return self._claim_fit_slow(target, shape, size, want, max_price)
        return self._frontier_fit(shape, target.used, size, want)

    def _frontier_fit(self, shape: Shape, used: list[int], size: tuple[int, ...], want: int) -> int:
        """The most pods of ``size`` (up to ``want``) any of the shape's types holds on top of
        ``used``: only the Pareto frontier of their capacities can hold the most."""
        best = 0
        ndims = self.ndims
        for capacity in shape.typeset.frontier:
            most = want
            for i in range(ndims):
                room = capacity[i] - used[i]
                s = size[i]
                if room < 0:
                    most = 0
                    break
                if s:
                    q = room // s
                    if q < most:
                        most = q
                        if most <= best:
                            break
            if most > best:
                best = most
                if best >= want:
                    break
        return best

    def _claim_fit_slow(self, target: Target, shape: Shape, size: tuple[int, ...], want: int, max_price: float | None) -> int:
        pool = shape.pool
        ts = shape.typeset
        used = target.used
        budget = None
        if pool.limited:
            reserved = self.reserved[pool.index]
            own = target.reservation or (0,) * len(pool.limited)
            budget = [rem - (res - mine) for rem, res, mine in zip(pool.remaining, reserved, own)]
            if max_price is None and not shape.min_values and all(map(ge, budget, ts.largest_limit)):
                return self._fit_within_slack_limits(shape, used, size, want)
        candidates: list[tuple[int, PoolType]] = []
        blocked: set[str] = set()
        start = 0
        if max_price is not None:
            # Types cheaper than the claim's current price cannot hold its pods already.
            start = bisect_left(ts.prices, max_price - 1e-9)
        for pt, price in zip(ts.types[start:], ts.prices[start:]):
            if max_price is not None and price > max_price + 1e-12:
                break
            most = want
            capacity = pt.effective
            for i in range(self.ndims):
                room = capacity[i] - used[i]
                if room < 0:
                    most = 0
                    break
                if size[i]:
                    q = room // size[i]
                    if q < most:
                        most = q
            if most <= 0:
                continue
            if budget is not None:
                over = [r for r, c, b in zip(pool.limited, pt.limit_capacity, budget) if c > b]
                if over:
                    blocked.update(over)
                    continue
            candidates.append((most, pt))
        if not candidates:
            if blocked:
                self.fail_reason = f"limit reached ({', '.join(sorted(blocked))})"
            return 0
        best = max(most for most, _ in candidates)
        if shape.min_values:
            for level in sorted({most for most, _ in candidates}, reverse=True):
                chosen = [pt for most, pt in candidates if most >= level]
                if _satisfies_min_values(chosen, shape.min_values):
                    best = level
                    break
            else:
                self.fail_reason = "minValues not satisfied: " + ", ".join(f"{k}>={v}" for k, v in sorted(shape.min_values.items()))
                return 0
        if pool.limited:
            chosen = [pt for most, pt in candidates if most >= best]
            if shape.min_values:
                prefix: list[PoolType] = []
                for pt in chosen:
                    prefix.append(pt)
                    if _satisfies_min_values(prefix, shape.min_values):
                        break
                chosen = prefix
            else:
                chosen = chosen[:1]
            self._reservation = tuple(max(pt.limit_capacity[i] for pt in chosen) for i in range(len(pool.limited)))
        return best

    def _fit_within_slack_limits(self, shape: Shape, used: list[int], size: tuple[int, ...], want: int) -> int:
        """:meth:`_claim_fit_slow` when the pool's limits leave room for any of the types (no
        price cap, no minValues): the most any type holds comes from the capacity frontier,
        and the claim reserves the limits of the cheapest type holding that many, found by
        walking the types cheapest first until one does, instead of scoring every type."""
        best = self._frontier_fit(shape, used, size, want)
        if best <= 0:
            return 0
        # A type holds ``best`` more pods exactly when its capacity covers this in every resource.
        need = [u + best * s for u, s in zip(used, size)]
        for pt in shape.typeset.types:
            if all(map(ge, pt.effective, need)):
                self._reservation = tuple(pt.limit_capacity)
                return best
        return best  # unreachable: a frontier capacity belongs to some type

    # ------------------------------------------------------------------ placement

    def try_target(self, variant: Variant, target: Target, want: int, entry: Entry, max_price: float | None = None) -> int:
        """Place up to ``want`` of the entry's pods on ``target``; 0 with ``fail_*`` set
        when it takes none."""
        spec = variant.spec
        if target.fixed:
            static = target.static_cache.get(variant.sid)
            if static is None:
                static = self._fixed_static(target, variant)
                target.static_cache[variant.sid] = static
            if static is not True:
                self.fail_kind = FAIL_STATIC
                self.fail_reason = str(static)
                return 0
            shape = None
            base_shape = None
        else:
            pool = target.pool
            assert pool is not None and target.shape is not None
            check = self.ctx.pool_check(pool, variant)
            if isinstance(check, str):
                self.fail_kind = FAIL_STATIC
                self.fail_reason = check
                return 0
            merged = target.shape.merge(variant.sid, variant.requirements)
            if isinstance(merged, str):
                self.fail_kind = FAIL_STATIC
                self.fail_reason = merged
                return 0
            shape = merged
            base_shape = merged
        if spec.host_ports and target.ports:
            for port in spec.host_ports:
                if any(port.conflicts(other) for other in target.ports):
                    self.fail_kind = FAIL_STATIC
                    self.fail_reason = f"host port {port.port}/{port.protocol} in use"
                    return 0
        if spec.host_ports and shape is not None and shape.pool.partial_daemon_ports:
            # A DaemonSet that runs on only some of the types holds the port on those: the
            # claim keeps the types where the port is free.
            holding = shape.pool.types_holding(spec.host_ports)
            if holding:
                port_free = frozenset(pt.name for pt in shape.typeset.types if pt.name not in holding)
                if not port_free:
                    port = spec.host_ports[0]
                    self.fail_kind = FAIL_STATIC
                    self.fail_reason = f"host port {port.port}/{port.protocol} in use by a DaemonSet on every instance type left"
                    return 0
                if len(port_free) < len(shape.typeset.types):
                    shape = shape.narrow(wk.INSTANCE_TYPE, port_free)
                    base_shape = shape
        for group in variant.groups:
            domains = self.domains_of(target, shape, group.key)
            allowed = self.allowed(group, variant, domains)
            if not allowed:
                self.fail_kind = FAIL_GROUP if group.monotonic and self._rejects_target(group, target) else FAIL_OTHER
                self.fail_group = group
                self.fail_reason = f"unsatisfiable {group.describe()}"
                return 0
            if shape is not None and allowed is not domains and allowed != domains and group.key != wk.HOSTNAME:
                shape = shape.narrow(group.key, allowed)
        size = variant.size
        if target.fixed:
            remaining = target.remaining
            most = want
            for i in range(self.ndims):
                s = size[i]
                if s:
                    q = remaining[i] // s
                    if q < most:
                        most = q
            if most <= 0:
                self.fail_kind = FAIL_SIZE
                self.fail_reason = "insufficient resources"
                return 0
        else:
            self.fail_reason = ""
            most = self.claim_fit(target, shape, size, want, max_price)  # type: ignore[arg-type]
            if most <= 0:
                reason = self.fail_reason
                if shape is base_shape and not reason:
                    self.fail_kind = FAIL_SIZE if self.claim_fit(target, target.shape, size, 1, max_price) <= 0 else FAIL_STATIC  # type: ignore[arg-type]
                else:
                    self.fail_kind = FAIL_OTHER
                self.fail_reason = reason
                if not self.fail_reason:
                    if not shape.typeset.types:  # type: ignore[union-attr]
                        self.fail_reason = _not_in_catalog(shape.requirements, self.ctx.problem) or (  # type: ignore[union-attr]
                            "no instance type with an available offering satisfies requirements " + _describe_requirements(shape.requirements, shape.pool)  # type: ignore[union-attr]
                        )
                    else:
                        self.fail_reason = self._no_fit_reason(variant, shape)  # type: ignore[arg-type]
                return 0
        if spec.host_ports:
            most = 1
        if spec.volumes and target.volume_free is not None:
            for driver, count in spec.volumes:
                free = target.volume_free.get(driver)
                if free is not None and free // count < most:
                    most = free // count
            if most <= 0:
                self.fail_kind = FAIL_STATIC
                self.fail_reason = "volume attach limit reached"
                return 0
        for group in variant.bulk_groups:
            cap = self.bulk_cap(group, variant, target, shape)
            if cap < most:
                most = cap
        reservation = self._reservation if not target.fixed else None
        self._commit(variant, target, shape, most, entry, reservation)
        return most

    def _rejects_target(self, group: TopologyGroup, target: Target) -> bool:
        """Whether a monotonic group's rejection holds for every pod it applies to the same
        way: anti-affinity must block every domain the target itself could have (a pod
        with wider requirements than this one may still fit a domain this one excludes)."""
        if group.kind == SPREAD or target.fixed:
            return True
        domains = self.domains_of(target, target.shape, group.key)
        counts = group.counts
        return all(counts.get(d) for d in domains)

    def _no_fit_reason(self, variant: Variant, shape: Shape) -> str:
        requests = variant.spec.requests
        overhead = shape.typeset.types[0].daemon_overhead if shape.typeset.types else EMPTY
        key = (requests, overhead)
        text = self._no_fit_texts.get(key)
        if text is None:
            text = f"no instance type fits requests {_format_resources(requests)}"
            if overhead:
                text += f" plus daemonset overhead {_format_resources(overhead)}"
            self._no_fit_texts[key] = text
        return text

    def _commit(self, variant: Variant, target: Target, shape: Shape | None, count: int, entry: Entry, reservation: tuple[int, ...] | None) -> None:
        pods = entry.pods[:count]
        del entry.pods[:count]
        target.pods.extend(pods)
        target.new_pods += count
        size = variant.size
        if target.fixed:
            target.remaining = [r - count * s for r, s in zip(target.remaining, size)]
        else:
            target.shape = shape
            target.used = [u + count * s for u, s in zip(target.used, size)]
            pool = target.pool
            if pool is not None and pool.limited and reservation is not None:
                old = target.reservation or (0,) * len(pool.limited)
                reserved = self.reserved[pool.index]
                for i in range(len(reserved)):
                    reserved[i] += reservation[i] - old[i]
                target.reservation = reservation
            if target.idx < 0:
                self._add_target(target)
                self.claims_opened += 1
        if variant.spec.host_ports:
            target.ports.extend(variant.spec.host_ports)
        if variant.spec.volumes and target.volume_free is not None:
            for driver, per_pod in variant.spec.volumes:
                if driver in target.volume_free:
                    target.volume_free[driver] -= count * per_pod
        self.record(variant, target, shape, count)

    def new_claim_target(self, pool: Pool) -> Target:
        name = f"<new-claim-{self.claims_opened}>"
        target = Target(name, name, False)
        target.pool = pool
        target.shape = self.ctx.template_shapes[pool.index]
        target.used = [0] * self.ndims
        target.taints = pool.taints
        target.ports = list(pool.daemon_ports)
        if self._has_volumes:
            limit = self._ebs_limits.get(pool.index)
            if limit is None:
                # The claim's type is chosen later: the pool's smallest EBS limit holds for any.
                limit = min((ebs_attach_limit(pt.instance_type) for pt in pool.types), default=0)
                self._ebs_limits[pool.index] = limit
            target.volume_free = {EBS_CSI_DRIVER: limit}
        return target

    def _skip_index(self, table: dict, key: object) -> SkipIndex:  # type: ignore[type-arg]
        found = table.get(key)
        if found is None:
            found = SkipIndex()
            table[key] = found
        return found

    def place_once(self, entry: Entry, existing_only: bool) -> int:
        """Place some of the entry's pods on the first target that takes them."""
        variant = entry.variant
        want = len(entry.pods)
        static_skip = self._skip_index(self.static_skip, variant.sid)
        size_skip = self._skip_index(self.size_skip, variant.size)
        skips = [static_skip, size_skip]
        skips.extend(skip for _, skip in variant.monotonic_groups)
        start = max(s.cursor for s in skips)
        dead_sets = [s.dead for s in skips if s.dead]
        targets = self.targets
        limit = self.n_fixed if existing_only else len(targets)
        index = start
        while index < limit:
            if dead_sets and any(index in dead for dead in dead_sets):
                index += 1
                continue
            target = targets[index]
            placed = self.try_target(variant, target, want, entry)
            if placed:
                return placed
            kind = self.fail_kind
            if kind == FAIL_STATIC:
                static_skip.mark(index)
            elif kind == FAIL_SIZE:
                size_skip.mark(index)
            elif kind == FAIL_GROUP and self.fail_group is not None:
                for group, skip in variant.monotonic_groups:
                    if group is self.fail_group:
                        skip.mark(index)
                        break
            index += 1
        if existing_only:
            return 0
        return self.open_claim(entry, want)

    def open_claim(self, entry: Entry, want: int) -> int:
        variant = entry.variant
        reasons = []
        for pool in self.ctx.pools:
            check = self.ctx.pool_check(pool, variant)
            if isinstance(check, str):
                reasons.append((pool.name, check))
                continue
            target = self.new_claim_target(pool)
            placed = self.try_target(variant, target, want, entry)
            if placed:
                entry.reasons = []
                return placed
            reasons.append((pool.name, self.fail_reason or "does not fit"))
        entry.reasons = reasons
        return 0

    def place_entry(self, entry: Entry, existing_only: bool = False) -> int:
        placed = 0
        while entry.pods:
            count = self.place_once(entry, existing_only)
            if count <= 0:
                break
            placed += count
        return placed

    def new_entry(self, spec: PodSpec, variant: Variant, pods: list[Pod]) -> Entry:
        self._entry_ids += 1
        return Entry(self._entry_ids, spec, variant, pods)

    def build_entries(self) -> list[Entry]:
        by_spec: dict[int, list[Pod]] = {}
        specs: dict[int, PodSpec] = {}
        for pod, spec in self.pod_specs:
            by_spec.setdefault(spec.index, []).append(pod)
            specs[spec.index] = spec
        entries = [self.new_entry(specs[i], specs[i].variant(_ROOT), pods) for i, pods in by_spec.items()]
        entries.sort(key=Entry.sort_key)
        return entries

    def place_in_flight_pods(self, entries: list[Entry]) -> None:
        """Pods an in-flight claim was launched for go back to it first."""
        wanted: dict[str, Target] = {}
        for claim, target in zip(self.ctx.problem.in_flight, self.targets[self.n_fixed - len(self.ctx.problem.in_flight) : self.n_fixed]):
            for key in claim.pods:
                wanted.setdefault(key, target)
        if not wanted:
            return
        for entry in entries:
            keep = []
            for pod in entry.pods:
                home = wanted.get(pod.key)
                if home is None:
                    keep.append(pod)
                    continue
                single = Entry(-1, entry.spec, entry.variant, [pod])
                if not self.try_target(entry.variant, home, 1, single):
                    keep.append(pod)
            entry.pods = keep

    def run_queue(self, entries: list[Entry]) -> None:
        """Karpenter's queue: retry failures (relaxing preferences) while progress is made."""
        queue = deque(e for e in entries if e.pods)
        total = sum(len(e.pods) for e in queue)
        last_seen: dict[int, int] = {}
        any_prefer = self.ctx.any_prefer_no_schedule
        while queue:
            entry = queue[0]
            if last_seen.get(entry.eid) == total:
                break
            queue.popleft()
            free = self.optimize and self.is_free(entry.spec) and entry.variant.state == _ROOT
            placed = self.place_entry(entry, existing_only=free)
            total -= placed
            if not entry.pods:
                continue
            if free:
                total -= len(entry.pods)
                self.deferred.append(entry)
                continue
            relaxed = entry.spec.relax(entry.variant.state, any_prefer)
            if relaxed is not None:
                entry.variant = self.prepare(entry.spec.variant(relaxed))
                queue.append(entry)
                last_seen.clear()
            else:
                queue.append(entry)
                last_seen[entry.eid] = total
        self.unschedulable.extend(e for e in queue if e.pods)

    # ------------------------------------------------------------------ results

    def claims(self) -> list[Target]:
        return [t for t in self.targets[self.n_fixed :] if t.pods]

    def claim_price(self, target: Target) -> float:
        """The price of the cheapest instance type that fits the claim's pods."""
        cached = target.price_cache
        used = tuple(target.used)
        if cached is not None and cached[0] is target.shape and cached[1] == used:
            return cached[2]
        ts = target.shape.typeset  # type: ignore[union-attr]
        found = float("inf")
        for pt, price in zip(ts.types, ts.prices):
            capacity = pt.effective
            if all(c >= u for c, u in zip(capacity, used)):
                found = price
                break
        target.price_cache = (target.shape, used, found)
        return found


def _satisfies_min_values(types: list[PoolType], min_values: dict[str, int]) -> bool:
    for key, needed in min_values.items():
        values: set[TypeKey]
        if key == wk.INSTANCE_TYPE:
            values = {pt.name for pt in types}
        else:
            values = {pt.keys.get(key) for pt in types}
            values.discard(None)
            if not values and all(key not in pt.keys for pt in types):
                continue
        if len(values) < needed:
            return False
    return True


def _format_resources(resources: Resources) -> str:
    return ", ".join(f"{name}={value}" for name, value in resources.as_quantities().items())


def _not_in_catalog(requirements: Requirements, problem: SchedulingProblem) -> str:
    """ "instance type p3.8xlarge is not in the us-east-1 catalog" when every type a requirement
    names is missing from the catalog ("" otherwise, or when the catalog's names are unknown)."""
    if not problem.catalog_names or wk.INSTANCE_TYPE not in requirements:
        return ""
    wanted = requirements[wk.INSTANCE_TYPE]
    if wanted.complement or not wanted.values or wanted.values & problem.catalog_names:
        return ""
    missing = sorted(wanted.values)
    where = f"the {problem.catalog_region} catalog" if problem.catalog_region else "the catalog"
    if len(missing) == 1:
        return f"instance type {missing[0]} is not in {where}"
    return f"instance types {', '.join(missing)} are not in {where}"


def _describe_requirements(requirements: Requirements, pool: Pool) -> str:
    extra = [str(requirements[k]) for k in sorted(requirements) if pool.template.get(k) != requirements[k]]
    return "; ".join(extra) if extra else "of the nodepool"
