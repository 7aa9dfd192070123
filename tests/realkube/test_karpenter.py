"""Reading Karpenter's own objects (``JOINER_KARPENTER_CRDS``) on a real API server, with
Karpenter's v1 NodePool and EC2NodeClass CRDs (minimal structural ones, tests/data/karpenter-crds):
the reads are forbidden with manifests/rbac.yaml alone and allowed once manifests/rbac-karpenter.yaml
is applied, which grants nothing beyond them; the JoinerConverted condition and the status Joiner
computes pass the real CRD schema (Karpenter's condition fields), and Events name the Karpenter object."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from joiner.domain.karpenter import CONDITION_TYPE
from joiner.ports import KubernetesError
from tests.realkube.access import function_groups
from tests.realkube.conftest import Guard, RealKube, install_manifests
from tests.realkube.test_rbac import _access, eventually, node_class, node_pool
from tests.support.karpenter import KARPENTER_CRDS, ec2_node_class, karpenter_pool, stored
from testworld.real_kube import ROOT

pytestmark = pytest.mark.real_kube

RBAC_KARPENTER = ROOT / "manifests" / "rbac-karpenter.yaml"
BINDING = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/joiner-karpenter"
POOLS = "/apis/karpenter.sh/v1/nodepools"
CLASSES = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses"
#: Every function that lists NodePools or NodeClasses (tests/realkube/test_rbac.py USES).
READERS = ("scanner", "interruption", "disruption", "gc")


@pytest.fixture(scope="module")
def karpenter_crds(real_kube: RealKube) -> None:
    install_manifests(real_kube.admin, KARPENTER_CRDS)


@pytest.fixture
def without_grant(real_kube: RealKube, karpenter_crds: None) -> None:
    real_kube.admin.delete(BINDING)
    eventually(lambda: not _access(real_kube, "joiner:scanner", function_groups()["joiner:scanner"], "list", "nodepools", "karpenter.sh"))


@pytest.fixture
def with_grant(real_kube: RealKube, karpenter_crds: None) -> Iterator[None]:
    install_manifests(real_kube.admin, RBAC_KARPENTER)
    eventually(lambda: _access(real_kube, "joiner:scanner", function_groups()["joiner:scanner"], "list", "ec2nodeclasses", "karpenter.k8s.aws"))
    yield
    real_kube.admin.delete(BINDING)


def allowed(kube: RealKube, function: str, verb: str, resource: str, group: str, sub: str = "") -> bool:
    user = f"joiner:{function}"
    return _access(kube, user, function_groups()[user], verb, resource, group, sub)


def test_without_rbac_karpenter_the_reads_are_forbidden_and_say_which_manifest(real_kube: RealKube, without_grant: None, rbac_guard: Guard) -> None:
    for function in READERS:
        assert not allowed(real_kube, function, "list", "nodepools", "karpenter.sh")
        assert not allowed(real_kube, function, "list", "ec2nodeclasses", "karpenter.k8s.aws")
        assert not allowed(real_kube, function, "patch", "nodepools", "karpenter.sh", "status")
    rbac_guard.expect_forbidden("joiner:scanner", "list", "ec2nodeclasses")
    client = real_kube.client("scanner", karpenter=True, max_attempts=1)
    try:
        with pytest.raises(KubernetesError, match="apply manifests/rbac-karpenter.yaml") as raised:
            client.list_node_pools()
        assert raised.value.status == 403
    finally:
        client.close()
    # with the opt-in off nothing of Karpenter's is asked for
    plain = real_kube.client("scanner", max_attempts=1)
    try:
        plain.list_node_pools()
    finally:
        plain.close()


@pytest.mark.parametrize(
    ("verb", "resource", "group", "sub"),
    [
        ("get", "nodepools", "karpenter.sh", ""),
        ("watch", "nodepools", "karpenter.sh", ""),
        ("update", "nodepools", "karpenter.sh", ""),
        ("patch", "nodepools", "karpenter.sh", ""),
        ("delete", "nodepools", "karpenter.sh", ""),
        ("create", "ec2nodeclasses", "karpenter.k8s.aws", ""),
        ("update", "ec2nodeclasses", "karpenter.k8s.aws", "status"),
        ("list", "nodeclaims", "karpenter.sh", ""),
        ("list", "nodeoverlays", "karpenter.sh", ""),
    ],
)
def test_rbac_karpenter_grants_nothing_beyond_the_reads_and_status(
    real_kube: RealKube, with_grant: None, verb: str, resource: str, group: str, sub: str
) -> None:
    assert not allowed(real_kube, "scanner", verb, resource, group, sub)


def test_with_rbac_karpenter_joiner_reads_karpenters_objects(real_kube: RealKube, with_grant: None) -> None:
    admin, unique = real_kube.admin, real_kube.unique
    for function in READERS:
        assert allowed(real_kube, function, "list", "nodepools", "karpenter.sh")
        assert allowed(real_kube, function, "patch", "ec2nodeclasses", "karpenter.k8s.aws", "status")
    assert not allowed(real_kube, "watcher", "list", "nodepools", "karpenter.sh")
    good_class, custom_class, good_pool, refused_pool, shadowed = (unique(n) for n in ("k-class", "custom", "k-pool", "on-custom", "shadowed"))
    admin.create(CLASSES, stored(ec2_node_class(good_class)))
    admin.create(CLASSES, stored(ec2_node_class(custom_class, amiFamily="Custom")))
    admin.create(POOLS, stored(karpenter_pool(good_pool, good_class)))
    admin.create(POOLS, stored(karpenter_pool(refused_pool, custom_class)))
    admin.create("/apis/joiner.dev/v1/nodeclasses", node_class(unique("nc")))
    admin.create("/apis/joiner.dev/v1/nodepools", node_pool(shadowed, good_class))
    admin.create(POOLS, stored(karpenter_pool(shadowed, good_class)))

    client = real_kube.client("scanner", karpenter=True, max_attempts=1)
    try:
        pools = {p["metadata"]["name"]: p for p in client.list_node_pools()}
        classes = {c["metadata"]["name"] for c in client.list_node_classes()}
        assert good_pool in pools and refused_pool not in pools and good_class in classes and custom_class not in classes
        assert pools[shadowed]["metadata"].get("uid")  # Joiner's own, as the API server returns it
        assert pools[good_pool]["metadata"]["annotations"]["joiner.dev/read-from"] == "karpenter.sh/v1 NodePool"

        def condition(path: str, name: str) -> dict[str, Any]:
            (found,) = [c for c in admin.get(f"{path}/{name}").get("status", {}).get("conditions", []) if c["type"] == CONDITION_TYPE]
            return found  # type: ignore[no-any-return]

        assert condition(POOLS, good_pool)["status"] == "True"
        assert (condition(CLASSES, custom_class)["status"], condition(CLASSES, custom_class)["reason"]) == ("False", "ConversionRefused")
        assert condition(POOLS, refused_pool)["reason"] == "NodeClassNotRead"
        assert condition(POOLS, shadowed)["reason"] == "ShadowedByJoiner"
        events = admin.get("/api/v1/namespaces/default/events")["items"]
        assert any(
            e["involvedObject"]["name"] == custom_class and e["involvedObject"]["kind"] == "EC2NodeClass" and e["reason"] == "ConversionRefused" for e in events
        )

        # the status the scanner computes, on the Karpenter objects (Karpenter's condition schema)
        ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        client.patch_node_pool_status(good_pool, {"resources": {"cpu": "4", "nodes": "1"}, "nodes": 1, "conditions": [ready]})
        status = admin.get(f"{POOLS}/{good_pool}")["status"]
        assert status["nodes"] == 1 and {c["type"] for c in status["conditions"]} == {"Ready", CONDITION_TYPE}
        client.patch_node_class_status(
            good_class,
            {
                "subnets": [{"id": "subnet-0a", "zone": "us-east-1a"}],
                "securityGroups": [{"id": "sg-0a"}],
                "amis": [{"id": "ami-0a", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}],
                "conditions": [dict(ready, observedGeneration=1)],
            },
        )
        assert admin.get(f"{CLASSES}/{good_class}")["status"]["amis"][0]["id"] == "ami-0a"
    finally:
        client.close()
