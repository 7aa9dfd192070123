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

__all__ = ["lp_lower_bound", "covering_lp_value"]


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
    ctx = Context(problem)
    engine = Engine(ctx, optimize=False)
    demand_by_pool: dict[int, list[float]] = {}
    for pod, spec in engine.pod_specs:
        variant = engine.prepare(spec.variant(spec.variants and next(iter(spec.variants)) or _root()))
        for pool in ctx.pools:
            check = ctx.pool_check(pool, variant)
            if isinstance(check, str):
                continue
            if not any(all(c >= n for c, n in zip(cap, variant.size)) for cap in check.typeset.frontier):
                continue
            demand = demand_by_pool.setdefault(pool.index, [0.0] * len(ctx.dims))
            for i, value in enumerate(variant.size):
                demand[i] += value
            break
    total = 0.0
    for index, demand in sorted(demand_by_pool.items()):
        shape = ctx.template_shapes[index]
        ts = shape.typeset
        total += covering_lp_value(list(ts.prices), [pt.effective for pt in ts.types], demand)
    return total


def _root():  # type: ignore[no-untyped-def]
    from joiner.domain.scheduling.variants import RelaxState

    return RelaxState()
