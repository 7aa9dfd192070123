"""NodeOverlays: price and capacity changes applied to the instance types a NodePool offers.

Karpenter's ``karpenter.sh/v1alpha1`` NodeOverlay, read as ``joiner.dev/v1alpha1``: an
overlay selects instance types (per NodePool) by requirements on their labels, the
NodePool's name and template labels; it either sets the price of the offerings it selects
(``price``: an absolute hourly price; ``priceAdjustment``: ``+10%``, ``-15%``, ``+0.5``,
``-0.05``) or adds extended resources to the instance type's capacity (``capacity``).

Karpenter's precedence: overlays are taken in order of weight (highest first; equal weights
by name, the later name first). The first overlay that prices an offering sets its price,
and for each extended resource the first overlay that sets it wins. Two overlays of the same
weight touching the same offering's price or the same resource of an instance type conflict:
the one taken later is not applied anywhere (all or nothing) and its status says so.

:func:`apply_overlays` is the one place overlays take effect: provisioning, consolidation and
``joiner plan`` all get their instance types through it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from joiner.domain import labels as wk
from joiner.domain.model import InstanceType, NodePool, Offering
from joiner.domain.requirements import Requirements
from joiner.domain.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, Resources

__all__ = [
    "NodeOverlay",
    "OverlayResult",
    "OverlayOutcome",
    "adjusted_price",
    "apply_overlays",
    "PRICE_PATTERN",
    "PRICE_ADJUSTMENT_PATTERN",
    "RESTRICTED_CAPACITY",
    "MAX_WEIGHT",
]

#: Karpenter's CRD patterns for ``price`` and ``priceAdjustment``.
PRICE_PATTERN = re.compile(r"^\d+(\.\d+)?$")
PRICE_ADJUSTMENT_PATTERN = re.compile(r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$")
#: Resources an overlay may not set: it adds extended resources only.
RESTRICTED_CAPACITY = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE, PODS})
MAX_WEIGHT = 10_000
#: ``status.instanceTypes`` lists at most this many names (the CRD's maxItems).
MAX_LISTED_TYPES = 1000


@dataclass(frozen=True, slots=True)
class NodeOverlay:
    name: str
    requirements: Requirements = Requirements()
    #: ``price`` or ``priceAdjustment`` as written (at most one is set), or None.
    price_change: str | None = None
    capacity: Resources = Resources()
    weight: int = 0

    def order_key(self) -> tuple[int, tuple[int, ...]]:
        """Sort key: highest weight first, then the later name first (Karpenter's OrderByWeight)."""
        return (-self.weight, tuple(-ord(c) for c in self.name) + (1,))


def adjusted_price(price: float, change: str | None) -> float:
    """Karpenter's ``AdjustedPrice``: an unsigned value replaces the price; ``+x``/``-x`` add,
    ``+x%``/``-x%`` scale; never below zero, never NaN or infinite."""
    if not change:
        return price
    if change[0] not in "+-":
        result = float(change)
    elif change.endswith("%"):
        result = price * (1 + float(change[:-1]) / 100)
    else:
        result = price + float(change)
    if not math.isfinite(result):
        return price if math.isfinite(price) else 0.0
    return max(result, 0.0)


@dataclass(frozen=True, slots=True)
class OverlayOutcome:
    """What one overlay did: the instance types it changed (sorted names), or why it was not applied."""

    instance_types: tuple[str, ...] = ()
    node_pools: tuple[str, ...] = ()
    conflict: str = ""


@dataclass(frozen=True, slots=True)
class OverlayResult:
    instance_types: Mapping[str, tuple[InstanceType, ...]]
    outcomes: Mapping[str, OverlayOutcome] = field(default_factory=dict)


def _pool_requirements(pool: NodePool | None, pool_name: str) -> Requirements:
    labels = dict(pool.labels) if pool is not None else {}
    labels[wk.NODEPOOL] = pool_name
    return Requirements.from_labels(labels)


def _offering_selected(offering: Offering, requirements: Requirements) -> bool:
    if wk.ZONE in requirements and not requirements[wk.ZONE].has(offering.zone):
        return False
    return not (wk.CAPACITY_TYPE in requirements and not requirements[wk.CAPACITY_TYPE].has(offering.capacity_type))


_OFFERING_KEYS = (wk.ZONE, wk.CAPACITY_TYPE)


def _type_requirements(overlay: NodeOverlay) -> Requirements:
    """The overlay's requirements on the instance type itself (zone and capacity type select offerings)."""
    return Requirements([overlay.requirements[key] for key in overlay.requirements if key not in _OFFERING_KEYS])


def _selected(overlay: NodeOverlay, type_requirements: Requirements, pool_requirements: Requirements, instance_type: InstanceType) -> list[int]:
    """Indexes of the offerings ``overlay`` selects on ``instance_type`` (none: it does not match).
    A key the instance type, its NodePool's name and template labels do not define never matches
    ``In``/``Exists`` (Karpenter's Compatible without undefined well-known labels)."""
    combined = instance_type.requirements.intersect(pool_requirements)
    if combined.compatible(type_requirements, allow_undefined=frozenset()) is not None:
        return []
    return [i for i, offering in enumerate(instance_type.offerings) if _offering_selected(offering, overlay.requirements)]


@dataclass
class _TypeChanges:
    #: offering index -> (price change, weight of the overlay that set it)
    prices: dict[int, tuple[str, int]] = field(default_factory=dict)
    #: offering index -> weight of the last (lowest-weight) overlay that priced it
    price_weights: dict[int, int] = field(default_factory=dict)
    #: resource -> (milli, weight of the last overlay that set it)
    capacity: dict[str, tuple[int, int]] = field(default_factory=dict)


def apply_overlays(
    instance_types: Mapping[str, tuple[InstanceType, ...]],
    overlays: Iterable[NodeOverlay],
    pools: Mapping[str, NodePool] | None = None,
) -> OverlayResult:
    """``instance_types`` (NodePool -> its types) with ``overlays`` applied, and per overlay
    what it changed or which overlay it conflicts with. Pure; the input is not modified."""
    ordered = sorted(overlays, key=NodeOverlay.order_key)
    if not ordered:
        return OverlayResult(instance_types)
    pools = pools or {}
    changes: dict[tuple[str, str], _TypeChanges] = {}
    #: (pool, type, "price", offering) or (pool, type, "capacity", resource) -> the last overlay applied to it
    owner: dict[tuple[str, str, str, object], str] = {}
    outcomes: dict[str, OverlayOutcome] = {}
    for overlay in ordered:
        matches: list[tuple[str, InstanceType, list[int]]] = []
        conflict = ""
        type_requirements = _type_requirements(overlay)
        for pool_name in sorted(instance_types):
            pool = pools.get(pool_name)
            pool_requirements = _pool_requirements(pool, pool_name)
            for instance_type in instance_types[pool_name]:
                if pool is not None and instance_type.requirements.conflicts(pool.requirements):
                    continue  # the NodePool never launches it: not changed, not reported
                offerings = _selected(overlay, type_requirements, pool_requirements, instance_type)
                if not offerings:
                    continue
                matches.append((pool_name, instance_type, offerings))
                entry = changes.get((pool_name, instance_type.name))
                if entry is None or conflict:
                    continue
                if overlay.price_change is not None:
                    for index in offerings:
                        if entry.price_weights.get(index) == overlay.weight:
                            other = owner[(pool_name, instance_type.name, "price", index)]
                            offering = instance_type.offerings[index]
                            conflict = (
                                f"conflicts with NodeOverlay {other} (same weight {overlay.weight}) on the price of "
                                f"{instance_type.name} {offering.capacity_type} in {offering.zone} (NodePool {pool_name})"
                            )
                            break
                for resource in sorted(overlay.capacity):
                    if conflict:
                        break
                    held = entry.capacity.get(resource)
                    if held is not None and held[1] == overlay.weight:
                        other = owner[(pool_name, instance_type.name, "capacity", resource)]
                        conflict = (
                            f"conflicts with NodeOverlay {other} (same weight {overlay.weight}) on the capacity "
                            f"{resource} of {instance_type.name} (NodePool {pool_name})"
                        )
        if conflict:
            outcomes[overlay.name] = OverlayOutcome(conflict=conflict)
            continue
        for pool_name, instance_type, offerings in matches:
            entry = changes.setdefault((pool_name, instance_type.name), _TypeChanges())
            if overlay.price_change is not None:
                for index in offerings:
                    if index not in entry.prices:
                        entry.prices[index] = (overlay.price_change, overlay.weight)
                    entry.price_weights[index] = overlay.weight
                    owner[(pool_name, instance_type.name, "price", index)] = overlay.name
            for resource, milli in sorted(overlay.capacity.items()):
                kept = entry.capacity.get(resource)
                entry.capacity[resource] = (milli if kept is None else kept[0], overlay.weight)
                owner[(pool_name, instance_type.name, "capacity", resource)] = overlay.name
        outcomes[overlay.name] = OverlayOutcome(
            instance_types=tuple(sorted({t.name for _, t, _ in matches})),
            node_pools=tuple(sorted({p for p, _, _ in matches})),
        )
    result: dict[str, tuple[InstanceType, ...]] = {}
    for pool_name, types in instance_types.items():
        result[pool_name] = tuple(_changed(t, changes.get((pool_name, t.name))) for t in types)
    return OverlayResult(result, outcomes)


def _changed(instance_type: InstanceType, entry: _TypeChanges | None) -> InstanceType:
    if entry is None or (not entry.prices and not entry.capacity):
        return instance_type
    offerings = tuple(
        replace(offering, price=adjusted_price(offering.price, entry.prices[index][0])) if index in entry.prices else offering
        for index, offering in enumerate(instance_type.offerings)
    )
    capacity = instance_type.capacity
    if entry.capacity:
        capacity = Resources({**dict(capacity.items()), **{name: milli for name, (milli, _) in entry.capacity.items()}})
    return replace(instance_type, offerings=offerings, capacity=capacity)
