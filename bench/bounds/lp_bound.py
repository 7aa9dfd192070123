"""A lower bound on the cost of any plan: the covering LP's continuous relaxation.

``min sum_t price_t x_t  s.t.  sum_t capacity_t,r x_t >= demand_r,  x >= 0`` per NodePool,
where capacity is allocatable minus the overhead of the DaemonSets that would run on the
type and demand sums the requests of the pending pods the solver assigns to that pool
(the first pool by weight that can take them). Whole nodes and whole pods make the real
optimum higher, so ``cost / bound`` measures how far a plan can be from optimal.

Used by benchmarks and tests only: it needs SciPy (a development dependency), imported
lazily.
"""

from __future__ import annotations

from joiner.domain.scheduling.context import Context
from joiner.domain.scheduling.engine import Engine
from joiner.domain.scheduling.problem import SchedulingProblem
from joiner.domain.scheduling.variants import RelaxState

__all__ = ["lp_lower_bound", "covering_lp_value", "whole_pod_lower_bound", "pool_group_members"]


def covering_lp_value(prices: list[float], capacities: list[tuple[int, ...]], demand: list[float]) -> float:
    """Optimal value of the covering LP with SciPy's HiGHS (inf when infeasible)."""
    from scipy.optimize import linprog

    rows = [r for r, d in enumerate(demand) if d > 0]
    if not rows:
        return 0.0
    if not prices:
        return float("inf")
    scale = [demand[r] for r in rows]
    a_ub = [[-capacities[t][r] / s for t in range(len(prices))] for r, s in zip(rows, scale)]
    b_ub = [-1.0] * len(rows)
    result = linprog(prices, A_ub=a_ub, b_ub=b_ub, bounds=[(0, None)] * len(prices), method="highs")
    if result.status != 0:
        return float("inf")
    return float(result.fun)


def lp_lower_bound(problem: SchedulingProblem) -> float:
    """The LP bound summed over NodePools for the problem's pending pods (existing nodes
    and in-flight capacity are ignored, so it is meaningful when there are none)."""
    ctx, groups_by_pool = _pool_groups(problem)
    total = 0.0
    for index, groups in sorted(groups_by_pool.items()):
        ts = ctx.template_shapes[index].typeset
        demand = [float(sum(size[i] * count for (size, _), count in groups.items())) for i in range(len(ctx.dims))]
        total += covering_lp_value(list(ts.prices), [pt.effective for pt in ts.types], demand)
    return total


def whole_pod_lower_bound(problem: SchedulingProblem, time_limit_seconds: float = 20.0) -> float:
    """A tighter bound that keeps every pod whole and on one instance type: the MILP
    ``min sum_t price_t x_t`` over integer node counts ``x_t`` and integer pod counts
    ``y_gt`` (pods of size ``g`` on type ``t``) with ``sum_t y_gt = n_g`` and
    ``sum_g size_g y_gt <= capacity_t x_t`` per type and resource.

    Every real plan is a solution (sum its nodes per type), so the optimum, and HiGHS's
    dual bound when the time limit stops it early, is a lower bound on any plan. It only
    relaxes *which node* of a type a pod lands on, so unlike :func:`lp_lower_bound` it
    cannot split a pod's CPU from its memory or GPU across node types, nor put a pod on a
    type its own requirements exclude (an arm64-only pod on an amd64 type)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    ctx, groups_by_pool = _pool_groups(problem)
    total = 0.0
    for index, groups in sorted(groups_by_pool.items()):
        ts = ctx.template_shapes[index].typeset
        keys = sorted(groups, key=lambda key: (key[0], sorted(key[1])))
        sizes = [size for size, _ in keys]
        capacities = [pt.effective for pt in ts.types]
        fits = [[t for t, cap in enumerate(capacities) if ts.types[t].name in allowed and all(c >= n for c, n in zip(cap, size))] for size, allowed in keys]
        if any(not options for options in fits):
            return float("inf")
        used_types = sorted({t for options in fits for t in options})
        column = {t: i for i, t in enumerate(used_types)}
        y_columns = [(g, t) for g, options in enumerate(fits) for t in options]
        n_vars = len(used_types) + len(y_columns)
        dims = len(ctx.dims)
        # Rows in units of each resource's largest capacity keep HiGHS's coefficients near 1.
        scale = [max(max(cap[r] for cap in capacities), 1) for r in range(dims)]
        matrix = lil_matrix((len(used_types) * dims + len(sizes), n_vars))
        for j, (g, t) in enumerate(y_columns, start=len(used_types)):
            for r in range(dims):
                matrix[column[t] * dims + r, j] = sizes[g][r] / scale[r]
            matrix[len(used_types) * dims + g, j] = 1
        for t in used_types:
            for r in range(dims):
                matrix[column[t] * dims + r, column[t]] = -capacities[t][r] / scale[r]
        lower = np.concatenate([np.full(len(used_types) * dims, -np.inf), [groups[key] for key in keys]])
        upper = np.concatenate([np.zeros(len(used_types) * dims), [groups[key] for key in keys]])
        cost = np.concatenate([[ts.prices[t] for t in used_types], np.zeros(len(y_columns))])
        result = milp(
            cost,
            constraints=LinearConstraint(matrix.tocsr(), lower, upper),
            integrality=np.ones(n_vars),
            bounds=Bounds(0, np.inf),
            options={"time_limit": time_limit_seconds, "disp": False},
        )
        bound = result.get("mip_dual_bound")
        if bound is None or not np.isfinite(bound):
            bound = result.fun if result.status == 0 else None
        if bound is None:
            return float("nan")
        total += float(bound)
    return total


def _pool_groups(problem: SchedulingProblem) -> tuple[Context, dict[int, dict[tuple[tuple[int, ...], frozenset[str]], int]]]:
    """Pending pods' counts per NodePool index (the first pool by weight that can take
    each pod, as the solver would try) by size and the instance types the pod allows."""
    ctx, members = pool_group_members(problem)
    return ctx, {index: {key: len(pods) for key, pods in groups.items()} for index, groups in members.items()}


def pool_group_members(problem: SchedulingProblem) -> tuple[Context, dict[int, dict[tuple[tuple[int, ...], frozenset[str]], list[str]]]]:
    """:func:`_pool_groups` keeping which pods (their keys) are in each group."""
    ctx = Context(problem)
    engine = Engine(ctx, optimize=False)
    groups_by_pool: dict[int, dict[tuple[tuple[int, ...], frozenset[str]], list[str]]] = {}
    for pod, spec in engine.pod_specs:
        variant = engine.prepare(spec.variant((spec.variants and next(iter(spec.variants))) or _root()))
        for pool in ctx.pools:
            check = ctx.pool_check(pool, variant)
            if isinstance(check, str):
                continue
            if not any(all(c >= n for c, n in zip(cap, variant.size)) for cap in check.typeset.frontier):
                continue
            key = (tuple(variant.size), frozenset(pt.name for pt in check.typeset.types))
            groups_by_pool.setdefault(pool.index, {}).setdefault(key, []).append(pod.key)
            break
    return ctx, groups_by_pool


def _root() -> RelaxState:
    return RelaxState()
