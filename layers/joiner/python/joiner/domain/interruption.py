"""Interruption events as Joiner sees them, and what to do about each.

Every EventBridge message that can take a node away (spot interruption warning, rebalance
recommendation, instance state change, capacity reservation interruption warning, Capacity
Block expiration warning, AWS Health scheduled change) is normalised by :mod:`joiner.events` into one
:class:`InterruptionEvent`. :func:`decide_action` then maps (event, claim, NodePool) to an
:class:`Action`; :mod:`joiner.services.interruption` carries it out.

Pure: no I/O, no clock reads (times come from the event).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from joiner.ports import ClaimState

if TYPE_CHECKING:  # ClaimRecord is a plain dataclass; imported for typing only to keep domain free of ports
    from joiner.domain.model import NodePool
    from joiner.ports import ClaimRecord

__all__ = [
    "SPOT_INTERRUPTION",
    "REBALANCE_RECOMMENDATION",
    "STATE_CHANGE",
    "CAPACITY_RESERVATION_INTERRUPTION",
    "CAPACITY_BLOCK_EXPIRATION",
    "RESERVATION_KINDS",
    "SCHEDULED_CHANGE",
    "NOOP",
    "KINDS",
    "DRAINING_STATES",
    "SPOT_NOTICE",
    "CAPACITY_RESERVATION_NOTICE",
    "CAPACITY_BLOCK_NOTICE",
    "CAPACITY_BLOCK_RECLAIM_LEAD",
    "SCHEDULED_CHANGE_MIN_NOTICE",
    "InterruptionEvent",
    "Action",
    "ACTION_NONE",
    "ACTION_UNMANAGED",
    "ACTION_CORDON_REPLACE_DRAIN",
    "ACTION_REPLACE_THEN_DRAIN",
    "ACTION_DELETE_NODE",
    "decide_action",
    "instance_id_from_entity",
]

SPOT_INTERRUPTION = "spot-interruption"
REBALANCE_RECOMMENDATION = "rebalance-recommendation"
STATE_CHANGE = "state-change"
CAPACITY_RESERVATION_INTERRUPTION = "capacity-reservation-interruption"
#: A Capacity Block ends soon: every instance running in it is terminated. The event names the
#: reservation, not instances (``capacity_reservation_id``).
CAPACITY_BLOCK_EXPIRATION = "capacity-block-expiration"
SCHEDULED_CHANGE = "scheduled-change"
#: A recognised event that needs nothing (a state change to ``running``, a Health event
#: for another service or category).
NOOP = "noop"
KINDS = (SPOT_INTERRUPTION, REBALANCE_RECOMMENDATION, STATE_CHANGE, CAPACITY_RESERVATION_INTERRUPTION, CAPACITY_BLOCK_EXPIRATION, SCHEDULED_CHANGE, NOOP)
#: Kinds that take capacity out of a reservation: the reservation is marked unavailable.
RESERVATION_KINDS = frozenset({CAPACITY_RESERVATION_INTERRUPTION, CAPACITY_BLOCK_EXPIRATION})

#: Instance states after which the node cannot keep running pods.
DRAINING_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})

#: EC2 reclaims a spot instance two minutes after the warning.
SPOT_NOTICE = timedelta(seconds=120)
#: Interruptible capacity reservations warn two minutes ahead too (when the event carries
#: no ``instance-termination-time``).
CAPACITY_RESERVATION_NOTICE = timedelta(seconds=120)
#: EC2 warns 40 minutes before a Capacity Block ends that its instances begin to terminate 10
#: minutes later: the drain must be over by then.
CAPACITY_BLOCK_NOTICE = timedelta(minutes=10)
#: How long before a Capacity Block's end EC2 begins terminating its instances.
CAPACITY_BLOCK_RECLAIM_LEAD = timedelta(minutes=30)
#: A scheduled change whose start time has already come (an update for maintenance in
#: progress) still gets this long for a graceful drain instead of immediate deletion.
SCHEDULED_CHANGE_MIN_NOTICE = timedelta(seconds=120)

_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")
_INSTANCE_ARN = re.compile(r"^arn:aws[a-z-]*:ec2:[^:]*:(?:[^:]*:)?instance/(i-[0-9a-f]{8,17})$")


def instance_id_from_entity(value: str) -> str | None:
    """``i-...`` from a bare instance id or an instance ARN (``arn:aws:ec2:<region>:<account>:instance/i-...``;
    spot warnings name the zone instead of the region and leave the account empty). None for anything else."""
    value = value.strip()
    if _INSTANCE_ID.match(value):
        return value
    match = _INSTANCE_ARN.match(value)
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class InterruptionEvent:
    """One normalised interruption message.

    ``start_time`` is when the notice was raised (the EventBridge ``time``); ``deadline``
    is when the instance goes away (spot: ``time`` + 2 min; Health: the scheduled
    ``startTime``, at least ``time`` + 2 min; capacity reservation: ``instance-termination-time``;
    Capacity Block: when EC2 begins terminating its instances; state change: the
    event time, it is already happening; rebalance: None). ``state`` is the instance state
    for state changes, ``detail`` a short description (the Health event type code, the
    instance action). ``capacity_reservation_id`` names the reservation a Capacity Block
    warning is about (its instances are looked up, ``instance_ids`` is empty) and
    ``reservation_end`` when that reservation ends.
    """

    kind: str
    event_id: str
    instance_ids: tuple[str, ...]
    deadline: datetime | None
    start_time: datetime
    raw_detail_type: str
    state: str = ""
    detail: str = ""
    capacity_reservation_id: str = ""
    reservation_end: datetime | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"InterruptionEvent.kind: unknown kind {self.kind!r}")
        times = (self.start_time, self.deadline, self.reservation_end)
        if any(moment is not None and moment.tzinfo is None for moment in times):
            raise ValueError("InterruptionEvent: start_time, deadline and reservation_end must be timezone-aware")

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "eventId": self.event_id,
            "detailType": self.raw_detail_type,
            "instanceIds": list(self.instance_ids),
            "time": _iso(self.start_time),
            "deadline": _iso(self.deadline) if self.deadline else None,
            **({"state": self.state} if self.state else {}),
            **({"detail": self.detail} if self.detail else {}),
            **({"capacityReservationId": self.capacity_reservation_id} if self.capacity_reservation_id else {}),
            **({"reservationEnd": _iso(self.reservation_end)} if self.reservation_end else {}),
        }


ACTION_NONE = "none"
ACTION_UNMANAGED = "unmanaged"
#: Cordon now, launch replacement capacity for the node's pods now, drain when it is Ready
#: or when the drain must start to end by the deadline (whichever comes first).
ACTION_CORDON_REPLACE_DRAIN = "cordon-replace-drain"
#: Cordon, launch the replacement, drain only once the replacement is Ready.
ACTION_REPLACE_THEN_DRAIN = "replace-then-drain"
#: The instance is (nearly) gone: delete its pods and the Node, close the claim.
ACTION_DELETE_NODE = "delete-node"


@dataclass(frozen=True, slots=True)
class Action:
    """What to do with one node for one event.

    ``deadline``: when the drain must be over (pods still there are deleted with a grace
    period that ends by then); None waits for PDBs and ``do-not-disrupt`` pods
    indefinitely. ``mark_unavailable``: the (instance type, zone, spot) offering, or for a
    reservation's warning that reservation, goes on the unavailable list so replacements
    avoid it. ``replace``: launch capacity for the
    node's reschedulable pods now. ``wait_for_replacement``: drain only once that capacity
    is Ready, or, with a ``deadline``, once the drain must start to end by it
    (:func:`joiner.domain.termination.drain_start_by`): pods move straight onto Ready
    capacity and none is still running at the deadline. ``urgent``: the deadline is the
    instance's end (not a NodePool's grace cap), so a failure to start must not wait for a
    redelivery.
    """

    kind: str
    reason: str
    deadline: datetime | None = None
    mark_unavailable: bool = False
    replace: bool = False
    wait_for_replacement: bool = False

    @property
    def acts(self) -> bool:
        return self.kind not in (ACTION_NONE, ACTION_UNMANAGED)

    @property
    def urgent(self) -> bool:
        return self.deadline is not None and self.kind in (ACTION_CORDON_REPLACE_DRAIN, ACTION_DELETE_NODE)

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.kind,
            "reason": self.reason,
            "drainDeadline": _iso(self.deadline) if self.deadline else None,
            "markUnavailable": self.mark_unavailable,
            "replace": self.replace,
            "waitForReplacement": self.wait_for_replacement,
        }


def decide_action(event: InterruptionEvent, claim: ClaimRecord | None, node_pool: NodePool | None) -> Action:
    """The action for one managed-or-not node named by ``event``.

    The node is managed when Joiner has a claim for it or it belongs to a NodePool
    (label or instance tag); otherwise the event is acknowledged and counted. A NodePool's
    ``terminationGracePeriod`` caps every drain: the deadline is the earlier of the
    event's and ``event time + terminationGracePeriod``.
    """
    if claim is None and node_pool is None:
        return Action(ACTION_UNMANAGED, "instance not managed by Joiner (no claim, no NodePool)")
    if claim is not None and claim.state == ClaimState.CLOSED:
        return Action(ACTION_NONE, f"claim {claim.claim_id} is already closed")
    if event.kind == NOOP:
        return Action(ACTION_NONE, event.detail or "event needs no action")

    grace = node_pool.termination_grace_period if node_pool is not None else None
    cap = event.start_time + grace if grace is not None else None

    def capped(deadline: datetime | None) -> datetime | None:
        if deadline is None:
            return cap
        return deadline if cap is None else min(deadline, cap)

    if event.kind == SPOT_INTERRUPTION:
        return Action(
            ACTION_CORDON_REPLACE_DRAIN,
            "spot interruption warning: the instance is reclaimed at the deadline",
            deadline=capped(event.deadline),
            mark_unavailable=True,
            replace=True,
            wait_for_replacement=True,
        )
    if event.kind in RESERVATION_KINDS:
        what = "Capacity Block expiration warning" if event.kind == CAPACITY_BLOCK_EXPIRATION else "capacity reservation interruption warning"
        return Action(
            ACTION_CORDON_REPLACE_DRAIN,
            f"{what}: the instance is terminated at the deadline",
            deadline=capped(event.deadline),
            mark_unavailable=True,
            replace=True,
            wait_for_replacement=True,
        )
    if event.kind == SCHEDULED_CHANGE:
        return Action(
            ACTION_CORDON_REPLACE_DRAIN,
            f"scheduled maintenance {event.detail or ''}".rstrip() + ": drained before the event starts",
            deadline=capped(event.deadline),
            replace=True,
            wait_for_replacement=True,
        )
    if event.kind == REBALANCE_RECOMMENDATION:
        policy = node_pool.rebalance if node_pool is not None else "replace"
        if policy == "ignore":
            return Action(
                ACTION_NONE,
                f"NodePool {node_pool.name!r} ignores rebalance recommendations (interruption.rebalance: ignore)" if node_pool else "rebalance ignored",
            )
        return Action(
            ACTION_REPLACE_THEN_DRAIN,
            "rebalance recommendation: replace first, then drain gracefully",
            deadline=cap,
            replace=True,
            wait_for_replacement=True,
        )
    if event.kind == STATE_CHANGE:
        if event.state not in DRAINING_STATES:
            return Action(ACTION_NONE, f"instance state {event.state!r} needs no action")
        return Action(
            ACTION_DELETE_NODE,
            f"instance is {event.state}: its pods cannot keep running",
            deadline=event.deadline or event.start_time,
        )
    raise ValueError(f"decide_action: unhandled event kind {event.kind!r}")  # pragma: no cover - KINDS is closed


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
