"""Ec2Adapter against moto (in-process): selectors, AMIs, launch templates, CreateFleet,
instances, cluster; capacity errors and throttling injected with botocore event hooks."""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pytest
import yaml
from moto import mock_aws

from joiner.adapters.aws import AwsClients
from joiner.adapters.ec2 import LIVE_INSTANCE_STATES, Ec2Adapter, NodeClassConfigError
from joiner.domain import labels as wk
from joiner.domain.launch import CLIENT_TOKEN_TAG, CLUSTER_TAG, build_fleet_request, launch_tags
from joiner.domain.model import KubeletConfig, NodeClaimPlan, NodeClass, OfferingKey, SelectorTerm, Taint
from joiner.domain.requirements import Requirements
from joiner.domain.resources import Resources
from joiner.domain.userdata import NODECONFIG_CONTENT_TYPE, parse_user_data
from joiner.ports import CAPACITY_BLOCK, LAUNCH_TEMPLATE_NOT_FOUND_CODES, Ec2Error, FleetRequest, LaunchTemplateNotFound
from tests.support.aws import ErrorInjector, inject_capacity_errors, inject_error
from testworld.aws import K8S_VERSION, REGION, ZONES, Network, create_eks_cluster, create_network, fake_credentials, moto_amis, put_eks_ami_parameters

CLUSTER = "demo"
_ids = itertools.count()


class FixedClock:
    def __init__(self) -> None:
        self.moment = datetime(2025, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.moment


@dataclass
class World:
    clients: AwsClients
    network: Network
    amis: dict[str, str]
    clock: FixedClock

    def adapter(self) -> Ec2Adapter:
        return Ec2Adapter(self.clients.ec2, self.clients.ssm, self.clients.eks, CLUSTER, self.clock)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with fake_credentials(), mock_aws():
        clients = AwsClients(REGION)
        network = create_network(clients.ec2, CLUSTER)
        create_eks_cluster(clients.eks, CLUSTER, list(network.subnets.values()))
        amis = moto_amis(clients.ec2)
        put_eks_ami_parameters(amis)
        put_eks_ami_parameters({"x86_64": amis["arm64"]}, release="v20240807")  # a distinct pinned value
        accelerated = accelerated_amis(clients.ec2)
        put_eks_ami_parameters({"x86_64": accelerated["nvidia"], "arm64": accelerated["nvidia-arm64"]}, variant="nvidia")
        put_eks_ami_parameters({"x86_64": accelerated["neuron"]}, variant="neuron")
        amis.update(accelerated)
        yield World(clients, network, amis, FixedClock())


def accelerated_amis(ec2) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Moto AMIs other than :func:`moto_amis`'s, standing in for the NVIDIA and Neuron variants."""

    def images(arch: str) -> list[str]:
        found = ec2.describe_images(Filters=[{"Name": "architecture", "Values": [arch]}, {"Name": "owner-alias", "Values": ["amazon"]}])["Images"]
        return sorted(image["ImageId"] for image in found)

    x86, arm = images("x86_64"), images("arm64")
    return {"nvidia": x86[1], "neuron": x86[2], "nvidia-arm64": arm[1]}


@pytest.fixture()
def ec2(world: World) -> Ec2Adapter:
    return world.adapter()


def discovery(world: World) -> tuple[SelectorTerm, ...]:
    return (SelectorTerm(tags=(world.network.discovery_tag,)),)


def node_class(world: World, name: str | None = None, **changes) -> NodeClass:
    base = NodeClass(
        name=name or f"nc{next(_ids)}",
        subnet_selector_terms=discovery(world),
        security_group_selector_terms=discovery(world),
        role=f"arn:aws:iam::123456789012:role/JoinerNodeRole-{CLUSTER}",
        tags={"team": "a"},
    )
    return replace(base, **changes)


def template_data(world: World, template_id: str) -> dict:
    versions = world.clients.ec2.describe_launch_template_versions(LaunchTemplateId=template_id)["LaunchTemplateVersions"]
    assert len(versions) == 1
    return versions[0]["LaunchTemplateData"]


def joiner_templates(world: World) -> list[dict]:
    return world.clients.ec2.describe_launch_templates(Filters=[{"Name": "tag:joiner.dev/cluster", "Values": [CLUSTER]}])["LaunchTemplates"]


# ---------------------------------------------------------------- selectors


def test_subnets_by_discovery_tag_sorted_by_zone(world: World, ec2: Ec2Adapter) -> None:
    subnets = ec2.resolve_subnets(discovery(world))
    assert [(s.zone, s.id) for s in subnets] == [(z, world.network.subnets[z]) for z in ZONES]
    assert world.network.decoy_subnet not in {s.id for s in subnets}
    assert all(s.available_ips > 0 for s in subnets)
    assert subnets[0].tags["joiner.dev/discovery"] == CLUSTER


def test_subnets_say_whether_they_assign_public_addresses(world: World, ec2: Ec2Adapter) -> None:
    decoy = world.network.decoy_subnet
    assert [s.map_public_ip for s in ec2.resolve_subnets(discovery(world))] == [False] * len(ZONES)
    world.clients.ec2.modify_subnet_attribute(SubnetId=decoy, MapPublicIpOnLaunch={"Value": True})
    try:
        (subnet,) = ec2.resolve_subnets((SelectorTerm(id=decoy),))
        assert subnet.map_public_ip is True
    finally:
        world.clients.ec2.modify_subnet_attribute(SubnetId=decoy, MapPublicIpOnLaunch={"Value": False})


def test_subnet_terms_union_ids_names_and_wildcards(world: World, ec2: Ec2Adapter) -> None:
    by_id = ec2.resolve_subnets((SelectorTerm(id=world.network.decoy_subnet), SelectorTerm(id=world.network.subnets["us-east-1b"])))
    assert [s.id for s in by_id] == sorted(
        [world.network.decoy_subnet, world.network.subnets["us-east-1b"]], key=lambda i: ("us-east-1a" if i == world.network.decoy_subnet else "us-east-1b", i)
    )
    wildcard = ec2.resolve_subnets((SelectorTerm(tags=(("joiner.dev/discovery", "*"), ("Name", "*"))),))
    assert {s.id for s in wildcard} >= set(world.network.subnets.values())
    assert world.network.decoy_subnet not in {s.id for s in wildcard}
    named = ec2.resolve_subnets((SelectorTerm(name=f"{CLUSTER}-private-us-east-1c"),))
    assert [s.id for s in named] == [world.network.subnets["us-east-1c"]]
    # fields of one term must all match
    assert ec2.resolve_subnets((SelectorTerm(id=world.network.decoy_subnet, tags=(world.network.discovery_tag,)),)) == []


def test_security_groups_by_tag_name_and_id(world: World, ec2: Ec2Adapter) -> None:
    assert ec2.resolve_security_groups(discovery(world)) == world.network.security_groups
    named = ec2.resolve_security_groups((SelectorTerm(name=f"{CLUSTER}-extra"),))
    assert named == [world.network.named_security_group]
    both = ec2.resolve_security_groups((SelectorTerm(id=world.network.named_security_group), *discovery(world)))
    assert both == sorted([*world.network.security_groups, world.network.named_security_group])


def test_empty_selector_term_is_a_config_error(ec2: Ec2Adapter) -> None:
    with pytest.raises(NodeClassConfigError, match=r"subnetSelectorTerms\[0\]: selector term is empty"):
        ec2.resolve_subnets((SelectorTerm(),))


# ---------------------------------------------------------------- AMIs


def test_default_alias_reads_the_eks_ssm_parameter_per_arch(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(world)
    assert ec2.resolve_ami(nc, K8S_VERSION, "amd64") == world.amis["x86_64"]
    assert ec2.resolve_ami(nc, K8S_VERSION, "arm64") == world.amis["arm64"]


def test_pinned_alias_reads_the_release_parameter(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(world, ami_selector_terms=(SelectorTerm(alias="al2023@v20240807"),))
    assert ec2.resolve_ami(nc, K8S_VERSION, "amd64") == world.amis["arm64"]  # the distinct pinned value
    missing = node_class(world, ami_selector_terms=(SelectorTerm(alias="al2023@v20990101"),))
    with pytest.raises(Ec2Error) as error:
        ec2.resolve_ami(missing, K8S_VERSION, "amd64")
    assert error.value.code == "AMINotFound"


def test_accelerated_variants_read_their_own_parameters(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(world)
    assert ec2.resolve_ami(nc, K8S_VERSION, "amd64", "nvidia") == world.amis["nvidia"]
    assert ec2.resolve_ami(nc, K8S_VERSION, "arm64", "nvidia") == world.amis["nvidia-arm64"]
    assert ec2.resolve_ami(nc, K8S_VERSION, "amd64", "neuron") == world.amis["neuron"]
    assert ec2.resolve_ami(nc, K8S_VERSION, "amd64", "standard") == world.amis["x86_64"]
    assert len({world.amis[k] for k in ("x86_64", "nvidia", "neuron")}) == 3
    with pytest.raises(Ec2Error) as error:  # EKS publishes no arm64 Neuron AMI: never asked for
        ec2.resolve_ami(nc, K8S_VERSION, "arm64", "neuron")
    assert error.value.code == "AMINotFound" and "neuron" in str(error.value)
    pinned = node_class(world, ami_selector_terms=(SelectorTerm(id=world.amis["x86_64"]),))
    assert ec2.resolve_ami(pinned, K8S_VERSION, "amd64", "nvidia") == world.amis["x86_64"]  # chosen AMIs serve every type


def test_unsupported_alias_and_mixed_terms_are_config_errors(world: World, ec2: Ec2Adapter) -> None:
    with pytest.raises(NodeClassConfigError, match="bottlerocket@latest"):
        ec2.resolve_ami(node_class(world, ami_selector_terms=(SelectorTerm(alias="bottlerocket@latest"),)), K8S_VERSION, "amd64")
    with pytest.raises(NodeClassConfigError, match="only term"):
        ec2.resolve_ami(node_class(world, ami_selector_terms=(SelectorTerm(alias="al2023@latest"), SelectorTerm(id="ami-1"))), K8S_VERSION, "amd64")
    with pytest.raises(NodeClassConfigError, match="amiFamily"):
        ec2.resolve_ami(node_class(world, ami_family="Bottlerocket"), K8S_VERSION, "amd64")


def test_amis_by_tags_pick_the_matching_architecture(world: World, ec2: Ec2Adapter) -> None:
    tag = {"Key": "joiner.dev/ami", "Value": "golden"}
    world.clients.ec2.create_tags(Resources=[world.amis["x86_64"], world.amis["arm64"]], Tags=[tag])
    nc = node_class(world, ami_selector_terms=(SelectorTerm(tags=(("joiner.dev/ami", "golden"),)),))
    assert ec2.resolve_ami(nc, K8S_VERSION, "arm64") == world.amis["arm64"]
    assert ec2.resolve_ami(nc, K8S_VERSION, "amd64") == world.amis["x86_64"]
    name = world.clients.ec2.describe_images(ImageIds=[world.amis["arm64"]])["Images"][0]["Name"]
    by_name = node_class(world, ami_selector_terms=(SelectorTerm(name=name),))
    assert ec2.resolve_ami(by_name, K8S_VERSION, "arm64") == world.amis["arm64"]
    by_id_wrong_arch = node_class(world, ami_selector_terms=(SelectorTerm(id=world.amis["x86_64"]),))
    with pytest.raises(Ec2Error, match="no available arm64 AMI"):
        ec2.resolve_ami(by_id_wrong_arch, K8S_VERSION, "arm64")


# ---------------------------------------------------------------- launch templates


def cluster_info(ec2: Ec2Adapter):
    return ec2.describe_cluster(CLUSTER)


def test_launch_template_is_created_once_and_reused(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(world)
    sgs = ec2.resolve_security_groups(nc.security_group_selector_terms)
    labels = {"joiner.dev/nodepool": "default", "joiner.dev/capacity-type": "spot"}
    first = ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), sgs, world.amis["x86_64"], labels=labels)
    again = ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), sgs, world.amis["x86_64"], labels=labels)
    cold = world.adapter().ensure_launch_template(nc, "amd64", cluster_info(ec2), sgs, world.amis["x86_64"], labels=labels)
    assert first == again == cold
    assert first.name.startswith(f"joiner-{CLUSTER}-{nc.name}-amd64-")
    assert len(first.name) <= 128
    assert [t["LaunchTemplateId"] for t in joiner_templates(world) if t["LaunchTemplateName"] == first.name] == [first.id]


def test_changed_node_class_or_labels_yield_a_new_template(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(world)
    info, sgs, ami = cluster_info(ec2), world.network.security_groups, world.amis["x86_64"]
    original = ec2.ensure_launch_template(nc, "amd64", info, sgs, ami)
    changed = ec2.ensure_launch_template(replace(nc, kubelet=KubeletConfig(max_pods=20)), "amd64", info, sgs, ami)
    relabelled = ec2.ensure_launch_template(nc, "amd64", info, sgs, ami, labels={"team": "b"})
    new_ami = ec2.ensure_launch_template(nc, "amd64", info, sgs, world.amis["arm64"])
    names = {original.name, changed.name, relabelled.name, new_ami.name}
    assert len(names) == 4 and len({original.id, changed.id, relabelled.id, new_ami.id}) == 4
    existing = {t["LaunchTemplateName"] for t in joiner_templates(world)}
    assert names <= existing  # old ones stay until gc removes them
    listed = {info.ref.name: info.node_class for info in ec2.list_launch_templates()}
    assert all(listed[name] == nc.name for name in names)


def test_launch_template_contents(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(world, kubelet=KubeletConfig(max_pods=29), user_data="#!/bin/bash\necho extra\n")
    taints = (Taint("dedicated", "gpu", "NoSchedule"), Taint("joiner.dev/unregistered", "", "NoExecute"))
    ref = ec2.ensure_launch_template(
        nc,
        "arm64",
        cluster_info(ec2),
        world.network.security_groups,
        world.amis["arm64"],
        labels={"joiner.dev/nodepool": "gpu", "team": "a"},
        taints=taints,
    )
    data = template_data(world, ref.id)
    assert data["ImageId"] == world.amis["arm64"]
    assert data["IamInstanceProfile"] == {"Name": f"JoinerNodeRole-{CLUSTER}"}
    assert sorted(data["SecurityGroupIds"]) == world.network.security_groups
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    assert data["BlockDeviceMappings"] == [
        {"DeviceName": "/dev/xvda", "Ebs": {"DeleteOnTermination": True, "Encrypted": True, "VolumeSize": 20, "VolumeType": "gp3"}}
    ]
    specs = {s["ResourceType"]: {t["Key"]: t["Value"] for t in s["Tags"]} for s in data["TagSpecifications"]}
    # Every resource the launch creates carries the cluster tag the launch policy requires
    # (aws:RequestTag on network-interface too, as Karpenter tags it).
    assert {"instance", "network-interface", "volume"} <= set(specs)  # moto lists the launch-template tags here too
    for resource in ("instance", "volume", "network-interface"):
        assert specs[resource]["joiner.dev/cluster"] == CLUSTER
        assert specs[resource][f"kubernetes.io/cluster/{CLUSTER}"] == "owned"
        assert specs[resource]["team"] == "a"
        assert specs[resource]["joiner.dev/nodeclass"] == nc.name

    parts = parse_user_data(base64.b64decode(data["UserData"]).decode())
    assert [p.content_type for p in parts] == [NODECONFIG_CONTENT_TYPE, 'text/x-shellscript; charset="us-ascii"']
    config = yaml.safe_load(parts[0].content)
    cluster = cluster_info(ec2)
    assert config["spec"]["cluster"]["name"] == CLUSTER
    assert config["spec"]["cluster"]["apiServerEndpoint"] == cluster.endpoint
    assert config["spec"]["cluster"]["cidr"] == "10.100.0.0/16"
    assert config["spec"]["kubelet"]["config"]["maxPods"] == 29
    assert config["spec"]["kubelet"]["config"]["clusterDNS"] == ["10.100.0.10"]
    assert "--node-labels=joiner.dev/nodepool=gpu,team=a" in config["spec"]["kubelet"]["flags"]
    assert "--register-with-taints=dedicated=gpu:NoSchedule,joiner.dev/unregistered:NoExecute" in config["spec"]["kubelet"]["flags"]


def test_raid0_launch_templates_tell_nodeadm_to_stripe_the_instance_store(world: World, ec2: Ec2Adapter) -> None:
    configs = {}
    for policy in (None, "RAID0"):
        nc = node_class(world, instance_store_policy=policy)
        ref = ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"])
        parts = parse_user_data(base64.b64decode(template_data(world, ref.id)["UserData"]).decode())
        configs[policy] = yaml.safe_load(parts[0].content)
    assert configs["RAID0"]["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    assert "instance" not in configs[None]["spec"]


def test_block_devices_metadata_and_profile_from_the_node_class(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(
        world,
        role=None,
        instance_profile="custom-profile",
        block_device_mappings=({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "io2", "iops": 3000}},),
        metadata_options={"httpPutResponseHopLimit": 2, "httpTokens": "required"},
    )
    ref = ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"])
    data = template_data(world, ref.id)
    assert data["IamInstanceProfile"] == {"Name": "custom-profile"}
    assert data["BlockDeviceMappings"][0]["Ebs"] == {"DeleteOnTermination": True, "Encrypted": True, "Iops": 3000, "VolumeSize": 100, "VolumeType": "io2"}
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2


@pytest.mark.parametrize(
    ("changes", "allowed"),
    [
        ({}, True),  # the node role, by ARN
        ({"role": f"JoinerNodeRole-{CLUSTER}"}, True),  # by name
        ({"role": None, "instance_profile": f"JoinerNodeRole-{CLUSTER}"}, True),  # its instance profile
        ({"role": "arn:aws:iam::123456789012:role/AdminRole"}, False),
        ({"role": None, "instance_profile": "AdminProfile"}, False),
    ],
)
def test_a_deployed_adapter_passes_only_its_node_role(world: World, changes, allowed) -> None:
    """iam:PassRole covers only the stack's node role: a NodeClass naming another role or
    profile is rejected with a clear message instead of failing every launch with AccessDenied."""
    deployed = Ec2Adapter(world.clients.ec2, world.clients.ssm, world.clients.eks, CLUSTER, world.clock, default_instance_profile=f"JoinerNodeRole-{CLUSTER}")
    nc = node_class(world, **changes)
    launch = lambda: deployed.ensure_launch_template(nc, "amd64", cluster_info(deployed), world.network.security_groups, world.amis["x86_64"])  # noqa: E731
    if allowed:
        assert template_data(world, launch().id)["IamInstanceProfile"] == {"Name": f"JoinerNodeRole-{CLUSTER}"}
    else:
        with pytest.raises(NodeClassConfigError, match=f"only its node role JoinerNodeRole-{CLUSTER}") as error:
            launch()
        assert nc.name in str(error.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"role": None, "instance_profile": None}, "spec.role or spec.instanceProfile"),
        ({"block_device_mappings": ({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20"}},)}, r"blockDeviceMappings\[0\].ebs.volumeSize"),
        ({"block_device_mappings": ({"deviceName": "xvda", "ebs": {"volumeSize": "20Gi"}},)}, "deviceName"),
        ({"metadata_options": {"httpTokens": "sometimes"}}, "metadataOptions.httpTokens"),
        ({"tags": {"aws:reserved": "x"}}, "aws:"),
        ({"user_data": "plain words"}, "spec.userData"),
    ],
)
def test_invalid_node_class_is_rejected_naming_the_field(world: World, ec2: Ec2Adapter, changes, message) -> None:
    nc = node_class(world, **changes)
    with pytest.raises(NodeClassConfigError, match=message) as error:
        ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"])
    assert nc.name in str(error.value)
    assert error.value.code == "InvalidNodeClass"


def test_concurrent_creator_already_exists_is_resolved_by_describing(world: World) -> None:
    """Another invocation creates the same template between our describe and our create."""
    ours = world.clients.ec2
    adapter = world.adapter()
    nc = node_class(world)
    created: list[str] = []

    def create_first(params, **_):
        if not created:
            name = params["body"]["LaunchTemplateName"]
            created.append(
                rival_client.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={"ImageId": world.amis["x86_64"]})["LaunchTemplate"][
                    "LaunchTemplateId"
                ]
            )

    rival_client = AwsClients(REGION).ec2
    ours.meta.events.register_first("before-call.ec2.CreateLaunchTemplate", create_first)
    try:
        ref = adapter.ensure_launch_template(nc, "amd64", cluster_info(adapter), world.network.security_groups, world.amis["x86_64"])
    finally:
        ours.meta.events.unregister("before-call.ec2.CreateLaunchTemplate", create_first)
    assert ref.id == created[0]


# ---------------------------------------------------------------- fleet


def fleet_request_for(world: World, ec2: Ec2Adapter, nc: NodeClass, claim_id: str, attempt: int = 0) -> FleetRequest:
    """An on-demand request for ``claim_id`` whose template comes from ``ensure_launch_template`` (cached or not)."""
    template = ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"])
    types = ("c5.large", "m5.large")
    plan = NodeClaimPlan("default", types, ZONES, ("on-demand",), ("ns/p",), 0.1, Requirements(), Resources())
    prices = {OfferingKey(t, z, "on-demand"): 0.01 * (i + 1) for i, t in enumerate(types) for z in ZONES}
    return build_fleet_request(
        plan,
        claim_id,
        "on-demand",
        ec2.resolve_subnets(discovery(world)),
        template,
        prices,
        frozenset(),
        launch_tags(CLUSTER, "default", claim_id, nc.tags),
        attempt=attempt,
    )


def fleet_request(
    world: World, ec2: Ec2Adapter, capacity_type: str, types=("c5.large", "m5.large"), claim_id: str | None = None, attempt: int = 0
) -> FleetRequest:
    nc = node_class(world)
    template = ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"])
    claim_id = claim_id or f"claim-{next(_ids)}"
    plan = NodeClaimPlan("default", tuple(types), ZONES, ("spot", "on-demand"), ("ns/p",), 0.1, Requirements(), Resources())
    prices = {OfferingKey(t, z, ct): 0.01 * (i + 1) + 0.001 * zi for i, t in enumerate(types) for zi, z in enumerate(ZONES) for ct in ("spot", "on-demand")}
    return build_fleet_request(
        plan,
        claim_id,
        capacity_type,
        ec2.resolve_subnets(discovery(world)),
        template,
        prices,
        frozenset(),
        launch_tags(CLUSTER, "default", claim_id, nc.tags),
        attempt=attempt,
    )


def instance(world: World, instance_id: str) -> dict:
    return world.clients.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


@pytest.mark.parametrize("capacity_type", ["on-demand", "spot"])
def test_create_fleet_launches_the_first_override_with_tags(world: World, ec2: Ec2Adapter, capacity_type: str) -> None:
    request = fleet_request(world, ec2, capacity_type)
    result = ec2.create_fleet(request)
    assert result.errors == ()
    assert len(result.instances) == 1
    launched = result.instances[0]
    first = request.overrides[0]
    assert (launched.instance_type, launched.zone, launched.subnet_id, launched.capacity_type) == (
        first.instance_type,
        first.zone,
        first.subnet_id,
        capacity_type,
    )
    raw = instance(world, launched.instance_id)
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    claim_id = request.tags[wk.NODECLAIM]
    assert tags["joiner.dev/cluster"] == CLUSTER
    assert tags[f"kubernetes.io/cluster/{CLUSTER}"] == "owned"
    assert tags["joiner.dev/nodepool"] == "default"
    assert tags["joiner.dev/nodeclaim"] == claim_id
    assert tags["joiner.dev/managed-by"] == CLUSTER
    assert tags["Name"] == f"{CLUSTER}/default"
    assert tags[CLIENT_TOKEN_TAG] == request.client_token
    assert raw["InstanceType"] == first.instance_type
    assert raw["SubnetId"] == first.subnet_id
    assert (raw.get("InstanceLifecycle") == "spot") == (capacity_type == "spot")
    record = ec2.describe_instances([launched.instance_id])[0]
    assert record.capacity_type == capacity_type and record.zone == first.zone and record.state == "running"


def test_one_launch_template_config_per_ami_variant(world: World, ec2: Ec2Adapter) -> None:
    """GPU types in a claim name the NVIDIA template, the rest the standard one: one
    LaunchTemplateConfig each, cheapest first, and the instance runs its type's AMI."""
    nc = node_class(world)
    info, groups = cluster_info(ec2), world.network.security_groups
    standard = ec2.ensure_launch_template(nc, "amd64", info, groups, world.amis["x86_64"])
    nvidia = ec2.ensure_launch_template(nc, "amd64", info, groups, world.amis["nvidia"])
    assert standard != nvidia
    types = ("g5.xlarge", "c5.large")  # the GPU type is the cheaper one here
    claim_id = f"claim-{next(_ids)}"
    plan = NodeClaimPlan("default", types, ZONES, ("on-demand",), ("ns/p",), 0.1, Requirements(), Resources())
    prices = {OfferingKey(t, z, "on-demand"): 0.01 * (i + 1) for i, t in enumerate(types) for z in ZONES}
    request = build_fleet_request(
        plan,
        claim_id,
        "on-demand",
        ec2.resolve_subnets(discovery(world)),
        nvidia,
        prices,
        frozenset(),
        launch_tags(CLUSTER, "default", claim_id, nc.tags),
        templates={"g5.xlarge": nvidia, "c5.large": standard},
    )
    assert request.launch_templates == (nvidia, standard)
    sent: list[dict] = []
    world.clients.ec2.meta.events.register("provide-client-params.ec2.CreateFleet", lambda params, **_: sent.append(params))
    try:
        result = ec2.create_fleet(request)
    finally:
        world.clients.ec2.meta.events.unregister("provide-client-params.ec2.CreateFleet")
    configs = sent[0]["LaunchTemplateConfigs"]
    assert [c["LaunchTemplateSpecification"]["LaunchTemplateId"] for c in configs] == [nvidia.id, standard.id]
    assert {o["InstanceType"] for o in configs[0]["Overrides"]} == {"g5.xlarge"}
    assert {o["InstanceType"] for o in configs[1]["Overrides"]} == {"c5.large"}
    (launched,) = result.instances
    raw = instance(world, launched.instance_id)
    assert (raw["InstanceType"], raw["ImageId"]) == ("g5.xlarge", world.amis["nvidia"])


def test_same_client_token_twice_launches_once(world: World, ec2: Ec2Adapter) -> None:
    request = fleet_request(world, ec2, "on-demand")
    first = ec2.create_fleet(request)
    second = ec2.create_fleet(request)
    next_attempt = ec2.create_fleet(fleet_request(world, ec2, "on-demand", claim_id=request.tags[wk.NODECLAIM], attempt=1))
    assert first.instances[0].instance_id == second.instances[0].instance_id == next_attempt.instances[0].instance_id
    tagged = world.clients.ec2.describe_instances(Filters=[{"Name": "tag:joiner.dev/nodeclaim", "Values": [request.tags[wk.NODECLAIM]]}])["Reservations"]
    assert sum(len(r["Instances"]) for r in tagged) == 1


def test_capacity_error_on_one_override_falls_through_to_the_next(world: World, ec2: Ec2Adapter) -> None:
    request = fleet_request(world, ec2, "spot")
    failing = (request.overrides[0].instance_type, request.overrides[0].zone)
    injector = inject_capacity_errors(world.clients.ec2, lambda t, z: (t, z) == failing)
    try:
        result = ec2.create_fleet(request)
    finally:
        world.clients.ec2.meta.events.unregister("before-call.ec2.CreateFleet", injector.before_call)
        world.clients.ec2.meta.events.unregister("after-call.ec2.CreateFleet", injector.after_call)
    assert injector.calls == 1
    assert len(result.instances) == 1
    assert (result.instances[0].instance_type, result.instances[0].zone) == (request.overrides[1].instance_type, request.overrides[1].zone)
    assert len(result.errors) == 1
    error = result.errors[0]
    assert (error.code, error.instance_type, error.zone, error.subnet_id, error.capacity_type) == (
        "InsufficientInstanceCapacity",
        failing[0],
        failing[1],
        request.overrides[0].subnet_id,
        "spot",
    )
    assert error.is_capacity_error


def test_capacity_errors_everywhere_launch_nothing(world: World, ec2: Ec2Adapter) -> None:
    request = fleet_request(world, ec2, "on-demand")
    injector = inject_capacity_errors(world.clients.ec2, lambda t, z: True)
    try:
        result = ec2.create_fleet(request)
    finally:
        world.clients.ec2.meta.events.unregister("before-call.ec2.CreateFleet", injector.before_call)
        world.clients.ec2.meta.events.unregister("after-call.ec2.CreateFleet", injector.after_call)
    assert result.instances == ()
    assert {(e.instance_type, e.zone, e.capacity_type) for e in result.errors} == {(o.instance_type, o.zone, "on-demand") for o in request.overrides}
    assert all(e.is_capacity_error for e in result.errors)
    claim = request.tags[wk.NODECLAIM]
    assert not [i for i in ec2.list_cluster_instances(CLUSTER) if i.tags.get(wk.NODECLAIM) == claim]


@pytest.fixture()
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore sleeps between retries (endpoint.py ``time.sleep``); record instead of waiting."""
    slept: list[float] = []
    monkeypatch.setattr("botocore.endpoint.time.sleep", slept.append)
    return slept


def test_throttling_is_retried_by_botocore_then_raised(world: World, ec2: Ec2Adapter, no_sleep: list[float]) -> None:
    request = fleet_request(world, ec2, "spot")
    injector = inject_error(world.clients.ec2, "CreateFleet", ErrorInjector())
    try:
        with pytest.raises(Ec2Error) as error:
            ec2.create_fleet(request)
    finally:
        world.clients.ec2.meta.events.unregister("before-send.ec2.CreateFleet", injector)
    assert error.value.code == "RequestLimitExceeded"
    assert injector.attempts == 5  # standard mode, max 5 attempts
    assert len(no_sleep) == 4 and all(delay >= 0 for delay in no_sleep)


def test_transient_throttling_recovers_inside_the_call(world: World, ec2: Ec2Adapter, no_sleep: list[float]) -> None:
    request = fleet_request(world, ec2, "on-demand")
    injector = inject_error(world.clients.ec2, "CreateFleet", ErrorInjector(failures=2))
    try:
        result = ec2.create_fleet(request)
    finally:
        world.clients.ec2.meta.events.unregister("before-send.ec2.CreateFleet", injector)
    assert injector.attempts == 3
    assert len(result.instances) == 1


def test_unknown_launch_template_is_an_ec2_error_with_code(world: World, ec2: Ec2Adapter) -> None:
    request = fleet_request(world, ec2, "on-demand")
    bogus = replace(request, launch_template=replace(request.launch_template, id="lt-0000000000000000"), tags={})
    with pytest.raises(Ec2Error) as error:
        ec2.create_fleet(bogus)
    assert error.value.code.startswith("InvalidLaunchTemplate")


def test_template_deleted_behind_the_adapters_back_is_forgotten_and_recreated(world: World) -> None:
    adapter = world.adapter()
    nc = node_class(world)
    first_ref = adapter.ensure_launch_template(nc, "amd64", cluster_info(adapter), world.network.security_groups, world.amis["x86_64"])
    first = adapter.create_fleet(fleet_request_for(world, adapter, nc, "claim-lt-a"))
    assert len(first.instances) == 1
    world.clients.ec2.delete_launch_template(LaunchTemplateId=first_ref.id)  # gc, in another function

    stale = fleet_request_for(world, adapter, nc, "claim-lt-b")
    assert stale.launch_template == first_ref  # the adapter still has it cached
    with pytest.raises(LaunchTemplateNotFound) as error:
        adapter.create_fleet(stale)
    assert error.value.code in LAUNCH_TEMPLATE_NOT_FOUND_CODES and error.value.template == first_ref
    assert isinstance(error.value, Ec2Error)
    assert not [i for i in adapter.list_cluster_instances(CLUSTER) if i.tags.get(wk.NODECLAIM) == "claim-lt-b"]

    fresh = fleet_request_for(world, adapter, nc, "claim-lt-b")  # same claim, same attempt: same token
    assert fresh.launch_template.name == first_ref.name and fresh.launch_template.id != first_ref.id
    assert fresh.client_token == stale.client_token
    second = adapter.create_fleet(fresh)
    assert len(second.instances) == 1
    assert [i.instance_id for i in adapter.list_cluster_instances(CLUSTER) if i.tags.get(wk.NODECLAIM) == "claim-lt-b"] == [second.instances[0].instance_id]


def test_fleet_errors_naming_a_missing_template_raise_template_not_found(world: World) -> None:
    adapter = world.adapter()
    nc = node_class(world)
    request = fleet_request_for(world, adapter, nc, "claim-lt-c")
    injector = inject_capacity_errors(world.clients.ec2, lambda t, z: True, code="InvalidLaunchTemplateId.NotFound")
    try:
        with pytest.raises(LaunchTemplateNotFound) as error:
            adapter.create_fleet(request)
    finally:
        world.clients.ec2.meta.events.unregister("before-call.ec2.CreateFleet", injector.before_call)
        world.clients.ec2.meta.events.unregister("after-call.ec2.CreateFleet", injector.after_call)
    assert error.value.code == "InvalidLaunchTemplateId.NotFound"
    # the cached template was forgotten: the next ensure describes EC2 again (and finds it)
    described: list[str] = []

    def count(**_: object) -> None:
        described.append("DescribeLaunchTemplates")

    world.clients.ec2.meta.events.register("before-call.ec2.DescribeLaunchTemplates", count)
    try:
        again = adapter.ensure_launch_template(nc, "amd64", cluster_info(adapter), world.network.security_groups, world.amis["x86_64"])
    finally:
        world.clients.ec2.meta.events.unregister("before-call.ec2.DescribeLaunchTemplates", count)
    assert again == request.launch_template and described == ["DescribeLaunchTemplates"]


def test_empty_overrides_are_refused(world: World, ec2: Ec2Adapter) -> None:
    request = fleet_request(world, ec2, "on-demand")
    with pytest.raises(Ec2Error, match="override"):
        ec2.create_fleet(replace(request, overrides=()))


# ---------------------------------------------------------------- instances and cluster


def test_terminate_tolerates_unknown_and_terminated_instances(world: World, ec2: Ec2Adapter) -> None:
    launched = ec2.create_fleet(fleet_request(world, ec2, "on-demand")).instances[0].instance_id
    ec2.terminate_instances([launched, "i-0123456789abcdef0"])
    assert instance(world, launched)["State"]["Name"] in ("shutting-down", "terminated")
    ec2.terminate_instances([launched])  # again: no error
    assert launched not in {r.instance_id for r in ec2.list_cluster_instances(CLUSTER)}


def test_describe_and_list_cluster_instances(world: World, ec2: Ec2Adapter) -> None:
    kept = ec2.create_fleet(fleet_request(world, ec2, "on-demand")).instances[0].instance_id
    other = world.clients.ec2.run_instances(
        ImageId=world.amis["x86_64"],
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "joiner.dev/cluster", "Value": "someone-else"}]}],
    )["Instances"][0]["InstanceId"]
    records = ec2.describe_instances([kept, other, "i-0fffffffffffffff0"])
    assert [r.instance_id for r in records] == sorted([kept, other])
    listed = {r.instance_id for r in ec2.list_cluster_instances(CLUSTER)}
    assert kept in listed and other not in listed
    record = next(r for r in records if r.instance_id == kept)
    assert record.tags[wk.NODEPOOL] == "default"
    assert record.launch_time is not None and record.launch_time.tzinfo is not None


def test_describe_instances_reports_image_subnet_and_security_groups(world: World, ec2: Ec2Adapter) -> None:
    # what drift compares with the NodeClass's current resolution
    subnet = world.network.subnets[ZONES[1]]
    groups = sorted(world.network.security_groups, reverse=True)
    instance_id = world.clients.ec2.run_instances(
        ImageId=world.amis["arm64"],
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        SecurityGroupIds=groups,
    )["Instances"][0]["InstanceId"]
    launched = ec2.create_fleet(fleet_request(world, ec2, "on-demand")).instances[0]
    records = {r.instance_id: r for r in ec2.describe_instances([instance_id, launched.instance_id])}
    record = records[instance_id]
    assert record.image_id == world.amis["arm64"]
    assert record.subnet_id == subnet
    assert record.security_group_ids == tuple(sorted(groups))
    fleet = records[launched.instance_id]  # through the launch template and the fleet override
    assert fleet.image_id == world.amis["x86_64"] and fleet.subnet_id == launched.subnet_id


def test_describe_cluster(world: World, ec2: Ec2Adapter) -> None:
    info = ec2.describe_cluster(CLUSTER)
    raw = world.clients.eks.describe_cluster(name=CLUSTER)["cluster"]
    assert info.endpoint == raw["endpoint"]
    assert info.certificate_authority == raw["certificateAuthority"]["data"]
    assert info.version == K8S_VERSION
    assert info.service_cidr == "10.100.0.0/16"
    assert info.cluster_dns == "10.100.0.10"
    with pytest.raises(Ec2Error) as error:
        ec2.describe_cluster("missing")
    assert error.value.code == "ResourceNotFoundException"


def test_deleted_template_is_recreated(world: World) -> None:
    adapter = world.adapter()
    nc = node_class(world)
    first = adapter.ensure_launch_template(nc, "amd64", cluster_info(adapter), world.network.security_groups, world.amis["x86_64"])
    adapter.delete_launch_template(first.id)
    adapter.delete_launch_template(first.id)  # already gone: no error
    again = adapter.ensure_launch_template(nc, "amd64", cluster_info(adapter), world.network.security_groups, world.amis["x86_64"])
    assert again.name == first.name and again.id != first.id


def test_list_launch_templates_of_a_cluster_for_gc(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(world)
    mine = ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"])
    client = world.clients.ec2

    def create(name: str, cluster: str) -> str:
        tags = [{"Key": "joiner.dev/cluster", "Value": cluster}, {"Key": "joiner.dev/nodeclass", "Value": "x"}]
        return client.create_launch_template(
            LaunchTemplateName=name,
            LaunchTemplateData={"ImageId": world.amis["x86_64"]},
            TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}],
        )["LaunchTemplate"]["LaunchTemplateId"]

    other = create(f"joiner-other-{nc.name}-amd64-0123456789abcdef", "other")
    create(f"hand-made-{nc.name}", CLUSTER)  # tagged for the cluster but not Joiner's naming: never listed
    listed = {info.ref.id: info for info in ec2.list_launch_templates(CLUSTER)}
    assert mine.id in listed and other not in listed
    assert all(info.ref.name.startswith("joiner-") for info in listed.values())
    info = listed[mine.id]
    assert info.ref.name == mine.name and info.node_class == nc.name
    assert info.created is not None and info.created.tzinfo is not None
    assert [i.ref.id for i in ec2.list_launch_templates("other")] == [other]
    assert {i.ref.id for i in ec2.list_launch_templates()} == set(listed)  # default: the adapter's cluster


def test_delete_launch_template_errors_other_than_not_found_are_raised(world: World, ec2: Ec2Adapter, no_sleep: list[float]) -> None:
    ref = ec2.ensure_launch_template(node_class(world), "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"])
    injector = inject_error(world.clients.ec2, "DeleteLaunchTemplate", ErrorInjector(code="UnauthorizedOperation", status=403))
    try:
        with pytest.raises(Ec2Error) as error:
            ec2.delete_launch_template(ref.id)
    finally:
        world.clients.ec2.meta.events.unregister("before-send.ec2.DeleteLaunchTemplate", injector)
    assert error.value.code == "UnauthorizedOperation"
    ec2.delete_launch_template(ref.id)
    assert ref.id not in {i.ref.id for i in ec2.list_launch_templates(CLUSTER)}


# ---------------------------------------------------------------- client factory


def test_clients_are_lazy_cached_and_share_the_retry_config() -> None:
    from joiner.adapters import aws as aws_module
    from joiner.settings import Settings

    settings = Settings(
        cluster_name="demo",
        region="eu-west-1",
        state_table="t",
        idempotency_table="i",
        aws_endpoint_url="http://127.0.0.1:5999",
        node_role="arn:aws:iam::1:role/JoinerNodeRole-demo",
    )
    with fake_credentials():
        clients = AwsClients.from_settings(settings)
        assert clients._clients == {}  # nothing built until used
        ec2 = clients.ec2
        assert clients.ec2 is ec2
        assert ec2.meta.region_name == "eu-west-1"
        assert ec2.meta.endpoint_url == "http://127.0.0.1:5999"
        assert ec2.meta.config.retries == {"mode": "standard", "total_max_attempts": 5}
        assert ec2.meta.config.connect_timeout == aws_module.CONNECT_TIMEOUT_SECONDS
        assert clients.table("t").name == "t"
        adapter = aws_module.ec2_adapter(settings, clients)
        assert adapter.cluster_name == "demo"
        assert adapter._instance_profile(NodeClass(name="x")) == "JoinerNodeRole-demo"


# ---------------------------------------------------------------- spot prices


def test_spot_prices_cover_real_types_and_zones(ec2: Ec2Adapter) -> None:
    prices = ec2.spot_prices()
    assert ("c5.large", "us-east-1a") in prices and ("m5.2xlarge", "us-east-1b") in prices
    assert all(price > 0 for price in prices.values())
    assert list(prices) == sorted(prices)


def test_spot_prices_keep_the_newest_and_skip_unusable_entries(world: World) -> None:
    from botocore.stub import ANY, Stubber

    client = world.clients.ec2
    entry = {"ProductDescription": "Linux/UNIX", "AvailabilityZone": "us-east-1a"}
    history = [
        {**entry, "InstanceType": "c5.large", "SpotPrice": "0.0400", "Timestamp": datetime(2025, 1, 1, 0, 0, tzinfo=UTC)},
        {**entry, "InstanceType": "c5.large", "SpotPrice": "0.0310", "Timestamp": datetime(2025, 1, 1, 0, 5, tzinfo=UTC)},
        {**entry, "InstanceType": "m5.large", "SpotPrice": "0", "Timestamp": datetime(2025, 1, 1, tzinfo=UTC)},
        {**entry, "InstanceType": "r5.large", "SpotPrice": "n/a", "Timestamp": datetime(2025, 1, 1, tzinfo=UTC)},
    ]
    with Stubber(client) as stub:
        stub.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": history[:2], "NextToken": "page-2"},
            {"ProductDescriptions": ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"], "StartTime": world.clock.moment, "MaxResults": ANY},
        )
        stub.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": history[2:]},
            {"ProductDescriptions": ANY, "StartTime": ANY, "MaxResults": ANY, "NextToken": "page-2"},
        )
        prices = world.adapter().spot_prices()
        stub.assert_no_pending_responses()
    assert prices == {("c5.large", "us-east-1a"): 0.031}


def test_spot_price_history_errors_are_ec2_errors(world: World) -> None:
    from botocore.stub import Stubber

    with Stubber(world.clients.ec2) as stub:
        stub.add_client_error("describe_spot_price_history", "UnauthorizedOperation", http_status_code=403)
        with pytest.raises(Ec2Error) as raised:
            world.adapter().spot_prices()
    assert raised.value.code == "UnauthorizedOperation"


# ---------------------------------------------------------------- capacity reservations


def test_capacity_reservations_by_id_or_tags_and_owner(world: World) -> None:
    """moto has no DescribeCapacityReservations: tests/support/aws.CapacityReservationApi
    answers it with EC2's XML on the real client, applying EC2's filters."""
    from tests.support.aws import CapacityReservationApi, FakeReservation

    api = CapacityReservationApi(
        [
            FakeReservation("cr-0aaa", "c5.large", "us-east-1a", 2, tags=(("team", "ml"),)),
            FakeReservation("cr-0bbb", "m5.large", "us-east-1b", 0, tags=(("team", "ml"),), owner="111122223333"),
            FakeReservation("cr-0ccc", "c5.large", "us-east-1b", 4, tags=(("team", "web"),)),
            FakeReservation("cr-0ddd", "c5.large", "us-east-1c", 4, tags=(("team", "ml"),), state="expired"),
        ]
    )
    adapter = Ec2Adapter(world.clients.ec2, world.clients.ssm, world.clients.eks, CLUSTER, world.clock)
    api.register(world.clients.ec2)
    try:
        by_tags = adapter.resolve_capacity_reservations([SelectorTerm(tags=(("team", "ml"),))])
        assert [(r.id, r.instance_type, r.zone, r.available) for r in by_tags] == [
            ("cr-0aaa", "c5.large", "us-east-1a", 2),
            ("cr-0bbb", "m5.large", "us-east-1b", 0),
        ]
        shared = adapter.resolve_capacity_reservations([SelectorTerm(tags=(("team", "ml"),), owner="111122223333")])
        assert [r.id for r in shared] == ["cr-0bbb"] and shared[0].owner_id == "111122223333"
        by_id = adapter.resolve_capacity_reservations([SelectorTerm(id="cr-0ccc"), SelectorTerm(id="cr-0ddd")])
        assert [r.id for r in by_id] == ["cr-0ccc"]  # an expired reservation is never offered
        assert all(params.get("Filter.1.Name") == "state" and params.get("Filter.1.Value.1") == "active" for params in api.requests)
    finally:
        world.clients.ec2.meta.events.unregister("before-call.ec2.DescribeCapacityReservations", api)


def test_a_reserved_launch_template_targets_its_reservation_and_the_fleet_launches_on_demand(world: World, ec2: Ec2Adapter) -> None:
    nc = node_class(world)
    labels = {wk.CAPACITY_TYPE: "reserved", wk.CAPACITY_RESERVATION_ID: "cr-0aaa"}
    template = ec2.ensure_launch_template(
        nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"], labels=labels, capacity_reservation_id="cr-0aaa"
    )
    plain = ec2.ensure_launch_template(nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"], labels=labels)
    assert template.id != plain.id
    data = template_data(world, template.id)
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": "cr-0aaa"}}
    assert "CapacityReservationSpecification" not in template_data(world, plain.id)

    sent: list[dict] = []

    def capture(params: dict, **_: object) -> None:
        sent.append(params)

    world.clients.ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", capture)
    try:
        plan = NodeClaimPlan("default", ("c5.large",), ZONES, ("reserved",), ("ns/p",), 0.0001, Requirements(), Resources())
        prices = {OfferingKey("c5.large", "us-east-1a", "reserved"): 0.0001}
        request = build_fleet_request(
            plan,
            f"claim-{next(_ids)}",
            "reserved",
            ec2.resolve_subnets(discovery(world)),
            template,
            prices,
            frozenset(),
            launch_tags(CLUSTER, "default", "claim-r", nc.tags),
            zone_templates={("c5.large", "us-east-1a"): template},
        )
        result = ec2.create_fleet(request)
    finally:
        world.clients.ec2.meta.events.unregister("before-parameter-build.ec2.CreateFleet", capture)
    assert sent[-1]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert sent[-1]["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateId"] == template.id
    (launched,) = result.instances
    assert launched.capacity_type == "reserved" and launched.zone == "us-east-1a"


def test_a_capacity_block_launch_uses_the_capacity_block_market(world: World, ec2: Ec2Adapter) -> None:
    """A Capacity Block takes instances only in its own market: the template says
    ``InstanceMarketOptions.MarketType = capacity-block`` and CreateFleet
    ``DefaultTargetCapacityType = capacity-block``, without on-demand options."""
    nc = node_class(world)
    labels = {wk.CAPACITY_TYPE: "reserved", wk.CAPACITY_RESERVATION_ID: "cr-0b10c4"}
    template = ec2.ensure_launch_template(
        nc,
        "amd64",
        cluster_info(ec2),
        world.network.security_groups,
        world.amis["x86_64"],
        labels=labels,
        capacity_reservation_id="cr-0b10c4",
        reservation_type=CAPACITY_BLOCK,
    )
    ordinary = ec2.ensure_launch_template(
        nc, "amd64", cluster_info(ec2), world.network.security_groups, world.amis["x86_64"], labels=labels, capacity_reservation_id="cr-0b10c4"
    )
    assert template.id != ordinary.id
    data = template_data(world, template.id)
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": "cr-0b10c4"}}
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert "InstanceMarketOptions" not in template_data(world, ordinary.id)

    sent: list[dict] = []

    def capture(params: dict, **_: object) -> None:
        sent.append(params)

    world.clients.ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", capture)
    try:
        plan = NodeClaimPlan("default", ("c5.large",), ZONES, ("reserved",), ("ns/p",), 0.0001, Requirements(), Resources())
        prices = {OfferingKey("c5.large", "us-east-1a", "reserved"): 0.0001}
        request = build_fleet_request(
            plan,
            f"claim-{next(_ids)}",
            "reserved",
            ec2.resolve_subnets(discovery(world)),
            template,
            prices,
            frozenset(),
            launch_tags(CLUSTER, "default", "claim-b", nc.tags),
            zone_templates={("c5.large", "us-east-1a"): template},
        )
        ec2.create_fleet(replace(request, reservation_type=CAPACITY_BLOCK))  # moto launches nothing in this market
    finally:
        world.clients.ec2.meta.events.unregister("before-parameter-build.ec2.CreateFleet", capture)
    assert sent[-1]["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "capacity-block"
    assert "OnDemandOptions" not in sent[-1] and "SpotOptions" not in sent[-1]
    assert sent[-1]["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateId"] == template.id


def test_instances_in_a_reservation_are_found_with_ec2s_own_filter(world: World, ec2: Ec2Adapter) -> None:
    """A Capacity Block warning names the reservation: its instances come from DescribeInstances
    filtered by ``capacity-reservation-id`` (moto lacks that filter: the request is checked, and
    the instance EC2 would return is answered)."""
    seen: list[dict] = []

    def check(params: dict, **_: object) -> None:
        seen.append(params)
        for item in params.get("Filters") or []:
            if item["Name"] == "capacity-reservation-id":
                item["Name"], item["Values"] = "tag:Name", ["in-the-block"]

    world.clients.ec2.run_instances(
        ImageId=world.amis["x86_64"],
        MinCount=1,
        MaxCount=1,
        InstanceType="c5.large",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "in-the-block"}, {"Key": CLUSTER_TAG, "Value": CLUSTER}]}],
    )
    world.clients.ec2.meta.events.register("before-parameter-build.ec2.DescribeInstances", check)
    try:
        found = ec2.reservation_instances(CLUSTER, "cr-0b10c4")
    finally:
        world.clients.ec2.meta.events.unregister("before-parameter-build.ec2.DescribeInstances", check)
    assert {f["Name"]: f["Values"] for f in seen[-1]["Filters"]} == {
        f"tag:{CLUSTER_TAG}": [CLUSTER],
        "instance-state-name": list(LIVE_INSTANCE_STATES),
        "tag:Name": ["in-the-block"],
    }
    assert len(found) == 1 and found[0].tags.get("Name") == "in-the-block"
