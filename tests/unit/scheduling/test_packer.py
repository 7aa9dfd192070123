"""The cost packer's neighbourhood re-packing (large-neighbourhood search)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain.scheduling.packer import PackType, _Packer, _repack_neighbourhoods, pack

# (cpu, memory) in whole units; limits count capacity against a NodePool budget.
CPU_HEAVY = PackType((8, 4), 1.0, (8, 4))
MEMORY_HEAVY = PackType((4, 8), 1.0, (4, 8))
BALANCED = PackType((12, 12), 1.2, (12, 12))
SMALL_BALANCED = PackType((6, 6), 0.55, (6, 6))
TYPES = [CPU_HEAVY, MEMORY_HEAVY, BALANCED, SMALL_BALANCED]
SIZES = [(2, 1), (1, 2), (6, 6)]  # CPU-bound pods, memory-bound pods, one balanced pod


def _lopsided(budget: list[int] | None, types: list[PackType] = TYPES) -> _Packer:
    """All CPU-bound pods on a CPU-heavy node and all memory-bound ones on a
    memory-heavy node (each shrunk to its cheapest type), plus a full balanced node."""
    packer = _Packer(SIZES, [4, 4, 1], types, budget)
    packer._add_bin(0, {0: 4})
    packer._add_bin(1, {1: 4})
    packer._add_bin(3, {2: 1})
    assert packer.remaining == [0, 0, 0]
    return packer


def _check(packer: _Packer, counts: list[int]) -> None:
    placed = [0] * len(counts)
    for b in packer.bins:
        used = [sum(SIZES[i][d] * n for i, n in b.counts.items()) for d in range(2)]
        assert used == b.used
        assert all(u <= c for u, c in zip(used, packer.types[b.type_index].capacity))
        for i, n in b.counts.items():
            placed[i] += n
    assert placed == counts


@pytest.mark.parametrize("budget", [None, [18, 18]])
def test_two_lopsided_bins_are_repacked_together_into_cheaper_balanced_ones(budget):  # type: ignore[no-untyped-def]
    packer = _lopsided(budget)
    assert packer.cost() == pytest.approx(2.55)
    _repack_neighbourhoods(packer)
    _check(packer, [4, 4, 1])
    # Two CPU-bound plus two memory-bound pods fill a small balanced node exactly.
    assert packer.cost() == pytest.approx(1.65)
    assert sorted(b.type_index for b in packer.bins) == [3, 3, 3]
    if budget is not None:  # the new nodes count exactly the capacity the old ones freed
        assert packer.budget == [0, 0]


def test_repacking_respects_the_budget_and_keeps_a_packing_it_cannot_improve():
    # Small balanced nodes now count more against the limits than the lopsided ones free.
    packer = _lopsided([8 + 4 + 7, 4 + 8 + 7], [CPU_HEAVY, MEMORY_HEAVY, BALANCED, PackType((6, 6), 0.55, (7, 7))])
    assert packer.budget == [0, 0]
    _repack_neighbourhoods(packer)
    _check(packer, [4, 4, 1])
    assert packer.budget == [0, 0]
    assert packer.cost() == pytest.approx(2.55)


def test_pack_finds_the_balanced_packing_from_any_group_order():
    first, _ = pack(SIZES, [4, 4, 1], TYPES)
    second, _ = pack(list(reversed(SIZES)), [1, 4, 4], TYPES)
    assert sum(TYPES[b.type_index].price for b in first) == pytest.approx(1.65)
    assert sorted(b.type_index for b in first) == sorted(b.type_index for b in second)


def test_a_pattern_from_an_earlier_lp_round_never_overfills_nor_leaves_a_negative_count() -> None:
    """Found by tests/unit/scheduling/test_properties.py: a column-generation pattern asked
    for more of an item than remained, one copy was opened anyway (remaining went to -2) and
    the fallback pattern then carried the -2 into a bin: the solver took pods away from a
    claim and planned 2.2 CPUs on a 2-CPU c5.large."""
    gib = 1 << 30
    sizes = [(3000, gib // 2, 1), (3000, gib // 8, 1), (1500, gib // 2, 1), (1500, gib // 8, 1), (100, gib // 2, 1), (100, gib // 8, 1)]
    counts = [1, 3, 1, 2, 1, 16]
    types = [
        PackType((2000, 4 * gib, 110), 0.035),
        PackType((2000, 8 * gib, 110), 0.096),
        PackType((2000, 16 * gib, 29), 0.126),
        PackType((8000, 16 * gib, 110), 0.14),
        PackType((4000, 16 * gib, 110), 0.192),
        PackType((16000, 64 * gib, 110), 0.768),
    ]
    bins, remaining = pack(sizes, counts, types)
    assert remaining == [0] * len(sizes)
    assert all(n > 0 for b in bins for n in b.counts.values()), [b.counts for b in bins]
    _check_bins(bins, sizes, counts, types)


def _check_bins(bins, sizes, counts, types) -> None:  # type: ignore[no-untyped-def]
    placed = [0] * len(counts)
    for b in bins:
        used = [0] * len(sizes[0])
        for i, n in b.counts.items():
            placed[i] += n
            used = [u + n * s for u, s in zip(used, sizes[i])]
        assert used == list(b.used) and all(u <= c for u, c in zip(used, types[b.type_index].capacity))
    assert placed == counts


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4000), st.integers(1, 16)), min_size=1, max_size=8, unique=True),
    st.data(),
)
def test_every_packing_places_each_item_exactly_once_within_capacity(shapes, data) -> None:  # type: ignore[no-untyped-def]
    sizes = [(cpu, memory, 1) for cpu, memory in shapes]
    counts = [data.draw(st.integers(1, 30)) for _ in sizes]
    menu = [
        ((2000, 4, 110), 0.035),
        ((2000, 8, 110), 0.096),
        ((2000, 16, 29), 0.126),
        ((8000, 16, 110), 0.14),
        ((4000, 16, 110), 0.192),
        ((16000, 64, 110), 0.768),
    ]
    types = [PackType(capacity, price) for capacity, price in data.draw(st.lists(st.sampled_from(menu), min_size=1, max_size=6, unique=True))]
    bins, remaining = pack(sizes, counts, types)
    assert all(r >= 0 for r in remaining)
    assert all(n > 0 for b in bins for n in b.counts.values())
    _check_bins(bins, sizes, [c - r for c, r in zip(counts, remaining)], types)


def _bins(packer: _Packer) -> list[tuple[int, tuple[tuple[int, int], ...], tuple[int, ...]]]:
    return [(b.type_index, tuple(sorted(b.counts.items())), tuple(b.used)) for b in packer.bins]


@settings(max_examples=120, deadline=None)
@given(
    items=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 12)), min_size=1, max_size=14),
    types=st.lists(st.tuples(st.integers(4, 24), st.integers(4, 24), st.integers(1, 40)), min_size=2, max_size=12),
    narrow=st.integers(1, 4),
    budget=st.none() | st.tuples(st.integers(10, 200), st.integers(10, 200)),
)
def test_a_paired_greedy_run_equals_the_two_runs_made_separately(items, types, narrow, budget) -> None:  # type: ignore[no-untyped-def]
    """The narrow run forks from the wide one at their first different choice: it must end
    exactly where a narrow run made from scratch ends (same bins, same leftovers)."""
    sizes = [(cpu, memory) for cpu, memory, _ in items]
    counts = [count for _, _, count in items]
    pack_types = [PackType((cpu, memory), price / 10, (cpu, memory)) for cpu, memory, price in types]
    wide = narrow + 2

    def alone(candidates: int) -> _Packer:
        packer = _Packer(sizes, counts, pack_types, list(budget) if budget else None)
        packer.candidates = candidates
        packer.run_greedy()
        return packer

    paired = _Packer(sizes, counts, pack_types, list(budget) if budget else None)
    paired.candidates = wide
    runs = paired.run_greedy_pair(narrow)
    expected_wide, expected_narrow = alone(wide), alone(narrow)
    assert _bins(runs[0]) == _bins(expected_wide) and runs[0].remaining == expected_wide.remaining
    if len(runs) == 2:
        assert _bins(runs[1]) == _bins(expected_narrow) and runs[1].remaining == expected_narrow.remaining
        assert runs[1].budget == expected_narrow.budget
    else:  # never forked: the narrow run chose as the wide one did at every bin
        assert _bins(expected_narrow) == _bins(expected_wide)


def _greedy_checking_reuse(sizes: list[tuple[int, int]], counts: list[int], types: list[PackType], candidates: int) -> int:
    """Run the greedy; whenever it reuses a type's aligned fill, compute the fill afresh and
    compare. Returns how many fills were reused."""
    packer = _Packer(sizes, counts, types, None)
    packer.candidates = candidates
    reused = 0
    computed = 0
    original, compute = packer._fill_aligned_cached, packer._fill_aligned

    def counting(t: int, active: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        nonlocal computed
        computed += 1
        return compute(t, active)

    def checked(t: int, active: list[int]) -> dict[int, int]:
        nonlocal reused
        before = computed
        fill = original(t, active)
        if computed == before:  # served from the cache
            reused += 1
            assert fill == compute(t, active)[0]
        return fill

    packer._fill_aligned = counting  # type: ignore[method-assign]
    packer._fill_aligned_cached = checked  # type: ignore[method-assign]
    packer.run_greedy()
    return reused


@settings(max_examples=80, deadline=None)
@given(
    items=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 30)), min_size=2, max_size=16),
    types=st.lists(st.tuples(st.integers(4, 40), st.integers(4, 40), st.integers(1, 40)), min_size=1, max_size=8),
    candidates=st.integers(1, 6),
)
def test_a_reused_aligned_fill_is_the_fill_computed_afresh(items, types, candidates) -> None:  # type: ignore[no-untyped-def]
    """The aligned fill of a type is reused while the items it took lost no more than their
    slack (the room, not the count left, set each take): a reused fill equals a fresh one."""
    sizes = [(cpu, memory) for cpu, memory, _ in items]
    counts = [count for _, _, count in items]
    _greedy_checking_reuse(sizes, counts, [PackType((cpu, memory), price / 10) for cpu, memory, price in types], candidates)


def test_fills_are_reused_when_popular_items_lose_less_than_their_slack() -> None:
    """Many pods of a few sizes: a bin takes some of each, and the other types' fills, which
    the room limited, stay valid."""
    sizes = [(1, 2), (2, 1), (1, 1), (3, 3)]
    types = [PackType((8, 8), 1.0), PackType((16, 8), 1.5), PackType((8, 16), 1.5), PackType((16, 16), 1.9)]
    assert _greedy_checking_reuse(sizes, [400, 300, 500, 100], types, 4) > 0


def _plain_aligned_fill(packer: _Packer, t: int, active: list[int]) -> tuple[dict[int, int], dict[int, int]]:
    """The aligned fill as first written: a lazy heap of stale scores, every re-scored item
    re-inserted, and the loop running until the heap is empty."""
    from heapq import heapify, heappop, heapreplace

    capacity = packer.types[t].capacity
    scale = [1.0 / c if c > 0 else 0.0 for c in capacity]
    room = list(capacity)
    left = {i: packer.remaining[i] for i in active if packer.remaining[i]}
    heap = [(-sum(s * k for s, k in zip(packer.sizes[i], scale)), position, i) for position, i in enumerate(active) if packer.remaining[i]]
    heapify(heap)
    fill: dict[int, int] = {}
    slacks: dict[int, int] = {}
    while heap:
        negative, position, i = heap[0]
        score = sum((s * k) * (r * k) for s, k, r in zip(packer.sizes[i], scale, room))
        if score < -negative - 1e-12:
            heapreplace(heap, (-score, position, i))
            if heap[0][2] != i:
                continue
        fits = min((r // s for r, s in zip(room, packer.sizes[i]) if s), default=1 << 62)
        if fits <= 0:
            heappop(heap)
            continue
        most = min(left[i], fits)
        slacks[i] = min(slacks.get(i, 1 << 62), max(0, left[i] - fits))
        n = most if most <= 2 else (most + 1) // 2
        fill[i] = fill.get(i, 0) + n
        left[i] -= n
        if not left[i]:
            heappop(heap)
        room = [r - n * s for r, s in zip(room, packer.sizes[i])]
    return fill, slacks


@settings(max_examples=300, deadline=None)
@given(
    items=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 20), st.integers(1, 30)), min_size=1, max_size=30),
    capacity=st.tuples(st.integers(1, 200), st.integers(1, 200), st.integers(1, 120)),
    taken=st.lists(st.integers(0, 30), max_size=16),
)
def test_the_aligned_fill_with_its_shortcuts_fills_as_the_plain_heap(items, capacity, taken) -> None:  # type: ignore[no-untyped-def]
    """The fill keys items by score over the shrink of the room (leaving out the pod slot
    every item needs), stops once no item fits a resource's room, and leaves a re-scored
    item on top while it still beats both children: the same fill and slacks as the
    plain loop."""
    sizes = [(cpu, memory, 1) for cpu, memory, _ in items]
    packer = _Packer(sizes, [count for _, _, count in items], [PackType(capacity, 1.0)], None)
    for i, n in enumerate(taken[: len(sizes)]):
        packer.remaining[i] = max(0, packer.remaining[i] - n)
    active = [i for i, n in enumerate(packer.remaining) if n]
    assert packer._fill_aligned(0, active) == _plain_aligned_fill(packer, 0, active)


def test_an_aligned_fill_keys_items_afresh_when_one_take_nearly_empties_the_room() -> None:
    """A take that leaves a millionth of the room would make the keys lose their precision:
    the items are keyed afresh by their scores, and the fill is still the plain heap's."""
    sizes = [(9_999_993, 9_999_993, 1), (3, 3, 1), (1, 2, 1), (2, 1, 1)]
    packer = _Packer(sizes, [1, 2, 4, 4], [PackType((10_000_000, 10_000_000, 100), 1.0)], None)
    active = [0, 1, 2, 3]
    fill, slacks = packer._fill_aligned(0, active)
    assert fill == {0: 1, 1: 2}  # then the room (1, 1) holds nothing more
    assert (fill, slacks) == _plain_aligned_fill(packer, 0, active)


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 12), st.integers(-2, 20)), min_size=1, max_size=10),
    capacity=st.tuples(st.integers(1, 40), st.integers(1, 40)),
)
def test_the_pattern_value_ceiling_bounds_every_priced_pattern(items, capacity) -> None:  # type: ignore[no-untyped-def]
    """Column generation skips the knapsack of a type whose price reaches the ceiling: the
    ceiling must bound the value of any pattern the knapsack can return (items free on a
    resource, unpriced items and counts included)."""
    sizes = [(cpu, memory) for cpu, memory, _, _ in items]
    counts = [count for _, _, count, _ in items]
    prices = [price / 4 for _, _, _, price in items]
    packer = _Packer(sizes, counts, [PackType(capacity, 1.0)], None)
    ceiling = packer._pattern_value_ceiling(prices, counts)(capacity)
    order = sorted(range(len(sizes)), key=lambda i: (tuple(-s for s in sizes[i]), i))
    pattern = packer._knapsack(0, prices, counts, order)
    assert sum(prices[i] * n for i, n in pattern.items()) <= ceiling + 1e-9


def test_types_of_equal_capacity_share_their_aligned_fill() -> None:
    """Two generations of one size (same capacity, different prices): the second type's
    fill is the first's, reused, and equal to a fresh one."""
    sizes = [(1, 2), (2, 1), (3, 3), (1, 1)]
    types = [PackType((16, 16), 1.0), PackType((16, 16), 0.9), PackType((32, 32), 2.1)]
    packer = _Packer(sizes, [9, 7, 3, 11], types, None)
    active = [0, 1, 2, 3]
    first = packer._fill_aligned_cached(0, active)
    computed = []
    original = packer._fill_aligned

    def counting(t: int, active: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        computed.append(t)
        return original(t, active)

    packer._fill_aligned = counting  # type: ignore[method-assign]
    assert packer._fill_aligned_cached(1, active) == first == original(1, active)[0]
    assert computed == []
    packer._fill_aligned_cached(2, active)
    assert computed == [2]
    assert _greedy_checking_reuse(sizes, [90, 70, 30, 110], types, 3) > 0
