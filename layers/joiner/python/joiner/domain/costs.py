"""What a node costs per hour besides its instance: the EBS volumes its NodeClass attaches and a
public IPv4 address where its subnet assigns one. Planning adds this to every offering's price
(:meth:`joiner.domain.catalog.Catalog.for_node_class` the volumes, the provisioning service's
per-zone offering filter the address), so a plan of many small nodes pays for each node's disk
and address as the bill does.

Prices are us-east-1 list prices (USD), as the bundled instance prices are; other regions differ
by a few percent to a third, the same approximation. Sources: https://aws.amazon.com/ebs/pricing/
(volumes) and https://aws.amazon.com/vpc/pricing/ (public IPv4: $0.005 per in-use address-hour
since February 2024).

Pure module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from joiner.domain.model import NodeClass
from joiner.domain.quantity import QuantityError, parse_quantity

__all__ = [
    "HOURS_PER_MONTH",
    "PUBLIC_IPV4_PER_HOUR",
    "VolumePrice",
    "EBS_PRICES",
    "DEFAULT_ROOT_VOLUME",
    "volume_cost_per_hour",
    "block_device_cost_per_hour",
]

#: AWS bills GB-months and provisioned IOPS-months over 730 hours.
HOURS_PER_MONTH = 730
PUBLIC_IPV4_PER_HOUR = 0.005
_GIB = 2**30


@dataclass(frozen=True, slots=True)
class VolumePrice:
    """One EBS volume type's monthly prices: per GB, per provisioned IOPS above ``free_iops``
    (``iops_tiers``: (IOPS in the tier, price) in order, the last tier unbounded), and per MB/s
    of throughput above ``free_mbps`` (gp3 only)."""

    gb_month: float
    iops_tiers: tuple[tuple[int | None, float], ...] = ()
    free_iops: int = 0
    mbps_month: float = 0.0
    free_mbps: int = 0


#: us-east-1. ``standard`` (magnetic) also bills $0.05 per million I/O requests, which depends on
#: use and is not counted.
EBS_PRICES: Mapping[str, VolumePrice] = {
    "gp3": VolumePrice(0.08, ((None, 0.005),), free_iops=3000, mbps_month=0.04, free_mbps=125),
    "gp2": VolumePrice(0.10),
    "io1": VolumePrice(0.125, ((None, 0.065),)),
    "io2": VolumePrice(0.125, ((32000, 0.065), (32000, 0.0455), (None, 0.032))),
    "st1": VolumePrice(0.045),
    "sc1": VolumePrice(0.015),
    "standard": VolumePrice(0.05),
}

#: What Joiner attaches when the NodeClass gives no block device mappings (adapters/ec2.py).
DEFAULT_ROOT_VOLUME: Mapping[str, object] = {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3"}}


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def _gib(value: object) -> int:
    """Whole GiB EC2 provisions for a ``volumeSize`` (rounded up, as the launch template gets it);
    0 when absent or malformed (a volume from a snapshot takes the snapshot's size, not known here)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)):
        return 0
    try:
        size = parse_quantity(value)
    except QuantityError:
        return 0
    return max(math.ceil(size / _GIB), 0)


def _iops_month(price: VolumePrice, iops: int) -> float:
    billed = max(iops - price.free_iops, 0)
    total = 0.0
    for size, rate in price.iops_tiers:
        step = billed if size is None else min(billed, size)
        total += step * rate
        billed -= step
        if billed <= 0:
            break
    return total


def volume_cost_per_hour(mapping: Mapping[str, object]) -> float:
    """USD per hour of one block device mapping's EBS volume (gp3 when no type is given, as
    Joiner launches it); an unknown type costs nothing rather than a guess."""
    ebs = mapping.get("ebs")
    if not isinstance(ebs, Mapping):
        return 0.0
    volume_type = ebs.get("volumeType") or "gp3"
    price = EBS_PRICES.get(str(volume_type))
    if price is None:
        return 0.0
    monthly = _gib(ebs.get("volumeSize")) * price.gb_month
    if price.iops_tiers:
        monthly += _iops_month(price, _whole(ebs.get("iops")))
    if price.mbps_month:
        monthly += max(_whole(ebs.get("throughput")) - price.free_mbps, 0) * price.mbps_month
    return monthly / HOURS_PER_MONTH


def block_device_cost_per_hour(node_class: NodeClass) -> float:
    """USD per hour of every volume a node of this NodeClass gets (the default 20Gi gp3 root
    volume when it gives none)."""
    mappings = node_class.block_device_mappings or (DEFAULT_ROOT_VOLUME,)
    return sum(volume_cost_per_hour(mapping) for mapping in mappings)
