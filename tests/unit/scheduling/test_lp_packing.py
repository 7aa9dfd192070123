"""The fractional knapsack the packer prices patterns with (bounded-variable simplex)
against SciPy's HiGHS (a development dependency)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from joiner.domain.scheduling.lp import maximize_packing


@st.composite
def knapsacks(draw: st.DrawFn) -> tuple[list[float], list[list[int]], list[int], list[int]]:
    items = draw(st.integers(1, 25))
    dims = draw(st.integers(1, 4))
    values = [draw(st.sampled_from((0.0, 0.25, 1.0, 3.5))) + draw(st.floats(0, 2)) for _ in range(items)]
    sizes = [[draw(st.sampled_from((0, 1, 3, 7, 40))) for _ in range(dims)] for _ in range(items)]
    capacity = [draw(st.integers(0, 300)) for _ in range(dims)]
    upper = [draw(st.integers(0, 12)) for _ in range(items)]
    return values, sizes, capacity, upper


@settings(max_examples=300, deadline=None)
@given(knapsacks())
def test_maximize_packing_is_feasible_and_optimal(case: tuple[list[float], list[list[int]], list[int], list[int]]) -> None:
    values, sizes, capacity, upper = case
    solution = maximize_packing(values, sizes, capacity, upper)
    for d, c in enumerate(capacity):
        assert sum(size[d] * n for size, n in zip(sizes, solution)) <= c * (1 + 1e-9) + 1e-9
    assert all(0 <= n <= u for n, u in zip(solution, upper))
    reference = linprog(
        [-v for v in values], A_ub=[[size[d] for size in sizes] for d in range(len(capacity))], b_ub=capacity, bounds=list(zip([0] * len(upper), upper))
    )
    best = -reference.fun
    assert sum(v * n for v, n in zip(values, solution)) >= best - 1e-7 * max(1.0, best)
