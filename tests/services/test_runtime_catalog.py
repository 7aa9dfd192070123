"""The runtime's catalog: bundled types with EC2's spot prices overlaid, refreshed, and
never blocking on-demand planning when the price history cannot be read."""

from __future__ import annotations

import pytest

from joiner.domain import labels as wk
from joiner.domain.catalog import CatalogError, load_bundled_catalog
from joiner.domain.catalog_build import PRICE_SOURCE_BUNDLED, PRICE_SOURCE_PRICING_API
from joiner.ports import Ec2Error
from joiner.services.catalog import APPROXIMATE_TTL, CATALOG_KIND, CATALOG_TTL
from joiner.services.context import SPOT_PRICE_RETRY, SPOT_PRICE_TTL
from tests.support.fakes import FakeEc2, FakeWorld, fake_world, moto_instance_type_zones


@pytest.fixture()
def world() -> FakeWorld:
    return fake_world()


def spot_offerings(catalog, name: str) -> dict[str, float]:  # type: ignore[no-untyped-def]
    return {o.zone: o.price for o in catalog.offerings(name) if o.capacity_type == wk.CAPACITY_TYPE_SPOT}


def test_bundled_catalog_gets_current_spot_prices(world: FakeWorld) -> None:
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.031, ("c5.large", "us-east-1b"): 0.033, ("no-such.type", "us-east-1a"): 0.01}
    runtime = world.runtime(catalog_value=None)
    catalog = runtime.catalog
    assert spot_offerings(catalog, "c5.large") == {"us-east-1a": 0.031, "us-east-1b": 0.033}
    assert spot_offerings(catalog, "m5.large") == {}
    on_demand = {o.zone for o in catalog.offerings("c5.large") if o.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND}
    assert {"us-east-1a", "us-east-1b"} <= on_demand


def test_spot_prices_are_read_once_per_ttl_then_refreshed(world: FakeWorld) -> None:
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.031}
    runtime = world.runtime(catalog_value=None)
    first = runtime.catalog
    assert runtime.catalog is first
    assert world.ec2.calls.count("spot_prices") == 1
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.045}
    world.clock.advance(SPOT_PRICE_TTL.total_seconds() - 1)
    assert runtime.catalog is first
    world.clock.advance(2)
    assert spot_offerings(runtime.catalog, "c5.large") == {"us-east-1a": 0.045}
    assert world.ec2.calls.count("spot_prices") == 2


def test_unreadable_price_history_keeps_the_last_prices_and_is_counted(world: FakeWorld) -> None:
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.031}
    runtime = world.runtime(catalog_value=None)
    known = runtime.catalog
    world.clock.advance(SPOT_PRICE_TTL.total_seconds())
    world.ec2.fail("spot_prices", Ec2Error("ec2 describe_spot_price_history failed: UnauthorizedOperation", code="UnauthorizedOperation"))
    assert runtime.catalog is known
    assert world.metrics.total("SpotPricesUnavailable") == 1
    # Tried again after the retry interval, not on every access.
    assert runtime.catalog is known and world.ec2.calls.count("spot_prices") == 2
    world.clock.advance(SPOT_PRICE_RETRY.total_seconds())
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.05}
    assert spot_offerings(runtime.catalog, "c5.large") == {"us-east-1a": 0.05}


def test_first_read_failing_plans_on_demand_only(world: FakeWorld) -> None:
    world.ec2.fail("spot_prices")
    runtime = world.runtime(catalog_value=None)
    catalog = runtime.catalog
    assert catalog.offerings("c5.large") and spot_offerings(catalog, "c5.large") == {}


def test_a_given_catalog_is_used_as_it_is(world: FakeWorld) -> None:
    runtime = world.runtime()
    assert runtime.catalog is world.catalog
    assert "spot_prices" not in world.ec2.calls


def test_prices_read_by_one_function_are_shared_with_the_others(world: FakeWorld) -> None:
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.031, ("c5.large", "us-east-1c"): 0.034, ("m5.large", "us-east-1b"): 0.04}
    scanner = world.runtime("scanner", catalog_value=None)
    interruption = world.runtime("interruption", catalog_value=None)
    assert spot_offerings(scanner.catalog, "c5.large") == {"us-east-1a": 0.031, "us-east-1c": 0.034}
    assert spot_offerings(interruption.catalog, "m5.large") == {"us-east-1b": 0.04}
    assert spot_offerings(interruption.catalog, "c5.large") == {"us-east-1a": 0.031, "us-east-1c": 0.034}
    assert world.ec2.calls.count("spot_prices") == 1


def test_shared_prices_older_than_the_ttl_are_read_again_from_ec2(world: FakeWorld) -> None:
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.031}
    world.runtime("scanner", catalog_value=None).catalog
    world.clock.advance(SPOT_PRICE_TTL.total_seconds())
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.029}
    assert spot_offerings(world.runtime("interruption", catalog_value=None).catalog, "c5.large") == {"us-east-1a": 0.029}
    assert world.ec2.calls.count("spot_prices") == 2


def test_a_broken_shared_item_costs_only_an_ec2_read(world: FakeWorld) -> None:
    from joiner.services.context import SPOT_PRICES_ID, SPOT_PRICES_KIND

    world.state.put_item(SPOT_PRICES_KIND, SPOT_PRICES_ID, {"readAt": "yesterday", "zones": [], "prices": {}})
    world.ec2.spot_price_table = {("c5.large", "us-east-1a"): 0.031}
    runtime = world.runtime(catalog_value=None)
    assert spot_offerings(runtime.catalog, "c5.large") == {"us-east-1a": 0.031}
    assert world.metrics.total("SpotPricesUnavailable") == 0


# --- any region: the catalog built from EC2 and the Pricing API --------------------------------


def regional_world(region: str) -> FakeWorld:
    world = fake_world()
    world.ec2 = FakeEc2(world.cluster, zones=tuple(f"{region}{letter}" for letter in "abc"), clock=world.clock)
    return world


@pytest.mark.parametrize("region", ["eu-west-1", "ap-southeast-2"])
def test_catalog_of_any_region_is_built_from_ec2_and_priced_by_the_pricing_api(region: str) -> None:
    world = regional_world(region)
    world.pricing.prices = {region: {"m5.large": 0.107, "c5.large": 0.096}}
    runtime = world.runtime(settings=world.settings(region=region), catalog_value=None)
    catalog = runtime.catalog
    assert catalog.region == region and catalog.price_source == PRICE_SOURCE_PRICING_API
    m5 = catalog.instance_type("m5.large")
    assert m5.requirements.labels()[wk.REGION] == region
    assert {o.zone for o in m5.offerings} == set(moto_instance_type_zones(region)["m5.large"])
    assert {o.price for o in m5.offerings} == {0.107}
    # A type the Pricing API did not price gets no offering (it cannot be ranked).
    assert catalog.offerings("r5.large") == ()
    assert world.pricing.calls == [region]
    assert world.metrics.total("OnDemandPricesApproximate") == 0


def test_pricing_api_failure_falls_back_to_the_bundled_us_east_1_prices_marked_and_counted() -> None:
    world = regional_world("eu-west-1")
    world.pricing.error = Ec2Error("pricing GetProducts failed: AccessDeniedException", code="AccessDeniedException")
    runtime = world.runtime(settings=world.settings(region="eu-west-1"), catalog_value=None)
    catalog = runtime.catalog
    assert catalog.price_source == PRICE_SOURCE_BUNDLED
    bundled = load_bundled_catalog("us-east-1")
    assert {o.price for o in catalog.offerings("m5.large")} == {bundled.info("m5.large").on_demand_price}
    assert world.metrics.total("OnDemandPricesApproximate") == 1
    # An approximate catalog is rebuilt sooner than a priced one: after APPROXIMATE_TTL.
    world.pricing.error = None
    world.pricing.prices = {"eu-west-1": {"m5.large": 0.107}}
    world.clock.advance(APPROXIMATE_TTL.total_seconds())
    assert runtime.catalog.price_source == PRICE_SOURCE_PRICING_API


def test_the_catalog_is_built_once_shared_through_the_state_table_and_refreshed_after_its_ttl() -> None:
    world = regional_world("ap-southeast-2")
    world.pricing.prices = {"ap-southeast-2": {"m5.large": 0.12}}
    settings = world.settings(region="ap-southeast-2")
    provisioning = world.runtime("provisioning", settings=settings, catalog_value=None)
    assert provisioning.catalog.price_source == PRICE_SOURCE_PRICING_API
    assert world.ec2.calls.count("describe_instance_types") == 1
    # A cold interruption function reads the shared item, not EC2 or the Pricing API.
    interruption = world.runtime("interruption", settings=settings, catalog_value=None)
    shared = interruption.catalog
    assert world.ec2.calls.count("describe_instance_types") == 1 and world.pricing.calls == ["ap-southeast-2"]
    assert shared.names == provisioning.catalog.names
    assert shared.instance_type("m5.large").requirements.labels() == provisioning.catalog.instance_type("m5.large").requirements.labels()
    assert shared.offerings("m5.large") == provisioning.catalog.offerings("m5.large")
    # Warm: reused until the TTL, then rebuilt.
    world.clock.advance(CATALOG_TTL.total_seconds() - 1)
    assert provisioning.catalog.names == shared.names and world.ec2.calls.count("describe_instance_types") == 1
    world.clock.advance(1)
    assert provisioning.catalog.region == "ap-southeast-2"
    assert world.ec2.calls.count("describe_instance_types") == 2


def test_ec2_unreadable_keeps_the_last_catalog_else_bundled_where_bundled_else_a_clear_error() -> None:
    world = regional_world("eu-west-1")
    runtime = world.runtime(settings=world.settings(region="eu-west-1"), catalog_value=None)
    known = runtime.catalog
    world.clock.advance(CATALOG_TTL.total_seconds())
    world.ec2.fail("describe_instance_types", Ec2Error("ec2 describe_instance_types failed: UnauthorizedOperation", code="UnauthorizedOperation"))
    world.state.delete_item(CATALOG_KIND, "eu-west-1")
    assert runtime.catalog.names == known.names
    assert world.metrics.total("CatalogUnavailable") == 1

    fresh = regional_world("eu-west-1")
    fresh.ec2.fail("describe_instance_types")
    cold = fresh.runtime(settings=fresh.settings(region="eu-west-1"), catalog_value=None)
    with pytest.raises(CatalogError, match="no instance catalog for region 'eu-west-1': EC2 could not be read"):
        _ = cold.catalog

    bundled_region = fake_world()
    bundled_region.ec2.fail("describe_instance_types")
    assert bundled_region.runtime(catalog_value=None).catalog.names == load_bundled_catalog("us-east-1").names


def test_a_broken_shared_catalog_item_costs_only_a_rebuild() -> None:
    world = regional_world("eu-west-1")
    world.state.put_item(CATALOG_KIND, "eu-west-1", {"builtAt": world.clock.now().isoformat(), "catalog": "bm90IGd6aXA="})
    catalog = world.runtime(settings=world.settings(region="eu-west-1"), catalog_value=None).catalog
    assert catalog.region == "eu-west-1" and "m5.large" in catalog
    assert world.ec2.calls.count("describe_instance_types") == 1
    rebuilt = world.state.get_item(CATALOG_KIND, "eu-west-1")
    assert rebuilt is not None and rebuilt["catalog"] != "bm90IGd6aXA="
