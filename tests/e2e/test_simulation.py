"""End to end: scenarios run through the same machinery as ``joiner demo`` (moto over HTTP,
the Kubernetes API emulator, the real Lambda handlers fed real-shaped events, a simulated
kubelet, scheduler and EC2) and their outcomes asserted in simulated time."""

from __future__ import annotations

import filecmp
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from testworld.cli import main
from testworld.lambdas import handler_path
from testworld.report import render_html
from testworld.scenario import bundled_scenario, load_scenario
from testworld.simulator import Simulation, SimulationResult, percentile

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HAS_DISRUPTION = handler_path("disruption", ROOT / "functions").exists()


@pytest.fixture(scope="module")
def classic() -> Iterator[SimulationResult]:
    scenario = load_scenario(ROOT / "examples" / "scenarios" / "classic.yaml")
    yield Simulation(scenario, functions_dir=ROOT / "functions").run()


def test_the_bundled_default_scenario_is_the_example() -> None:
    assert filecmp.cmp(bundled_scenario(), ROOT / "examples" / "scenarios" / "classic.yaml", shallow=False)


def test_classic_launches_one_m5_large_and_three_c5_2xlarge_and_binds_every_pod(classic: SimulationResult) -> None:
    assert not classic.handler_errors
    first_launches = [s for s in classic.samples if s.at <= timedelta(minutes=4)][-1]
    assert first_launches.launched == {"m5.large": 1, "c5.2xlarge": 3}
    assert first_launches.nodes == {"m5.large": 1, "c5.2xlarge": 3}
    assert first_launches.pending == 0
    spot = [i for i in classic.instances if i.node_pool == "spot"]
    addons = [i for i in classic.instances if i.node_pool == "addons"]
    assert {i.capacity_type for i in spot} == {"spot"} and [i.capacity_type for i in addons] == ["on-demand"]
    # every pod of the workloads was bound: the add-on pod on the add-on node, the rest on spot nodes
    addon_nodes = {classic_node for classic_node in (p.node for p in classic.pods if p.workload == "addons")}
    assert len(addon_nodes) == 1 and all(p.bound is not None for p in classic.pods)
    addon_instance = addons[0]
    assert addon_nodes == {addon_instance.private_dns}


def test_classic_pending_times_are_bounded_in_simulated_time(classic: SimulationResult) -> None:
    pending = classic.pending_seconds()
    # pods arrive at 0:30, the economy-mode scanner launches at 1:00, nodes boot in 60 s
    assert len(pending) == 21 + classic.interruptions[0].pods_at_warning
    assert 60 <= percentile(pending, 50) <= 120
    assert percentile(pending, 99) <= 180
    assert classic.pods_lost == 0


def test_classic_spot_interruption_is_drained_and_replaced_before_its_deadline(classic: SimulationResult) -> None:
    [record] = classic.interruptions
    assert record.pods_at_warning > 0
    assert record.within_deadline and record.terminated_by == "joiner"
    assert record.drained is not None and record.drained <= record.deadline
    assert record.replacement_ready is not None and record.replacement_ready < record.deadline
    interrupted = next(i for i in classic.instances if i.instance_id == record.instance_id)
    replacement = [i for i in classic.instances if i.managed and i.launched >= record.warned]
    assert [i.instance_type for i in replacement] == ["c5.2xlarge"]
    assert interrupted.zone != replacement[0].zone or interrupted.instance_type != replacement[0].instance_type
    sources = [e.source for e in classic.entries if e.at >= record.warned - classic.start]
    assert "joiner/interruption" in sources and "joiner/termination" in sources
    cordon = next(e for e in classic.entries if e.source == "joiner/interruption")
    assert "cordoned" in cordon.action and "evicted" not in cordon.action


def test_classic_interrupted_pods_move_straight_onto_the_ready_replacement(classic: SimulationResult) -> None:
    """Replace, then drain (issue 16 section 5): no eviction before the replacement is Ready,
    and so no pod-second pending because of the interruption."""
    [record] = classic.interruptions
    evictions = [d.at for d in classic.pod_deletions if d.node == record.node]
    assert evictions and record.replacement_ready is not None
    assert min(evictions) >= record.replacement_ready
    assert classic.interruption_pending() == [0.0]


def test_pending_caused_by_an_interruption_counts_each_successor_once() -> None:
    """The measurement itself: pods drained 60 s before their replacement capacity is Ready
    pend 60 s each; a pod of another workload or created before the removal is not counted."""
    from testworld.cluster import PodRecord
    from testworld.simulator import PodDeletion

    start = datetime(2025, 1, 1, tzinfo=UTC)
    at = start + timedelta(minutes=5)
    result = SimulationResult(scenario=None, start=start, simulated_seconds=900)
    result.pods = [
        PodRecord("default/web-0", "web", start, start, "n1", at),
        PodRecord("default/web-1", "web", start, start, "n1", at),
        PodRecord("default/db-0", "db", start, start, "n2"),
        PodRecord("default/web-2", "web", at, at + timedelta(seconds=60), "n3"),
        PodRecord("default/web-3", "web", at, at + timedelta(seconds=60), "n3"),
        PodRecord("default/db-1", "db", at, at + timedelta(seconds=600), "n3"),
        PodRecord("default/web-4", "web", start, None),  # pending since before the removal: not caused by it
    ]
    result.pod_deletions = [PodDeletion(at, f"default/web-{i}", "n1", "eviction", None, "termination") for i in (0, 1)]
    assert result.pending_caused_by("n1", at - timedelta(seconds=1)) == 120.0
    assert result.pending_caused_by("n1", at + timedelta(seconds=1)) == 0.0
    assert result.pending_caused_by("n2", start) == 0.0


@pytest.mark.skipif(not HAS_DISRUPTION, reason="functions/disruption/handler.py does not exist yet: nothing removes empty nodes")
def test_classic_empty_nodes_go_away_after_the_workloads_leave(classic: SimulationResult) -> None:
    end = classic.samples[-1]
    assert end.nodes == {"m5.large": 1}
    assert end.cost == pytest.approx(0.096)
    terminated = [i for i in classic.instances if i.terminated is not None and i.terminated_by == "joiner"]
    assert sorted(i.instance_type for i in terminated) == ["c5.2xlarge"] * 4
    assert all(check.passed for check in classic.checks)


def test_classic_expectations_hold_and_the_report_is_self_contained(classic: SimulationResult) -> None:
    assert classic.passed
    assert [c.passed for c in classic.checks if c.passed is not None] and all(c.passed for c in classic.checks if c.passed is not None)
    page = render_html(classic)
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<polyline" in page
    assert "<script" not in page and "src=" not in page and "<link" not in page
    assert ">nodes, pending pods</text>" in page and "cost per hour ($)</text>" in page  # both axes labelled
    assert "white-space: pre-wrap" in page  # long summary lines wrap
    import re

    cost_labels = [float(v) for v in re.findall(r'fill="#b35c00">\$([0-9.]+)</text>', page)]
    assert len(cost_labels) == 5 and cost_labels[0] == 0
    assert all(abs(round(v / cost_labels[1]) * cost_labels[1] - v) < 1e-9 for v in cost_labels)  # equal round steps
    assert classic.simulated_seconds == 14 * 60 and classic.wall_seconds < classic.simulated_seconds


def test_classic_report_chart_bills_the_replacement_from_the_warning_and_explains_the_idle_nodes(classic: SimulationResult) -> None:
    """The chart of a real run (geometry in tests/unit/test_report_chart.py): the replacement's
    bar starts at the warning, every event is marked, no label crosses a line or another label,
    and the empty nodes' wait for consolidateAfter is annotated."""
    from tests.support.report_geometry import layout_problems, read_chart

    chart = read_chart(render_html(classic))
    assert layout_problems(chart) == []
    [record] = classic.interruptions
    warned = (record.warned - classic.start).total_seconds()
    [replacement] = [i for i in classic.instances if i.managed and i.launched >= record.warned]
    billed = chart.lanes()[replacement.instance_id]["billed"]
    assert billed[0] == pytest.approx(chart.marker_x("warning", warned), abs=0.2)
    assert replacement.terminated is not None
    assert billed[2] == pytest.approx(chart.marker_x("termination", (replacement.terminated - classic.start).total_seconds()), abs=0.2)
    assert {kind for kind, *_ in chart.markers} == {"scale", "launch", "warning", "drain", "termination"}
    if HAS_DISRUPTION:
        [(start, _end, label)] = chart.idle()
        assert start == 600 and "waiting for consolidateAfter 30s" in label


@pytest.mark.parametrize(("value", "top"), [(0.572, 0.6), (1.04, 1.2), (0.0884, 0.1), (3.0, 3.2), (0.01, 0.01), (7.9, 8.0), (12.1, 16.0)])
def test_cost_axis_tops_are_round(value: float, top: float) -> None:
    from testworld.report import nice_axis_top

    assert nice_axis_top(value) == pytest.approx(top)
    assert nice_axis_top(value) >= value


@pytest.mark.parametrize("region", ["eu-west-1", "ap-southeast-2"])
def test_classic_runs_in_other_regions_on_the_catalog_built_from_ec2(region: str) -> None:
    """The whole pipeline (launch, spot interruption, drain, replacement) where no catalog is
    bundled: the catalog comes from moto's DescribeInstanceTypes/Offerings for the region."""
    scenario = load_scenario(ROOT / "examples" / "scenarios" / "classic.yaml")
    result = Simulation(scenario, functions_dir=ROOT / "functions", region=region).run()
    assert not result.handler_errors and result.passed and result.pods_lost == 0
    assert result.instances and all(i.zone.startswith(region) for i in result.instances)
    first_launches = [s for s in result.samples if s.at <= timedelta(minutes=4)][-1]
    assert first_launches.pending == 0 and sum(first_launches.launched.values()) >= 2
    [record] = result.interruptions
    assert record.within_deadline and record.terminated_by == "joiner" and record.replacement_ready is not None


SHORT = """
name: short
duration: 3m
bootDelay: 30s
objects:
- apiVersion: joiner.dev/v1
  kind: NodeClass
  metadata: {name: default}
  spec:
    subnetSelectorTerms: [{tags: {joiner.dev/discovery: demo}}]
    securityGroupSelectorTerms: [{tags: {joiner.dev/discovery: demo}}]
    role: JoinerNodeRole-demo
- apiVersion: joiner.dev/v1
  kind: NodePool
  metadata: {name: general}
  spec:
    template:
      spec:
        nodeClassRef: {group: joiner.dev, kind: NodeClass, name: default}
        requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
        - {key: joiner.dev/capacity-type, operator: In, values: [on-demand]}
workloads:
- {name: web, replicas: 3, cpu: 500m}
expect:
- nodes: {m5.large: 1}
- launched: {c5.large: 7}
"""


def test_simulate_exits_1_naming_the_failed_expectation_and_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "short.yaml"
    scenario.write_text(SHORT)
    report = tmp_path / "out" / "report.html"
    assert main(["simulate", str(scenario), "--report", str(report), "--quiet"]) == 1
    out, err = capsys.readouterr()
    assert "PASS  nodes {m5.large: 1}" in out and "FAIL  launched {c5.large: 7}: got {m5.large: 1}" in out
    assert "expectations failed: launched {c5.large: 7}" in err
    assert report.exists() and f"report: {report}" in out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("duration: soon\n", "duration: "),
        ("workloads:\n- {name: web, replicas: -1}\n", "workloads[0].replicas: must be a non-negative integer, got -1"),
        ("workloads:\n- {name: web, cpu: lots}\n", "workloads[0].cpu: not a valid cpu quantity: 'lots'"),
        ("events:\n- {at: 1m, scale: {workload: nope, replicas: 1}}\n", "events[0].scale.workload: no workload named 'nope'"),
        ("events:\n- {scale: {workload: x}}\n", "events[0].at: required"),
        ("expect:\n- {nodes: {m5.large: two}}\n", "expect[0].nodes.m5.large: must be a non-negative integer"),
        ("expect:\n- {podsLost: 0, requires: [teleporter]}\n", "expect[0].requires[0]: unknown function 'teleporter'"),
        ("colour: blue\n", "colour: unknown field"),
        ("- just a list\n", "scenario: must be a mapping, got a list"),
        ("objects: [{kind: Pod}]\n", "objects[0].apiVersion: must be a non-empty string"),
        ("name: [unclosed\n", "invalid YAML (line"),
        ("events:\n- {at: 1m, capacityError: {instanceTypes: [c9.huge]}}\n", "events[0].capacityError.instanceTypes[0]: unknown instance type"),
        ("events:\n- {at: 1m, capacityError: {zones: [mars-1a]}}\n", "events[0].capacityError.zones[0]: unknown zone"),
        ("events:\n- {at: 1m, capacityError: {capacityType: reserved}}\n", "events[0].capacityError.capacityType: must be one of spot, on-demand"),
        ("events:\n- {at: 2m, capacityError: {until: 1m}}\n", "events[0].capacityError.until: must be after the event's at"),
        ("events:\n- {at: 1m, capacityError: {instanceTypes: []}}\n", "events[0].capacityError.instanceTypes: must not be empty"),
        ("events:\n- {at: 1m, capacityError: {colour: red}}\n", "events[0].capacityError.colour: unknown field"),
        ("events:\n- {at: 1m, rebalanceRecommendation: {nodePool: [a]}}\n", "events[0].rebalanceRecommendation.nodePool: must be a non-empty string"),
        ("events:\n- {at: 1m, nodeCondition: {status: 'False'}}\n", "events[0].nodeCondition.type: must be a non-empty string"),
        ("events:\n- {at: 1m, nodeCondition: {type: Ready, status: Broken}}\n", "events[0].nodeCondition.status: must be one of True, False, Unknown"),
        ("events:\n- {at: 1m, nodeCondition: {type: Ready}}\n", "events[0].nodeCondition.status: must be one of True, False, Unknown, got None"),
        ("events:\n- {at: 1m, nodeCondition: {type: Ready, status: 'False', colour: red}}\n", "events[0].nodeCondition.colour: unknown field"),
        ("expect:\n- {costPerHourAtMost: cheap}\n", "expect[0].costPerHourAtMost: must be a non-negative number"),
        ("expect:\n- {rebalancesHandled: 1}\n", "expect[0].rebalancesHandled: must be true or false"),
    ],
)
def test_malformed_scenarios_exit_2_with_one_line_naming_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    message: str,
) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(text)
    assert main(["simulate", str(scenario), "--report", str(tmp_path / "r.html")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and not (tmp_path / "r.html").exists()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("joiner simulate: ") and message in lines[0], err
    assert "Traceback" not in err


def test_a_node_condition_event_reads_yamls_unquoted_false_as_the_condition_status() -> None:
    from testworld.scenario import parse_scenario

    scenario = parse_scenario(yaml.safe_load("events:\n- {at: 1m, nodeCondition: {nodePool: p, index: 1, type: NetworkingReady, status: False}}\n"))
    (event,) = scenario.events
    assert (event.kind, event.condition, event.status, event.reason, event.node_pool, event.index) == (
        "nodeCondition",
        "NetworkingReady",
        "False",
        "ScenarioEvent",
        "p",
        1,
    )


def test_a_missing_scenario_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read scenario" in capsys.readouterr().err


def test_responsive_mode_wakes_the_scanner_within_the_batch_window(classic: SimulationResult) -> None:
    """The same scenario with the watcher: the 21 pods arriving at 30 s are launched for after
    the 1 s idle window (plus the round), not at the scanner's next tick; economy waited for it."""
    scenario = load_scenario(ROOT / "examples" / "scenarios" / "classic.yaml")
    responsive = Simulation(scenario, functions_dir=ROOT / "functions", scanner_mode="responsive").run()
    assert responsive.passed, (responsive.checks, responsive.handler_errors)
    assert responsive.wake_ups >= 1 and responsive.watcher_windows >= 13
    # Simulated instants only: the rounds' wall time depends on how busy the machine is
    # (bench.latency reports it).
    served = responsive.provisioning_latency(with_round_wall_time=False)
    assert len(served) >= 20
    # the 1 s idle window; the first watcher window opens at 20 s, before the pods arrive
    assert max(fleet for fleet, _ in served) < 5
    assert all(ready >= fleet + 59 for fleet, ready in served)  # the scenario's 60 s boot
    economy = classic.provisioning_latency(with_round_wall_time=False)
    assert min(fleet for fleet, _ in economy) >= 29  # the pods waited for the tick at 60 s
    with_rounds = responsive.provisioning_latency()
    assert all(measured[0] >= simulated[0] for measured, simulated in zip(with_rounds, served))


def test_an_unknown_scanner_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="scanner_mode"):
        Simulation(load_scenario(bundled_scenario()), scanner_mode="eager")


def test_demo_on_real_kubernetes_without_the_binaries_stops_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JOINER_KUBE_BIN", str(tmp_path / "empty"))
    assert main(["demo", "--kube", "real", "--quiet", "--report", str(tmp_path / "r.html")]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("joiner demo: --kube real: the real Kubernetes components are not built")
    assert "run `make kube`" in lines[0] and "etcd, kube-apiserver, kube-scheduler missing" in lines[0]
    assert "simulating" not in out and not (tmp_path / "r.html").exists()
