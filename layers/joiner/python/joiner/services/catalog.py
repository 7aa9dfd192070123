"""The region's instance catalog at run time: built from EC2 and the Pricing API, shared.

Building it reads ``DescribeInstanceTypes`` (~10 pages), ``DescribeInstanceTypeOfferings``
and the Pricing API (~10 pages): seconds, so a function does it at most every
:data:`CATALOG_TTL` and shares the result through one state item (gzipped, ~40 KB) that
every other function reads first. A cold interruption or termination function therefore
pays one DynamoDB read, not the EC2 and Pricing calls.

When the Pricing API cannot be read, the bundled us-east-1 price table stands in (see
:mod:`joiner.domain.catalog_build`), the catalog is marked ``bundled-us-east-1``, the
``OnDemandPricesApproximate`` metric is counted, and it is rebuilt after
:data:`APPROXIMATE_TTL` rather than :data:`CATALOG_TTL`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from joiner.domain.catalog import BUNDLED_REGIONS, Catalog, CatalogError, load_bundled_catalog
from joiner.domain.catalog_build import PRICE_SOURCE_PRICING_API, build_catalog, decode_catalog, encode_catalog

if TYPE_CHECKING:
    from joiner.ports import Ec2Port, PricingPort, StatePort

__all__ = [
    "APPROXIMATE_TTL",
    "CATALOG_KIND",
    "CATALOG_RETRY",
    "CATALOG_TTL",
    "BuiltCatalog",
    "build_region_catalog",
    "bundled_price_table",
    "load_region_catalog",
]

#: How long a catalog built from EC2 is used (instance types and prices change rarely).
CATALOG_TTL = timedelta(hours=6)
#: How long a catalog priced from the bundled us-east-1 table is used before trying again.
APPROXIMATE_TTL = timedelta(hours=1)
#: How soon a failed build is tried again (the last good catalog is used meanwhile).
CATALOG_RETRY = timedelta(minutes=5)
#: State item kind of the shared catalog (its id is the region).
CATALOG_KIND = "CATALOG"

Count = Callable[[str], None]
Warn = Callable[[str, dict[str, object]], None]


@dataclass(frozen=True, slots=True)
class BuiltCatalog:
    """A catalog and until when it is used."""

    catalog: Catalog
    refresh_at: datetime


def ttl_of(catalog: Catalog) -> timedelta:
    return CATALOG_TTL if catalog.price_source == PRICE_SOURCE_PRICING_API else APPROXIMATE_TTL


def bundled_price_table() -> dict[str, float]:
    """On-demand prices of the bundled us-east-1 catalog, the fallback for any region."""
    return {info.name: info.on_demand_price for info in load_bundled_catalog("us-east-1").infos if info.on_demand_price is not None}


def build_region_catalog(ec2: Ec2Port, pricing: PricingPort | None, region: str, *, count: Count, warn: Warn) -> Catalog:
    """The region's catalog from EC2, priced by the Pricing API or else the bundled table.
    EC2 failures propagate (there is no catalog without them)."""
    records = ec2.describe_instance_types()
    zones = ec2.instance_type_zones()
    prices: dict[str, float] | None = None
    if pricing is not None:
        try:
            prices = pricing.on_demand_prices(region) or None
        except Exception as error:  # noqa: BLE001 - any Pricing failure falls back to the bundled table
            warn(
                "on-demand prices unavailable; using the bundled us-east-1 prices as an approximation",
                {"region": region, "error": f"{type(error).__name__}: {error}"},
            )
    zone_ids: dict[str, str] = {}
    try:
        zone_ids = ec2.zone_ids()
    except Exception as error:  # noqa: BLE001 - zone ids only label nodes and map zone-id requirements
        warn("zone ids unavailable; topology.k8s.aws/zone-id requirements cannot be met", {"region": region, "error": f"{type(error).__name__}: {error}"})
    catalog = build_catalog(region, records, zones, prices, bundled_price_table(), zone_ids)
    if catalog.price_source != PRICE_SOURCE_PRICING_API:
        count("OnDemandPricesApproximate")
    return catalog


def _shared(state: Callable[[], StatePort], region: str, now: datetime, warn: Warn) -> BuiltCatalog | None:
    try:
        item = state().get_item(CATALOG_KIND, region)
        if not item:
            return None
        built_at = datetime.fromisoformat(str(item["builtAt"]))
        catalog = decode_catalog(str(item["catalog"]))
        if catalog.region != region or not timedelta(0) <= now - built_at < ttl_of(catalog):
            return None
        return BuiltCatalog(catalog, built_at + ttl_of(catalog))
    except Exception as error:  # noqa: BLE001 - a broken shared item only costs a rebuild
        warn("shared instance catalog unreadable; reading EC2", {"error": f"{type(error).__name__}: {error}"})
        return None


def _share(state: Callable[[], StatePort], catalog: Catalog, now: datetime, warn: Warn) -> None:
    try:
        state().put_item(CATALOG_KIND, str(catalog.region), {"builtAt": now.isoformat(), "catalog": encode_catalog(catalog)}, expires_at=now + CATALOG_TTL * 4)
    except Exception as error:  # noqa: BLE001 - sharing is an optimisation
        warn("could not share the instance catalog", {"error": f"{type(error).__name__}: {error}"})


def load_region_catalog(
    region: str,
    now: datetime,
    *,
    previous: Catalog | None,
    state: Callable[[], StatePort],
    ec2: Callable[[], Ec2Port],
    pricing: Callable[[], PricingPort | None],
    count: Count,
    warn: Warn,
) -> BuiltCatalog:
    """The shared catalog when fresh, else one built from EC2 (and shared). When EC2 cannot
    be read: the ``previous`` catalog, else the bundled one where bundled (both retried
    after :data:`CATALOG_RETRY`), else :class:`CatalogError`."""
    shared = _shared(state, region, now, warn)
    if shared is not None:
        return shared
    try:
        catalog = build_region_catalog(ec2(), pricing(), region, count=count, warn=warn)
    except Exception as error:
        count("CatalogUnavailable")
        detail = f"{type(error).__name__}: {error}"
        if previous is not None:
            warn("instance catalog refresh failed; keeping the last one", {"error": detail})
            return BuiltCatalog(previous, now + CATALOG_RETRY)
        if region in BUNDLED_REGIONS:
            warn("instance catalog unavailable from EC2; using the bundled one", {"error": detail})
            return BuiltCatalog(load_bundled_catalog(region), now + CATALOG_RETRY)
        raise CatalogError(f"no instance catalog for region {region!r}: EC2 could not be read ({detail})") from error
    _share(state, catalog, now, warn)
    return BuiltCatalog(catalog, now + ttl_of(catalog))
