"""Exact pricing in the packer's column generation for few pod sizes.

The rounded fractional knapsack missed patterns such as 8 + 1 + 4 pods of three large shapes
on one m6g.12xlarge, so the dive's "LP" stayed above the true pattern LP and the packing 1.7%
above the proven optimum."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bounds.pattern_bound import pattern_milp_optimum
from bench.cost import SLIVER_NODES, _daemonsets, _pool, _room
from bench.workloads import sliver_pods
from joiner.domain.catalog import load_bundled_catalog
from joiner.domain.scheduling import SchedulingProblem, solve
from joiner.domain.scheduling.packer import PackType, _Packer

from .checks import check_plan


def test_three_large_shapes_are_packed_at_the_proven_optimum() -> None:
    catalog = load_bundled_catalog()
    pool = _pool("realistic")
    large = sliver_pods(300, 0, _room(tuple(SLIVER_NODES[letter] for letter in "cmr")))
    wanted = {"large-0": 32, "large-1": 32, "large-2": 28}
    pods = []
    for pod in large:
        app = pod.labels["app"]
        if wanted[app]:
            pods.append(pod)
            wanted[app] -= 1
    problem = SchedulingProblem(pending=tuple(pods), daemonsets=_daemonsets(), node_pools=(pool,), instance_types={pool.name: catalog.instance_types()})
    optimum = pattern_milp_optimum(problem, time_limit_seconds=60)
    assert optimum is not None and optimum.exact
    plan = solve(problem)
    check_plan(problem, plan)
    assert plan.cost_per_hour <= optimum.lp_value * 1.001  # 17.5 against 17.2032 before


SIZES = st.tuples(st.integers(0, 9), st.integers(0, 9), st.just(1))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(SIZES, st.integers(0, 8), st.floats(0.0, 10.0, allow_nan=False)), min_size=1, max_size=4),
    st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 12)),
)
def test_exact_pricing_finds_the_most_valuable_pattern(items, capacity) -> None:  # type: ignore[no-untyped-def]
    sizes = [size for size, _, _ in items]
    counts = [count for _, count, _ in items]
    prices = [price for _, _, price in items]
    packer = _Packer(sizes, counts, [PackType(capacity, 1.0)], None)
    order = list(range(len(items)))
    found = packer._exact_knapsack(0, prices, counts, order)
    best = 0.0
    for combo in itertools.product(*(range(c + 1) for c in counts)):
        if all(sum(n * size[d] for n, size in zip(combo, sizes)) <= capacity[d] for d in range(3)):
            best = max(best, sum(n * p for n, p in zip(combo, prices) if p > 0))
    # At most 9 counts of each of 3 items before the last: within the search limit.
    assert found is not None
    assert all(0 < n <= counts[i] for i, n in found.items())
    assert all(sum(n * sizes[i][d] for i, n in found.items()) <= capacity[d] for d in range(3))
    assert abs(sum(prices[i] * n for i, n in found.items()) - best) <= 1e-9 * max(1.0, best)
