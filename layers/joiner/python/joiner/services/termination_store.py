"""The durable side of a termination: its ``TERMINATION#<node>`` item, the urgent requests
left beside it, the step chain's work-queue messages and the node's lease.

Safety under retries and concurrency:

* every step holds the lease ``termination/<node>`` (a DynamoDB conditional write with a
  :data:`LEASE_TTL_SECONDS` expiry the step renews while it works), so two invocations
  never drive one node at once; an urgent event (a deadline, no replacement to wait for)
  that finds it taken leaves a request the running step takes (:func:`leave_request`)
  instead of waiting;
* every step consumes generation ``n`` and schedules ``n + 1``; a message for another
  generation (a duplicate delivery, a chain superseded by a newer event) is dropped;
* a crash or timeout mid-step loses nothing and costs seconds, not the visibility
  timeout: before it acts, every step saves its state and sends a *safety continuation*
  of its own generation :data:`SAFETY_DELAY_SECONDS` ahead, just after its lease would
  expire. A step that ends bumps the generation, so the safety message goes stale and is
  dropped; a step that died leaves it current, and it runs the step again (evictions and
  deletions are idempotent).
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from joiner.domain.termination import TerminationState
from joiner.observability import logger

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = [
    "CONTINUATION_KIND",
    "LEASE_RENEW_SECONDS",
    "LEASE_TTL_SECONDS",
    "MAX_DELAY_SECONDS",
    "OUTAGE_BUDGET",
    "RECEIVED_VISIBILITY_CAP_SECONDS",
    "RECEIVED_VISIBILITY_SECONDS",
    "REQUEST_KIND",
    "SAFETY_DELAY_SECONDS",
    "SLOW_STEP_SECONDS",
    "SPARE_RECEIVES",
    "TERMINATION_KIND",
    "WORK_MAX_RECEIVES",
    "LeaseLost",
    "TerminationBusy",
    "TerminationLease",
    "TerminationResult",
    "apply_request",
    "leave_request",
    "load_state",
    "parse_time",
    "received_visibility",
    "redelivery_budget",
    "save_state",
    "schedule_step",
    "schedule_then_save",
    "take_request_if_slow",
]

TERMINATION_KIND = "TERMINATION"
#: What an urgent event asks of a node whose lease it found held (see :func:`leave_request`).
REQUEST_KIND = "TERMINATION_REQUEST"
CONTINUATION_KIND = "termination"
#: A step's lease lasts this long from its last renewal (a working step renews it every
#: :data:`LEASE_RENEW_SECONDS` of wall time), so a step that died blocks its node for at most this.
LEASE_TTL_SECONDS = 10
LEASE_RENEW_SECONDS = 3.0
#: A step's safety continuation (same generation) arrives this long after the step began: after
#: the lease of a step that died has expired (see the module docstring).
SAFETY_DELAY_SECONDS = LEASE_TTL_SECONDS + 2
#: How long a received work-queue message stays invisible while its invocation runs (the
#: termination handler sets it on receipt): an invocation that dies before its step sent the
#: safety continuation leaves the message to another one this soon, not after the queue's
#: visibility timeout (66 s). A live invocation still working past it meets a duplicate
#: delivery, which finds the lease held (requeued) or its generation stale (dropped).
RECEIVED_VISIBILITY_SECONDS = SAFETY_DELAY_SECONDS + 8
#: A message received again after failing is invisible for longer each time (see
#: :func:`received_visibility`), up to this: a drain resumes at most this long after its
#: dependency recovers.
RECEIVED_VISIBILITY_CAP_SECONDS = 120
#: The work queue's redrive policy: receives of one message before it is dead-lettered
#: (``maxReceiveCount``: infra/deployment.py's WORK_MAX_RECEIVE_COUNT, which the local stack uses too; a test compares).
WORK_MAX_RECEIVES = 24
#: Receives a message may already have spent (deaths, duplicate deliveries) when an outage begins.
SPARE_RECEIVES = 3
#: The longest outage of a dependency (DynamoDB, the Kubernetes API, EC2, beyond the clients'
#: retries) that a failing continuation outlives: received after it ends, never dead-lettered
#: during it, even with :data:`SPARE_RECEIVES` receives already spent (:func:`redelivery_budget`).
OUTAGE_BUDGET = timedelta(minutes=30)
#: SQS per-message delay bounds.
MAX_DELAY_SECONDS = 900
#: A step that held the lease this long (wall clock) looks for urgent requests left meanwhile.
SLOW_STEP_SECONDS = 2.0


def received_visibility(receive_count: object) -> int:
    """Seconds a work-queue message received for the ``receive_count``-th time (SQS's
    ``ApproximateReceiveCount``) stays invisible: :data:`RECEIVED_VISIBILITY_SECONDS` for the
    first two receives (a death mid-step costs seconds), then doubling to at most
    :data:`RECEIVED_VISIBILITY_CAP_SECONDS`: a message that keeps failing on a dependency's
    outage is tried less often, and with :data:`WORK_MAX_RECEIVES` receives outlives
    :data:`OUTAGE_BUDGET` before it is dead-lettered. A count that is not a positive integer
    (missing, malformed) counts as the first receive."""
    try:
        count = int(str(receive_count)) if receive_count is not None else 1
    except ValueError:
        count = 1
    exponent = min(max(0, count - 2), 8)
    return min(RECEIVED_VISIBILITY_SECONDS << exponent, RECEIVED_VISIBILITY_CAP_SECONDS)


def redelivery_budget(first: int = 1, max_receives: int = WORK_MAX_RECEIVES) -> timedelta:
    """How long a message failing on every receive from its ``first``-th receive on is
    retried before it is dead-lettered: the sum of :func:`received_visibility` over its
    remaining receives (SQS moves it on the receive after ``max_receives``)."""
    return timedelta(seconds=sum(received_visibility(n) for n in range(first, max_receives + 1)))


class TerminationBusy(Exception):
    """Another invocation holds this node's termination lease; retry later."""


class LeaseLost(TerminationBusy):
    """The step's lease expired and another invocation took it: the step stops acting."""


@dataclass(frozen=True, slots=True)
class TerminationResult:
    """What one call did. ``status``: started, updated, replacing, draining, retrying (the
    step failed as a whole and runs again within seconds; ``error`` says why), terminated,
    stale (message for an old generation), unknown (no termination in progress).
    ``failed``: pods whose eviction or deletion failed in this step (retried later).
    ``launched``: the replacement claims this call launched for the node's pods."""

    node: str
    status: str
    generation: int = 0
    evicted: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    waiting: tuple[tuple[str, str], ...] = ()
    next_step_in: int | None = None
    phase: str = ""
    failed: tuple[str, ...] = ()
    error: str = ""
    launched: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "status": self.status,
            "generation": self.generation,
            "phase": self.phase,
            "evicted": list(self.evicted),
            "blocked": list(self.blocked),
            "deleted": list(self.deleted),
            "waiting": [list(w) for w in self.waiting],
            "nextStepIn": self.next_step_in,
            "failed": list(self.failed),
            "error": self.error,
            "launched": list(self.launched),
        }


# ------------------------------------------------------------------ the lease


class TerminationLease:
    """The node's termination lease for the duration of one step (owner unique per step)."""

    def __init__(self, runtime: Runtime, node: str, now: datetime, *, wait_seconds: float = 0.0) -> None:
        self.runtime = runtime
        self.name = f"termination/{node}"
        self.owner = f"{getattr(runtime, 'invocation_id', 'local')}/{uuid.uuid4().hex[:12]}"
        self.now = now
        self.wait_seconds = wait_seconds
        self.renewed = time.monotonic()

    held = False

    def __enter__(self) -> Self:
        if not self.held:
            self.acquire()
        return self

    def acquire(self) -> None:
        """Take the lease, waiting up to ``wait_seconds``; :class:`TerminationBusy` if held."""
        # Waiting for another invocation or thread to finish its step is real waiting, on
        # the wall clock (not the runtime's clock, which tests may drive by hand).
        state = self.runtime.state
        give_up = time.monotonic() + self.wait_seconds
        delay = 0.05
        while not state.acquire_lease(self.name, self.owner, self.now, LEASE_TTL_SECONDS):
            if time.monotonic() >= give_up:
                raise TerminationBusy(f"{self.name} is held by another invocation")
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        self.held = True
        self.renewed = time.monotonic()

    def keep(self) -> None:
        """Renew the lease when :data:`LEASE_RENEW_SECONDS` of wall time have passed since it
        was taken or last renewed; :class:`LeaseLost` when another invocation has it now.
        Called between a step's actions, so a long step never outlives its lease."""
        if not self.held or time.monotonic() - self.renewed < LEASE_RENEW_SECONDS:
            return
        if not self.runtime.state.acquire_lease(self.name, self.owner, self.runtime.clock.now(), LEASE_TTL_SECONDS):
            self.held = False
            raise LeaseLost(f"{self.name} expired and was taken by another invocation")
        self.renewed = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        if not self.held:
            return
        self.held = False
        self.runtime.state.release_lease(self.name, self.owner)


# ------------------------------------------------------------------ the item and the chain


def load_state(runtime: Runtime, node: str) -> TerminationState | None:
    """The node's stored termination, None when none is in progress."""
    data = runtime.state.get_item(TERMINATION_KIND, node)
    return TerminationState.from_dict(data) if data else None


def save_state(runtime: Runtime, state: TerminationState, now: datetime) -> None:
    """Store ``state``, stamped as advanced at ``now``."""
    data = state.to_dict()
    data["updatedAt"] = now.isoformat()
    runtime.state.put_item(TERMINATION_KIND, state.node, data)


def schedule_then_save(runtime: Runtime, state: TerminationState, now: datetime, at: datetime | None) -> int:
    """Schedule the step of ``state.generation``, then save ``state``. In this order a death
    between the two calls leaves a message whose generation is ahead of the stored one, which
    the continuation runs; the other order would leave a saved generation that no message
    carries, and the step's safety continuation, one generation behind, would be dropped as
    stale (a drain stopped short of its deadline)."""
    delay = schedule_step(runtime, state, now, at)
    save_state(runtime, state, now)
    return delay


def schedule_step(runtime: Runtime, state: TerminationState, now: datetime, at: datetime | None) -> int:
    """Send the continuation of ``state.generation`` for ``at`` (None: a second from now,
    within SQS's delay bounds). Returns the delay in seconds."""
    delay = 1 if at is None else math.ceil((at - now).total_seconds())
    delay = max(1, min(MAX_DELAY_SECONDS, delay))
    runtime.queue.send({"kind": CONTINUATION_KIND, "node": state.node, "generation": state.generation}, delay_seconds=delay)
    return delay


# ------------------------------------------------------------------ urgent requests


def leave_request(
    runtime: Runtime,
    node_name: str,
    reason: str,
    deadline: datetime,
    now: datetime,
    *,
    instance_id: str | None,
    claim_id: str | None,
    node_pool: str | None,
    event_id: str | None,
) -> TerminationResult:
    """An urgent event (a deadline, no replacement to wait for) found the node's lease held
    by a slower step: it never waits. It leaves its deadline in ``TERMINATION_REQUEST#<node>``
    (the earliest of all requests kept) and schedules a step one second ahead without a
    generation, so the step runs whatever the chain's generation is. The holder's own step
    also takes the request before it schedules its successor (:func:`apply_request`);
    whichever comes first applies it. (Only those two look for requests, and the holder only
    when its step was slow: :func:`take_request_if_slow`.)"""
    existing = runtime.state.get_item(REQUEST_KIND, node_name) or {}
    prior = parse_time(existing.get("deadline"))
    events = [str(e) for e in existing.get("events") or []]
    if event_id and event_id not in events:
        events.append(event_id)
    runtime.state.put_item(
        REQUEST_KIND,
        node_name,
        {
            "node": node_name,
            "reason": reason,
            "deadline": (min(deadline, prior) if prior is not None else deadline).isoformat(),
            "instanceId": existing.get("instanceId") or instance_id,
            "claimId": existing.get("claimId") or claim_id,
            "nodePool": existing.get("nodePool") or node_pool,
            "events": events,
            "requestedAt": now.isoformat(),
        },
        expires_at=now + timedelta(days=1),
    )
    runtime.queue.send({"kind": CONTINUATION_KIND, "node": node_name}, delay_seconds=1)
    runtime.count("TerminationRequestsQueued")
    logger.info("termination request left for the next step", extra={"node": node_name, "deadline": deadline.isoformat(), "event_id": event_id})
    return TerminationResult(node_name, "queued", next_step_in=1)


def parse_time(value: object) -> datetime | None:
    """An ISO timestamp as stored; None when missing or malformed."""
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def apply_request(runtime: Runtime, state: TerminationState, now: datetime) -> TerminationState:
    """``state`` with the node's pending request (if any) applied and saved, the request
    deleted: the earlier deadline, the request's events. Returns
    ``state`` itself when there is none."""
    request = runtime.state.get_item(REQUEST_KIND, state.node)
    if not request:
        return state
    # A replacing termination keeps waiting for its replacement: the tighter deadline moves
    # its drain-start time (drain_start_by) earlier.
    merged = state.tightened(parse_time(request.get("deadline")))
    merged = replace(
        merged,
        reason=str(request.get("reason") or merged.reason),
        events=tuple(dict.fromkeys((*merged.events, *(str(e) for e in request.get("events") or [])))),
        instance_id=merged.instance_id or request.get("instanceId") or None,
        claim_id=merged.claim_id or request.get("claimId") or None,
        node_pool=merged.node_pool or request.get("nodePool") or None,
    )
    save_state(runtime, merged, now)
    runtime.state.delete_item(REQUEST_KIND, state.node)
    return merged


def take_request_if_slow(runtime: Runtime, state: TerminationState, now: datetime, began: float) -> TerminationState:
    """:func:`apply_request` at the end of a step that held the lease for at least
    :data:`SLOW_STEP_SECONDS` (wall clock). A quicker step needs no look: a request left
    during it has its own step, which arrives a second later and waits for the lease, so it
    starts after this step ends."""
    if time.monotonic() - began < SLOW_STEP_SECONDS:
        return state
    return apply_request(runtime, state, now)
