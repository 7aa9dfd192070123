"""Pure construction of EC2 Fleet requests for node claims.

One claim becomes one ``CreateFleet`` (type ``instant``, target 1) in one capacity type. Its
overrides are the cross product of the claim's cheapest instance types and one subnet per allowed
zone, ordered cheapest first, with offerings known to be out of capacity left out, so EC2 picks
among the alternatives we would accept anyway and a capacity error on one offering falls through
to the next inside the same call.

Limits: EC2 documents a cap of 300 overrides across launch templates for ``request``/``maintain``
fleets and none for ``instant`` ones; Karpenter sends at most 60 instance types times the zonal
subnets. We do the same and also cap the total at 300 (:data:`MAX_OVERRIDES`) so a request is valid
for every fleet type.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence

from joiner.domain import labels as wk
from joiner.domain.model import InstanceType, NodeClaimPlan, NodePool, OfferingKey, Taint
from joiner.domain.requirements import Requirements
from joiner.domain.resources import AMD_GPU, HABANA_GAUDI, NEURON, NEURON_CORE, NVIDIA_GPU
from joiner.ports import FleetOverride, FleetRequest, LaunchTemplateRef, Subnet

__all__ = [
    "LaunchError",
    "NoOfferingsError",
    "MAX_INSTANCE_TYPES",
    "MAX_OVERRIDES",
    "CAPACITY_TYPE_PREFERENCE",
    "client_token",
    "choose_capacity_type",
    "zonal_subnets",
    "build_fleet_request",
    "launch_tags",
    "node_labels",
    "node_taints",
    "cluster_tags",
    "CLUSTER_TAG",
    "CLIENT_TOKEN_TAG",
    "CLIENT_TOKEN_PATTERN",
    "EXOTIC_RESOURCES",
    "is_exotic",
    "exotic_names",
    "tenancy_of",
]

MAX_INSTANCE_TYPES = 60
MAX_OVERRIDES = 300
#: Reserved first (capacity already paid for), then spot, with on-demand as the fallback. A
#: reserved offering exists only where a selected capacity reservation has room.
CAPACITY_TYPE_PREFERENCE = (wk.CAPACITY_TYPE_RESERVED, wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND)
CLUSTER_TAG = "joiner.dev/cluster"
CLIENT_TOKEN_TAG = "joiner.dev/client-token"
#: Shape of every token :func:`client_token` returns.
CLIENT_TOKEN_PATTERN = re.compile(r"^joiner-[0-9a-f]{40}-[0-9]{1,12}$")

_RESERVED_TAG_PREFIXES = ("joiner.dev/", "kubernetes.io/cluster/")
#: Accelerators that make a type "exotic" (Karpenter's ``ExoticInstanceTypeFilter``).
EXOTIC_RESOURCES = (NEURON, NEURON_CORE, AMD_GPU, NVIDIA_GPU, HABANA_GAUDI)


def tenancy_of(requirements: Requirements) -> str:
    """The tenancy a claim launches with: ``default`` unless its requirements exclude it and
    allow ``dedicated`` (Karpenter's ``getTenancyType``)."""
    requirement = requirements.get(wk.INSTANCE_TENANCY)
    if requirement is None or requirement.has(wk.TENANCY_DEFAULT) or not requirement.has(wk.TENANCY_DEDICATED):
        return wk.TENANCY_DEFAULT
    return wk.TENANCY_DEDICATED


def is_exotic(instance_type: InstanceType) -> bool:
    """A bare-metal size (``metal`` in the size label) or a type with GPUs or other
    accelerators: launched only when nothing generic can take the claim."""
    size = instance_type.requirements.get(wk.INSTANCE_SIZE)
    if size is not None and not size.complement and any("metal" in value for value in size.values):
        return True
    return any(instance_type.capacity[name] > 0 for name in EXOTIC_RESOURCES)


def exotic_names(instance_types: Iterable[InstanceType]) -> frozenset[str]:
    """Names of the exotic types among ``instance_types`` (see :func:`is_exotic`)."""
    return frozenset(t.name for t in instance_types if is_exotic(t))


class LaunchError(ValueError):
    """A fleet request cannot be built from these inputs; the message says why."""


class NoOfferingsError(LaunchError):
    """No offering is left for the claim (all excluded, unpriced, or outside its zones)."""


def client_token(claim_id: str, attempt: int) -> str:
    """EC2 idempotency token for launch ``attempt`` (0, 1, ...) of a claim.

    Deterministic, so a retried invocation reuses the token and EC2 returns the instance it
    already launched; a new attempt (after a capacity error) gets a new token. At most 64 ASCII
    characters as EC2 requires, whatever the claim id.
    """
    if not claim_id:
        raise LaunchError("client_token: claim id is empty")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0 or attempt >= 10**12:
        raise LaunchError(f"client_token: attempt must be an integer in [0, 10^12), got {attempt!r}")
    digest = hashlib.sha256(claim_id.encode("utf-8")).hexdigest()[:40]
    return f"joiner-{digest}-{attempt}"


def _allowed_zones(claim: NodeClaimPlan, subnets: Sequence[Subnet]) -> set[str]:
    zones = set(claim.zones) if claim.zones else {subnet.zone for subnet in subnets}
    if wk.ZONE in claim.requirements:
        requirement = claim.requirements[wk.ZONE]
        zones = {zone for zone in zones if requirement.has(zone)}
    return zones


def zonal_subnets(subnets: Iterable[Subnet], zones: Iterable[str] | None = None) -> dict[str, Subnet]:
    """One subnet per zone: the one with the most free addresses (ties: lowest id)."""
    wanted = set(zones) if zones is not None else None
    best: dict[str, Subnet] = {}
    for subnet in subnets:
        if wanted is not None and subnet.zone not in wanted:
            continue
        current = best.get(subnet.zone)
        if current is None or (-subnet.available_ips, subnet.id) < (-current.available_ips, current.id):
            best[subnet.zone] = subnet
    return dict(sorted(best.items()))


def _eligible(
    claim: NodeClaimPlan,
    capacity_type: str,
    zones: Iterable[str],
    prices: Mapping[OfferingKey, float],
    unavailable: frozenset[OfferingKey],
) -> list[tuple[float, str, str]]:
    """(price, instance type, zone) for every launchable offering of the claim, unsorted."""
    out = []
    for instance_type in dict.fromkeys(claim.instance_types):
        for zone in zones:
            key = OfferingKey(instance_type, zone, capacity_type)
            price = prices.get(key)
            if price is None or key in unavailable:
                continue
            out.append((float(price), instance_type, zone))
    return out


def choose_capacity_type(
    claim: NodeClaimPlan,
    instance_type_prices: Mapping[OfferingKey, float] | None = None,
    unavailable: frozenset[OfferingKey] = frozenset(),
    subnets: Sequence[Subnet] | None = None,
) -> str:
    """Spot over on-demand where the claim allows both.

    With prices (and optionally the subnets) given, a capacity type is only chosen when at least
    one of its offerings is priced, in an allowed zone and not marked unavailable, so a claim whose
    spot offerings all failed recently falls back to on-demand at once.
    """
    allowed = claim.capacity_types or CAPACITY_TYPE_PREFERENCE
    candidates = [ct for ct in CAPACITY_TYPE_PREFERENCE if ct in allowed]
    if not candidates:
        raise NoOfferingsError(f"node claim for NodePool {claim.node_pool}: capacity types {list(allowed)} are not supported")
    if instance_type_prices is None:
        return candidates[0]
    zones = _allowed_zones(claim, subnets) if subnets is not None else set(claim.zones) or {k.zone for k in instance_type_prices}
    for capacity_type in candidates:
        if _eligible(claim, capacity_type, sorted(zones), instance_type_prices, unavailable):
            return capacity_type
    raise NoOfferingsError(f"node claim for NodePool {claim.node_pool}: no available offering in capacity types {candidates} and zones {sorted(zones)}")


def _check_min_values(claim: NodeClaimPlan, instance_types: Sequence[str]) -> None:
    """Respect ``minValues`` on instance type and family after truncation and exclusions."""
    for key, distinct in (
        (wk.INSTANCE_TYPE, set(instance_types)),
        (wk.INSTANCE_FAMILY, {name.split(".", 1)[0] for name in instance_types}),
    ):
        requirement = claim.requirements.get(key)
        if requirement is not None and requirement.min_values and len(distinct) < requirement.min_values:
            raise NoOfferingsError(
                f"node claim for NodePool {claim.node_pool}: {key} minValues {requirement.min_values} "
                f"cannot be met, only {len(distinct)} launchable value(s) remain"
            )


def build_fleet_request(
    claim: NodeClaimPlan,
    claim_id: str,
    capacity_type: str,
    subnets: Sequence[Subnet],
    launch_template: LaunchTemplateRef,
    instance_type_prices: Mapping[OfferingKey, float],
    unavailable: frozenset[OfferingKey],
    tags: Mapping[str, str],
    max_types: int = MAX_INSTANCE_TYPES,
    *,
    attempt: int = 0,
    templates: Mapping[str, LaunchTemplateRef] | None = None,
    zone_templates: Mapping[tuple[str, str], LaunchTemplateRef] | None = None,
    exotic: Collection[str] = frozenset(),
) -> FleetRequest:
    """The CreateFleet request for one claim in one capacity type.

    Keeps the ``max_types`` instance types whose cheapest eligible offering is cheapest (ties on
    name), crossed with one subnet per zone the claim allows; overrides are ordered by (price,
    instance type, zone) and capped at :data:`MAX_OVERRIDES`. Offerings in ``unavailable``, or
    without a price for this capacity type and zone, are left out. ``templates`` names the
    launch template of instance types that need another one than ``launch_template`` (an
    NVIDIA or Neuron AMI); their overrides carry it. ``zone_templates`` (``reserved``
    capacity) names, per (instance type, zone), the template that targets that zone's
    capacity reservation; only those offerings are launched. ``exotic`` names bare-metal, GPU
    and accelerator types (:func:`exotic_names`): as in Karpenter, their offerings are left
    out when any other type has one, unless the claim has a ``minValues`` requirement; a claim
    that needs an accelerator only lists types that have it, so they stay.
    """
    if capacity_type not in CAPACITY_TYPE_PREFERENCE:
        raise LaunchError(f"capacity type {capacity_type!r} must be one of {list(CAPACITY_TYPE_PREFERENCE)}")
    if claim.capacity_types and capacity_type not in claim.capacity_types:
        raise LaunchError(f"node claim {claim_id}: capacity type {capacity_type} is not allowed (allowed: {list(claim.capacity_types)})")
    if max_types < 1:
        raise LaunchError(f"max_types must be positive, got {max_types}")
    zones = _allowed_zones(claim, subnets)
    by_zone = zonal_subnets(subnets, zones)
    if not by_zone:
        raise NoOfferingsError(f"node claim {claim_id} (NodePool {claim.node_pool}): no subnet in the allowed zones {sorted(zones)}")
    offerings = _eligible(claim, capacity_type, by_zone, instance_type_prices, unavailable)
    if zone_templates is not None:
        offerings = [o for o in offerings if (o[1], o[2]) in zone_templates]
    if exotic and not any(r.min_values for _key, r in claim.requirements.items()):
        generic = [o for o in offerings if o[1] not in exotic]
        if generic:
            offerings = generic
    if not offerings:
        raise NoOfferingsError(
            f"node claim {claim_id} (NodePool {claim.node_pool}): no available {capacity_type} offering of "
            f"{len(claim.instance_types)} instance type(s) in zones {sorted(by_zone)}"
        )
    cheapest: dict[str, float] = {}
    for price, instance_type, _zone in offerings:
        cheapest[instance_type] = min(price, cheapest.get(instance_type, price))
    kept = [name for _, name in sorted((price, name) for name, price in cheapest.items())[:max_types]]
    _check_min_values(claim, kept)
    kept_set = set(kept)
    ordered = sorted((o for o in offerings if o[1] in kept_set), key=lambda o: (o[0], o[1], o[2]))[:MAX_OVERRIDES]
    overrides = tuple(
        FleetOverride(
            instance_type=instance_type,
            subnet_id=by_zone[zone].id,
            zone=zone,
            launch_template=(
                zone_templates[(instance_type, zone)] if zone_templates is not None else _other_template(templates, instance_type, launch_template)
            ),
        )
        for _price, instance_type, zone in ordered
    )
    token = client_token(claim_id, attempt)
    fleet_tags = dict(tags)
    fleet_tags[CLIENT_TOKEN_TAG] = token
    return FleetRequest(
        client_token=token,
        launch_template=launch_template,
        capacity_type=capacity_type,
        overrides=overrides,
        tags=fleet_tags,
    )


def _other_template(
    templates: Mapping[str, LaunchTemplateRef] | None,
    instance_type: str,
    default: LaunchTemplateRef,
) -> LaunchTemplateRef | None:
    template = (templates or {}).get(instance_type)
    return template if template is not None and template != default else None


def _check_user_tags(tags: Mapping[str, str], where: str) -> None:
    for key, value in tags.items():
        if not isinstance(key, str) or not key or len(key) > 128:
            raise LaunchError(f"{where}: tag key {key!r} must be 1-128 characters")
        if key.lower().startswith("aws:"):
            raise LaunchError(f"{where}: tag key {key!r} uses the reserved 'aws:' prefix")
        if not isinstance(value, str) or len(value) > 256:
            raise LaunchError(f"{where}: tag {key!r} value must be a string of at most 256 characters")


def cluster_tags(cluster: str, node_class_tags: Mapping[str, str] | None = None, *, where: str = "NodeClass tags") -> dict[str, str]:
    """NodeClass tags overlaid with the cluster ownership tags (ours win on conflict)."""
    out: dict[str, str] = {}
    if node_class_tags:
        _check_user_tags(node_class_tags, where)
        out.update({k: v for k, v in node_class_tags.items() if not k.startswith(_RESERVED_TAG_PREFIXES)})
    out[CLUSTER_TAG] = cluster
    out[f"kubernetes.io/cluster/{cluster}"] = "owned"
    out[wk.MANAGED_BY_TAG] = cluster
    return dict(sorted(out.items()))


def launch_tags(cluster: str, node_pool: str, claim_id: str, node_class_tags: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tags for a claim's instance, volumes and fleet (the contract in the brief)."""
    out = cluster_tags(cluster, node_class_tags)
    out[wk.NODEPOOL] = node_pool
    out[wk.NODECLAIM] = claim_id
    out["Name"] = f"{cluster}/{node_pool}"
    return dict(sorted(out.items()))


def node_labels(node_pool: NodePool, capacity_type: str) -> dict[str, str]:
    """Labels a node of this pool gets from its kubelet: the template labels, labels implied by
    single-valued requirements, the NodePool and the capacity type, each Joiner key also under
    every Karpenter or deprecated alias of it (``karpenter.sh/nodepool``,
    ``karpenter.sh/capacity-type``, ...), so kube-scheduler can match migrated workloads.

    Claim-specific labels (claim name, instance attributes) are applied by Joiner at registration;
    keeping them out of the launch template lets one template serve every claim of the pool.
    """
    labels = dict(node_pool.requirements.labels())
    labels.update(node_pool.labels)
    labels[wk.NODEPOOL] = node_pool.name
    labels[wk.CAPACITY_TYPE] = capacity_type
    return dict(sorted(wk.with_alias_labels(labels).items()))


def node_taints(node_pool: NodePool) -> tuple[Taint, ...]:
    """Taints the kubelet registers the node with: the pool's taints then its startup taints."""
    seen: set[tuple[str, str]] = set()
    out: list[Taint] = []
    for taint in (*node_pool.taints, *node_pool.startup_taints):
        if (taint.key, taint.effect) not in seen:
            seen.add((taint.key, taint.effect))
            out.append(taint)
    return tuple(out)
