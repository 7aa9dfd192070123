"""Every scenario in examples/scenarios/ on a real control plane: Joiner's handlers as their own
identities against kube-apiserver, the simulated kubelets registering their Nodes as
``system:node:<name>``, and kube-scheduler (not the simulator's) binding every pod. Each run
gets a fresh etcd, API server and scheduler (cluster-scoped NodePools and Nodes of one scenario
must not be seen by the next). The expectations are the scenarios' own, unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realkube.conftest import SESSION, RealKube
from tests.realkube.test_tier import pinned
from testworld.real_kube import ROOT
from testworld.scenario import load_scenario
from testworld.simulator import Simulation, SimulationResult

pytestmark = [pytest.mark.real_kube, pytest.mark.slow]

SCENARIOS = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))


def _run(path: Path, work: Path) -> SimulationResult:
    """In responsive mode, as the stack deploys by default (``scannerMode`` in cdk.json): the
    watcher wakes the scanner when pods become pending and when a Node Joiner launched registers."""
    result = Simulation(load_scenario(path), functions_dir=ROOT / "functions", kube="real", kube_dir=work, scanner_mode="responsive").run()
    SESSION.requests.extend(result.kube_requests)  # into the session's RBAC report
    return result


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_on_the_real_control_plane(path: Path, real_kube: RealKube, tmp_path: Path) -> None:
    result = _run(path, tmp_path)
    assert result.kube == "real" and result.kube_version == pinned("k8s.io/kubernetes")
    forbidden = sorted({f"{r.user}: {r.verb} {r.api_group or 'core'}/{r.rbac_resource} {r.uri}" for r in result.kube_requests if r.code == 403})
    assert not forbidden, "RBAC refused Joiner's requests:\n" + "\n".join(forbidden)
    assert not result.handler_errors, result.handler_errors
    assert not result.scheduler_disagreements, result.scheduler_disagreements
    failed = [c for c in result.checks if not c.passed]
    timeline = "\n".join(f"{e.at} {e.source}: {e.event} -> {e.action}" for e in result.entries)
    assert failed == [], "\n".join([f"{c.description}: {c.detail}" for c in failed] + [timeline])
    # kube-scheduler bound the pods; the simulator's own scheduler never ran
    sources = {entry.source for entry in result.entries}
    assert "kube-scheduler" in sources and "scheduler" not in sources
    assert all(pod.bound is not None or pod.gone is not None for pod in result.pods if pod.node is not None)
    assert {r.user for r in result.kube_requests} >= {"joiner:scanner", "joiner:disruption", "joiner:gc"}
    if path.stem == "capacity-errors":
        # wave 2's node registers while wave 3 is pending too: the scanner, woken by the Node's
        # registration, nominates wave 2's pods to it before it is Ready (without, some of them
        # waited for wave 3's node: pendingMax 121 s)
        nominations = [r for r in result.kube_requests if r.user == "joiner:scanner" and r.rbac_resource == "pods/status" and r.verb == "patch"]
        assert len(nominations) >= 7, timeline


SHORT = """
name: short
cluster: demo
duration: 2m30s
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
- {name: web, namespace: shop, replicas: 3, cpu: 500m}
expect:
- nodes: {m5.large: 1}
- pendingPods: 0
"""


def test_joiner_simulate_kube_real_runs_on_the_real_components(real_kube: RealKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI path of ``joiner demo --kube real`` (a short scenario, in a namespace of its own)."""
    from testworld.cli import main

    scenario = tmp_path / "short.yaml"
    scenario.write_text(SHORT)
    report = tmp_path / "report.html"
    assert main(["simulate", str(scenario), "--kube", "real", "--report", str(report)]) == 0
    out, _ = capsys.readouterr()
    assert f"kube-apiserver {real_kube.version} with etcd and kube-scheduler" in out
    assert "kube-scheduler" in out and "3 pods bound" in out and "PASS  nodes {m5.large: 1}" in out
    assert report.exists()
