"""End to end: workloads migrated from Karpenter select nodes with ``karpenter.sh/*`` and
``karpenter.k8s.aws/*`` keys. The simulated kube-scheduler matches selectors literally (as the
real one does), so these pods bind only if the Nodes Joiner launches carry those very keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from joiner.domain import labels as wk
from joiner.domain.catalog import load_bundled_catalog
from testworld.scenario import load_scenario
from testworld.simulator import Simulation, SimulationResult

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

NODE_CLASS = {
    "apiVersion": "joiner.dev/v1",
    "kind": "NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": "demo"}}],
        "role": "JoinerNodeRole-demo",
    },
}


def _pool(name: str, types: list[str], capacity_types: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
                    ],
                }
            },
            "limits": {"cpu": "64"},
        },
    }


SCENARIO = {
    "name": "karpenter-labels",
    "description": "Pods selecting Karpenter label keys bind to the nodes Joiner launches for them.",
    "cluster": "demo",
    "duration": "5m",
    "bootDelay": "60s",
    "objects": [NODE_CLASS, _pool("general", ["c5.large", "c5.xlarge", "m5.large"], ["spot", "on-demand"]), _pool("gpu", ["g4dn.xlarge"], ["on-demand"])],
    "workloads": [
        {"name": "spot-c5", "replicas": 0, "cpu": "500m", "nodeSelector": {"karpenter.sh/capacity-type": "spot", "karpenter.k8s.aws/instance-family": "c5"}},
        {"name": "t4", "replicas": 0, "cpu": "500m", "nodeSelector": {"karpenter.k8s.aws/instance-gpu-name": "t4", "karpenter.sh/nodepool": "gpu"}},
    ],
    "events": [
        {"at": "30s", "scale": {"workload": "spot-c5", "replicas": 3}},
        {"at": "30s", "scale": {"workload": "t4", "replicas": 1}},
    ],
}


class _Observed(Simulation):
    """Keeps the Nodes as they are at the end (the emulator is gone after the run)."""

    nodes: list[dict[str, Any]]

    def _teardown(self) -> None:
        self.nodes = self.emulator.list("Node")
        super()._teardown()


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimulationResult, list[dict[str, Any]]]]:
    path = tmp_path_factory.mktemp("scenario") / "karpenter-labels.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    simulation = _Observed(load_scenario(path), functions_dir=ROOT / "functions")
    result = simulation.run()
    yield result, simulation.nodes


def test_pods_selecting_karpenter_keys_bind_to_the_nodes_launched_for_them(observed: tuple[SimulationResult, list[dict[str, Any]]]) -> None:
    result, nodes = observed
    assert not result.handler_errors
    pods = {p.workload: [] for p in result.pods}  # type: dict[str, list[Any]]
    for pod in result.pods:
        pods[pod.workload].append(pod)
    assert len(pods["spot-c5"]) == 3 and len(pods["t4"]) == 1
    assert all(p.bound is not None for p in result.pods), [(p.key, p.node) for p in result.pods if p.bound is None]
    by_name = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    for pod in pods["spot-c5"]:
        labels = by_name[pod.node]
        assert labels[wk.CAPACITY_TYPE] == "spot" and labels[wk.INSTANCE_FAMILY] == "c5"
    [gpu] = pods["t4"]
    assert by_name[gpu.node][wk.INSTANCE_TYPE] == "g4dn.xlarge"


def test_every_alias_the_planner_accepts_is_on_every_node_with_its_joiner_keys_value(
    observed: tuple[SimulationResult, list[dict[str, Any]]],
) -> None:
    result, nodes = observed
    launched = {i.private_dns: i for i in result.instances if i.managed}
    checked = [n for n in nodes if n["metadata"]["name"] in launched]
    assert {launched[n["metadata"]["name"]].node_pool for n in checked} == {"general", "gpu"}
    for node in checked:
        labels = node["metadata"]["labels"]
        instance = launched[node["metadata"]["name"]]
        assert labels[wk.INSTANCE_TYPE] == instance.instance_type and labels[wk.ZONE] == instance.zone
        assert labels[wk.CAPACITY_TYPE] == instance.capacity_type and labels[wk.NODEPOOL] == instance.node_pool
        type_labels = load_bundled_catalog("us-east-1").instance_type(instance.instance_type).requirements.labels()
        for alias, key in wk.KARPENTER_ALIASES.items():
            # tenancy is the launch's, not the type's (every type offers default and dedicated)
            if (key.startswith("joiner.dev/instance-") and key not in type_labels and key != wk.INSTANCE_TENANCY) or (
                key == wk.CAPACITY_RESERVATION_ID and instance.capacity_type != wk.CAPACITY_TYPE_RESERVED
            ):
                assert alias not in labels and key not in labels  # an attribute the node lacks: neither spelling
                continue
            assert key in labels, f"{node['metadata']['name']} lacks {key}"
            assert labels.get(alias) == labels[key], f"{node['metadata']['name']}: {alias}={labels.get(alias)!r}, {key}={labels[key]!r}"
