"""The shipped CRDs on a real API server: every CEL rule (x-kubernetes-validations) admits an
object that keeps it and refuses, with the rule's message, one that breaks it; strict field
validation refuses a misspelt field; defaults are applied. The same cases run against the
local emulator's admission (testworld.admission), so the emulator answers as the server does."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import urllib3

from tests.realkube.conftest import RealKube
from testworld.kube_emulator import KubeEmulator
from testworld.real_kube import CRDS, ROOT, ApiError, manifests

pytestmark = pytest.mark.real_kube

PLURALS = {"NodeClass": "nodeclasses", "NodePool": "nodepools", "NodeOverlay": "nodeoverlays"}

NODE_CLASS: dict[str, Any] = {
    "apiVersion": "joiner.dev/v1",
    "kind": "NodeClass",
    "metadata": {"name": "x"},
    "spec": {
        "role": "JoinerNodeRole-test",
        "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": "test"}}],
        "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": "test"}}],
    },
}
NODE_POOL: dict[str, Any] = {
    "apiVersion": "joiner.dev/v1",
    "kind": "NodePool",
    "metadata": {"name": "x"},
    "spec": {
        "template": {
            "spec": {
                "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            }
        }
    },
}

NODE_OVERLAY: dict[str, Any] = {
    "apiVersion": "joiner.dev/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "x"},
    "spec": {"requirements": [{"key": "joiner.dev/instance-family", "operator": "In", "values": ["m5"]}], "priceAdjustment": "-10%"},
}
BASES = {"NodeClass": NODE_CLASS, "NodePool": NODE_POOL, "NodeOverlay": NODE_OVERLAY}


def cel_rules() -> list[tuple[str, str, str, str]]:
    """(kind, schema path, rule, message) of every x-kubernetes-validations rule in manifests/crds/."""
    found: list[tuple[str, str, str, str]] = []

    def walk(kind: str, node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        for rule in node.get("x-kubernetes-validations") or []:
            found.append((kind, path, rule["rule"], rule.get("message", "")))
        for name, child in (node.get("properties") or {}).items():
            walk(kind, child, f"{path}.{name}" if path else name)
        if isinstance(node.get("items"), dict):
            walk(kind, node["items"], f"{path}[*]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(kind, node["additionalProperties"], f"{path}.*")

    for _, crd in manifests(CRDS):
        for version in crd["spec"]["versions"]:
            walk(crd["spec"]["names"]["kind"], version["schema"]["openAPIV3Schema"], "")
    return found


@dataclass(frozen=True)
class Case:
    """An object keeping the rule at ``path`` (``valid``: field -> value edits of the base
    object) and one breaking it (``invalid``)."""

    kind: str
    path: str
    message: str  # the start of the rule's message: which rule at that path
    valid: dict[str, Any]
    invalid: dict[str, Any]
    #: a transition rule (``oldSelf``): the object is first created with these edits, then
    #: updated to ``valid`` (admitted) and, created afresh, to ``invalid`` (refused)
    before: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.path}:{self.message[:40]}"


SR = "123456789012"
CASES = [
    Case("NodeClass", "spec", "give role or instanceProfile", {"spec.role": "R"}, {"spec.instanceProfile": "P"}),
    Case(
        "NodeClass",
        "spec.amiSelectorTerms",
        "an alias term must be the only",
        {"spec.amiSelectorTerms": [{"id": "ami-1"}, {"name": "x"}]},
        {"spec.amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]},
    ),
    Case(
        "NodeClass",
        "spec.amiSelectorTerms[*]",
        "expected at least one of: alias",
        {"spec.amiSelectorTerms": [{"name": "x", "owner": "self"}]},
        {"spec.amiSelectorTerms": [{"owner": "self"}]},
    ),
    Case(
        "NodeClass",
        "spec.amiSelectorTerms[*]",
        "alias cannot be combined",
        {"spec.amiSelectorTerms": [{"alias": "al2023@latest"}]},
        {"spec.amiSelectorTerms": [{"alias": "al2023@latest", "owner": "amazon"}]},
    ),
    Case(
        "NodeClass",
        "spec.amiSelectorTerms[*]",
        "id cannot be combined",
        {"spec.amiSelectorTerms": [{"id": "ami-0123"}]},
        {"spec.amiSelectorTerms": [{"id": "ami-0123", "name": "x"}]},
    ),
    Case(
        "NodeClass",
        "spec.subnetSelectorTerms[*]",
        "expected at least one of: id, tags",
        {"spec.subnetSelectorTerms": [{"id": "subnet-1"}]},
        {"spec.subnetSelectorTerms": [{}]},
    ),
    Case(
        "NodeClass",
        "spec.subnetSelectorTerms[*]",
        "id cannot be combined with tags",
        {"spec.subnetSelectorTerms": [{"id": "subnet-1"}, {"tags": {"a": "b"}}]},
        {"spec.subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]},
    ),
    Case(
        "NodeClass",
        "spec.securityGroupSelectorTerms[*]",
        "expected at least one of: id, name",
        {"spec.securityGroupSelectorTerms": [{"name": "nodes"}]},
        {"spec.securityGroupSelectorTerms": [{}]},
    ),
    Case(
        "NodeClass",
        "spec.securityGroupSelectorTerms[*]",
        "id cannot be combined",
        {"spec.securityGroupSelectorTerms": [{"id": "sg-1"}]},
        {"spec.securityGroupSelectorTerms": [{"id": "sg-1", "name": "x"}]},
    ),
    Case(
        "NodeClass",
        "spec.kubelet.systemReserved",
        "valid keys for systemReserved",
        {"spec.kubelet": {"systemReserved": {"cpu": "100m", "pid": "100"}}},
        {"spec.kubelet": {"systemReserved": {"gpu": "1"}}},
    ),
    Case(
        "NodeClass",
        "spec.kubelet.kubeReserved",
        "valid keys for kubeReserved",
        {"spec.kubelet": {"kubeReserved": {"memory": "1Gi"}}},
        {"spec.kubelet": {"kubeReserved": {"nvidia.com/gpu": "1"}}},
    ),
    Case(
        "NodeClass",
        "spec.kubelet.evictionHard",
        "valid keys for evictionHard",
        {"spec.kubelet": {"evictionHard": {"memory.available": "5%"}}},
        {"spec.kubelet": {"evictionHard": {"memory.free": "1Gi"}}},
    ),
    Case(
        "NodeClass",
        "spec.blockDeviceMappings",
        "at most one block device mapping",
        {"spec.blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True}, {"deviceName": "/dev/xvdb", "rootVolume": False}]},
        {"spec.blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": True}, {"deviceName": "/dev/xvdb", "rootVolume": True}]},
    ),
    Case(
        "NodeClass",
        "spec.tags",
        "tags joiner.dev/cluster",
        {"spec.tags": {"team": "a", "kubernetes.io/role": "x"}},
        {"spec.tags": {"kubernetes.io/cluster/prod": "owned"}},
    ),
    Case(
        "NodeClass",
        "spec.capacityReservationSelectorTerms[*]",
        "expected at least one of: id, tags",
        {"spec.capacityReservationSelectorTerms": [{"id": "cr-1"}]},
        {"spec.capacityReservationSelectorTerms": [{}]},
    ),
    Case(
        "NodeClass",
        "spec.capacityReservationSelectorTerms[*]",
        "id cannot be combined with tags or ownerID",
        {"spec.capacityReservationSelectorTerms": [{"id": "cr-1"}, {"tags": {"a": "b"}}]},
        {"spec.capacityReservationSelectorTerms": [{"id": "cr-1", "ownerID": SR}]},
    ),
    Case(
        "NodeClass",
        "spec.capacityReservationSelectorTerms[*]",
        "ownerID needs tags",
        {"spec.capacityReservationSelectorTerms": [{"tags": {"a": "b"}, "ownerID": SR}]},
        {"spec.capacityReservationSelectorTerms": [{"ownerID": SR}]},
    ),
    Case("NodePool", "spec.limits.*", "a limit must not be negative", {"spec.limits": {"cpu": 0, "memory": "10Gi"}}, {"spec.limits": {"cpu": -4}}),
    Case(
        "NodePool",
        "spec.template.metadata.labels",
        "labels joiner.dev/nodepool",
        {"spec.template.metadata": {"labels": {"team": "a"}}},
        {"spec.template.metadata": {"labels": {"kubernetes.io/hostname": "n"}}},
    ),
    Case(
        "NodePool",
        "spec.template.spec.requirements[*]",
        "requirements with operator 'In'",
        {"spec.template.spec.requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]},
        {"spec.template.spec.requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": []}]},
    ),
    Case(
        "NodePool",
        "spec.template.spec.requirements[*]",
        "requirements with operator 'Gt'",
        {"spec.template.spec.requirements": [{"key": "joiner.dev/instance-cpu", "operator": "Gte", "values": ["4"]}]},
        {"spec.template.spec.requirements": [{"key": "joiner.dev/instance-cpu", "operator": "Gt", "values": ["4", "8"]}]},
    ),
    Case(
        "NodePool",
        "spec.template.spec.requirements[*]",
        "requirements with operator 'Exists'",
        {"spec.template.spec.requirements": [{"key": "example.com/x", "operator": "Exists"}]},
        {"spec.template.spec.requirements": [{"key": "example.com/x", "operator": "DoesNotExist", "values": ["a"]}]},
    ),
    Case(
        "NodePool",
        "spec.template.spec.requirements[*]",
        "requirements with 'minValues'",
        {"spec.template.spec.requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a", "b"], "minValues": 2}]},
        {"spec.template.spec.requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a"], "minValues": 2}]},
    ),
    Case(
        "NodePool",
        "spec.template.spec.requirements[*]",
        "requirements on labels Joiner sets",
        {"spec.template.spec.requirements": [{"key": "joiner.dev/capacity-type", "operator": "In", "values": ["spot"]}]},
        {"spec.template.spec.requirements": [{"key": "joiner.dev/nodeclaim", "operator": "Exists"}]},
    ),
    Case("NodePool", "spec", "Cannot transition NodePool between static", {"spec.replicas": 5}, {"spec.replicas": None}, before={"spec.replicas": 3}),
    Case(
        "NodePool",
        "spec",
        "only 'limits.nodes' is supported",
        {"spec.replicas": 2, "spec.limits": {"nodes": 4}},
        {"spec.replicas": 2, "spec.limits": {"nodes": 4, "cpu": "8"}},
    ),
    Case("NodePool", "spec", "'weight' is not supported", {"spec.replicas": 2}, {"spec.replicas": 2, "spec.weight": 10}),
    Case("NodeOverlay", "spec", "cannot set both 'price' and 'priceAdjustment'", {"spec.price": "0.42", "spec.priceAdjustment": None}, {"spec.price": "0.42"}),
    Case(
        "NodeOverlay",
        "spec.requirements[*].key",
        'label "kubernetes.io/hostname" is restricted',
        {"spec.requirements": [{"key": "joiner.dev/nodepool", "operator": "In", "values": ["default"]}]},
        {"spec.requirements": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]},
    ),
    Case(
        "NodeOverlay",
        "spec.requirements[*]",
        "requirements with operator 'In' or 'NotIn'",
        {"spec.requirements": [{"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]}]},
        {"spec.requirements": [{"key": "kubernetes.io/arch", "operator": "NotIn", "values": []}]},
    ),
    Case(
        "NodeOverlay",
        "spec.requirements[*]",
        "requirements operator 'Gt'",
        {"spec.requirements": [{"key": "joiner.dev/instance-cpu", "operator": "Lte", "values": ["8"]}]},
        {"spec.requirements": [{"key": "joiner.dev/instance-cpu", "operator": "Lt", "values": ["-1"]}]},
    ),
    Case(
        "NodeOverlay",
        "spec.requirements[*]",
        "requirements with operator 'Exists'",
        {"spec.requirements": [{"key": "example.com/x", "operator": "DoesNotExist"}]},
        {"spec.requirements": [{"key": "example.com/x", "operator": "Exists", "values": ["a"]}]},
    ),
    Case(
        "NodeOverlay",
        "spec.capacity",
        "invalid resource restricted",
        {"spec.capacity": {"example.com/gpu-slice": "4"}},
        {"spec.capacity": {"example.com/gpu-slice": "4", "memory": "1Gi"}},
    ),
    Case(
        "NodePool",
        "spec.disruption.budgets[*]",
        "schedule and duration must be given together",
        {"spec.disruption": {"budgets": [{"nodes": "1", "schedule": "@daily", "duration": "1h"}]}},
        {"spec.disruption": {"budgets": [{"nodes": "1", "schedule": "@daily"}]}},
    ),
]


def edited(base: dict[str, Any], edits: dict[str, Any], name: str) -> dict[str, Any]:
    obj = copy.deepcopy(base)
    obj["metadata"]["name"] = name
    for path, value in edits.items():
        *parents, last = path.split(".")
        node = obj
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return obj


class Target:
    """Where a case is created: the real API server (as admin) or the local emulator."""

    def __init__(self, url: str, headers: dict[str, str], pool: urllib3.PoolManager) -> None:
        self.url, self.headers, self.pool = url, headers, pool

    def create(self, obj: dict[str, Any], **query: str) -> tuple[int, Any]:
        path = f"/apis/{obj['apiVersion']}/{PLURALS[obj['kind']]}"
        suffix = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
        answer = self.pool.request(
            "POST", self.url + path + suffix, body=json.dumps(obj).encode(), headers=dict(self.headers, **{"Content-Type": "application/json"})
        )
        return answer.status, json.loads(answer.data) if answer.data else None

    def update(self, obj: dict[str, Any], edits: dict[str, Any]) -> tuple[int, Any]:
        """Replace the stored ``obj`` (as created) with ``edits`` applied (PUT)."""
        path = f"/apis/joiner.dev/v1/{PLURALS[obj['kind']]}/{obj['metadata']['name']}"
        replaced = edited(obj, edits, obj["metadata"]["name"])
        answer = self.pool.request(
            "PUT", self.url + path, body=json.dumps(replaced).encode(), headers=dict(self.headers, **{"Content-Type": "application/json"})
        )
        return answer.status, json.loads(answer.data) if answer.data else None


@pytest.fixture(scope="module")
def emulator() -> Iterator[Target]:
    with KubeEmulator() as emulated:
        yield Target(emulated.url, {}, urllib3.PoolManager(retries=False))


@pytest.fixture(params=["real", "emulator"])
def target(request: pytest.FixtureRequest, real_kube: RealKube) -> Target:
    if request.param == "emulator":
        return request.getfixturevalue("emulator")  # type: ignore[no-any-return]
    cluster = real_kube.cluster
    token = cluster.identities["joiner-test-admin"].token
    return Target(cluster.url, {"Authorization": f"Bearer {token}"}, urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=cluster.ca_file, retries=False))


def test_every_cel_rule_has_a_case() -> None:
    rules = {(kind, path, message) for kind, path, _, message in cel_rules()}
    covered = {(c.kind, c.path, m) for c in CASES for (kind, path, m) in rules if (kind, path) == (c.kind, c.path) and m.startswith(c.message)}
    assert len(rules) == len(cel_rules()), "two rules at one path share a message: cases could not tell them apart"
    assert rules - covered == set(), "CEL rules without a valid/invalid case in CASES"
    assert len(CASES) == len(rules)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cel_rule_admits_the_valid_and_refuses_the_invalid_with_its_message(target: Target, case: Case) -> None:
    base = BASES[case.kind]
    message = next(m for kind, path, _, m in cel_rules() if (kind, path) == (case.kind, case.path) and m.startswith(case.message))
    name = RealKube.unique("cel")
    if case.before is not None:  # a transition rule: updates of an object created without breaking it
        status, created = target.create(edited(base, case.before, name + "-ok"))
        assert status == 201, created
        status, body = target.update(created, case.valid)
        assert status == 200, body
        status, created = target.create(edited(base, case.before, name + "-bad"))
        assert status == 201, created
        status, body = target.update(created, case.invalid)
    else:
        status, body = target.create(edited(base, case.valid, name + "-ok"))
        assert status == 201, body
        status, body = target.create(edited(base, case.invalid, name + "-bad"))
    assert status == 422, body
    assert body["reason"] == "Invalid"
    causes = body["details"]["causes"]
    assert any(message in cause["message"] for cause in causes), causes


def test_strict_field_validation_refuses_a_misspelt_field(real_kube: RealKube) -> None:
    obj = edited(NODE_CLASS, {"spec.subnetSelectorTerm": [{"id": "subnet-1"}]}, real_kube.unique("strict"))
    with pytest.raises(ApiError) as refused:
        real_kube.admin.create("/apis/joiner.dev/v1/nodeclasses", obj, strict=True)
    assert refused.value.status in (400, 422)
    assert 'unknown field "spec.subnetSelectorTerm"' in str(refused.value)
    # Without strict validation the server prunes it (and the object is still admitted).
    obj["metadata"]["name"] = real_kube.unique("pruned")
    stored = real_kube.admin.create("/apis/joiner.dev/v1/nodeclasses", obj, strict=False)
    assert "subnetSelectorTerm" not in stored["spec"]


def test_defaults_are_applied(real_kube: RealKube) -> None:
    node_class = real_kube.admin.create("/apis/joiner.dev/v1/nodeclasses", edited(NODE_CLASS, {}, real_kube.unique("defaults")))
    assert node_class["spec"]["amiFamily"] == "AL2023"
    assert node_class["spec"]["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    pool = real_kube.admin.create("/apis/joiner.dev/v1/nodepools", edited(NODE_POOL, {}, real_kube.unique("defaults")))
    assert pool["spec"]["template"]["spec"]["expireAfter"] == "720h"
    assert pool["spec"]["template"]["spec"]["nodeClassRef"] == {"group": "joiner.dev", "kind": "NodeClass", "name": "default"}
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s", "budgets": [{"nodes": "10%"}]}
    assert pool["spec"]["interruption"] == {"rebalance": "replace"}


def test_every_example_manifest_is_admitted_strictly(real_kube: RealKube) -> None:
    admitted = 0
    for path, obj in manifests(ROOT / "manifests" / "examples"):
        if obj.get("apiVersion") != "joiner.dev/v1":
            continue
        obj = copy.deepcopy(obj)
        obj["metadata"]["name"] = real_kube.unique(obj["metadata"]["name"])
        try:
            real_kube.admin.create(f"/apis/joiner.dev/v1/{PLURALS[obj['kind']]}", obj, strict=True)
        except ApiError as error:
            pytest.fail(f"{path.relative_to(ROOT)}: {error}")
        admitted += 1
    assert admitted >= 4
