"""``joiner import-karpenter``: Karpenter v1 manifests -> joiner.dev/v1, validated against our CRDs."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from joiner.cli.import_karpenter import ConversionError, convert_documents
from joiner.cli.main import main
from joiner.domain.snapshot import parse_node_class, parse_node_pool

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "manifests" / "crds"

# A realistic Karpenter v1 install: the getting-started NodePool and EC2NodeClass as
# `kubectl get -o yaml` returns them (status, managed metadata), a GPU pool using
# Karpenter-only labels, a Windows node class, and an unrelated ConfigMap.
KARPENTER_MANIFEST = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
  annotations:
    karpenter.sh/nodepool-hash: "12393960163388511505"
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    team.example.com/owner: platform
  uid: 4a6a9d1c-7c2f-4c8e-9f0e-2a1b3c4d5e6f
  resourceVersion: "123456"
  generation: 3
  creationTimestamp: "2025-01-01T00:00:00Z"
spec:
  template:
    metadata:
      labels:
        team: web
        karpenter.sh/nodepool: default
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64", "arm64"]
        - key: kubernetes.io/os
          operator: In
          values: ["linux"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["spot", "on-demand", "reserved"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
          minValues: 2
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: ["2"]
        - key: karpenter.k8s.aws/instance-local-nvme
          operator: Gt
          values: ["100"]
        - key: karpenter.k8s.aws/instance-capability-flex
          operator: In
          values: ["true"]
      taints:
        - key: example.com/special
          value: "true"
          effect: NoSchedule
          timeAdded: "2025-01-01T00:00:00Z"
      startupTaints:
        - key: node.cilium.io/agent-not-ready
          effect: NoExecute
      expireAfter: 720h
      terminationGracePeriod: 48h
  limits:
    cpu: 1000
    memory: 1000Gi
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
    budgets:
      - nodes: "10%"
      - nodes: "0"
        schedule: "0 9 * * mon-fri"
        duration: 8h
        reasons: ["Underutilized", "Drifted"]
  weight: 50
status:
  resources:
    cpu: "12"
    nodes: "3"
  conditions:
    - type: Ready
      status: "True"
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  kubelet:
    maxPods: 110
    podsPerCore: 2
    systemReserved:
      cpu: 100m
      memory: 100Mi
    kubeReserved:
      cpu: 200m
    evictionHard:
      memory.available: 5%
      nodefs.available: 10%
    evictionSoft:
      memory.available: 10%
    evictionSoftGracePeriod:
      memory.available: 1m
    imageGCHighThresholdPercent: 85
  role: KarpenterNodeRole-my-cluster
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
    - id: subnet-0123456789abcdef0
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
    - name: my-cluster-node
  capacityReservationSelectorTerms:
    - tags:
        team: web
  associatePublicIPAddress: false
  detailedMonitoring: true
  instanceStorePolicy: RAID0
  metadataOptions:
    httpEndpoint: enabled
    httpProtocolIPv6: disabled
    httpPutResponseHopLimit: 1
    httpTokens: required
  blockDeviceMappings:
    - deviceName: /dev/xvda
      rootVolume: true
      ebs:
        volumeSize: 100Gi
        volumeType: gp3
        iops: 3000
        throughput: 125
        encrypted: true
        deleteOnTermination: true
        volumeInitializationRate: 100
  tags:
    team: web
    kubernetes.io/cluster/my-cluster: owned
  userData: |
    echo "hello"
status:
  amis:
    - id: ami-0123456789abcdef0
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: bottlerocket
      requirements:
        - key: karpenter.k8s.aws/instance-gpu-count
          operator: Exists
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["reserved"]
        - key: kubernetes.io/hostname
          operator: NotIn
          values: ["bad-node"]
      taints:
        - key: nvidia.com/gpu
          effect: NoSchedule
  limits:
    nvidia.com/gpu: "8"
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: bottlerocket
spec:
  role: KarpenterNodeRole-my-cluster
  amiSelectorTerms:
    - alias: bottlerocket@latest
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: my-cluster}
  securityGroupSelectorTerms:
    - id: sg-0123456789abcdef0
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: unrelated
  namespace: default
data:
  key: value
"""


def crd_schema(file_name: str) -> dict:
    crd = yaml.safe_load((CRDS / file_name).read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="module")
def validators() -> dict[str, jsonschema.Draft7Validator]:
    return {
        "NodePool": jsonschema.Draft7Validator(crd_schema("nodepools.joiner.dev.yaml")),
        "NodeClass": jsonschema.Draft7Validator(crd_schema("nodeclasses.joiner.dev.yaml")),
    }


@pytest.fixture(scope="module")
def conversion():
    return convert_documents(list(yaml.safe_load_all(KARPENTER_MANIFEST)))


def by_kind_and_name(documents):
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in documents}


def test_every_converted_document_validates_against_its_crd(conversion, validators):
    converted = [doc for doc in conversion.documents if doc.get("apiVersion") == "joiner.dev/v1"]
    assert sorted((doc["kind"], doc["metadata"]["name"]) for doc in converted) == [
        ("NodeClass", "bottlerocket"),
        ("NodeClass", "default"),
        ("NodePool", "default"),
        ("NodePool", "gpu"),
    ]
    for doc in converted:
        errors = sorted(validators[doc["kind"]].iter_errors(doc), key=lambda e: list(e.path))
        assert not errors, f"{doc['kind']} {doc['metadata']['name']}: {[f'{list(e.path)}: {e.message}' for e in errors]}"


def test_converted_objects_parse_with_joiners_own_parser(conversion):
    docs = by_kind_and_name(conversion.documents)
    pool = parse_node_pool(docs[("NodePool", "default")])
    assert pool.node_class == "default" and pool.weight == 50
    node_class = parse_node_class(docs[("NodeClass", "default")])
    assert node_class.kubelet.max_pods == 110 and node_class.role == "KarpenterNodeRole-my-cluster"


def test_node_pool_requirement_keys_are_mapped_and_unsupported_ones_dropped(conversion):
    pool = by_kind_and_name(conversion.documents)[("NodePool", "default")]
    spec = pool["spec"]["template"]["spec"]
    assert spec["nodeClassRef"] == {"group": "joiner.dev", "kind": "NodeClass", "name": "default"}
    assert spec["requirements"] == [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["spot", "on-demand", "reserved"]},
        {"key": "joiner.dev/instance-category", "operator": "In", "values": ["c", "m", "r"], "minValues": 2},
        {"key": "joiner.dev/instance-generation", "operator": "Gt", "values": ["2"]},
        {"key": "joiner.dev/instance-local-nvme", "operator": "Gt", "values": ["100"]},
        {"key": "joiner.dev/instance-capability-flex", "operator": "In", "values": ["true"]},
    ]
    assert spec["taints"] == [{"key": "example.com/special", "value": "true", "effect": "NoSchedule"}]
    assert spec["startupTaints"] == [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}]
    assert (spec["expireAfter"], spec["terminationGracePeriod"]) == ("720h", "48h")
    assert pool["spec"]["limits"] == {"cpu": 1000, "memory": "1000Gi"}
    assert pool["spec"]["weight"] == 50
    assert pool["spec"]["disruption"]["budgets"][1] == {
        "nodes": "0",
        "schedule": "0 9 * * mon-fri",
        "duration": "8h",
        "reasons": ["Underutilized", "Drifted"],
    }
    assert pool["spec"]["template"]["metadata"] == {"labels": {"team": "web"}}
    assert pool["metadata"] == {"name": "default", "annotations": {"team.example.com/owner": "platform"}}
    assert "status" not in pool


def test_node_class_keeps_what_joiner_supports(conversion):
    node_class = by_kind_and_name(conversion.documents)[("NodeClass", "default")]
    spec = node_class["spec"]
    assert spec["amiFamily"] == "AL2023" and spec["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert spec["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "my-cluster"}}, {"id": "subnet-0123456789abcdef0"}]
    assert spec["securityGroupSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": "my-cluster"}}, {"name": "my-cluster-node"}]
    assert spec["kubelet"] == {
        "maxPods": 110,
        "podsPerCore": 2,
        "systemReserved": {"cpu": "100m", "memory": "100Mi"},
        "kubeReserved": {"cpu": "200m"},
        "evictionHard": {"memory.available": "5%", "nodefs.available": "10%"},
    }
    assert spec["blockDeviceMappings"][0]["ebs"] == {
        "volumeSize": "100Gi",
        "volumeType": "gp3",
        "iops": 3000,
        "throughput": 125,
        "encrypted": True,
        "deleteOnTermination": True,
    }
    assert spec["tags"] == {"team": "web"}
    assert spec["userData"] == 'echo "hello"\n'
    assert spec["instanceStorePolicy"] == "RAID0" and parse_node_class(node_class).instance_store_policy == "RAID0"
    bottlerocket = by_kind_and_name(conversion.documents)[("NodeClass", "bottlerocket")]
    # Joiner launches AL2023 only: the alias-implied Bottlerocket becomes AL2023, and says so
    assert bottlerocket["spec"]["amiFamily"] == "AL2023" and bottlerocket["spec"]["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert parse_node_class(bottlerocket).ami_family == "AL2023"
    assert any("EC2NodeClass bottlerocket: spec.amiFamily: Bottlerocket replaced by AL2023" in w for w in conversion.warnings)
    assert any("spec.amiSelectorTerms[0].alias: bottlerocket@latest replaced by al2023@latest" in w for w in conversion.warnings)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-0123456789abcdef0"}]}, "spec.amiFamily 'Custom'"),
        ({"amiFamily": "Bottlerocket", "amiSelectorTerms": [{"tags": {"os": "br"}}]}, "select Bottlerocket AMIs by id, name or tags"),
        ({"amiFamily": "Windows2022", "amiSelectorTerms": [{"alias": "windows2022@latest"}]}, "alias 'windows2022@latest'"),
        ({"amiSelectorTerms": [{"ssmParameter": "/my/ami"}]}, "spec.amiSelectorTerms[0].ssmParameter '/my/ami'"),
    ],
)
def test_node_classes_joiner_cannot_launch_are_refused(spec, problem):
    """A NodeClass passed through unchanged would leave the NodePools converted to use it
    pointing at a NodeClass that does not exist, or launching another AMI: refused (issue 13)."""
    document = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "x"},
        "spec": {"role": "r", "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}], **spec},
    }
    with pytest.raises(ConversionError) as error:
        convert_documents([document])
    assert str(error.value).startswith("EC2NodeClass x: cannot be converted: ") and problem in str(error.value)


@pytest.mark.parametrize("alias", ["al2023@latest", "bottlerocket@latest", "al2@v20240807"])
@pytest.mark.parametrize("user_data", ["#!/bin/bash\n/usr/bin/nodeadm init --config-source file:///etc/eks/nodeadm.yaml\n", None])
def test_custom_family_with_an_alias_is_refused_for_what_it_means(alias, user_data):
    """Karpenter's amiFamily Custom with an alias: the alias only finds the AMI, and
    spec.userData is the node's whole bootstrap (Karpenter merges nothing into it; without
    it the node gets none). Joiner always bootstraps its nodes itself and merges userData into
    that, so the class cannot be converted faithfully: refused with that reason, never read as
    the alias's family (a Bottlerocket TOML warning, or AL2023 with the script run on top)."""
    spec = {"amiFamily": "Custom", "amiSelectorTerms": [{"alias": alias}]}
    if user_data is not None:
        spec["userData"] = user_data
    document = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "x"},
        "spec": {"role": "r", "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}], **spec},
    }
    with pytest.raises(ConversionError) as error:
        convert_documents([document])
    message = str(error.value)
    assert message.startswith("EC2NodeClass x: cannot be converted: spec.amiFamily 'Custom'"), message
    assert alias in message and "whole bootstrap" in message and "Bottlerocket TOML" not in message, message


def test_bottlerocket_user_data_is_dropped_al2_user_data_kept():
    def convert(family: str) -> tuple[dict, list[str]]:
        document = {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "x"},
            "spec": {
                "amiFamily": family,
                "role": "r",
                "userData": "[settings]\n",
                "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
            },
        }
        conversion = convert_documents([document])
        return conversion.documents[0]["spec"], conversion.warnings

    spec, warnings = convert("Bottlerocket")
    assert spec["amiFamily"] == "AL2023" and "userData" not in spec
    assert any("spec.userData: dropped" in w for w in warnings)
    spec, _ = convert("AL2")
    assert spec["amiFamily"] == "AL2023" and spec["userData"] == "[settings]\n"


def test_every_dropped_field_is_warned_about_with_object_and_path(conversion):
    text = "\n".join(conversion.warnings)
    for expected in (
        "NodePool default: spec.template.metadata.labels.karpenter.sh/nodepool: dropped",
        "NodePool gpu: spec.template.spec.requirements[2]: requirement on kubernetes.io/hostname dropped",
        "EC2NodeClass default: spec.kubelet.evictionSoft: dropped",
        "EC2NodeClass default: spec.kubelet.evictionSoftGracePeriod: dropped",
        "EC2NodeClass default: spec.kubelet.imageGCHighThresholdPercent: dropped",
        "EC2NodeClass default: spec.associatePublicIPAddress: dropped",
        "EC2NodeClass default: spec.detailedMonitoring: dropped",
        "EC2NodeClass default: spec.blockDeviceMappings[0].ebs.volumeInitializationRate: dropped",
        "EC2NodeClass default: spec.tags.kubernetes.io/cluster/my-cluster: dropped",
        "EC2NodeClass default: spec.role: KarpenterNodeRole-my-cluster",
    ):
        assert expected in text, f"missing warning {expected!r} in:\n{text}"
    # Everything that was kept is not warned about.
    assert "kubelet.maxPods" not in text and "metadataOptions" not in text


def test_other_kinds_pass_through_unchanged(conversion):
    originals = by_kind_and_name(yaml.safe_load_all(KARPENTER_MANIFEST))
    docs = by_kind_and_name(conversion.documents)
    assert docs[("ConfigMap", "unrelated")] == originals[("ConfigMap", "unrelated")]
    assert [doc["kind"] for doc in conversion.documents] == ["NodePool", "NodeClass", "NodePool", "NodeClass", "ConfigMap"]


def test_kind_list_items_are_converted():
    items = list(yaml.safe_load_all(KARPENTER_MANIFEST))[:2]
    result = convert_documents([{"apiVersion": "v1", "kind": "List", "items": items}])
    assert [item["kind"] for item in result.documents[0]["items"]] == ["NodePool", "NodeClass"]


def test_cli_writes_output_file_and_warnings_to_stderr(tmp_path, capsys):
    source = tmp_path / "karpenter.yaml"
    source.write_text(KARPENTER_MANIFEST)
    target = tmp_path / "joiner.yaml"
    status = _run_cli(["import-karpenter", str(source), "-o", str(target)])
    captured = capsys.readouterr()
    assert status == 0 and captured.out == ""
    assert "joiner import-karpenter: warning: EC2NodeClass default: spec.kubelet.evictionSoft: dropped" in captured.err
    written = list(yaml.safe_load_all(target.read_text()))
    assert [doc["apiVersion"] for doc in written][:4] == ["joiner.dev/v1"] * 4


def test_cli_refuses_to_overwrite_an_output_file_without_force(tmp_path, capsys):
    source = tmp_path / "karpenter.yaml"
    source.write_text(KARPENTER_MANIFEST)
    target = tmp_path / "joiner.yaml"
    target.write_text("hand-edited: true\n")
    assert _run_cli(["import-karpenter", str(source), "-o", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists; not overwriting it without --force" in err[0]
    assert target.read_text() == "hand-edited: true\n"
    assert _run_cli(["import-karpenter", str(source), "-o", str(target), "--force"]) == 0
    assert list(yaml.safe_load_all(target.read_text()))[0]["apiVersion"] == "joiner.dev/v1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["joiner.yaml", "karpenter.yaml"]  # no temporary left


def test_cli_prints_to_stdout_without_output(tmp_path, capsys):
    source = tmp_path / "karpenter.yaml"
    source.write_text(KARPENTER_MANIFEST)
    assert _run_cli(["import-karpenter", str(source)]) == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out))[0]["kind"] == "NodePool"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: NodePool\n  bad: [", "invalid YAML at line"),
        ("- just\n- a list\n", "document 1: expected a Kubernetes object"),
        ("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\n", "NodePool x: spec: is required"),
        (
            (
                "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n"
                "      nodeClassRef: {name: d}\n      requirements: {key: a}\n"
            ),
            "NodePool x: spec.template.spec.requirements: expected a list, got dict",
        ),
        ("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {}\nspec: {}\n", "NodePool has no metadata.name"),
        (
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  subnetSelectorTerms: []\n",
            "EC2NodeClass c: spec.subnetSelectorTerms: is required",
        ),
    ],
)
def test_malformed_input_exits_2_with_one_line(tmp_path, capsys, text, message):
    source = tmp_path / "bad.yaml"
    source.write_text(text)
    assert _run_cli(["import-karpenter", str(source)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("joiner import-karpenter: ") and message in lines[0], captured.err
    assert captured.out == ""


def test_missing_file_is_a_usage_error(tmp_path, capsys):
    assert _run_cli(["import-karpenter", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_conversion_error_names_the_document():
    with pytest.raises(ConversionError, match="document 2"):
        convert_documents([{"kind": "ConfigMap"}, "scalar"])


def _run_cli(argv: list[str]) -> int:
    """Run through joiner's real entry point."""
    return main(argv)


def test_output_has_no_yaml_anchors_even_for_shared_values(tmp_path, capsys):
    # A passed-through document whose input used an anchor: the loaded objects are shared.
    source = tmp_path / "shared.yaml"
    source.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: &l {team: a}, annotations: *l}\n")
    assert _run_cli(["import-karpenter", str(source)]) == 0
    out = capsys.readouterr().out
    assert "&" not in out and "*" not in out
    assert yaml.safe_load(out)["metadata"]["annotations"] == {"team": "a"}


NODE_CLASS_V1 = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {"role": "r", "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]},
}


def _node_pool(ref: dict, requirements: list[dict]) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {"template": {"spec": {"nodeClassRef": ref, "requirements": requirements}}},
    }


def test_v1beta1_input_is_refused_not_passed_through():
    beta = {"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": "old"}, "spec": {}}
    with pytest.raises(ConversionError, match="NodePool karpenter.sh/v1beta1 is not converted .*migrate to Karpenter v1 first"):
        convert_documents([NODE_CLASS_V1, beta])


def test_an_eks_auto_mode_node_pool_is_refused_and_its_keys_converted_elsewhere():
    auto = _node_pool(
        {"group": "eks.amazonaws.com", "kind": "NodeClass", "name": "default"},
        [{"key": "eks.amazonaws.com/instance-category", "operator": "In", "values": ["c", "m", "r"]}],
    )
    with pytest.raises(ConversionError, match="EKS Auto Mode NodePool"):
        convert_documents([auto])
    keyed = _node_pool(
        {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        [
            {"key": "eks.amazonaws.com/instance-category", "operator": "In", "values": ["c", "m", "r"]},
            {"key": "eks.amazonaws.com/instance-generation", "operator": "Gt", "values": ["2"]},
        ],
    )
    conversion = convert_documents([NODE_CLASS_V1, keyed])
    pool = next(d for d in conversion.documents if d["kind"] == "NodePool")
    assert [r["key"] for r in pool["spec"]["template"]["spec"]["requirements"]] == ["joiner.dev/instance-category", "joiner.dev/instance-generation"]
    assert any("eks.amazonaws.com/instance-category (EKS Auto Mode) read as joiner.dev/instance-category" in w for w in conversion.warnings)


def test_a_windows_node_pool_is_refused():
    windows = _node_pool(
        {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]
    )
    with pytest.raises(ConversionError, match="asks for windows nodes; Joiner launches Linux"):
        convert_documents([NODE_CLASS_V1, windows])


def test_output_joiner_would_reject_is_refused():
    both = {**NODE_CLASS_V1, "spec": {**NODE_CLASS_V1["spec"], "instanceProfile": "profile"}}
    with pytest.raises(ConversionError, match="EC2NodeClass default: Joiner would reject the converted object: "):
        convert_documents([both])


def test_capacity_reservations_and_the_reserved_capacity_type_are_kept():
    documents = list(yaml.safe_load_all(KARPENTER_MANIFEST))
    for document in documents:
        if document and document.get("kind") == "EC2NodeClass":
            document["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"team": "ml"}, "ownerID": "111122223333"}, {"id": "cr-0123abcd"}]
        if document and document.get("kind") == "NodePool":
            document["spec"]["template"]["spec"]["requirements"] = [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]}
            ]
    result = convert_documents([d for d in documents if d])
    node_class = next(d for d in result.documents if d.get("kind") == "NodeClass")
    assert node_class["spec"]["capacityReservationSelectorTerms"] == [{"tags": {"team": "ml"}, "ownerID": "111122223333"}, {"id": "cr-0123abcd"}]
    pool = next(d for d in result.documents if d.get("kind") == "NodePool")
    assert pool["spec"]["template"]["spec"]["requirements"] == [{"key": "joiner.dev/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]}]
    assert not any("capacityReservation" in w or "reserved" in w for w in result.warnings), result.warnings


def test_a_static_node_pool_keeps_its_replicas():
    static = _node_pool({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, [])
    static["spec"].update(replicas=3, limits={"nodes": 5})
    result = convert_documents([NODE_CLASS_V1, static])
    pool = next(d for d in result.documents if d.get("kind") == "NodePool")
    assert pool["spec"]["replicas"] == 3 and pool["spec"]["limits"] == {"nodes": 5}
    assert parse_node_pool(pool).replicas == 3
    assert not any("replicas" in w for w in result.warnings), result.warnings


def test_a_static_node_pool_with_a_weight_is_refused_as_joiner_would_reject_it():
    static = _node_pool({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, [])
    static["spec"].update(replicas=3, weight=10)
    with pytest.raises(ConversionError, match="NodePool p: Joiner would reject the converted object: .*weight"):
        convert_documents([static])


# ---------------------------------------------------------------- NodeOverlay

KARPENTER_OVERLAY = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "savings-plan"},
    "spec": {
        "requirements": [
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
        ],
        "priceAdjustment": "-20%",
        "weight": 10,
    },
}


def test_node_overlay_is_converted_with_joiner_keys_and_validates_against_its_crd():
    from joiner.domain.snapshot import parse_node_overlay

    conversion = convert_documents([KARPENTER_OVERLAY])
    (converted,) = conversion.documents
    assert converted["apiVersion"] == "joiner.dev/v1alpha1" and converted["kind"] == "NodeOverlay"
    assert [r["key"] for r in converted["spec"]["requirements"]] == ["joiner.dev/instance-family", "joiner.dev/capacity-type", "joiner.dev/nodepool"]
    assert converted["spec"]["priceAdjustment"] == "-20%" and converted["spec"]["weight"] == 10 and conversion.warnings == []
    schema = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests" / "crds" / "nodeoverlays.joiner.dev.yaml").read_text())
    validator = jsonschema.Draft7Validator(schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert list(validator.iter_errors(converted)) == []
    assert parse_node_overlay(converted).weight == 10


def test_node_overlay_selecting_on_a_label_joiner_does_not_set_is_refused_not_widened():
    overlay = {
        **KARPENTER_OVERLAY,
        "spec": {"requirements": [{"key": "karpenter.k8s.aws/ec2nodeclass", "operator": "In", "values": ["default"]}], "price": "0.1"},
    }
    with pytest.raises(ConversionError, match="karpenter.k8s.aws/ec2nodeclass"):
        convert_documents([overlay])
