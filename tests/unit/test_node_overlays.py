"""NodeOverlays: Karpenter's precedence and conflict rules, the parser's refusals, and that
`joiner plan` (and so every path through instance_types_by_pool) sees the changed prices and capacity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from joiner.cli.main import main
from joiner.domain.model import InstanceType, NodePool, Offering
from joiner.domain.overlays import NodeOverlay, adjusted_price, apply_overlays
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.resources import Resources
from joiner.domain.snapshot import SnapshotError, parse_node_overlay, parse_objects

GPU_SLICE = "example.com/gpu-slice"


def instance_type(name: str, family: str, price: float = 1.0) -> InstanceType:
    offerings = (Offering("z1", "on-demand", price), Offering("z1", "spot", price / 2), Offering("z2", "on-demand", price))
    return InstanceType(
        name=name,
        capacity=Resources.of(cpu=4000, memory=8 << 30, pods=29000),
        overhead=Resources(),
        requirements=Requirements(
            [
                Requirement.in_values("node.kubernetes.io/instance-type", name),
                Requirement.in_values("joiner.dev/instance-family", family),
                Requirement.in_values("topology.kubernetes.io/zone", "z1", "z2"),
                Requirement.in_values("joiner.dev/capacity-type", "on-demand", "spot"),
            ]
        ),
        offerings=offerings,
    )


TYPES = {"default": (instance_type("m5.large", "m5"), instance_type("c5.large", "c5", 0.8)), "gpu": (instance_type("g5.xlarge", "g5", 2.0),)}
POOLS = {"default": NodePool("default", labels={"team": "web"}), "gpu": NodePool("gpu")}


def overlay(name: str, *requirements: Requirement, price: str | None = None, capacity: dict[str, int] | None = None, weight: int = 0) -> NodeOverlay:
    return NodeOverlay(name, Requirements(requirements), price, Resources(capacity or {}), weight)


def prices(result: dict[str, tuple[InstanceType, ...]], pool: str, name: str) -> list[float]:
    return [o.price for o in next(t for t in result[pool] if t.name == name).offerings]


# ---------------------------------------------------------------- prices


@pytest.mark.parametrize(
    ("price", "change", "expected"),
    [
        (1.0, "0.42", 0.42),
        (1.0, "+10%", 1.1),
        (1.0, "-15%", 0.85),
        (1.0, "-100%", 0.0),
        (1.0, "+0.5", 1.5),
        (1.0, "-0.05", 0.95),
        (0.02, "-0.05", 0.0),
        (1.0, None, 1.0),
        (1.0, "", 1.0),
    ],
)
def test_adjusted_price_is_karpenters(price: float, change: str | None, expected: float) -> None:
    assert adjusted_price(price, change) == pytest.approx(expected)


@given(st.floats(min_value=0, max_value=1e308, allow_nan=False), st.sampled_from(["+1e308", "+900000000000000000000%", "-99.99%", "-1e308", "0"]))
def test_adjusted_price_is_never_negative_nan_or_infinite(price: float, change: str) -> None:
    result = adjusted_price(price, change)
    assert math.isfinite(result) and result >= 0


def test_a_savings_plan_discount_changes_only_the_selected_offerings() -> None:
    discount = overlay(
        "savings", Requirement.in_values("joiner.dev/instance-family", "m5"), Requirement.in_values("joiner.dev/capacity-type", "on-demand"), price="-20%"
    )
    result = apply_overlays(TYPES, [discount], POOLS)
    assert prices(dict(result.instance_types), "default", "m5.large") == pytest.approx([0.8, 0.5, 0.8])  # spot untouched
    assert prices(dict(result.instance_types), "default", "c5.large") == pytest.approx([0.8, 0.4, 0.8])
    assert result.outcomes["savings"].instance_types == ("m5.large",) and result.outcomes["savings"].node_pools == ("default",)
    assert TYPES["default"][0].offerings[0].price == 1.0  # the input is not modified


def test_pool_name_and_template_labels_select_and_undefined_keys_never_match() -> None:
    by_pool = overlay("pool", Requirement.in_values("karpenter.sh/nodepool", "gpu"), price="3")
    by_label = overlay("label", Requirement.in_values("team", "web"), price="0.01")
    undefined = overlay("undefined", Requirement.in_values("example.com/unknown", "x"), price="0")
    negative = overlay("negative", Requirement.create("example.com/unknown", "DoesNotExist"), capacity={GPU_SLICE: 1000}, weight=1)
    result = apply_overlays(TYPES, [by_pool, by_label, undefined, negative], POOLS)
    assert result.outcomes["pool"].instance_types == ("g5.xlarge",)
    assert prices(dict(result.instance_types), "gpu", "g5.xlarge") == [3.0, 3.0, 3.0]
    assert result.outcomes["label"].node_pools == ("default",)
    assert result.outcomes["undefined"].instance_types == ()
    assert result.outcomes["negative"].instance_types == ("c5.large", "g5.xlarge", "m5.large")


def test_highest_weight_wins_the_price_and_lower_weights_fill_in() -> None:
    high = overlay("high", Requirement.in_values("joiner.dev/instance-family", "m5"), price="0.3", weight=10)
    low = overlay("low", price="+100%", weight=5)
    result = apply_overlays(TYPES, [low, high], POOLS)
    assert prices(dict(result.instance_types), "default", "m5.large") == [0.3, 0.3, 0.3]
    assert prices(dict(result.instance_types), "default", "c5.large") == pytest.approx([1.6, 0.8, 1.6])
    assert not result.outcomes["high"].conflict and not result.outcomes["low"].conflict


def test_equal_weights_on_one_price_conflict_and_the_later_one_is_not_applied_anywhere() -> None:
    # Same weight: Karpenter orders by name descending, so "b" is taken first and "a" conflicts.
    a = overlay("a", price="0.1", weight=7)
    b = overlay("b", Requirement.in_values("joiner.dev/instance-family", "c5"), price="0.2", weight=7)
    result = apply_overlays(TYPES, [a, b], POOLS)
    assert "NodeOverlay b" in result.outcomes["a"].conflict and "c5.large" in result.outcomes["a"].conflict
    assert result.outcomes["a"].instance_types == ()
    assert prices(dict(result.instance_types), "default", "c5.large") == [0.2, 0.2, 0.2]
    assert prices(dict(result.instance_types), "default", "m5.large") == [1.0, 0.5, 1.0]  # a applied nowhere
    assert not result.outcomes["b"].conflict


def test_capacity_adds_extended_resources_per_resource_by_weight() -> None:
    slices = overlay("slices", Requirement.in_values("joiner.dev/instance-family", "g5"), capacity={GPU_SLICE: 8000}, weight=10)
    fallback = overlay("fallback", capacity={GPU_SLICE: 1000, "example.com/licence": 1000}, weight=1)
    result = apply_overlays(TYPES, [fallback, slices], POOLS)
    g5 = next(t for t in result.instance_types["gpu"])
    assert g5.capacity[GPU_SLICE] == 8000 and g5.capacity["example.com/licence"] == 1000 and g5.capacity["cpu"] == 4000
    m5 = next(t for t in result.instance_types["default"] if t.name == "m5.large")
    assert m5.capacity[GPU_SLICE] == 1000 and m5.allocatable[GPU_SLICE] == 1000
    same = overlay("same", capacity={GPU_SLICE: 2000}, weight=10)
    clash = apply_overlays(TYPES, [slices, same], POOLS)
    # Same weight: the later name ("slices") is taken first, so "same" conflicts on g5.xlarge.
    assert "NodeOverlay slices" in clash.outcomes["same"].conflict and "capacity example.com/gpu-slice of g5.xlarge" in clash.outcomes["same"].conflict
    assert next(iter(clash.instance_types["default"])).capacity[GPU_SLICE] == 0  # "same" applied nowhere


def test_no_overlays_is_the_identity() -> None:
    result = apply_overlays(TYPES, [], POOLS)
    assert result.instance_types is TYPES and result.outcomes == {}


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdef"), st.integers(0, 10_000), st.sampled_from(["m5", "c5", "g5", None]), st.sampled_from(["0.5", "+10%", "-0.1", None])),
        max_size=6,
        unique_by=lambda t: t[0],
    )
)
def test_every_price_is_set_by_the_first_applicable_unconflicted_overlay(specs: list[tuple[str, int, str | None, str | None]]) -> None:
    overlays = [
        overlay(name, *([Requirement.in_values("joiner.dev/instance-family", family)] if family else []), price=price, weight=weight)
        for name, weight, family, price in specs
    ]
    result = apply_overlays(TYPES, overlays, POOLS)
    ordered = sorted(overlays, key=NodeOverlay.order_key)
    for pool, types in TYPES.items():
        for original, changed in zip(types, result.instance_types[pool], strict=True):
            family = original.requirements["joiner.dev/instance-family"].single_value()
            winner = next(
                (
                    o
                    for o in ordered
                    if o.price_change is not None
                    and not result.outcomes[o.name].conflict
                    and (not o.requirements or o.requirements["joiner.dev/instance-family"].has(str(family)))
                ),
                None,
            )
            expected = [adjusted_price(o.price, winner.price_change if winner else None) for o in original.offerings]
            assert [o.price for o in changed.offerings] == pytest.approx(expected)
    for o in overlays:  # an overlay is applied everywhere it matches, or (conflict) nowhere
        assert not (result.outcomes[o.name].conflict and result.outcomes[o.name].instance_types)


# ---------------------------------------------------------------- parsing


def overlay_json(api_version: str = "joiner.dev/v1alpha1", **spec: object) -> dict:
    return {"apiVersion": api_version, "kind": "NodeOverlay", "metadata": {"name": "o"}, "spec": {"requirements": [], **spec}}


def test_parser_reads_both_api_groups_and_karpenter_keys() -> None:
    parsed = parse_node_overlay(
        overlay_json(
            "karpenter.sh/v1alpha1",
            requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            priceAdjustment="-5%",
            weight=3,
        )
    )
    assert parsed.requirements["joiner.dev/capacity-type"].has("on-demand") and parsed.price_change == "-5%" and parsed.weight == 3
    snapshot = parse_objects([overlay_json(capacity={GPU_SLICE: "4"})])
    assert snapshot.node_overlays[0].capacity[GPU_SLICE] == 4000


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"price": "1", "priceAdjustment": "+1"}, "spec: cannot set both"),
        ({"price": "-1"}, "spec.price"),
        ({"priceAdjustment": "-101%"}, "spec.priceAdjustment"),
        ({"priceAdjustment": "10%"}, "spec.priceAdjustment"),
        ({"capacity": {"memory": "1Gi"}}, "spec.capacity.memory"),
        ({"weight": 0}, "spec.weight"),
        ({"weight": 10_001}, "spec.weight"),
        ({"requirements": [{"key": "joiner.dev/instance-cpu", "operator": "Gt", "values": ["-1"]}]}, "spec.requirements[0].values"),
        ({"requirements": None}, "spec.requirements: required"),
    ],
)
def test_parser_refuses_what_the_crd_refuses(spec: dict, field: str) -> None:
    with pytest.raises(SnapshotError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_node_overlay(overlay_json(**spec))


# ---------------------------------------------------------------- joiner plan


def test_joiner_plan_applies_overlays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two pods of 1.5 CPU: small.x (0.10) each normally; an overlay pricing small.x at 0.40
    makes one big.x (0.50) cheaper; a pod asking for the overlay's extended resource fits only where it is added."""
    catalog = {
        "instanceTypes": [
            {
                "name": "small.x",
                "capacity": {"cpu": "2", "memory": "4Gi", "pods": "10"},
                "overhead": {"cpu": "0", "memory": "0"},
                "labels": {"kubernetes.io/arch": "amd64"},
                "offerings": [{"zone": "z1", "capacityType": "on-demand", "price": 0.10}],
            },
            {
                "name": "big.x",
                "capacity": {"cpu": "8", "memory": "16Gi", "pods": "40"},
                "overhead": {"cpu": "0", "memory": "0"},
                "labels": {"kubernetes.io/arch": "amd64"},
                "offerings": [{"zone": "z1", "capacityType": "on-demand", "price": 0.50}],
            },
        ]
    }
    pool = {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"}}}},
    }
    node_class = {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodeClass",
        "metadata": {"name": "default"},
        "spec": {"subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}], "role": "r"},
    }

    def pod(name: str, extra: dict | None = None) -> dict:
        requests = {"cpu": "1500m", "memory": "256Mi", **(extra or {})}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests, "limits": extra or {}}}]},
        }

    dearer = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "licence"},
        "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small.x"]}], "price": "0.40"},
    }
    slices = {
        "apiVersion": "joiner.dev/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "slices"},
        "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["big.x"]}], "capacity": {GPU_SLICE: "4"}},
    }
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))

    def plan(*objects: dict) -> dict:
        (tmp_path / "s.yaml").write_text(yaml.safe_dump_all([pool, node_class, *objects]))
        assert main(["plan", str(tmp_path / "s.yaml"), "--catalog", str(tmp_path / "catalog.json"), "-o", "json"]) == 0
        return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]

    plain = plan(pod("a"), pod("b"))
    assert sorted(c["instanceTypes"][0] for c in plain["nodeClaims"]) == ["small.x", "small.x"]
    overlaid = plan(pod("a"), pod("b"), dearer)
    assert [c["instanceTypes"][0] for c in overlaid["nodeClaims"]] == ["big.x"] and overlaid["costPerHour"] == pytest.approx(
        0.5 + 20 * 0.08 / 730
    )  # and its 20 GiB gp3 root volume
    assert plan(pod("gpu", {GPU_SLICE: "1"}))["unschedulable"][0]["pod"] == "team/gpu"
    placed = plan(pod("gpu", {GPU_SLICE: "1"}), slices)
    assert placed["unschedulable"] == [] and placed["nodeClaims"][0]["instanceTypes"] == ["big.x"]
