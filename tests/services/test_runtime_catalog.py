"""The runtime's catalog: bundled types with EC2's spot prices overlaid, refreshed, and
never blocking on-demand planning when the price history cannot be read."""

from __future__ import annotations

import pytest

from joiner.domain import labels as wk
from joiner.ports import Ec2Error
from joiner.services.context import SPOT_PRICE_RETRY, SPOT_PRICE_TTL
from tests.support.fakes import FakeWorld, fake_world


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
