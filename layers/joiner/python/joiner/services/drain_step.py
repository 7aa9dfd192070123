"""One drain step of a termination, run under the node's lease.

Each step evicts (or, near the deadline, deletes) what
:func:`joiner.domain.termination.plan_drain` says, saves progress, and either schedules the
next step or, once the node is empty or out of time, terminates the instance, deletes the
Node, closes the claim and releases its limit reservation (:func:`finish`).

Failures never strand pods: a pod whose eviction or deletion fails (500 for a pod two
PodDisruptionBudgets select, 403, 5xx after the client's retries) fails alone and is retried
on the eviction backoff; a step that fails as a whole saves its state and schedules its own
retry within seconds (:func:`retry_soon`), never waiting for the work queue's visibility
timeout; the deadline rule's deletions run whatever the evictions did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from joiner.domain import labels as wk
from joiner.domain.model import Pod
from joiner.domain.node_pods import parse_node_pods
from joiner.domain.nodeclaims import TERMINATION_FINALIZER
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
from joiner.ports import ClaimState, Ec2Error, JsonDict, KubernetesError
from joiner.services.lifecycle import close_claim, terminate_instance
from joiner.services.nodeclaims import mirror_claim
from joiner.services.termination_store import (
    CONTINUATION_KIND,
    SAFETY_DELAY_SECONDS,
    TERMINATION_KIND,
    TerminationLease,
    TerminationResult,
    load_state,
    save_state,
    schedule_then_save,
    take_request_if_slow,
)

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = [
    "DEADLINE_REPLACEMENT_POLL",
    "LAUNCH_STALE_AFTER",
    "REPLACEMENT_POLL",
    "assume_applied",
    "cordon_node",
    "finish",
    "launching",
    "record_node_event",
    "retry_soon",
    "run_step",
    "step",
]

#: How often a ``replacing`` termination looks at its replacement.
REPLACEMENT_POLL = timedelta(seconds=15)
#: ... and when a deadline (a spot reclaim, maintenance) bounds the wait: pods move as soon
#: as the replacement is Ready.
DEADLINE_REPLACEMENT_POLL = timedelta(seconds=5)
#: A replacement launch marked this long ago belongs to an invocation that died: the
#: replacement wait stops counting on it and a later event may launch again.
LAUNCH_STALE_AFTER = timedelta(minutes=3)


def step(
    runtime: Runtime,
    state: TerminationState,
    now: datetime,
    lease: TerminationLease,
    *,
    node: JsonDict | None = None,
    pods_raw: Sequence[JsonDict] | None = None,
    stored: bool = False,
) -> TerminationResult:
    """One drain step under ``lease``: decide, act, save, schedule or finish.

    A step never ends without its successor scheduled (or the termination finished), even
    when the invocation dies inside it: before acting, it saves ``state`` (unless
    ``stored``: already saved as it is) and sends its safety continuation (see
    :mod:`joiner.services.termination_store`). A Kubernetes or EC2 failure beyond the
    clients' retries fails the step as a whole, and :func:`retry_soon` schedules the next
    one within seconds. A pod whose eviction or deletion fails fails alone
    (:func:`_execute`). Raises :class:`~joiner.services.termination_store.LeaseLost` when
    the lease could not be renewed."""
    if not stored:
        save_state(runtime, state, now)
    runtime.queue.send({"kind": CONTINUATION_KIND, "node": state.node, "generation": state.generation}, delay_seconds=SAFETY_DELAY_SECONDS)
    try:
        return run_step(runtime, state, now, lease, node=node, pods_raw=pods_raw)
    except (KubernetesError, Ec2Error) as error:
        return retry_soon(runtime, state, now, error)


def retry_soon(runtime: Runtime, state: TerminationState, now: datetime, error: Exception) -> TerminationResult:
    """Save the state (as the failed step left it, or as it came) with the next generation
    and schedule that generation after :func:`~joiner.domain.termination.step_retry_delay`."""
    stored = load_state(runtime, state.node)
    if stored is not None and stored.generation > state.generation:
        state = stored
    failures = state.step_failures + 1
    state = replace(state, generation=state.generation + 1, step_failures=failures)
    wake = now + step_retry_delay(failures, now, state.deadline)
    if state.deadline is not None and state.deadline > now:
        wake = min(wake, state.deadline)
    delay = schedule_then_save(runtime, state, now, wake)
    runtime.count("TerminationStepFailed")
    text = f"{type(error).__name__}: {error}"
    logger.warning("termination step failed; retrying soon", extra={"node": state.node, "error": text, "failures": failures, "next_step_in": delay})
    return TerminationResult(state.node, "retrying", state.generation, next_step_in=delay, phase=state.phase, error=text)


def run_step(
    runtime: Runtime,
    state: TerminationState,
    now: datetime,
    lease: TerminationLease,
    *,
    node: JsonDict | None = None,
    pods_raw: Sequence[JsonDict] | None = None,
) -> TerminationResult:
    """The step itself; ``node`` and ``pods_raw``: the Node and its pods when the caller has
    just read them."""
    began = time.monotonic()
    if node is None:
        node = runtime.kube.get_node(state.node)
    if node is None:
        return finish(runtime, state, now, node_exists=False, why="node no longer exists")
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
            requested = take_request_if_slow(runtime, state, now, began)  # a tighter deadline meanwhile
            state = replace(requested, generation=state.generation + 1, step_failures=0)
            wake = now + (REPLACEMENT_POLL if state.deadline is None else DEADLINE_REPLACEMENT_POLL)
            if drain_by is not None:
                wake = min(wake, drain_by)
            if state.deadline is not None:
                wake = min(wake, state.deadline)
            delay = schedule_then_save(runtime, state, now, wake)
            return TerminationResult(state.node, "replacing", state.generation, next_step_in=delay, phase=state.phase, waiting=(("replacement", why),))
        state = replace(state, phase=PHASE_DRAINING)
        record_node_event(runtime, node, "DrainStarted", f"replacement {why}; draining")

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
        planned = plan_drain(pods, now=now, deadline=state.deadline, progress=progress, deletion_deadlines=deletion_deadlines)
        evict = () if cordon_failure is not None else tuple(p for p in planned.evict if p.key not in failed)
        delete = tuple(d for d in planned.delete if d.key not in failed)
        if not (evict or delete) or attempt == rounds:
            break
        progress, done = _execute(runtime, evict, delete, progress, now, lease.keep)
        evicted += done["evicted"]
        blocked += done["blocked"]
        deleted += done["deleted"]
        failed += done["failed"]
        if planned.finished:
            break
        pods, deletion_deadlines = assume_applied(pods, deletion_deadlines, done, delete, now)
    present = {p.key for p in pods} | set(deleted) | set(evicted)
    state = replace(state, progress={key: value for key, value in progress.items() if key in present})
    evicted_t, blocked_t, deleted_t, failed_t = tuple(evicted), tuple(dict.fromkeys(blocked)), tuple(deleted), tuple(dict.fromkeys(failed))

    if planned.finished:
        why = "node is empty" if planned.empty else "drain deadline reached"
        node_uid = str((node.get("metadata") or {}).get("uid") or "") or None
        return finish(
            runtime, state, now, node_exists=True, node_uid=node_uid, why=why, evicted=evicted_t, blocked=blocked_t, deleted=deleted_t, failed=failed_t
        )
    if cordon_failure is not None:
        return replace(retry_soon(runtime, state, now, cordon_failure), evicted=evicted_t, blocked=blocked_t, deleted=deleted_t, failed=failed_t)

    # An urgent event may have left a request while this step held the lease: the next
    # step, a second from now, plans with it.
    requested = take_request_if_slow(runtime, state, now, began)
    next_at = None if requested is not state else planned.next_check_at
    state = replace(requested, generation=state.generation + 1, step_failures=0)
    delay = schedule_then_save(runtime, state, now, next_at)
    return TerminationResult(
        state.node,
        "draining",
        state.generation,
        evicted=evicted_t,
        blocked=blocked_t,
        deleted=deleted_t,
        waiting=planned.waiting,
        next_step_in=delay,
        phase=state.phase,
        failed=failed_t,
    )


def _execute(
    runtime: Runtime,
    evict: Sequence[Pod],
    delete: Sequence[PodDeletion],
    progress: Mapping[str, PodProgress],
    now: datetime,
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


def assume_applied(
    pods: Sequence[Pod],
    deletion_deadlines: Mapping[str, datetime],
    done: Mapping[str, list[str]],
    delete: Sequence[PodDeletion],
    now: datetime,
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


# ------------------------------------------------------------------ the replacement wait


def launching(state: TerminationState, now: datetime) -> bool:
    """A replacement launch for this node is under way in a live invocation."""
    return state.launching_since is not None and now - state.launching_since < LAUNCH_STALE_AFTER


def _replacement_ready(runtime: Runtime, state: TerminationState, now: datetime) -> tuple[bool, str]:
    """(ready to drain, why). Ready when every replacement claim's node is Ready; also when
    a replacement failed (closed claim) or the wait timed out: the pods then go pending
    and the scanner provisions for them."""
    if state.replacement_deadline is not None and now >= state.replacement_deadline:
        return True, "wait timed out"
    if state.deadline is not None and now >= state.deadline:
        return True, "drain deadline reached"
    if launching(state, now):
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


# ------------------------------------------------------------------ the node


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


def record_node_event(runtime: Runtime, node: JsonDict, reason: str, message: str) -> None:
    """A Kubernetes Event on the Node; one that cannot be written is dropped."""
    involved = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": node["metadata"]["name"], "uid": (node.get("metadata") or {}).get("uid", "")}}
    try:
        runtime.kube.create_event(involved, reason, message)
    except KubernetesError:
        pass  # an Event is an explanation, never a reason to fail the termination


# ------------------------------------------------------------------ the end


def finish(
    runtime: Runtime,
    state: TerminationState,
    now: datetime,
    *,
    node_exists: bool,
    why: str,
    node_uid: str | None = None,
    evicted: tuple[str, ...] = (),
    blocked: tuple[str, ...] = (),
    deleted: tuple[str, ...] = (),
    failed: tuple[str, ...] = (),
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
