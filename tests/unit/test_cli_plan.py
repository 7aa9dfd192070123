"""`joiner plan` through the real entry point: the JSON contract, the table, and malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from joiner.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "examples" / "snapshots" / "classic.yaml"

#: Each node's default root volume (20Gi gp3 at $0.08 per GB-month): planned prices include it.
ROOT_VOLUME_PER_HOUR = 20 * 0.08 / 730

CATALOG = {
    "instanceTypes": [
        {
            "name": "small.x",
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "10"},
            "overhead": {"cpu": "0", "memory": "0"},
            "labels": {"kubernetes.io/arch": "amd64"},
            "offerings": [
                {"zone": "z1", "capacityType": "on-demand", "price": 0.10},
                {"zone": "z1", "capacityType": "spot", "price": 0.04, "available": False},
            ],
        },
        {
            "name": "big.x",
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "40"},
            "overhead": {"cpu": "0", "memory": "0"},
            "labels": {"kubernetes.io/arch": "amd64"},
            "offerings": [{"zone": "z1", "capacityType": "on-demand", "price": 0.50}],
        },
    ]
}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def pod(name: str, cpu: str, *, node: str | None = None, selector: dict | None = None) -> dict:
    spec: dict = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"}, "spec": spec}


def snapshot(tmp_path: Path, *objects: dict) -> Path:
    pool = {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"}}}},
    }
    node_class = {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodeClass",
        "metadata": {"name": "default"},
        "spec": {"subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}], "role": "r"},
    }
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump_all([pool, node_class, *objects]))
    return path


def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(CATALOG))
    return path


def test_classic_example_plans_three_c5_2xlarge_as_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", str(CLASSIC), "-o", "json")
    assert code == 0 and err == ""
    assert out.count("\n") == 1
    plan = json.loads(out)
    assert set(plan) == {"nodeClaims", "existingNodes", "unschedulable", "costPerHour"}
    claims = plan["nodeClaims"]
    assert [c["instanceTypes"][0] for c in claims] == ["c5.2xlarge"] * 3
    assert sorted(len(c["pods"]) for c in claims) == [6, 7, 7]
    assert sorted(p for c in claims for p in c["pods"]) == [f"default/inflate-{i:02d}" for i in range(20)]
    assert all(c["nodePool"] == "default" and c["capacityTypes"] == ["on-demand"] for c in claims)
    assert plan["costPerHour"] == pytest.approx(sum(c["price"] for c in claims)) == pytest.approx(1.02 + 3 * ROOT_VOLUME_PER_HOUR, abs=1e-6)
    assert plan["unschedulable"] == []


def test_catalog_file_existing_nodes_and_unschedulable_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    existing = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1", "kubernetes.io/arch": "amd64"}},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"}},
    }
    objects = [
        existing,
        pod("bound", "1", node="node-a"),
        pod("fits-existing", "500m"),
        pod("a", "1500m"),
        pod("b", "1500m"),
        pod("huge", "64"),
        pod("arm", "100m", selector={"kubernetes.io/arch": "arm64"}),
    ]
    code, out, _ = run(capsys, "plan", str(snapshot(tmp_path, *objects)), "--catalog", str(catalog_file(tmp_path)), "-o", "json")
    assert code == 0
    plan = json.loads(out)
    assert plan["existingNodes"] == [{"name": "node-a", "pods": ["team/fits-existing"]}]
    # Two 1.5-CPU pods: one small.x each (0.20) beats one big.x (0.50); the spot offering is unavailable.
    assert sorted(c["instanceTypes"][0] for c in plan["nodeClaims"]) == ["small.x", "small.x"]
    assert all(c["price"] == pytest.approx(0.10 + ROOT_VOLUME_PER_HOUR, abs=1e-6) for c in plan["nodeClaims"])
    reasons = {u["pod"]: u["reason"] for u in plan["unschedulable"]}
    assert set(reasons) == {"team/huge", "team/arm"}
    assert "general" in reasons["team/huge"] and "cpu" in reasons["team/huge"]
    assert "kubernetes.io/arch" in reasons["team/arm"]


def test_table_output_names_each_claim_and_the_total(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", str(CLASSIC))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NODEPOOL", "INSTANCE"]
    rows = [line.split() for line in lines[1:4]]
    assert [row[1] for row in rows] == ["c5.2xlarge"] * 3
    # Columns line up: every row's price ends where the header's PRICE/H ends.
    price_end = lines[0].index("PRICE/H") + len("PRICE/H")
    assert all(line[:price_end].endswith("0.3422") for line in lines[1:4])  # 0.34 and the root volume
    assert lines[-1] == "new nodes: 3, cost per hour: $1.0266"


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: d}\nspec:\n  containers: [{name: c, resources: {requests: {cpu: lots}}}]\n", "cpu"),
        ("apiVersion: joiner.dev/v1\nkind: NodePool\nmetadata: {name: np}\nspec: {weight: 500}\n", "weight"),
        ("kind: [unclosed\n", "line 2"),
    ],
)
def test_malformed_input_exits_2_with_one_line_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], document: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(document)
    code, out, err = run(capsys, "plan", str(path), "-o", "json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("joiner plan: ")
    assert expected.lower() in err.lower()
    assert "Traceback" not in err


def test_missing_snapshot_and_bad_catalog_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", str(tmp_path / "absent.yaml"))
    assert code == 2 and "cannot read snapshot" in err
    bad_catalog = tmp_path / "catalog.json"
    bad_catalog.write_text(json.dumps({"instanceTypes": [{"name": "x", "capacity": {"cpu": "two"}}]}))
    code, _, err = run(capsys, "plan", str(CLASSIC), "--catalog", str(bad_catalog))
    assert code == 2 and err.startswith("joiner plan: catalog ") and err.count("\n") == 1


def test_a_requirement_naming_a_type_the_catalog_lacks_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects = [
        pod("gpu", "1", selector={"node.kubernetes.io/instance-type": "p9.8xlarge"}),
        pod("either", "1", selector={"karpenter.k8s.aws/instance-family": "c5"}),
        pod("m5", "1", selector={"node.kubernetes.io/instance-type": "m5.large", "kubernetes.io/arch": "arm64"}),
    ]
    code, out, _ = run(capsys, "plan", str(snapshot(tmp_path, *objects)), "-o", "json")
    assert code == 0
    reasons = {u["pod"]: u["reason"] for u in json.loads(out)["unschedulable"]}
    assert reasons["team/gpu"] == 'nodepool "general": instance type p9.8xlarge is not in the us-east-1 catalog'
    # A type the catalog has but other requirements exclude keeps the general reason.
    assert "not in the" not in reasons["team/m5"] and "m5.large" in reasons["team/m5"]
    assert "team/either" not in reasons


def test_region_selects_a_bundled_catalog_and_names_what_is_bundled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(snapshot(tmp_path, pod("a", "1")))
    code, out, _ = run(capsys, "plan", path, "--region", "us-east-1", "-o", "json")
    assert code == 0 and json.loads(out)["nodeClaims"]
    code, _, err = run(capsys, "plan", path, "--region", "eu-west-1")
    assert code == 2
    assert "no bundled catalog for region 'eu-west-1' (bundled: us-east-1)" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "plan", path, "--region", "eu-west-1", "--catalog", str(catalog_file(tmp_path)))
    assert code == 2 and "not both" in err


def test_no_new_nodes_is_told_apart_from_pods_nothing_can_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = (ROOT / "examples/snapshots/classic.yaml").read_text()
    lines = snapshot.splitlines()
    ref = next(i for i, line in enumerate(lines) if "nodeClassRef" in line)
    name = next(i for i in range(ref, ref + 4) if lines[i].strip() == "name: default")
    lines[name] = lines[name].replace("name: default", "name: missing")
    path = tmp_path / "missing.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "no new nodes: 20 pod(s) that no NodePool can host"
    assert out[1] == (
        "unschedulable 20 pods (default/inflate-00, default/inflate-01, default/inflate-02, ...): nodepool \"default\": its NodeClass 'missing' does not exist"
    )  # identical reasons grouped
    empty = tmp_path / "empty.yaml"
    empty.write_text(snapshot.split("---\napiVersion: v1\nkind: Pod")[0])  # the NodeClass and NodePool, no pods
    assert main(["plan", str(empty)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "no new nodes needed"


def test_wide_lists_every_instance_type_and_yaml_is_the_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(ROOT / "examples/snapshots/classic.yaml")
    assert main(["plan", example, "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["plan", example, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json
    assert main(["plan", example, "-o", "wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert wide[0].split()[:3] == ["NODEPOOL", "INSTANCE", "TYPE"] and len(wide) >= 1 + len(as_json["nodeClaims"])


def test_not_in_the_empty_hypervisor_excludes_bare_metal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 12 item 10: ``NotIn [""]`` on the hypervisor label (Karpenter's idiom to keep bare
    metal out) was refused as "must not be empty"; "" is a label value."""
    text = CLASSIC.read_text()
    ref = text.index("      requirements:\n")
    hypervisor = (
        "      requirements:\n      - key: karpenter.k8s.aws/instance-hypervisor\n        operator: NotIn\n        values: ['']\n"
        "      - key: karpenter.k8s.aws/instance-family\n        operator: In\n        values: [c5]\n"
    )
    types = text.index("      - key: node.kubernetes.io/instance-type")
    end = text.index("      - key:", types + 10)
    path = tmp_path / "no-metal.yaml"
    path.write_text(text[:ref] + hypervisor + text[end:])
    assert main(["plan", str(path), "-o", "json"]) == 0
    planned = {t for claim in json.loads(capsys.readouterr().out)["nodeClaims"] for t in claim["instanceTypes"]}
    assert planned and not any(t.endswith(".metal") for t in planned)
    path.write_text((text[:ref] + hypervisor + text[end:]).replace("operator: NotIn\n        values: ['']", "operator: In\n        values: ['']"))
    assert main(["plan", str(path), "-o", "json"]) == 0
    planned = {t for claim in json.loads(capsys.readouterr().out)["nodeClaims"] for t in claim["instanceTypes"]}
    assert planned and all(t.endswith(".metal") for t in planned)


def test_a_node_pool_being_deleted_launches_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 12 item 8: a NodePool with a deletionTimestamp is not used for new launches."""
    text = CLASSIC.read_text()
    pool = text.index("kind: NodePool\nmetadata:\n")
    deleting = text[:pool] + text[pool:].replace("metadata:\n", "metadata:\n  deletionTimestamp: '2025-01-06T09:00:00Z'\n", 1)
    path = tmp_path / "deleting.yaml"
    path.write_text(deleting)
    assert main(["plan", str(path), "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["nodeClaims"] == [] and len(plan["unschedulable"]) == 20
