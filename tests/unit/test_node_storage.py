"""A node's ephemeral storage as Karpenter's AWS provider computes it: the root volume the
NodeClass's block device mappings give (default 20Gi), or with ``instanceStorePolicy: RAID0``
the instance type's instance-store NVMe total in decimal GB; and the nodeadm setting that makes
the node stripe those disks."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.catalog import (
    DEFAULT_ROOT_VOLUME_BYTES,
    Catalog,
    CatalogError,
    DeclaredInstanceType,
    load_bundled_catalog,
    root_volume_size,
)
from joiner.domain.model import KubeletConfig, NodeClass, Offering, nodeclass_hash
from joiner.domain.planning import plan_snapshot
from joiner.domain.resources import EPHEMERAL_STORAGE, Resources
from joiner.domain.snapshot import SnapshotError, load_snapshot_yaml, parse_node_class
from joiner.domain.userdata import ClusterBootstrap, UserDataError, node_config
from testworld.cluster import kubelet_registration

GI = 2**30
CATALOG = load_bundled_catalog()


def ephemeral(node_class: NodeClass, name: str) -> int:
    instance_type = CATALOG.type_for_node_class(name, node_class)
    assert instance_type is not None
    return instance_type.capacity[EPHEMERAL_STORAGE] // 1000


def snapshot_text(node_class_spec: dict[str, Any], ephemeral_request: str, *, pool_requirements: list[dict[str, Any]] | None = None) -> str:
    spec = {"subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}], "role": "r", **node_class_spec}
    pool = {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"}, "requirements": pool_requirements or []}}
        },
    }
    node_class = {"apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": "default"}, "spec": spec}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1", "ephemeral-storage": ephemeral_request}}}]},
    }
    return yaml.safe_dump_all([pool, node_class, pod])


# ---------------------------------------------------------------- the root volume


def test_planning_uses_the_node_classs_root_volume_not_the_default() -> None:
    # A 50Gi request fits no node with the default 20Gi root volume, and every node of a
    # NodeClass with a 100Gi root volume.
    default = plan_snapshot(load_snapshot_yaml(snapshot_text({}, "50Gi")), CATALOG)
    assert not default.node_claims and default.unschedulable
    big = {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "gp3"}}]}
    plan = plan_snapshot(load_snapshot_yaml(snapshot_text(big, "50Gi")), CATALOG)
    assert not plan.unschedulable and len(plan.node_claims) == 1


def test_root_volume_rules_match_karpenters() -> None:
    def node_class(*mappings: dict[str, Any], family: str = "AL2023") -> NodeClass:
        return NodeClass("nc", ami_family=family, block_device_mappings=tuple(mappings))

    # Karpenter's instancetype suite: a mapping marked rootVolume wins over /dev/xvda.
    marked = node_class(
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20G"}}, {"deviceName": "/dev/sda1", "rootVolume": True, "ebs": {"volumeSize": "10G"}}
    )
    assert root_volume_size(marked) == 10 * 10**9
    assert ephemeral(marked, "m6i.large") == 10 * 10**9
    assert root_volume_size(node_class({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "15G"}})) == 15 * 10**9
    # A data volume on another device is not the root file system.
    assert root_volume_size(node_class({"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "500Gi"}})) == DEFAULT_ROOT_VOLUME_BYTES
    # A root mapping without a size (from a snapshot) falls back to /dev/xvda, then the default.
    assert (
        root_volume_size(
            node_class(
                {"deviceName": "/dev/sda1", "rootVolume": True, "ebs": {"snapshotID": "snap-1"}}, {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "30Gi"}}
            )
        )
        == 30 * GI
    )
    # amiFamily Custom: the last mapping (Karpenter cannot know the AMI's root device).
    assert (
        root_volume_size(
            node_class({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "30Gi"}}, {"deviceName": "/dev/sdb", "ebs": {"volumeSize": "40Gi"}}, family="Custom")
        )
        == 40 * GI
    )
    assert root_volume_size(NodeClass("nc")) == DEFAULT_ROOT_VOLUME_BYTES


def test_the_nodefs_eviction_threshold_follows_the_root_volume() -> None:
    big = NodeClass("nc", block_device_mappings=({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi"}},))
    instance_type = CATALOG.type_for_node_class("m6i.large", big)
    assert instance_type is not None
    # kube-reserved 1Gi plus the 10% nodefs.available default of the 100Gi volume
    assert instance_type.overhead[EPHEMERAL_STORAGE] // 1000 == GI + 10 * GI


@given(
    sizes=st.lists(st.one_of(st.none(), st.integers(min_value=1, max_value=2**63 - 1)), min_size=0, max_size=4),
    devices=st.lists(st.sampled_from(["/dev/xvda", "/dev/xvdb", "/dev/sda1"]), min_size=4, max_size=4),
    root_index=st.one_of(st.none(), st.integers(min_value=0, max_value=3)),
)
def test_root_volume_size_is_the_marked_then_the_xvda_then_the_default_size(sizes: list[int | None], devices: list[str], root_index: int | None) -> None:
    mappings = []
    for index, size in enumerate(sizes):
        mapping: dict[str, Any] = {"deviceName": devices[index], "ebs": {} if size is None else {"volumeSize": str(size)}}
        if index == root_index:
            mapping["rootVolume"] = True
        mappings.append(mapping)
    expected: int | None = None
    if root_index is not None and root_index < len(sizes):
        expected = sizes[root_index]
    if expected is None:
        expected = next((sizes[i] for i in range(len(sizes)) if devices[i] == "/dev/xvda"), None)
    assert root_volume_size(NodeClass("nc", block_device_mappings=tuple(mappings))) == (expected or DEFAULT_ROOT_VOLUME_BYTES)


# ---------------------------------------------------------------- RAID0


def test_raid0_makes_the_instance_store_the_ephemeral_storage_in_decimal_gb() -> None:
    raid = NodeClass("nc", instance_store_policy="RAID0")
    # Karpenter's instancetype suite: m6idn.32xlarge has 4 x 1900 GB of NVMe: 7600G.
    assert ephemeral(raid, "m6idn.32xlarge") == 7600 * 10**9
    assert ephemeral(raid, "m6id.large") == 118 * 10**9
    # Without instance-store NVMe the root volume still holds it.
    assert ephemeral(raid, "m6i.large") == DEFAULT_ROOT_VOLUME_BYTES
    # Without the policy the instance store is left unused.
    assert ephemeral(NodeClass("nc"), "m6id.large") == DEFAULT_ROOT_VOLUME_BYTES
    instance_type = CATALOG.type_for_node_class("m6id.large", raid)
    assert instance_type is not None  # nodefs.available 10% is of the array
    assert instance_type.overhead[EPHEMERAL_STORAGE] // 1000 == GI + 118 * 10**8


def test_the_memo_is_kept_per_instance_store_policy() -> None:
    catalog = Catalog(CATALOG.infos)
    plain = catalog.for_node_class(NodeClass("nc"))
    raid = catalog.for_node_class(NodeClass("nc", instance_store_policy="RAID0"))
    assert plain is not raid
    assert {t.name: t for t in raid}["i4i.large"].capacity[EPHEMERAL_STORAGE] == 468 * 10**9 * 1000
    assert catalog.for_node_class(NodeClass("other")) is plain  # equal settings share one build


def test_a_raid0_pool_takes_a_large_ephemeral_request_to_an_nvme_type() -> None:
    # Karpenter's instancetype suite: a 5000Gi request under RAID0 lands on a type whose
    # instance store holds it.
    text = snapshot_text({"instanceStorePolicy": "RAID0"}, "5000Gi")
    plan = plan_snapshot(load_snapshot_yaml(text), CATALOG)
    assert not plan.unschedulable and len(plan.node_claims) == 1
    for name in plan.node_claims[0].instance_types:
        info = CATALOG.info(name)
        assert info is not None and info.local_nvme_gib * 10**9 >= 5000 * GI
    without = plan_snapshot(load_snapshot_yaml(snapshot_text({}, "5000Gi")), CATALOG)
    assert not without.node_claims and without.unschedulable


def test_declared_catalog_entries_use_their_local_nvme_label() -> None:
    offerings = {name: [Offering("z1", "on-demand", 0.1)] for name in ("nvme.x", "plain.x", "stated.x")}
    catalog = Catalog(
        declared=[
            DeclaredInstanceType("nvme.x", Resources.parse({"cpu": "2", "memory": "8Gi"}), labels=(("karpenter.k8s.aws/instance-local-nvme", "237"),)),
            DeclaredInstanceType("plain.x", Resources.parse({"cpu": "2", "memory": "8Gi"})),
            DeclaredInstanceType(
                "stated.x",
                Resources.parse({"cpu": "2", "memory": "8Gi", "ephemeral-storage": "50Gi"}),
                labels=(("karpenter.k8s.aws/instance-local-nvme", "237"),),
            ),
        ],
        offerings=offerings,
    )
    types = {t.name: t for t in catalog.instance_types(KubeletConfig(), instance_store_policy="RAID0")}
    assert types["nvme.x"].capacity[EPHEMERAL_STORAGE] == 237 * 10**9 * 1000
    assert types["plain.x"].capacity[EPHEMERAL_STORAGE] == DEFAULT_ROOT_VOLUME_BYTES * 1000
    assert types["stated.x"].capacity[EPHEMERAL_STORAGE] == 50 * GI * 1000  # what the file states wins
    with pytest.raises(CatalogError, match="instanceStorePolicy"):
        catalog.instance_types(KubeletConfig(), instance_store_policy="RAID1")


def test_the_node_class_parses_the_policy_and_rejects_others() -> None:
    spec: dict[str, Any] = {"subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]}
    base: dict[str, Any] = {"kind": "NodeClass", "metadata": {"name": "d"}, "spec": spec}
    assert parse_node_class(base).instance_store_policy is None
    raid = {**base, "spec": {**spec, "instanceStorePolicy": "RAID0"}}
    assert parse_node_class(raid).instance_store_policy == "RAID0"
    karpenter = {**raid, "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass"}
    assert parse_node_class(karpenter).instance_store_policy == "RAID0"
    with pytest.raises(SnapshotError, match=r"spec\.instanceStorePolicy.*RAID1"):
        parse_node_class({**base, "spec": {**spec, "instanceStorePolicy": "RAID1"}})


def test_the_policy_is_drift_but_older_nodes_keep_their_hash() -> None:
    plain = NodeClass("nc")
    raid = NodeClass("nc", instance_store_policy="RAID0")
    assert nodeclass_hash(plain) != nodeclass_hash(raid)
    # the hash of a NodeClass without the policy is what it was before the field existed
    assert nodeclass_hash(plain) == "727d947a247ad296"


CLUSTER = ClusterBootstrap("demo", "https://example.eks.amazonaws.com", "Y2E=", "10.100.0.0/16")


def test_nodeadm_gets_the_local_storage_strategy() -> None:
    config = node_config(CLUSTER, instance_store_policy="RAID0")
    assert config["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    assert "instance" not in node_config(CLUSTER)["spec"]
    with pytest.raises(UserDataError, match="instanceStorePolicy"):
        node_config(CLUSTER, instance_store_policy="RAID5")


def test_the_simulated_kubelet_reads_the_strategy() -> None:
    import base64

    from joiner.domain.userdata import build_user_data

    boot = kubelet_registration(base64.b64encode(build_user_data(CLUSTER, instance_store_policy="RAID0").encode()).decode())
    assert boot.instance_store_policy == "RAID0"
    assert kubelet_registration(base64.b64encode(build_user_data(CLUSTER).encode()).decode()).instance_store_policy is None
