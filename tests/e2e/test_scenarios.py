"""End to end: the example scenarios beyond the classic one (capacity errors, rebalance
recommendations, PodDisruptionBudgets, consolidation, static NodePools, node repair), each run once through the same machinery
as ``joiner simulate`` and its concrete outcomes asserted in simulated time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from testworld.scenario import load_scenario
from testworld.simulator import Simulation, SimulationResult

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "examples" / "scenarios"


def _run(name: str) -> SimulationResult:
    return Simulation(load_scenario(SCENARIOS / f"{name}.yaml"), functions_dir=ROOT / "functions").run()


def _at(result: SimulationResult, moment: object) -> timedelta:
    return moment - result.start  # type: ignore[operator]


@pytest.fixture(scope="module")
def capacity() -> Iterator[SimulationResult]:
    yield _run("capacity-errors")


@pytest.fixture(scope="module")
def rebalance() -> Iterator[SimulationResult]:
    yield _run("rebalance")


@pytest.fixture(scope="module")
def pdb() -> Iterator[SimulationResult]:
    yield _run("pdb")


@pytest.fixture(scope="module")
def consolidation() -> Iterator[SimulationResult]:
    yield _run("consolidation")


# ---------------------------------------------------------------- capacity errors


def test_capacity_errors_fall_back_within_the_same_scanner_invocation(capacity: SimulationResult) -> None:
    assert not capacity.handler_errors and capacity.passed, [c for c in capacity.checks if not c.passed]
    managed = sorted((i for i in capacity.instances if i.managed), key=lambda i: i.launched)
    got = [(_at(capacity, i.launched), i.instance_type, i.capacity_type, i.zone) for i in managed]
    minute = timedelta(minutes=1)
    # wave 1: c5.2xlarge spot refused in 1a and 1b, the same CreateFleet launches it in 1c;
    # wave 2: no spot anywhere, the same invocation re-plans and launches on-demand
    assert got[0] == (minute, "c5.2xlarge", "spot", "us-east-1c")
    assert got[1][:3] == (2 * minute, "c5.2xlarge", "on-demand")
    failures = [(_at(capacity, f.at), f.function, f.instance_type, f.zone, f.capacity_type) for f in capacity.capacity_failures]
    assert failures[:2] == [(minute, "scanner", "c5.2xlarge", z, "spot") for z in ("us-east-1a", "us-east-1b")]
    assert sorted(failures[2:]) == sorted(
        [(2 * minute, "scanner", "c5.2xlarge", "us-east-1c", "spot")]
        + [(2 * minute, "scanner", "m5.2xlarge", z, "spot") for z in ("us-east-1a", "us-east-1b", "us-east-1c")]
    )
    assert capacity.invocations["scanner"] == 7  # one invocation per tick: no extra round was needed
    # every pod bound within a scan and a boot of its arrival
    assert max(capacity.pending_seconds()) <= 90 and capacity.pods_lost == 0


def test_refused_offerings_are_avoided_for_three_minutes_then_tried_again(capacity: SimulationResult) -> None:
    marks = {(m.instance_type, m.zone, m.capacity_type): (_at(capacity, m.seen), _at(capacity, m.expires)) for m in capacity.unavailable_marks}
    minute = timedelta(minutes=1)
    assert marks[("c5.2xlarge", "us-east-1a", "spot")] == (minute, 4 * minute)
    assert marks[("m5.2xlarge", "us-east-1b", "spot")] == (2 * minute, 5 * minute)
    assert len(marks) == 6
    managed = sorted((i for i in capacity.instances if i.managed), key=lambda i: i.launched)
    # wave 3 (3:00): capacity is back but spot is still marked: on-demand, without a spot attempt
    assert (_at(capacity, managed[2].launched), managed[2].capacity_type) == (3 * minute, "on-demand")
    assert all(f.at - capacity.start <= 2 * minute for f in capacity.capacity_failures)
    # wave 4 (6:00): the marks expired: spot again, the cheapest offering
    assert (_at(capacity, managed[3].launched), managed[3].instance_type, managed[3].capacity_type) == (6 * minute, "c5.2xlarge", "spot")
    assert len(managed) == 4 and all(i.terminated is None for i in managed)


# ---------------------------------------------------------------- rebalance


def test_rebalance_on_an_ignoring_nodepool_leaves_the_node_alone(rebalance: SimulationResult) -> None:
    assert not rebalance.handler_errors
    ignored = next(r for r in rebalance.rebalances if r.policy == "ignore")
    assert ignored.handled and ignored.cordoned is None and ignored.terminated is None
    assert not [d for d in rebalance.pod_deletions if d.node == ignored.node]
    assert rebalance.pods_lost == 0 and rebalance.samples[-1].pending == 0


def test_rebalance_on_a_replacing_nodepool_drains_only_once_the_replacement_is_ready(rebalance: SimulationResult) -> None:
    replaced = next(r for r in rebalance.rebalances if r.policy == "replace")
    assert replaced.cordoned is not None and replaced.cordoned - replaced.warned <= timedelta(seconds=1)
    assert replaced.terminated_by == "joiner" and rebalance.pods_lost == 0
    assert replaced.replacement_ready is not None, "no replacement Node became Ready"
    assert replaced.drain_started is not None and replaced.replacement_ready <= replaced.drain_started
    moved = [p for p in rebalance.pods if p.created >= replaced.warned]
    assert moved and max(p.pending_seconds(rebalance.start + timedelta(seconds=rebalance.simulated_seconds)) for p in moved) <= 60
    assert rebalance.passed


# ---------------------------------------------------------------- PodDisruptionBudget


def test_pdb_spaces_evictions_and_deletes_the_rest_at_the_deadline_without_losing_a_pod(pdb: SimulationResult) -> None:
    assert not pdb.handler_errors and pdb.passed, [c for c in pdb.checks if not c.passed]
    [record] = pdb.interruptions
    assert record.pods_at_warning == 6 and record.within_deadline and record.terminated_by == "joiner"
    moved = [d for d in pdb.pod_deletions if d.node == record.node]
    evictions = [d for d in moved if d.via == "eviction"]
    deletions = [d for d in moved if d.via != "eviction"]
    assert len(moved) == 6 and len({d.pod for d in moved}) == 6
    # replace, then drain: the first eviction once the replacement is Ready (polled every 5 s),
    # the budget then letting one through at a time, each after the previous one's successor was Ready
    assert evictions and record.replacement_ready is not None
    assert record.replacement_ready <= evictions[0].at <= record.replacement_ready + timedelta(seconds=5)
    for before, after in zip(evictions, evictions[1:], strict=False):
        assert after.at - before.at >= timedelta(seconds=5)
    # what is left is deleted at deadline - grace (30 s) - 2 s, with a grace that ends by the deadline
    window = record.deadline - timedelta(seconds=32)
    assert deletions and all(window <= d.at <= window + timedelta(seconds=1) for d in deletions)
    assert all(d.grace_seconds is not None and d.at + timedelta(seconds=d.grace_seconds) <= record.deadline for d in deletions)
    assert record.drained is not None and record.drained <= record.deadline
    assert record.terminated is not None and record.terminated < record.deadline
    assert pdb.pods_lost == 0 and pdb.samples[-1].pending == 0


# ---------------------------------------------------------------- consolidation


def test_consolidation_removes_underutilised_nodes_within_the_budget_and_cost_drops(consolidation: SimulationResult) -> None:
    assert not consolidation.handler_errors and consolidation.passed, [c for c in consolidation.checks if not c.passed]
    peak = max(s.cost for s in consolidation.samples)
    end = consolidation.samples[-1]
    assert peak == pytest.approx(1.36) and end.cost == pytest.approx(0.34) and end.nodes == {"c5.2xlarge": 1}
    # never more nodes of the pool disrupted at once than its budget (2)
    assert max(s.cordoned.get("general", 0) for s in consolidation.samples) == 2
    terminated = sorted(_at(consolidation, i.terminated) for i in consolidation.instances if i.terminated is not None)
    assert [i for i in consolidation.instances if i.terminated is not None and i.terminated_by != "joiner"] == []
    assert len(terminated) == 3
    # the scale-down happens at 2:30; a command computed at 3:00 is re-checked and executed at the next pass
    first_disruption = min(e.at for e in consolidation.entries if e.source == "joiner/disruption" and "cordoned" in e.action)
    assert first_disruption >= timedelta(minutes=3, seconds=15)
    assert consolidation.pods_lost == 0 and end.pending == 0
    remaining = [p for p in consolidation.pods if p.gone is None]
    assert len(remaining) == 6


# ---------------------------------------------------------------- static NodePools


@pytest.fixture(scope="module")
def static() -> Iterator[SimulationResult]:
    yield _run("static")


def test_a_static_pool_keeps_its_replicas_and_pods_launch_only_the_dynamic_one(static: SimulationResult) -> None:
    assert not static.handler_errors and static.passed, [c for c in static.checks if not c.passed]
    managed = sorted((i for i in static.instances if i.managed), key=lambda i: (i.launched, i.instance_type))
    minute = timedelta(minutes=1)
    # both replicas in the first scanner round, with no pod pending; the pods' extra node from `burst`
    assert [(_at(static, i.launched), i.instance_type) for i in managed] == [(minute, "c5.large"), (minute, "c5.large"), (3 * minute, "c5.xlarge")]
    assert static.pods_lost == 0


# ---------------------------------------------------------------- node auto repair


@pytest.fixture(scope="module")
def repair() -> Iterator[SimulationResult]:
    yield _run("repair")


def test_a_node_not_ready_past_its_repair_time_is_replaced_and_its_pod_moves(repair: SimulationResult) -> None:
    assert not repair.handler_errors and repair.passed, [c for c in repair.checks if not c.passed]
    minute = timedelta(minutes=1)
    (reported,) = [e for e in repair.entries if e.source == "node-monitoring"]
    assert reported.event.endswith("reports Ready=False")
    unhealthy = reported.event.split()[1]
    managed = sorted((i for i in repair.instances if i.managed), key=lambda i: (i.launched, i.instance_id))
    (gone,) = [i for i in managed if i.terminated is not None]
    assert gone.private_dns == unhealthy and gone.terminated_by == "joiner"
    # not before the repair time (30 minutes from 4:00), at the first disruption pass after it
    assert 34 * minute <= _at(repair, gone.terminated) <= 35 * minute
    replacement = managed[-1]
    assert len(managed) == 4 and _at(repair, replacement.launched) == _at(repair, gone.terminated)
    (moved,) = repair.pod_deletions
    assert moved.node == unhealthy and moved.function == "disruption"
    assert repair.pods_lost == 0
