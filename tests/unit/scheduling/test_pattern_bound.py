"""The pattern (configuration) LP bound and the exact pattern MILP against brute force
(SciPy/HiGHS, development only)."""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench.bounds.lp_bound import covering_lp_value, lp_lower_bound, whole_pod_lower_bound
from bench.bounds.pattern_bound import (
    PoolInstance,
    maximal_patterns,
    pattern_lp_bound,
    pattern_lp_pool,
    pattern_milp_optimum,
    pattern_milp_pool,
    plan_patterns,
)
from joiner.domain.scheduling import SchedulingProblem, solve

from .builders import instance_type, node_pool, pod


def brute_force(inst: PoolInstance) -> float:
    """The cheapest whole-pod plan by exhaustive search: open one node at a time, of any
    type, holding any non-empty set of the remaining pods that fits it (independent of the
    pattern code: no maximality, no LP)."""
    allowed = [set(types) for types in inst.allowed]

    @cache
    def best(remaining: tuple[int, ...]) -> float:
        if not any(remaining):
            return 0.0
        first = next(g for g, n in enumerate(remaining) if n)
        result = float("inf")
        for t, cap in enumerate(inst.capacities):
            if t not in allowed[first]:
                continue
            # Some node holds a pod of the first group left; try every load it can carry.
            ranges = [range(n + 1) if t in allowed[g] else range(1) for g, n in enumerate(remaining)]
            for load in itertools.product(*ranges):
                if load[first] == 0:
                    continue
                used = [sum(k * inst.sizes[g][r] for g, k in enumerate(load)) for r in range(len(cap))]
                if all(u <= c for u, c in zip(used, cap)):
                    result = min(result, inst.prices[t] + best(tuple(n - k for n, k in zip(remaining, load))))
        return result

    return best(tuple(inst.counts))


def aggregate_lp(inst: PoolInstance) -> float:
    demand = [float(sum(size[r] * n for size, n in zip(inst.sizes, inst.counts))) for r in range(len(inst.capacities[0]))]
    return covering_lp_value(inst.prices, inst.capacities, demand)


@st.composite
def instances(draw: st.DrawFn) -> PoolInstance:
    types = draw(st.integers(2, 4))
    groups = draw(st.integers(1, 3))
    capacities: list[tuple[int, ...]] = [(draw(st.integers(2, 9)), draw(st.integers(2, 9))) for _ in range(types)]
    prices = [draw(st.integers(1, 20)) / 4 for _ in range(types)]
    sizes: list[tuple[int, ...]] = [(draw(st.integers(1, 5)), draw(st.integers(1, 5))) for _ in range(groups)]
    counts = [draw(st.integers(1, 4)) for _ in range(groups)]
    allowed = []
    for size in sizes:
        may = draw(st.sets(st.integers(0, types - 1), min_size=1))
        fitting = sorted(t for t in may if all(s <= c for s, c in zip(size, capacities[t])))
        assume(fitting)
        allowed.append(fitting)
    return PoolInstance(prices, capacities, sizes, counts, allowed)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(instances())
def test_pattern_bounds_never_exceed_the_brute_force_optimum_and_beat_the_aggregate_lp(inst: PoolInstance) -> None:
    optimum = brute_force(inst)
    lp = pattern_lp_pool(inst, incumbent_seconds=5.0)
    assert lp.converged
    assert lp.bound <= optimum + 1e-6
    # The integer cover by the generated patterns is a real plan: never below the optimum.
    assert lp.incumbent >= optimum - 1e-6
    # Every pattern's type covers its own pods, so the pattern LP's solution is one of the
    # aggregate LP (which also ignores which types a group allows).
    assert lp.bound >= aggregate_lp(inst) - 1e-6
    exact = pattern_milp_pool(inst)
    assert exact is not None and exact.exact
    assert exact.lp_value == pytest.approx(optimum, abs=1e-6)
    assert lp.bound <= exact.bound + 1e-6


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(instances())
def test_a_bound_cut_short_by_the_time_limit_is_still_valid(inst: PoolInstance) -> None:
    # One master solve and one round of cheap pricing: the Farley certificate, never the
    # unconverged master value.
    result = pattern_lp_pool(inst, time_limit_seconds=0.0)
    assert result.bound <= brute_force(inst) + 1e-6


def test_the_unconverged_master_value_is_not_what_is_reported() -> None:
    # Many small pods on a big type: the first columns (one group per node) are poor, so the
    # master's first value is far above the optimum; cut short, the bound must stay below it.
    inst = PoolInstance([1.0, 0.45], [(9, 9), (3, 3)], [(1, 3), (3, 1), (1, 2), (2, 1)], [2, 2, 2, 2], [[0, 1]] * 4)
    optimum = brute_force(inst)
    early = pattern_lp_pool(inst, time_limit_seconds=0.0)
    assert early.lp_value > optimum  # the restricted master is not a bound
    assert early.bound <= optimum + 1e-9
    assert pattern_lp_pool(inst).bound <= optimum + 1e-9


def test_the_pattern_bound_is_strictly_tighter_than_both_earlier_bounds() -> None:
    # 1.5 CPU types and 1 CPU pods: capacity-wise two nodes hold three pods, but whole pods
    # take one node each.
    types = (instance_type("one.large", 1.6, 8, 1.0, pods=20),)
    pr = SchedulingProblem(pending=tuple(pod(f"p{i}", "1", "1Gi") for i in range(3)), node_pools=(node_pool(),), instance_types={"default": types})
    aggregate = lp_lower_bound(pr)
    whole = whole_pod_lower_bound(pr)
    pattern = pattern_lp_bound(pr)
    plan = solve(pr).cost_per_hour
    assert pattern.converged
    assert aggregate < whole < pattern.bound
    assert pattern.bound == pytest.approx(3.0)
    assert plan == pytest.approx(3.0)
    exact = pattern_milp_optimum(pr)
    assert exact is not None and exact.exact and exact.lp_value == pytest.approx(3.0)


def test_lopsided_types_the_pattern_lp_versus_the_aggregate_lp() -> None:
    types = (
        instance_type("cpu.rich", 2.2, 1.2, 1.0, pods=20),
        instance_type("mem.rich", 1.2, 2.2, 1.0, pods=20),
        instance_type("balanced", 2.2, 2.2, 1.5, pods=20),
    )
    pr = SchedulingProblem(pending=tuple(pod(f"p{i}", "1", "1Gi") for i in range(3)), node_pools=(node_pool(),), instance_types={"default": types})
    # Aggregate: 3 / 1.7 of a lopsided pair. Pattern LP: 0.75 per pod on balanced nodes.
    # Whole pods, whole nodes: a balanced node and a lopsided one.
    assert lp_lower_bound(pr) == pytest.approx(3 / 1.7, rel=1e-6)
    assert pattern_lp_bound(pr).bound == pytest.approx(2.25, abs=1e-6)
    exact = pattern_milp_optimum(pr)
    assert exact is not None and exact.lp_value == pytest.approx(2.5)
    assert solve(pr).cost_per_hour == pytest.approx(2.5)


def test_equal_prices_round_up_to_whole_nodes() -> None:
    # Four pods of 1 CPU on 3-CPU nodes priced 1: the LP says 4/3, any plan pays for 2 nodes.
    inst = PoolInstance([1.0], [(3, 8)], [(1, 1)], [4], [[0]])
    assert pattern_lp_pool(inst).bound == pytest.approx(2.0)
    inst = PoolInstance([1.0, 1.0], [(3, 8), (8, 3)], [(1, 1)], [4], [[0, 1]])
    assert pattern_lp_pool(inst).bound == pytest.approx(2.0)


def test_maximal_patterns_cover_every_pattern() -> None:
    inst = PoolInstance([1.0], [(7, 9)], [(2, 1), (1, 3), (3, 3)], [3, 2, 2], [[0], [0], [0]])
    maximal = maximal_patterns(inst, 0, [0, 1, 2], 10_000)
    assert maximal
    for load in itertools.product(range(4), range(3), range(3)):
        used = [sum(k * inst.sizes[g][r] for g, k in enumerate(load)) for r in range(2)]
        if all(u <= c for u, c in zip(used, inst.capacities[0])):
            assert any(all(p.get(g, 0) >= k for g, k in enumerate(load)) for p in maximal), load
    for p in maximal:
        free = [c - sum(k * inst.sizes[g][r] for g, k in p.items()) for r, c in enumerate(inst.capacities[0])]
        assert all(f >= 0 for f in free)
        assert all(p.get(g, 0) == inst.counts[g] or any(s > f for s, f in zip(inst.sizes[g], free)) for g in range(3))


def test_our_plans_nodes_seed_the_incumbent_which_never_exceeds_the_plan() -> None:
    types = (
        instance_type("cpu.rich", 2.2, 1.2, 1.0, pods=20),
        instance_type("mem.rich", 1.2, 2.2, 1.0, pods=20),
        instance_type("balanced", 2.2, 2.2, 1.5, pods=20),
    )
    pending = tuple(pod(f"a{i}", "1", "1Gi") for i in range(5)) + tuple(pod(f"b{i}", "500m", "256Mi") for i in range(3))
    pr = SchedulingProblem(pending=pending, node_pools=(node_pool(),), instance_types={"default": types})
    plan = solve(pr)
    (seeds,) = plan_patterns(pr, plan)
    # Every pending pod is on one of the plan's nodes, each a pattern of the bounds' model.
    assert sum(k for _, pattern in seeds for k in pattern.values()) == len(pending)
    result = pattern_lp_bound(pr, incumbent_seconds=5.0, plan=plan)
    assert result.bound <= result.incumbent + 1e-9 <= plan.cost_per_hour + 1e-9
