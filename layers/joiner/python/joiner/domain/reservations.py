"""On-demand capacity reservations as offerings (Karpenter's ``reserved`` capacity type).

A NodeClass's ``capacityReservationSelectorTerms`` select active reservations; each one with
room adds a ``reserved`` offering of its instance type in its zone to the NodePools of that
NodeClass. The offering is priced near zero (:data:`RESERVED_PRICE_FACTOR` of the type's
on-demand price: the capacity is paid for whether used or not), so plans fill reservations
before buying spot or on-demand, and a larger reserved type still costs more than a smaller
one. A NodePool uses them only if its ``capacity-type`` requirement allows ``reserved``.

How many instances a reservation takes is known only to EC2: a launch into a full one fails
with ``ReservationCapacityExceeded``, which marks the (type, zone, ``reserved``) offering
unavailable for three minutes like any capacity error, and the claim falls back to the
NodePool's other capacity types in the same round.

A reservation is offered only while it lasts (:func:`offered`): not once its ``end_time`` has
come, and a Capacity Block not within :data:`CAPACITY_BLOCK_EXPIRING` of its end, when EC2 is
about to reclaim its instances (Karpenter's provider calls such a block ``expiring`` and offers
it no more either). A round counts such a reservation as having no room.

Pure: reservations and instance types in, instance types out; the time is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from joiner.domain import labels as wk
from joiner.domain.model import InstanceType, Offering
from joiner.domain.requirements import Requirement, Requirements
from joiner.ports import CAPACITY_BLOCK, CapacityReservation

__all__ = ["CAPACITY_BLOCK_EXPIRING", "RESERVED_PRICE_FACTOR", "offered", "reservation_for", "room", "with_reserved_offerings"]

#: A reserved offering's price as a fraction of the type's on-demand price.
RESERVED_PRICE_FACTOR = 0.001

#: A Capacity Block is no longer launched into this long before its end: EC2 warns 40 minutes
#: ahead and terminates its instances from 30 minutes ahead (Karpenter's provider marks the
#: block ``expiring`` at the same point).
CAPACITY_BLOCK_EXPIRING = timedelta(minutes=40)


def offered(reservation: CapacityReservation, now: datetime) -> bool:
    """Whether launches may still go into ``reservation`` at ``now``: not once its ``end_time``
    has come, and for a Capacity Block not from :data:`CAPACITY_BLOCK_EXPIRING` before it. A
    reservation without an end time lasts until EC2 no longer reports it active. An end time
    without a time zone is read as UTC."""
    end = reservation.end_time
    if end is None:
        return True
    if end.tzinfo is None:
        end = end.replace(tzinfo=UTC)
    if reservation.reservation_type == CAPACITY_BLOCK:
        end -= CAPACITY_BLOCK_EXPIRING
    return now < end


def room(reservation: CapacityReservation, now: datetime) -> int:
    """How many instances may launch into ``reservation`` at ``now`` as far as this round knows
    before launching: its ``available`` count while it is :func:`offered`, else 0."""
    return reservation.available if offered(reservation, now) else 0


def _on_demand_price(instance_type: InstanceType, zone: str) -> float | None:
    prices = [o.price for o in instance_type.offerings if o.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND]
    here = [o.price for o in instance_type.offerings if o.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND and o.zone == zone]
    if here:
        return min(here)
    return min(prices) if prices else None


def with_reserved_offerings(
    types: Iterable[InstanceType],
    reservations: Sequence[CapacityReservation],
    zones: Iterable[str],
    left: Mapping[str, int] | None = None,
    node_costs: Mapping[str, float] | None = None,
) -> tuple[InstanceType, ...]:
    """``types`` with a ``reserved`` offering for every reservation with room (``left``: what
    this round knows is left of each, else its ``available`` count) in one of ``zones``.
    Types without an on-demand price are left as they are (nothing to price the offering
    from). ``node_costs`` (per zone) is the part of the on-demand prices a node pays besides
    its instance (volumes, public address: :mod:`joiner.domain.costs`): a reservation does not
    cover it, so it is added in full rather than scaled by :data:`RESERVED_PRICE_FACTOR`."""
    allowed = frozenset(zones)
    by_type: dict[str, set[str]] = {}
    for reservation in reservations:
        room = (left or {}).get(reservation.id, reservation.available)
        if room > 0 and reservation.zone in allowed:
            by_type.setdefault(reservation.instance_type, set()).add(reservation.zone)
    out = []
    for instance_type in types:
        reserved_zones = by_type.get(instance_type.name)
        if not reserved_zones:
            out.append(instance_type)
            continue
        added = []
        for zone in sorted(reserved_zones):
            price = _on_demand_price(instance_type, zone)
            if price is not None:
                fixed = min((node_costs or {}).get(zone, 0.0), price)
                added.append(Offering(zone, wk.CAPACITY_TYPE_RESERVED, round((price - fixed) * RESERVED_PRICE_FACTOR + fixed, 9)))
        if not added:
            out.append(instance_type)
            continue
        offerings = (*instance_type.offerings, *added)
        available = [o for o in offerings if o.available]
        requirements = Requirements(
            [
                *(instance_type.requirements[key] for key in instance_type.requirements if key not in (wk.CAPACITY_TYPE, wk.ZONE)),
                Requirement(wk.ZONE, False, frozenset(o.zone for o in available)),
                Requirement(wk.CAPACITY_TYPE, False, frozenset(o.capacity_type for o in available)),
            ]
        )
        out.append(replace(instance_type, offerings=offerings, requirements=requirements))
    return tuple(out)


def reservation_for(instance_type: str, zone: str, reservations: Sequence[CapacityReservation], left: Mapping[str, int]) -> CapacityReservation | None:
    """The reservation a launch of ``instance_type`` in ``zone`` targets: the one with the most
    room left (ties: lowest id), or None if every matching one is full."""
    candidates = [r for r in reservations if r.instance_type == instance_type and r.zone == zone and left.get(r.id, r.available) > 0]
    return min(candidates, key=lambda r: (-left.get(r.id, r.available), r.id)) if candidates else None
