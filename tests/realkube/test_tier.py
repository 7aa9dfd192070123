"""The tier itself: the pinned versions run, a refusal is seen in the audit log, a manifest the
server refuses fails with the server's message, the shipped manifests are applied as shipped."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from joiner.ports import KubernetesError
from tests.realkube.conftest import Guard, RealKube, install_manifests
from testworld.real_kube import CRDS, ROOT, manifests

pytestmark = pytest.mark.real_kube


def pinned(module: str) -> str:
    for line in (ROOT / "tools" / "kube" / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == module and parts[1].startswith("v"):
            return parts[1]
    raise AssertionError(f"{module} is not pinned in tools/kube/go.mod")


def test_the_server_is_the_pinned_kubernetes(real_kube: RealKube) -> None:
    assert real_kube.version == pinned("k8s.io/kubernetes")
    assert real_kube.cluster.startup_seconds < 60
    assert all(component.alive() for component in real_kube.cluster.components)


def test_the_shipped_manifests_are_installed_as_shipped(real_kube: RealKube) -> None:
    for _, obj in manifests(CRDS, ROOT / "manifests" / "rbac.yaml"):
        kind = obj["kind"]
        path = {
            "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        }[kind]
        stored = real_kube.admin.get(f"{path}/{obj['metadata']['name']}")
        if kind == "ClusterRole":
            assert stored["rules"] == [{k: v for k, v in rule.items()} for rule in obj["rules"]]
        elif kind == "ClusterRoleBinding":
            assert stored["subjects"] == obj["subjects"] and stored["roleRef"] == obj["roleRef"]
        else:
            assert [v["name"] for v in stored["spec"]["versions"]] == [v["name"] for v in obj["spec"]["versions"]]


def test_a_refusal_is_read_from_the_audit_log(real_kube: RealKube, rbac_guard: Guard) -> None:
    """The watcher may not delete nodes: the adapter raises the 403, and the guard sees it (a 403
    not expected like this one fails the test)."""
    rbac_guard.expect_forbidden("joiner:watcher", "delete", "nodes")
    client = real_kube.client("watcher", max_attempts=1)
    with pytest.raises(KubernetesError) as refused:
        client.delete_node(real_kube.unique("node"))
    assert refused.value.status == 403
    assert 'User "joiner:watcher" cannot delete resource "nodes"' in str(refused.value)


def test_a_manifest_the_server_refuses_fails_with_its_message(real_kube: RealKube, tmp_path: Path) -> None:
    crd = copy.deepcopy(next(obj for _, obj in manifests(CRDS) if obj["spec"]["names"]["kind"] == "NodeClass"))
    crd["metadata"]["name"] = "brokens.joiner.dev"
    crd["spec"]["names"] = {"kind": "Broken", "plural": "brokens", "singular": "broken", "listKind": "BrokenList"}
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [{"rule": "self.noSuchField == 1", "message": "never compiles"}]
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(crd))
    with pytest.raises(pytest.fail.Exception) as failed:
        install_manifests(real_kube.admin, tmp_path)
    text = str(failed.value)
    assert "the API server refused" in text and "CustomResourceDefinition brokens.joiner.dev" in text
    assert "noSuchField" in text  # the server's compile error, verbatim
