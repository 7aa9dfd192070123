"""End to end, offline: a scenario that starts with NodeClaims (Karpenter's ``karpenter.sh/v1`` and
Joiner's ``joiner.dev/v1``) and deletes one, or a Node, as ``kubectl delete`` does. Joiner's real
functions drain the node through their delete-to-drain, as Karpenter's termination tests check
it: the finalizer holds the object, non-critical pods go before critical ones, DaemonSet pods
tolerating the disrupted taint and static pods are never evicted, a PodDisruptionBudget allowing
nothing and a do-not-disrupt pod hold until the NodePool's terminationGracePeriod, then the
instance is terminated and the object released. Malformed scenarios are one line."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from testworld.cli import main
from testworld.scenario import Scenario, load_scenario, parse_scenario
from testworld.simulator import ObjectDeletion, Simulation, SimulationResult

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scenarios" / "delete-to-drain.yaml"
NODE_A, NODE_B = "ip-10-0-1-20.ec2.internal", "ip-10-0-1-21.ec2.internal"
GRACE = timedelta(minutes=3)  # the NodePool's terminationGracePeriod
DELETED_AT = timedelta(minutes=1, seconds=30)


def _run(scenario: Scenario) -> SimulationResult:
    return Simulation(scenario, functions_dir=ROOT / "functions").run()


def _swapped() -> Scenario:
    """The example with the deletions swapped: general-a's Node, and the NodeClaim general-b."""
    document = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    document["events"] = [{"at": "1m30s", "delete": {"node": NODE_A}}, {"at": "1m30s", "delete": {"nodeClaim": "general-b"}}]
    return parse_scenario(document, source="swapped.yaml")


@pytest.fixture(scope="module")
def example() -> Iterator[SimulationResult]:
    yield _run(load_scenario(EXAMPLE))


@pytest.fixture(scope="module")
def swapped() -> Iterator[SimulationResult]:
    yield _run(_swapped())


def _deletion(result: SimulationResult, node: str) -> ObjectDeletion:
    return next(d for d in result.deletions if d.node == node)


def _removals(result: SimulationResult, node: str) -> dict[str, tuple[str, timedelta, int | None]]:
    """Pod -> (eviction or delete, when since the start, grace) of what Joiner's functions did on ``node``."""
    return {d.pod: (d.via, d.at - result.start, d.grace_seconds) for d in result.pod_deletions if d.node == node}


def test_the_scenario_starts_with_both_kinds_of_nodeclaim_running(example: SimulationResult) -> None:
    assert [(c.name, c.api_version, c.node_pool, c.node) for c in example.node_claims] == [
        ("general-a", "karpenter.sh/v1", "general", NODE_A),
        ("general-b", "joiner.dev/v1", "general", NODE_B),
    ]
    running = {i.instance_id: i for i in example.instances}
    assert [(running[c.instance_id].instance_type, running[c.instance_id].zone, running[c.instance_id].managed) for c in example.node_claims] == [
        ("c5.xlarge", "us-east-1a", True),
        ("c5.xlarge", "us-east-1b", True),
    ]
    assert not example.handler_errors and example.passed, [c for c in example.checks if not c.passed]


def _assert_drain_order(result: SimulationResult, node: str) -> None:
    """web-1, web-2 (and the api pods) evicted first, the critical coredns pod after them, the
    DaemonSet and static pods never; the instance terminated by Joiner once the node is empty."""
    removed = _removals(result, node)
    assert "kube-system/kube-proxy-a" not in removed and "kube-system/node-exporter-ip-10-0-1-20.ec2.internal" not in removed
    first = {removed["default/web-1"], removed["default/web-2"]}
    assert len(first) == 1
    ((via, evicted_at, _),) = first
    assert via == "eviction" and evicted_at > DELETED_AT
    api = [value for pod, value in removed.items() if pod.startswith("default/api-")]
    assert all(v[0] == "eviction" and v[1] == evicted_at for v in api)
    critical = removed["kube-system/coredns-1"]
    assert critical[0] == "eviction" and critical[1] > evicted_at  # only once the non-critical pods are gone
    deletion = _deletion(result, node)
    assert deletion.held and deletion.handled
    assert deletion.terminated_by == "joiner" and deletion.terminated is not None and deletion.terminated - result.start >= critical[1]
    assert deletion.terminated - deletion.at < GRACE  # drained well before the grace period


def _assert_held_to_the_grace_period(result: SimulationResult, node: str) -> None:
    """web-3 evicted; guarded-0 (its budget allows no disruption) and batch-0 (do-not-disrupt)
    never evicted, deleted by the deadline rule (deadline - 30 s grace - 2 s) with their grace;
    the instance terminated by Joiner before the deadline."""
    removed = _removals(result, node)
    assert removed["default/web-3"][0] == "eviction"
    deadline = DELETED_AT + GRACE
    for pod in ("default/guarded-0", "default/batch-0"):
        via, at, grace = removed[pod]
        assert via == "delete" and grace == 30, (pod, removed[pod])
        assert deadline - timedelta(seconds=32) <= at <= deadline - timedelta(seconds=30), (pod, at)
        assert at > removed["default/web-3"][1]
    deletion = _deletion(result, node)
    assert deletion.held and deletion.handled and deletion.terminated is not None
    assert deadline - timedelta(seconds=32) <= deletion.terminated - result.start <= deadline


def test_deleting_a_karpenter_nodeclaim_drains_its_node_in_karpenters_order(example: SimulationResult) -> None:
    deletion = _deletion(example, NODE_A)
    assert (deletion.kind, deletion.name, deletion.at - example.start) == ("NodeClaim", "general-a", DELETED_AT)
    _assert_drain_order(example, NODE_A)


def test_deleting_a_node_holds_a_budget_and_a_do_not_disrupt_pod_until_the_grace_period(example: SimulationResult) -> None:
    deletion = _deletion(example, NODE_B)
    assert (deletion.kind, deletion.name) == ("Node", NODE_B)
    _assert_held_to_the_grace_period(example, NODE_B)


def test_deleting_the_node_drains_in_the_same_order(swapped: SimulationResult) -> None:
    assert (_deletion(swapped, NODE_A).kind, _deletion(swapped, NODE_A).name) == ("Node", NODE_A)
    _assert_drain_order(swapped, NODE_A)


def test_deleting_a_joiner_nodeclaim_holds_to_the_grace_period_the_same(swapped: SimulationResult) -> None:
    assert (_deletion(swapped, NODE_B).kind, _deletion(swapped, NODE_B).name) == ("NodeClaim", "general-b")
    _assert_held_to_the_grace_period(swapped, NODE_B)
    assert not swapped.handler_errors and swapped.pods_lost == 0


def test_the_summary_and_the_chart_tell_the_deletions(example: SimulationResult) -> None:
    from testworld.report import render_html, summary_lines

    lines = [line for line in summary_lines(example) if line.startswith("deletion")]
    assert len(lines) == 2 and "nodeclaim/general-a at 01:30" in lines[0] and "terminated by joiner" in lines[0]
    assert "kubectl delete nodeclaim general-a" in render_html(example)


# ---------------------------------------------------------------- malformed scenarios

_BASE = EXAMPLE.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("delete: {nodeClaim: general-a}", "delete: {nodeClaim: general-c}"),
            "events[0].delete.nodeClaim: no NodeClaim named 'general-c' (did you mean \"general-b\"?) (declared: general-a, general-b)",
        ),
        (
            ("delete: {node: ip-10-0-1-21.ec2.internal}", "delete: {node: ip-10-0-9-9.ec2.internal}"),
            "events[1].delete.node: no node (the status.nodeName of one of the scenario's NodeClaims) named 'ip-10-0-9-9.ec2.internal'",
        ),
        (
            ("delete: {nodeClaim: general-a}", "delete: {nodeClaim: general-a, workload: api}"),
            "events[0].delete: needs exactly one of workload, nodeClaim, node",
        ),
        (
            ("delete: {nodeClaim: general-a}", "delete: {nodeClam: general-a}"),
            'events[0].delete.nodeClam: unknown field (did you mean "nodeClaim"?) (expected one of workload, nodeClaim, node)',
        ),
        (
            ("apiVersion: karpenter.sh/v1\n  kind: NodeClaim", "apiVersion: karpenter.sh/v1beta1\n  kind: NodeClaim"),
            "objects[2].apiVersion: 'karpenter.sh/v1beta1' is not supported (expected joiner.dev/v1 or karpenter.sh/v1)",
        ),
        (
            ("apiVersion: karpenter.sh/v1\n  kind: NodeClaim", "apiVersion: example.com/v1\n  kind: NodeClaim"),
            "objects[2].apiVersion: 'example.com/v1' is not supported (expected joiner.dev/v1 or karpenter.sh/v1)",
        ),
        (
            ("    terminationGracePeriod: 3m\n  status:", "    terminationGracePeriode: 3m\n  status:"),
            'objects[2].spec.terminationGracePeriode: unknown field "terminationGracePeriode" (did you mean "terminationGracePeriod"?)',
        ),
        (("    nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n", ""), "objects[2].spec.nodeClassRef: required"),
        (
            ("  spec:\n    nodePool: general\n", "  spec:\n    nodePool: genral\n"),
            "objects[3].spec.nodePool: no joiner.dev/v1 NodePool named 'genral' among the objects (did you mean \"general\"?) (declared: general)",
        ),
        (
            ("    instanceType: c5.xlarge\n    zone: us-east-1b", "    zone: us-east-1b"),
            "objects[3].status.instanceType: required: the instance type of the instance the simulation runs for it",
        ),
        (
            ("    instanceType: c5.xlarge\n    zone: us-east-1b", "    instanceType: c5.xlarg\n    zone: us-east-1b"),
            "objects[3].status.instanceType: 'c5.xlarg' is not in the us-east-1 catalog (did you mean \"c5.xlarge\"?)",
        ),
        (("    zone: us-east-1b", "    zone: eu-west-1a"), "objects[3].status.zone: 'eu-west-1a' is not a simulated zone"),
        (("    state: initialized", "    state: running"), "objects[3].status.state: 'running' is not one of reserved, launched"),
        (
            ("    nodeName: ip-10-0-1-21.ec2.internal\n\n", "    nodeName: ip-10-0-1-20.ec2.internal\n\n"),
            "objects[3].status.nodeName: node 'ip-10-0-1-20.ec2.internal' is already NodeClaim general-a's",
        ),
        (
            ("  metadata:\n    name: general-b\n", "  metadata:\n    name: general-b\n    deletionTimestamp: '2025-01-06T12:00:00Z'\n"),
            "objects[3].metadata.deletionTimestamp: a NodeClaim the scenario starts with is not being deleted",
        ),
        (
            (
                "  metadata: {name: web-3, namespace: default, labels: {app: web}}\n  spec:\n    nodeName: ip-10-0-1-21.ec2.internal",
                "  metadata: {name: web-3, namespace: default, labels: {app: web}}\n  spec:\n    nodeName: ip-10-0-1-22.ec2.internal",
            ),
            "objects[10].spec.nodeName: no NodeClaim of the scenario runs node 'ip-10-0-1-22.ec2.internal'",
        ),
    ],
)
def test_a_malformed_scenario_is_one_line_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], change: tuple[str, str], message: str) -> None:
    old, new = change
    assert old in _BASE, old
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(_BASE.replace(old, new, 1), encoding="utf-8")
    assert main(["simulate", str(scenario), "--report", str(tmp_path / "r.html")]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"joiner simulate: {scenario}: ") and message in lines[0], lines[0]


def test_the_example_parses_into_two_claims_and_two_deletions() -> None:
    scenario = load_scenario(EXAMPLE)
    assert [(c.name, c.api_version, c.node_name) for c in scenario.node_claims] == [
        ("general-a", "karpenter.sh/v1", NODE_A),
        ("general-b", "joiner.dev/v1", NODE_B),
    ]
    assert [(e.kind, e.object_kind, e.name) for e in scenario.events] == [("delete", "NodeClaim", "general-a"), ("delete", "Node", NODE_B)]
    assert all(o.get("kind") != "NodeClaim" for o in scenario.objects)  # set up as running capacity, not applied as they are
