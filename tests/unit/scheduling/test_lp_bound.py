"""The lower bounds bench.cost compares plans with (SciPy/HiGHS, development only)."""

from __future__ import annotations

import pytest

from bench.bounds.lp_bound import lp_lower_bound, whole_pod_lower_bound
from joiner.domain.scheduling import SchedulingProblem, solve

from .builders import instance_type, node_pool, pod

# Lopsided types priced 1.0 and a balanced one priced 1.5; every pod needs 1 CPU and 1 GiB.
TYPES = (
    instance_type("cpu.rich", 2.2, 1.2, 1.0, pods=20),
    instance_type("mem.rich", 1.2, 2.2, 1.0, pods=20),
    instance_type("balanced", 2.2, 2.2, 1.5, pods=20),
)


def problem(count: int) -> SchedulingProblem:
    pools = (node_pool(),)
    return SchedulingProblem(pending=tuple(pod(f"p{i}", "1", "1Gi") for i in range(count)), node_pools=pools, instance_types={"default": TYPES})


def test_the_lp_splits_pods_across_lopsided_types_and_the_whole_pod_bound_does_not() -> None:
    pr = problem(2)
    # One of each lopsided type gives 3.4 CPU and 3.4 GiB for 2.0 (1.7 of each per dollar), so
    # fractions of the pair cover 2 CPU and 2 GiB for 2 / 1.7.
    assert lp_lower_bound(pr) == pytest.approx(2 / 1.7, rel=1e-6)
    whole = whole_pod_lower_bound(pr)
    # Whole pods: one per lopsided node (2.0) or two on a balanced one (1.5).
    assert whole == pytest.approx(1.5, abs=1e-6)
    assert lp_lower_bound(pr) < whole <= solve(pr).cost_per_hour + 1e-9


@pytest.mark.parametrize("count", [1, 3, 7])
def test_bounds_never_exceed_the_solvers_plan(count: int) -> None:
    pr = problem(count)
    plan = solve(pr)
    assert not plan.unschedulable
    assert lp_lower_bound(pr) <= whole_pod_lower_bound(pr) + 1e-6 <= plan.cost_per_hour + 1e-6


def test_pods_no_type_can_hold_are_left_out_of_both_bounds() -> None:
    pods = (pod("huge", "64", "1Gi"), pod("p0", "1", "1Gi"), pod("p1", "1", "1Gi"))
    pr = SchedulingProblem(pending=pods, node_pools=(node_pool(),), instance_types={"default": TYPES})
    assert [u.pod for u in solve(pr).unschedulable] == ["default/huge"]
    assert whole_pod_lower_bound(pr) == pytest.approx(1.5, abs=1e-6)
    assert lp_lower_bound(pr) == pytest.approx(2 / 1.7, rel=1e-6)


def test_the_whole_pod_bound_keeps_pods_off_types_their_requirements_exclude() -> None:
    from joiner.domain import labels as wk

    from .builders import req

    types = (instance_type("arm.large", 2.2, 4.2, 1.0, arch="arm64", pods=20), instance_type("amd.large", 2.2, 4.2, 1.3, pods=20))
    pools = (node_pool(requirements=[req(wk.ARCH, "In", "amd64", "arm64")]),)
    pending = tuple(pod(f"p{i}", "1", "1Gi", node_selector={wk.ARCH: "amd64"}) for i in range(2))
    pr = SchedulingProblem(pending=pending, node_pools=pools, instance_types={"default": types})
    # Ignoring the pods' arch selector the arm64 node (1.0) would hold both.
    assert whole_pod_lower_bound(pr) == pytest.approx(1.3, abs=1e-6)
    assert solve(pr).cost_per_hour == pytest.approx(1.3)
