"""Cost-optimised packing of interchangeable pods into instance types.

Input: item groups (a pod size and how many pods have it) and the instance types one
claim shape allows (capacity after DaemonSet overhead, hourly price, capacity counted
against NodePool limits). Several strategies run and the cheapest result wins:

* **Efficiency greedy.** Solve the covering LP ``min sum price_t x_t s.t. sum capacity_t
  x_t >= demand`` (:mod:`lp`); its duals price each resource at what the cheapest
  fractional fleet pays for it. Fill one bin of each promising type (biggest value first;
  aligned with the free capacity; and the fractional-knapsack optimum rounded down) and
  open the bin with the best packed value per dollar, repeating identical bins while the
  items allow. Types are tried by their best possible value per dollar, so the search
  stops once no type can beat the best fill.
* **Pattern dive** (Gilmore-Gomory column generation). The LP over *patterns* (a type and
  how many items of each group it holds) is solved with knapsack pricing, to convergence
  on the first round (within a budget); whole copies of the patterns it uses are opened,
  else one copy of its most used pattern, and the LP is solved again on what is left.
  With at most four item groups a type is priced exactly (every count of all but the last
  group): the rounded knapsack misses mixed patterns (8 + 1 + 4 pods of three large shapes
  on one node), and the dive then rounds an LP above the true one.
  Unlike the aggregate LP, patterns keep every pod whole, so this finds the right mix of
  instance shapes (e.g. compute-optimised nodes for CPU-bound pods next to
  memory-optimised ones for caches).
* **Fixed type first-fit.** First-fit-decreasing into bins of one type (each type of the
  LP's optimum, and the largest type, which is Karpenter's behaviour).

Every result is then improved: shrink each bin to the cheapest type holding its items,
merge pairs of bins whose union fits a type cheaper than both, and empty bins into the
free room of others. Finally a large-neighbourhood search re-packs the items of the few
bins wasting the most (price minus used resources at the LP duals) together with every
strategy but the fixed-type runs, keeping the result when cheaper (e.g. a CPU-bound and
a memory-bound bin become balanced ones). Pure Python and deterministic; work is bounded (candidate types per
step, LP solves per packing) so large inputs stay fast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import copy
from dataclasses import dataclass, field
from heapq import heapify, heappop, heapreplace
from operator import ge, mul

from joiner.domain.scheduling.lp import CoveringSolution, IncrementalCoveringLP, maximize_packing, solve_covering_lp

__all__ = ["PackType", "Bin", "pack"]

#: Bins considered by each merge pass (the cheapest ones).
_MERGE_WINDOW = 40
#: Types whose fills the greedy evaluates per bin (best upper bound first).
_GREEDY_CANDIDATES = 24
#: Above ``_MANY_ITEMS`` item groups the greedy evaluates fewer types per bin.
_MANY_ITEMS = 100
#: Candidate types of the two greedy runs (LP duals only) above ``_MANY_ITEMS`` groups: two
#: narrow runs cost less than one of 24 types and their better plan is as cheap or cheaper.
_MANY_ITEMS_CANDIDATES = (6, 8)
#: Above this many item groups the fractional-knapsack fill is skipped in the greedy.
_LP_FILL_MAX_ITEMS = 20
#: Column generation limits: pricing iterations per solve (after the first round), new
#: columns per iteration, solve-and-round rounds, item groups, pricing types, and total LP
#: solves.
_CG_ITERATIONS = 25
_CG_REFINE = 4
_CG_ROUNDS = 20
_CG_MAX_ITEMS = 40
_CG_MAX_PRICING_TYPES = 40
_CG_BUDGET = 120
#: LP solves of a neighbourhood's sub-packing (a few bins' items).
_CG_BUDGET_SUB = 30
#: Neighbourhood re-packing: sub-packings per call, bins per neighbourhood, and the
#: least waste (share of the neighbourhood's price) worth a sub-packing: below 2% the
#: sub-packings found nothing on any bench.cost or plan_mix workload and cost up to a
#: quarter of the solve (1% before).
_LNS_REPACKS = 3
_LNS_MAX_BINS = 6
_LNS_MIN_WASTE = 0.02
#: Column generation prices a type exactly (every count of all but the last item, the last
#: as many as fit) when at most this many items are priced and the search visits at most
#: ``_EXACT_PRICING_NODES`` counts; else by the rounded fractional knapsack.
_EXACT_PRICING_ITEMS = 4
_EXACT_PRICING_NODES = 4000


@dataclass(frozen=True, slots=True)
class PackType:
    capacity: tuple[int, ...]
    price: float
    limit: tuple[int, ...] = ()  # capacity counted against the pool's limits


@dataclass(slots=True)
class Bin:
    type_index: int
    counts: dict[int, int] = field(default_factory=dict)
    used: list[int] = field(default_factory=list)


def _fits(capacity: Sequence[int], used: Sequence[int]) -> bool:
    return all(map(ge, capacity, used))


def _max_count(capacity: Sequence[int], used: Sequence[int], size: Sequence[int], limit: int) -> int:
    most = limit
    for c, u, s in zip(capacity, used, size):
        if s:
            q = (c - u) // s
            if q < most:
                most = q
                if most <= 0:
                    return 0
        elif u > c:
            return 0
    return most


#: A count no room limits.
_UNLIMITED = 1 << 62


def _count_in(room: Sequence[int], needed: Sequence[tuple[int, int]], most: int) -> int:
    """How many items (up to ``most``) fit in ``room``, given the (resource, amount) pairs
    the item needs; 0 when none does."""
    for d, s in needed:
        q = room[d] // s
        if q < most:
            if q <= 0:
                return 0
            most = q
    return most


class _Packer:
    def __init__(
        self, sizes: Sequence[tuple[int, ...]], counts: Sequence[int], types: Sequence[PackType], budget: Sequence[int] | None, blend: bool = False
    ) -> None:
        self.blend = blend
        self.sizes = [tuple(s) for s in sizes]
        self.remaining = list(counts)
        self.types = list(types)
        self.budget = list(budget) if budget is not None else None
        self.ndims = len(self.sizes[0]) if self.sizes else 0
        self.bins: list[Bin] = []
        #: Per item, its size negated: sorting on it puts larger items first.
        self.larger_first = [tuple(-s for s in size) for size in self.sizes]
        #: Per item, the resources it needs with its amount (the others never limit a count).
        self.needed = [tuple((d, s) for d, s in enumerate(size) if s) for size in self.sizes]
        #: Per resource, the least any item needs: less room than this on any resource and
        #: no item fits.
        self.smallest = tuple(min(size[d] for size in self.sizes) for d in range(self.ndims)) if self.sizes else ()
        #: Resources on which the items' needs differ.
        self.varying = frozenset(d for d in range(self.ndims) if len({size[d] for size in self.sizes}) > 1)
        self.usable = [t for t in range(len(self.types)) if any(_fits(self.types[t].capacity, s) for s in self.sizes)]
        self.by_price = sorted(self.usable, key=lambda t: (self.types[t].price, t))
        self.price_order = [(self.types[t].price, self.types[t].capacity, self.types[t].limit, t) for t in self.by_price]
        #: Per resource, the most any usable type holds: a quick "no type fits" test.
        self.largest = tuple(max((self.types[t].capacity[d] for t in self.usable), default=-1) for d in range(self.ndims))
        self.lp_columns = self._per_dollar_frontier()
        self.cg_budget = _CG_BUDGET
        self.candidates = _GREEDY_CANDIDATES
        #: With :meth:`run_greedy_pair`: the narrower candidate count, and its run once forked.
        self.fork_at: int | None = None
        self.fork: _Packer | None = None
        #: Aligned fills depend on a type's capacity only, so types of equal capacity (e.g.
        #: the same size in two processor generations) share these: per capacity, the items'
        #: scaled sizes, their first keys and the scale; and its last aligned fill with, per
        #: item taken, the count remaining then and its slack.
        self._scaled: dict[tuple[int, ...], tuple[list[tuple[float, ...]], list[float], list[float]]] = {}
        self._aligned: dict[tuple[int, ...], tuple[dict[int, int], list[tuple[int, int, int]]]] = {}

    # ---------------------------------------------------------------- helpers

    def _per_dollar_frontier(self) -> list[int]:
        """Usable types no other type beats on every dimension per dollar: the only
        columns an aggregate-LP optimum needs."""
        scored = []
        for t in self.usable:
            pt = self.types[t]
            if pt.price > 0:
                scored.append((tuple(c / pt.price for c in pt.capacity), pt.price, t))
        scored.sort(reverse=True)
        kept: list[tuple[tuple[float, ...], int]] = []
        for vector, _, t in scored:
            if not any(all(a >= b for a, b in zip(other, vector)) for other, _ in kept):
                kept.append((vector, t))
        return sorted(t for _, t in kept)

    def _affordable(self, candidates: list[int] | None = None) -> list[int]:
        pool = self.usable if candidates is None else candidates
        if self.budget is None:
            return pool
        return [t for t in pool if _fits(self.budget, self.types[t].limit)]

    def _demand(self, counts: Sequence[int]) -> list[float]:
        demand = [0.0] * self.ndims
        for size, count in zip(self.sizes, counts):
            if count:
                for i, s in enumerate(size):
                    demand[i] += s * count
        return demand

    def _aggregate_lp(self, demand: list[float] | None = None) -> tuple[list[int], CoveringSolution | None]:
        columns = self._affordable(self.lp_columns) or self._affordable()
        if demand is None:
            demand = self._demand(self.remaining)
        solution = solve_covering_lp([self.types[t].price for t in columns], [self.types[t].capacity for t in columns], demand) if columns else None
        return columns, solution

    def _duals(self) -> list[float]:
        """Resource prices: the aggregate LP's duals blended with the LP fleet's price
        split by utilisation. Duals alone are often degenerate (a resource the optimum
        has in surplus is worth nothing, so fills would waste it freely); the blend keeps
        every resource the fleet pays for valued, and still prices the fleet exactly."""
        demand = self._demand(self.remaining)
        columns, solution = self._aggregate_lp(demand)
        if solution is None:
            return [1.0 / max(1.0, d) if d else 0.0 for d in demand]
        if not self.blend:
            return list(solution.duals)
        fleet = [0.0] * self.ndims
        for j, x in solution.x.items():
            for d, c in enumerate(self.types[columns[j]].capacity):
                fleet[d] += x * c
        utilisation = [demand[d] / fleet[d] if fleet[d] > 0 else 0.0 for d in range(self.ndims)]
        total = sum(utilisation)
        if total <= 0:
            return list(solution.duals)
        split = [solution.objective * u / total / fleet[d] if fleet[d] > 0 else 0.0 for d, u in enumerate(utilisation)]
        return [(a + b) / 2 for a, b in zip(solution.duals, split)]

    def _copies(self, t: int, fill: dict[int, int]) -> int:
        """How many bins of ``t`` holding ``fill`` the remaining items and the budget allow
        (0 when ``fill`` asks for more than remains: a pattern of an earlier LP round)."""
        copies = min(self.remaining[i] // n for i, n in fill.items())
        if self.budget is not None:
            for b, c in zip(self.budget, self.types[t].limit):
                if c > 0:
                    copies = min(copies, b // c)
        return max(0, copies)

    def _add_bin(self, t: int, fill: dict[int, int]) -> None:
        used = [0] * self.ndims
        for i, n in fill.items():
            self.remaining[i] -= n
            size = self.sizes[i]
            for d in range(self.ndims):
                used[d] += n * size[d]
        if self.budget is not None:
            for d, c in enumerate(self.types[t].limit):
                self.budget[d] -= c
        self.bins.append(Bin(t, fill, used))

    def cost(self) -> float:
        return sum(self.types[b.type_index].price for b in self.bins)

    def key(self) -> tuple[int, float, int]:
        return (sum(self.remaining), round(self.cost(), 9), len(self.bins))

    # ---------------------------------------------------------------- fills

    def _fill_by_value(self, t: int, order: list[int]) -> dict[int, int]:
        """As many of each item as still fit, in ``order``; stops once the room left is
        below the smallest item on some resource (nothing more can fit)."""
        room = list(self.types[t].capacity)
        smallest = self.smallest
        needed = self.needed
        remaining = self.remaining
        sizes = self.sizes
        ndims = self.ndims
        fill: dict[int, int] = {}
        for i in order:
            most = remaining[i]
            if not most:
                continue
            most = _count_in(room, needed[i], most)
            if most > 0:
                fill[i] = most
                size = sizes[i]
                for d in range(ndims):
                    room[d] -= most * size[d]
                if not all(map(ge, room, smallest)):
                    break
        return fill

    def _fill_aligned_cached(self, t: int, active: list[int]) -> dict[int, int]:
        """:meth:`_fill_aligned` over every item with items left (in index order), reused
        while it would come out the same: an item it did not take never reached the top of
        its heap while fitting, so fewer of it changes nothing; an item it took changes
        nothing while fewer of it remain by at most its slack (at each of its takes, how far
        the count left exceeded what the room allowed, so the room alone set every take).
        A fill of another type of the same capacity serves as well."""
        capacity = self.types[t].capacity
        cached = self._aligned.get(capacity)
        remaining = self.remaining
        if cached is not None and all(then - remaining[i] <= slack for i, then, slack in cached[1]):
            return dict(cached[0])
        fill, slacks = self._fill_aligned(t, active)
        self._aligned[capacity] = (fill, [(i, remaining[i], slacks[i]) for i in fill])
        return dict(fill)

    def _fill_aligned(self, t: int, active: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        """Greedy by alignment of an item's size with the bin's free capacity (the
        dot-product heuristic for vector packing), in geometric chunks.

        The free room only shrinks, so an item's score only falls: a heap of scores from
        earlier steps bounds every item's current one, and only the top is re-scored
        (lazy evaluation); an item that no longer fits is dropped for good when it reaches
        the top, before any re-scoring, and the fill ends once the room is below every
        item's need on some resource. Each step costs a few heap operations instead of a
        pass over every item group. Returns the fill and, per item taken, its slack (see
        :meth:`_fill_aligned_cached`)."""
        capacity = self.types[t].capacity
        cached = self._scaled.get(capacity)
        if cached is None:
            # Resources every item needs the same amount of (a pod slot) add the same to
            # every score, so they are left out of it: no ranking changes, and the room
            # shrinks alike on the resources that do rank the items (see ``shrink``).
            scale = [1.0 / c if c > 0 and d in self.varying else 0.0 for d, c in enumerate(capacity)]
            vectors = [tuple(s * k for s, k in zip(size, scale)) for size in self.sizes]
            cached = (vectors, [-sum(v) for v in vectors], scale)
            self._scaled[capacity] = cached
        scaled, initial, inverse = cached
        needed = self.needed
        room = list(capacity)
        # The room scaled by capacity: an item's score is its scaled size dotted with it.
        scaled_room = [r * k for r, k in zip(room, inverse)]
        sizes = self.sizes
        remaining = self.remaining
        left = {i: remaining[i] for i in active if remaining[i]}
        # (-key, position in the caller's order, item): ties go to the earlier item.
        heap = [(initial[i], position, i) for position, i in enumerate(active) if remaining[i]]
        heapify(heap)
        fill: dict[int, int] = {}
        #: Per item taken, how many fewer of it could remain with every take unchanged.
        slacks: dict[int, int] = {}
        ndims = self.ndims
        smallest = self.smallest
        # Keys are scores divided by ``shrink``: the product, over the takes so far, of the
        # largest factor any resource's scaled room shrank by. A score falls at least as
        # fast as the room on the slowest-shrinking resource, so an item's key from an
        # earlier step bounds its score now divided by ``shrink``, and far more tightly
        # than its old score bounds its score now: most items keep their rank after a
        # take, and only those a take overtook are re-scored.
        shrink = 1.0
        while heap:
            negative, position, i = heap[0]
            # An item that no longer fits is dropped for good (the room only shrinks) before
            # it is re-scored: re-scored, it would only sink and come back up to be dropped.
            # (``_count_in(room, needed[i], 1) == 0``, inlined: this runs at every heap top.)
            short = False
            for d, amount in needed[i]:
                if room[d] < amount:
                    short = True
                    break
            if short:
                heappop(heap)
                continue
            key = sum(map(mul, scaled[i], scaled_room)) / shrink
            if key < -negative - 1e-12 / shrink:
                entry = (-key, position, i)
                # Still above both children's keys (bounds of their scores): it stays on top.
                if (len(heap) > 1 and heap[1] < entry) or (len(heap) > 2 and heap[2] < entry):
                    heapreplace(heap, entry)
                    continue
                heap[0] = entry
            fits = _count_in(room, needed[i], _UNLIMITED)  # at least one
            most = left[i] if left[i] < fits else fits
            slack = left[i] - fits
            if slack < slacks.get(i, _UNLIMITED):
                slacks[i] = slack if slack > 0 else 0
            n = most if most <= 2 else (most + 1) // 2
            fill[i] = fill.get(i, 0) + n
            left[i] -= n
            if not left[i]:
                heappop(heap)
            size = sizes[i]
            for d in range(ndims):
                room[d] -= n * size[d]
            if not all(map(ge, room, smallest)):
                break  # no item fits any more: the rest would only be dropped
            shrunk = [r * k for r, k in zip(room, inverse)]
            factor = max([after / before for after, before in zip(shrunk, scaled_room) if before > 0], default=1.0)
            scaled_room = shrunk
            if factor >= 1e-6 and shrink * factor >= 1e-200:
                shrink *= factor
            else:
                # Keys would lose their precision: every item is keyed afresh by its score.
                shrink = 1.0
                heap = [(-sum(map(mul, scaled[j], scaled_room)), p, j) for _, p, j in heap]
                heapify(heap)
        return fill, slacks

    def _knapsack(self, t: int, prices: Sequence[float], counts: Sequence[int], order: Sequence[int]) -> dict[int, int]:
        """The fractional-knapsack optimum for one bin of ``t`` at item ``prices``,
        rounded down, then completed greedily in ``order``."""
        active = [i for i in order if counts[i] and prices[i] > 0]
        capacity = self.types[t].capacity
        used = [0] * self.ndims
        fill: dict[int, int] = {}
        if active:
            fractional = maximize_packing([prices[i] for i in active], [self.sizes[i] for i in active], capacity, [counts[i] for i in active])
            for i, amount in zip(active, fractional):
                n = _max_count(capacity, used, self.sizes[i], int(amount + 1e-9))
                if n > 0:
                    fill[i] = n
                    size = self.sizes[i]
                    for d in range(self.ndims):
                        used[d] += n * size[d]
        for i in order:
            available = counts[i] - fill.get(i, 0)
            if available <= 0:
                continue
            n = _max_count(capacity, used, self.sizes[i], available)
            if n > 0:
                fill[i] = fill.get(i, 0) + n
                size = self.sizes[i]
                for d in range(self.ndims):
                    used[d] += n * size[d]
        return fill

    def _exact_knapsack(self, t: int, prices: Sequence[float], counts: Sequence[int], order: Sequence[int]) -> dict[int, int] | None:
        """The most valuable pattern of one bin of ``t`` at item ``prices`` (None when the
        search would visit more than ``_EXACT_PRICING_NODES`` counts): every count of each
        item but the last, the last as many as still fit (its price is positive, so more is
        never worth less). Ties go to the first found (fewer of the earlier items in
        ``order`` first)."""
        active = [i for i in order if counts[i] and prices[i] > 0]
        if not active:
            return {}
        capacity = self.types[t].capacity
        best_value = -1.0
        best: dict[int, int] = {}
        visits = 0
        counts_now = [0] * len(active)
        room = list(capacity)
        needed = self.needed
        last = len(active) - 1

        def search(k: int, value: float) -> bool:
            nonlocal best_value, best, visits
            i = active[k]
            most = _count_in(room, needed[i], counts[i])
            if k == last:
                visits += 1
                total = value + prices[i] * most
                if total > best_value + 1e-12:
                    best_value = total
                    best = {active[j]: n for j, n in enumerate(counts_now[:last]) if n}
                    if most:
                        best[i] = most
                return visits <= _EXACT_PRICING_NODES
            for n in range(most + 1):
                visits += 1
                if visits > _EXACT_PRICING_NODES:
                    return False
                counts_now[k] = n
                if n:
                    for d, s in needed[i]:
                        room[d] -= s
                if not search(k + 1, value + prices[i] * n):
                    return False
            for d, s in needed[i]:
                room[d] += s * most
            counts_now[k] = 0
            return True

        if not search(0, 0.0):
            return None
        return best

    # ---------------------------------------------------------------- strategies

    def _open_best_bin(self) -> bool:
        duals = self._duals()
        active = [i for i, c in enumerate(self.remaining) if c]
        values = [sum(map(mul, duals, size)) for size in self.sizes]
        larger_first = self.larger_first
        order = sorted(active, key=lambda i: (-values[i], larger_first[i], i))
        ranked = []
        for t in self._affordable():
            pt = self.types[t]
            upper = sum(map(mul, duals, pt.capacity)) / pt.price if pt.price > 0 else float("inf")
            ranked.append((-upper, -pt.price, t))
        ranked.sort()
        best: tuple[float, float, int] | None = None
        best_fill: dict[int, int] = {}
        narrow: tuple[tuple[float, float, int] | None, dict[int, int]] | None = None
        for position, (negative_upper, negative_price, t) in enumerate(ranked[: self.candidates]):
            if position == self.fork_at:
                narrow = (best, best_fill)
            if best is not None and -negative_upper < -best[0] - 1e-12:
                break
            price = -negative_price
            fills = [self._fill_by_value(t, order), self._fill_aligned_cached(t, active)]
            if 1 < len(active) <= _LP_FILL_MAX_ITEMS:
                fills.append(self._knapsack(t, values, self.remaining, order))
            for fill in fills:
                if not fill:
                    continue
                value = sum(values[i] * n for i, n in fill.items())
                efficiency = value / price if price > 0 else float("inf")
                key = (-round(efficiency, 12), -price, t)
                if best is None or key < best:
                    best, best_fill = key, fill
        if narrow is not None and narrow[0] != best:
            # A run of only ``fork_at`` candidates would choose differently here (or stop):
            # it goes on from a copy of this state instead of repeating every step so far.
            fork = self._copy()
            fork.candidates, fork.fork_at = self.fork_at or 0, None
            if narrow[0] is not None:
                fork._open_copies(narrow[0][2], narrow[1])
            self.fork = fork
            self.fork_at = None
        if best is None:
            return False
        self._open_copies(best[2], best_fill)
        return True

    def _open_copies(self, t: int, fill: dict[int, int]) -> None:
        # The fill takes only remaining items and the type is affordable: at least one copy.
        for _ in range(max(1, self._copies(t, fill))):
            self._add_bin(t, dict(fill))

    def _copy(self) -> _Packer:
        """This packer's state, separate from it (the types, sizes and caches that depend
        only on them are shared)."""
        twin = copy(self)
        twin.remaining = list(self.remaining)
        twin.budget = list(self.budget) if self.budget is not None else None
        twin.bins = [Bin(b.type_index, dict(b.counts), list(b.used)) for b in self.bins]
        twin._aligned = dict(self._aligned)
        twin.fork = None
        return twin

    def run_greedy(self) -> None:
        while any(self.remaining):
            if not self._open_best_bin():
                break
        self.improve()

    def run_greedy_pair(self, narrow: int) -> list[_Packer]:
        """This greedy and one that ranks only the first ``narrow`` candidate types per bin
        (``narrow`` < :attr:`candidates`): both, as if run separately. The narrow run
        shares every step up to the first bin where the two choose differently."""
        self.fork_at = narrow
        self.run_greedy()
        fork, self.fork_at, self.fork = self.fork, None, None
        if fork is None:
            return [self]
        fork.run_greedy()
        return [self, fork]

    def run_fixed(self, t: int) -> None:
        """First-fit-decreasing into bins of type ``t`` (items that do not fit ``t`` get
        the cheapest type that holds them)."""
        capacity = self.types[t].capacity
        scale = [1.0 / c if c > 0 else 0.0 for c in capacity]
        order = sorted(range(len(self.sizes)), key=lambda i: (-max(s * k for s, k in zip(self.sizes[i], scale)), i))
        open_bins: list[Bin] = []
        for i in order:
            size = self.sizes[i]
            for b in open_bins:
                if not self.remaining[i]:
                    break
                n = _max_count(self.types[b.type_index].capacity, b.used, size, self.remaining[i])
                if n > 0:
                    b.counts[i] = b.counts.get(i, 0) + n
                    for d in range(self.ndims):
                        b.used[d] += n * size[d]
                    self.remaining[i] -= n
            while self.remaining[i]:
                home = t if _fits(capacity, size) else -1
                if home >= 0 and self.budget is not None and not _fits(self.budget, self.types[home].limit):
                    home = -1
                if home < 0:
                    home = next(
                        (u for u in self.by_price if _fits(self.types[u].capacity, size) and (self.budget is None or _fits(self.budget, self.types[u].limit))),
                        -1,
                    )
                if home < 0:
                    break
                n = _max_count(self.types[home].capacity, [0] * self.ndims, size, self.remaining[i])
                self._add_bin(home, {i: n})
                open_bins.append(self.bins[-1])
        self.improve()

    def _greedy_pattern(self, t: int, prices: Sequence[float], counts: Sequence[int]) -> dict[int, int]:
        capacity = self.types[t].capacity
        scale = [1.0 / c if c > 0 else 0.0 for c in capacity]
        ranked = []
        for i, count in enumerate(counts):
            if count and prices[i] > 0:
                footprint = sum(x * k for x, k in zip(self.sizes[i], scale)) or 1e-12
                ranked.append((-prices[i] / footprint, i))
        ranked.sort()
        used = [0] * self.ndims
        pattern: dict[int, int] = {}
        for _, i in ranked:
            n = _max_count(capacity, used, self.sizes[i], counts[i])
            if n > 0:
                pattern[i] = n
                for d in range(self.ndims):
                    used[d] += n * self.sizes[i][d]
        return pattern

    def _column_generation(self, counts: list[int], pool: list[tuple[int, dict[int, int]]]) -> list[tuple[float, int, dict[int, int]]]:
        """The pattern LP over (type, item counts) columns, priced by a knapsack per
        type, warm-started from ``pool`` (patterns are capped to ``counts``; new ones are
        appended). Returns (fractional copies, type, pattern) at the optimum found."""
        groups = [i for i, c in enumerate(counts) if c]
        affordable = self._affordable()
        affordable_set = set(affordable)
        master = IncrementalCoveringLP([float(c) for c in counts])
        patterns: list[tuple[int, dict[int, int]]] = []
        seen: set[tuple[int, tuple[tuple[int, int], ...]]] = set()

        def add(t: int, pattern: dict[int, int]) -> bool:
            pattern = {i: min(n, counts[i]) for i, n in pattern.items() if counts[i] and n}
            if not pattern:
                return False
            key = (t, tuple(sorted(pattern.items())))
            if key in seen:
                return False
            seen.add(key)
            patterns.append((t, pattern))
            master.add_column(self.types[t].price, {i: float(n) for i, n in pattern.items()})
            return True

        for t, pattern in pool:
            if t in affordable_set:
                add(t, pattern)
        for i in groups:
            cheapest = next((t for t in self.by_price if t in affordable_set and _fits(self.types[t].capacity, self.sizes[i])), -1)
            if cheapest >= 0:
                add(cheapest, {i: _max_count(self.types[cheapest].capacity, [0] * self.ndims, self.sizes[i], counts[i])})
        pricing = sorted(set(self.lp_columns) & affordable_set)
        if len(pricing) > _CG_MAX_PRICING_TYPES:
            pricing = pricing[:: max(1, len(pricing) // _CG_MAX_PRICING_TYPES)][:_CG_MAX_PRICING_TYPES]
        if not pool:
            unit = [1.0] * len(counts)
            for t in pricing:
                add(t, self._greedy_pattern(t, unit, counts))
        pricing = sorted(set(pricing) | {t for t, _ in patterns})
        order = sorted(groups, key=lambda i: (tuple(-s for s in self.sizes[i]), i))
        solution = None
        # The first round (no pool yet) prices until the LP over every item converges, with
        # up to five sixths of the dive's budget: rounding an unconverged LP opens poorly
        # mixed patterns (e.g. 1,000 pods of 40 shapes and two architectures: 26.20 -> 26.13
        # $/h). Later rounds re-solve what is left, warm-started from the pool.
        iterations = _CG_ITERATIONS if pool else max(_CG_ITERATIONS, self.cg_budget * 5 // 6)
        for _ in range(iterations):
            if self.cg_budget <= 0:
                break
            self.cg_budget -= 1
            solution = master.solve()
            if solution is None:
                return []
            prices = solution.duals
            ceiling = self._pattern_value_ceiling(prices, counts)
            scored = []
            for t in pricing:
                if self.types[t].price >= ceiling(self.types[t].capacity):
                    continue  # no pattern of this type is worth its price: nothing to add
                pattern = self._knapsack(t, prices, counts, order)
                if len(groups) <= _EXACT_PRICING_ITEMS:
                    exact = self._exact_knapsack(t, prices, counts, order)
                    if exact is not None and sum(prices[i] * n for i, n in exact.items()) > sum(prices[i] * n for i, n in pattern.items()) + 1e-12:
                        pattern = exact
                value = sum(prices[i] * n for i, n in pattern.items())
                scored.append((self.types[t].price - value, t, pattern))
            scored.sort(key=lambda row: (row[0], row[1]))
            added = 0
            for reduced, t, pattern in scored[:_CG_REFINE]:
                if reduced < -1e-9 * max(1.0, self.types[t].price) and add(t, pattern):
                    added += 1
            if not added:
                break
        pool[:] = patterns
        if solution is None:
            return []
        return sorted(((y, patterns[j][0], patterns[j][1]) for j, y in solution.x.items()), key=lambda row: (-row[0], row[1], sorted(row[2].items())))

    def _pattern_value_ceiling(self, prices: Sequence[float], counts: Sequence[int]) -> Callable[[Sequence[int]], float]:
        """A bound on the value at ``prices`` of any pattern of a type, given its capacity:
        per resource, the capacity at the best value per unit any item offers on it, and
        at most every item counted once."""
        priced = [i for i, c in enumerate(counts) if c and prices[i] > 0]
        everything = sum(prices[i] * counts[i] for i in priced)
        density = []
        for d in range(self.ndims):
            if any(self.sizes[i][d] == 0 for i in priced):
                density.append(float("inf"))  # an item free on this resource: no bound from it
            else:
                density.append(max((prices[i] / self.sizes[i][d] for i in priced), default=0.0))

        def ceiling(capacity: Sequence[int]) -> float:
            return min(everything, min((c * k for c, k in zip(capacity, density) if k != float("inf")), default=float("inf")))

        return ceiling

    def run_patterns(self) -> None:
        """Dive: solve the pattern LP, open every whole copy it uses, or else one copy of
        its most used pattern; repeat on what is left; the greedy finishes the tail."""
        pool: list[tuple[int, dict[int, int]]] = []
        for _ in range(_CG_ROUNDS):
            if not any(self.remaining) or self.cg_budget <= 0:
                break
            columns = self._column_generation(list(self.remaining), pool)
            if not columns:
                break
            opened = False
            for y, t, pattern in columns:
                copies = int(y + 1e-9)
                if copies <= 0:
                    continue
                copies = min(copies, self._copies(t, pattern))
                for _ in range(copies):
                    self._add_bin(t, dict(pattern))
                    opened = True
            if not opened:
                y, t, pattern = columns[0]
                pattern = {i: min(n, self.remaining[i]) for i, n in pattern.items() if self.remaining[i] > 0}
                if not pattern or (self.budget is not None and not _fits(self.budget, self.types[t].limit)):
                    break
                self._add_bin(t, pattern)
        self.run_greedy()

    # ---------------------------------------------------------------- improvement

    def _cheapest_type(self, used: Sequence[int], allowance: Sequence[int] | None, below: float = float("inf")) -> int:
        """The cheapest type holding ``used`` within ``allowance``; -1 when none does, or
        when none priced under ``below`` does (the caller only wants a cheaper one)."""
        if not _fits(self.largest, used):
            return -1
        for price, capacity, limit, t in self.price_order:
            if price >= below:
                return -1
            if _fits(capacity, used) and (allowance is None or _fits(allowance, limit)):
                return t
        return -1

    def _allowance(self, *bins: Bin) -> list[int] | None:
        if self.budget is None:
            return None
        allowance = list(self.budget)
        for b in bins:
            for d, c in enumerate(self.types[b.type_index].limit):
                allowance[d] += c
        return allowance

    def _retype(self, b: Bin, t: int) -> None:
        if self.budget is not None:
            for d, (old, new) in enumerate(zip(self.types[b.type_index].limit, self.types[t].limit)):
                self.budget[d] += old - new
        b.type_index = t

    def _shrink(self) -> None:
        for b in self.bins:
            t = self._cheapest_type(b.used, self._allowance(b), below=self.types[b.type_index].price)
            if t >= 0:
                self._retype(b, t)

    def _merge(self) -> None:
        changed = True
        while changed:
            changed = False
            order = sorted(range(len(self.bins)), key=lambda k: (self.types[self.bins[k].type_index].price, k))[:_MERGE_WINDOW]
            for x, a in enumerate(order):
                for b in order[x + 1 :]:
                    first, second = self.bins[a], self.bins[b]
                    used = [u + v for u, v in zip(first.used, second.used)]
                    both = self.types[first.type_index].price + self.types[second.type_index].price - 1e-12
                    t = self._cheapest_type(used, self._allowance(first, second), below=both)
                    if t < 0:
                        continue
                    for i, n in second.counts.items():
                        first.counts[i] = first.counts.get(i, 0) + n
                    first.used = used
                    self._retype(first, t)
                    if self.budget is not None:
                        for d, c in enumerate(self.types[second.type_index].limit):
                            self.budget[d] += c
                    del self.bins[b]
                    changed = True
                    break
                if changed:
                    break

    def _empty_into_slack(self) -> None:
        """Move every item of a bin into other bins' free room (their types unchanged)."""
        bins = self.bins
        ndims = self.ndims
        order = sorted(range(len(bins)), key=lambda k: (self.types[bins[k].type_index].price, k))
        removed: set[int] = set()
        room = [[c - u for c, u in zip(self.types[b.type_index].capacity, b.used)] for b in bins]
        total = [sum(free[d] for free in room) for d in range(ndims)]
        smallest = self.smallest
        for k in order:
            victim = bins[k]
            # The others' free room summed must hold the victim's items: a quick "no".
            if any(t - r < u for t, r, u in zip(total, room[k], victim.used)):
                continue
            # Bins without room for the smallest item take nothing: left out of the search.
            others = [j for j in range(len(bins)) if j != k and j not in removed and all(map(ge, room[j], smallest))]
            plan: list[tuple[int, int, int]] = []
            tentative: dict[int, list[int]] = {}
            ok = True
            for i, n in sorted(victim.counts.items()):
                size = self.sizes[i]
                left = n
                for j in others:
                    if not left:
                        break
                    free = tentative.get(j)
                    fit = _count_in(room[j] if free is None else free, self.needed[i], left)
                    if fit > 0:
                        if free is None:
                            free = tentative[j] = list(room[j])
                        plan.append((j, i, fit))
                        for d in range(ndims):
                            free[d] -= fit * size[d]
                        left -= fit
                if left:
                    ok = False
                    break
            if not ok:
                continue
            for j, i, fit in plan:
                target = bins[j]
                target.counts[i] = target.counts.get(i, 0) + fit
                size = self.sizes[i]
                for d in range(ndims):
                    target.used[d] += fit * size[d]
            for j, free in tentative.items():
                room[j] = free
            total = [t - r - u for t, r, u in zip(total, room[k], victim.used)]
            if self.budget is not None:
                for d, c in enumerate(self.types[victim.type_index].limit):
                    self.budget[d] += c
            victim.counts = {}
            victim.used = [0] * ndims
            removed.add(k)
        if removed:
            self.bins = [b for k, b in enumerate(bins) if k not in removed]

    def improve(self) -> None:
        self._shrink()
        self._merge()
        self._empty_into_slack()
        self._shrink()


def pack(
    sizes: Sequence[tuple[int, ...]], counts: Sequence[int], types: Sequence[PackType], budget: Sequence[int] | None = None
) -> tuple[list[Bin], list[int]]:
    """Pack ``counts[i]`` items of ``sizes[i]`` into bins of ``types``; returns the bins
    (type index, item counts, used vector) and the counts that could not be placed
    (nothing fits, or the ``budget`` against each type's ``limit`` ran out)."""
    if not sizes or not types:
        return [], list(counts)
    best = _best_packing(sizes, counts, types, budget, fixed=True)
    _repack_neighbourhoods(best)
    return best.bins, best.remaining


def _best_packing(sizes: Sequence[tuple[int, ...]], counts: Sequence[int], types: Sequence[PackType], budget: Sequence[int] | None, fixed: bool) -> _Packer:
    """The cheapest result of the strategies (the fixed-type first-fit runs only when
    ``fixed``, and above ``_MANY_ITEMS`` groups only when the others left items unplaced)."""
    results = []
    # Many item groups: the duals alone (the blend rarely wins there and costs a greedy run).
    if len(sizes) <= _MANY_ITEMS:
        for blend in (False, True):
            greedy = _Packer(sizes, counts, types, budget, blend)
            greedy.run_greedy()
            results.append(greedy)
    else:
        greedy = _Packer(sizes, counts, types, budget)
        greedy.candidates = _MANY_ITEMS_CANDIDATES[1]
        results.extend(greedy.run_greedy_pair(_MANY_ITEMS_CANDIDATES[0]))
    if len(sizes) <= _CG_MAX_ITEMS:
        patterns = _Packer(sizes, counts, types, budget)
        if not fixed:
            patterns.cg_budget = _CG_BUDGET_SUB
        patterns.run_patterns()
        results.append(patterns)
    # Above ``_MANY_ITEMS`` groups the fixed-type runs never won a bench.cost or plan_mix
    # packing (12 of 12) and cost up to a tenth of the solve: they run there only when the
    # greedy left pods unplaced (a NodePool limit), where first-fit may still place more.
    if fixed and (len(sizes) <= _MANY_ITEMS or any(min(results, key=_Packer.key).remaining)):
        probe = _Packer(sizes, counts, types, budget)
        columns, solution = probe._aggregate_lp()
        chosen = sorted({columns[j] for j in solution.x}) if solution is not None else []
        if probe.usable:
            largest = max(probe._affordable() or probe.usable, key=lambda t: (types[t].capacity, -types[t].price, -t))
            if largest not in chosen:
                chosen.append(largest)
        for t in chosen:
            candidate = _Packer(sizes, counts, types, budget)
            candidate.run_fixed(t)
            results.append(candidate)
    return min(results, key=_Packer.key)


def _bin_order_key(packer: _Packer, b: Bin) -> tuple:  # type: ignore[type-arg]
    """A total order on bins that does not depend on the order of the input groups."""
    return (packer.types[b.type_index].price, b.type_index, tuple(sorted((packer.sizes[i], n) for i, n in b.counts.items())))


def _repack_neighbourhoods(packer: _Packer) -> None:
    """Large-neighbourhood search on a finished packing: the items of the few bins that
    waste the most (price minus their used resources valued at the aggregate LP's duals)
    are packed again together by every strategy; the new bins replace the old ones when
    they cost less. Fixes what one-bin-at-a-time rounding leaves behind, e.g. two
    lopsided bins (one CPU-bound, one memory-bound) whose union fits cheaper types.
    Bounded: at most ``_LNS_REPACKS`` sub-packings of at most ``_LNS_MAX_BINS`` bins."""
    repacks = 0
    repacked = False
    while repacks < _LNS_REPACKS and len(packer.bins) >= 2:
        everything = [0] * len(packer.sizes)
        for b in packer.bins:
            for i, n in b.counts.items():
                everything[i] += n
        columns = packer.lp_columns or packer.usable  # the budget only limits the sub-packings
        solution = (
            solve_covering_lp([packer.types[t].price for t in columns], [packer.types[t].capacity for t in columns], packer._demand(everything))
            if columns
            else None
        )
        if solution is None:
            break
        duals = solution.duals
        scored = []
        for b in packer.bins:
            price = packer.types[b.type_index].price
            waste = price - sum(dual * u for dual, u in zip(duals, b.used))
            scored.append((-round(waste, 9), _bin_order_key(packer, b), b))
        scored.sort(key=lambda row: (row[0], row[1]))
        improved = False
        for k in range(min(_LNS_MAX_BINS, len(scored) - 1), 1, -1):
            if repacks >= _LNS_REPACKS:
                break
            chosen = [row[2] for row in scored[:k]]
            old_cost = sum(packer.types[b.type_index].price for b in chosen)
            if -sum(row[0] for row in scored[:k]) <= _LNS_MIN_WASTE * old_cost:
                continue
            repacks += 1
            if _repack(packer, chosen, old_cost):
                improved = repacked = True
                break
        if not improved:
            break
    if repacked:
        packer.improve()


def _repack(packer: _Packer, chosen: list[Bin], old_cost: float) -> bool:
    counts: dict[int, int] = {}
    for b in chosen:
        for i, n in b.counts.items():
            counts[i] = counts.get(i, 0) + n
    groups = sorted(counts, key=lambda i: (packer.sizes[i], i))
    allowance = packer._allowance(*chosen)
    sub = _best_packing([packer.sizes[i] for i in groups], [counts[i] for i in groups], packer.types, allowance, fixed=False)
    if any(sub.remaining):
        return False
    bins = sub.bins
    new_cost = sum(packer.types[b.type_index].price for b in bins)
    if new_cost >= old_cost - 1e-9 * max(1.0, old_cost):
        return False
    ids = {id(b) for b in chosen}
    packer.bins = [b for b in packer.bins if id(b) not in ids]
    for b in bins:
        packer.bins.append(Bin(b.type_index, {groups[i]: n for i, n in b.counts.items()}, list(b.used)))
    if allowance is not None:
        for b in bins:
            for d, c in enumerate(packer.types[b.type_index].limit):
                allowance[d] -= c
        packer.budget = allowance
    return True
