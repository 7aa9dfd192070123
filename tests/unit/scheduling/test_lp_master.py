"""The column-generation master LP (:class:`IncrementalCoveringLP`): optimal, and finite on
degenerate problems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain.scheduling.lp import IncrementalCoveringLP

scipy_optimize = pytest.importorskip("scipy.optimize")

#: A pattern master captured from a real packing (1,000 pods of 40 shapes, 38 item groups):
#: three solves, columns added between them. Highly degenerate: the third solve stalled
#: through the 5,000-pivot cap when ties in the ratio test left by basis position.
DEGENERATE = Path(__file__).parent / "data" / "degenerate_master_lp.json"


def _reference(costs: list[float], columns: list[dict[int, float]], demand: list[float]) -> float:
    rows = [[-column.get(r, 0.0) for column in columns] for r in range(len(demand))]
    result = scipy_optimize.linprog(costs, A_ub=rows, b_ub=[-d for d in demand], method="highs")
    assert result.status == 0
    return float(result.fun)


def test_a_degenerate_master_is_solved_in_few_pivots_and_to_the_optimum() -> None:
    log = json.loads(DEGENERATE.read_text())
    master = IncrementalCoveringLP(log["demand"])
    costs: list[float] = []
    columns: list[dict[int, float]] = []
    solution = None
    for step in log["steps"]:
        for cost, column in step:
            parsed = {int(row): value for row, value in column.items()}
            master.add_column(cost, parsed)
            costs.append(cost)
            columns.append(parsed)
        solution = master.solve()
    assert solution is not None
    assert solution.objective == pytest.approx(_reference(costs, columns, log["demand"]), rel=1e-7)
    # Bland's rule with a consistent leaving order ends degenerate stalls: a few hundred
    # pivots for the three solves (the earlier ratio test ran into the 5,000-pivot cap).
    assert master.pivots < 1000


@settings(max_examples=60, deadline=None)
@given(
    demand=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    data=st.data(),
)
def test_incremental_solves_reach_the_optimum_of_every_column_added_so_far(demand: list[int], data: st.DataObject) -> None:
    """Integer patterns with small counts are degenerate by construction (many ties)."""
    rows = len(demand)
    master = IncrementalCoveringLP([float(d) for d in demand])
    costs: list[float] = []
    columns: list[dict[int, float]] = []
    for row in range(rows):  # every row coverable from the start
        master.add_column(1.0, {row: 1.0})
        costs.append(1.0)
        columns.append({row: 1.0})
    batches = data.draw(
        st.lists(
            st.lists(st.tuples(st.integers(1, 4), st.dictionaries(st.integers(0, rows - 1), st.integers(1, 3), min_size=1)), min_size=1, max_size=5),
            min_size=1,
            max_size=4,
        )
    )
    for batch in batches:
        for price, column in batch:
            master.add_column(float(price) / 2, {r: float(v) for r, v in column.items()})
            costs.append(float(price) / 2)
            columns.append({r: float(v) for r, v in column.items()})
        solution = master.solve()
        assert solution is not None
        assert solution.objective == pytest.approx(_reference(costs, columns, [float(d) for d in demand]), rel=1e-7, abs=1e-9)
        covered = [sum(columns[j].get(r, 0.0) * x for j, x in solution.x.items()) for r in range(rows)]
        assert all(c >= d - 1e-7 for c, d in zip(covered, demand))


@settings(max_examples=40, deadline=None)
@given(
    demand=st.lists(st.integers(1, 40), min_size=4, max_size=12),
    data=st.data(),
)
def test_partial_pricing_still_ends_at_the_optimum_of_many_columns(demand: list[int], data: st.DataObject) -> None:
    """More improving columns than the shortlist holds: pricing the shortlist first must
    never end a solve while a column outside it still improves."""
    rows = len(demand)
    master = IncrementalCoveringLP([float(d) for d in demand])
    costs: list[float] = []
    columns: list[dict[int, float]] = []
    column_strategy = st.tuples(st.integers(1, 40), st.dictionaries(st.integers(0, rows - 1), st.integers(1, 9), min_size=1, max_size=rows))
    for _ in range(data.draw(st.integers(1, 3))):
        for price, column in data.draw(st.lists(column_strategy, min_size=20, max_size=60)):
            master.add_column(float(price), {r: float(v) for r, v in column.items()})
            costs.append(float(price))
            columns.append({r: float(v) for r, v in column.items()})
        solution = master.solve()
        if any(all(r not in column for column in columns) for r in range(rows)):
            assert solution is None  # a row no column covers
            continue
        assert solution is not None
        assert solution.objective == pytest.approx(_reference(costs, columns, [float(d) for d in demand]), rel=1e-7, abs=1e-9)
