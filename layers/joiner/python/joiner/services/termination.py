"""Graceful node termination that outlives one Lambda invocation: the requests that start,
tighten and continue one.

:func:`begin_termination` taints, cordons and labels the node, records a durable
``TERMINATION#<node>`` item and runs the first drain step; :func:`continue_termination`
runs the next step when the delayed work-queue message ``{"kind": "termination", "node":
..., "generation": n}`` arrives. The steps are :mod:`joiner.services.drain_step`'s; the
item, the urgent requests, the step chain's messages and the node's lease are
:mod:`joiner.services.termination_store`'s (with the rules that make retries and
concurrent invocations safe). This module is the entry point: it re-exports what callers
use of both.

A continuation that finds the node's lease taken is sent again :data:`BUSY_RETRY_SECONDS`
later and acknowledged (never left to the work queue's visibility timeout); the slow
replacement launch runs outside the lease (:func:`begin_termination`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain.node_pods import parse_node_pods
from joiner.domain.nodeclaims import disrupting_condition
from joiner.domain.termination import PHASE_DRAINING, PHASE_REPLACING, TerminationState
from joiner.observability import logger
from joiner.ports import ClaimRecord, ClaimState, ClaimStateConflict, JsonDict
from joiner.services.drain_step import cordon_node, launching, record_node_event, step
from joiner.services.lifecycle import advance
from joiner.services.nodeclaims import mirror_claim
from joiner.services.termination_store import (
    CONTINUATION_KIND,
    LEASE_TTL_SECONDS,
    OUTAGE_BUDGET,
    RECEIVED_VISIBILITY_CAP_SECONDS,
    RECEIVED_VISIBILITY_SECONDS,
    REQUEST_KIND,
    SAFETY_DELAY_SECONDS,
    SPARE_RECEIVES,
    TERMINATION_KIND,
    WORK_MAX_RECEIVES,
    LeaseLost,
    TerminationBusy,
    TerminationLease,
    TerminationResult,
    apply_request,
    leave_request,
    load_state,
    parse_time,
    received_visibility,
    redelivery_budget,
    save_state,
    schedule_step,
    schedule_then_save,
)

if TYPE_CHECKING:
    from joiner.services.context import Runtime
    from joiner.services.replacement import ClusterView

__all__ = [
    "BUSY_RETRY_SECONDS",
    "CONTINUATION_KIND",
    "LEASE_TTL_SECONDS",
    "LEASE_WAIT_SECONDS",
    "OUTAGE_BUDGET",
    "RECEIVED_VISIBILITY_CAP_SECONDS",
    "RECEIVED_VISIBILITY_SECONDS",
    "REPLACEMENT_TIMEOUT",
    "REQUEST_KIND",
    "SAFETY_DELAY_SECONDS",
    "SPARE_RECEIVES",
    "STALL_AFTER",
    "TERMINATION_KIND",
    "WORK_MAX_RECEIVES",
    "AlreadyRead",
    "InvalidWorkMessage",
    "LeaseLost",
    "TerminationBusy",
    "TerminationRequest",
    "TerminationResult",
    "begin_termination",
    "continue_termination",
    "cordon_node",
    "handle_continuation",
    "parse_continuation",
    "parse_node_pods",
    "received_visibility",
    "redelivery_budget",
    "request_termination",
    "resume_stalled_terminations",
]

#: A continuation that finds the node's lease held comes back this much later.
BUSY_RETRY_SECONDS = 5
#: How long a rebalance replacement is waited for before draining anyway.
REPLACEMENT_TIMEOUT = timedelta(minutes=10)
#: A TERMINATION item not advanced for this long has lost its continuation message.
STALL_AFTER = timedelta(minutes=20)
#: begin_termination waits this long for a running step to release the node's lease.
LEASE_WAIT_SECONDS = 3.0
#: When a replacement is launched, the first drain step is scheduled this soon beforehand,
#: so the drain never depends on the launch finishing (nor on the launching invocation living).
FIRST_STEP_WITHIN = timedelta(seconds=5)
#: How long the launching invocation waits for the node's lease to record its replacement.
RECORD_WAIT_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class TerminationRequest:
    """What an event asks of a node's termination.

    ``deadline``: when the node must be gone (None: PDBs are honoured without end).
    ``instance_id``, ``claim_id``, ``node_pool``: what the caller knows of the node (else
    read from its Node). ``replacement_claims``: claims already launched for its pods;
    ``wait_for_replacement``: hold the drain until they are Ready (see
    :func:`begin_termination`). ``event_id``: recorded with the termination. ``urgent``
    (None: a deadline and no waiting): the node's lease being held leaves the deadline as a
    request instead of failing."""

    node_name: str
    reason: str
    deadline: datetime | None = None
    instance_id: str | None = None
    claim_id: str | None = None
    node_pool: str | None = None
    replacement_claims: tuple[str, ...] = ()
    wait_for_replacement: bool = False
    event_id: str | None = None
    urgent: bool | None = None

    @property
    def leaves_request_when_busy(self) -> bool:
        """An urgent request with a deadline: a held lease leaves it as a request."""
        urgent = self.urgent if self.urgent is not None else self.deadline is not None and not self.wait_for_replacement
        return self.deadline is not None and urgent


@dataclass(frozen=True, slots=True)
class AlreadyRead:
    """What the caller has just read of the node: its Node and its claim (saves the reads)."""

    node: JsonDict | None = None
    claim: ClaimRecord | None = None


def _instance_from_node(node: JsonDict | None) -> str | None:
    if not node:
        return None
    provider = (node.get("spec") or {}).get("providerID") or ""
    tail = provider.rsplit("/", 1)[-1]
    return tail if provider.startswith("aws://") and tail.startswith("i-") else None


# ------------------------------------------------------------------ entry points


def begin_termination(
    runtime: Runtime,
    request: TerminationRequest,
    now: datetime,
    *,
    seen: AlreadyRead | None = None,
    replacements: ClusterView | None = None,
) -> TerminationResult:
    """Start (or tighten) the termination of ``request.node_name`` and run its first drain step.

    Idempotent: a second call for a node already terminating keeps the earlier deadline
    if it is sooner, records the event, and restarts the step chain (the old chain's
    message becomes stale). ``wait_for_replacement`` with ``replacement_claims`` (or a
    replacement launched here) holds the drain until those claims' nodes are Ready
    (rebalance), or, with a ``deadline``, until the drain must start to end by it
    (:func:`joiner.domain.termination.drain_start_by`: a spot warning's pods keep running
    while their replacement boots and move straight onto it); a later call without it
    starts draining at once.

    ``replacements``, when given, replaces the node's pods
    (:meth:`~joiner.services.replacement.ClusterView.replace_node`) unless an earlier call
    already launched a replacement for this node or is launching one now; the claims it
    launched are recorded with the termination and returned as ``launched``. The launch can
    be slow, so it runs *outside* the node's lease: the lease is held only to mark the launch
    (``launching_since``, so no second call launches again) and, afterwards, to record its
    claims. Before launching, the first drain step is scheduled :data:`FIRST_STEP_WITHIN`
    ahead: whatever the launch does (and whether or not this invocation lives through it),
    the drain goes on, and another event for the node (a spot warning behind a rebalance)
    takes the lease and drains at once instead of waiting for the launch. ``seen``: what
    the caller already read of the node.
    """
    seen = seen or AlreadyRead()
    node_name, reason, deadline = request.node_name, request.reason, request.deadline
    lease = TerminationLease(runtime, node_name, now, wait_seconds=LEASE_WAIT_SECONDS)
    try:
        lease.acquire()
    except TerminationBusy:
        if request.deadline is None or not request.leaves_request_when_busy:
            raise
        return leave_request(
            runtime,
            node_name,
            reason,
            request.deadline,
            now,
            instance_id=request.instance_id,
            claim_id=request.claim_id,
            node_pool=request.node_pool,
            event_id=request.event_id,
        )
    with lease:
        current = load_state(runtime, node_name)
        node = seen.node if seen.node is not None else runtime.kube.get_node(node_name)
        if node is not None:
            node = cordon_node(runtime, node) or node
        instance_id = request.instance_id or _instance_from_node(node)
        node_pool, claim_id = request.node_pool, request.claim_id
        if node is not None:
            labels = (node.get("metadata") or {}).get("labels") or {}
            node_pool = node_pool or labels.get(wk.NODEPOOL)
            claim_id = claim_id or labels.get(wk.NODECLAIM)
        launch = replacements is not None and node is not None and not (current is not None and (current.replacement_claims or launching(current, now)))
        waits = bool(request.wait_for_replacement and (request.replacement_claims or launch))
        if current is None:
            state = TerminationState(
                node=node_name,
                reason=reason,
                started_at=now,
                deadline=deadline,
                instance_id=instance_id,
                claim_id=claim_id,
                node_pool=node_pool,
                generation=0,
                phase=PHASE_REPLACING if waits else PHASE_DRAINING,
                replacement_claims=tuple(request.replacement_claims),
                replacement_deadline=now + REPLACEMENT_TIMEOUT if waits else None,
                events=(request.event_id,) if request.event_id else (),
            )
            status = "started"
            if claim_id:
                claim = seen.claim if seen.claim is not None and seen.claim.claim_id == claim_id else None
                _mark_claim_terminating(runtime, claim_id, reason, claim, deadline)
            if node is not None:
                record_node_event(runtime, node, "Terminating", f"{reason}; " + (f"drain deadline {deadline.isoformat()}" if deadline else "no drain deadline"))
        else:
            state = current.tightened(deadline)
            if request.event_id and request.event_id not in state.events:
                state = replace(state, events=(*state.events, request.event_id))
            if not request.wait_for_replacement and state.phase == PHASE_REPLACING:
                # e.g. a spot warning after a rebalance recommendation: drain now
                state = replace(state, phase=PHASE_DRAINING, reason=reason)
            state = replace(
                state,
                instance_id=state.instance_id or instance_id,
                claim_id=state.claim_id or claim_id,
                node_pool=state.node_pool or node_pool,
                replacement_claims=tuple(dict.fromkeys((*state.replacement_claims, *request.replacement_claims))),
            )
            status = "updated"
        if not launch:
            try:
                result = step(runtime, state, now, lease, node=node)
            except LeaseLost:
                return TerminationResult(node_name, "busy", state.generation, phase=state.phase)
            return replace(result, status=status if result.status in ("draining", "replacing") else result.status)
        launch_pods = runtime.kube.list_pods_on_node(node_name)
        state = replace(state, launching_since=now, generation=state.generation + 1)
        schedule_then_save(runtime, state, now, now + FIRST_STEP_WITHIN)

    assert replacements is not None
    try:
        launched = replacements.replace_node(node_name, launch_pods, now, kind=reason, event_id=request.event_id)
    except BaseException:
        _record_launch(runtime, node_name, (), now, step_now=False)
        raise
    result = _record_launch(runtime, node_name, launched, now, step_now=True, read_before=(state.generation, node, launch_pods))
    return replace(result, status=status if result.status in ("draining", "replacing") else result.status, launched=launched)


def request_termination(
    runtime: Runtime,
    node_name: str,
    reason: str,
    deadline: datetime,
    now: datetime,
    *,
    instance_id: str | None = None,
    claim_id: str | None = None,
    node_pool: str | None = None,
    event_id: str | None = None,
) -> TerminationResult:
    """Leave ``deadline`` for the node's termination as a durable request and schedule its
    step a second from now, without touching the node or taking its lease: for an urgent
    event whose own attempt failed (a Kubernetes error after the client's retries). The
    step starts or tightens the termination and retries on its own."""
    return leave_request(runtime, node_name, reason, deadline, now, instance_id=instance_id, claim_id=claim_id, node_pool=node_pool, event_id=event_id)


def _state_from_request(runtime: Runtime, node_name: str, now: datetime) -> TerminationState | None:
    """A termination to start from a request alone (the invocation that held the lease while
    the request was left died before it saved the termination)."""
    request = runtime.state.get_item(REQUEST_KIND, node_name)
    if not request:
        return None
    state = TerminationState(node=node_name, reason=str(request.get("reason") or "requested"), started_at=now, deadline=parse_time(request.get("deadline")))
    claim_id = request.get("claimId")
    if isinstance(claim_id, str) and claim_id:
        _mark_claim_terminating(runtime, claim_id, state.reason)
    return state


def _record_launch(
    runtime: Runtime,
    node_name: str,
    claims: Sequence[str],
    now: datetime,
    *,
    step_now: bool,
    read_before: tuple[int, JsonDict | None, Sequence[JsonDict] | None] = (-1, None, None),
) -> TerminationResult:
    """Under the node's lease again: record the replacement ``claims`` launched outside it,
    clear the launch mark, and (``step_now``) run a drain step at once (the first one, unless
    the scheduled one or another event's ran meanwhile; its message then goes stale).
    ``read_before``: (generation, Node, pods) as read before the launch; when no step ran
    meanwhile (same generation), the step uses them instead of reading them again, as it
    would have without the launch."""
    now = max(now, runtime.clock.now())
    with TerminationLease(runtime, node_name, now, wait_seconds=RECORD_WAIT_SECONDS) as lease:
        state = load_state(runtime, node_name)
        if state is None:
            # Finished while the replacement launched (the node emptied, or its deadline
            # passed): the claims stand on their own; the pods went pending.
            return TerminationResult(node_name, "terminated", phase="terminated")
        state = replace(
            state,
            launching_since=None,
            replacement_claims=tuple(dict.fromkeys((*state.replacement_claims, *claims))),
        )
        save_state(runtime, state, now)
        if not step_now:
            return TerminationResult(node_name, "updated", state.generation, phase=state.phase)
        generation, node, pods_raw = read_before
        if generation != state.generation:
            node, pods_raw = None, None
        try:
            return step(runtime, state, now, lease, node=node, pods_raw=pods_raw, stored=True)
        except LeaseLost:
            return TerminationResult(node_name, "busy", state.generation, phase=state.phase)


def continue_termination(runtime: Runtime, node_name: str, now: datetime, *, generation: int | None = None) -> TerminationResult:
    """Run the next step of a termination in progress (a work-queue continuation).

    ``generation`` is the one the message carries; an older one means the message is stale
    and it is dropped (a newer one: the step that sent it died before saving, and this one
    goes on from the stored state). When another invocation holds the node's lease, the same message is
    sent again :data:`BUSY_RETRY_SECONDS` later and this one is done (status ``busy``): the
    holder either finishes its step (the message then goes stale) or died (its lease
    expires within :data:`LEASE_TTL_SECONDS`). Raises on DynamoDB or SQS errors (the message
    is retried).
    """
    # A request's step (no generation) waits a little for the step it was left for: that
    # step takes the request itself as it ends.
    lease = TerminationLease(runtime, node_name, now, wait_seconds=LEASE_WAIT_SECONDS if generation is None else 0.0)
    try:
        lease.acquire()
    except TerminationBusy:
        return _busy(runtime, node_name, generation)
    with lease:
        state = load_state(runtime, node_name)
        stored = state is not None
        if state is None:
            state = _state_from_request(runtime, node_name, now)
            if state is None:
                return TerminationResult(node_name, "unknown")
        if generation is not None and generation < state.generation:
            return TerminationResult(node_name, "stale", generation=state.generation, phase=state.phase)
        # generation > stored: the step that scheduled this message died before saving
        # (see schedule_then_save); its state is the stored one, and this message carries the chain on.
        if generation is None:
            state = apply_request(runtime, state, now)  # an urgent event's request (see leave_request); saved if any
        try:
            return step(runtime, state, now, lease, stored=stored)
        except LeaseLost:
            runtime.count("TerminationLeaseLost")
            return TerminationResult(node_name, "busy", state.generation, phase=state.phase)


def _busy(runtime: Runtime, node_name: str, generation: int | None) -> TerminationResult:
    """The node's lease is held: come back :data:`BUSY_RETRY_SECONDS` later with the same message."""
    body: dict[str, Any] = {"kind": CONTINUATION_KIND, "node": node_name}
    if generation is not None:
        body["generation"] = generation
    runtime.queue.send(body, delay_seconds=BUSY_RETRY_SECONDS)
    runtime.count("TerminationBusyRequeued")
    return TerminationResult(node_name, "busy", generation or 0, next_step_in=BUSY_RETRY_SECONDS)


class InvalidWorkMessage(ValueError):
    """A work-queue message that is not a termination continuation (acknowledged, not retried)."""


def parse_continuation(body: object) -> tuple[str, int | None]:
    """(node, generation) from a continuation body; raises :class:`InvalidWorkMessage`."""
    if not isinstance(body, Mapping):
        raise InvalidWorkMessage("work message: expected a JSON object")
    if body.get("kind") != CONTINUATION_KIND:
        raise InvalidWorkMessage(f"work message: kind must be {CONTINUATION_KIND!r}, got {body.get('kind')!r}")
    node = body.get("node")
    if not isinstance(node, str) or not node:
        raise InvalidWorkMessage("work message: node must be a non-empty string")
    generation = body.get("generation")
    if generation is not None and (not isinstance(generation, int) or isinstance(generation, bool)):
        raise InvalidWorkMessage(f"work message: generation must be an integer, got {generation!r}")
    return node, generation


def handle_continuation(runtime: Runtime, body: Mapping[str, Any], now: datetime) -> TerminationResult:
    """Validate a work-queue message body and continue the termination it names."""
    node, generation = parse_continuation(body)
    return continue_termination(runtime, node, now, generation=generation)


def resume_stalled_terminations(runtime: Runtime, now: datetime) -> list[str]:
    """Re-send the continuation of terminations whose message was lost (not advanced for
    :data:`STALL_AFTER`); for the periodic garbage collector. Returns the node names."""
    resumed = []
    for data in runtime.state.list_items(TERMINATION_KIND):
        try:
            state = TerminationState.from_dict(data)
        except (ValueError, TypeError):
            continue
        touched = _parse_updated(data) or state.started_at
        if now - touched >= STALL_AFTER:
            schedule_step(runtime, state, now, now)
            resumed.append(state.node)
    return sorted(resumed)


def _parse_updated(data: Mapping[str, Any]) -> datetime | None:
    value = data.get("updatedAt")
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _mark_claim_terminating(runtime: Runtime, claim_id: str, reason: str, claim: ClaimRecord | None = None, deadline: datetime | None = None) -> None:
    claim = claim or runtime.state.get_claim(claim_id)
    if claim is not None and claim.state not in (ClaimState.TERMINATING, ClaimState.CLOSED):
        try:
            marked = advance(runtime, claim_id, ClaimState.TERMINATING, reason=reason)
        except ClaimStateConflict as conflict:  # closed or marked concurrently: theirs stands
            logger.info("claim moved on before it was marked terminating", extra={"claim": claim_id, "state": str(conflict.current.state)})
            return
        mirror_claim(runtime, marked, condition=disrupting_condition(reason, deadline=deadline))
