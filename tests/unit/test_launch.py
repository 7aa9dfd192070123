"""Fleet request construction: client tokens, override selection and order, tags, labels."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.launch import (
    CLIENT_TOKEN_PATTERN,
    CLIENT_TOKEN_TAG,
    MAX_OVERRIDES,
    LaunchError,
    NoOfferingsError,
    build_fleet_request,
    choose_capacity_type,
    client_token,
    launch_tags,
    node_labels,
    node_taints,
    zonal_subnets,
)
from joiner.domain.model import NodeClaimPlan, NodePool, OfferingKey, Taint
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.resources import Resources
from joiner.ports import LaunchTemplateRef, Subnet

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
SUBNETS = (
    Subnet("subnet-a1", "us-east-1a", 100),
    Subnet("subnet-a2", "us-east-1a", 4000),
    Subnet("subnet-b1", "us-east-1b", 50),
    Subnet("subnet-c1", "us-east-1c", 50),
    Subnet("subnet-c0", "us-east-1c", 50),
)
TEMPLATE = LaunchTemplateRef("lt-123", "joiner-demo-default-amd64-abc")


def claim(types=("m5.large", "c5.large", "r5.large"), zones=ZONES, capacity_types=("spot", "on-demand"), requirements=Requirements()):
    return NodeClaimPlan(
        node_pool="default",
        instance_types=tuple(types),
        zones=tuple(zones),
        capacity_types=tuple(capacity_types),
        pods=("ns/a",),
        price=0.1,
        requirements=requirements,
        requests=Resources.parse({"cpu": "1"}),
    )


def prices(table: dict[str, float], zones=ZONES, capacity_types=("spot", "on-demand"), zone_skew: float = 0.001):
    """Price per offering: the type's base price (on-demand x3), slightly higher in later zones."""
    out = {}
    for name, base in table.items():
        for zi, zone in enumerate(zones):
            for ct in capacity_types:
                out[OfferingKey(name, zone, ct)] = round(base * (3 if ct == "on-demand" else 1) + zi * zone_skew, 6)
    return out


PRICES = prices({"m5.large": 0.04, "c5.large": 0.03, "r5.large": 0.05})


def test_client_token_is_deterministic_bounded_and_per_attempt() -> None:
    token = client_token("claim-1", 0)
    assert token == client_token("claim-1", 0)
    assert token != client_token("claim-1", 1)
    assert token != client_token("claim-2", 0)
    assert len(token) <= 64 and token.isascii()
    assert CLIENT_TOKEN_PATTERN.match(token)
    with pytest.raises(LaunchError):
        client_token("", 0)
    with pytest.raises(LaunchError):
        client_token("c", -1)


@given(st.text(min_size=1, max_size=300), st.integers(min_value=0, max_value=10**12 - 1))
def test_client_token_shape_for_any_claim_id(claim_id: str, attempt: int) -> None:
    token = client_token(claim_id, attempt)
    assert len(token) <= 64
    assert CLIENT_TOKEN_PATTERN.match(token)
    assert token.endswith(f"-{attempt}")


def test_overrides_cheapest_first_one_subnet_per_zone() -> None:
    request = build_fleet_request(claim(), "c1", "spot", SUBNETS, TEMPLATE, PRICES, frozenset(), {"team": "a"})
    got = [(o.instance_type, o.zone, o.subnet_id) for o in request.overrides]
    assert got == [
        ("c5.large", "us-east-1a", "subnet-a2"),
        ("c5.large", "us-east-1b", "subnet-b1"),
        ("c5.large", "us-east-1c", "subnet-c0"),
        ("m5.large", "us-east-1a", "subnet-a2"),
        ("m5.large", "us-east-1b", "subnet-b1"),
        ("m5.large", "us-east-1c", "subnet-c0"),
        ("r5.large", "us-east-1a", "subnet-a2"),
        ("r5.large", "us-east-1b", "subnet-b1"),
        ("r5.large", "us-east-1c", "subnet-c0"),
    ]
    assert request.capacity_type == "spot"
    assert request.client_token == client_token("c1", 0)
    assert request.tags == {"team": "a", CLIENT_TOKEN_TAG: request.client_token}
    assert request.launch_template == TEMPLATE
    assert request.target_capacity == 1


def test_price_ties_break_on_instance_type_name() -> None:
    tied = prices({"b5.large": 0.05, "a5.large": 0.05}, zone_skew=0.0)
    request = build_fleet_request(claim(types=("b5.large", "a5.large"), zones=("us-east-1a",)), "c", "spot", SUBNETS, TEMPLATE, tied, frozenset(), {})
    assert [o.instance_type for o in request.overrides] == ["a5.large", "b5.large"]


def test_unavailable_offerings_and_disallowed_zones_are_left_out() -> None:
    unavailable = frozenset({OfferingKey("c5.large", "us-east-1a", "spot"), OfferingKey("m5.large", "us-east-1b", "on-demand")})
    request = build_fleet_request(claim(zones=("us-east-1a", "us-east-1b")), "c", "spot", SUBNETS, TEMPLATE, PRICES, unavailable, {})
    offered = {(o.instance_type, o.zone) for o in request.overrides}
    assert ("c5.large", "us-east-1a") not in offered
    assert ("m5.large", "us-east-1b") in offered  # unavailable only on-demand
    assert {o.zone for o in request.overrides} == {"us-east-1a", "us-east-1b"}


def test_zone_requirement_narrows_zones() -> None:
    requirements = Requirements([Requirement.create(wk.ZONE, "In", ["us-east-1c"])])
    request = build_fleet_request(claim(requirements=requirements), "c", "on-demand", SUBNETS, TEMPLATE, PRICES, frozenset(), {})
    assert {o.zone for o in request.overrides} == {"us-east-1c"}


def test_unpriced_offerings_cannot_be_launched() -> None:
    partial = {k: v for k, v in PRICES.items() if not (k.instance_type == "r5.large" and k.capacity_type == "spot")}
    request = build_fleet_request(claim(), "c", "spot", SUBNETS, TEMPLATE, partial, frozenset(), {})
    assert "r5.large" not in {o.instance_type for o in request.overrides}


def test_max_types_keeps_the_cheapest_types() -> None:
    many = {f"t{i:03d}.large": 0.001 * (200 - i) for i in range(200)}
    request = build_fleet_request(claim(types=tuple(many)), "c", "spot", SUBNETS, TEMPLATE, prices(many), frozenset(), {}, max_types=60)
    kept = {o.instance_type for o in request.overrides}
    cheapest = sorted(many, key=lambda n: (many[n], n))[:60]
    assert kept == set(cheapest)
    assert len(request.overrides) == 180  # 60 types x 3 zones, under the cap


def test_override_count_is_capped() -> None:
    many = {f"t{i:03d}.large": 0.01 for i in range(120)}
    five = tuple(f"z{i}" for i in range(5))
    subnets = tuple(Subnet(f"subnet-{z}", z, 10) for z in five)
    request = build_fleet_request(
        claim(types=tuple(many), zones=five), "c", "spot", subnets, TEMPLATE, prices(many, zones=five), frozenset(), {}, max_types=120
    )
    assert len(request.overrides) == MAX_OVERRIDES


def test_no_offerings_left_is_an_explained_error() -> None:
    everything = frozenset(k for k in PRICES if k.capacity_type == "spot")
    with pytest.raises(NoOfferingsError, match="no available spot offering"):
        build_fleet_request(claim(), "c9", "spot", SUBNETS, TEMPLATE, PRICES, everything, {})
    with pytest.raises(NoOfferingsError, match="no subnet"):
        build_fleet_request(claim(zones=("us-west-2a",)), "c9", "spot", SUBNETS, TEMPLATE, PRICES, frozenset(), {})


def test_capacity_type_must_be_allowed_by_the_claim() -> None:
    with pytest.raises(LaunchError, match="not allowed"):
        build_fleet_request(claim(capacity_types=("on-demand",)), "c", "spot", SUBNETS, TEMPLATE, PRICES, frozenset(), {})
    with pytest.raises(LaunchError, match="not allowed"):
        build_fleet_request(claim(), "c", "reserved", SUBNETS, TEMPLATE, PRICES, frozenset(), {})  # a claim without reserved
    with pytest.raises(LaunchError, match="must be one of"):
        build_fleet_request(claim(), "c", "dedicated", SUBNETS, TEMPLATE, PRICES, frozenset(), {})


def test_min_values_survive_exclusions_or_fail() -> None:
    requirements = Requirements([Requirement.create(wk.INSTANCE_TYPE, "In", ["m5.large", "c5.large", "r5.large"], min_values=3)])
    build_fleet_request(claim(requirements=requirements), "c", "spot", SUBNETS, TEMPLATE, PRICES, frozenset(), {})
    gone = frozenset(OfferingKey("r5.large", z, "spot") for z in ZONES)
    with pytest.raises(NoOfferingsError, match="minValues 3"):
        build_fleet_request(claim(requirements=requirements), "c", "spot", SUBNETS, TEMPLATE, PRICES, gone, {})


def test_attempt_changes_only_the_token() -> None:
    first = build_fleet_request(claim(), "c", "spot", SUBNETS, TEMPLATE, PRICES, frozenset(), {})
    second = build_fleet_request(claim(), "c", "spot", SUBNETS, TEMPLATE, PRICES, frozenset(), {}, attempt=1)
    assert first.overrides == second.overrides
    assert first.client_token != second.client_token


def test_zonal_subnets_prefers_free_addresses_then_id() -> None:
    chosen = zonal_subnets(SUBNETS)
    assert {z: s.id for z, s in chosen.items()} == {"us-east-1a": "subnet-a2", "us-east-1b": "subnet-b1", "us-east-1c": "subnet-c0"}


def test_choose_capacity_type_prefers_spot_and_falls_back() -> None:
    assert choose_capacity_type(claim()) == "spot"
    assert choose_capacity_type(claim(capacity_types=("on-demand",))) == "on-demand"
    spot_gone = frozenset(k for k in PRICES if k.capacity_type == "spot")
    assert choose_capacity_type(claim(), PRICES, frozenset()) == "spot"
    assert choose_capacity_type(claim(), PRICES, spot_gone, SUBNETS) == "on-demand"
    with pytest.raises(NoOfferingsError):
        choose_capacity_type(claim(), PRICES, frozenset(PRICES), SUBNETS)


def test_launch_tags_follow_the_contract_and_protect_joiner_keys() -> None:
    tags = launch_tags("demo", "default", "claim-1", {"team": "a", "joiner.dev/nodepool": "spoofed", "kubernetes.io/cluster/demo": "x"})
    assert tags == {
        "team": "a",
        "joiner.dev/cluster": "demo",
        "kubernetes.io/cluster/demo": "owned",
        "joiner.dev/nodepool": "default",
        "joiner.dev/nodeclaim": "claim-1",
        "joiner.dev/managed-by": "demo",
        "Name": "demo/default",
    }
    with pytest.raises(LaunchError, match="aws:"):
        launch_tags("demo", "default", "c", {"aws:cloudformation:stack": "x"})


def test_node_labels_and_taints_for_the_launch_template() -> None:
    pool = NodePool(
        name="gpu",
        labels={"team": "ml"},
        requirements=Requirements([Requirement.create("tier", "In", ["batch"]), Requirement.create(wk.INSTANCE_TYPE, "In", ["p3.2xlarge", "p3.8xlarge"])]),
        taints=(Taint("nvidia.com/gpu", "true", "NoSchedule"),),
        startup_taints=(Taint("node.cilium.io/agent-not-ready", "true", "NoExecute"), Taint("nvidia.com/gpu", "true", "NoSchedule")),
    )
    assert node_labels(pool, "spot") == {
        "joiner.dev/capacity-type": "spot",
        "joiner.dev/nodepool": "gpu",
        "karpenter.sh/capacity-type": "spot",
        "karpenter.sh/nodepool": "gpu",
        "team": "ml",
        "tier": "batch",
    }
    assert node_taints(pool) == (
        Taint("nvidia.com/gpu", "true", "NoSchedule"),
        Taint("node.cilium.io/agent-not-ready", "true", "NoExecute"),
    )


_names = st.sampled_from([f"x{i}.large" for i in range(12)])


@settings(max_examples=120, deadline=None)
@given(
    types=st.lists(_names, min_size=1, max_size=12, unique=True),
    zones=st.lists(st.sampled_from(ZONES), min_size=1, max_size=3, unique=True),
    price_values=st.lists(st.floats(min_value=0.001, max_value=5, allow_nan=False), min_size=36, max_size=36),
    unavailable_mask=st.lists(st.booleans(), min_size=36, max_size=36),
    max_types=st.integers(min_value=1, max_value=12),
)
def test_overrides_invariants(types, zones, price_values, unavailable_mask, max_types) -> None:
    keys = [OfferingKey(f"x{i}.large", z, "spot") for i in range(12) for z in ZONES]
    table = dict(zip(keys, price_values, strict=True))
    unavailable = frozenset(k for k, off in zip(keys, unavailable_mask, strict=True) if off)
    plan = claim(types=types, zones=zones)
    eligible = {k for k in keys if k.instance_type in types and k.zone in zones and k not in unavailable}
    if not eligible:
        with pytest.raises(NoOfferingsError):
            build_fleet_request(plan, "c", "spot", SUBNETS, TEMPLATE, table, unavailable, {}, max_types=max_types)
        return
    request = build_fleet_request(plan, "c", "spot", SUBNETS, TEMPLATE, table, unavailable, {}, max_types=max_types)
    offered = [OfferingKey(o.instance_type, o.zone, "spot") for o in request.overrides]
    assert set(offered) <= eligible  # only launchable offerings
    assert len(set(offered)) == len(offered)  # no duplicates
    order = [(table[k], k.instance_type, k.zone) for k in offered]
    assert order == sorted(order)  # cheapest first, total order
    kept = {k.instance_type for k in offered}
    assert len(kept) == min(max_types, len({k.instance_type for k in eligible}))
    cheapest: dict = {}
    for k in eligible:
        cheapest[k.instance_type] = min(table[k], cheapest.get(k.instance_type, table[k]))
    worst_kept = max((cheapest[t], t) for t in kept)
    assert all((cheapest[t], t) > worst_kept for t in cheapest if t not in kept)  # kept the cheapest types
    # every eligible offering of a kept type is offered
    assert {k for k in eligible if k.instance_type in kept} == set(offered)
    subnet_ids = {o.zone: o.subnet_id for o in request.overrides}
    assert all(zonal_subnets(SUBNETS)[z].id == s for z, s in subnet_ids.items())


# ---------------------------------------------------------------- exotic types (Karpenter's ExoticInstanceTypeFilter)


def test_exotic_types_are_left_out_of_a_launch_when_generic_types_can_take_it() -> None:
    from joiner.domain.catalog import load_bundled_catalog
    from joiner.domain.launch import exotic_names

    catalog = load_bundled_catalog()
    names = ("m5.large", "c5.metal", "g4dn.xlarge", "inf1.xlarge", "m5.xlarge")
    exotic = exotic_names(t for t in catalog.instance_types() if t.name in names)
    assert exotic == {"c5.metal", "g4dn.xlarge", "inf1.xlarge"}
    table = prices({"g4dn.xlarge": 0.01, "c5.metal": 0.02, "inf1.xlarge": 0.015, "m5.large": 0.05, "m5.xlarge": 0.1})
    request = build_fleet_request(claim(types=names), "claim-1", "spot", SUBNETS, TEMPLATE, table, frozenset(), {}, exotic=exotic)
    assert {o.instance_type for o in request.overrides} == {"m5.large", "m5.xlarge"}
    # Only exotic types can take it (or the generic ones are all out of capacity): they are launched.
    only = build_fleet_request(claim(types=("g4dn.xlarge", "c5.metal")), "claim-1", "spot", SUBNETS, TEMPLATE, table, frozenset(), {}, exotic=exotic)
    assert {o.instance_type for o in only.overrides} == {"g4dn.xlarge", "c5.metal"}
    out = frozenset(OfferingKey(name, zone, "spot") for name in ("m5.large", "m5.xlarge") for zone in ZONES)
    fallback = build_fleet_request(claim(types=names), "claim-1", "spot", SUBNETS, TEMPLATE, table, out, {}, exotic=exotic)
    assert {o.instance_type for o in fallback.overrides} == {"g4dn.xlarge", "c5.metal", "inf1.xlarge"}
    # minValues keeps every type (Karpenter skips the filter then).
    flexible = Requirements([Requirement.create(wk.INSTANCE_TYPE, "In", names, min_values=2)])
    kept = build_fleet_request(claim(types=names, requirements=flexible), "claim-1", "spot", SUBNETS, TEMPLATE, table, frozenset(), {}, exotic=exotic)
    assert {o.instance_type for o in kept.overrides} == set(names)
