"""Instance types as the scheduler sees them.

A :class:`Shape` is a (NodePool, Requirements) pair: what a node claim could still be.
Shapes are interned, so everything derived from one (the instance types it allows, their
prices, its topology domains, the shape after adding a pod's requirements or narrowing a
topology key) is computed once and shared by every claim with that shape. Resource
vectors are tuples of integer milli-units over the *dimensions* pending pods request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from joiner.domain import labels as wk
from joiner.domain.model import DaemonSet, HostPort, InstanceType, NodePool, OfferingKey, Taint, Toleration
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.resources import Resources

__all__ = ["PoolType", "TypeSet", "Shape", "Pool", "NEGATIVE_OPERATORS", "NODES_LIMIT", "untolerated", "format_taint", "dominates", "pareto_frontier"]

NEGATIVE_OPERATORS = frozenset({"NotIn", "DoesNotExist"})
#: A NodePool limit on this key caps the number of nodes (each claim counts 1).
NODES_LIMIT = "nodes"
_OFFERING_KEYS = frozenset({wk.ZONE, wk.CAPACITY_TYPE})


def format_taint(taint: Taint) -> str:
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}:{taint.effect}"


def untolerated(tolerations: tuple[Toleration, ...], taints: Iterable[Taint]) -> Taint | None:
    """The first taint (any effect, as Karpenter checks) no toleration matches, or None."""
    for taint in taints:
        if not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


def dominates(capacity: tuple[int, ...], need: tuple[int, ...]) -> bool:
    for c, n in zip(capacity, need):
        if n > c:
            return False
    return True


def pareto_frontier(vectors: Iterable[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The vectors no other vector dominates (deduplicated), largest first."""
    frontier: list[tuple[int, ...]] = []
    for vector in sorted(set(vectors), reverse=True):
        if not any(dominates(kept, vector) for kept in frontier):
            frontier.append(vector)
    return frontier


#: An instance type's value for a label key: its single value, None (DoesNotExist) or a multi-valued Requirement.
TypeKey = str | Requirement | None


def _type_key_check(requirement: Requirement, value: TypeKey) -> bool:
    """Can an instance type with ``value`` for a key (a single string, None for
    DoesNotExist, or a multi-valued Requirement) satisfy ``requirement``?"""
    if value is None:
        return requirement.operator() in NEGATIVE_OPERATORS
    if isinstance(value, str):
        return requirement.has(value)
    merged = value.intersection(requirement)
    if merged.complement or merged.values:
        return True
    return requirement.operator() in NEGATIVE_OPERATORS and value.operator() in NEGATIVE_OPERATORS


@dataclass(eq=False, slots=True)
class PoolType:
    """One instance type in one NodePool: allocatable minus the overhead of the
    DaemonSets that would run on it, over the scheduling dimensions."""

    index: int  # position in the pool's type list (sorted by name)
    instance_type: InstanceType
    name: str
    keys: dict[str, TypeKey]  # label key -> single value, None (DoesNotExist) or Requirement
    offerings: tuple[tuple[str, str, float], ...]  # available (zone, capacity type, price)
    effective: tuple[int, ...]  # allocatable - daemonset overhead, per dimension
    daemon_overhead: Resources
    limit_capacity: tuple[int, ...]  # capacity per limited resource of the pool
    daemon_ports: tuple[HostPort, ...] = ()  # host ports the DaemonSets that run on this type hold


@dataclass(eq=False, slots=True)
class TypeSet:
    """The instance types a shape allows, cheapest first, with their prices under the
    shape's zone and capacity-type requirements."""

    types: list[PoolType]
    prices: list[float]
    effective: list[tuple[int, ...]]
    zones: frozenset[str]
    capacity_types: frozenset[str]
    _frontier: list[tuple[int, ...]] | None = None
    _largest_limit: tuple[int, ...] | None = None

    @property
    def frontier(self) -> list[tuple[int, ...]]:
        if self._frontier is None:
            self._frontier = pareto_frontier(self.effective)
        return self._frontier

    @property
    def largest_limit(self) -> tuple[int, ...]:
        """Per limited resource, the most any of the types counts against the pool's limits."""
        if self._largest_limit is None:
            width = len(self.types[0].limit_capacity) if self.types else 0
            self._largest_limit = tuple(max(pt.limit_capacity[i] for pt in self.types) for i in range(width))
        return self._largest_limit


class Pool:
    """A NodePool prepared for scheduling: template requirements, taints, per-type
    effective capacity and limit bookkeeping."""

    def __init__(
        self,
        index: int,
        pool: NodePool,
        instance_types: tuple[InstanceType, ...],
        daemonsets: tuple[DaemonSet, ...],
        dims: tuple[str, ...],
        unavailable: frozenset[OfferingKey],
        usage: Resources,
    ) -> None:
        self.index = index
        self.pool = pool
        self.name = pool.name
        self.template = pool.template_requirements()
        self.taints = pool.taints
        self.has_prefer_no_schedule = any(t.effect == "PreferNoSchedule" for t in pool.taints)
        limits = pool.limits
        self.limited: tuple[str, ...] = tuple(sorted(limits)) if limits else ()
        self.remaining: tuple[int, ...] = tuple((limits[r] if limits else 0) - usage.get(r, 0) for r in self.limited)
        self.usage = usage
        self.min_values = any(r.min_values for r in self.template.values())
        daemons = [d for d in daemonsets if self._daemon_runs(d)]
        self.types: list[PoolType] = []
        self.type_keys: set[str] = set()
        for it in instance_types:
            keys: dict[str, TypeKey] = {}
            for key, requirement in it.requirements.items():
                if key in _OFFERING_KEYS:
                    continue
                single = requirement.single_value()
                if single is not None:
                    keys[key] = single
                elif requirement.is_empty():
                    keys[key] = None
                else:
                    keys[key] = requirement
            overhead = Resources()
            ports: list[HostPort] = []
            for daemon in daemons:
                if self._daemon_fits_type(daemon, keys):
                    overhead = overhead + daemon.pod.requests
                    ports.extend(daemon.pod.host_ports)
            allocatable = it.allocatable
            effective = tuple(allocatable.get(d, 0) - overhead.get(d, 0) for d in dims)
            if any(v < 0 for v in effective):
                continue
            offerings = tuple(
                (o.zone, o.capacity_type, o.price) for o in it.offerings if o.available and OfferingKey(it.name, o.zone, o.capacity_type) not in unavailable
            )
            if not offerings:
                continue
            limit_capacity = tuple(1000 if r == NODES_LIMIT else it.capacity.get(r, 0) for r in self.limited)
            self.types.append(PoolType(len(self.types), it, it.name, keys, offerings, effective, overhead, limit_capacity, tuple(ports)))
            self.type_keys.update(keys)
        # Host ports are held per instance type, as Karpenter groups a pool's types by the
        # DaemonSets that run on them: a DaemonSet restricted to some types holds its ports
        # on those only. ``daemon_ports``: held on every type, so on every new node (a pending
        # pod asking for one cannot run there); ``partial_daemon_ports``: held on some types,
        # which a claim taking a pod that asks for one of them gives up.
        held = [set(pt.daemon_ports) for pt in self.types]
        everywhere = set.intersection(*held) if held else set()
        self.daemon_ports: tuple[HostPort, ...] = tuple(sorted(everywhere, key=_port_order))
        self.partial_daemon_ports = bool(held) and any(h != everywhere for h in held)
        self._types_holding: dict[tuple[HostPort, ...], frozenset[str]] = {}

    def types_holding(self, ports: tuple[HostPort, ...]) -> frozenset[str]:
        """Names of the pool's types where a DaemonSet holds a port that conflicts with one of
        ``ports``."""
        found = self._types_holding.get(ports)
        if found is None:
            found = frozenset(pt.name for pt in self.types if any(p.conflicts(q) for p in ports for q in pt.daemon_ports))
            self._types_holding[ports] = found
        return found

    def _daemon_runs(self, daemon: DaemonSet) -> bool:
        """Whether the DaemonSet's pod lands on the pool's nodes: it tolerates every taint that
        keeps pods off (a PreferNoSchedule taint does not: the DaemonSet runs there anyway)."""
        pod = daemon.pod
        if untolerated(pod.tolerations, (t for t in self.taints if t.effect != "PreferNoSchedule")) is not None:
            return False
        return any(self.template.compatible(terms) is None for terms in _daemon_terms(daemon))

    @staticmethod
    def _daemon_fits_type(daemon: DaemonSet, keys: Mapping[str, TypeKey]) -> bool:
        for terms in _daemon_terms(daemon):
            if all(_type_key_check(req, keys[key]) for key, req in terms.items() if key in keys):
                return True
        return False


def _port_order(port: HostPort) -> tuple[int, str, str]:
    return (port.port, port.protocol, port.host_ip)


def _daemon_terms(daemon: DaemonSet) -> list[Requirements]:
    pod = daemon.pod
    if pod.required_node_affinity:
        return [pod.node_selector.intersect(term) for term in pod.required_node_affinity]
    return [pod.node_selector]


class Shape:
    """What a node claim in ``pool`` with ``requirements`` could be. Interned by
    :meth:`ShapeRegistry.get`: compare with ``is``."""

    __slots__ = ("registry", "pool", "requirements", "sid", "parent", "_typeset", "_domains", "merge_cache", "narrow_cache", "filter_cache", "min_values")

    def __init__(self, registry: ShapeRegistry, pool: Pool, requirements: Requirements, sid: int, parent: Shape | None) -> None:
        self.registry = registry
        self.pool = pool
        self.requirements = requirements
        self.sid = sid
        self.parent = parent
        self._typeset: TypeSet | None = None
        self._domains: dict[str, frozenset[str]] = {}
        self.merge_cache: dict[int, Shape | str] = {}
        self.narrow_cache: dict[tuple[str, frozenset[str]], Shape] = {}
        self.filter_cache: dict[int, bool] = {}
        self.min_values = {key: r.min_values for key, r in requirements.items() if r.min_values}

    @property
    def typeset(self) -> TypeSet:
        if self._typeset is None:
            self._typeset = self._build_typeset()
        return self._typeset

    def _build_typeset(self) -> TypeSet:
        reqs = self.requirements
        source = self.parent.typeset.types if self.parent is not None else self.pool.types
        checks = [(key, r) for key, r in reqs.items() if key in self.pool.type_keys]
        zone_req = reqs.get(wk.ZONE)
        ct_req = reqs.get(wk.CAPACITY_TYPE)
        rows = []
        for pt in source:
            keys = pt.keys
            ok = True
            for key, requirement in checks:
                if key in keys and not _type_key_check(requirement, keys[key]):
                    ok = False
                    break
            if not ok:
                continue
            price = None
            for zone, ct, offer_price in pt.offerings:
                if zone_req is not None and not zone_req.has(zone):
                    continue
                if ct_req is not None and not ct_req.has(ct):
                    continue
                if price is None or offer_price < price:
                    price = offer_price
            if price is None:
                continue
            rows.append((price, pt.name, pt))
        rows.sort(key=lambda row: (row[0], row[1]))
        types = [row[2] for row in rows]
        zones: set[str] = set()
        cts: set[str] = set()
        for pt in types:
            for zone, ct, _ in pt.offerings:
                if (zone_req is None or zone_req.has(zone)) and (ct_req is None or ct_req.has(ct)):
                    zones.add(zone)
                    cts.add(ct)
        return TypeSet(types, [row[0] for row in rows], [pt.effective for pt in types], frozenset(zones), frozenset(cts))

    def offerings_of(self, pt: PoolType) -> list[tuple[str, str, float]]:
        """``pt``'s offerings this shape's zone and capacity-type requirements allow."""
        zone_req = self.requirements.get(wk.ZONE)
        ct_req = self.requirements.get(wk.CAPACITY_TYPE)
        return [(zone, ct, price) for zone, ct, price in pt.offerings if (zone_req is None or zone_req.has(zone)) and (ct_req is None or ct_req.has(ct))]

    def domains(self, key: str) -> frozenset[str]:
        """Values a node launched from this shape could carry for ``key`` (not hostname)."""
        found = self._domains.get(key)
        if found is None:
            found = self._compute_domains(key)
            self._domains[key] = found
        return found

    def _compute_domains(self, key: str) -> frozenset[str]:
        if key == wk.ZONE:
            return self.typeset.zones
        if key == wk.CAPACITY_TYPE:
            return self.typeset.capacity_types
        requirement = self.requirements.get(key)
        if key in self.pool.type_keys:
            values = set()
            for pt in self.typeset.types:
                value = pt.keys.get(key)
                if isinstance(value, str):
                    values.add(value)
            if requirement is not None:
                values = {v for v in values if requirement.has(v)}
            return frozenset(values)
        if requirement is None:
            return frozenset()
        if not requirement.complement:
            return requirement.values
        return frozenset(v for v in self.registry.known_values(key) if requirement.has(v))

    def merge(self, sid: int, pod_requirements: Requirements) -> Shape | str:
        """The shape after adding a pod's requirements, or why they are incompatible."""
        found = self.merge_cache.get(sid)
        if found is None:
            reason = self.requirements.compatible(pod_requirements)
            if reason is not None:
                found = reason
            else:
                merged = self.requirements.intersect(pod_requirements)
                found = self.registry.get(self.pool, merged, self)
            self.merge_cache[sid] = found
        return found

    def narrow(self, key: str, allowed: frozenset[str]) -> Shape:
        """The shape with ``key`` restricted to ``allowed`` (a topology domain choice)."""
        cache_key = (key, allowed)
        found = self.narrow_cache.get(cache_key)
        if found is None:
            narrowed = self.requirements.add(Requirement(key, False, allowed))
            found = self.registry.get(self.pool, narrowed, self)
            self.narrow_cache[cache_key] = found
        return found

    def __repr__(self) -> str:
        return f"Shape({self.pool.name}, {self.requirements!r})"


@dataclass(eq=False)
class ShapeRegistry:
    """Interns shapes by (pool, requirements)."""

    shapes: dict[tuple[int, Requirements], Shape] = field(default_factory=dict)
    values_by_key: dict[str, set[str]] = field(default_factory=dict)

    def get(self, pool: Pool, requirements: Requirements, parent: Shape | None = None) -> Shape:
        key = (pool.index, requirements)
        found = self.shapes.get(key)
        if found is None:
            found = Shape(self, pool, requirements, len(self.shapes), parent)
            self.shapes[key] = found
        return found

    def known_values(self, key: str) -> set[str]:
        return self.values_by_key.get(key, set())
