"""The emulator admits NodePools and NodeClasses as a real API server would (issue 11 §5): the
CRDs' OpenAPI schemas (types, enums, patterns, bounds, required fields, defaults, pruning) and
their CEL rules, answered 422 Invalid with the field path. Through the official client over HTTP."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from testworld.kube_emulator import KubeEmulator

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION = "joiner.dev", "v1"

NODE_CLASS: dict[str, Any] = {
    "apiVersion": "joiner.dev/v1",
    "kind": "NodeClass",
    "metadata": {"name": "default"},
    "spec": {
        "role": "JoinerNodeRole-demo",
        "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": "demo"}}],
    },
}
NODE_POOL: dict[str, Any] = {
    "apiVersion": "joiner.dev/v1",
    "kind": "NodePool",
    "metadata": {"name": "default"},
    "spec": {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            }
        }
    },
}


@pytest.fixture
def api() -> Iterator[k8s.CustomObjectsApi]:
    with KubeEmulator() as emulator:
        yield k8s.CustomObjectsApi(k8s.ApiClient(k8s.Configuration(host=emulator.url)))


def create(api: k8s.CustomObjectsApi, obj: dict[str, Any]) -> dict[str, Any]:
    plural = "nodeclasses" if obj["kind"] == "NodeClass" else "nodepools"
    return dict(api.create_cluster_custom_object(GROUP, VERSION, plural, obj))  # type: ignore[call-overload]


def refused(api: k8s.CustomObjectsApi, obj: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    with pytest.raises(ApiException) as error:
        create(api, obj)
    assert error.value.status == 422
    body = json.loads(error.value.body)
    assert body["reason"] == "Invalid"
    return body["message"], body["details"]["causes"]


def edited(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if isinstance(node, list):
        node[int(last)] = value
    elif value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return obj


def test_every_example_manifest_is_admitted(api: k8s.CustomObjectsApi) -> None:
    admitted = 0
    for path in sorted((ROOT / "manifests" / "examples").glob("*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and obj.get("apiVersion") == "joiner.dev/v1":
                create(api, obj)
                admitted += 1
    assert admitted >= 4


def test_defaults_are_applied_and_unknown_fields_pruned(api: k8s.CustomObjectsApi) -> None:
    stored = create(api, edited(NODE_CLASS, "spec.notAField", "x"))
    assert stored["spec"]["amiFamily"] == "AL2023" and "notAField" not in stored["spec"]


@pytest.mark.parametrize(
    ("path", "value", "field", "message"),
    [
        ("spec.amiFamily", "Bottlerocket", "spec.amiFamily", 'Unsupported value: "Bottlerocket": supported values: "AL2023"'),
        ("spec.instanceProfile", "Profile", "spec", "role"),  # both (neither: the deployment's node role)
        ("spec.subnetSelectorTerms", [], "spec.subnetSelectorTerms", "should have at least 1 items"),
        ("spec.subnetSelectorTerms", [{"id": "subnet-0123456789abcdef0", "tags": {"a": "b"}}], "spec.subnetSelectorTerms[0]", ""),
        ("spec.subnetSelectorTerms", [{}], "spec.subnetSelectorTerms[0]", "expected at least one of: id, tags"),
    ],
)
def test_node_class_rules(api: k8s.CustomObjectsApi, path: str, value: Any, field: str, message: str) -> None:
    text, causes = refused(api, edited(NODE_CLASS, path, value))
    assert any(c["field"] == field and message in c["message"] for c in causes), causes
    assert text.startswith('NodeClass "default" is invalid: ')


@pytest.mark.parametrize(
    ("requirement", "message"),
    [
        ({"key": "karpenter.sh/capacity-type", "operator": "Gt", "values": ["a"]}, ""),
        ({"key": "joiner.dev/instance-cpu", "operator": "Gt", "values": ["1", "2"]}, ""),
        ({"key": "joiner.dev/instance-cpu", "operator": "Lt", "values": ["-1"]}, "single non-negative integer value"),
        ({"key": "kubernetes.io/arch", "operator": "Sometimes", "values": ["amd64"]}, 'Unsupported value: "Sometimes"'),
        ({"key": "kubernetes.io/arch", "operator": "In", "values": []}, ""),
        ({"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}, ""),
    ],
)
def test_node_pool_requirement_rules(api: k8s.CustomObjectsApi, requirement: dict[str, Any], message: str) -> None:
    _, causes = refused(api, edited(NODE_POOL, "spec.template.spec.requirements", [requirement]))
    assert causes and all(c["field"].startswith("spec.template.spec.requirements") for c in causes), causes
    assert any(message in c["message"] for c in causes)


def test_a_valid_gt_requirement_and_a_node_pool_without_its_template_are_told_apart(api: k8s.CustomObjectsApi) -> None:
    create(api, edited(NODE_POOL, "spec.template.spec.requirements", [{"key": "joiner.dev/instance-cpu", "operator": "Gt", "values": ["3"]}]))
    _, causes = refused(api, edited(edited(NODE_POOL, "metadata.name", "other"), "spec.template", None))
    assert ("spec.template", "Required value") in {(c["field"], c["message"]) for c in causes}


def test_updates_are_admitted_too(api: k8s.CustomObjectsApi) -> None:
    create(api, NODE_CLASS)
    with pytest.raises(ApiException) as error:
        api.patch_cluster_custom_object(GROUP, VERSION, "nodeclasses", "default", {"spec": {"amiFamily": "AL2"}})  # type: ignore[call-overload]
    assert error.value.status == 422 and 'spec.amiFamily: Unsupported value: "AL2"' in json.loads(error.value.body)["message"]
    with pytest.raises(ApiException) as error:
        api.patch_cluster_custom_object(
            GROUP,
            VERSION,
            "nodeclasses",
            "default",  # type: ignore[call-overload]
            {"spec": {"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}},
        )
    assert error.value.status == 422 and "spec.amiSelectorTerms[0].alias in body should match '^al2023@" in json.loads(error.value.body)["message"]


def test_not_in_the_empty_value_is_admitted(api: k8s.CustomObjectsApi) -> None:
    requirement = {"key": "karpenter.k8s.aws/instance-hypervisor", "operator": "NotIn", "values": [""]}
    stored = create(api, edited(NODE_POOL, "spec.template.spec.requirements", [requirement]))
    assert stored["spec"]["template"]["spec"]["requirements"] == [requirement]
