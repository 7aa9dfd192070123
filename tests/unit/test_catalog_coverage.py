"""The bundled us-east-1 catalog knows every type of Karpenter's us-east-1 price list (issue 11
§2), including the 27 moto's DescribeInstanceTypes data lacks (scripts/data/instance-types-supplement.json)."""

from __future__ import annotations

from pathlib import Path

from joiner.domain import labels as wk
from joiner.domain.catalog import load_bundled_catalog

ROOT = Path(__file__).resolve().parents[2]
LISTED = [
    line.strip() for line in (ROOT / "tests/data/karpenter-us-east-1-instance-types.txt").read_text().splitlines() if line.strip() and not line.startswith("#")
]


def test_every_type_karpenter_prices_in_us_east_1_is_in_the_bundled_catalog() -> None:
    catalog = load_bundled_catalog("us-east-1")
    assert len(LISTED) == 1367
    assert sorted(set(LISTED) - set(catalog.names)) == []


def label(instance_type, key: str) -> str | None:  # type: ignore[no-untyped-def]
    requirement = instance_type.requirements.get(key)
    return None if requirement is None else requirement.single_value()


def test_the_supplemented_types_carry_their_accelerators_and_prices() -> None:
    catalog = load_bundled_catalog("us-east-1")
    by_name = {it.name: it for it in catalog.instance_types()}
    p3 = by_name["p3.8xlarge"]
    assert (p3.capacity.get("cpu"), p3.capacity.get("nvidia.com/gpu")) == (32000, 4000)
    assert label(p3, wk.INSTANCE_GPU_NAME) == "v100" and label(p3, wk.INSTANCE_GPU_MANUFACTURER) == "nvidia"
    g4ad = by_name["g4ad.xlarge"]
    assert g4ad.capacity.get("amd.com/gpu") == 1000 and label(g4ad, wk.INSTANCE_LOCAL_NVME) == "150"
    assert g4ad.capacity.get("pods") == 8000  # 2 ENIs x (4 - 1) + 2, as Karpenter's max pods
    u24 = by_name["u-24tb1.112xlarge"]
    assert u24.capacity.get("cpu") == 448000 and {o.capacity_type for o in u24.offerings} == {"on-demand"}
    assert all(
        o.price > 0 for name in ("p3.2xlarge", "dl1.24xlarge", "i3.metal", "f1.2xlarge") for o in by_name[name].offerings if o.capacity_type == "on-demand"
    )
