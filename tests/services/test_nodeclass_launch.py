"""End to end (moto over HTTP + the Kubernetes emulator, real adapters): each instance type
launches the AL2023 variant it needs, and the scanner writes NodeClass status that the
official Kubernetes client reads back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
import yaml

from joiner.domain.catalog import parse_catalog
from joiner.services.provisioning import provision
from tests.services.test_provisioning import E2E, E2E_CLUSTER, moto_server  # noqa: F401 - moto_server is a fixture
from tests.support.fakes import fake_world, node_class_json, node_pool_json, pod_json
from testworld.aws import ZONES, put_eks_ami_parameters

CRD = Path(__file__).resolve().parents[2] / "manifests" / "crds" / "nodeclasses.joiner.dev.yaml"

#: (name, capacity, labels, on-demand price): a plain type, an NVIDIA GPU type and an Inferentia type.
ACCELERATED_TYPES: tuple[tuple[str, dict[str, str], dict[str, str], float], ...] = (
    ("c5.xlarge", {"cpu": "4", "memory": "8Gi", "pods": "58"}, {}, 0.17),
    (
        "g5.xlarge",
        {"cpu": "4", "memory": "16Gi", "pods": "58", "nvidia.com/gpu": "1"},
        {"joiner.dev/instance-gpu-count": "1", "joiner.dev/instance-gpu-manufacturer": "nvidia", "joiner.dev/instance-gpu-name": "a10g"},
        1.006,
    ),
    (
        "inf2.xlarge",
        {"cpu": "4", "memory": "16Gi", "pods": "58", "aws.amazon.com/neuron": "1"},
        {
            "joiner.dev/instance-accelerator-count": "1",
            "joiner.dev/instance-accelerator-manufacturer": "aws",
            "joiner.dev/instance-accelerator-name": "inferentia",
        },
        0.758,
    ),
)


@pytest.fixture
def world(moto_server, kube_emulator):  # type: ignore[no-untyped-def]  # noqa: F811 - pytest injects the imported fixture
    cluster = E2E(moto_server, kube_emulator)
    yield cluster
    cluster.close()


def accelerated_catalog() -> Any:
    entries = [
        {
            "name": name,
            "capacity": capacity,
            "labels": {"kubernetes.io/arch": "amd64"} | labels,
            "offerings": [{"zone": zone, "capacityType": "on-demand", "price": price} for zone in ZONES],
        }
        for name, capacity, labels, price in ACCELERATED_TYPES
    ]
    return parse_catalog({"region": "us-east-1", "instanceTypes": entries})


def other_amis(world: E2E) -> dict[str, str]:
    """Two moto x86_64 AMIs other than the standard one, published as the NVIDIA and Neuron variants."""
    found = world.clients.ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}, {"Name": "owner-alias", "Values": ["amazon"]}])["Images"]
    ids = sorted(image["ImageId"] for image in found)
    amis = {"standard": ids[0], "nvidia": ids[1], "neuron": ids[2]}
    put_eks_ami_parameters({"x86_64": amis["nvidia"]}, variant="nvidia")
    put_eks_ami_parameters({"x86_64": amis["neuron"]}, variant="neuron")
    return amis


def image_of(world: E2E, instance_id: str) -> str:
    return str(world.clients.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["ImageId"])


class Official:
    """NodeClasses read with the official Kubernetes client (main resource or status subresource)."""

    def __init__(self, world: E2E) -> None:
        self.api = k8s.CustomObjectsApi(k8s.ApiClient(k8s.Configuration(host=world.emulator.url)))

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.api.get_cluster_custom_object("joiner.dev", "v1", "nodeclasses", name))  # type: ignore[call-overload]

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.api.get_cluster_custom_object_status("joiner.dev", "v1", "nodeclasses", name))  # type: ignore[call-overload]


def printer_ready(node_class: dict[str, Any]) -> str:
    """The CRD's Ready printer column, evaluated as kubectl does for this one filter path."""
    columns = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["additionalPrinterColumns"]
    (column,) = [c for c in columns if c["name"] == "Ready"]
    assert column["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    return " ".join(c["status"] for c in (node_class.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready")


@pytest.mark.slow
def test_each_instance_type_launches_the_al2023_variant_it_needs(world: E2E) -> None:
    amis = other_amis(world)
    catalog = accelerated_catalog()
    gpu_taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    world.emulator.apply(node_pool_json("gpu", taints=[gpu_taint], requirements=[{"key": "joiner.dev/instance-gpu-count", "operator": "Exists"}]))
    world.emulator.apply(node_pool_json("neuron", requirements=[{"key": "joiner.dev/instance-accelerator-manufacturer", "operator": "In", "values": ["aws"]}]))
    world.emulator.apply(node_pool_json("default", requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.xlarge"]}]))
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    world.emulator.apply(
        pod_json(
            "train",
            cpu="1",
            memory="1Gi",
            tolerations=[toleration],
            extra_spec={"containers": [{"name": "main", "image": "cuda", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
        )
    )
    world.emulator.apply(
        pod_json(
            "infer",
            cpu="1",
            memory="1Gi",
            extra_spec={"containers": [{"name": "main", "image": "neuron", "resources": {"requests": {"cpu": "1"}, "limits": {"aws.amazon.com/neuron": "1"}}}]},
        )
    )
    world.emulator.apply(pod_json("web", cpu="1", memory="1Gi", node_selector={"joiner.dev/nodepool": "default"}))

    result = provision(world.runtime(catalog=catalog), world.clock.now())

    assert not result.failures, result.failures
    by_type = {launched.instance_type: launched for launched in result.launched}
    assert sorted(by_type) == ["c5.xlarge", "g5.xlarge", "inf2.xlarge"]
    assert image_of(world, by_type["g5.xlarge"].instance_id) == amis["nvidia"]
    assert image_of(world, by_type["inf2.xlarge"].instance_id) == amis["neuron"]
    assert image_of(world, by_type["c5.xlarge"].instance_id) == amis["standard"]


@pytest.mark.slow
def test_a_claim_mixing_gpu_and_plain_types_sends_one_template_per_ami(world: E2E) -> None:
    """A pod that needs no GPU may land on the GPU type when the NodePool asks for type
    flexibility (``minValues``: accelerated types are then kept in the launch, as Karpenter
    keeps them): the fleet carries both templates, each type with its own AMI."""
    amis = other_amis(world)
    world.emulator.apply(
        node_pool_json(
            "default", requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.xlarge", "g5.xlarge"], "minValues": 2}]
        )
    )
    world.emulator.apply(pod_json("web", cpu="1", memory="1Gi"))
    sent: list[dict[str, Any]] = []
    runtime = world.runtime(catalog=accelerated_catalog())
    world.clients.ec2.meta.events.register("provide-client-params.ec2.CreateFleet", lambda params, **_: sent.append(params))
    try:
        result = provision(runtime, world.clock.now())
    finally:
        world.clients.ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet")
    (launched,) = result.launched
    configs = sent[0]["LaunchTemplateConfigs"]
    assert [sorted({o["InstanceType"] for o in c["Overrides"]}) for c in configs] == [["c5.xlarge"], ["g5.xlarge"]]  # cheapest first
    images = {
        tuple(sorted({o["InstanceType"] for o in c["Overrides"]}))[0]: world.clients.ec2.describe_launch_template_versions(
            LaunchTemplateId=c["LaunchTemplateSpecification"]["LaunchTemplateId"]
        )["LaunchTemplateVersions"][0]["LaunchTemplateData"]["ImageId"]
        for c in configs
    }
    assert images == {"c5.xlarge": amis["standard"], "g5.xlarge": amis["nvidia"]}
    assert launched.instance_type == "c5.xlarge" and image_of(world, launched.instance_id) == amis["standard"]


@pytest.mark.slow
def test_node_class_status_is_written_and_read_back_with_the_official_client(world: E2E) -> None:
    amis = other_amis(world)
    world.emulator.apply(node_pool_json("default"))
    custom = Official(world)
    assert printer_ready(custom.get("default")) == ""

    provision(world.runtime(), world.clock.now())

    node_class = custom.status("default")
    status = node_class["status"]
    (ready,) = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("True", "Ready", "")
    assert ready["observedGeneration"] == node_class["metadata"]["generation"] and ready["lastTransitionTime"]
    assert printer_ready(node_class) == "True"
    assert [(s["zone"], s["id"]) for s in status["subnets"]] == sorted(world.network.subnets.items())  # never the decoy
    assert [g["id"] for g in status["securityGroups"]] == sorted(world.network.security_groups)
    by_variant = {
        (
            next(r["values"][0] for r in ami["requirements"] if r["key"] == "kubernetes.io/arch"),
            "nvidia"
            if {"key": "joiner.dev/instance-gpu-manufacturer", "operator": "In", "values": ["nvidia"]} in ami["requirements"]
            else "neuron"
            if {"key": "joiner.dev/instance-accelerator-manufacturer", "operator": "In", "values": ["aws"]} in ami["requirements"]
            else "standard",
        ): ami["id"]
        for ami in status["amis"]
    }
    assert by_variant[("amd64", "standard")] == amis["standard"]
    assert by_variant[("amd64", "nvidia")] == amis["nvidia"] and by_variant[("amd64", "neuron")] == amis["neuron"]
    assert ("arm64", "standard") in by_variant and ("arm64", "neuron") not in by_variant  # no Neuron AMI for arm64

    # Nothing changed: the next round writes nothing (same resourceVersion).
    version = node_class["metadata"]["resourceVersion"]
    world.clock.advance(30)
    provision(world.runtime("invocation-2"), world.clock.now())
    assert custom.get("default")["metadata"]["resourceVersion"] == version


@pytest.mark.slow
def test_node_classes_that_cannot_launch_say_why(world: E2E) -> None:
    other_role: dict[str, Any] = node_class_json("foreign", discovery=E2E_CLUSTER)
    other_role["spec"]["role"] = "SomeoneElsesRole"
    world.emulator.apply(other_role)
    no_subnets: dict[str, Any] = node_class_json("nowhere", discovery="no-such-cluster")
    no_subnets["spec"]["role"] = f"JoinerNodeRole-{E2E_CLUSTER}"
    world.emulator.apply(no_subnets)
    world.emulator.apply(node_pool_json("foreign", node_class="foreign"))
    world.emulator.apply(pod_json("web", cpu="1", memory="1Gi", node_selector={"joiner.dev/nodepool": "foreign"}))

    result = provision(world.runtime(), world.clock.now())

    assert not result.launched and not world.instances()  # never a launch EC2 would refuse with AccessDenied
    custom = Official(world)
    foreign = custom.status("foreign")["status"]
    (ready,) = foreign["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "InstanceProfileNotAllowed")
    assert "SomeoneElsesRole" in ready["message"] and "iam:PassRole" in ready["message"] and foreign["amis"] == []
    assert printer_ready(custom.get("foreign")) == "False"
    nowhere = custom.status("nowhere")["status"]
    assert [(c["status"], c["reason"]) for c in nowhere["conditions"]] == [("False", "SubnetsNotFound")]
    assert nowhere["subnets"] == []
    pool = world.emulator.get("NodePool", "foreign")["status"]
    (pool_ready,) = pool["conditions"]
    assert pool_ready["status"] == "False" and "iam:PassRole" in pool_ready["message"]
    healthy = custom.status("default")["status"]
    assert [c["status"] for c in healthy["conditions"]] == ["True"]  # an unused NodeClass is resolved too


# ---------------------------------------------------------------- with fakes: AMI choice per claim


def mixed_pool_world(missing: set[str], min_values: int | None = None):  # type: ignore[no-untyped-def]
    """A NodePool of c5.xlarge and g5.xlarge; ``min_values`` keeps the GPU type in launches of
    pods that need no GPU (otherwise left out while a generic type fits, as Karpenter does)."""
    world = fake_world(catalog=accelerated_catalog())
    world.ec2.missing_variants = missing
    world.kube.add("node_classes", node_class_json(discovery=world.cluster))
    requirement: dict[str, object] = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.xlarge", "g5.xlarge"]}
    if min_values is not None:
        requirement["minValues"] = min_values
    world.kube.add("node_pools", node_pool_json(requirements=[requirement]))
    return world


def test_types_whose_variant_has_no_ami_are_left_out_while_another_launches() -> None:
    world = mixed_pool_world({"nvidia"})
    world.kube.add("pods", pod_json("web", cpu="1", memory="1Gi"))
    result = provision(world.runtime(), world.clock.now())
    (launched,) = result.launched
    (request,) = world.ec2.fleet_requests
    assert {o.instance_type for o in request.overrides} == {"c5.xlarge"} and launched.instance_type == "c5.xlarge"
    assert world.ec2.instances[launched.instance_id].image_id == "ami-amd64-131"


def test_both_variants_resolved_each_type_names_its_template() -> None:
    world = mixed_pool_world(set(), min_values=2)
    world.kube.add("pods", pod_json("web", cpu="1", memory="1Gi"))
    provision(world.runtime(), world.clock.now())
    (request,) = world.ec2.fleet_requests
    templates = {o.instance_type: (o.launch_template or request.launch_template).id for o in request.overrides}
    amis = {name: world.ec2.template_inputs[template]["ami"] for name, template in templates.items()}
    assert amis == {"c5.xlarge": "ami-amd64-131", "g5.xlarge": "ami-amd64-nvidia-131"}
    assert request.launch_template.id == templates["c5.xlarge"]  # the cheapest type's template leads


def test_a_gpu_claim_without_its_ami_fails_with_the_lookup_error() -> None:
    world = mixed_pool_world({"nvidia"})
    world.kube.add(
        "pods",
        pod_json(
            "train",
            cpu="1",
            memory="1Gi",
            extra_spec={"containers": [{"name": "main", "image": "cuda", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]},
        ),
    )
    result = provision(world.runtime(), world.clock.now())
    assert not result.launched and not world.ec2.fleet_requests
    (failure,) = result.failures
    assert failure.reason == "AMINotFound" and "nvidia" in failure.message


def test_status_stays_within_the_crds_bounds_and_invalid_objects_say_why() -> None:
    from joiner.ports import Subnet
    from joiner.services.pool_status import STATUS_MAX_ITEMS

    world = fake_world()
    tag = ("joiner.dev/discovery", world.cluster)
    world.ec2.subnets = [Subnet(id=f"subnet-{i:08x}", zone="us-east-1a", available_ips=10, tags=dict([tag])) for i in range(STATUS_MAX_ITEMS + 200)]
    world.kube.add("node_classes", node_class_json(discovery=world.cluster))
    broken: dict[str, Any] = node_class_json("broken", discovery=world.cluster)
    broken["spec"]["amiFamily"] = "Bottlerocket"  # what the CRD refuses, should it get past it (an older CRD)
    world.kube.add("node_classes", broken)
    provision(world.runtime(), world.clock.now())
    statuses = dict(world.kube.class_status_patches)
    assert len(statuses["default"]["subnets"]) == STATUS_MAX_ITEMS
    assert statuses["default"]["subnets"][0]["id"] == "subnet-00000000"
    (ready,) = statuses["broken"]["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec") and "'Bottlerocket' is not supported" in ready["message"]
    # the next round changes nothing and writes nothing
    world.clock.advance(30)
    provision(world.runtime(), world.clock.now())
    assert len(world.kube.class_status_patches) == 2
