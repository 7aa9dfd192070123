"""Graceful node termination that outlives one Lambda invocation.

``begin_termination`` taints, cordons and labels the node, records a durable
``TERMINATION#<node>`` item and runs the first drain step; ``continue_termination`` runs
the next step when the delayed work-queue message ``{"kind": "termination", "node": ...,
"generation": n}`` arrives. Each step evicts (or, near the deadline, deletes) what
:func:`joiner.domain.termination.plan_drain` says, saves progress, and either schedules
the next step or, once the node is empty or out of time, terminates the instance,
deletes the Node, closes the claim and releases its limit reservation.

Failures never strand pods (issue 10): a pod whose eviction or deletion fails (500 for a
pod two PodDisruptionBudgets select, 403, 5xx after the client's retries) fails alone and
is retried on the eviction backoff; a step that fails as a whole saves its state and
schedules its own retry within seconds (:func:`_retry_soon`), never waiting for the work
queue's visibility timeout; the deadline rule's deletions run whatever the evictions did.

Safety under retries and concurrency:

* every step holds the lease ``termination/<node>`` (a DynamoDB conditional write with a
  :data:`LEASE_TTL_SECONDS` expiry the step renews while it works), so two invocations
  never drive one node at once; a continuation that finds it taken is sent again
  :data:`BUSY_RETRY_SECONDS` later and acknowledged (never left to the work queue's
  visibility timeout); an urgent event (a deadline, no replacement to wait for) that finds
  it taken leaves a request the running step takes (:func:`_leave_request`) instead of
  waiting;
* the slow replacement launch runs outside the lease (:func:`begin_termination`);
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from joiner.domain import labels as wk
from joiner.domain.bounded import parse_aware_time
from joiner.domain.durations import clamp_seconds
from joiner.domain.model import Pod
from joiner.domain.nodeclaims import TERMINATION_FINALIZER, disrupting_condition
from joiner.domain.termination import (
    DISRUPTED_TAINT,
    EXCLUDE_FROM_LB_LABEL,
    GROUPS,
    PHASE_DRAINING,
    PHASE_REPLACING,
    PodDeletion,
    PodProgress,
    TerminationState,
    cordon_patch,
    drain_start_by,
    plan_drain,
    record_deletion,
    record_eviction,
    step_retry_delay,
)
from joiner.observability import logger
from joiner.ports import ClaimRecord, ClaimState, ClaimStateConflict, Ec2Error, JsonDict, KubernetesError
from joiner.services.lifecycle import advance, close_claim, terminate_instance
from joiner.services.nodeclaims import mirror_claim

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = [
    "CONTINUATION_KIND",
    "parse_node_pods",
    "LEASE_TTL_SECONDS",
    "OUTAGE_BUDGET",
    "RECEIVED_VISIBILITY_CAP_SECONDS",
    "RECEIVED_VISIBILITY_SECONDS",
    "SPARE_RECEIVES",
    "WORK_MAX_RECEIVES",
    "REPLACEMENT_TIMEOUT",
    "TERMINATION_KIND",
    "InvalidWorkMessage",
    "LeaseLost",
    "TerminationBusy",
    "TerminationResult",
    "begin_termination",
    "continue_termination",
    "cordon_node",
    "handle_continuation",
    "parse_continuation",
    "received_visibility",
    "redelivery_budget",
    "request_termination",
    "resume_stalled_terminations",
]

TERMINATION_KIND = "TERMINATION"
#: What an urgent event asks of a node whose lease it found held (see :func:`begin_termination`).
REQUEST_KIND = "TERMINATION_REQUEST"
CONTINUATION_KIND = "termination"
#: A step's lease lasts this long from its last renewal (a working step renews it every
#: :data:`LEASE_RENEW_SECONDS` of wall time), so a step that died blocks its node for at most this.
LEASE_TTL_SECONDS = 10
LEASE_RENEW_SECONDS = 3.0
#: A step's safety continuation (same generation) arrives this long after the step began: after
#: the lease of a step that died has expired (see the module docstring).
SAFETY_DELAY_SECONDS = LEASE_TTL_SECONDS + 2
#: A continuation that finds the node's lease held comes back this much later.
BUSY_RETRY_SECONDS = 5
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


#: How long a rebalance replacement is waited for before draining anyway.
REPLACEMENT_TIMEOUT = timedelta(minutes=10)
#: How often a ``replacing`` termination looks at its replacement.
REPLACEMENT_POLL = timedelta(seconds=15)
#: ... and when a deadline (a spot reclaim, maintenance) bounds the wait: pods move as soon
#: as the replacement is Ready.
DEADLINE_REPLACEMENT_POLL = timedelta(seconds=5)
#: SQS per-message delay bounds.
MAX_DELAY_SECONDS = 900
#: A TERMINATION item not advanced for this long has lost its continuation message.
STALL_AFTER = timedelta(minutes=20)
#: begin_termination waits this long for a running step to release the node's lease.
LEASE_WAIT_SECONDS = 3.0
#: A replacement launch marked this long ago belongs to an invocation that died: the
#: replacement wait stops counting on it and a later event may launch again.
LAUNCH_STALE_AFTER = timedelta(minutes=3)
#: When a replacement is launched, the first drain step is scheduled this soon beforehand,
#: so the drain never depends on the launch finishing (nor on the launching invocation living).
FIRST_STEP_WITHIN = timedelta(seconds=5)
#: How long the launching invocation waits for the node's lease to record its replacement.
RECORD_WAIT_SECONDS = 10.0
#: A step that held the lease this long (wall clock) looks for urgent requests left meanwhile.
SLOW_STEP_SECONDS = 2.0


class TerminationBusy(Exception):
    """Another invocation holds this node's termination lease; retry later."""


class LeaseLost(TerminationBusy):
    """The step's lease expired and another invocation took it: the step stops acting."""


@dataclass(frozen=True, slots=True)
class TerminationResult:
    """What one call did. ``status``: started, updated, replacing, draining, retrying (the
    step failed as a whole and runs again within seconds; ``error`` says why), terminated,
    stale (message for an old generation), unknown (no termination in progress).
    ``failed``: pods whose eviction or deletion failed in this step (retried later)."""

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
        }


# ------------------------------------------------------------------ helpers






def parse_node_pods(raw_pods: Sequence[JsonDict]) -> tuple[list[Pod], dict[str, datetime]]:
    """Domain pods plus, for terminating pods, when their grace ends (deletionTimestamp).

    A pod the snapshot parser rejects (a malformed field the drain does not need) is still
    drained: it is reduced to what draining uses (name, owner, priority class, grace
    period, annotations, tolerations dropped), so one odd pod cannot wedge a termination.
    """
    from joiner.domain.snapshot import SnapshotError, parse_pod

    pods: list[Pod] = []
    deletion_deadlines: dict[str, datetime] = {}
    for raw in raw_pods:
        try:
            pod = parse_pod(raw)
        except SnapshotError:
            pod = _minimal_pod(raw)
        pods.append(pod)
        stamp = parse_aware_time((raw.get("metadata") or {}).get("deletionTimestamp"))
        if stamp is not None:
            deletion_deadlines[pod.key] = stamp
    return pods, deletion_deadlines


def _minimal_pod(raw: JsonDict) -> Pod:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    owners = [ref for ref in meta.get("ownerReferences") or [] if isinstance(ref, dict) and ref.get("controller")]
    grace = spec.get("terminationGracePeriodSeconds")
    raw_annotations = meta.get("annotations")
    annotations: Mapping[str, Any] = raw_annotations if isinstance(raw_annotations, dict) else {}
    return Pod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        annotations={str(k): str(v) for k, v in annotations.items()},
        priority_class_name=str(spec.get("priorityClassName") or ""),
        node_name=spec.get("nodeName") or None,
        owner_kind=str(owners[0].get("kind")) if owners else None,
        owner_name=str(owners[0].get("name")) if owners else None,
        phase=str((raw.get("status") or {}).get("phase") or "Running"),
        deleting=bool(meta.get("deletionTimestamp")),
        termination_grace_seconds=clamp_seconds(grace) if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0 else 30,
    )


def _lease_name(node: str) -> str:
    return f"termination/{node}"


class _Lease:
    """The node's termination lease for the duration of one step (owner unique per step)."""

    def __init__(self, runtime: Runtime, node: str, now: datetime, *, wait_seconds: float = 0.0) -> None:
        self.runtime = runtime
        self.name = _lease_name(node)
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


def _load(runtime: Runtime, node: str) -> TerminationState | None:
    data = runtime.state.get_item(TERMINATION_KIND, node)
    return TerminationState.from_dict(data) if data else None


def _advance(runtime: Runtime, state: TerminationState, now: datetime, at: datetime | None) -> int:
    """Schedule the step of ``state.generation``, then save ``state``. In this order a death
    between the two calls leaves a message whose generation is ahead of the stored one, which
    :func:`continue_termination` runs; the other order would leave a saved generation that no
    message carries, and the step's safety continuation, one generation behind, would be
    dropped as stale (soak seed 73: a drain stopped 105 s before the reclaim)."""
    delay = _schedule(runtime, state, now, at)
    _save_touched(runtime, state, now)
    return delay


def _schedule(runtime: Runtime, state: TerminationState, now: datetime, at: datetime | None) -> int:
    delay = 1 if at is None else math.ceil((at - now).total_seconds())
    delay = max(1, min(MAX_DELAY_SECONDS, delay))
    runtime.queue.send({"kind": CONTINUATION_KIND, "node": state.node, "generation": state.generation}, delay_seconds=delay)
    return delay


def _node_is_cordoned(node: JsonDict) -> bool:
    spec = node.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    tainted = any(t.get("key") == DISRUPTED_TAINT.key and t.get("effect") == DISRUPTED_TAINT.effect for t in spec.get("taints") or [])
    return bool(spec.get("unschedulable")) and tainted and labels.get(EXCLUDE_FROM_LB_LABEL) == "true"


def cordon_node(runtime: Runtime, node: JsonDict | str) -> JsonDict | None:
    """Taint ``joiner.dev/disrupted:NoSchedule``, cordon and exclude from external load
    balancers (no call when already done). Returns the node, None when it does not exist.

    The patch replaces ``spec.taints`` as a whole, so it carries the node's
    ``resourceVersion``: a taint another controller added meanwhile makes the API server
    answer 409 and the node is read again, never silently dropped."""
    for attempt in range(4):
        if isinstance(node, str) or attempt > 0:
            found = runtime.kube.get_node(node if isinstance(node, str) else node["metadata"]["name"])
            if found is None:
                return None
            node = found
        assert not isinstance(node, str)
        if _node_is_cordoned(node):
            return node
        meta = node.get("metadata") or {}
        patch = cordon_patch((node.get("spec") or {}).get("taints") or [])
        if meta.get("resourceVersion"):
            patch["metadata"]["resourceVersion"] = meta["resourceVersion"]
        try:
            return runtime.kube.patch_node(meta["name"], patch)
        except KubernetesError as error:
            if error.status == 404:
                return None
            if error.status != 409:
                raise
    raise KubernetesError(f"node {meta.get('name')}: cordon kept conflicting with other writers", status=409)


def _instance_from_node(node: JsonDict | None) -> str | None:
    if not node:
        return None
    provider = (node.get("spec") or {}).get("providerID") or ""
    tail = provider.rsplit("/", 1)[-1]
    return tail if provider.startswith("aws://") and tail.startswith("i-") else None


# ------------------------------------------------------------------ entry points


def begin_termination(
    runtime: Runtime,
    node_name: str,
    reason: str,
    deadline: datetime | None,
    now: datetime,
    *,
    instance_id: str | None = None,
    claim_id: str | None = None,
    node_pool: str | None = None,
    replacement_claims: Sequence[str] = (),
    wait_for_replacement: bool = False,
    event_id: str | None = None,
    node: JsonDict | None = None,
    claim: ClaimRecord | None = None,
    replace_pods: Callable[[Sequence[JsonDict]], Sequence[str]] | None = None,
    urgent: bool | None = None,
) -> TerminationResult:
    """Start (or tighten) the termination of ``node_name`` and run its first drain step.

    Idempotent: a second call for a node already terminating keeps the earlier deadline
    if it is sooner, records the event, and restarts the step chain (the old chain's
    message becomes stale). ``wait_for_replacement`` with ``replacement_claims`` (or a
    replacement launched here) holds the drain until those claims' nodes are Ready
    (rebalance), or, with a ``deadline``, until the drain must start to end by it
    (:func:`joiner.domain.termination.drain_start_by`: a spot warning's pods keep running
    while their replacement boots and move straight onto it); a later call without it
    starts draining at once. ``urgent`` (default: a deadline and no waiting): the node's
    lease being held leaves the deadline as a request instead of failing.

    ``replace_pods``, when given, is called with the node's pods (raw JSON) unless an
    earlier call already launched a replacement for this node or is launching one now; the
    claim ids it returns are recorded with the termination. The launch can be slow, so it
    runs *outside* the node's lease: the lease is held only to mark the launch
    (``launching_since``, so no second call launches again) and, afterwards, to record its
    claims. Before launching, the first drain step is scheduled :data:`FIRST_STEP_WITHIN`
    ahead: whatever the launch does (and whether or not this invocation lives through it),
    the drain goes on, and another event for the node (a spot warning behind a rebalance)
    takes the lease and drains at once instead of waiting for the launch. ``claim``: the
    node's claim when the caller already read it (saves a read).
    """
    launch_pods: list[JsonDict] | None = None
    lease = _Lease(runtime, node_name, now, wait_seconds=LEASE_WAIT_SECONDS)
    try:
        lease.acquire()
    except TerminationBusy:
        if urgent is None:
            urgent = deadline is not None and not wait_for_replacement
        if deadline is None or not urgent:
            raise
        return _leave_request(
            runtime, node_name, reason, deadline, now, instance_id=instance_id, claim_id=claim_id, node_pool=node_pool, event_id=event_id,
        )
    with lease:
        current = _load(runtime, node_name)
        node = node if node is not None else runtime.kube.get_node(node_name)
        if node is not None:
            node = cordon_node(runtime, node) or node
        instance_id = instance_id or _instance_from_node(node)
        if node is not None:
            labels = (node.get("metadata") or {}).get("labels") or {}
            node_pool = node_pool or labels.get(wk.NODEPOOL)
            claim_id = claim_id or labels.get(wk.NODECLAIM)
        launch = (
            replace_pods is not None and node is not None
            and not (current is not None and (current.replacement_claims or _launching(current, now)))
        )
        waits = bool(wait_for_replacement and (replacement_claims or launch))
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
                replacement_claims=tuple(replacement_claims),
                replacement_deadline=now + REPLACEMENT_TIMEOUT if waits else None,
                events=(event_id,) if event_id else (),
            )
            status = "started"
            if claim_id:
                _mark_claim_terminating(runtime, claim_id, reason, claim if claim is not None and claim.claim_id == claim_id else None, deadline)
            if node is not None:
                _record_event(runtime, node, "Terminating", f"{reason}; " + (f"drain deadline {deadline.isoformat()}" if deadline else "no drain deadline"))
        else:
            state = current.tightened(deadline)
            if event_id and event_id not in state.events:
                state = replace(state, events=(*state.events, event_id))
            if not wait_for_replacement and state.phase == PHASE_REPLACING:
                # e.g. a spot warning after a rebalance recommendation: drain now
                state = replace(state, phase=PHASE_DRAINING, reason=reason)
            state = replace(
                state,
                instance_id=state.instance_id or instance_id,
                claim_id=state.claim_id or claim_id,
                node_pool=state.node_pool or node_pool,
                replacement_claims=tuple(dict.fromkeys((*state.replacement_claims, *replacement_claims))),
            )
            status = "updated"
        if not launch:
            try:
                result = _step(runtime, state, now, lease, node=node)
            except LeaseLost:
                return TerminationResult(node_name, "busy", state.generation, phase=state.phase)
            return replace(result, status=status if result.status in ("draining", "replacing") else result.status)
        launch_pods = runtime.kube.list_pods_on_node(node_name)
        state = replace(state, launching_since=now, generation=state.generation + 1)
        _advance(runtime, state, now, now + FIRST_STEP_WITHIN)

    assert replace_pods is not None
    try:
        launched = tuple(replace_pods(launch_pods))
    except BaseException:
        _record_launch(runtime, node_name, (), now, step=False)
        raise
    result = _record_launch(runtime, node_name, launched, now, step=True, seen=(state.generation, node, launch_pods))
    return replace(result, status=status if result.status in ("draining", "replacing") else result.status)


def request_termination(
    runtime: Runtime, node_name: str, reason: str, deadline: datetime, now: datetime, *,
    instance_id: str | None = None, claim_id: str | None = None, node_pool: str | None = None, event_id: str | None = None,
) -> TerminationResult:
    """Leave ``deadline`` for the node's termination as a durable request and schedule its
    step a second from now, without touching the node or taking its lease: for an urgent
    event whose own attempt failed (a Kubernetes error after the client's retries). The
    step starts or tightens the termination and retries on its own."""
    return _leave_request(runtime, node_name, reason, deadline, now, instance_id=instance_id, claim_id=claim_id, node_pool=node_pool, event_id=event_id)


def _leave_request(
    runtime: Runtime, node_name: str, reason: str, deadline: datetime, now: datetime, *,
    instance_id: str | None, claim_id: str | None, node_pool: str | None, event_id: str | None,
) -> TerminationResult:
    """An urgent event (a deadline, no replacement to wait for) found the node's lease held
    by a slower step: it never waits. It leaves its deadline in ``TERMINATION_REQUEST#<node>``
    (the earliest of all requests kept) and schedules a step one second ahead without a
    generation, so the step runs whatever the chain's generation is. The holder's own step
    also takes the request before it schedules its successor (:func:`_apply_request`);
    whichever comes first applies it. (Only those two look for requests, and the holder only
    when its step was slow: :func:`_take_request_if_slow`.)"""
    existing = runtime.state.get_item(REQUEST_KIND, node_name) or {}
    prior = _parse_time(existing.get("deadline"))
    events = [str(e) for e in existing.get("events") or []]
    if event_id and event_id not in events:
        events.append(event_id)
    runtime.state.put_item(REQUEST_KIND, node_name, {
        "node": node_name,
        "reason": reason,
        "deadline": (min(deadline, prior) if prior is not None else deadline).isoformat(),
        "instanceId": existing.get("instanceId") or instance_id,
        "claimId": existing.get("claimId") or claim_id,
        "nodePool": existing.get("nodePool") or node_pool,
        "events": events,
        "requestedAt": now.isoformat(),
    }, expires_at=now + timedelta(days=1))
    runtime.queue.send({"kind": CONTINUATION_KIND, "node": node_name}, delay_seconds=1)
    runtime.count("TerminationRequestsQueued")
    logger.info("termination request left for the next step", extra={"node": node_name, "deadline": deadline.isoformat(), "event_id": event_id})
    return TerminationResult(node_name, "queued", next_step_in=1)


def _parse_time(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _apply_request(runtime: Runtime, state: TerminationState, now: datetime) -> TerminationState:
    """``state`` with the node's pending request (if any) applied and saved, the request
    deleted: the earlier deadline, the request's events. Returns
    ``state`` itself when there is none."""
    request = runtime.state.get_item(REQUEST_KIND, state.node)
    if not request:
        return state
    # A replacing termination keeps waiting for its replacement: the tighter deadline moves
    # its drain-start time (drain_start_by) earlier.
    merged = state.tightened(_parse_time(request.get("deadline")))
    merged = replace(
        merged,
        reason=str(request.get("reason") or merged.reason),
        events=tuple(dict.fromkeys((*merged.events, *(str(e) for e in request.get("events") or [])))),
        instance_id=merged.instance_id or request.get("instanceId") or None,
        claim_id=merged.claim_id or request.get("claimId") or None,
        node_pool=merged.node_pool or request.get("nodePool") or None,
    )
    _save_touched(runtime, merged, now)
    runtime.state.delete_item(REQUEST_KIND, state.node)
    return merged


def _take_request_if_slow(runtime: Runtime, state: TerminationState, now: datetime, began: float) -> TerminationState:
    """:func:`_apply_request` at the end of a step that held the lease for at least
    :data:`SLOW_STEP_SECONDS` (wall clock). A quicker step needs no look: a request left
    during it has its own step, which arrives a second later and waits up to
    :data:`LEASE_WAIT_SECONDS` for the lease, so it starts after this step ends."""
    if time.monotonic() - began < SLOW_STEP_SECONDS:
        return state
    return _apply_request(runtime, state, now)


def _state_from_request(runtime: Runtime, node_name: str, now: datetime) -> TerminationState | None:
    """A termination to start from a request alone (the invocation that held the lease while
    the request was left died before it saved the termination)."""
    request = runtime.state.get_item(REQUEST_KIND, node_name)
    if not request:
        return None
    state = TerminationState(node=node_name, reason=str(request.get("reason") or "requested"), started_at=now, deadline=_parse_time(request.get("deadline")))
    claim_id = request.get("claimId")
    if isinstance(claim_id, str) and claim_id:
        _mark_claim_terminating(runtime, claim_id, state.reason)
    return state


def _launching(state: TerminationState, now: datetime) -> bool:
    """A replacement launch for this node is under way in a live invocation."""
    return state.launching_since is not None and now - state.launching_since < LAUNCH_STALE_AFTER


def _record_launch(
    runtime: Runtime, node_name: str, claims: Sequence[str], now: datetime, *, step: bool,
    seen: tuple[int, JsonDict | None, Sequence[JsonDict] | None] = (-1, None, None),
) -> TerminationResult:
    """Under the node's lease again: record the replacement ``claims`` launched outside it,
    clear the launch mark, and (``step``) run a drain step at once (the first one, unless
    the scheduled one or another event's ran meanwhile; its message then goes stale).
    ``seen``: (generation, Node, pods) as read before the launch; when no step ran
    meanwhile (same generation), the step uses them instead of reading them again, as it
    would have without the launch."""
    now = max(now, runtime.clock.now())
    with _Lease(runtime, node_name, now, wait_seconds=RECORD_WAIT_SECONDS) as lease:
        state = _load(runtime, node_name)
        if state is None:
            # Finished while the replacement launched (the node emptied, or its deadline
            # passed): the claims stand on their own; the pods went pending.
            return TerminationResult(node_name, "terminated", phase="terminated")
        state = replace(
            state,
            launching_since=None,
            replacement_claims=tuple(dict.fromkeys((*state.replacement_claims, *claims))),
        )
        _save_touched(runtime, state, now)
        if not step:
            return TerminationResult(node_name, "updated", state.generation, phase=state.phase)
        generation, node, pods_raw = seen
        if generation != state.generation:
            node, pods_raw = None, None
        try:
            return _step(runtime, state, now, lease, node=node, pods_raw=pods_raw, stored=True)
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
    lease = _Lease(runtime, node_name, now, wait_seconds=LEASE_WAIT_SECONDS if generation is None else 0.0)
    try:
        lease.acquire()
    except TerminationBusy:
        return _busy(runtime, node_name, generation)
    with lease:
        state = _load(runtime, node_name)
        stored = state is not None
        if state is None:
            state = _state_from_request(runtime, node_name, now)
            if state is None:
                return TerminationResult(node_name, "unknown")
        if generation is not None and generation < state.generation:
            return TerminationResult(node_name, "stale", generation=state.generation, phase=state.phase)
        # generation > stored: the step that scheduled this message died before saving
        # (see _advance); its state is the stored one, and this message carries the chain on.
        if generation is None:
            state = _apply_request(runtime, state, now)  # an urgent event's request (see _leave_request); saved if any
        try:
            return _step(runtime, state, now, lease, stored=stored)
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
            _schedule(runtime, state, now, now)
            resumed.append(state.node)
    return sorted(resumed)


def _parse_updated(data: Mapping[str, Any]) -> datetime | None:
    value = data.get("updatedAt")
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


# ------------------------------------------------------------------ one step


def _step(
    runtime: Runtime, state: TerminationState, now: datetime, lease: _Lease, *,
    node: JsonDict | None = None, pods_raw: Sequence[JsonDict] | None = None, stored: bool = False,
) -> TerminationResult:
    """One drain step under ``lease``: decide, act, save, schedule or finish.

    A step never ends without its successor scheduled (or the termination finished), even
    when the invocation dies inside it: before acting, it saves ``state`` (unless
    ``stored``: already saved as it is) and sends its safety continuation (see the module
    docstring). A Kubernetes or EC2 failure beyond the clients' retries fails the step as a
    whole, and :func:`_retry_soon` schedules the next one within seconds. A pod whose
    eviction or deletion fails fails alone (:func:`_execute`). Raises :class:`LeaseLost`
    when the lease could not be renewed."""
    if not stored:
        _save_touched(runtime, state, now)
    runtime.queue.send({"kind": CONTINUATION_KIND, "node": state.node, "generation": state.generation}, delay_seconds=SAFETY_DELAY_SECONDS)
    try:
        return _run_step(runtime, state, now, lease, node=node, pods_raw=pods_raw)
    except (KubernetesError, Ec2Error) as error:
        return _retry_soon(runtime, state, now, error)


def _retry_soon(runtime: Runtime, state: TerminationState, now: datetime, error: Exception) -> TerminationResult:
    """Save the state (as the failed step left it, or as it came) with the next generation
    and schedule that generation after :func:`step_retry_delay`."""
    stored = _load(runtime, state.node)
    if stored is not None and stored.generation > state.generation:
        state = stored
    failures = state.step_failures + 1
    state = replace(state, generation=state.generation + 1, step_failures=failures)
    wake = now + step_retry_delay(failures, now, state.deadline)
    if state.deadline is not None and state.deadline > now:
        wake = min(wake, state.deadline)
    delay = _advance(runtime, state, now, wake)
    runtime.count("TerminationStepFailed")
    text = f"{type(error).__name__}: {error}"
    logger.warning("termination step failed; retrying soon", extra={"node": state.node, "error": text, "failures": failures, "next_step_in": delay})
    return TerminationResult(state.node, "retrying", state.generation, next_step_in=delay, phase=state.phase, error=text)


def _run_step(
    runtime: Runtime, state: TerminationState, now: datetime, lease: _Lease, *, node: JsonDict | None = None, pods_raw: Sequence[JsonDict] | None = None,
) -> TerminationResult:
    """The step itself; ``node`` and ``pods_raw``: the Node and its pods when the caller has
    just read them."""
    began = time.monotonic()
    if node is None:
        node = runtime.kube.get_node(state.node)
    if node is None:
        return _finish(runtime, state, now, node_exists=False, why="node no longer exists")
    cordon_failure: KubernetesError | None = None
    if (node.get("metadata") or {}).get("deletionTimestamp") is None:
        try:
            node = cordon_node(runtime, node) or node
        except KubernetesError as error:
            # Evicted pods could land on the node again: no evictions this step, but the
            # deadline rule's deletions go ahead, and the step is retried soon.
            cordon_failure = error

    if state.phase == PHASE_REPLACING:
        if cordon_failure is not None:
            raise cordon_failure
        drain_by: datetime | None = None
        if state.deadline is not None:
            pods_raw = pods_raw if pods_raw is not None else runtime.kube.list_pods_on_node(state.node)
            drain_by = drain_start_by(parse_node_pods(pods_raw)[0], state.deadline)
        ready, why = _replacement_ready(runtime, state, now)  # first: Ready at the drain-by time is Ready
        if not ready and drain_by is not None and now >= drain_by:
            ready, why = True, "not Ready in time: the drain starts now to end by the deadline"
        if not ready:
            requested = _take_request_if_slow(runtime, state, now, began)  # a tighter deadline meanwhile
            state = replace(requested, generation=state.generation + 1, step_failures=0)
            wake = now + (REPLACEMENT_POLL if state.deadline is None else DEADLINE_REPLACEMENT_POLL)
            if drain_by is not None:
                wake = min(wake, drain_by)
            if state.deadline is not None:
                wake = min(wake, state.deadline)
            delay = _advance(runtime, state, now, wake)
            return TerminationResult(state.node, "replacing", state.generation, next_step_in=delay, phase=state.phase, waiting=(("replacement", why),))
        state = replace(state, phase=PHASE_DRAINING)
        _record_event(runtime, node, "DrainStarted", f"replacement {why}; draining")

    pods, deletion_deadlines = parse_node_pods(pods_raw if pods_raw is not None else runtime.kube.list_pods_on_node(state.node))
    progress = dict(state.progress)
    evicted: list[str] = []
    blocked: list[str] = []
    deleted: list[str] = []
    failed: list[str] = []
    # Act, then re-plan on what the actions imply (evicted pods terminating, DaemonSet
    # groups cleared by their evictions): the next group may start in the same step, and
    # the next check time reflects the new backoffs. What failed is not tried again
    # within the step.
    rounds = len(GROUPS) + 1
    for attempt in range(rounds + 1):
        step = plan_drain(pods, now=now, deadline=state.deadline, progress=progress, deletion_deadlines=deletion_deadlines)
        evict = () if cordon_failure is not None else tuple(p for p in step.evict if p.key not in failed)
        delete = tuple(d for d in step.delete if d.key not in failed)
        if not (evict or delete) or attempt == rounds:
            break
        progress, done = _execute(runtime, evict, delete, progress, now, lease.keep)
        evicted += done["evicted"]
        blocked += done["blocked"]
        deleted += done["deleted"]
        failed += done["failed"]
        if step.finished:
            break
        pods, deletion_deadlines = _assume_applied(pods, deletion_deadlines, done, delete, now)
    present = {p.key for p in pods} | set(deleted) | set(evicted)
    state = replace(state, progress={key: value for key, value in progress.items() if key in present})
    evicted_t, blocked_t, deleted_t, failed_t = tuple(evicted), tuple(dict.fromkeys(blocked)), tuple(deleted), tuple(dict.fromkeys(failed))

    if step.finished:
        why = "node is empty" if step.empty else "drain deadline reached"
        node_uid = str((node.get("metadata") or {}).get("uid") or "") or None
        return _finish(runtime, state, now, node_exists=True, node_uid=node_uid, why=why, evicted=evicted_t, blocked=blocked_t, deleted=deleted_t, failed=failed_t)
    if cordon_failure is not None:
        return replace(_retry_soon(runtime, state, now, cordon_failure), evicted=evicted_t, blocked=blocked_t, deleted=deleted_t, failed=failed_t)

    # An urgent event may have left a request while this step held the lease: the next
    # step, a second from now, plans with it.
    requested = _take_request_if_slow(runtime, state, now, began)
    next_at = None if requested is not state else step.next_check_at
    state = replace(requested, generation=state.generation + 1, step_failures=0)
    delay = _advance(runtime, state, now, next_at)
    return TerminationResult(
        state.node, "draining", state.generation, evicted=evicted_t, blocked=blocked_t, deleted=deleted_t,
        waiting=step.waiting, next_step_in=delay, phase=state.phase, failed=failed_t,
    )


def _save_touched(runtime: Runtime, state: TerminationState, now: datetime) -> None:
    data = state.to_dict()
    data["updatedAt"] = now.isoformat()
    runtime.state.put_item(TERMINATION_KIND, state.node, data)


def _execute(
    runtime: Runtime, evict: Sequence[Pod], delete: Sequence[PodDeletion], progress: Mapping[str, PodProgress], now: datetime,
    keep_lease: Callable[[], None],
) -> tuple[dict[str, PodProgress], dict[str, list[str]]]:
    """Evict and delete, one pod at a time: a pod whose call fails (after the client's
    retries) is recorded as ``failed`` and the others go ahead. A failed eviction backs off
    (:func:`record_eviction`); a failed deletion is planned again by the next step."""
    progress = dict(progress)
    done: dict[str, list[str]] = {"evicted": [], "blocked": [], "gone": [], "deleted": [], "failed": []}
    for pod in evict:
        keep_lease()
        try:
            outcome = runtime.kube.evict_pod(pod.namespace, pod.name)
        except KubernetesError as error:
            progress[pod.key] = record_eviction(progress.get(pod.key), "failed", now, error=_error_text(error))
            done["failed"].append(pod.key)
            logger.warning("eviction failed; retrying later", extra={"pod": pod.key, "status": error.status, "error": str(error)})
            continue
        progress[pod.key] = record_eviction(progress.get(pod.key), outcome.status, now)
        done[outcome.status if outcome.status in ("blocked", "gone") else "evicted"].append(pod.key)
    for deletion in delete:
        keep_lease()
        try:
            runtime.kube.delete_pod(deletion.namespace, deletion.name, grace_seconds=deletion.grace_seconds)
        except KubernetesError as error:
            done["failed"].append(deletion.key)
            logger.warning("pod deletion at the deadline failed; retrying next step", extra={"pod": deletion.key, "status": error.status, "error": str(error)})
            continue
        progress[deletion.key] = record_deletion(progress.get(deletion.key), deletion.grace_seconds, now)
        done["deleted"].append(deletion.key)
    if done["evicted"]:
        runtime.count("PodsEvicted", len(done["evicted"]))
    if done["blocked"]:
        runtime.count("EvictionsBlocked", len(done["blocked"]))
    if done["deleted"]:
        runtime.count("PodsDeletedAtDeadline", len(done["deleted"]))
    failed_evictions = len(set(done["failed"]) & {p.key for p in evict})
    if failed_evictions:
        runtime.count("EvictionsFailed", failed_evictions)
    if len(done["failed"]) > failed_evictions:
        runtime.count("PodDeletionsFailed", len(done["failed"]) - failed_evictions)
    return progress, done


def _error_text(error: KubernetesError) -> str:
    return f"HTTP {error.status}" if error.status else type(error).__name__


def _assume_applied(
    pods: Sequence[Pod], deletion_deadlines: Mapping[str, datetime], done: Mapping[str, list[str]], delete: Sequence[PodDeletion], now: datetime,
) -> tuple[list[Pod], dict[str, datetime]]:
    """The pods as the actions just taken leave them: evicted ones terminating with their
    own grace, deleted ones terminating with the grace given (gone when 0), gone ones gone."""
    applied = set(done["deleted"])
    graces = {d.key: d.grace_seconds for d in delete if d.key in applied}
    evicted = set(done["evicted"])
    gone = set(done["gone"]) | {key for key, grace in graces.items() if grace <= 0}
    deadlines = dict(deletion_deadlines)
    result = []
    for pod in pods:
        if pod.key in gone:
            continue
        if pod.key in evicted or pod.key in graces:
            grace = graces.get(pod.key, pod.termination_grace_seconds)
            ends = now + timedelta(seconds=grace)
            deadlines[pod.key] = min(ends, deadlines.get(pod.key, ends))
            pod = replace(pod, deleting=True)
        result.append(pod)
    return result, deadlines


def _replacement_ready(runtime: Runtime, state: TerminationState, now: datetime) -> tuple[bool, str]:
    """(ready to drain, why). Ready when every replacement claim's node is Ready; also when
    a replacement failed (closed claim) or the wait timed out: the pods then go pending
    and the scanner provisions for them."""
    if state.replacement_deadline is not None and now >= state.replacement_deadline:
        return True, "wait timed out"
    if state.deadline is not None and now >= state.deadline:
        return True, "drain deadline reached"
    if _launching(state, now):
        return False, "launching the replacement"
    claims = [runtime.state.get_claim(claim_id) for claim_id in state.replacement_claims]
    if any(claim is None or claim.state == ClaimState.CLOSED for claim in claims):
        return True, "launch failed"
    pending = [claim.claim_id for claim in claims if claim is not None and claim.state != ClaimState.INITIALIZED]
    if pending:
        ready_nodes = _ready_claim_nodes(runtime, pending)
        pending = [claim_id for claim_id in pending if claim_id not in ready_nodes]
    if pending:
        return False, "waiting for " + ", ".join(sorted(pending))
    return True, "ready"


def _ready_claim_nodes(runtime: Runtime, claim_ids: Sequence[str]) -> set[str]:
    """The claims among ``claim_ids`` whose Node is Ready, each looked up by its label (a
    replacement has one or two claims: never a list of every Node)."""
    ready: set[str] = set()
    for claim_id in sorted(set(claim_ids)):
        for node in runtime.kube.iter_nodes(label_selector=f"{wk.NODECLAIM}={claim_id}"):
            conditions = (node.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                ready.add(claim_id)
    return ready



def _finish(
    runtime: Runtime, state: TerminationState, now: datetime, *, node_exists: bool, why: str, node_uid: str | None = None,
    evicted: tuple[str, ...] = (), blocked: tuple[str, ...] = (), deleted: tuple[str, ...] = (), failed: tuple[str, ...] = (),
) -> TerminationResult:
    """Terminate the instance, then delete the Node (so the kubelet, already shutting
    down, cannot register it again), close the claim, release its reservation, forget the
    termination. ``node_uid``: the uid of the Node drained; the deletion is conditional on
    it, so a Node re-created under the same name (a reused private DNS name) is left alone."""
    if state.instance_id:
        # A last check: every path that begins a termination has confirmed ownership.
        terminate_instance(runtime, state.instance_id, path="termination", node=state.node)
    if node_exists:
        try:
            # Joiner's own finalizer (delete to drain) goes with the instance: the Node then goes.
            runtime.kube.set_node_finalizer(state.node, TERMINATION_FINALIZER, False)
            if not runtime.kube.delete_node(state.node, uid=node_uid):
                logger.warning("node not deleted: re-created under the same name", extra={"node": state.node, "uid": node_uid})
        except KubernetesError as error:
            if error.status != 404:
                raise
    if state.claim_id:
        claim = runtime.state.get_claim(state.claim_id)
        reason = state.reason or (claim.reason if claim is not None else "") or "terminated"
        outcome = close_claim(runtime, claim or state.claim_id, reason, now, path="termination", node_pool=state.node_pool or "", terminate=False)
        if not outcome.closed_now:
            mirror_claim(runtime, outcome.claim)
    runtime.state.delete_item(TERMINATION_KIND, state.node)
    runtime.count("NodesTerminated", 1, reason=state.reason or "unknown")
    runtime.count("TerminationSeconds", max(0.0, (now - state.started_at).total_seconds()), "Seconds")
    logger.info("node terminated", extra={"node": state.node, "instance": state.instance_id, "why": why, "reason": state.reason})
    return TerminationResult(state.node, "terminated", state.generation, evicted=evicted, blocked=blocked, deleted=deleted, phase="terminated", failed=failed)


def _mark_claim_terminating(runtime: Runtime, claim_id: str, reason: str, claim: ClaimRecord | None = None, deadline: datetime | None = None) -> None:
    claim = claim or runtime.state.get_claim(claim_id)
    if claim is not None and claim.state not in (ClaimState.TERMINATING, ClaimState.CLOSED):
        try:
            marked = advance(runtime, claim_id, ClaimState.TERMINATING, reason=reason)
        except ClaimStateConflict as conflict:  # closed or marked concurrently: theirs stands
            logger.info("claim moved on before it was marked terminating", extra={"claim": claim_id, "state": str(conflict.current.state)})
            return
        mirror_claim(runtime, marked, condition=disrupting_condition(reason, deadline=deadline))


def _record_event(runtime: Runtime, node: JsonDict, reason: str, message: str) -> None:
    involved = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": node["metadata"]["name"], "uid": (node.get("metadata") or {}).get("uid", "")}}
    try:
        runtime.kube.create_event(involved, reason, message)
    except KubernetesError:
        pass  # an Event is an explanation, never a reason to fail the termination

