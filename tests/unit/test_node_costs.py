"""What a node costs besides its instance, as the bill counts it: the EBS volumes of its NodeClass
(GB-month, and IOPS and throughput above gp3's free baseline) and a public IPv4 address where its
subnet assigns one; planning adds them to every offering's price."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.catalog import Catalog, load_bundled_catalog
from joiner.domain.costs import PUBLIC_IPV4_PER_HOUR, block_device_cost_per_hour, volume_cost_per_hour
from joiner.domain.model import KubeletConfig, NodeClass
from joiner.domain.planning import plan_snapshot
from joiner.domain.reservations import RESERVED_PRICE_FACTOR, with_reserved_offerings
from joiner.domain.snapshot import load_snapshot_yaml
from joiner.ports import CapacityReservation, Subnet
from joiner.services.planning_round import public_ip_zones

CATALOG = load_bundled_catalog()
H = 730  # hours in a billing month


def gp3(size: str = "20Gi", **extra: Any) -> dict[str, Any]:
    return {"deviceName": "/dev/xvda", "ebs": {"volumeSize": size, "volumeType": "gp3", **extra}}


def test_volume_prices_follow_the_us_east_1_list() -> None:
    assert volume_cost_per_hour(gp3()) == pytest.approx(20 * 0.08 / H)
    # IOPS above 3000 at $0.005, throughput above 125 MB/s at $0.04 (per month)
    assert volume_cost_per_hour(gp3("100Gi", iops=6000, throughput=250)) == pytest.approx((100 * 0.08 + 3000 * 0.005 + 125 * 0.04) / H)
    assert volume_cost_per_hour(gp3("100Gi", iops=3000, throughput=125)) == pytest.approx(100 * 0.08 / H)
    assert volume_cost_per_hour({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "50Gi", "volumeType": "gp2"}}) == pytest.approx(50 * 0.10 / H)
    # io1 bills every provisioned IOPS; io2 in tiers (32,000 at 0.065, 32,000 at 0.0455, the rest at 0.032)
    assert volume_cost_per_hour({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "io1", "iops": 1000}}) == pytest.approx(
        (12.5 + 65) / H
    )
    io2 = {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi", "volumeType": "io2", "iops": 70000}}
    assert volume_cost_per_hour(io2) == pytest.approx((12.5 + 32000 * 0.065 + 32000 * 0.0455 + 6000 * 0.032) / H)
    # EC2 provisions whole GiB, rounded up, and gp3 when no type is given
    assert volume_cost_per_hour({"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100G"}}) == pytest.approx(94 * 0.08 / H)
    # a volume from a snapshot without a size: the snapshot's size is not known, nothing counted
    assert volume_cost_per_hour({"deviceName": "/dev/xvda", "ebs": {"snapshotID": "snap-1"}}) == 0.0


def test_every_block_device_counts_and_the_default_is_20gi_gp3() -> None:
    assert block_device_cost_per_hour(NodeClass("nc")) == pytest.approx(20 * 0.08 / H)
    two = NodeClass("nc", block_device_mappings=(gp3("50Gi"), {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "500Gi", "volumeType": "st1"}}))
    assert block_device_cost_per_hour(two) == pytest.approx((50 * 0.08 + 500 * 0.045) / H)


@given(
    size=st.integers(min_value=1, max_value=2**63 - 1),
    iops=st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    throughput=st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    volume_type=st.sampled_from(["gp3", "gp2", "io1", "io2", "st1", "sc1", "standard", "unknown"]),
)
def test_a_volume_costs_a_finite_non_negative_amount_that_grows_with_what_is_provisioned(
    size: int, iops: int | None, throughput: int | None, volume_type: str
) -> None:
    ebs: dict[str, Any] = {"volumeSize": f"{size}Gi", "volumeType": volume_type}
    if iops is not None:
        ebs["iops"] = iops
    if throughput is not None:
        ebs["throughput"] = throughput
    cost = volume_cost_per_hour({"deviceName": "/dev/xvda", "ebs": ebs})
    assert math.isfinite(cost) and cost >= 0
    bigger = volume_cost_per_hour(
        {"deviceName": "/dev/xvda", "ebs": {**ebs, "volumeSize": f"{size + 1}Gi", "iops": (iops or 0) + 1 if (iops or 0) >= 0 else 0}}
    )
    assert bigger >= cost


def test_the_catalog_prices_each_node_class_with_its_volumes() -> None:
    catalog = Catalog(CATALOG.infos)
    plain = {t.name: t for t in catalog.for_node_class(NodeClass("nc"))}
    big = NodeClass("nc", block_device_mappings=(gp3("200Gi", iops=6000),))
    costly = {t.name: t for t in catalog.for_node_class(big)}
    raw = {t.name: t for t in catalog.instance_types(KubeletConfig())}
    for name in ("c5.large", "t4g.nano", "m6id.large"):
        for base, with_root, with_big in zip(raw[name].offerings, plain[name].offerings, costly[name].offerings, strict=True):
            assert with_root.price == pytest.approx(base.price + 20 * 0.08 / H)
            assert with_big.price == pytest.approx(base.price + (200 * 0.08 + 3000 * 0.005) / H)
    assert catalog.type_for_node_class("c5.large", big) is costly["c5.large"]


def plan_text(pods: int, node_class_spec: dict[str, Any] | None = None) -> str:
    spec = {"subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}], "role": "r", **(node_class_spec or {})}
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "joiner.dev/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"}}}},
        },
        {"apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": "default"}, "spec": spec},
    ]
    documents += [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        for i in range(pods)
    ]
    return yaml.safe_dump_all(documents)


def test_fifty_pods_that_request_nothing_are_not_spread_over_thirteen_nanos() -> None:
    # Without the per-node costs, 13 t4g.nano ($0.0042/h, 4 pods each) looked cheapest; each
    # also pays a 20Gi gp3 root volume ($0.0022/h), which makes two larger nodes cheaper.
    plan = plan_snapshot(load_snapshot_yaml(plan_text(50)), CATALOG)
    assert not plan.unschedulable and sum(len(c.pods) for c in plan.node_claims) == 50
    types = Counter(c.instance_types[0] for c in plan.node_claims)
    assert types.get("t4g.nano", 0) < 13 and len(plan.node_claims) < 13
    nano = CATALOG.type_for_node_class("t4g.nano", NodeClass("nc"))
    assert nano is not None
    assert plan.cost_per_hour < 13 * min(o.price for o in nano.offerings)


def test_a_costlier_root_volume_favours_fewer_nodes() -> None:
    cheap = plan_snapshot(load_snapshot_yaml(plan_text(200)), CATALOG)
    costly = plan_snapshot(load_snapshot_yaml(plan_text(200, {"blockDeviceMappings": [gp3("500Gi", iops=16000, throughput=1000)]})), CATALOG)
    assert len(costly.node_claims) <= len(cheap.node_claims)
    per_node = (500 * 0.08 + 13000 * 0.005 + 875 * 0.04) / H
    assert costly.cost_per_hour >= len(costly.node_claims) * per_node


def test_the_zones_whose_launch_subnet_maps_public_addresses() -> None:
    subnets = [
        Subnet("subnet-a1", "us-east-1a", 100, map_public_ip=True),
        Subnet("subnet-b1", "us-east-1b", 10, map_public_ip=True),
        Subnet("subnet-b2", "us-east-1b", 500),  # the launch uses the subnet with the most free addresses
        Subnet("subnet-c1", "us-east-1c", 100),
    ]
    assert public_ip_zones(subnets) == frozenset({"us-east-1a"})
    assert PUBLIC_IPV4_PER_HOUR == 0.005


def test_a_reserved_offering_still_pays_the_node_costs_in_full() -> None:
    (c5,) = [t for t in CATALOG.for_node_class(NodeClass("nc")) if t.name == "c5.large"]
    fixed = 20 * 0.08 / H + PUBLIC_IPV4_PER_HOUR
    reservation = CapacityReservation("cr-1", "c5.large", "us-east-1a", available=1)
    (with_reserved,) = with_reserved_offerings([c5], [reservation], ["us-east-1a"], node_costs={"us-east-1a": fixed})
    reserved = next(o for o in with_reserved.offerings if o.capacity_type == "reserved")
    on_demand = next(o for o in c5.offerings if o.capacity_type == "on-demand" and o.zone == "us-east-1a")
    assert reserved.price == pytest.approx((on_demand.price - fixed) * RESERVED_PRICE_FACTOR + fixed)
