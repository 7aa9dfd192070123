"""Building a region's catalog from what EC2 and the Pricing API describe (pure conversion).

The runtime reads ``DescribeInstanceTypes`` records, ``DescribeInstanceTypeOfferings`` zones
and Pricing API products through the adapters; this module turns them into
:class:`~joiner.domain.catalog.InstanceTypeInfo` values and a :class:`Catalog`, and
serialises a catalog compactly so functions can share one build through the state table.
``scripts/build_catalog.py`` uses the same conversion for the bundled offline catalog, so
the offline and the live catalog describe a type identically.

Prices: on-demand prices come from the Pricing API for the catalog's own region. When it
cannot be read, the bundled us-east-1 price table stands in (prices in other regions differ,
typically by 0-30%): such a catalog is marked ``price_source = "bundled-us-east-1"`` and the
runtime logs and counts it. A type priced by neither gets no on-demand offering (it cannot
be ranked against the others), exactly as an unpriced bundled entry.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from importlib import resources as importlib_resources
from typing import Any

from joiner.domain.catalog import (
    CAPACITY_TYPES,
    INFO_FIELDS,
    Catalog,
    CatalogError,
    InstanceTypeInfo,
    catalog_from_bundled_document,
)

__all__ = [
    "KUBE_ARCHITECTURES",
    "PRICE_SOURCE_BUNDLED",
    "PRICE_SOURCE_PRICING_API",
    "build_catalog",
    "decode_catalog",
    "encode_catalog",
    "info_from_description",
    "infos_from_descriptions",
    "network_bandwidth_megabits",
    "on_demand_price_from_product",
    "partition_of",
    "pricing_endpoint_region",
]

KUBE_ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}
PRICE_SOURCE_PRICING_API = "pricing-api"
PRICE_SOURCE_BUNDLED = "bundled-us-east-1"
_FORMAT = 1
_FIELD_NAMES = {attribute: key for key, attribute in INFO_FIELDS.items()}


@lru_cache(maxsize=1)
def network_bandwidth_megabits() -> Mapping[str, int]:
    """Baseline network bandwidth per type in Mbit/s (Karpenter's generated table, shipped
    as ``joiner/data/ec2-network-bandwidth.json.gz``): EC2 describes only "Up to 10
    Gigabit" for burstable types, so Karpenter's ``instance-network-bandwidth`` label uses
    this table, and so do we, falling back to the default card's ``BaselineBandwidthInGbps``."""
    payload = importlib_resources.files("joiner").joinpath("data", "ec2-network-bandwidth.json.gz").read_bytes()
    table = json.loads(gzip.decompress(payload))["megabits"]
    return {str(name): int(value) for name, value in table.items()}


#: Region-name prefixes of the partitions other than ``aws`` (longest first).
_PARTITION_PREFIXES: tuple[tuple[str, str], ...] = (
    ("us-isob-", "aws-iso-b"),
    ("us-isof-", "aws-iso-f"),
    ("eu-isoe-", "aws-iso-e"),
    ("us-iso-", "aws-iso"),
    ("us-gov-", "aws-us-gov"),
    ("cn-", "aws-cn"),
)


def partition_of(region: str) -> str:
    """The AWS partition of a region name (``aws``, ``aws-cn``, ``aws-us-gov``, ``aws-iso*``)."""
    for prefix, partition in _PARTITION_PREFIXES:
        if region.startswith(prefix):
            return partition
    return "aws"


def pricing_endpoint_region(region: str) -> str | None:
    """The Price List Query API endpoint for ``region``, None where its partition has none.

    The API answers for every region of its partition from each of its endpoints: in ``aws``
    from us-east-1, eu-central-1 and ap-south-1 (the nearest is used), in ``aws-cn`` from
    cn-northwest-1; GovCloud and the ISO partitions have no Price List Query API (an
    endpoint in another partition does not accept the partition's credentials)."""
    partition = partition_of(region)
    if partition == "aws-cn":
        return "cn-northwest-1"
    if partition != "aws":
        return None
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith(("eu-", "me-", "af-", "il-")):
        return "eu-central-1"
    return "us-east-1"


def _kebab(text: str) -> str:
    return "-".join(text.lower().split())


def info_from_description(
    record: Mapping[str, Any], zones: Iterable[str], price: float | None, bandwidth: Mapping[str, int] | None = None
) -> InstanceTypeInfo | None:
    """One ``DescribeInstanceTypes`` record as an :class:`InstanceTypeInfo`, or None when it
    has no Kubernetes architecture (amd64/arm64) or no zone offering."""
    processor = record.get("ProcessorInfo") or {}
    architectures: list[str] = []
    for arch in processor.get("SupportedArchitectures") or []:
        mapped = KUBE_ARCHITECTURES.get(arch)
        if mapped and mapped not in architectures:
            architectures.append(mapped)
    zone_list = tuple(sorted(set(zones)))
    if not architectures or not zone_list:
        return None
    name = str(record["InstanceType"])
    network = record.get("NetworkInfo") or {}
    cards = network.get("NetworkCards") or []
    default_card = network.get("DefaultNetworkCardIndex", 0)
    card: Mapping[str, Any] = next((c for c in cards if c.get("NetworkCardIndex") == default_card), {})
    # The VPC CNI only uses the default network card, so its interfaces bound max pods.
    enis = int(card.get("MaximumNetworkInterfaces") or network.get("MaximumNetworkInterfaces") or 0)
    table = network_bandwidth_megabits() if bandwidth is None else bandwidth
    network_mbps = table.get(name)
    if network_mbps is None and card.get("BaselineBandwidthInGbps"):
        network_mbps = round(float(card["BaselineBandwidthInGbps"]) * 1000)
    ebs = ((record.get("EbsInfo") or {}).get("EbsOptimizedInfo") or {}).get("MaximumBandwidthInMbps") or 0
    storage = record.get("InstanceStorageInfo") or {}
    nvme_gib = int(storage.get("TotalSizeInGB") or 0) if storage.get("NvmeSupport", "unsupported") != "unsupported" else 0
    clock_ghz = processor.get("SustainedClockSpeedInGhz")
    fields: dict[str, Any] = {
        "name": name,
        "vcpus": int(record["VCpuInfo"]["DefaultVCpus"]),
        "memory_mib": int(record["MemoryInfo"]["SizeInMiB"]),
        "architectures": tuple(architectures),
        "cpu_manufacturer": str(processor.get("Manufacturer", "")),
        "cpu_clock_mhz": round(float(clock_ghz) * 1000) if clock_ghz else 0,
        "max_enis": enis,
        "ipv4_per_eni": int(network.get("Ipv4AddressesPerInterface") or 0),
        "hypervisor": str(record.get("Hypervisor", "")),
        "bare_metal": bool(record.get("BareMetal")),
        "usage_classes": tuple(c for c in CAPACITY_TYPES if c in (record.get("SupportedUsageClasses") or [])),
        "zones": zone_list,
        "on_demand_price": price,
        "ebs_bandwidth_mbps": int(ebs),
        "network_bandwidth_mbps": int(network_mbps or 0),
        "local_nvme_gib": nvme_gib,
        "encryption_in_transit": bool(network.get("EncryptionInTransitSupported")),
        "nitro_enclaves": record.get("NitroEnclavesSupport") == "supported",
    }
    gpus = (record.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        fields["gpu_count"] = sum(int(g.get("Count", 0)) for g in gpus)
        fields["gpu_manufacturer"] = str(gpus[0].get("Manufacturer", ""))
        fields["gpu_name"] = str(gpus[0].get("Name", ""))
        fields["gpu_memory_mib"] = int((gpus[0].get("MemoryInfo") or {}).get("SizeInMiB", 0))
        if len(gpus) > 1:
            fields["gpu_kinds"] = len(gpus)
    neuron_devices = (record.get("NeuronInfo") or {}).get("NeuronDevices") or []
    accelerators = (record.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or []
    if neuron_devices:
        fields["neuron_count"] = sum(int(d.get("Count", 0)) for d in neuron_devices)
        fields["neuron_cores"] = sum(int(d.get("Count", 0)) * int((d.get("CoreInfo") or {}).get("Count", 0)) for d in neuron_devices)
        fields["neuron_name"] = str(neuron_devices[0].get("Name", ""))
        if len(neuron_devices) == 1:
            fields["accelerator_name"] = _kebab(str(neuron_devices[0].get("Name", "")))
            fields["accelerator_manufacturer"] = "aws"
            fields["accelerator_count"] = int(neuron_devices[0].get("Count", 0))
    elif accelerators:
        aws_accelerators = [a for a in accelerators if a.get("Manufacturer") == "AWS"]
        if aws_accelerators:
            fields["neuron_count"] = sum(int(a.get("Count", 0)) for a in aws_accelerators)
            fields["neuron_name"] = str(aws_accelerators[0].get("Name", ""))
        if len(accelerators) == 1:
            fields["accelerator_name"] = _kebab(str(accelerators[0].get("Name", "")))
            fields["accelerator_manufacturer"] = _kebab(str(accelerators[0].get("Manufacturer", "")))
            fields["accelerator_count"] = int(accelerators[0].get("Count", 0))
    efa = (network.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0
    if network.get("EfaSupported") and efa:
        fields["efa_count"] = int(efa)
    return InstanceTypeInfo(**fields)


def infos_from_descriptions(records: Iterable[Mapping[str, Any]], zones: Mapping[str, Iterable[str]], prices: Mapping[str, float]) -> list[InstanceTypeInfo]:
    """Every described type offered in a zone and runnable by Kubernetes, sorted by name
    (``prices`` may leave types out: they get no on-demand offering)."""
    infos = []
    for record in sorted(records, key=lambda r: str(r.get("InstanceType", ""))):
        name = str(record.get("InstanceType", ""))
        if not name:
            continue
        info = info_from_description(record, zones.get(name, ()), prices.get(name))
        if info is not None:
            infos.append(info)
    return infos


def build_catalog(
    region: str,
    records: Iterable[Mapping[str, Any]],
    zones: Mapping[str, Iterable[str]],
    prices: Mapping[str, float] | None,
    fallback_prices: Mapping[str, float],
    zone_ids: Mapping[str, str] | None = None,
) -> Catalog:
    """The region's catalog. ``prices`` None (the Pricing API could not be read) or empty
    means ``fallback_prices`` (the bundled us-east-1 table), and the catalog says so in
    ``price_source``. Raises :class:`CatalogError` when EC2 described no usable type."""
    source = PRICE_SOURCE_PRICING_API if prices else PRICE_SOURCE_BUNDLED
    infos = infos_from_descriptions(records, zones, prices or fallback_prices)
    if not infos:
        raise CatalogError(f"EC2 describes no instance type offered in {region} for amd64 or arm64")
    return Catalog(infos, region=region, price_source=source, zone_ids=zone_ids)


def on_demand_price_from_product(product: str | Mapping[str, Any]) -> tuple[str, float] | None:
    """``(instance type, USD per hour)`` from one Pricing API ``PriceList`` entry (a JSON
    string), or None when it is not a priced instance product."""
    document = json.loads(product) if isinstance(product, str) else product
    attributes = (document.get("product") or {}).get("attributes") or {}
    name = attributes.get("instanceType")
    if not isinstance(name, str) or not name:
        return None
    for term in ((document.get("terms") or {}).get("OnDemand") or {}).values():
        for dimension in (term.get("priceDimensions") or {}).values():
            try:
                price = float((dimension.get("pricePerUnit") or {}).get("USD", ""))
            except ValueError:
                continue
            if price > 0:
                return name, price
    return None


def _info_document(info: InstanceTypeInfo) -> dict[str, Any]:
    default = InstanceTypeInfo(name="", vcpus=0, memory_mib=0, architectures=(), max_enis=0, ipv4_per_eni=0)
    out: dict[str, Any] = {}
    for attribute, key in _FIELD_NAMES.items():
        value = getattr(info, attribute)
        if attribute == "name" or value != getattr(default, attribute):
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def encode_catalog(catalog: Catalog) -> str:
    """The catalog's raw facts, gzipped JSON in base64 (about 40 KB for a region's ~900
    types, far below DynamoDB's 400 KB item limit). Spot offerings are not included."""
    document: dict[str, Any] = {
        "format": _FORMAT,
        "region": catalog.region,
        "priceSource": catalog.price_source,
        "instanceTypes": [_info_document(info) for info in catalog.infos],
    }
    if catalog.zone_ids:
        document["zoneIds"] = dict(catalog.zone_ids)
    payload = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return base64.b64encode(gzip.compress(payload, compresslevel=6, mtime=0)).decode("ascii")


def decode_catalog(text: str) -> Catalog:
    """The catalog :func:`encode_catalog` wrote. Raises :class:`CatalogError` when malformed."""
    try:
        document = json.loads(gzip.decompress(base64.b64decode(text, validate=True)))
        catalog = catalog_from_bundled_document({key: value for key, value in document.items() if key not in ("priceSource", "zoneIds")})
        zone_ids = document.get("zoneIds") or {}
        if not isinstance(zone_ids, dict):
            raise CatalogError(f"shared catalog: zoneIds is not a mapping: {zone_ids!r}")
        return Catalog(
            catalog.infos, region=catalog.region, price_source=str(document.get("priceSource", "")), zone_ids={str(k): str(v) for k, v in zone_ids.items()}
        )
    except CatalogError:
        raise
    except (ValueError, TypeError, KeyError, OSError, EOFError) as error:
        raise CatalogError(f"shared catalog unreadable: {type(error).__name__}: {error}") from None
