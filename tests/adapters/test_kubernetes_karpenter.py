"""The Kubernetes adapter reading Karpenter's own NodePools and EC2NodeClasses
(``JOINER_KARPENTER_CRDS``), against the emulator with minimal Karpenter CRDs installed: off by
default, converted beside Joiner's when on, the ``JoinerConverted`` condition (and an Event when
not read) on each Karpenter object, status writes routed to them, and failures that say what to do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from joiner.adapters.kubernetes import KubernetesClient
from joiner.domain.karpenter import CONDITION_TYPE
from joiner.ports import KubernetesError
from joiner.settings import Settings
from tests.support.fakes import node_class_json, node_pool_json
from tests.support.karpenter import CLASSES, POOLS, ec2_node_class, install_karpenter_crds, karpenter_pool, stored
from tests.support.kube_fixtures import kube_emulator  # noqa: F401 - fixture
from testworld.kube_emulator import KubeEmulator


@pytest.fixture
def karpenter(kube_emulator: KubeEmulator) -> Iterator[KubeEmulator]:  # noqa: F811
    install_karpenter_crds(kube_emulator)
    yield kube_emulator


def client(emulator: KubeEmulator, *, karpenter: bool = True) -> KubernetesClient:
    return KubernetesClient(emulator.url, sleep=lambda _: None, random=lambda: 1.0, timeout=(2.0, 5.0), karpenter=karpenter)


def condition(emulator: KubeEmulator, kind: str, name: str) -> dict[str, Any]:
    obj = emulator.get(kind, name)
    assert obj is not None
    (found,) = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == CONDITION_TYPE]
    return found  # type: ignore[no-any-return]


def test_off_by_default_karpenters_objects_are_not_even_listed(karpenter: KubeEmulator) -> None:
    karpenter.apply(stored(ec2_node_class("k")))
    karpenter.apply(stored(karpenter_pool("k", "k")))
    kube = client(karpenter, karpenter=False)
    assert kube.list_node_pools() == [] and kube.list_node_classes() == []
    assert not karpenter.requests(path="karpenter")
    settings = Settings(cluster_name="c", region="us-east-1", state_table="t", idempotency_table="t", kubernetes_host=karpenter.url)
    assert KubernetesClient.from_settings(settings).karpenter is False
    assert (
        KubernetesClient.from_settings(
            Settings.from_env({"JOINER_CLUSTER_NAME": "c", "JOINER_STATE_TABLE": "t", "JOINER_KUBERNETES_HOST": karpenter.url, "JOINER_KARPENTER_CRDS": "true"})
        ).karpenter
        is True
    )


def test_converted_beside_joiners_with_a_condition_on_each(karpenter: KubeEmulator) -> None:
    karpenter.apply(node_class_json("mine"))
    karpenter.apply(node_pool_json("mine", node_class="mine"))
    karpenter.apply(stored(ec2_node_class("k")))
    karpenter.apply(stored(karpenter_pool("k", "k")))
    kube = client(karpenter)
    pools = {p["metadata"]["name"]: p for p in kube.list_node_pools()}
    classes = {c["metadata"]["name"]: c for c in kube.list_node_classes()}
    assert set(pools) == {"mine", "k"} and set(classes) == {"mine", "k"}
    assert pools["k"]["apiVersion"] == "joiner.dev/v1" and pools["k"]["spec"]["template"]["spec"]["nodeClassRef"] == {
        "group": "joiner.dev",
        "kind": "NodeClass",
        "name": "k",
    }
    pool_condition = condition(karpenter, POOLS, "k")
    assert (pool_condition["status"], pool_condition["reason"]) == ("True", "Converted")
    class_condition = condition(karpenter, CLASSES, "k")
    assert (class_condition["status"], class_condition["reason"]) == ("True", "ConvertedWithDrops")
    assert "spec.role" in class_condition["message"]
    # read again: nothing changed, nothing written
    writes = len(karpenter.requests("PATCH", "karpenter"))
    kube.list_node_pools()
    kube.list_node_classes()
    assert len(karpenter.requests("PATCH", "karpenter")) == writes
    assert not [e for e in karpenter.list("Event") if e["type"] == "Warning"]


def test_refused_and_shadowed_objects_say_why_on_their_status_and_in_an_event(karpenter: KubeEmulator) -> None:
    karpenter.apply(node_pool_json("taken", node_class="k"))
    karpenter.apply(stored(ec2_node_class("k")))
    karpenter.apply(stored(ec2_node_class("custom", amiFamily="Custom")))
    karpenter.apply(stored(karpenter_pool("taken", "k")))
    karpenter.apply(stored(karpenter_pool("on-custom", "custom")))
    kube = client(karpenter)
    assert {p["metadata"]["name"] for p in kube.list_node_pools()} == {"taken"}
    (joiners,) = kube.list_node_pools()
    assert "joiner.dev/read-from" not in (joiners["metadata"].get("annotations") or {})  # Joiner's own won
    shadowed = condition(karpenter, POOLS, "taken")
    assert (shadowed["status"], shadowed["reason"]) == ("False", "ShadowedByJoiner")
    refused = condition(karpenter, CLASSES, "custom")
    assert (refused["status"], refused["reason"]) == ("False", "ConversionRefused") and "amiFamily 'Custom'" in refused["message"]
    assert condition(karpenter, POOLS, "on-custom")["reason"] == "NodeClassNotRead"
    warnings = {(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"]) for e in karpenter.list("Event") if e["type"] == "Warning"}
    assert warnings == {
        ("NodePool", "taken", "ShadowedByJoiner"),
        ("EC2NodeClass", "custom", "ConversionRefused"),
        ("NodePool", "on-custom", "NodeClassNotRead"),
    }
    event = next(e for e in karpenter.list("Event") if e["involvedObject"]["name"] == "custom")
    assert event["involvedObject"]["apiVersion"] == "karpenter.k8s.aws/v1" and event["involvedObject"]["uid"]


def test_status_of_a_converted_object_goes_to_the_karpenter_object(karpenter: KubeEmulator) -> None:
    karpenter.apply(stored(ec2_node_class("k")))
    karpenter.apply(stored(karpenter_pool("k", "k")))
    kube = client(karpenter)
    (pool,) = kube.list_node_pools()
    converted = pool["status"]["conditions"]  # the objects planned with carry the condition just written
    assert [c["type"] for c in converted] == [CONDITION_TYPE]
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    # a status computed from an older read (without the condition) does not take it away
    kube.patch_node_pool_status("k", {"resources": {"cpu": "4", "nodes": "1"}, "nodes": 1, "conditions": [ready]})
    status = karpenter.get(POOLS, "k")["status"]  # type: ignore[index]
    assert status["nodes"] == 1 and status["resources"]["cpu"] == "4"
    assert [c["type"] for c in status["conditions"]] == ["Ready", CONDITION_TYPE]
    assert next(c for c in status["conditions"] if c["type"] == CONDITION_TYPE) == condition(karpenter, POOLS, "k")
    kube.patch_node_class_status(
        "k", {"subnets": [{"id": "subnet-0a", "zone": "us-east-1a"}], "securityGroups": [{"id": "sg-0a"}], "amis": [], "conditions": [ready]}
    )
    assert karpenter.get(CLASSES, "k")["status"]["subnets"] == [{"id": "subnet-0a", "zone": "us-east-1a"}]  # type: ignore[index]
    kube.patch_node_pool_status("gone", {"nodes": 0})  # neither Joiner's nor Karpenter's: skipped


def test_without_karpenters_crds_only_joiners_objects_are_read(kube_emulator: KubeEmulator) -> None:  # noqa: F811
    kube_emulator.apply(node_pool_json("mine"))
    assert [p["metadata"]["name"] for p in client(kube_emulator).list_node_pools()] == ["mine"]


def test_reads_rbac_refuses_name_the_manifest_that_grants_them(karpenter: KubeEmulator) -> None:
    karpenter.fail_next("GET", "/apis/karpenter.k8s.aws/v1/ec2nodeclasses$", status=403, message="forbidden")
    with pytest.raises(KubernetesError, match="apply manifests/rbac-karpenter.yaml") as raised:
        client(karpenter).list_node_classes()
    assert raised.value.status == 403


def test_a_condition_written_meanwhile_is_left_to_the_next_read(karpenter: KubeEmulator) -> None:
    karpenter.apply(stored(ec2_node_class("k")))
    karpenter.fail_next("PATCH", "/apis/karpenter.k8s.aws/v1/ec2nodeclasses/k/status", status=409)
    kube = client(karpenter)
    assert [c["metadata"]["name"] for c in kube.list_node_classes()] == ["k"]
    assert not (karpenter.get(CLASSES, "k") or {}).get("status")
    kube.list_node_classes()
    assert condition(karpenter, CLASSES, "k")["status"] == "True"
