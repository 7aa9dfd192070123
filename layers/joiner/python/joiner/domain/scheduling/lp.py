"""A small exact-enough simplex for the covering LP the cost packer needs.

``min sum_j c_j x_j  s.t.  sum_j a_rj x_j >= d_r,  x >= 0`` with non-negative data has
few rows (one per requested resource: cpu, memory, pods, maybe GPUs) and many columns
(instance types), so a revised simplex with an explicit ``rows x rows`` basis inverse is
cheap in pure Python: each iteration prices every column once (the column-generation master
first prices a shortlist of its best columns). The duals (the price the
optimum implicitly pays per unit of each resource) guide bin selection in
:mod:`joiner.domain.scheduling.packer`. No third-party dependency: this runs in Lambda.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import mul

__all__ = ["CoveringSolution", "solve_covering_lp", "maximize_packing", "IncrementalCoveringLP"]

_EPS = 1e-9
_BLAND_AFTER = 60
#: Columns partial pricing keeps from a full pricing.
_SHORTLIST = 16


@dataclass(frozen=True)
class CoveringSolution:
    objective: float
    x: dict[int, float]  # column index -> value (non-zero only)
    duals: tuple[float, ...]  # per row, in the caller's units (0 for rows with no demand)


def solve_covering_lp(
    costs: Sequence[float], columns: Sequence[Sequence[float]], demand: Sequence[float], max_iterations: int = 2000
) -> CoveringSolution | None:
    """Solve the covering LP; None when infeasible (a demanded row no column covers).

    ``columns[j][r]`` is column ``j``'s amount of row ``r``. Rows are scaled by their
    demand so the arithmetic stays well conditioned whatever the units.
    """
    rows = [r for r, value in enumerate(demand) if value > 0]
    m = len(rows)
    if m == 0:
        return CoveringSolution(0.0, {}, tuple(0.0 for _ in demand))
    n = len(costs)
    scaled = [tuple(columns[j][r] / demand[r] for r in rows) for j in range(n)]
    for k in range(m):
        if not any(col[k] > 0 for col in scaled):
            return None
    # Variables: 0..n-1 structural, n..n+m-1 surplus (-e_k), n+m..n+2m-1 artificial (+e_k).
    basis = [n + m + k for k in range(m)]
    binv = [[1.0 if i == k else 0.0 for k in range(m)] for i in range(m)]
    xb = [1.0] * m

    def column(j: int) -> list[float]:
        if j < n:
            return list(scaled[j])
        if j < n + m:
            return [-1.0 if k == j - n else 0.0 for k in range(m)]
        return [1.0 if k == j - n - m else 0.0 for k in range(m)]

    def run(phase: int) -> bool:
        def cost(j: int) -> float:
            if j < n:
                return costs[j] if phase == 2 else 0.0
            if j < n + m:
                return 0.0
            return 1.0 if phase == 1 else 0.0

        for iteration in range(max_iterations):
            cb = [cost(j) for j in basis]
            y = [sum(cb[i] * binv[i][k] for i in range(m)) for k in range(m)]
            in_basis = set(basis)
            bland = iteration >= _BLAND_AFTER
            entering = -1
            best = -_EPS
            if phase == 2:
                for j in range(n):
                    reduced = costs[j] - sum(map(mul, y, scaled[j]))
                    if reduced < best and j not in in_basis:
                        entering, best = j, reduced
                        if bland:
                            break
            else:
                for j in range(n):
                    reduced = -sum(map(mul, y, scaled[j]))
                    if reduced < best and j not in in_basis:
                        entering, best = j, reduced
                        if bland:
                            break
            if entering < 0 or not bland:
                for k in range(m):
                    j = n + k
                    if y[k] < best and j not in in_basis:
                        entering, best = j, y[k]
                        if bland:
                            break
                if phase == 1 and (entering < 0 or not bland):
                    for k in range(m):
                        j = n + m + k
                        reduced = 1.0 - y[k]
                        if reduced < best and j not in in_basis:
                            entering, best = j, reduced
            if entering < 0:
                return True
            col = column(entering)
            u = [sum(binv[i][k] * col[k] for k in range(m)) for i in range(m)]
            leave = -1
            ratio = 0.0
            for i in range(m):
                if u[i] > _EPS:
                    r = xb[i] / u[i]
                    if leave < 0 or r < ratio - _EPS or (abs(r - ratio) <= _EPS and basis[i] < basis[leave]):
                        leave, ratio = i, r
            if leave < 0:
                return False  # unbounded: impossible with non-negative costs
            _pivot(binv, xb, u, leave)
            basis[leave] = entering
        return True

    if not run(1):
        return None
    if sum(xb[i] for i in range(m) if basis[i] >= n + m) > 1e-7:
        return None
    for i in range(m):
        if basis[i] >= n + m:
            for j in range(n + m):
                if j in basis:
                    continue
                col = column(j)
                u = [sum(binv[r][k] * col[k] for k in range(m)) for r in range(m)]
                if abs(u[i]) > 1e-7:
                    _pivot(binv, xb, u, i)
                    basis[i] = j
                    break
    if not run(2):
        return None
    cb = [costs[j] if j < n else 0.0 for j in basis]
    y = [sum(cb[i] * binv[i][k] for i in range(m)) for k in range(m)]
    duals = [0.0] * len(demand)
    for k, r in enumerate(rows):
        duals[r] = max(0.0, y[k]) / demand[r]
    x = {basis[i]: xb[i] for i in range(m) if basis[i] < n and xb[i] > _EPS}
    objective = sum(costs[j] * value for j, value in x.items())
    return CoveringSolution(objective, x, tuple(duals))


def _pivot(binv: list[list[float]], xb: list[float], u: list[float], row: int) -> None:
    m = len(xb)
    pivot = u[row]
    prow = [value / pivot for value in binv[row]]
    px = xb[row] / pivot
    binv[row] = prow
    xb[row] = px
    for i in range(m):
        if i != row and u[i] != 0.0:
            factor = u[i]
            bi = binv[i]
            binv[i] = [a - factor * b for a, b in zip(bi, prow)]
            xb[i] -= factor * px
            if xb[i] < 0 and xb[i] > -1e-12:
                xb[i] = 0.0


def maximize_packing(
    values: Sequence[float], sizes: Sequence[Sequence[float]], capacity: Sequence[float], upper: Sequence[float], max_iterations: int = 500
) -> list[float]:
    """Fractional multi-dimensional knapsack: ``max sum v_i n_i  s.t.  sum_i s_id n_i <= c_d,
    0 <= n_i <= u_i`` with non-negative data, by a bounded-variable tableau simplex: the
    upper bounds stay implicit (a variable sits at either bound or is basic), so the
    tableau has one row per resource instead of one per item, and a pivot costs
    O(resources x items). The slack basis is feasible, so no phase 1. Returns the
    optimal ``n``."""
    g = len(values)
    dims = [d for d in range(len(capacity)) if any(sizes[i][d] > 0 for i in range(g))]
    m = len(dims)
    width = g + m
    tableau: list[list[float]] = []
    xb: list[float] = []
    for r, d in enumerate(dims):
        scale = capacity[d] if capacity[d] > 0 else 1.0
        row = [sizes[i][d] / scale for i in range(g)] + [0.0] * m
        row[g + r] = 1.0
        tableau.append(row)
        xb.append(capacity[d] / scale)
    bound = [float(u) for u in upper] + [float("inf")] * m
    at_upper = [False] * width
    basis = [g + r for r in range(m)]
    in_basis = [False] * g + [True] * m
    objective = [-float(v) for v in values] + [0.0] * m
    for iteration in range(max_iterations):
        entering = -1
        direction = 0
        best = 1e-12
        bland = iteration >= _BLAND_AFTER
        for j in range(width):
            if in_basis[j]:
                continue
            gain = -objective[j] if not at_upper[j] else objective[j]
            if gain > best:
                entering, best = j, gain
                direction = 1 if not at_upper[j] else -1
                if bland:
                    break
        if entering < 0:
            break
        step = bound[entering]
        leave = -1
        leave_to_upper = False
        for r in range(m):
            a = tableau[r][entering] * direction
            if a > 1e-12:
                q = xb[r] / a
                to_upper = False
            elif a < -1e-12 and bound[basis[r]] != float("inf"):
                q = (bound[basis[r]] - xb[r]) / -a
                to_upper = True
            else:
                continue
            if q < step - 1e-12 or (leave >= 0 and abs(q - step) <= 1e-12 and basis[r] < basis[leave]):
                leave, step, leave_to_upper = r, max(0.0, q), to_upper
        if step == float("inf"):
            break  # unbounded: cannot happen with positive sizes or finite upper bounds
        for r in range(m):
            a = tableau[r][entering]
            if a:
                xb[r] -= direction * a * step
                if -1e-12 < xb[r] < 0:
                    xb[r] = 0.0
        if leave < 0:
            at_upper[entering] = not at_upper[entering]
            continue
        value = (bound[entering] if at_upper[entering] else 0.0) + direction * step
        leaving = basis[leave]
        pivot_row = tableau[leave]
        p = pivot_row[entering]
        pivot_row = [a / p for a in pivot_row]
        tableau[leave] = pivot_row
        for r in range(m):
            if r != leave:
                a = tableau[r][entering]
                if a != 0.0:
                    row = tableau[r]
                    tableau[r] = [x - a * y for x, y in zip(row, pivot_row)]
        a = objective[entering]
        objective = [x - a * y for x, y in zip(objective, pivot_row)]
        basis[leave] = entering
        xb[leave] = value
        in_basis[entering] = True
        at_upper[entering] = False
        in_basis[leaving] = False
        at_upper[leaving] = leave_to_upper
    solution = [0.0] * g
    for j in range(g):
        if not in_basis[j] and at_upper[j]:
            solution[j] = float(upper[j])
    for r, j in enumerate(basis):
        if j < g:
            solution[j] = max(0.0, min(float(upper[j]), xb[r]))
    return solution


_KIND_ORDER = {"x": 0, "s": 1, "a": 2}


def _order(entry: tuple[str, int]) -> tuple[int, int]:
    return (_KIND_ORDER[entry[0]], entry[1])


class IncrementalCoveringLP:
    """``min c.x  s.t.  A x >= d, x >= 0`` (non-negative data) where columns arrive over
    time, as in column generation: the basis is kept between :meth:`solve` calls, so
    re-optimising after adding a few columns takes a few pivots. Columns are sparse
    ``{row: value}`` mappings."""

    def __init__(self, demand: Sequence[float]) -> None:
        self.demand = [float(d) for d in demand]
        self.m = len(self.demand)
        self.costs: list[float] = []
        #: Sparse columns as (rows, values): pricing multiplies them without a Python loop.
        self.columns: list[tuple[tuple[int, ...], tuple[float, ...]]] = []
        # Basis entries: ("a", row) artificial, ("s", row) surplus, ("x", j) structural.
        self.basis: list[tuple[str, int]] = [("a", r) for r in range(self.m)]
        self.binv = [[1.0 if i == k else 0.0 for k in range(self.m)] for i in range(self.m)]
        self.xb = list(self.demand)
        self.phase = 1 if any(d > 0 for d in self.demand) else 2
        if self.phase == 2:
            self.basis = [("s", r) for r in range(self.m)]
            self.binv = [[-1.0 if i == k else 0.0 for k in range(self.m)] for i in range(self.m)]
            self.xb = [0.0] * self.m
        self.feasible = True
        #: Simplex pivots made so far (all solves).
        self.pivots = 0
        #: Columns priced first (partial pricing): the best of the last full pricing and
        #: the columns added since; the full pricing runs whenever none of them improves.
        self._shortlist: list[int] = []

    def add_column(self, cost: float, column: dict[int, float]) -> int:
        self.costs.append(float(cost))
        entries = sorted((r, float(v)) for r, v in column.items() if v)
        self.columns.append((tuple(r for r, _ in entries), tuple(v for _, v in entries)))
        self._shortlist.append(len(self.costs) - 1)
        return len(self.costs) - 1

    def _ftran(self, entry: tuple[str, int]) -> list[float]:
        """``B^-1`` times the entry's column (columns are sparse: a few rows each)."""
        kind, index = entry
        if kind != "x":
            sign = -1.0 if kind == "s" else 1.0
            return [row[index] * sign for row in self.binv]
        rows, values = self.columns[index]
        return [sum(map(mul, map(row.__getitem__, rows), values)) for row in self.binv]

    def _cost(self, entry: tuple[str, int]) -> float:
        kind, index = entry
        if self.phase == 1:
            return 1.0 if kind == "a" else 0.0
        return self.costs[index] if kind == "x" else 0.0

    def _duals(self) -> list[float]:
        costs = [self._cost(entry) for entry in self.basis]
        return [sum(map(mul, costs, column)) for column in zip(*self.binv)]

    def _iterate(self, max_iterations: int) -> bool:
        m = self.m
        for iteration in range(max_iterations):
            y = self._duals()
            in_basis = set(self.basis)
            entering: tuple[str, int] | None = None
            best = -_EPS
            phase1 = self.phase == 1
            bland = iteration >= _BLAND_AFTER
            price = y.__getitem__
            columns = self.columns
            costs = self.costs
            if not bland and self._shortlist:
                # Partial pricing: the columns that priced best last time, and new ones.
                for j in self._shortlist:
                    rows, values = columns[j]
                    reduced = (0.0 if phase1 else costs[j]) - sum(map(mul, map(price, rows), values))
                    if reduced < best and ("x", j) not in in_basis:
                        entering, best = ("x", j), reduced
            if entering is None:
                improving: list[tuple[float, int]] = []
                for j, (rows, values) in enumerate(columns):
                    reduced = (0.0 if phase1 else costs[j]) - sum(map(mul, map(price, rows), values))
                    if reduced < -_EPS and ("x", j) not in in_basis:
                        if bland:
                            entering, best = ("x", j), reduced
                            break
                        improving.append((reduced, j))
                if improving:
                    improving.sort()
                    entering, best = ("x", improving[0][1]), improving[0][0]
                    self._shortlist = [j for _, j in improving[:_SHORTLIST]]
                else:
                    self._shortlist = []
            if entering is None or not bland:
                for r in range(m):
                    if y[r] < best and ("s", r) not in in_basis:
                        entering, best = ("s", r), y[r]
                        if bland:
                            break
            if entering is None:
                return True
            u = self._ftran(entering)
            leave = -1
            ratio = 0.0
            for i in range(m):
                if u[i] > _EPS:
                    q = self.xb[i] / u[i]
                    # Ties leave by the variables' fixed order (structural, surplus,
                    # artificial): with Bland's entering rule this cannot cycle.
                    if leave < 0 or q < ratio - _EPS or (bland and q <= ratio + _EPS and _order(self.basis[i]) < _order(self.basis[leave])):
                        leave, ratio = i, q
            if leave < 0:
                return False
            _pivot(self.binv, self.xb, u, leave)
            self.pivots += 1
            self.basis[leave] = entering
        return True

    def solve(self, max_iterations: int = 5000) -> CoveringSolution | None:
        if not self.feasible:
            return None
        if self.phase == 1:
            self._iterate(max_iterations)
            if sum(self.xb[i] for i, (kind, _) in enumerate(self.basis) if kind == "a") > 1e-7:
                # Not coverable yet; stay in phase 1 so new columns can fix it.
                return None
            for i, entry in enumerate(self.basis):
                if entry[0] != "a":
                    continue
                in_basis = set(self.basis)
                candidates = [("s", r) for r in range(self.m)] + [("x", j) for j in range(len(self.columns))]
                for candidate in candidates:
                    if candidate in in_basis:
                        continue
                    u = self._ftran(candidate)
                    if abs(u[i]) > 1e-7:
                        _pivot(self.binv, self.xb, u, i)
                        self.basis[i] = candidate
                        break
            self.phase = 2
        if not self._iterate(max_iterations):
            return None
        y = self._duals()
        x = {index: self.xb[i] for i, (kind, index) in enumerate(self.basis) if kind == "x" and self.xb[i] > _EPS}
        objective = sum(self.costs[j] * value for j, value in x.items())
        return CoveringSolution(objective, x, tuple(max(0.0, v) for v in y))
