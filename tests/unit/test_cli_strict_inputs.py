"""CLI inputs are read as kubectl's strict field validation reads them: a misspelt field is
one error naming the object and the field path; fields Kubernetes knows but Joiner does not
read pass. Empty input and Karpenter manifests say what happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from joiner.cli.main import main

ROOT = Path(__file__).resolve().parents[2]

POOL = """
apiVersion: joiner.dev/v1
kind: NodeClass
metadata: {name: default}
spec:
  role: JoinerNodeRole-demo
  subnetSelectorTerms: [{id: subnet-1}]
  securityGroupSelectorTerms: [{id: sg-1}]
---
apiVersion: joiner.dev/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: joiner.dev, kind: NodeClass, name: default}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}
"""

PODS = "".join(
    f"""---
apiVersion: v1
kind: Pod
metadata: {{name: web-{i}, namespace: default}}
spec:
  containers:
  - name: web
    image: nginx
    livenessProbe: {{httpGet: {{path: /, port: 80}}}}
    securityContext: {{runAsNonRoot: true}}
    resources:
      requests: {{cpu: "1"}}
"""
    for i in range(20)
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write(tmp_path: Path, text: str, name: str = "snapshot.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_known_but_unread_pod_fields_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "plan", str(write(tmp_path, POOL + PODS)))
    assert code == 0, err
    assert "c5.large" in out


@pytest.mark.parametrize("command", ["plan", "disrupt"])
def test_a_misspelt_requests_is_an_error_naming_pod_and_path(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    path = write(tmp_path, POOL + PODS.replace("requests:", "request:"))
    code, out, err = run(capsys, command, str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert f"{path}: Pod default/web-0: spec.containers[0].resources.request: " in err
    assert 'unknown field "request" (did you mean "requests"?)' in err


def test_node_clas_ref_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", str(write(tmp_path, POOL.replace("nodeClassRef", "nodeClasRef") + PODS)))
    assert code == 2
    assert 'NodePool default: spec.template.spec.nodeClasRef: unknown field "nodeClasRef" (did you mean "nodeClassRef"?)' in err


@pytest.mark.parametrize(
    ("kind_text", "bad", "path"),
    [
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nspec: {taint: []}\n", "taint", "Node n1: spec.taint"),
        (
            (
                "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds, namespace: kube-system}\nspec:\n  selector: {matchLabels: {a: b}}\n"
                "  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers: [{name: c, image: i, resource: {}}]\n"
            ),
            "resource",
            "DaemonSet kube-system/ds: spec.template.spec.containers[0].resource",
        ),
        (
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p, namespace: default}\nspec: {minAvailible: 1}\n",
            "minAvailible",
            "PodDisruptionBudget default/p: spec.minAvailible",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default, label: {a: b}}\nspec: {containers: [{name: c, image: i}]}\n",
            "label",
            "Pod default/p: metadata.label",
        ),
    ],
)
def test_built_in_kinds_are_checked_at_every_level(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind_text: str, bad: str, path: str) -> None:
    code, _, err = run(capsys, "plan", str(write(tmp_path, POOL + "---\n" + kind_text)))
    assert code == 2
    assert f'{path}: unknown field "{bad}"' in err


def test_kinds_joiner_does_not_model_are_not_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = POOL + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\nwhatever: {x: 1}\n"
    code, _, err = run(capsys, "plan", str(write(tmp_path, text)))
    assert code == 0, err


def test_a_kubectl_list_dump_is_checked_item_by_item(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        POOL
        + "---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, namespace: default}\n  spec: {containers: [{name: c, image: i}], nodeSelecter: {}}\n"
    )
    code, _, err = run(capsys, "plan", str(write(tmp_path, text)))
    assert code == 2
    assert 'Pod default/a: spec.nodeSelecter: unknown field "nodeSelecter" (did you mean "nodeSelector"?)' in err


def test_every_example_passes_strict_validation(capsys: pytest.CaptureFixture[str]) -> None:
    for path in sorted((ROOT / "examples" / "snapshots").glob("*.yaml")) + sorted((ROOT / "manifests" / "examples").glob("*.yaml")):
        code, _, err = run(capsys, "plan", str(path), "-o", "json")
        assert code == 0, (path, err)


def test_a_yaml_error_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "kind: Pod\n  bad: [\n", "cluster.yaml")
    code, _, err = run(capsys, "plan", str(path))
    assert code == 2
    assert err.startswith(f"joiner plan: {path}: line ")
    assert "snapshot" not in err


@pytest.mark.parametrize("command", ["plan", "disrupt"])
@pytest.mark.parametrize("text", ["", "\n", "---\n", "# nothing\n---\n---\n"])
def test_an_empty_snapshot_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, text: str) -> None:
    path = write(tmp_path, text)
    code, out, err = run(capsys, command, str(path))
    assert code == 2 and out == ""
    assert f"{path}: no Kubernetes objects" in err


def test_import_karpenter_of_an_empty_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "")
    code, out, err = run(capsys, "import-karpenter", str(path))
    assert code == 2 and out == ""
    assert "no Kubernetes objects" in err


def test_import_karpenter_without_karpenter_objects_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "import-karpenter", str(write(tmp_path, POOL)))
    assert code == 0
    assert "NodeClass" in out
    assert "holds no karpenter.sh/v1 NodePool or karpenter.k8s.aws/v1 EC2NodeClass" in err


KARPENTER = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]
"""


def test_plan_of_karpenter_manifests_hints_at_import_karpenter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, KARPENTER)
    code, out, err = run(capsys, "plan", str(path))
    assert code == 0
    assert "no new nodes needed" in out
    assert f"joiner import-karpenter {path}" in err
    assert "karpenter.sh/v1/NodePool" in err


def test_import_karpenter_refuses_a_misspelt_karpenter_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, KARPENTER.replace("nodeClassRef", "nodeClasRef"))
    code, out, err = run(capsys, "import-karpenter", str(path))
    assert code == 2 and out == ""
    assert 'NodePool default: spec.template.spec.nodeClasRef: unknown field "nodeClasRef"' in err


def test_simulate_refuses_a_misspelt_object_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = (ROOT / "examples" / "scenarios" / "classic.yaml").read_text(encoding="utf-8")
    assert "nodeClassRef" in scenario
    path = write(tmp_path, scenario.replace("nodeClassRef", "nodeClasRef", 1), "scenario.yaml")
    from testworld.cli import main as world_main

    code = world_main(["simulate", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert 'spec.template.spec.nodeClasRef: unknown field "nodeClasRef"' in err
