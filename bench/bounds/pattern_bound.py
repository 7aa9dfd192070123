"""The pattern (configuration) LP lower bound on whole-pod plans, by column generation.

Per NodePool, a *pattern* is an instance type ``t`` and pod counts ``a_g`` per pod group
(same size, same allowed types) with ``sum_g a_g size_g <= capacity_t`` in every resource,
``a_g = 0`` unless ``g`` may run on ``t`` and ``a_g <= n_g`` (the pending count). The
Gilmore-Gomory LP is ``min sum_p price_p z_p  s.t.  sum_p a_gp z_p >= n_g,  z >= 0``.

Validity: every node of a whole-pod plan holds one pattern (its pods per group, capped at
``n_g``), so counting each node's pattern gives an integer ``z`` that covers every group at
the plan's cost; the LP optimum is therefore at most any plan's cost. The bound reported is
never the restricted master's value but a dual certificate: for any ``pi >= 0`` and
``U_t >= max{pi.a : a a pattern on t}`` (HiGHS's dual bound on that knapsack, or a
Lagrangian or fractional bound computed exactly here), ``theta = min(1, min_t price_t / U_t)`` makes ``theta * pi`` feasible for the LP's
dual (no pattern prices above its type), so ``theta * sum_g pi_g n_g`` is at most the LP
optimum (Farley's bound); at convergence ``theta = 1``. When all types cost the same
``c``, a plan's cost is ``c`` times a whole number of nodes, so ``c * ceil(bound / c)``
is valid too.

With few groups, :func:`pattern_milp_optimum` enumerates the *maximal* patterns (no pod
of any group with ``a_g < n_g`` can be added) and solves the integer covering program over
them exactly. Every pattern is dominated componentwise by a maximal pattern of the same
type and price, and pods over a group's count are simply dropped (capacity only frees up),
so restricting to maximal patterns loses no optimum: the value is the optimum over all
whole-pod plans of this per-pool model (each pod on a type it allows, nodes priced at the
type's cheapest offering, DaemonSet overhead deducted).

Used by benchmarks and tests only: it needs SciPy (a development dependency), imported
lazily.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from joiner.domain.model import Plan
from joiner.domain.scheduling.problem import SchedulingProblem

__all__ = [
    "PoolInstance",
    "PatternResult",
    "pool_instances",
    "plan_patterns",
    "pattern_lp_pool",
    "pattern_lp_bound",
    "pattern_milp_pool",
    "pattern_milp_optimum",
]

#: Reduced costs below ``-EPS * price`` count as improving columns.
EPS = 1e-9


@dataclass
class PoolInstance:
    """One NodePool's whole-pod covering problem: per type price and capacity, per group
    size, count and the indexes of the types it may run on (already fitting one pod)."""

    prices: list[float]
    capacities: list[tuple[int, ...]]
    sizes: list[tuple[int, ...]]
    counts: list[int]
    allowed: list[list[int]]
    #: Instance type names by index, when built from a problem.
    type_names: list[str] = field(default_factory=list)


@dataclass
class PatternResult:
    """A valid lower bound and how it was reached."""

    bound: float
    lp_value: float = math.nan
    converged: bool = True
    exact: bool = False
    iterations: int = 0
    columns: int = 0
    types: int = 0
    seconds: float = 0.0
    #: The cost of the best whole-pod plan found (an upper bound on the optimum of the
    #: bounds' model, not a bound on our plans): the integer program over the generated
    #: patterns ("price and branch"), NaN when not computed.
    incumbent: float = math.nan
    notes: list[str] = field(default_factory=list)


def pool_instances(problem: SchedulingProblem) -> list[PoolInstance]:
    """The problem's pending pods as one :class:`PoolInstance` per NodePool (pods go to
    the first pool by weight that can take them, as in :mod:`lp_bound`)."""
    return [inst for _, inst, _ in _instances(problem)]


GroupKey = tuple[tuple[int, ...], frozenset[str]]


def _instances(problem: SchedulingProblem) -> list[tuple[int, PoolInstance, dict[str, int]]]:
    """Per NodePool index: its instance and each pod key's group (the grouping of
    :func:`bench.bounds.lp_bound.pool_group_members`)."""
    from bench.bounds.lp_bound import pool_group_members

    ctx, groups_by_pool = pool_group_members(problem)
    result = []
    for index, groups in sorted(groups_by_pool.items()):
        ts = ctx.template_shapes[index].typeset
        keys = sorted(groups, key=lambda key: (key[0], sorted(key[1])))
        capacities = [tuple(pt.effective) for pt in ts.types]
        allowed = [[t for t, cap in enumerate(capacities) if ts.types[t].name in names and all(c >= n for c, n in zip(cap, size))] for size, names in keys]
        inst = PoolInstance(list(ts.prices), capacities, [tuple(size) for size, _ in keys], [len(groups[key]) for key in keys], allowed)
        inst.type_names = [pt.name for pt in ts.types]
        group_of = {pod_key: g for g, key in enumerate(keys) for pod_key in groups[key]}
        result.append((index, inst, group_of))
    return result


def plan_patterns(problem: SchedulingProblem, plan: Plan) -> list[list[tuple[int, dict[int, int]]]]:
    """Per pool of :func:`pool_instances`, the plan's new nodes as patterns (the node's
    first instance type, its pods per group), so the integer cover can start from our plan:
    its incumbent is then never above the plan's cost in the bounds' model."""
    out = []
    for _index, inst, group_of in _instances(problem):
        column = {name: t for t, name in enumerate(inst.type_names)}
        patterns = []
        for claim in plan.node_claims:
            counts: dict[int, int] = {}
            for pod_key in claim.pods:
                if pod_key in group_of:
                    counts[group_of[pod_key]] = counts.get(group_of[pod_key], 0) + 1
            if counts and claim.instance_types and claim.instance_types[0] in column:
                patterns.append((column[claim.instance_types[0]], counts))
        out.append(patterns)
    return out


def _pattern_matrix(inst: PoolInstance, columns: Sequence[tuple[int, dict[int, int]]]) -> Any:
    """The sparse (group x column) matrix of pod counts the patterns hold."""
    from scipy.sparse import csr_matrix

    data, rows, cols = [], [], []
    for j, (_, pattern) in enumerate(columns):
        for g, k in pattern.items():
            data.append(float(k))
            rows.append(g)
            cols.append(j)
    return csr_matrix((data, (rows, cols)), shape=(len(inst.counts), len(columns)))


@contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS's MIP solver prints some diagnostics straight to file descriptor 1, which
    would interleave with the benchmarks' JSON lines: send them to /dev/null."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _fits(load: Sequence[int], capacity: Sequence[int]) -> bool:
    return all(x <= c for x, c in zip(load, capacity))


def _prune(inst: PoolInstance) -> tuple[list[int], list[list[int]]]:
    """Types no other type dominates, and each type's groups. Type ``t`` is dominated by
    ``u`` when ``u`` takes every group ``t`` takes, has at least ``t``'s capacity in every
    resource and costs no more: every pattern on ``t`` is one on ``u`` at no higher price,
    so dropping ``t`` changes neither the LP nor the integer optimum."""
    groups_of: dict[int, set[int]] = {}
    for g, types in enumerate(inst.allowed):
        for t in types:
            groups_of.setdefault(t, set()).add(g)
    candidates = sorted(groups_of, key=lambda t: (inst.prices[t], [-c for c in inst.capacities[t]], t))
    kept: list[int] = []
    for t in candidates:
        if not any(inst.prices[u] <= inst.prices[t] and groups_of[t] <= groups_of[u] and _fits(inst.capacities[t], inst.capacities[u]) for u in kept):
            kept.append(t)
    return kept, [sorted(groups_of[t]) for t in kept]


def _max_copies(size: Sequence[int], free: Sequence[int]) -> int:
    return min((f // s for s, f in zip(size, free) if s > 0), default=1 << 30)


def _greedy(inst: PoolInstance, t: int, groups: list[int], duals: list[float]) -> list[tuple[float, dict[int, int]]]:
    """Good (not necessarily best) patterns on ``t`` for the duals: groups by dual value per
    unit of the type's capacity (summed over resources, and at the bottleneck resource),
    each as many as fit."""
    cap = inst.capacities[t]
    positive = [g for g in groups if duals[g] > 0]
    out = []
    for combine in (sum, max):
        weight = {g: combine([s / c for s, c in zip(inst.sizes[g], cap) if c > 0]) or 1e-12 for g in positive}
        free = list(cap)
        pattern: dict[int, int] = {}
        for g in sorted(positive, key=lambda g: -duals[g] / weight[g]):
            k = min(inst.counts[g], _max_copies(inst.sizes[g], free))
            if k > 0:
                pattern[g] = k
                free = [f - k * s for f, s in zip(free, inst.sizes[g])]
        out.append((sum(duals[g] * k for g, k in pattern.items()), pattern))
    return out


def _fractional_upper(inst: PoolInstance, t: int, groups: list[int], duals: list[float]) -> float:
    """A proven upper bound on the best pattern value on ``t``: the min over resources of
    the fractional bounded knapsack in that resource alone (exact greedy)."""
    cap = inst.capacities[t]
    best = math.inf
    for r, c in enumerate(cap):
        items = [(duals[g], inst.sizes[g][r], inst.counts[g]) for g in groups if duals[g] > 0]
        if any(s == 0 for _, s, _ in items):
            continue  # unbounded in this resource alone
        items.sort(key=lambda item: -item[0] / item[1])
        free, value = float(c), 0.0
        for d, s, n in items:
            take = min(n, free / s)
            value += d * take
            free -= take * s
            if free <= 0:
                break
        best = min(best, value)
    if math.isinf(best):
        best = sum(duals[g] * inst.counts[g] for g in groups if duals[g] > 0)
    return best


def _knapsack(inst: PoolInstance, t: int, groups: list[int], duals: list[float], time_limit: float) -> tuple[float, float, dict[int, int]]:
    """The best pattern on ``t`` for the duals by HiGHS: (pattern value, proven upper bound
    on any pattern's value, pattern). Rows are scaled by the capacity; the returned pattern
    is checked in exact integers (and trimmed if HiGHS's tolerances let it overflow)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    items = [g for g in groups if duals[g] > 0]
    if not items:
        return 0.0, 0.0, {}
    cap = inst.capacities[t]
    dims = [r for r, c in enumerate(cap) if any(inst.sizes[g][r] for g in items)]
    matrix = np.array([[inst.sizes[g][r] / cap[r] for g in items] for r in dims], dtype=float).reshape(len(dims), len(items))
    upper = np.array([min(inst.counts[g], _max_copies(inst.sizes[g], cap)) for g in items], dtype=float)
    values = np.array([duals[g] for g in items])
    with _quiet_stdout():
        result = milp(
            -values,
            constraints=LinearConstraint(matrix, -np.inf, np.ones(len(dims))) if dims else (),
            integrality=np.ones(len(items)),
            bounds=Bounds(np.zeros(len(items)), upper),
            options={"time_limit": max(time_limit, 0.05), "disp": False, "mip_rel_gap": 1e-7},
        )
    bound = result.get("mip_dual_bound")
    upper_value = -float(bound) if bound is not None and np.isfinite(bound) else math.inf
    pattern: dict[int, int] = {}
    if result.x is not None:
        free = list(cap)
        for g, x in zip(items, result.x):
            k = min(round(float(x)), _max_copies(inst.sizes[g], free))
            if k > 0:
                pattern[g] = k
                free = [f - k * s for f, s in zip(free, inst.sizes[g])]
    value = sum(duals[g] * k for g, k in pattern.items())
    # HiGHS's dual bound carries its own tolerances: a relative and an absolute margin.
    upper_value = max(upper_value * (1 + 1e-9) + 1e-12, value)
    return value, min(upper_value, _fractional_upper(inst, t, groups, duals)), pattern


def _lagrangian_uppers(inst: PoolInstance, types: list[int], groups_of: list[list[int]], duals: list[float]) -> list[tuple[float, dict[int, int]]]:
    """Per type, a proven upper bound on the best pattern's value near the knapsack's LP
    relaxation, and a pattern from rounding that relaxation down and filling greedily.

    One block-diagonal LP relaxes every type's knapsack; its row duals ``mu_t >= 0`` are
    only a hint: the bound is the Lagrangian ``sum_r mu_tr + sum_g u_g max(0, pi_g -
    sum_r mu_tr size_gr / cap_tr)`` (rows scaled by capacity, ``u_g`` the count bound),
    computed here exactly, which is at least any pattern's value for any ``mu >= 0``."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    blocks: list[tuple[int, list[int], int, list[int], int]] = []  # (type, items, first var, resource rows, first row)
    objective: list[float] = []
    upper: list[float] = []
    data: list[float] = []
    rows: list[int] = []
    cols: list[int] = []
    n_rows = 0
    for t, groups in zip(types, groups_of):
        items = [g for g in groups if duals[g] > 0]
        cap = inst.capacities[t]
        dims = [r for r in range(len(cap)) if any(inst.sizes[g][r] for g in items)]
        blocks.append((t, items, len(objective), dims, n_rows))
        for i, r in enumerate(dims):
            for j, g in enumerate(items):
                if inst.sizes[g][r]:
                    data.append(inst.sizes[g][r] / cap[r])
                    rows.append(n_rows + i)
                    cols.append(len(objective) + j)
        n_rows += len(dims)
        for g in items:
            objective.append(-duals[g] / inst.prices[t])
            upper.append(float(min(inst.counts[g], _max_copies(inst.sizes[g], cap))))
    if not objective or not n_rows:
        return [(_fractional_upper(inst, t, groups, duals), {}) for t, groups in zip(types, groups_of)]
    matrix = csr_matrix((data, (rows, cols)), shape=(n_rows, len(objective)))
    result = linprog(np.array(objective), A_ub=matrix, b_ub=np.ones(n_rows), bounds=list(zip([0.0] * len(upper), upper)), method="highs")
    out: list[tuple[float, dict[int, int]]] = []
    for (t, items, first, dims, row), groups in zip(blocks, groups_of):
        cheap = _fractional_upper(inst, t, groups, duals)
        if result.status != 0:
            out.append((cheap, {}))
            continue
        # linprog's marginals are d(objective)/d(b) <= 0 for the scaled objective -pi/price.
        mu = [max(0.0, -float(result.ineqlin.marginals[row + i])) * inst.prices[t] for i in range(len(dims))]
        cap = inst.capacities[t]
        bound = sum(mu)
        for j, g in enumerate(items):
            load = sum(m * inst.sizes[g][r] / cap[r] for m, r in zip(mu, dims))
            bound += upper[first + j] * max(0.0, duals[g] - load)
        free = list(cap)
        pattern: dict[int, int] = {}
        order = sorted(range(len(items)), key=lambda j: -float(result.x[first + j]) % 1.0)
        for j in order:  # whole parts first, then the greedy fill takes the rest
            g = items[j]
            k = min(int(float(result.x[first + j]) + 1e-9), _max_copies(inst.sizes[g], free))
            if k > 0:
                pattern[g] = k
                free = [f - k * s for f, s in zip(free, inst.sizes[g])]
        for j in sorted(range(len(items)), key=lambda j: -duals[items[j]]):
            g = items[j]
            k = min(inst.counts[g] - pattern.get(g, 0), _max_copies(inst.sizes[g], free))
            if k > 0:
                pattern[g] = pattern.get(g, 0) + k
                free = [f - k * s for f, s in zip(free, inst.sizes[g])]
        out.append((min(cheap, bound * (1 + 1e-12)), pattern))
    return out


def _price(
    inst: PoolInstance,
    types: list[int],
    groups_of: list[list[int]],
    duals: list[float],
    deadline: float,
    knapsack_seconds: float,
    columns_wanted: int,
) -> tuple[float, list[tuple[int, dict[int, int]]]]:
    """Exact pricing where it matters: ``(theta, patterns)`` with ``theta = min(1, min_t
    price_t / U_t)`` for proven upper bounds ``U_t`` on each type's best pattern value.

    Types are visited by their cheap bound ``F_t`` (:func:`_lagrangian_uppers`), highest ratio
    ``F_t / price_t`` first, and solved exactly (HiGHS) until the next ratio is at most
    both 1 and the worst exact ratio so far (no remaining type can lower ``theta`` or
    price out) and ``columns_wanted`` improving patterns are found; the types left keep
    ``F_t`` as their bound, which is valid."""
    cheap = _lagrangian_uppers(inst, types, groups_of, duals)
    ratios = sorted(((upper / inst.prices[t], t, groups) for (upper, _), t, groups in zip(cheap, types, groups_of)), key=lambda item: -item[0])
    worst = 1.0
    patterns: list[tuple[int, dict[int, int]]] = [(t, pattern) for (_, pattern), t in zip(cheap, types) if pattern]
    for solved, (ratio, t, groups) in enumerate(ratios):
        if ratio <= worst and (ratio <= 1.0 or solved >= columns_wanted):
            break
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            worst = max(worst, ratio)  # no time left: the cheap bound stands for this and later types
            break
        found, upper, pattern = _knapsack(inst, t, groups, duals, min(knapsack_seconds, remaining))
        worst = max(worst, upper / inst.prices[t])
        if found > inst.prices[t] * (1 + EPS):
            patterns.append((t, pattern))
    return 1.0 / worst, patterns


def _master(prices: list[float], columns: list[tuple[int, dict[int, int]]], counts: list[int]) -> tuple[float, list[float], list[float]]:
    """The restricted master LP's value, duals (clipped at zero) and solution."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix

    data, rows, cols = [], [], []
    for j, (_, pattern) in enumerate(columns):
        for g, k in pattern.items():
            data.append(-float(k))
            rows.append(g)
            cols.append(j)
    a_ub = csr_matrix((data, (rows, cols)), shape=(len(counts), len(columns)))
    cost = [prices[t] for t, _ in columns]
    result = linprog(cost, A_ub=a_ub, b_ub=[-float(n) for n in counts], bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"pattern master LP failed: {result.message}")
    return float(result.fun), [max(0.0, -float(m)) for m in result.ineqlin.marginals], [float(x) for x in result.x]


def _reduced(inst: PoolInstance, t: int, pattern: dict[int, int], duals: list[float]) -> float:
    return inst.prices[t] - sum(duals[g] * k for g, k in pattern.items())


def pattern_lp_pool(
    inst: PoolInstance,
    time_limit_seconds: float = 60.0,
    knapsack_seconds: float = 2.0,
    smoothing: float = 0.5,
    columns_wanted: int = 10,
    incumbent_seconds: float = 0.0,
    seeds: Sequence[tuple[int, dict[int, int]]] = (),
) -> PatternResult:
    """A valid lower bound from the pattern LP of one pool (see the module docstring):
    column generation with exact HiGHS pricing each round on the types whose Lagrangian
    bound could lower the certificate or price out (plus rounded and greedy extra columns),
    stabilised by Wentges smoothing; each round's knapsack bounds give a Farley certificate,
    and the best one is returned whether or not it converged in time. With
    ``incumbent_seconds`` it also looks for a cheap plan among the generated patterns and
    ``seeds`` (say, our plan's nodes: then the incumbent is at most our plan's cost)."""
    start = time.perf_counter()
    deadline = start + time_limit_seconds
    if not inst.counts or not any(inst.counts):
        return PatternResult(0.0, 0.0, exact=False)
    if any(not types for types, n in zip(inst.allowed, inst.counts) if n > 0):
        return PatternResult(math.inf, math.inf)
    types, groups_of = _prune(inst)
    columns: list[tuple[int, dict[int, int]]] = []
    seen: set[tuple[int, tuple[tuple[int, int], ...]]] = set()

    def add(t: int, pattern: dict[int, int]) -> bool:
        key = (t, tuple(sorted(pattern.items())))
        if key in seen or not pattern:
            return False
        seen.add(key)
        columns.append((t, pattern))
        return True

    for g, n in enumerate(inst.counts):
        for t, groups in zip(types, groups_of):
            if g in groups:
                add(t, {g: min(n, _max_copies(inst.sizes[g], inst.capacities[t]))})
    best = 0.0
    iterations = 0
    converged = False
    value = math.nan
    master_duals: list[float] = []
    solution: list[float] = []
    # Wentges smoothing: price at a convex combination of the master's duals and the duals
    # with the best certified bound so far (the "center"). The certificate holds for any
    # duals, so this only changes which columns are found, not validity.
    center: list[float] | None = None
    center_bound = -math.inf
    alpha = smoothing
    while True:
        iterations += 1
        value, master_duals, solution = _master(inst.prices, columns, inst.counts)
        if best >= value * (1 - 1e-7):
            converged = True
            break
        remaining = deadline - time.perf_counter()
        if remaining <= 0 and iterations > 1:
            break
        duals = master_duals if center is None or alpha == 0 else [alpha * c + (1 - alpha) * d for c, d in zip(center, master_duals)]
        theta, priced = _price(inst, types, groups_of, duals, deadline, knapsack_seconds, columns_wanted)
        certified = theta * sum(d * n for d, n in zip(duals, inst.counts))
        best = max(best, certified)
        if certified > center_bound:
            center, center_bound = duals, certified
        added = 0
        for t, pattern in priced:
            if _reduced(inst, t, pattern, master_duals) < -EPS * inst.prices[t] and add(t, pattern):
                added += 1
        for t, groups in zip(types, groups_of):
            for _, pattern in _greedy(inst, t, groups, master_duals):
                if _reduced(inst, t, pattern, master_duals) < -EPS * inst.prices[t] and add(t, pattern):
                    added += 1
        if added == 0:
            if duals is master_duals:
                converged = theta >= 1.0 - 1e-6
                break
            alpha = 0.0  # mispricing: price at the master's own duals next
        else:
            alpha = smoothing
    prices = {inst.prices[t] for t in types}
    if len(prices) == 1:
        c = prices.pop()
        best = c * math.ceil(best / c - 1e-9)
    incumbent = math.nan
    if incumbent_seconds > 0:
        # A small integer program HiGHS can search: the LP's support, the columns with the
        # smallest reduced costs, and the seeds; the seeds alone are a cover if complete.
        valid = [
            (t, p) for t, p in seeds if _fits([sum(k * inst.sizes[g][r] for g, k in p.items()) for r in range(len(inst.capacities[t]))], inst.capacities[t])
        ]
        support = [j for j, x in enumerate(solution) if x > 1e-9]
        near = sorted(range(len(columns)), key=lambda j: _reduced(inst, columns[j][0], columns[j][1], master_duals))[:1000]
        chosen = [columns[j] for j in sorted(set(support) | set(near))] + valid
        incumbent = _restricted_milp(inst, chosen, incumbent_seconds)
        covered = [0] * len(inst.counts)
        for _, p in valid:
            for g, k in p.items():
                covered[g] += k
        if all(c >= n for c, n in zip(covered, inst.counts)):
            seeded = sum(inst.prices[t] for t, _ in valid)
            incumbent = seeded if math.isnan(incumbent) else min(incumbent, seeded)
    return PatternResult(
        best,
        value,
        converged,
        iterations=iterations,
        columns=len(columns),
        types=len(types),
        seconds=time.perf_counter() - start,
        incumbent=incumbent,
    )


def _restricted_milp(inst: PoolInstance, columns: list[tuple[int, dict[int, int]]], time_limit: float) -> float:
    """The cheapest integer cover by the generated patterns (HiGHS within the time limit;
    NaN if it found none). Dropping the pods a cover has too many of leaves a whole-pod
    plan of that cost, so it is an upper bound on the model's optimum."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    matrix = _pattern_matrix(inst, columns)
    with _quiet_stdout():
        result = milp(
            np.array([inst.prices[t] for t, _ in columns]),
            constraints=LinearConstraint(matrix, np.array(inst.counts, dtype=float), np.inf),
            integrality=np.ones(len(columns)),
            bounds=Bounds(0, np.inf),
            options={"time_limit": time_limit, "disp": False},
        )
    if result.x is None:
        return math.nan
    counts = [round(float(x)) for x in result.x]
    covered = [0] * len(inst.counts)
    for (_, pattern), z in zip(columns, counts):
        for g, k in pattern.items():
            covered[g] += k * z
    if any(c < n for c, n in zip(covered, inst.counts)):
        return math.nan
    return sum(inst.prices[t] * z for (t, _), z in zip(columns, counts))


def pattern_lp_bound(problem: SchedulingProblem, time_limit_seconds: float = 60.0, incumbent_seconds: float = 0.0, plan: Plan | None = None) -> PatternResult:
    """:func:`pattern_lp_pool` summed over the problem's NodePools (pending pods only);
    ``plan``'s nodes seed the incumbent search."""
    start = time.perf_counter()
    instances = pool_instances(problem)
    seeds = plan_patterns(problem, plan) if plan is not None else [[] for _ in instances]
    total = PatternResult(0.0, 0.0)
    incumbents: list[float] = []
    for i, inst in enumerate(instances):
        share = max(1.0, (time_limit_seconds - (time.perf_counter() - start)) / (len(instances) - i))
        part = pattern_lp_pool(inst, share, incumbent_seconds=incumbent_seconds, seeds=seeds[i])
        total.bound += part.bound
        total.lp_value += part.lp_value
        total.converged &= part.converged
        total.iterations += part.iterations
        total.columns += part.columns
        total.types += part.types
        incumbents.append(part.incumbent)
    total.incumbent = sum(incumbents) if incumbents else math.nan  # NaN if any pool has none
    total.seconds = time.perf_counter() - start
    return total


def maximal_patterns(inst: PoolInstance, t: int, groups: list[int], limit: int) -> list[dict[int, int]] | None:
    """Every maximal pattern on ``t`` over ``groups`` (None when there are more than
    ``limit``, or the search takes too long): no group below its count has room for one
    more pod."""
    cap = inst.capacities[t]
    out: list[dict[int, int]] = []
    budget = [20 * limit]

    def walk(i: int, free: list[int], chosen: dict[int, int]) -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        if i == len(groups):
            if all(chosen.get(g, 0) >= inst.counts[g] or not _fits(inst.sizes[g], free) for g in groups):
                out.append(dict(chosen))
                if len(out) > limit:
                    return False
            return True
        g = groups[i]
        top = min(inst.counts[g], _max_copies(inst.sizes[g], free))
        for k in range(top, -1, -1):
            rest = [f - k * s for f, s in zip(free, inst.sizes[g])]
            # Fewer than the most of the *last* group is never maximal.
            if i == len(groups) - 1 and k < top:
                break
            if k:
                chosen[g] = k
            else:
                chosen.pop(g, None)
            if not walk(i + 1, rest, chosen):
                return False
        chosen.pop(g, None)
        return True

    if not walk(0, list(cap), {}):
        return None
    return [p for p in out if p]


def _undominated(
    inst: PoolInstance,
    types: list[int],
    groups_of: list[list[int]],
    columns: list[tuple[int, dict[int, int]]],
) -> list[tuple[int, dict[int, int]]]:
    """The columns whose pods fit no type that comes before theirs in (price, order): a
    pattern that also fits an earlier type ``u`` (all its groups allowed there) is the same
    pods on a node that costs no more, so any cover using it can switch to ``u`` at no
    extra cost and the optimum survives the pruning."""
    import numpy as np

    if not columns:
        return columns
    order = sorted(range(len(types)), key=lambda i: (inst.prices[types[i]], i))
    rank = {types[i]: position for position, i in enumerate(order)}
    counts = np.zeros((len(columns), len(inst.counts)), dtype=np.int64)
    for j, (_, pattern) in enumerate(columns):
        for g, k in pattern.items():
            counts[j, g] = k
    sizes = np.array(inst.sizes, dtype=np.int64).reshape(len(inst.counts), -1)
    if sizes.size and int(sizes.max()) * int(max(inst.counts)) * len(inst.counts) >= 2**62:
        return columns  # int64 loads could overflow: keep every column
    loads = counts @ sizes
    column_rank = np.array([rank[t] for t, _ in columns])
    keep = np.ones(len(columns), dtype=bool)
    for position, i in enumerate(order):
        u = types[i]
        outside = np.array([g not in set(groups_of[i]) for g in range(len(inst.counts))])
        fits = (loads <= np.array(inst.capacities[u], dtype=np.int64)).all(axis=1) & ~(counts[:, outside] > 0).any(axis=1)
        keep &= ~(fits & (column_rank > position))
    return [column for column, kept in zip(columns, keep) if kept]


def pattern_milp_pool(inst: PoolInstance, time_limit_seconds: float = 60.0, pattern_limit: int = 200_000) -> PatternResult | None:
    """The exact whole-pod optimum of one pool by the pattern MILP over all maximal
    patterns (None when they number more than ``pattern_limit``). If HiGHS stops at the
    time limit, the result is its dual bound and ``exact`` is False."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    start = time.perf_counter()
    if not any(inst.counts):
        return PatternResult(0.0, 0.0, exact=True)
    if any(not types for types, n in zip(inst.allowed, inst.counts) if n > 0):
        return PatternResult(math.inf, math.inf, exact=True)
    types, groups_of = _prune(inst)
    columns: list[tuple[int, dict[int, int]]] = []
    for t, groups in zip(types, groups_of):
        patterns = maximal_patterns(inst, t, groups, pattern_limit - len(columns))
        if patterns is None:
            return None
        columns.extend((t, p) for p in patterns)
    columns = _undominated(inst, types, groups_of, columns)
    matrix = _pattern_matrix(inst, columns)
    cost = np.array([inst.prices[t] for t, _ in columns])
    with _quiet_stdout():
        result = milp(
            cost,
            constraints=LinearConstraint(matrix, np.array(inst.counts, dtype=float), np.inf),
            integrality=np.ones(len(columns)),
            bounds=Bounds(0, np.inf),
            options={"time_limit": max(1.0, time_limit_seconds - (time.perf_counter() - start)), "disp": False, "mip_rel_gap": 1e-9},
        )
    bound = result.get("mip_dual_bound")
    exact = result.status == 0
    # ``lp_value`` is the best plan found (the optimum when exact); ``bound`` HiGHS's dual
    # bound, never above it.
    value = float(result.fun) if result.x is not None else math.nan
    bound_value = float(bound) if bound is not None and np.isfinite(bound) else 0.0
    if exact and not math.isnan(value):
        bound_value = min(value, bound_value) if bound_value > 0 else value
    return PatternResult(bound_value, value, exact, exact=exact, columns=len(columns), types=len(types), seconds=time.perf_counter() - start)


def pattern_milp_optimum(problem: SchedulingProblem, time_limit_seconds: float = 60.0, pattern_limit: int = 200_000) -> PatternResult | None:
    """:func:`pattern_milp_pool` summed over the NodePools (None if any pool has too many
    maximal patterns)."""
    start = time.perf_counter()
    total = PatternResult(0.0, 0.0, exact=True)
    for inst in pool_instances(problem):
        part = pattern_milp_pool(inst, time_limit_seconds, pattern_limit)
        if part is None:
            return None
        total.bound += part.bound
        total.lp_value += part.lp_value
        total.exact &= part.exact
        total.converged &= part.converged
        total.columns += part.columns
        total.types += part.types
    total.seconds = time.perf_counter() - start
    return total
