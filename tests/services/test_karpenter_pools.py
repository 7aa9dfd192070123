"""A Karpenter user switching over: with ``JOINER_KARPENTER_CRDS`` the scanner plans and launches
from Karpenter's own ``karpenter.sh/v1`` NodePool and ``karpenter.k8s.aws/v1`` EC2NodeClass (no
conversion step), on moto and the Kubernetes emulator through the real adapters; the nodes carry
Karpenter's label keys, the NodePool's status is written on the Karpenter object, and a pod only a
refused Karpenter NodePool could host stays pending, the refusal on that NodePool's status."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from joiner.domain import labels as wk
from joiner.domain.karpenter import CONDITION_TYPE
from joiner.services.provisioning import provision
from tests.services.test_provisioning import E2E, E2E_CLUSTER, moto_server  # noqa: F401 - fixture
from tests.support.fakes import node_json, pod_json
from tests.support.karpenter import CLASSES, POOLS, ec2_node_class, install_karpenter_crds, karpenter_pool, stored
from tests.support.kube_fixtures import kube_emulator  # noqa: F401 - fixture


@pytest.fixture
def e2e(moto_server, kube_emulator) -> Iterator[E2E]:  # type: ignore[no-untyped-def]  # noqa: F811
    world = E2E(moto_server, kube_emulator)
    install_karpenter_crds(kube_emulator)
    node_class = ec2_node_class(
        "karpenter",
        role=f"JoinerNodeRole-{E2E_CLUSTER}",
        subnetSelectorTerms=[{"tags": {"joiner.dev/discovery": E2E_CLUSTER}}],
        securityGroupSelectorTerms=[{"tags": {"joiner.dev/discovery": E2E_CLUSTER}}],
    )
    kube_emulator.apply(stored(node_class))
    pool = karpenter_pool("web", "karpenter")
    pool["spec"]["template"]["metadata"] = {"labels": {"team": "web"}}
    pool["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5"]},
    ]
    kube_emulator.apply(stored(pool))
    yield world
    world.close()


def runtime(e2e: E2E, invocation: str):  # type: ignore[no-untyped-def]
    found = e2e.runtime(invocation)
    found.kube_port.karpenter = True  # what JOINER_KARPENTER_CRDS=true gives KubernetesClient.from_settings
    return found


@pytest.mark.slow
def test_pending_pods_launch_from_karpenters_own_node_pool(e2e: E2E) -> None:
    # workloads written for Karpenter select its label keys
    e2e.emulator.apply(pod_json("web-0", cpu="1", memory="256Mi", node_selector={"karpenter.sh/nodepool": "web", "team": "web"}))
    first = provision(runtime(e2e, "invocation-1"), e2e.clock.now())
    (launched,) = first.launched
    assert launched.node_pool == "web"
    (instance,) = e2e.instances()
    assert instance["InstanceType"].startswith("c5.")
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["joiner.dev/nodepool"] == "web"
    template = e2e.clients.ec2.describe_launch_templates()["LaunchTemplates"][0]["LaunchTemplateId"]
    data = e2e.clients.ec2.describe_launch_template_versions(LaunchTemplateId=template)["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert "team=web" in base64.b64decode(data["UserData"]).decode()  # the template's labels, set by the kubelet
    assert condition_of(e2e, POOLS, "web")["status"] == "True" and condition_of(e2e, CLASSES, "karpenter")["status"] == "True"

    e2e.emulator.apply(
        node_json("ip-10-0-1-5", instance_id=launched.instance_id, zone=launched.zone, instance_type=launched.instance_type, cpu="4", memory="8Gi")
    )
    e2e.clock.advance(40)
    third = provision(runtime(e2e, "invocation-2"), e2e.clock.now())
    assert third.registration.registered == (launched.claim_id,)
    labels = e2e.emulator.get("Node", "ip-10-0-1-5")["metadata"]["labels"]  # type: ignore[index]
    # the keys Karpenter's workloads select on
    assert labels[wk.NODEPOOL] == labels["karpenter.sh/nodepool"] == "web" and labels["karpenter.k8s.aws/instance-family"] == "c5"
    # the NodePool's status, on the Karpenter object: node count, resources, Ready; the condition kept
    status = e2e.emulator.get(POOLS, "web")["status"]  # type: ignore[index]
    assert status["nodes"] == 1 and status["resources"]["cpu"] == "4"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {"Ready": "True", CONDITION_TYPE: "True"}
    assert e2e.emulator.get("NodePool", "web") is None  # no joiner.dev NodePool was made


@pytest.mark.slow
def test_a_pod_only_a_refused_node_pool_could_host_stays_pending_and_the_pool_says_why(e2e: E2E) -> None:
    windows = karpenter_pool("windows", "karpenter")
    windows["spec"]["template"]["spec"]["requirements"] = [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]
    e2e.emulator.apply(stored(windows))
    e2e.emulator.apply(pod_json("iis", cpu="1", memory="256Mi", node_selector={"karpenter.sh/nodepool": "windows"}))
    result = provision(runtime(e2e, "invocation-1"), e2e.clock.now())
    assert result.launched == () and e2e.instances() == []
    refused = condition_of(e2e, POOLS, "windows")
    assert (refused["status"], refused["reason"]) == ("False", "ConversionRefused")
    assert "asks for windows nodes; Joiner launches Linux (AL2023) only" in refused["message"]


def condition_of(e2e: E2E, kind: str, name: str) -> dict:  # type: ignore[type-arg]
    obj = e2e.emulator.get(kind, name)
    assert obj is not None
    (found,) = [c for c in obj["status"]["conditions"] if c["type"] == CONDITION_TYPE]
    return found  # type: ignore[no-any-return]
