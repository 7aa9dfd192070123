"""Disruption decisions: which managed nodes to take away, and with what in their place.

``decide(DisruptionInput) -> Decision`` runs one pass of Karpenter's disruption loop over a
cluster snapshot. Methods are tried in order and the first that yields a command wins the
pass:

1. **emptiness**: nodes with no pods but DaemonSet, mirror or terminal ones for the
   NodePool's ``consolidateAfter`` are deleted (one command for all of them, within budgets);
2. **expiration**: nodes older than ``expireAfter`` are replaced (forceful: ``do-not-disrupt``
   pods do not protect them, PodDisruptionBudgets that allow no eviction still do);
3. **drift**: nodes whose launch inputs (NodePool requirements, labels, taints; NodeClass AMI,
   subnets, security groups) no longer match are replaced, only when all their pods schedule.
   The instance's own image, subnet and security groups come in as
   :attr:`NodeFacts.launch` and the NodeClass's current resolution as
   :class:`ResolvedNodeClass`; unknown data is never a drift reason;
4. **multi-node consolidation**: the largest prefix (binary search, cheapest-to-disrupt
   first) of underutilized candidates that can all go with at most one, cheaper, replacement;
5. **single-node consolidation**: the first candidate that can be deleted, or replaced by
   one cheaper node.

Before them all, **repair** (Karpenter's node health controller, ``NodeRepair``): a node whose
``Ready`` condition is False or Unknown, or whose EKS node monitoring agent condition
(``AcceleratedHardwareReady``, ``ContainerRuntimeReady``, ``KernelReady``, ``NetworkingReady``,
``StorageReady``) is False, for longer than that condition's repair time
(:data:`REPAIR_POLICIES`, EKS's table) is replaced, unless more than 20 % of its NodePool's
nodes are unhealthy (:func:`repair_allowed`) or the NodePool opts out
(``spec.disruption.repair: Disabled``). Budgets, ``do-not-disrupt`` and blocking
PodDisruptionBudgets do not hold a repair back (it is forceful).

Static NodePools (``spec.replicas``) are never emptied or consolidated; their drifted and
expired nodes are replaced one for one by a replica of the same pool whatever the pods
need, and **scale-down** (``overprovisioned``) removes the nodes beyond ``replicas`` without
budgets: not-yet-Ready ones first, then empty ones, then the cheapest to disrupt.

Every simulation is a :func:`joiner.domain.scheduling.solve` of the candidates' pods with the
candidates (and every node already going) removed from the existing capacity, so topology
spread, anti-affinity, taints and limits are honoured exactly as when provisioning.

Pure and deterministic: no clock (``now`` is an input), every sort has a total order.
"""

from __future__ import annotations

import calendar
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.amis import STANDARD, ami_key, node_variant
from joiner.domain.durations import format_duration
from joiner.domain.model import (
    NODECLASS_HASH_KEY,
    NODEPOOL_HASH_KEY,
    InFlightClaim,
    InstanceType,
    Node,
    NodeClaimPlan,
    NodePool,
    OfferingKey,
    Plan,
    Pod,
    PodDisruptionBudget,
    nodeclass_hash,
    nodepool_hash,
)
from joiner.domain.resources import EMPTY, Resources
from joiner.domain.scheduling import SchedulingProblem, solve
from joiner.domain.scheduling.bound import BoundIndex
from joiner.domain.scheduling.shapes import NODES_LIMIT
from joiner.domain.snapshot import Snapshot
from joiner.domain.volumes import VolumeTopology, apply_volumes

__all__ = [
    "EMPTINESS",
    "EXPIRATION",
    "DRIFT",
    "CONSOLIDATION",
    "METHODS",
    "REASONS",
    "NOMINATION_WINDOW",
    "VALIDATION_DELAY",
    "EVICTION_COST_PER_HOUR",
    "MAX_MULTI_CANDIDATES",
    "MAX_SIMULATIONS",
    "MAX_BATCH",
    "NODEPOOL_HASH_ANNOTATION",
    "AMI_ANNOTATION",
    "SUBNET_ANNOTATION",
    "SECURITY_GROUPS_ANNOTATION",
    "LaunchInputs",
    "NodeFacts",
    "ResolvedNodeClass",
    "DisruptionInput",
    "Replacement",
    "Command",
    "Blocked",
    "Decision",
    "decide",
    "validate",
    "nodepool_hash",
    "cron_matches",
    "static_replica",
    "budget_active",
    "allowed_disruptions",
    "eviction_cost",
    "disruption_cost",
    "worst_case_price",
    "launch_inputs_from_annotations",
    "REPAIR",
    "SCALE_DOWN",
    "RepairPolicy",
    "REPAIR_POLICIES",
    "MAX_UNHEALTHY_PERCENT",
    "Unhealthy",
    "unhealthy",
    "repair_allowed",
]

EMPTINESS, EXPIRATION, DRIFT, CONSOLIDATION = "emptiness", "expiration", "drift", "consolidation"
#: Forceful methods outside the budgets: node auto repair, and a static NodePool's scale-down.
REPAIR, SCALE_DOWN = "repair", "overprovisioned"
METHODS = (REPAIR, SCALE_DOWN, EMPTINESS, EXPIRATION, DRIFT, CONSOLIDATION)
#: Budget reason per method (consolidation is ``Underutilized``; repair and scale-down ignore budgets).
REASONS = {EMPTINESS: "Empty", EXPIRATION: "Expired", DRIFT: "Drifted", CONSOLIDATION: "Underutilized", REPAIR: "Unhealthy", SCALE_DOWN: "Overprovisioned"}
_UNBUDGETED = (REPAIR, SCALE_DOWN)


@dataclass(frozen=True, slots=True)
class RepairPolicy:
    """A node condition in this status for longer than ``after`` calls for a repair."""

    condition: str
    status: str
    after: timedelta


#: EKS's node repair table for Karpenter and Auto Mode (all actions Replace): Ready False or
#: Unknown and the node monitoring agent's conditions False; AcceleratedHardwareReady after 10
#: minutes, the others after 30.
REPAIR_POLICIES: tuple[RepairPolicy, ...] = (
    RepairPolicy("Ready", "False", timedelta(minutes=30)),
    RepairPolicy("Ready", "Unknown", timedelta(minutes=30)),
    RepairPolicy("AcceleratedHardwareReady", "False", timedelta(minutes=10)),
    RepairPolicy("ContainerRuntimeReady", "False", timedelta(minutes=30)),
    RepairPolicy("KernelReady", "False", timedelta(minutes=30)),
    RepairPolicy("NetworkingReady", "False", timedelta(minutes=30)),
    RepairPolicy("StorageReady", "False", timedelta(minutes=30)),
)
#: No repair in a NodePool where more than this share of the nodes is unhealthy at once
#: (rounded up, as a PodDisruptionBudget's percentage: one of three nodes may be repaired).
MAX_UNHEALTHY_PERCENT = 20


@dataclass(frozen=True, slots=True)
class Unhealthy:
    """A node's unhealthy condition: which, in what status, since when, and its repair time.
    ``due``: when the repair time is over."""

    condition: str
    status: str
    since: datetime
    after: timedelta

    @property
    def due(self) -> datetime:
        return self.since + self.after

    def describe(self, now: datetime) -> str:
        return f"{self.condition}={self.status} for {_span(now - self.since)} (repair after {_span(self.after)})"


def _span(value: timedelta) -> str:
    seconds = max(0, int(value.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n) or "0s"


def unhealthy(node: Node) -> Unhealthy | None:
    """The node's unhealthy condition that is due first (Karpenter's choice when several
    are), None when no repair policy matches. A condition without ``lastTransitionTime``
    (the API server always sets one) is not judged: unknown is never a reason to replace."""
    found: Unhealthy | None = None
    for policy in REPAIR_POLICIES:
        condition = node.condition(policy.condition)
        if condition is None or condition.status != policy.status:
            continue
        since = condition.last_transition
        if since is None:
            continue
        candidate = Unhealthy(policy.condition, policy.status, since, policy.after)
        if found is None or (candidate.due, candidate.condition) < (found.due, found.condition):
            found = candidate
    return found


def repair_allowed(unhealthy_nodes: int, total: int) -> bool:
    """Karpenter's safety rule: a NodePool repairs only while at most
    :data:`MAX_UNHEALTHY_PERCENT` of its nodes (rounded up) are unhealthy."""
    return unhealthy_nodes <= -(-total * MAX_UNHEALTHY_PERCENT // 100)  # integers: exact at any size


#: A node the provisioner nominated for pending pods this recently is not a candidate.
NOMINATION_WINDOW = timedelta(seconds=20)
#: A command is re-simulated at least this long after it was computed, before acting.
VALIDATION_DELAY = timedelta(seconds=15)
#: Extra savings ($/h) a command must bring per unit of disruption cost (about one evicted
#: pod of default priority on a young node): a replacement that saves pennies does not
#: evict a busy node.
EVICTION_COST_PER_HOUR = 0.001
#: A spot node is replaced by one cheaper spot node only with at least this many cheaper
#: instance types to choose from, and only the cheapest this many are offered (Karpenter's
#: spot-to-spot consolidation rule).
MIN_SPOT_TO_SPOT_TYPES = 15
#: Candidates the multi-node binary search looks at (Karpenter's limit too).
MAX_MULTI_CANDIDATES = 100
#: Single-node simulations per pass (after the cheap pre-filter).
MAX_SIMULATIONS = 40
#: Bound on single-node simulations x pods in the cluster: a simulation costs about
#: 20 microseconds per pod, so a pass over 30,000 pods simulates at most 25 single nodes.
SIMULATION_POD_BUDGET = 750_000
#: Nodes one expiration or drift command takes at most.
MAX_BATCH = 10

#: Checked when a node carries it (nothing in the launch path stamps it; snapshots may).
NODEPOOL_HASH_ANNOTATION = NODEPOOL_HASH_KEY
#: Offline only (``joiner disrupt``): how a snapshot's Node states its instance's launch
#: inputs (see :func:`launch_inputs_from_annotations`). The scheduled pass reads EC2 instead.
AMI_ANNOTATION = "joiner.dev/ami-id"
SUBNET_ANNOTATION = "joiner.dev/subnet-id"
SECURITY_GROUPS_ANNOTATION = "joiner.dev/security-group-ids"

_EPSILON = 1e-9


# ---------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class LaunchInputs:
    """What a node's instance was launched with, as EC2 reports it (or, offline, as the
    snapshot's annotations say). None: unknown (never a drift reason)."""

    image_id: str | None = None
    subnet_id: str | None = None
    security_groups: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What durable state knows about a node beyond the Node object.

    ``price``: $/h it was launched at (the claim's); ``initialized_at``: when it became
    initialized; ``terminating``: a termination is in progress; ``nominated_at``: when the
    provisioner last planned pending pods onto it; ``empty_since``: first time it was seen
    with no reschedulable pod (consecutive passes); ``launch``: its instance's image, subnet
    and security groups (None: unknown, e.g. the instance was not found); ``not_owned``: why
    the node is not provably Joiner's (:mod:`joiner.domain.ownership`), None when it is. A
    node not owned is never a candidate and counts in no NodePool's budget."""

    price: float | None = None
    initialized_at: datetime | None = None
    terminating: bool = False
    nominated_at: datetime | None = None
    empty_since: datetime | None = None
    launch: LaunchInputs | None = None
    not_owned: str | None = None


@dataclass(frozen=True, slots=True)
class ResolvedNodeClass:
    """A NodeClass's current launch inputs. Anything None or missing is unknown (never a
    drift reason).

    ``ami_by_arch``: per architecture (``kubernetes.io/arch``) and AL2023 variant, keyed by
    :func:`joiner.domain.amis.ami_key` (``amd64``, ``amd64/nvidia``), the one AMI the NodeClass
    resolves to now (what a launch would use); ``amis``: images that are current whatever
    the architecture, used for a node whose architecture has no entry in ``ami_by_arch``
    (offline: selector terms naming IDs); ``subnets``/``security_groups``: what the
    selector terms resolve to now."""

    amis: frozenset[str] | None = None
    subnets: frozenset[str] | None = None
    security_groups: frozenset[str] | None = None
    ami_by_arch: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DisruptionInput:
    """Everything one pass looks at. ``instance_types`` per NodePool (as planning builds
    them); ``facts`` per node name; ``node_classes`` per NodeClass name."""

    snapshot: Snapshot
    instance_types: Mapping[str, tuple[InstanceType, ...]]
    now: datetime
    facts: Mapping[str, NodeFacts] = field(default_factory=dict)
    node_classes: Mapping[str, ResolvedNodeClass] = field(default_factory=dict)
    in_flight: tuple[InFlightClaim, ...] = ()
    unavailable: frozenset[OfferingKey] = frozenset()
    pool_usage: Mapping[str, Resources] = field(default_factory=dict)
    max_simulations: int = MAX_SIMULATIONS
    #: the last candidate the previous pass's single-node consolidation judged: this pass
    #: starts after it, so a budget smaller than the candidates still reaches every one
    #: within a few passes
    single_node_after: str | None = None


# ---------------------------------------------------------------------- outputs


@dataclass(frozen=True, slots=True)
class Replacement:
    """One node to launch in place of a command's nodes. ``price`` is the worst-case launch
    price: the dearest offering any listed type may be launched at."""

    node_pool: str
    instance_types: tuple[str, ...]
    zones: tuple[str, ...]
    capacity_types: tuple[str, ...]
    price: float
    pods: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``joiner disrupt`` contract: instance types and price."""
        return {"instanceTypes": list(self.instance_types), "price": round(self.price, 6)}

    def to_state(self) -> dict[str, Any]:
        return {
            "nodePool": self.node_pool,
            "instanceTypes": list(self.instance_types),
            "zones": list(self.zones),
            "capacityTypes": list(self.capacity_types),
            "price": self.price,
            "pods": list(self.pods),
        }

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> Replacement:
        return cls(
            str(data["nodePool"]),
            tuple(data["instanceTypes"]),
            tuple(data.get("zones", ())),
            tuple(data.get("capacityTypes", ())),
            float(data["price"]),
            tuple(data.get("pods", ())),
        )


@dataclass(frozen=True, slots=True)
class Command:
    """Nodes to disrupt together and what replaces them."""

    method: str
    nodes: tuple[str, ...]
    replacements: tuple[Replacement, ...]
    savings_per_hour: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "nodes": list(self.nodes),
            "replacements": [r.to_dict() for r in self.replacements],
            "savingsPerHour": round(self.savings_per_hour, 6),
            "reason": self.reason,
        }

    def to_state(self) -> dict[str, Any]:
        """Lossless form for durable storage (see :meth:`from_state`)."""
        return {
            "method": self.method,
            "nodes": list(self.nodes),
            "replacements": [r.to_state() for r in self.replacements],
            "savingsPerHour": self.savings_per_hour,
            "reason": self.reason,
        }

    @classmethod
    def from_state(cls, data: Mapping[str, Any]) -> Command:
        return cls(
            str(data["method"]),
            tuple(data["nodes"]),
            tuple(Replacement.from_state(r) for r in data.get("replacements", ())),
            float(data.get("savingsPerHour", 0.0)),
            str(data.get("reason", "")),
        )


@dataclass(frozen=True, slots=True)
class Blocked:
    """A managed node no method may take now, and why."""

    node: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Decision:
    """One pass's result. ``nominated``: nodes the pending pods' plan uses now (the caller
    remembers them for :data:`NOMINATION_WINDOW`); ``empty``: candidates with no
    reschedulable pod (the caller tracks since when); ``simulations``: solves run;
    ``consolidation_candidates``: nodes consolidation may act on this pass, of which
    ``candidates_considered`` were judged (by the cheap pre-filter or a simulation)."""

    commands: tuple[Command, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    nominated: tuple[str, ...] = ()
    empty: tuple[str, ...] = ()
    simulations: int = 0
    #: candidates single-node consolidation evaluated and declined, and why (not cheaper
    #: enough, pods would not fit, ...): the ``Unconsolidatable`` events.
    unconsolidatable: tuple[Blocked, ...] = ()
    #: every candidate's standing, for its NodeClaim mirror: (node, why it drifted or None,
    #: whether consolidation may consider it: its NodePool consolidates underutilized nodes
    #: and no pod arrived within ``consolidateAfter``).
    standing: tuple[tuple[str, str | None, bool], ...] = ()
    #: nodes due for repair that the 20 % rule holds back, and why (``NodeRepairBlocked`` events).
    repair_blocked: tuple[Blocked, ...] = ()
    consolidation_candidates: int = 0
    candidates_considered: int = 0
    #: the last candidate single-node consolidation judged (the next pass's ``single_node_after``)
    single_node_last: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``joiner disrupt`` contract: ``commands`` and ``blocked``."""
        return {"commands": [c.to_dict() for c in self.commands], "blocked": [b.to_dict() for b in self.blocked]}


# ---------------------------------------------------------------------- cron and budgets

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_NAMES = {
    3: {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name},
    4: {name.lower(): (i + 1) % 7 for i, name in enumerate(calendar.day_abbr)},
}
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def _cron_field(text: str, index: int) -> frozenset[int]:
    low, high = _BOUNDS[index]
    names = _NAMES.get(index, {})
    values: set[int] = set()

    def number(token: str) -> int:
        value = names.get(token.lower())
        if value is None:
            value = int(token)
        if not low <= value <= high:
            raise ValueError(f"{token} out of range {low}-{high}")
        return value

    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            step = int(step_text)
            if step <= 0:
                raise ValueError("step must be positive")
        if part in ("*", "?"):
            start, end = low, high
        elif "-" in part:
            first, last = part.split("-", 1)
            start, end = number(first), number(last)
        else:
            start = number(part)
            end = high if step > 1 else start
        values.update(range(start, end + 1, step))
    if index == 4 and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


def _parse_cron(schedule: str) -> tuple[tuple[frozenset[int], ...], bool, bool]:
    expression = _MACROS.get(schedule.strip(), schedule)
    parts = expression.split()
    if len(parts) != 5:
        raise ValueError(f"expected 5 fields, got {len(parts)}")
    fields = tuple(_cron_field(part, i) for i, part in enumerate(parts))
    return fields, parts[2] in ("*", "?"), parts[4] in ("*", "?")


def _day_matches(fields: tuple[frozenset[int], ...], dom_any: bool, dow_any: bool, moment: datetime) -> bool:
    if moment.month not in fields[3]:
        return False
    dom = moment.day in fields[2]
    dow = (moment.isoweekday() % 7) in fields[4]
    if dom_any and dow_any:
        return True
    if dom_any:
        return dow
    if dow_any:
        return dom
    return dom or dow  # cron: either restricted day field matches


def cron_matches(schedule: str, moment: datetime) -> bool:
    """True when the 5-field cron ``schedule`` (UTC, or a macro such as ``@daily``) fires at
    ``moment``'s minute. Raises ValueError for a malformed expression."""
    fields, dom_any, dow_any = _parse_cron(schedule)
    return moment.minute in fields[0] and moment.hour in fields[1] and _day_matches(fields, dom_any, dow_any, moment)


def budget_active(schedule: str | None, duration: timedelta | None, now: datetime) -> bool:
    """A budget without a schedule is always active; with one, it is active for
    ``duration`` after each time the schedule fires (UTC). A malformed schedule is never active."""
    if schedule is None:
        return True
    if duration is None or duration <= timedelta(0):
        return False
    try:
        fields, dom_any, dow_any = _parse_cron(schedule)
    except ValueError:
        return False
    minute = now.replace(second=0, microsecond=0)
    earliest = now - duration  # fired strictly after this moment
    while minute > earliest:
        if not _day_matches(fields, dom_any, dow_any, minute):
            minute = minute.replace(hour=0, minute=0) - timedelta(minutes=1)  # last minute of the previous day
            continue
        if minute.hour not in fields[1]:
            minute = minute.replace(minute=0) - timedelta(minutes=1)
            continue
        if minute.minute in fields[0]:
            return True
        minute -= timedelta(minutes=1)
    return False


def _budget_count(nodes: str, total: int) -> int:
    if nodes.endswith("%"):
        return math.ceil(total * int(nodes[:-1]) / 100)  # Karpenter rounds percentages up
    return int(nodes)


def allowed_disruptions(pool: NodePool, reason: str, now: datetime, total: int, disrupting: int) -> int:
    """Nodes of ``pool`` that may start being disrupted for ``reason`` now: the tightest
    active budget naming the reason (or all reasons), minus the nodes already going."""
    limits = [
        _budget_count(budget.nodes, total)
        for budget in pool.disruption.budgets
        if (not budget.reasons or reason in budget.reasons) and budget_active(budget.schedule, budget.duration, now)
    ]
    if not limits:
        return max(0, total - disrupting)
    return max(0, min(limits) - disrupting)


# ---------------------------------------------------------------------- costs and prices


def eviction_cost(pod: Pod) -> float:
    """Karpenter's eviction cost: 1 + deletion cost / 2^27 + priority / 2^25, clamped to [-10, 10]."""
    cost = 1.0 + pod.deletion_cost / 2**27 + pod.priority / 2**25
    return max(-10.0, min(10.0, cost))


def disruption_cost(pods: Iterable[Pod], age: timedelta | None, expire_after: timedelta | None) -> float:
    """Sum of the pods' eviction costs, scaled by the fraction of the node's lifetime left
    (an old node about to expire anyway is cheap to disrupt)."""
    total = sum(eviction_cost(p) for p in pods)
    if expire_after is None or age is None or expire_after <= timedelta(0):
        return total
    remaining = (expire_after - age) / expire_after
    return total * max(0.0, min(1.0, remaining))


def worst_case_price(
    instance_type: InstanceType, zones: Iterable[str], capacity_types: Iterable[str], unavailable: frozenset[OfferingKey] = frozenset()
) -> float | None:
    """The dearest available offering of ``instance_type`` in ``zones`` x ``capacity_types``."""
    zone_set, ct_set = set(zones), set(capacity_types)
    prices = [
        o.price
        for o in instance_type.offerings
        if o.available and o.zone in zone_set and o.capacity_type in ct_set and OfferingKey(instance_type.name, o.zone, o.capacity_type) not in unavailable
    ]
    return max(prices) if prices else None


def launch_inputs_from_annotations(node: Node) -> LaunchInputs | None:
    """Offline form of a node's launch inputs: the :data:`AMI_ANNOTATION`,
    :data:`SUBNET_ANNOTATION` and :data:`SECURITY_GROUPS_ANNOTATION` (comma-separated)
    annotations; None when the node carries none of them."""
    image = node.annotations.get(AMI_ANNOTATION) or None
    subnet = node.annotations.get(SUBNET_ANNOTATION) or None
    groups_text = node.annotations.get(SECURITY_GROUPS_ANNOTATION)
    groups = frozenset(g.strip() for g in groups_text.split(",") if g.strip()) if groups_text else None
    if image is None and subnet is None and not groups:
        return None
    return LaunchInputs(image_id=image, subnet_id=subnet, security_groups=groups or None)


# ---------------------------------------------------------------------- the pass


@dataclass(frozen=True, slots=True)
class _Candidate:
    node: Node
    pool: NodePool
    pods: tuple[Pod, ...]  # reschedulable, as pending copies
    price: float | None
    cost: float
    created: datetime | None
    since: datetime | None  # consolidatable since (last pod arrival or initialization)
    protected: str | None  # do-not-disrupt reason (ignored by expiration)
    pdb_blocked: str | None

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def instance_type(self) -> str | None:
        return self.node.labels.get(wk.INSTANCE_TYPE)

    def order(self) -> tuple[float, str]:
        return (self.cost, self.node.name)


class _Pass:
    """One disruption pass over an input (see :func:`decide`)."""

    def __init__(self, inp: DisruptionInput) -> None:
        self.inp = inp
        self.now = inp.now
        snap = inp.snapshot
        self.pools = {p.name: p for p in snap.node_pools}
        self.node_classes = {c.name: c for c in snap.node_classes}
        self.types = {pool: {t.name: t for t in types} for pool, types in inp.instance_types.items()}
        self.pods_by_node: dict[str, list[Pod]] = {}
        for pod in snap.pods:
            if pod.node_name is not None:
                self.pods_by_node.setdefault(pod.node_name, []).append(pod)
        # Read once, indexed once, used by every simulation (a pass runs dozens over ~30 pods
        # per node): a simulation's excluded nodes are left out of its problem's nodes, and the
        # scheduling core counts only pods on the nodes it targets.
        self.bound_pods = snap.bound_pods
        self.bound_index = BoundIndex(self.bound_pods)
        promised_keys = {key for claim in inp.in_flight for key in claim.pods}
        self.promised_pods = tuple(p for p in snap.pending_pods if p.key in promised_keys)
        self.simulations = 0
        self.consolidation_eligible = 0
        self.single_node_last: str | None = None
        self.considered: set[str] = set()
        self._launchable_cache: list[tuple[str, Resources, float]] | None = None
        self.blocked: dict[str, str] = {}
        self.going: set[str] = set()  # nodes already terminating or deleting
        self.declined: dict[str, str] = {}  # single-node consolidation declined, and why
        self.total: dict[str, int] = {}
        self.disrupting: dict[str, int] = {}
        self.candidates: list[_Candidate] = []
        self.empty: list[str] = []
        self.pool_nodes: dict[str, int] = {}  # owned nodes per NodePool (the 20 % rule's total)
        self.pool_unhealthy: dict[str, int] = {}  # of which a repair policy matches, due or not
        self.due: list[tuple[Node, NodePool, Unhealthy]] = []  # past their repair time
        self.live: dict[str, list[Node]] = {}  # per static NodePool, its nodes not going
        self.repair_blocked: dict[str, str] = {}
        self._pdbs_by_namespace: dict[str, list[PodDisruptionBudget]] = {}
        for pdb in snap.pdbs:
            self._pdbs_by_namespace.setdefault(pdb.namespace, []).append(pdb)
        self._pdbs_by_labels: dict[tuple[str, frozenset[tuple[str, str]]], tuple[PodDisruptionBudget, ...]] = {}
        self.nominated = self._nominations()
        self._classify()

    # ------------------------------------------------------------ reading the snapshot

    def facts(self, node: str) -> NodeFacts:
        return self.inp.facts.get(node) or NodeFacts()

    def _nominations(self) -> set[str]:
        """Nodes the plan for the pending pods places pods on now, plus recent nominations."""
        nominated = {name for name, facts in self.inp.facts.items() if facts.nominated_at is not None and self.now - facts.nominated_at < NOMINATION_WINDOW}
        pending = self.inp.snapshot.pending_pods
        if pending:
            plan = self._solve(pending, frozenset())
            nominated.update(e.name for e in plan.existing_nodes)
        return nominated

    def _terminating(self, node: Node) -> bool:
        facts = self.facts(node.name)
        return node.deleting or facts.terminating or node.disrupted

    def _classify(self) -> None:
        for node in self.inp.snapshot.nodes:
            pool_name = node.labels.get(wk.NODEPOOL)
            if not pool_name:
                continue  # not Joiner's
            not_owned = self.facts(node.name).not_owned
            if not_owned is not None:
                self.blocked[node.name] = f"not owned by Joiner: {not_owned}"
                continue
            self._health(node, pool_name)
            # Budgets as Karpenter counts them: an uninitialized node is not in the total; a
            # NotReady one uses up budget as a terminating one does.
            initialized = node.labels.get(wk.INITIALIZED) == "true"
            if self._terminating(node):
                self.total[pool_name] = self.total.get(pool_name, 0) + 1
                self.going.add(node.name)
                self.disrupting[pool_name] = self.disrupting.get(pool_name, 0) + 1
                self.blocked[node.name] = "already terminating"
                continue
            if not initialized:
                self.blocked[node.name] = "not initialized"
                continue
            self.total[pool_name] = self.total.get(pool_name, 0) + 1
            if not node.ready:
                self.disrupting[pool_name] = self.disrupting.get(pool_name, 0) + 1
                self.blocked[node.name] = "NotReady"
                continue
            pool = self.pools.get(pool_name)
            if pool is None:
                self.blocked[node.name] = f"nodepool {pool_name} not found"
                continue
            if node.name in self.nominated:
                self.blocked[node.name] = "nominated for pending pods"
                continue
            self.candidates.append(self._candidate(node, pool))
        self.candidates.sort(key=_Candidate.order)

    def _health(self, node: Node, pool_name: str) -> None:
        """Count the node for its NodePool's 20 % rule, remember it when it is due for
        repair, and as a live node of a static NodePool."""
        self.pool_nodes[pool_name] = self.pool_nodes.get(pool_name, 0) + 1
        finding = unhealthy(node)
        if finding is not None:
            self.pool_unhealthy[pool_name] = self.pool_unhealthy.get(pool_name, 0) + 1
        pool = self.pools.get(pool_name)
        if pool is None or self._terminating(node):
            return
        if pool.static:
            self.live.setdefault(pool_name, []).append(node)
        if finding is not None and pool.disruption.repair and self.now >= finding.due:
            self.due.append((node, pool, finding))

    def _selecting(self, pod: Pod) -> tuple[PodDisruptionBudget, ...]:
        """The PodDisruptionBudgets that select ``pod``, in the snapshot's order (pods with the
        same namespace and labels share the answer)."""
        key = (pod.namespace, frozenset(pod.labels.items()))
        found = self._pdbs_by_labels.get(key)
        if found is None:
            found = tuple(pdb for pdb in self._pdbs_by_namespace.get(pod.namespace, ()) if pdb.selector.matches(pod.labels))
            self._pdbs_by_labels[key] = found
        return found

    def _candidate(self, node: Node, pool: NodePool) -> _Candidate:
        facts = self.facts(node.name)
        live = [p for p in self.pods_by_node.get(node.name, []) if not p.is_terminal]
        # A terminating pod is on its way out, except a StatefulSet's: its controller recreates
        # it under the same name once it is gone, so it still needs a home (Karpenter's rule).
        movable = tuple(
            sorted(
                (
                    replace(p, node_name=None, phase="Pending", deleting=False)
                    for p in live
                    if not (p.is_daemonset_pod or p.is_mirror or (p.deleting and p.owner_kind != "StatefulSet"))
                ),
                key=lambda p: p.key,
            )
        )
        protected = None
        if node.annotations.get(wk.DO_NOT_DISRUPT) == "true" or node.annotations.get(wk.KARPENTER_DO_NOT_DISRUPT) == "true":
            protected = "node has the do-not-disrupt annotation"
        else:
            for pod in sorted(live, key=lambda p: p.key):
                if pod.do_not_disrupt and not pod.deleting and pod.protected_at(self.inp.now):
                    protected = f"pod {pod.key} has the do-not-disrupt annotation"
                    break
        # DaemonSet pods count: the drain evicts them too. A pod two budgets select cannot be
        # evicted at all (the Eviction API answers 500), whatever the budgets allow.
        pdb_blocked = None
        for pod in sorted(live, key=lambda p: p.key):
            if pod.is_mirror or pod.deleting:
                continue
            selecting = self._selecting(pod)
            if len(selecting) > 1:
                names = ", ".join(sorted(f"{pdb.namespace}/{pdb.name}" for pdb in selecting))
                pdb_blocked = f"pod {pod.key} is selected by {len(selecting)} PodDisruptionBudgets ({names}): the Eviction API refuses it"
                break
            for pdb in selecting:
                if pdb.disruptions_allowed == 0 and not (pdb.unhealthy_pod_eviction_policy == "AlwaysAllow" and not pod.ready):
                    pdb_blocked = f"PodDisruptionBudget {pdb.namespace}/{pdb.name} allows no eviction of pod {pod.key}"
                    break
            if pdb_blocked:
                break
        created = facts.initialized_at or node.created
        since = self._last_pod_event(node)
        age = self.now - node.created if node.created is not None else None
        return _Candidate(
            node=node,
            pool=pool,
            pods=movable,
            price=self._node_price(node, pool, facts),
            cost=disruption_cost(movable, age, pool.expire_after),
            created=created if node.created is None else node.created,
            since=since,
            protected=protected,
            pdb_blocked=pdb_blocked,
        )

    def _node_price(self, node: Node, pool: NodePool, facts: NodeFacts) -> float | None:
        if facts.price is not None:
            return facts.price
        name = node.labels.get(wk.INSTANCE_TYPE)
        instance_type = self.types.get(pool.name, {}).get(name or "")
        if instance_type is None:
            for types in self.types.values():
                if name in types:
                    instance_type = types[name]
                    break
        if instance_type is None:
            return None
        zone = node.labels.get(wk.ZONE)
        capacity_type = node.labels.get(wk.CAPACITY_TYPE, wk.CAPACITY_TYPE_ON_DEMAND)
        prices = [o.price for o in instance_type.offerings if o.capacity_type == capacity_type and (zone is None or o.zone == zone)]
        return min(prices) if prices else None

    # ------------------------------------------------------------ simulation

    def _last_pod_event(self, node: Node) -> datetime | None:
        """Since when the node has been as it is: the last pod that arrived (DaemonSet pods
        aside), else its initialization or creation. Karpenter's ``lastPodEventTime``, read from
        what the snapshot shows."""
        facts = self.facts(node.name)
        live = (p.created for p in self.pods_by_node.get(node.name, ()) if not p.is_terminal and not p.is_daemonset_pod)
        times = [t for t in (facts.initialized_at, node.created, *live) if t is not None]
        return max(times) if times else None

    def _settling(self, node: Node) -> bool:
        """A node of a Joiner NodePool still inside its ``consolidateAfter`` window (since its
        last pod event): no destination for consolidation yet (Karpenter's scheduler rule; it
        may itself be consolidated away once the window ends, and moving pods onto it only to
        move them again is churn). Drift and expiration ignore the window, as Karpenter's do."""
        pool = self.pools.get(node.labels.get(wk.NODEPOOL, ""))
        window = pool.disruption.consolidate_after if pool is not None else None
        if not window:
            return False
        since = self._last_pod_event(node)
        return since is not None and self.now - since < window

    def _solve(self, pending: Sequence[Pod], exclude: frozenset[str], *, consolidation: bool = False) -> Plan:
        """Plan ``pending`` on the nodes outside ``exclude``, in-flight claims and new claims;
        for ``consolidation``, not on nodes inside their ``consolidateAfter`` window either.

        The pending pods in-flight claims were launched for go into the problem too (the
        planner puts them on their claims first), so room promised to them never passes for
        free space; the returned plan speaks only of ``pending``."""
        snap = self.inp.snapshot
        # Pods are never simulated onto a node that cannot take them now: NotReady, or one of
        # Joiner's still initializing (Karpenter's rule; they could fail to come up).
        nodes = tuple(
            n
            for n in snap.nodes
            if n.name not in exclude
            and not n.deleting
            and n.ready
            and (wk.NODEPOOL not in n.labels or n.labels.get(wk.INITIALIZED) == "true")
            and not (consolidation and self._settling(n))
        )
        requested = {p.key for p in pending}
        promised = tuple(p for p in self.promised_pods if p.key not in requested)
        self.simulations += 1
        # A moved pod keeps its volumes: a zonal volume pins it to its zone, and a node's CSI
        # attach limit bounds what it takes (joiner.domain.volumes).
        if snap.volumes_known:
            bound = tuple(p for p in self.bound_pods if p.node_name not in exclude)
            topology = apply_volumes(tuple(pending) + promised, bound, nodes, snap.volume_claims, snap.persistent_volumes, snap.storage_classes, snap.csi_nodes)
        else:  # never move a pod whose volume's zone is unknown
            moving = tuple(pending) + promised
            topology = VolumeTopology(
                tuple(p for p in moving if not p.volume_claims), {p.key: "its volumes could not be read" for p in moving if p.volume_claims}, {}
            )
        problem = SchedulingProblem(
            pending=topology.pods,
            blocked=topology.blocked,
            free_attachments=topology.free_attachments,
            nodes=nodes,
            bound_pods=self.bound_pods,
            bound_index=self.bound_index,
            daemonsets=snap.daemonsets,
            daemon_pods=snap.daemonset_pods,
            node_pools=tuple(pool for pool in snap.node_pools if not pool.deleting),  # no replacement from a pool being deleted
            instance_types=self.inp.instance_types,
            in_flight=self.inp.in_flight,
            unavailable=self.inp.unavailable,
            pool_usage=self.inp.pool_usage,
        )
        plan = solve(problem)
        return _only(plan, requested) if promised else plan

    def _replacement(self, claim: NodeClaimPlan, drop_types: frozenset[str] = frozenset(), max_price: float | None = None) -> Replacement | None:
        """The claim as a replacement: same-type and too dear types dropped; None if none is
        left or what is left cannot meet the NodePool's ``minValues`` (the launch would fail)."""
        types = self.types.get(claim.node_pool, {})
        kept: list[tuple[str, float]] = []
        for name in claim.instance_types:
            if name in drop_types or name not in types:
                continue
            price = worst_case_price(types[name], claim.zones, claim.capacity_types, self.inp.unavailable)
            if price is None:
                continue
            if max_price is not None and price > max_price + _EPSILON:
                continue
            kept.append((name, price))
        if not kept or _min_values_prefix(claim, [name for name, _ in kept]) is None:
            return None
        return Replacement(
            node_pool=claim.node_pool,
            instance_types=tuple(name for name, _ in kept),
            zones=claim.zones,
            capacity_types=claim.capacity_types,
            price=max(price for _, price in kept),
            pods=claim.pods,
        )

    def _truncated(self, replacement: Replacement, count: int, claim: NodeClaimPlan) -> Replacement:
        """``replacement`` offering only its ``count`` cheapest types, or as many more as its
        ``minValues`` need (Karpenter's rule), worst-case price recomputed."""
        types = self.types.get(replacement.node_pool, {})
        needed = _min_values_prefix(claim, replacement.instance_types) or len(replacement.instance_types)
        kept = replacement.instance_types[: max(count, needed)]
        prices = [worst_case_price(types[name], replacement.zones, replacement.capacity_types, self.inp.unavailable) for name in kept]
        return replace(replacement, instance_types=kept, price=max(p for p in prices if p is not None))

    def simulate(self, group: Sequence[_Candidate], extra_exclude: frozenset[str] = frozenset(), *, consolidation: bool = False) -> Plan:
        exclude = frozenset(c.name for c in group) | frozenset(self.going) | extra_exclude
        pods = tuple(sorted((p for c in group for p in c.pods), key=lambda p: p.key))
        return self._solve(pods, exclude, consolidation=consolidation)

    def required_savings(self, group: Sequence[_Candidate], price: float) -> float:
        """minSavings (the strictest NodePool of the group) plus the disruption cost's share."""
        per_hour = max(c.pool.disruption.min_savings_per_hour for c in group)
        percent = max(c.pool.disruption.min_savings_percent for c in group)
        cost = sum(max(0.0, c.cost) for c in group)
        return max(per_hour, price * percent / 100) + cost * EVICTION_COST_PER_HOUR

    def consolidate(self, group: Sequence[_Candidate]) -> tuple[Command | None, str]:
        """A consolidation command for ``group`` (delete all, at most one cheaper
        replacement), or None and why not."""
        if any(c.price is None for c in group):
            return None, "price unknown"
        current = sum(c.price or 0.0 for c in group)
        plan = self.simulate(group, consolidation=True)
        if plan.unschedulable:
            return None, f"pod {plan.unschedulable[0].pod} would not schedule elsewhere"
        if len(plan.node_claims) > 1:
            return None, f"would need {len(plan.node_claims)} replacement nodes"
        required = self.required_savings(group, current)
        names = ", ".join(c.name for c in group)
        if not plan.node_claims:
            savings = current
            if savings + _EPSILON < required:
                return None, f"saving ${savings:.4f}/h is below the ${required:.4f}/h required"
            return Command(CONSOLIDATION, tuple(c.name for c in group), (), savings, f"underutilized: pods of {names} fit on other nodes"), ""
        same = frozenset(c.instance_type for c in group if c.instance_type)
        cap = current - required
        if len(group) > 1:
            # Karpenter's filterOutSameType: when a candidate's own type could hold the pods,
            # the replacement must be cheaper than that candidate, or deleting candidates one
            # at a time saves more and moves fewer pods.
            options = set(plan.node_claims[0].instance_types)
            own = [c.price for c in group if c.instance_type in options and c.price is not None]
            if own:
                cap = min(cap, min(own) - _EPSILON)
        claim = plan.node_claims[0]
        replacement = self._replacement(claim, drop_types=same, max_price=cap)
        if replacement is None and wk.CAPACITY_TYPE_SPOT in claim.capacity_types and len(claim.capacity_types) > 1:
            # Priced at its on-demand worst case, a claim allowing both capacity types rarely
            # beats an on-demand node; pinned to spot (as Karpenter's replacements may be) it
            # can, under the same savings threshold and, for a spot candidate, the spot-to-spot rule.
            replacement = self._replacement(replace(claim, capacity_types=(wk.CAPACITY_TYPE_SPOT,)), drop_types=same, max_price=cap)
        if replacement is None:
            return None, f"no replacement cheaper by ${required:.4f}/h at its worst-case price"
        if len(group) == 1 and _is_spot(group[0]) and wk.CAPACITY_TYPE_SPOT in replacement.capacity_types:
            # Spot to spot (Karpenter's rule), whenever the replacement may launch as spot (a
            # NodePool allowing both capacity types included): replacing one spot node with a cheaper spot node
            # is only worth it with enough cheaper types for price-capacity-optimized to choose
            # from, else the replacement lands in the shallow pools that get interrupted first;
            # and only the cheapest of them are offered, so the next pass has no reason to
            # "consolidate" the replacement again (no churn ladder).
            if len(replacement.instance_types) < MIN_SPOT_TO_SPOT_TYPES:
                return None, (f"spot-to-spot replacement needs {MIN_SPOT_TO_SPOT_TYPES} cheaper instance types, {len(replacement.instance_types)} available")
            replacement = self._truncated(replacement, MIN_SPOT_TO_SPOT_TYPES, claim)
        savings = current - replacement.price
        return Command(
            CONSOLIDATION,
            tuple(c.name for c in group),
            (replacement,),
            savings,
            f"underutilized: {names} replaced by one {replacement.instance_types[0]}"
            + (f" (or one of {len(replacement.instance_types) - 1} other types)" if len(replacement.instance_types) > 1 else "")
            + f" costing at most ${replacement.price:.4f}/h",
        ), ""

    # ------------------------------------------------------------ budgets

    def allowed(self, pool: NodePool, method: str) -> int:
        return allowed_disruptions(pool, REASONS[method], self.now, self.total.get(pool.name, 0), self.disrupting.get(pool.name, 0))

    def within_budget(self, candidates: Iterable[_Candidate], method: str, *, report: bool = True) -> list[_Candidate]:
        """The candidates, in order, that the NodePools' budgets for ``method`` let through."""
        left: dict[str, int] = {}
        result = []
        for candidate in candidates:
            pool = candidate.pool
            if pool.name not in left:
                left[pool.name] = self.allowed(pool, method)
            if left[pool.name] <= 0:
                if report:
                    self.blocked.setdefault(
                        candidate.name, f"the disruption budget of nodepool {pool.name} allows no more {REASONS[method]} nodes to be disrupted now"
                    )
                continue
            left[pool.name] -= 1
            result.append(candidate)
        return result

    # ------------------------------------------------------------ eligibility per method

    def consolidatable(self, candidate: _Candidate) -> bool:
        after = candidate.pool.disruption.consolidate_after
        if after is None:
            return False
        return candidate.since is None or self.now - candidate.since >= after

    def is_empty(self, candidate: _Candidate) -> bool:
        disruption = candidate.pool.disruption
        if candidate.pods or disruption.consolidate_after is None:
            return False
        since = self.facts(candidate.name).empty_since or candidate.since
        return since is None or self.now - since >= disruption.consolidate_after

    def is_expired(self, candidate: _Candidate) -> bool:
        expire = candidate.pool.expire_after
        return expire is not None and candidate.created is not None and self.now - candidate.created >= expire

    def drift_reason(self, candidate: _Candidate) -> str | None:
        node, pool = candidate.node, candidate.pool
        labels = wk.normalize_labels(dict(node.labels))
        for key in sorted(pool.requirements):
            requirement = pool.requirements[key]
            value = labels.get(key)
            if value is None:
                if not requirement.complement and requirement.values:
                    return f"requirement {key} is not satisfied (label missing)"
                continue
            if not requirement.has(value):
                return f"requirement {key} no longer allows {value}"
        for key, value in sorted(pool.labels.items()):
            if labels.get(key) != value:
                return f"label {key}={value} missing"
        current = {(t.key, t.value, t.effect) for t in node.taints}
        for taint in sorted(pool.taints):
            if (taint.key, taint.value, taint.effect) not in current:
                return f"taint {taint.key}:{taint.effect} missing"
        stamped = node.annotations.get(NODEPOOL_HASH_ANNOTATION)
        if stamped and stamped != nodepool_hash(pool):
            return "nodepool template changed"
        stamped_class = node.annotations.get(NODECLASS_HASH_KEY)
        node_class = self.node_classes.get(pool.node_class)
        if stamped_class and node_class is not None and stamped_class != nodeclass_hash(node_class):
            return f"nodeclass {node_class.name} changed (kubelet, block devices, metadata options, tags, role or user data)"
        return self.launch_drift(candidate)

    def node_arch(self, candidate: _Candidate) -> str | None:
        """The node's architecture: its ``kubernetes.io/arch`` label, else its instance type's."""
        arch = wk.normalize_labels(dict(candidate.node.labels)).get(wk.ARCH)
        if arch:
            return arch
        instance_type = self.types.get(candidate.pool.name, {}).get(candidate.instance_type or "")
        requirement = instance_type.requirements.get(wk.ARCH) if instance_type is not None else None
        return requirement.any_value() if requirement is not None else None

    def launch_drift(self, candidate: _Candidate) -> str | None:
        """NodeClass drift: the instance's image is not the AMI the NodeClass resolves to now
        for its architecture, its subnet is not among the resolved subnets, or its security
        groups differ from the resolved set. Unknown on either side: not drifted."""
        launch = self.facts(candidate.name).launch
        resolved = self.inp.node_classes.get(candidate.pool.node_class)
        if launch is None or resolved is None:
            return None
        image = launch.image_id
        if image:
            arch = self.node_arch(candidate)
            variant = node_variant(candidate.node, self.types.get(candidate.pool.name, {}))
            current = resolved.ami_by_arch.get(ami_key(arch, variant)) if arch else None
            if current:
                if image != current:
                    kind = arch if variant == STANDARD else f"{arch} {variant}"
                    return f"AMI {image} is not the NodeClass's current {kind} AMI {current}"
            elif resolved.amis and image not in resolved.amis:
                return f"AMI {image} is no longer selected"
        subnet = launch.subnet_id
        if subnet and resolved.subnets and subnet not in resolved.subnets:  # none resolved: the NodeClass cannot launch, unknown
            return f"subnet {subnet} is no longer selected"
        groups = launch.security_groups
        if groups and resolved.security_groups and groups != resolved.security_groups:
            return f"security groups {','.join(sorted(groups))} differ from the NodeClass's {','.join(sorted(resolved.security_groups))}"
        return None

    # ------------------------------------------------------------ static NodePools and repair

    def in_flight_only(self, pool: str) -> int:
        """Claims of ``pool`` launched but not yet a Node."""
        named = {n.labels.get(wk.NODECLAIM) for n in self.inp.snapshot.nodes}
        return sum(1 for c in self.inp.in_flight if c.node_pool == pool and c.name not in named)

    def node_room(self, pool: NodePool) -> int | None:
        """Nodes ``pool`` may still add under ``limits.nodes`` (None: no such limit): every
        node counts, going ones included, as Karpenter waits for them before bursting."""
        limit = pool.limits.get(NODES_LIMIT) if pool.limits is not None else None
        if limit is None:
            return None
        return max(0, limit // 1000 - self.pool_nodes.get(pool.name, 0) - self.in_flight_only(pool.name))

    def static_replacement(self, pool: NodePool) -> Replacement | None:
        """One replica of static ``pool`` (:func:`static_replica`)."""
        return static_replica(pool, self.inp.instance_types.get(pool.name, ()), self.inp.unavailable)

    def static_batch(self, method: str, chosen: Sequence[_Candidate], why: Mapping[str, str], *, need_replacement: bool) -> list[Command]:
        """One command per node of a static NodePool, each replaced by a replica of its pool
        (Karpenter's static drift), within ``limits.nodes``. Without room or a launchable
        type, ``need_replacement`` (drift) holds the node back; otherwise it goes alone and
        the provisioner brings the pool back to ``replicas``."""
        room: dict[str, int | None] = {}
        commands = []
        for candidate in chosen:
            pool = candidate.pool
            if pool.name not in room:
                room[pool.name] = self.node_room(pool)
            left = room[pool.name]
            replacement = self.static_replacement(pool) if left is None or left > 0 else None
            if replacement is None:
                if need_replacement:
                    missing = "no launchable instance type" if left is None or left > 0 else "limits.nodes leaves no room"
                    self.blocked.setdefault(candidate.name, f"{why[candidate.name]}, but {missing} for a replacement replica of nodepool {pool.name}")
                    continue
                replacements: tuple[Replacement, ...] = ()
            else:
                replacements = (replacement,)
                if left is not None:
                    room[pool.name] = left - 1
            savings = (candidate.price or 0.0) - sum(r.price for r in replacements)
            commands.append(Command(method, (candidate.name,), replacements, savings, f"{candidate.name}: {why[candidate.name]}"))
        return commands

    def repair(self, only: frozenset[str] | None = None) -> list[Command]:
        """Nodes past their repair time, replaced (Karpenter's node health controller):
        forceful (no budget, do-not-disrupt or PodDisruptionBudget holds it back) but never
        in a NodePool where more than :data:`MAX_UNHEALTHY_PERCENT` of the nodes are
        unhealthy. A NodePool's nodes are replaced by what their pods need, where capacity
        allows (their pods need not all fit); a static NodePool's by one replica each."""
        dynamic: list[_Candidate] = []
        static: list[_Candidate] = []
        why: dict[str, str] = {}
        for node, pool, finding in sorted(self.due, key=lambda d: (d[2].due, d[0].name)):
            if only is not None and node.name not in only:
                continue
            unhealthy_nodes, total = self.pool_unhealthy.get(pool.name, 0), self.pool_nodes.get(pool.name, 0)
            if not repair_allowed(unhealthy_nodes, total):
                reason = (
                    f"unhealthy ({finding.condition}={finding.status} past its repair time), but {unhealthy_nodes} of the {total} nodes of nodepool "
                    f"{pool.name} are unhealthy: no repair while more than {MAX_UNHEALTHY_PERCENT}% are"
                )
                self.repair_blocked[node.name] = reason
                self.blocked[node.name] = reason
                continue
            why[node.name] = f"unhealthy: {finding.describe(self.now)}"
            (static if pool.static else dynamic).append(self._candidate(node, pool))
        commands = self.static_batch(REPAIR, static, why, need_replacement=False)
        group = dynamic[:MAX_BATCH]
        if group:
            plan = self.simulate(group)
            replacements = tuple(r for r in (self._replacement(claim) for claim in plan.node_claims) if r is not None)
            reason = "; ".join(f"{c.name}: {why[c.name]}" for c in group)
            if plan.unschedulable:
                reason += f"; {len(plan.unschedulable)} pod(s) will wait for capacity"
            savings = sum(c.price or 0.0 for c in group) - sum(r.price for r in replacements)
            commands.append(Command(REPAIR, tuple(c.name for c in group), replacements, savings, reason))
        return commands

    def surplus(self, pool: NodePool) -> int:
        """How many nodes static ``pool`` has beyond ``replicas`` (nodes not going plus
        claims not yet a Node)."""
        if pool.replicas is None:
            return 0
        return len(self.live.get(pool.name, ())) + self.in_flight_only(pool.name) - pool.replicas

    def scale_down(self) -> list[Command]:
        """A static NodePool above ``replicas`` loses its surplus (Karpenter's static
        deprovisioning, reason ``overprovisioned``): no budget applies, the drain honours
        PodDisruptionBudgets until the terminationGracePeriod. Nodes not yet Ready go first,
        then empty ones, then the cheapest to disrupt."""
        commands = []
        for name in sorted(self.live):
            pool = self.pools[name]
            extra = self.surplus(pool)
            if extra <= 0 or pool.deleting:
                continue

            def order(node: Node) -> tuple[bool, bool, float, str]:
                pods = [p for p in self.pods_by_node.get(node.name, []) if not p.is_terminal and not p.is_daemonset_pod and not p.is_mirror]
                settled = node.ready and node.labels.get(wk.INITIALIZED) == "true"
                return (settled, bool(pods), disruption_cost(pods, None, None), node.name)

            chosen = sorted(self.live[name], key=order)[:extra]
            commands.append(
                Command(
                    SCALE_DOWN,
                    tuple(n.name for n in chosen),
                    (),
                    0.0,
                    f"nodepool {name} has {len(self.live[name]) + self.in_flight_only(name)} nodes for {pool.replicas} replicas",
                )
            )
        return commands

    # ------------------------------------------------------------ methods

    def emptiness(self) -> list[Command]:
        eligible = [
            c
            for c in self.candidates
            if not c.pool.static
            and c.protected is None
            and c.pdb_blocked is None
            and c.pool.disruption.consolidation_policy in ("WhenEmpty", "WhenEmptyOrUnderutilized")
            and self.is_empty(c)
        ]
        chosen = self.within_budget(eligible, EMPTINESS)
        if not chosen:
            return []
        savings = sum(c.price or 0.0 for c in chosen)
        return [Command(EMPTINESS, tuple(c.name for c in chosen), (), savings, "empty: no pods but DaemonSet or terminal ones")]

    def replace_batch(self, method: str, eligible: list[_Candidate], why: Mapping[str, str], require_all: bool) -> list[Command]:
        static = self.static_batch(method, self.within_budget([c for c in eligible if c.pool.static], method)[:MAX_BATCH], why, need_replacement=require_all)
        return static + self.pod_batch(method, [c for c in eligible if not c.pool.static], why, require_all)

    def pod_batch(self, method: str, eligible: list[_Candidate], why: Mapping[str, str], require_all: bool) -> list[Command]:
        chosen = self.within_budget(eligible, method)[:MAX_BATCH]
        attempts = [chosen] + [[c] for c in chosen] if len(chosen) > 1 else [chosen]
        for group in attempts:
            if not group:
                continue
            plan = self.simulate(group)
            if plan.unschedulable and require_all:
                if len(group) == 1:
                    self.blocked.setdefault(group[0].name, f"{why[group[0].name]}, but pod {plan.unschedulable[0].pod} would not schedule elsewhere")
                continue
            replacements = tuple(r for r in (self._replacement(claim) for claim in plan.node_claims) if r is not None)
            current = sum(c.price or 0.0 for c in group)
            savings = current - sum(r.price for r in replacements)
            reason = "; ".join(f"{c.name}: {why[c.name]}" for c in group)
            if plan.unschedulable:
                reason += f"; {len(plan.unschedulable)} pod(s) will wait for capacity"
            return [Command(method, tuple(c.name for c in group), replacements, savings, reason)]
        return []

    def expiration(self) -> list[Command]:
        eligible = []
        why = {}
        for c in self.candidates:
            if not self.is_expired(c):
                continue
            if c.pdb_blocked is not None:
                self.blocked[c.name] = f"expired, but {c.pdb_blocked}"
                continue
            eligible.append(c)
            why[c.name] = f"expired (older than expireAfter {format_duration(c.pool.expire_after)})"
        return self.replace_batch(EXPIRATION, eligible, why, require_all=False)

    def drift(self) -> list[Command]:
        eligible = []
        why = {}
        for c in self.candidates:
            # Karpenter's eventual disruption: with a terminationGracePeriod, do-not-disrupt pods
            # and blocking budgets no longer keep a drifted node; the drain deletes what is
            # left when the grace period ends.
            if (c.protected is not None or c.pdb_blocked is not None) and c.pool.termination_grace_period is None:
                continue
            reason = self.drift_reason(c)
            if reason is not None:
                eligible.append(c)
                why[c.name] = f"drifted: {reason}"
        return self.replace_batch(DRIFT, eligible, why, require_all=True)

    def consolidation_candidates(self) -> list[_Candidate]:
        eligible = [
            c
            for c in self.candidates
            if not c.pool.static
            and c.pods
            and c.protected is None
            and c.pdb_blocked is None
            and c.pool.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
            and self.consolidatable(c)
            and c.price is not None
        ]
        return self.within_budget(eligible, CONSOLIDATION, report=False)

    def multi_node(self, eligible: list[_Candidate]) -> list[Command]:
        pool = eligible[:MAX_MULTI_CANDIDATES]
        if len(pool) < 2:
            return []
        low, high = 2, len(pool)
        best: Command | None = None
        while low <= high:
            middle = (low + high) // 2
            self.considered.update(c.name for c in pool[:middle])
            command, _ = self.consolidate(pool[:middle])
            if command is not None:
                best = command
                low = middle + 1
            else:
                high = middle - 1
        return [best] if best is not None else []

    def _may_pay_off(self, candidate: _Candidate, fits_somewhere: Any) -> bool:
        """Cheap, optimistic pre-filter (never skips a command a simulation would find):
        the pods that fit on no other node even alone must go to a new node, so some type
        that holds them all must be cheaper than the node by the required savings."""
        need = EMPTY
        for pod in candidate.pods:
            if not fits_somewhere(pod.requests):
                need = need + pod.requests
        if not need:
            return True
        price = candidate.price or 0.0
        limit = price - self.required_savings([candidate], price)
        for name, allocatable, cheapest in self._launchable():
            if name == candidate.instance_type or cheapest > limit:
                continue
            if all(allocatable.get(k, 0) >= v for k, v in need.items()):
                return True
        return False

    def _launchable(self) -> list[tuple[str, Resources, float]]:
        """(type, allocatable, cheapest offering the NodePool allows) for every type any
        NodePool may launch (computed once per pass)."""
        if self._launchable_cache is None:
            found: list[tuple[str, Resources, float]] = []
            for pool in self.inp.snapshot.node_pools:
                requirements = pool.template_requirements()
                zones = requirements.get(wk.ZONE)
                capacity_types = requirements.get(wk.CAPACITY_TYPE)
                for instance_type in self.inp.instance_types.get(pool.name, ()):
                    if instance_type.requirements.conflicts(requirements):
                        continue
                    prices = [
                        o.price
                        for o in instance_type.offerings
                        if o.available and (zones is None or zones.has(o.zone)) and (capacity_types is None or capacity_types.has(o.capacity_type))
                    ]
                    if prices:
                        found.append((instance_type.name, instance_type.allocatable, min(prices)))
            self._launchable_cache = found
        return self._launchable_cache

    def _fit_checker(self) -> Any:
        """``fits(requests)``: some schedulable node other than the going ones has room for
        a pod of this size on its own (resources only; memoised per size)."""
        rooms = []
        for node in self.inp.snapshot.nodes:
            if node.name in self.going or node.unschedulable or node.deleting:
                continue
            used = EMPTY
            for pod in self.pods_by_node.get(node.name, []):
                if not pod.is_terminal:
                    used = used + pod.requests
            rooms.append(node.allocatable - used)
        memo: dict[tuple[tuple[str, int], ...], bool] = {}

        def fits(requests: Resources) -> bool:
            key = tuple(sorted((k, v) for k, v in requests.items() if v > 0))
            found = memo.get(key)
            if found is None:
                found = any(all(room.get(k, 0) >= v for k, v in key) for room in rooms)
                memo[key] = found
            return found

        return fits

    def single_node(self, eligible: list[_Candidate]) -> list[Command]:
        fits = self._fit_checker()
        budget = min(self.inp.max_simulations, max(5, SIMULATION_POD_BUDGET // max(1, len(self.inp.snapshot.pods))))
        after = self.inp.single_node_after
        start = next((i + 1 for i, c in enumerate(eligible) if c.name == after), 0) if after is not None else 0
        for candidate in eligible[start:] + eligible[:start]:
            if budget <= 0:
                break
            self.considered.add(candidate.name)
            self.single_node_last = candidate.name
            if not self._may_pay_off(candidate, fits):
                continue
            budget -= 1
            command, why = self.consolidate([candidate])
            if command is not None:
                return [command]
            self.declined[candidate.name] = why
        return []

    def run(self) -> Decision:
        commands = self.repair() or self.scale_down() or self.emptiness() or self.expiration() or self.drift()
        if not commands:
            eligible = self.consolidation_candidates()
            self.consolidation_eligible = len(eligible)
            commands = self.multi_node(eligible) or self.single_node(eligible)
        chosen = {n for c in commands for n in c.nodes}
        blocked = tuple(Blocked(node, reason) for node, reason in sorted(self.blocked.items()) if node not in chosen)
        for candidate in self.candidates:
            if candidate.name in chosen or candidate.name in self.blocked:
                continue
            if candidate.protected is not None:
                blocked += (Blocked(candidate.name, candidate.protected),)
            elif candidate.pdb_blocked is not None:
                blocked += (Blocked(candidate.name, candidate.pdb_blocked),)
        blocked = tuple(sorted(blocked, key=lambda b: (b.node, b.reason)))
        empty = tuple(sorted(c.name for c in self.candidates if not c.pods))
        declined = tuple(Blocked(node, why) for node, why in sorted(self.declined.items()) if node not in chosen and why)
        standing = tuple(
            sorted(
                (
                    c.name,
                    self.drift_reason(c),
                    not c.pool.static and c.pool.disruption.consolidation_policy == "WhenEmptyOrUnderutilized" and self.consolidatable(c),
                )
                for c in self.candidates
            )
        )
        repair_blocked = tuple(Blocked(node, why) for node, why in sorted(self.repair_blocked.items()))
        return Decision(
            tuple(commands),
            blocked,
            tuple(sorted(self.nominated)),
            empty,
            self.simulations,
            declined,
            standing,
            repair_blocked,
            self.consolidation_eligible,
            len(self.considered),
            self.single_node_last,
        )


def decide(inp: DisruptionInput) -> Decision:
    """One disruption pass: the commands of the first method that yields any, and the
    managed nodes that are blocked with the reason."""
    return _Pass(inp).run()


def validate(command: Command, inp: DisruptionInput) -> tuple[Command | None, str]:
    """Re-simulate ``command`` on a fresh input: the command to execute (with a fresh
    replacement when one is needed) or None and why it was dropped.

    Dropped when a node is gone, no longer a candidate or no longer eligible for the
    method, when the budgets no longer allow it, or when the simulation's result changed
    (pods no longer fit, a different number of replacements, a dearer replacement).
    """
    work = _Pass(inp)
    if command.method == REPAIR:
        nodes = frozenset(command.nodes)
        due = {node.name for node, _, _ in work.due}
        gone = sorted(nodes - due)
        if gone:
            return None, f"node {gone[0]} is no longer due for repair ({work.blocked.get(gone[0], 'healthy or gone')})"
        fresh = [c for c in work.repair(only=nodes)]
        if len(fresh) != 1 or fresh[0].nodes != command.nodes:
            held = next((work.repair_blocked[n] for n in command.nodes if n in work.repair_blocked), "the nodes can no longer go together")
            return None, f"repair changed: {held}"
        return fresh[0], ""
    if command.method == SCALE_DOWN:
        live = {node.name: pool for pool, nodes in work.live.items() for node in nodes}
        for name in command.nodes:
            if name not in live:
                return None, f"node {name} is no longer a live node of a static NodePool"
        for pool in {live[name] for name in command.nodes}:
            if work.surplus(work.pools[pool]) < sum(1 for name in command.nodes if live[name] == pool):
                return None, f"nodepool {pool} no longer has that many nodes beyond its replicas"
        return command, ""
    by_name = {c.name: c for c in work.candidates}
    group = []
    for name in command.nodes:
        candidate = by_name.get(name)
        if candidate is None:
            return None, f"node {name} is no longer a candidate ({work.blocked.get(name, 'gone')})"
        if candidate.pdb_blocked is not None:
            return None, f"node {name}: {candidate.pdb_blocked}"
        if candidate.protected is not None and command.method != EXPIRATION:
            return None, f"node {name}: {candidate.protected}"
        group.append(candidate)
    if len(work.within_budget(group, command.method, report=False)) < len(group):
        return None, f"{REASONS[command.method]} disruption budget no longer allows it"
    if command.method == EMPTINESS:
        if not all(work.is_empty(c) for c in group):
            return None, "a node is no longer empty"
        return command, ""
    if command.method == EXPIRATION:
        if not all(work.is_expired(c) for c in group):
            return None, "a node is no longer expired"
        fresh = work.replace_batch(EXPIRATION, group, {c.name: "expired" for c in group}, require_all=False)
    elif command.method == DRIFT:
        why = {}
        for c in group:
            reason = work.drift_reason(c)
            if reason is None:
                return None, f"node {c.name} is no longer drifted"
            why[c.name] = f"drifted: {reason}"
        fresh = work.replace_batch(DRIFT, group, why, require_all=True)
    else:
        if not all(work.consolidatable(c) for c in group):
            return None, "a node had pods scheduled recently"
        result, why_not = work.consolidate(group)
        if result is None:
            return None, f"simulation changed: {why_not}"
        fresh = [result]
    if not fresh or fresh[0].nodes != command.nodes:
        return None, "simulation changed: the nodes can no longer go together"
    result = fresh[0]
    if len(result.replacements) != len(command.replacements):
        return None, f"simulation changed: {len(result.replacements)} replacement(s) instead of {len(command.replacements)}"
    if command.method == CONSOLIDATION and result.replacements:
        if result.replacements[0].price > command.replacements[0].price + _EPSILON:
            return None, "simulation changed: the replacement is dearer"
    return result, ""


def _only(plan: Plan, keys: set[str]) -> Plan:
    """``plan`` restricted to the pods in ``keys``: claims and placements holding none of
    them are dropped, the others list only theirs."""
    claims = tuple(replace(claim, pods=tuple(k for k in claim.pods if k in keys)) for claim in plan.node_claims if any(k in keys for k in claim.pods))
    existing = tuple(replace(node, pods=tuple(k for k in node.pods if k in keys)) for node in plan.existing_nodes if any(k in keys for k in node.pods))
    return Plan(claims, existing, tuple(u for u in plan.unschedulable if u.pod in keys))


def _min_values_prefix(claim: NodeClaimPlan, names: Sequence[str]) -> int | None:
    """How many of ``names`` (cheapest first) a launch must offer to meet the claim's
    ``minValues`` on instance type and family (the keys the launch checks), or None if even
    all of them fall short."""
    needed = 1
    for key, family in ((wk.INSTANCE_TYPE, False), (wk.INSTANCE_FAMILY, True)):
        requirement = claim.requirements.get(key)
        if requirement is None or not requirement.min_values:
            continue
        seen: set[str] = set()
        for index, name in enumerate(names, start=1):
            seen.add(name.split(".", 1)[0] if family else name)
            if len(seen) >= requirement.min_values:
                needed = max(needed, index)
                break
        else:
            return None
    return needed


def _is_spot(candidate: _Candidate) -> bool:
    return candidate.node.labels.get(wk.CAPACITY_TYPE) == wk.CAPACITY_TYPE_SPOT


def static_replica(pool: NodePool, instance_types: Iterable[InstanceType], unavailable: Collection[OfferingKey]) -> Replacement | None:
    """One replica of static ``pool``: every type its template allows with an available
    offering not in ``unavailable``, cheapest first (the launch picks among them; capacity
    reservations, priced near zero, come first), or None if there is none."""
    requirements = pool.template_requirements()
    zones, capacity_types = requirements.get(wk.ZONE), requirements.get(wk.CAPACITY_TYPE)
    options = []
    for instance_type in instance_types:
        if instance_type.requirements.conflicts(requirements):
            continue
        offers = [
            o
            for o in instance_type.offerings
            if o.available
            and (zones is None or zones.has(o.zone))
            and (capacity_types is None or capacity_types.has(o.capacity_type))
            and OfferingKey(instance_type.name, o.zone, o.capacity_type) not in unavailable
        ]
        if offers:
            options.append((min(o.price for o in offers), instance_type.name, offers))
    if not options:
        return None
    options.sort(key=lambda o: (o[0], o[1]))
    offers = [o for _, _, found in options for o in found]
    return Replacement(
        node_pool=pool.name,
        instance_types=tuple(name for _, name, _ in options),
        zones=tuple(sorted({o.zone for o in offers})),
        capacity_types=tuple(sorted({o.capacity_type for o in offers})),
        price=options[0][0],
    )
