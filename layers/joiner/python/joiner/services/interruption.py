"""Acting on interruption events: one service call per normalised event.

For every instance an event names:

1. find what Joiner knows about it: its claim (the open claims, read once per
   invocation, else DynamoDB ``byInstance``), its Node (by ``providerID``), its NodePool
   (claim, else the Node's ``joiner.dev/nodepool`` label);
2. :func:`joiner.domain.interruption.decide_action`; before any action, ownership is
   confirmed from the instance's own ``joiner.dev/cluster`` tag and a claim recording the
   instance (:mod:`joiner.domain.ownership`): a Node's labels alone prove nothing, since a
   kubelet may set them on itself. Anything else is left alone and counted
   (``NotOwnedSkipped``);
3. carry the action out:

   * **cordon-replace-drain** (spot warning, capacity reservation warning, scheduled
     change): mark a spot offering unavailable for 3 minutes, taint and cordon the node at
     once, launch replacement capacity for its reschedulable pods (planned as if they were
     pending, with every disrupted node excluded), then begin the drain with the action's
     deadline;
   * **replace-then-drain** (rebalance, NodePool ``interruption.rebalance: replace``):
     cordon, launch the replacement, drain once it is Ready (the termination
     continuation checks);
   * **delete-node** (stopping, stopped, shutting-down, terminated): delete the pods, the
     Node and close the claim at once; the pods' controllers recreate them as pending pods
     and the scanner provisions for them;
   * **unmanaged** / **none**: acknowledge and count.

The replacement is recorded with the termination (a launch mark first, its claims after);
its claim ids derive from the pods' uids. A retried message or a second event for the same
node therefore never launches twice. A replacement that cannot launch (limits, capacity)
never holds up the drain: the pods go pending and the scanner takes over.

A spot warning never waits behind a rebalance or any slower step. The launch,
the slow part, runs outside the node's termination lease, with the first drain step
scheduled seconds ahead, so a spot warning for a node whose rebalance replacement is
launching takes the lease and drains at once with its deadline; and an urgent event that
still finds the lease held (a slow drain step) leaves its deadline as a request the running
step takes, instead of failing its record until the queue's visibility timeout. See
:func:`joiner.services.termination.begin_termination`. (Processing records by urgency
alone was not enough: the records of a batch run concurrently, and a spot warning would
still wait for a launch. Here a spot warning waits for its own replacement launch at most
until the step scheduled 5 s ahead, so that in the common case the replacement is recorded
before the first eviction.)

Events of one invocation may be handled concurrently (see the handler): the shared
:class:`ClusterView` is thread-safe and plans replacements one at a time, so each plan
sees the claims the previous ones launched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from joiner.domain import interruption as di
from joiner.domain import labels as wk
from joiner.domain.interruption import InterruptionEvent, decide_action
from joiner.domain.model import OfferingKey
from joiner.observability import logger
from joiner.ports import ClaimRecord, Ec2Error, KubernetesError
from joiner.services.ownership import ownership_problem, refuse
from joiner.services.replacement import ClusterView
from joiner.services.termination import (
    AlreadyRead,
    TerminationRequest,
    TerminationResult,
    begin_termination,
    cordon_node,
    request_termination,
)

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = [
    "UNAVAILABLE_FOR",
    "NodeOutcome",
    "InterruptionOutcome",
    "ClusterView",
    "handle_interruption",
]

#: How long an interrupted spot offering is avoided (Karpenter's ICE cache TTL).
UNAVAILABLE_FOR = timedelta(minutes=3)


@dataclass(frozen=True, slots=True)
class NodeOutcome:
    """What happened to one instance named by an event."""

    instance_id: str
    action: str
    reason: str
    node: str | None = None
    node_pool: str | None = None
    claim_id: str | None = None
    replacement_claims: tuple[str, ...] = ()
    termination: str = ""
    evicted: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "instanceId": self.instance_id,
            "action": self.action,
            "reason": self.reason,
            "node": self.node,
            "nodePool": self.node_pool,
            "claimId": self.claim_id,
            "replacementClaims": list(self.replacement_claims),
            "termination": self.termination,
            "evicted": list(self.evicted),
        }


@dataclass(frozen=True, slots=True)
class InterruptionOutcome:
    event: InterruptionEvent
    nodes: tuple[NodeOutcome, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.event.to_dict(), "nodes": [n.to_dict() for n in self.nodes]}


def handle_interruption(runtime: Runtime, event: InterruptionEvent, now: datetime | None = None, *, view: ClusterView | None = None) -> InterruptionOutcome:
    """Carry out ``event`` for every instance it names. Raises on failures worth a retry
    (Kubernetes or EC2 errors after their own retries); everything it did before is
    idempotent, so the retry picks up where this left off."""
    now = now or runtime.clock.now()
    view = view or ClusterView(runtime)
    if event.kind == di.NOOP:
        runtime.count("InterruptionIgnored", kind=event.kind)
        return InterruptionOutcome(event, tuple(NodeOutcome(i, di.ACTION_NONE, event.detail) for i in event.instance_ids))
    instance_ids = event.instance_ids
    if event.capacity_reservation_id and not instance_ids:
        instance_ids = _reservation_instances(runtime, view, event)
        if not instance_ids:
            _mark_reservation(runtime, view, event, now, "", "")
            runtime.count("InterruptionIgnored", kind=event.kind)
            return InterruptionOutcome(event)
    outcomes = [_handle_instance(runtime, view, event, instance_id, now) for instance_id in instance_ids]
    latency = (now - event.start_time).total_seconds()
    runtime.count("InterruptionLatencySeconds", max(0.0, latency), "Seconds")
    return InterruptionOutcome(event, tuple(outcomes))


def _handle_instance(runtime: Runtime, view: ClusterView, event: InterruptionEvent, instance_id: str, now: datetime) -> NodeOutcome:
    claim = view.claim_for(instance_id)
    node = view.node_of(instance_id)
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    pool_name = (claim.node_pool if claim else None) or labels.get(wk.NODEPOOL) or None
    pool = view.node_pool(pool_name) if pool_name else None
    action = decide_action(event, claim, pool)
    not_owned = None
    if action.kind not in (di.ACTION_UNMANAGED, di.ACTION_NONE):
        not_owned = ownership_problem(runtime, instance_id, claim.instance_id if claim else None)
        if not_owned is not None:
            action = dataclasses.replace(action, kind=di.ACTION_UNMANAGED, reason=not_owned)
    node_name = node["metadata"]["name"] if node else (claim.node_name if claim else None)
    base = NodeOutcome(
        instance_id, action.kind, action.reason, node=node_name, node_pool=pool_name, claim_id=claim.claim_id if claim else labels.get(wk.NODECLAIM)
    )

    if not_owned is not None:
        refuse(runtime, "interruption", not_owned, instance=instance_id, kind=event.kind, event_id=event.event_id)
        return base
    if action.kind == di.ACTION_UNMANAGED:
        runtime.count("InterruptionUnmanaged", kind=event.kind)
        logger.info("interruption for an unmanaged instance acknowledged", extra={"instance": instance_id, "kind": event.kind, "event_id": event.event_id})
        return base
    if action.kind == di.ACTION_NONE:
        runtime.count("InterruptionIgnored", kind=event.kind)
        return base

    runtime.count("InterruptionActions", action=action.kind, kind=event.kind)
    logger.info(
        "acting on interruption",
        extra={
            "instance": instance_id,
            "node": node_name,
            "kind": event.kind,
            "action": action.kind,
            "deadline": action.deadline.isoformat() if action.deadline else None,
            "event_id": event.event_id,
        },
    )
    if action.mark_unavailable:
        _mark_unavailable(runtime, claim, labels, now, event, view)

    if node is None:
        if action.kind == di.ACTION_REPLACE_THEN_DRAIN:
            return dataclasses.replace(base, reason="no Node yet: nothing to rebalance")
        return _close_without_node(runtime, claim, instance_id, event, now, base)

    node_name = node["metadata"]["name"]
    view.disrupted.add(node_name)
    request = TerminationRequest(
        node_name,
        event.kind,
        action.deadline,
        instance_id=instance_id,
        claim_id=base.claim_id,
        node_pool=pool_name,
        wait_for_replacement=action.wait_for_replacement,
        event_id=event.event_id,
        urgent=action.urgent,
    )
    try:
        node = cordon_node(runtime, node) or node
        result: TerminationResult = begin_termination(
            runtime,
            request,
            now,
            seen=AlreadyRead(node=node, claim=claim),
            replacements=view if action.replace else None,
        )
    except (KubernetesError, Ec2Error) as error:
        if action.deadline is None or not action.urgent:
            raise  # nothing urgent: the message is redelivered
        # An urgent event never waits for the message's redelivery (the queue's visibility
        # timeout): its deadline is left as a request whose termination step runs a second
        # from now and retries on its own.
        runtime.count("InterruptionDeferredToTermination", kind=event.kind)
        logger.warning(
            "interruption could not start the drain; left a termination request",
            extra={"node": node_name, "instance": instance_id, "error": f"{type(error).__name__}: {error}", "event_id": event.event_id},
        )
        result = request_termination(
            runtime,
            node_name,
            event.kind,
            action.deadline,
            now,
            instance_id=instance_id,
            claim_id=base.claim_id,
            node_pool=pool_name,
            event_id=event.event_id,
        )
    return dataclasses.replace(base, replacement_claims=result.launched, termination=result.status, evicted=result.evicted)


def _reservation_instances(runtime: Runtime, view: ClusterView, event: InterruptionEvent) -> tuple[str, ...]:
    """The cluster's instances running in the reservation ``event`` names (a Capacity Block
    warning names no instance), as EC2 reports them; their nodes are left out of every
    replacement plan of the invocation."""
    records = runtime.ec2.reservation_instances(runtime.settings.cluster_name, event.capacity_reservation_id)
    instance_ids = tuple(sorted({r.instance_id for r in records}))
    logger.info(
        "capacity reservation warning: instances found",
        extra={
            "reservation": event.capacity_reservation_id,
            "instances": list(instance_ids),
            "kind": event.kind,
            "event_id": event.event_id,
        },
    )
    view.expect_disruption(instance_ids)
    return instance_ids


def _mark_unavailable(
    runtime: Runtime,
    claim: ClaimRecord | None,
    labels: dict[str, str],
    now: datetime,
    event: InterruptionEvent,
    view: ClusterView,
) -> None:
    instance_type = (claim.instance_type if claim else None) or labels.get(wk.INSTANCE_TYPE) or ""
    zone = (claim.zone if claim else None) or labels.get(wk.ZONE) or ""
    if event.kind in di.RESERVATION_KINDS:
        _mark_reservation(runtime, view, event, now, instance_type, zone, labels.get(wk.CAPACITY_RESERVATION_ID, ""))
        return
    if not instance_type or not zone:
        return
    key = OfferingKey(instance_type, zone, wk.CAPACITY_TYPE_SPOT)
    if not view.first_mark(key):
        return  # a burst reclaims many nodes of one offering: one write per invocation is enough
    runtime.state.mark_unavailable(key, now + UNAVAILABLE_FOR, f"{event.kind} {event.event_id}")
    runtime.count("OfferingsMarkedUnavailable", reason=event.kind)


def _mark_reservation(
    runtime: Runtime,
    view: ClusterView,
    event: InterruptionEvent,
    now: datetime,
    instance_type: str,
    zone: str,
    labelled: str = "",
) -> None:
    """Mark the reservation being reclaimed unavailable (Karpenter's interruption controller
    does the same), so no replacement targets it: a Capacity Block until it ends, an
    interruptible reservation for :data:`UNAVAILABLE_FOR`. The reservation is the event's, else
    the one the Node's ``capacity-reservation-id`` label names; a node without one (launched
    by an older version) marks nothing here."""
    reservation_id = event.capacity_reservation_id or labelled
    if not reservation_id:
        return
    key = OfferingKey(instance_type, zone, wk.CAPACITY_TYPE_RESERVED, reservation_id=reservation_id)
    if not view.first_mark(OfferingKey("", "", wk.CAPACITY_TYPE_RESERVED, reservation_id=reservation_id)):
        return
    until = now + UNAVAILABLE_FOR
    if event.reservation_end is not None:
        until = max(until, event.reservation_end)
    runtime.state.mark_unavailable(key, until, f"{event.kind} {event.event_id}")
    runtime.count("OfferingsMarkedUnavailable", reason=event.kind)


def _close_without_node(
    runtime: Runtime, claim: ClaimRecord | None, instance_id: str, event: InterruptionEvent, now: datetime, base: NodeOutcome
) -> NodeOutcome:
    """The instance never became a Node (or it is already gone): terminate it, close the
    claim and release its reservation; the pods it was for are still pending."""
    from joiner.services.lifecycle import close_claim, terminate_instance

    if not terminate_instance(runtime, instance_id, path="interruption"):
        return dataclasses.replace(base, termination="not owned")
    if claim is not None:
        close_claim(runtime, claim, event.kind, now, path="interruption", terminate=False)
    return dataclasses.replace(base, termination="terminated")
