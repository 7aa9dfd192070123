"""``solve``: plan which nodes to launch for pending pods, as cheaply as possible.

Pods that topology terms involve (affinity, anti-affinity, spreads, host ports, or being
selected by someone else's term) go through the constraint-aware greedy of
:mod:`engine` exactly as Karpenter would place them. Pods nothing constrains except
their own node requirements are *free*: they first take room on existing nodes and
in-flight claims, then room left on the greedy's claims without raising their price, and
the rest is packed by the cost optimiser of :mod:`packer`. The first-fit-decreasing
baseline (:mod:`ffd`) is computed on the same input whenever free pods exist, and the
better plan wins (fewer unschedulable pods, then lower price, then fewer nodes), so
``solve`` never does worse than Karpenter's packing.
"""

from __future__ import annotations

from dataclasses import dataclass

from joiner.domain import labels as wk
from joiner.domain.model import ExistingNodePlan, NodeClaimPlan, Plan, UnschedulablePod
from joiner.domain.requirements import Requirement
from joiner.domain.resources import Resources
from joiner.domain.scheduling.context import Context
from joiner.domain.scheduling.engine import Engine, Entry, Target
from joiner.domain.scheduling.lp import solve_covering_lp
from joiner.domain.scheduling.packer import Bin, PackType, pack
from joiner.domain.scheduling.problem import SchedulingProblem
from joiner.domain.scheduling.shapes import PoolType, Shape

__all__ = ["solve", "solve_with_baseline", "run_engine", "build_plan"]

#: Packed claims (cheapest first) the absorb step tries to empty into other claims.
_ABSORB_VICTIMS = 20
#: Joining classes: a host class with more claims or item groups than this is left as
#: packed (the re-packing would cost more than it finds), and the numbers of the other
#: class's least-full claims tried with it (on the 18 sliver workloads of bench.cost,
#: 1, 2, 3, 4, 6, 8, 12, 16, 24 found plans 0.003% cheaper in all than 3, 24, in 2.6 times
#: the time; 24 alone 0.003% dearer).
_JOIN_MAX_CLAIMS = 24
_JOIN_MAX_GROUPS = 12
_JOIN_TAILS = (3, 24)
#: Joint packings per solve at most (many small classes would otherwise try every pair).
_JOIN_BUDGET = 8


def solve(problem: SchedulingProblem) -> Plan:
    """The cheapest plan found for ``problem`` (never worse than first-fit-decreasing)."""
    return solve_with_baseline(problem)[0]


def solve_with_baseline(problem: SchedulingProblem) -> tuple[Plan, Plan | None]:
    """The chosen plan and the first-fit-decreasing plan when it was computed."""
    ctx = Context(problem)
    optimized, used_packer = run_engine(ctx, optimize=True)
    if not used_packer:
        return optimized, None
    baseline, _ = run_engine(ctx, optimize=False)
    if _plan_key(baseline) < _plan_key(optimized):
        return baseline, baseline
    return optimized, baseline


def _plan_key(plan: Plan) -> tuple[int, float, int]:
    return (len(plan.unschedulable), round(plan.cost_per_hour, 9), len(plan.node_claims))


def run_engine(ctx: Context, optimize: bool, join: bool = True) -> tuple[Plan, bool]:
    """One planning run; ``join`` off skips :func:`_join_classes` (for comparisons)."""
    engine = Engine(ctx, optimize)
    entries = engine.build_entries()
    engine.place_in_flight_pods(entries)
    engine.run_queue(entries)
    used_packer = bool(engine.deferred)
    if engine.deferred:
        leftovers = _place_free(engine, engine.deferred, join)
        engine.deferred = []
        engine.optimize = False
        if leftovers:
            engine.run_queue(leftovers)
    return build_plan(engine), used_packer


def _place_free(engine: Engine, entries: list[Entry], join: bool = True) -> list[Entry]:
    """Free pods: ride along on planned claims at no extra price, then cost-pack."""
    claims = [t for t in engine.targets[engine.n_fixed :] if t.pods]
    for entry in entries:
        for target in claims:
            if not entry.pods:
                break
            while entry.pods:
                price = engine.claim_price(target)
                if not engine.try_target(entry.variant, target, len(entry.pods), entry, max_price=price):
                    break
    classes: dict[tuple[int, int], tuple[Shape, list[Entry]]] = {}
    leftovers: list[Entry] = []
    ctx = engine.ctx
    for entry in entries:
        if not entry.pods:
            continue
        chosen = None
        for pool in ctx.pools:
            check = ctx.pool_check(pool, entry.variant)
            if isinstance(check, str):
                continue
            if not any(_dominates(cap, entry.variant.size) for cap in check.typeset.frontier):
                continue
            chosen = check
            break
        if chosen is not None and chosen.min_values:
            chosen = None  # the packer does not track minValues: first-fit handles these pods
        if chosen is None:
            leftovers.append(entry)
            continue
        classes.setdefault((chosen.pool.index, chosen.sid), (chosen, []))[1].append(entry)
    first_new = len(engine.targets)
    variant_of = {pod.key: entry.variant for entry in entries for pod in entry.pods}
    hosts = _joint_hosts(classes)
    # Narrow classes first (e.g. arm64-only, amd64-only): a broader class (pods that run
    # on either architecture) then fills the room their claims already pay for. What is
    # left of it is packed together with the narrow class that serves it as cheaply as its
    # own types would (the packer then mixes both kinds of pods on the same nodes), so a
    # class taking such guests is packed after the classes that take none.
    guests: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for key, host in hosts.items():
        guests.setdefault(host, []).append(key)
    ordered = sorted(
        (item for item in classes.items() if item[0] not in hosts),
        key=lambda item: (item[0] in guests, len(item[1][0].typeset.types), item[0]),
    )
    for key, (shape, members) in ordered:
        joined = list(members)
        for guest in sorted(guests.get(key, ()), key=lambda k: (len(classes[k][0].typeset.types), k)):
            joined.extend(classes[guest][1])
        if len(engine.targets) > first_new:
            _ride_along(engine, engine.targets[first_new:], joined)
        leftovers.extend(_pack_class(engine, shape, [e for e in joined if e.pods]))
    _absorb(engine, engine.targets[first_new:], variant_of)
    if join:
        _join_classes(engine, engine.targets[first_new:], variant_of)
    return leftovers


def _joint_hosts(classes: dict[tuple[int, int], tuple[Shape, list[Entry]]]) -> dict[tuple[int, int], tuple[int, int]]:
    """For a broad class, the narrower class of the same NodePool to pack it with: one
    whose instance types are a strict subset of the broad class's, whose shape every
    broad pod accepts unchanged (adding the pod's requirements keeps the narrow shape),
    and on whose types the broad class's demand is as cheap as on all of its own (the
    covering LP's value; the cheapest such class wins). Broad classes no narrower class
    serves as cheaply are packed alone, as before."""
    hosts: dict[tuple[int, int], tuple[int, int]] = {}
    for key, (shape, members) in sorted(classes.items()):
        own = {pt.name for pt in shape.typeset.types}
        demand = [0.0] * len(members[0].variant.size) if members else []
        for entry in members:
            for d, s in enumerate(entry.variant.size):
                demand[d] += s * len(entry.pods)
        alone = _lp_value(shape, demand)
        if alone is None:
            continue
        best: tuple[float, tuple[int, int]] | None = None
        for other, (narrow, _) in sorted(classes.items()):
            if other == key or narrow.pool is not shape.pool:
                continue
            names = {pt.name for pt in narrow.typeset.types}
            if not names or not names < own:
                continue
            if any(narrow.merge(entry.variant.sid, entry.variant.requirements) is not narrow for entry in members):
                continue
            value = _lp_value(narrow, demand)
            if value is None or value > alone * (1 + 1e-9) + 1e-12:
                continue
            if best is None or (value, other) < best:
                best = (value, other)
        if best is not None:
            hosts[key] = best[1]
    # A host is never itself a guest: chains would pack one class twice.
    return {key: host for key, host in hosts.items() if host not in hosts}


def _lp_value(shape: Shape, demand: list[float]) -> float | None:
    ts = shape.typeset
    solution = solve_covering_lp(list(ts.prices), [pt.effective for pt in ts.types], demand) if ts.types else None
    return solution.objective if solution is not None else None


def _ride_along(engine: Engine, claims: list[Target], members: list[Entry]) -> None:
    """Place ``members``' pods on ``claims`` without raising any claim's price."""
    room: dict[int, list[int]] = {}

    def free(target: Target) -> list[int]:
        found = room.get(id(target))
        if found is None:
            price = engine.claim_price(target)
            ts = target.shape.typeset  # type: ignore[union-attr]
            found = [0] * engine.ndims
            for pt, p in zip(ts.types, ts.prices):
                if p > price + 1e-12:
                    break
                if p >= price - 1e-9 and all(c >= u for c, u in zip(pt.effective, target.used)):
                    found = [max(f, c - u) for f, c, u in zip(found, pt.effective, target.used)]
            room[id(target)] = found
        return found

    targets = [t for t in claims if t.pods]
    for entry in sorted(members, key=lambda e: (tuple(-s for s in e.variant.size), e.sort_key())):
        size = entry.variant.size
        for target in targets:
            if not entry.pods:
                break
            if any(s > r for s, r in zip(size, free(target))):
                continue
            placed = False
            while entry.pods:
                if not engine.try_target(entry.variant, target, len(entry.pods), entry, max_price=engine.claim_price(target)):
                    break
                placed = True
            if placed:
                room.pop(id(target), None)


def _absorb(engine: Engine, packed: list[Target], variant_of: dict) -> None:  # type: ignore[type-arg]
    """Empty the cheapest packed claims into room other claims (any pool the pods may
    use) already pay for; classes are packed separately, so this merges across them."""
    victims = sorted((t for t in packed if t.pods), key=lambda t: (engine.claim_price(t), t.idx))[:_ABSORB_VICTIMS]
    for victim in victims:
        others = [t for t in engine.targets[engine.n_fixed :] if t.pods and t is not victim]
        if not others:
            return
        saved = [(t, t.shape, list(t.used), len(t.pods), t.new_pods, t.reservation) for t in others]
        reserved = {index: list(values) for index, values in engine.reserved.items()}
        by_variant: dict[int, tuple] = {}  # type: ignore[type-arg]
        for pod in victim.pods:
            variant = variant_of[pod.key]
            by_variant.setdefault(id(variant), (variant, []))[1].append(pod)
        moved_all = True
        for variant, pods in by_variant.values():
            entry = Entry(-1, variant.spec, variant, list(pods))
            for target in others:
                while entry.pods:
                    if not engine.try_target(variant, target, len(entry.pods), entry, max_price=engine.claim_price(target)):
                        break
                if not entry.pods:
                    break
            if entry.pods:
                moved_all = False
                break
        if moved_all:
            _release(engine, victim)
            continue
        for target, shape, used, count, new_pods, reservation in saved:
            target.shape = shape
            target.used = used
            del target.pods[count:]
            target.new_pods = new_pods
            target.reservation = reservation
        engine.reserved = reserved


def _release(engine: Engine, target: Target) -> None:
    """Empty a packed claim, giving its reservation back to its NodePool."""
    pool = target.pool
    if pool is not None and pool.limited and target.reservation is not None:
        engine.reserved[pool.index] = [r - v for r, v in zip(engine.reserved[pool.index], target.reservation)]
    # An emptied claim is a fresh one again: the greedy may still place pods on it, and a
    # stale reservation would make that placement subtract what was already given back
    # (the plan then exceeded the NodePool's limit).
    target.pods = []
    target.new_pods = 0
    target.used = [0] * engine.ndims
    target.reservation = None
    target.ports = list(pool.daemon_ports) if pool is not None else []
    if pool is not None:
        target.shape = engine.ctx.template_shapes[pool.index]


def _join_classes(engine: Engine, packed: list[Target], variant_of: dict) -> None:  # type: ignore[type-arg]
    """Re-pack a class's claims together with another class's least-full claims.

    Classes are packed one after the other, each on its own types: pods that run on either
    architecture on the cheaper Graviton types, amd64-only pods alone on amd64 types. When
    the narrow pods fill their nodes by one resource (tiny pods fill a node's pod slots and
    leave CPU free), the cheapest whole plan puts some broad pods beside them. So for each
    class (the host: at most ``_JOIN_MAX_CLAIMS`` claims) and each other class of the same
    NodePool whose pods all accept the host's shape unchanged, the host's pods and those of
    the other class's 3 or 24 least-full claims (``_JOIN_TAILS``; at most
    ``_JOIN_MAX_GROUPS`` pod sizes in all) are packed together, the host's pods on the
    host's types, the others' on either class's (:func:`_joint_packing`). The result that
    saves the most against the claims it replaces is kept (none that costs more). At most
    ``_JOIN_BUDGET`` joint packings per solve; NodePools with limits are left as packed."""
    if engine._has_volumes:
        return
    by_shape: dict[int, list[Target]] = {}
    shapes: dict[int, Shape] = {}
    for target in packed:
        if target.pods and target.shape is not None:
            by_shape.setdefault(id(target.shape), []).append(target)
            shapes[id(target.shape)] = target.shape
    budget = _JOIN_BUDGET
    for host_key, other_key in [(h, o) for h in list(by_shape) for o in list(by_shape) if h != o]:
        if budget <= 0:
            return
        shape, home = shapes[host_key], shapes[other_key]
        hosts, others = by_shape[host_key], by_shape[other_key]
        if shape.pool.limited or home.pool is not shape.pool or not hosts or not others or len(hosts) > _JOIN_MAX_CLAIMS:
            continue
        variants = {id(variant_of[pod.key]): variant_of[pod.key] for target in others for pod in target.pods}
        if any(shape.merge(v.sid, v.requirements) is not shape for v in variants.values()):
            continue
        host_groups = _size_groups(hosts, variant_of)
        if len(host_groups) > _JOIN_MAX_GROUPS:
            continue
        tail = sorted(others, key=lambda t: (_fill(t), engine.claim_price(t), t.idx))
        best: tuple[float, int, _Joint] | None = None
        for k in _JOIN_TAILS:
            k = min(k, len(tail))
            guest_groups = _size_groups(tail[:k], variant_of)
            if len(host_groups) + len(guest_groups) > _JOIN_MAX_GROUPS:
                break
            if budget <= 0:
                break
            budget -= 1
            joint = _joint_packing(shape, home, host_groups, guest_groups)
            if joint is not None:
                old = sum(engine.claim_price(t) for t in hosts + tail[:k])
                saving = old - joint.cost
                if saving > 1e-9 * max(1.0, old) and (best is None or saving > best[0] + 1e-12):
                    best = (saving, k, joint)
            if k == len(tail):
                break
        if best is None:
            continue
        _, k, joint = best
        for target in hosts + tail[:k]:
            _release(engine, target)
        removed = {id(t) for t in tail[:k]}
        by_shape[host_key] = []
        by_shape[other_key] = [t for t in others if id(t) not in removed]
        for owner, bins in joint.bins:
            first = len(engine.targets)
            _open_bins(engine, owner, bins, joint.sizes, joint.groups)
            by_shape[host_key if owner is shape else other_key].extend(engine.targets[first:])


#: Per pod size, the pods of that size by variant (in claim and pod order).
_SizeGroups = dict[tuple[int, ...], dict[int, Entry]]


def _size_groups(targets: list[Target], variant_of: dict) -> _SizeGroups:  # type: ignore[type-arg]
    groups: _SizeGroups = {}
    for target in targets:
        for pod in target.pods:
            variant = variant_of[pod.key]
            by_variant = groups.setdefault(variant.size, {})
            entry = by_variant.get(id(variant))
            if entry is None:
                entry = by_variant[id(variant)] = Entry(-1, variant.spec, variant, [])
            entry.pods.append(pod)
    return groups


@dataclass(frozen=True, slots=True)
class _Joint:
    """A joint packing: its price, the item sizes and the entries item ``i`` takes its pods
    from, and the bins to open per shape (type indices of that shape's types)."""

    cost: float
    sizes: list[tuple[int, ...]]
    groups: list[list[Entry]]
    bins: list[tuple[Shape, list[Bin]]]


def _joint_packing(shape: Shape, home: Shape, host_groups: _SizeGroups, guest_groups: _SizeGroups) -> _Joint | None:
    """Host and guest pods packed together (None when some pod finds no place): host pods on
    ``shape``'s types only, guest pods on those or on their own class's (``home``'s). One
    packing over both type lists, with a resource only the host's types have and only host
    pods need, so the packer itself weighs putting guests beside host pods against packing
    them apart on their own (cheaper) types."""
    host_sizes, guest_sizes = sorted(host_groups), sorted(guest_groups)
    sizes = host_sizes + guest_sizes
    groups = [_fresh(host_groups[size]) for size in host_sizes] + [_fresh(guest_groups[size]) for size in guest_sizes]
    counts = [sum(len(e.pods) for e in group) for group in groups]
    hosts = sum(counts[: len(host_sizes)])
    types: list[PackType] = []
    owners: list[tuple[Shape, int]] = []
    host_price = {pt.name: price for pt, price in zip(shape.typeset.types, shape.typeset.prices)}
    for j, (pt, price) in enumerate(zip(shape.typeset.types, shape.typeset.prices)):
        types.append(PackType((*pt.effective, hosts), price, pt.limit_capacity))
        owners.append((shape, j))
    for j, (pt, price) in enumerate(zip(home.typeset.types, home.typeset.prices)):
        if host_price.get(pt.name, float("inf")) > price:
            types.append(PackType((*pt.effective, 0), price, pt.limit_capacity))
            owners.append((home, j))
    marked = [(*size, 1) for size in host_sizes] + [(*size, 0) for size in guest_sizes]
    bins, left = pack(marked, counts, types)
    if any(left):
        return None
    per_shape: dict[int, tuple[Shape, list[Bin]]] = {id(shape): (shape, []), id(home): (home, [])}
    for b in bins:
        owner, j = owners[b.type_index]
        per_shape[id(owner)][1].append(Bin(j, b.counts, b.used[:-1]))
    cost = sum(types[b.type_index].price for b in bins)
    return _Joint(cost, sizes, groups, list(per_shape.values()))


def _fresh(by_variant: dict[int, Entry]) -> list[Entry]:
    """Copies of ``by_variant``'s entries (a packing consumes their pod lists)."""
    return [Entry(-1, e.spec, e.variant, list(e.pods)) for e in by_variant.values()]


def _fill(target: Target) -> float:
    """How full a claim is: its largest share of any resource of the cheapest type holding it."""
    ts = target.shape.typeset  # type: ignore[union-attr]
    for pt in ts.types:
        if all(c >= u for c, u in zip(pt.effective, target.used)):
            return max((u / c for u, c in zip(target.used, pt.effective) if c > 0), default=0.0)
    return 1.0


def _pack_types(shape: Shape) -> list[PackType]:
    ts = shape.typeset
    return [PackType(pt.effective, price, pt.limit_capacity) for pt, price in zip(ts.types, ts.prices)]


def _dominates(capacity: tuple[int, ...], need: tuple[int, ...]) -> bool:
    return all(c >= n for c, n in zip(capacity, need))


def _pack_class(engine: Engine, shape: Shape, members: list[Entry]) -> list[Entry]:
    pool = shape.pool
    budget = None
    if pool.limited:
        reserved = engine.reserved[pool.index]
        budget = [rem - res for rem, res in zip(pool.remaining, reserved)]
    by_size: dict[tuple[int, ...], list[Entry]] = {}
    for entry in members:
        by_size.setdefault(entry.variant.size, []).append(entry)
    sizes = list(by_size)
    bins, _ = pack(sizes, [sum(len(e.pods) for e in by_size[size]) for size in sizes], _pack_types(shape), budget)
    _open_bins(engine, shape, bins, sizes, [by_size[size] for size in sizes])
    return [e for e in members if e.pods]


def _open_bins(engine: Engine, shape: Shape, bins: list[Bin], sizes: list[tuple[int, ...]], groups: list[list[Entry]]) -> None:
    """A claim of ``shape`` per packed bin, taking the pods of item ``i`` from ``groups[i]``'s entries."""
    pool = shape.pool
    ts = shape.typeset
    for packed in bins:
        target = engine.new_claim_target(pool)
        target.shape = shape
        pt = ts.types[packed.type_index]
        for index in sorted(packed.counts):
            count = packed.counts[index]
            size = sizes[index]
            target.used = [u + count * s for u, s in zip(target.used, size)]
            target.new_pods += count
            for entry in groups[index]:
                if not count:
                    break
                take = min(count, len(entry.pods))
                target.pods.extend(entry.pods[:take])
                del entry.pods[:take]
                count -= take
        if pool.limited:
            target.reservation = pt.limit_capacity
            reserved = engine.reserved[pool.index]
            for i, c in enumerate(pt.limit_capacity):
                reserved[i] += c
        engine._add_target(target)
        engine.claims_opened += 1


# ------------------------------------------------------------------------ plan


def build_plan(engine: Engine) -> Plan:
    ctx = engine.ctx
    claims = engine.claims()
    listed: dict[int, list[PoolType]] = {}
    for pool in ctx.pools:
        members = [t for t in claims if t.pool is pool]
        if not members:
            continue
        if not pool.limited:
            for target in members:
                listed[id(target)] = _fitting(target)
            continue
        slack = [rem - res for rem, res in zip(pool.remaining, engine.reserved[pool.index])]
        for target in members:
            base = target.reservation or (0,) * len(pool.limited)
            allowed = [pt for pt in _fitting(target) if all(c <= b + s for c, b, s in zip(pt.limit_capacity, base, slack))]
            if allowed:
                top = [max(pt.limit_capacity[i] for pt in allowed) for i in range(len(pool.limited))]
                slack = [s - max(0, t - b) for s, t, b in zip(slack, top, base)]
            listed[id(target)] = allowed
    node_claims = []
    for target in claims:
        types = listed.get(id(target)) or []
        if not types:
            continue
        node_claims.append(_claim_plan(target, types))
    existing = [ExistingNodePlan(t.name, tuple(sorted(p.key for p in t.pods))) for t in engine.targets[: engine.n_fixed] if t.new_pods]
    existing.sort(key=lambda e: e.name)
    unschedulable: list[UnschedulablePod] = []
    for entry in engine.unschedulable:
        reason = _reason(entry, engine)
        unschedulable.extend(UnschedulablePod(pod.key, reason) for pod in entry.pods)
    for target in claims:
        if not listed.get(id(target)):
            unschedulable.extend(UnschedulablePod(pod.key, "limit reached") for pod in target.pods)
    unschedulable.extend(UnschedulablePod(key, reason) for key, reason in engine.ctx.problem.blocked.items())
    unschedulable.sort(key=lambda u: u.pod)
    return Plan(tuple(node_claims), tuple(existing), tuple(unschedulable))


def _fitting(target: Target) -> list[PoolType]:
    ts = target.shape.typeset  # type: ignore[union-attr]
    used = target.used
    return [pt for pt in ts.types if all(c >= u for c, u in zip(pt.effective, used))]


def _claim_plan(target: Target, types: list[PoolType]) -> NodeClaimPlan:
    shape = target.shape
    assert shape is not None
    ts = shape.typeset
    price_of = {pt.name: price for pt, price in zip(ts.types, ts.prices)}
    zones: set[str] = set()
    capacity_types: set[str] = set()
    for pt in types:
        for zone, ct, _ in shape.offerings_of(pt):
            zones.add(zone)
            capacity_types.add(ct)
    names = tuple(pt.name for pt in types)
    requirements = shape.requirements.add(Requirement(wk.INSTANCE_TYPE, False, frozenset(names)))
    requests = Resources.total([*(pod.requests for pod in target.pods), types[0].daemon_overhead])
    return NodeClaimPlan(
        node_pool=shape.pool.name,
        instance_types=names,
        zones=tuple(sorted(zones)),
        capacity_types=tuple(sorted(capacity_types)),
        pods=tuple(sorted(p.key for p in target.pods)),
        price=price_of[names[0]],
        requirements=requirements,
        requests=requests,
    )


def _reason(entry: Entry, engine: Engine) -> str:
    if not engine.ctx.pools:
        return "no nodepools"
    if not entry.reasons:
        return "no nodepool can launch a node for it"
    return "; ".join(f'nodepool "{pool}": {reason}' for pool, reason in entry.reasons)
