"""Drain planning for a node being terminated: which pods to evict next, which to delete
because the deadline is near, and when the node counts as empty.

The rules (Karpenter's terminator, made explicit):

* **Skipped**: mirror (static) pods, terminal pods (Succeeded/Failed) and pods that
  tolerate the ``joiner.dev/disrupted:NoSchedule`` taint (they would only come back).
* **Order**: four groups, each started only once the previous is clear: non-critical
  pods, non-critical DaemonSet pods, critical pods, critical DaemonSet pods (critical =
  ``priorityClassName`` ``system-cluster-critical`` or ``system-node-critical``). A group
  is clear when its pods are gone; DaemonSet pods only need to have been asked to leave
  (they die with the instance, nothing waits for them to reschedule).
* **Eviction** goes through the Eviction API so PodDisruptionBudgets hold. A blocked
  eviction (HTTP 429) is retried after a backoff: 5 s, 10 s, 20 s, 40 s, then every 60 s.
  A failed eviction (any other error: 500 for a pod two PodDisruptionBudgets select, 403,
  5xx after the client's retries) is that pod's alone: it is retried on the same backoff
  and holds the drain exactly as a blocked one does, never the other pods.
* **do-not-disrupt** (``joiner.dev/do-not-disrupt`` or ``karpenter.sh/do-not-disrupt``)
  pods are not evicted; they hold the drain until the deadline.
* **Deadline rule**: with a deadline ``D`` (spot notice, scheduled change start,
  NodePool ``terminationGracePeriod``), a pod still on the node is deleted (not evicted:
  PDBs and do-not-disrupt no longer hold) once ``now >= D - terminationGracePeriodSeconds
  - 2 s`` (the slack absorbs a step arriving slightly late), with grace period
  ``min(terminationGracePeriodSeconds, D - now)`` rounded down to whole seconds. Its shutdown therefore always ends by ``D``: pods with short grace periods get
  their full grace and are deleted as late as possible, pods with grace periods longer
  than the time left get exactly the time left. A pod already terminating whose grace
  ends after ``D`` is deleted again with the shorter grace (the API server only ever
  shortens a grace period). The rule depends on nothing the evictions did: a pod whose
  evictions all failed is deleted on time like any other.
* **Done**: the node is empty when every group is clear; at or after ``D`` the node is
  terminated whatever is left.

Pure: times are passed in; durable per-pod progress is a plain JSON-able record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.model import Pod, Taint

__all__ = [
    "DRAIN_MARGIN",
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "DELETE_SLACK",
    "DISRUPTED_TAINT",
    "ERROR_LIMIT",
    "EXCLUDE_FROM_LB_LABEL",
    "GROUPS",
    "IDLE_POLL_INTERVAL",
    "NEAR_DEADLINE",
    "PHASE_DRAINING",
    "PHASE_REPLACING",
    "POLL_INTERVAL",
    "DrainStep",
    "PodDeletion",
    "PodProgress",
    "TerminationState",
    "backoff",
    "cordon_patch",
    "drain_group",
    "drain_start_by",
    "fitting_grace",
    "is_drainable",
    "plan_drain",
    "record_deletion",
    "record_eviction",
    "reschedulable_pods",
    "step_retry_delay",
]

DISRUPTED_TAINT = Taint(wk.DISRUPTED_TAINT_KEY, "", "NoSchedule")
EXCLUDE_FROM_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"

#: Drain groups in eviction order.
GROUPS = ("non-critical", "non-critical-daemonset", "critical", "critical-daemonset")

BACKOFF_BASE = timedelta(seconds=5)
BACKOFF_MAX = timedelta(seconds=60)
#: How soon to look again while pods are terminating or evictions were just issued.
POLL_INTERVAL = timedelta(seconds=5)
#: How soon to look again when only waiting (do-not-disrupt, no deadline).
IDLE_POLL_INTERVAL = timedelta(seconds=30)
#: A pod's deletion window opens this much before ``deadline - grace``, so that a step
#: arriving a little late (SQS delivery, a cold start) still leaves the pod its full grace.
DELETE_SLACK = timedelta(seconds=2)


def drain_group(pod: Pod) -> int:
    """Index into :data:`GROUPS`."""
    return (2 if pod.is_critical else 0) + (1 if pod.is_daemonset_pod else 0)


def is_drainable(pod: Pod, taint: Taint = DISRUPTED_TAINT) -> bool:
    """Whether the drain must move this pod: not mirror, not terminal, not tolerating the taint."""
    if pod.is_mirror or pod.is_terminal:
        return False
    return not any(toleration.tolerates(taint) for toleration in pod.tolerations)


def reschedulable_pods(pods: Iterable[Pod]) -> tuple[Pod, ...]:
    """Pods that need a new home when their node goes: not DaemonSet, mirror, terminal or
    already deleting. Returned as pending pods (unbound), sorted by key."""
    result = [replace(pod, node_name=None, phase="Pending") for pod in pods if not (pod.is_daemonset_pod or pod.is_mirror or pod.is_terminal or pod.deleting)]
    return tuple(sorted(result, key=lambda p: p.key))


def backoff(blocked_attempts: int) -> timedelta:
    """Delay before retrying an eviction that has been blocked ``blocked_attempts`` times (>= 1)."""
    exponent = max(0, blocked_attempts - 1)
    if exponent >= 8:
        return BACKOFF_MAX
    return min(BACKOFF_BASE * (1 << exponent), BACKOFF_MAX)


#: While a deadline is this near, a step that failed as a whole is retried every :data:`POLL_INTERVAL`.
NEAR_DEADLINE = timedelta(minutes=15)


def step_retry_delay(failures: int, now: datetime, deadline: datetime | None) -> timedelta:
    """How soon to run a step again after ``failures`` consecutive steps failed as a whole
    (the Kubernetes API or EC2 failing beyond the clients' retries): :func:`backoff`, but
    at most :data:`POLL_INTERVAL` while a deadline is near, so a deletion window of the
    deadline rule is never missed by more than that."""
    delay = backoff(max(1, failures))
    if deadline is not None and deadline - now <= NEAR_DEADLINE:
        delay = min(delay, POLL_INTERVAL)
    return delay


#: A replace-first drain with a deadline starts evicting this long before the last moment
#: at which the longest grace period on the node still ends by the deadline: room for
#: PodDisruptionBudget retries and the deadline rule, should the evictions meet them.
DRAIN_MARGIN = timedelta(seconds=30)


def drain_start_by(pods: Sequence[Pod], deadline: datetime) -> datetime:
    """When a drain waiting for its replacement must start anyway to end by ``deadline``:
    the deadline, less the longest grace period among ``pods``, less :data:`DRAIN_MARGIN`.
    Before it, pods keep running on the cordoned node while their replacement boots, and
    move straight onto Ready capacity when it is Ready (nothing pending in between)."""
    longest = max((pod.termination_grace_seconds for pod in pods), default=0)
    return deadline - timedelta(seconds=longest) - DRAIN_MARGIN


def fitting_grace(pod: Pod, now: datetime, deadline: datetime) -> int:
    """Grace period (whole seconds) that ends by ``deadline``: min(pod's grace, time left), >= 0."""
    left = int((deadline - now).total_seconds())
    return max(0, min(pod.termination_grace_seconds, left))


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _parse(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


@dataclass(frozen=True, slots=True)
class PodProgress:
    """What the drain has done to one pod so far (durable between invocations)."""

    blocked: int = 0
    failed: int = 0
    error: str | None = None  # the last failed eviction's error, cleared by any other outcome
    next_attempt_at: datetime | None = None
    evicted_at: datetime | None = None
    deleted_at: datetime | None = None
    delete_by: datetime | None = None  # when the grace of our deletion ends

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.blocked:
            out["blocked"] = self.blocked
        if self.failed:
            out["failed"] = self.failed
        if self.error:
            out["error"] = self.error
        for name, value in (
            ("nextAttemptAt", self.next_attempt_at),
            ("evictedAt", self.evicted_at),
            ("deletedAt", self.deleted_at),
            ("deleteBy", self.delete_by),
        ):
            if value is not None:
                out[name] = _iso(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PodProgress:
        return cls(
            blocked=int(data.get("blocked", 0)),
            failed=int(data.get("failed", 0)),
            error=str(data["error"]) if data.get("error") else None,
            next_attempt_at=_parse(data.get("nextAttemptAt")),
            evicted_at=_parse(data.get("evictedAt")),
            deleted_at=_parse(data.get("deletedAt")),
            delete_by=_parse(data.get("deleteBy")),
        )


#: A failed eviction's error is kept this long (characters) in the durable progress.
ERROR_LIMIT = 200


def record_eviction(progress: PodProgress | None, status: str, now: datetime, error: str | None = None) -> PodProgress:
    """Progress after an eviction attempt with outcome ``status`` (evicted, blocked, gone,
    failed). Blocked and failed attempts are retried after :func:`backoff` of their count."""
    progress = progress or PodProgress()
    if status == "blocked":
        attempts = progress.blocked + 1
        return replace(progress, blocked=attempts, error=None, next_attempt_at=now + backoff(attempts))
    if status == "failed":
        attempts = progress.failed + 1
        text = (error or "eviction failed")[:ERROR_LIMIT]
        return replace(progress, failed=attempts, error=text, next_attempt_at=now + backoff(attempts))
    return replace(progress, evicted_at=now, error=None, next_attempt_at=None)


def record_deletion(progress: PodProgress | None, grace_seconds: int, now: datetime) -> PodProgress:
    progress = progress or PodProgress()
    return replace(progress, deleted_at=now, delete_by=now + timedelta(seconds=grace_seconds))


@dataclass(frozen=True, slots=True, order=True)
class PodDeletion:
    """Delete ``namespace/name`` with ``grace_seconds`` because the deadline is near."""

    namespace: str
    name: str
    grace_seconds: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class DrainStep:
    """One drain decision. ``waiting`` lists (pod, why) for pods that hold the drain."""

    evict: tuple[Pod, ...]
    delete: tuple[PodDeletion, ...]
    waiting: tuple[tuple[str, str], ...]
    group: str | None
    empty: bool
    deadline_passed: bool
    next_check_at: datetime | None

    @property
    def finished(self) -> bool:
        """Terminate the instance now: empty, or out of time."""
        return self.empty or self.deadline_passed


def plan_drain(
    pods: Iterable[Pod],
    *,
    now: datetime,
    deadline: datetime | None,
    progress: Mapping[str, PodProgress] | None = None,
    deletion_deadlines: Mapping[str, datetime] | None = None,
    taint: Taint = DISRUPTED_TAINT,
) -> DrainStep:
    """The next drain step for the pods currently on the node.

    ``progress``: what earlier steps did, by pod key. ``deletion_deadlines``: for pods
    already terminating, when their grace ends (``metadata.deletionTimestamp``).
    """
    progress = progress or {}
    deletion_deadlines = deletion_deadlines or {}
    drainable = sorted((p for p in pods if is_drainable(p, taint)), key=lambda p: (drain_group(p), p.key))
    deadline_passed = deadline is not None and now >= deadline
    wake: list[datetime] = []

    deletions: list[PodDeletion] = []
    if deadline is not None:
        for pod in drainable:
            opens = deadline - timedelta(seconds=pod.termination_grace_seconds) - DELETE_SLACK
            if now < opens:
                wake.append(opens)
                continue
            record = progress.get(pod.key)
            ends = deletion_deadlines.get(pod.key) if pod.deleting else None
            if record is not None and record.delete_by is not None and (ends is None or record.delete_by < ends):
                ends = record.delete_by
            if ends is not None and ends <= deadline:
                continue  # already on its way out in time
            deletions.append(PodDeletion(pod.namespace, pod.name, fitting_grace(pod, now, deadline)))
    deleted = {d.key for d in deletions}

    def cleared(pod: Pod) -> bool:
        if not pod.is_daemonset_pod:
            return False  # still listed: still there
        record = progress.get(pod.key)
        return pod.deleting or pod.key in deleted or (record is not None and (record.evicted_at is not None or record.deleted_at is not None))

    blocking = [p for p in drainable if not cleared(p)]
    current = min((drain_group(p) for p in blocking), default=None)
    evict: list[Pod] = []
    waiting: list[tuple[str, str]] = []
    terminating = False
    for pod in blocking:
        if pod.key in deleted:
            continue
        if pod.deleting:
            terminating = True
            waiting.append((pod.key, "terminating"))
            continue
        if drain_group(pod) != current:
            continue
        if pod.do_not_disrupt and pod.protected_at(now):
            waiting.append((pod.key, "do-not-disrupt" + (" until the deadline" if deadline is not None else "")))
            continue
        record = progress.get(pod.key)
        if record is not None and record.next_attempt_at is not None and now < record.next_attempt_at:
            if record.error is not None:
                waiting.append((pod.key, f"eviction failed {record.failed} time(s) ({record.error}); retrying"))
            else:
                waiting.append((pod.key, f"eviction blocked by a PodDisruptionBudget {record.blocked} time(s); retrying"))
            wake.append(record.next_attempt_at)
            continue
        evict.append(pod)

    empty = current is None
    next_check: datetime | None = None
    if not empty and not deadline_passed:
        soon = now + (POLL_INTERVAL if (evict or deletions or terminating) else IDLE_POLL_INTERVAL)
        candidates = [t for t in wake if t > now] + [soon]
        if deadline is not None:
            candidates.append(deadline)
        next_check = min(candidates)
    return DrainStep(
        evict=tuple(evict),
        delete=tuple(sorted(deletions)),
        waiting=tuple(sorted(waiting)),
        group=GROUPS[current] if current is not None else None,
        empty=empty,
        deadline_passed=deadline_passed,
        next_check_at=next_check,
    )


def cordon_patch(node_taints: Iterable[Mapping[str, Any]], taint: Taint = DISRUPTED_TAINT) -> dict[str, Any]:
    """JSON merge patch that taints and cordons a node and excludes it from external load
    balancers. ``node_taints`` are the node's current ``spec.taints`` (a merge patch
    replaces the list, so existing taints are kept)."""
    taints = [dict(t) for t in node_taints]
    if not any(t.get("key") == taint.key and t.get("effect") == taint.effect for t in taints):
        taints.append(taint.to_dict())
    return {
        "metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "true"}},
        "spec": {"unschedulable": True, "taints": taints},
    }


PHASE_REPLACING = "replacing"
PHASE_DRAINING = "draining"


@dataclass(frozen=True, slots=True)
class TerminationState:
    """The durable record of one node's termination (``TERMINATION#<node>``).

    ``generation`` increases with every step; a continuation message carrying another
    generation is stale and dropped. ``replacement_claims`` are waited for (phase
    ``replacing``) until Ready or ``replacement_deadline`` before draining starts.
    ``launching_since``: a replacement launch is under way (outside the node's lease) since
    then. ``step_failures``: consecutive steps that failed as a whole (reset by a step that
    completes).
    """

    node: str
    reason: str
    started_at: datetime
    deadline: datetime | None = None
    instance_id: str | None = None
    claim_id: str | None = None
    node_pool: str | None = None
    generation: int = 0
    phase: str = PHASE_DRAINING
    replacement_claims: tuple[str, ...] = ()
    replacement_deadline: datetime | None = None
    progress: Mapping[str, PodProgress] = field(default_factory=dict)
    events: tuple[str, ...] = ()  # event ids that asked for this termination
    launching_since: datetime | None = None
    step_failures: int = 0

    def tightened(self, deadline: datetime | None) -> TerminationState:
        """The earlier of the two deadlines (None = no deadline)."""
        if deadline is None or (self.deadline is not None and self.deadline <= deadline):
            return self
        return replace(self, deadline=deadline)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "reason": self.reason,
            "startedAt": _iso(self.started_at),
            "deadline": _iso(self.deadline),
            "instanceId": self.instance_id,
            "claimId": self.claim_id,
            "nodePool": self.node_pool,
            "generation": self.generation,
            "phase": self.phase,
            "replacementClaims": list(self.replacement_claims),
            "replacementDeadline": _iso(self.replacement_deadline),
            "progress": {key: value.to_dict() for key, value in sorted(self.progress.items())},
            "events": list(self.events),
            "launchingSince": _iso(self.launching_since),
            "stepFailures": self.step_failures,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TerminationState:
        started = _parse(data.get("startedAt"))
        if not data.get("node") or started is None:
            raise ValueError("termination state: node and startedAt are required")
        return cls(
            node=str(data["node"]),
            reason=str(data.get("reason", "")),
            started_at=started,
            deadline=_parse(data.get("deadline")),
            instance_id=data.get("instanceId") or None,
            claim_id=data.get("claimId") or None,
            node_pool=data.get("nodePool") or None,
            generation=int(data.get("generation", 0)),
            phase=str(data.get("phase", PHASE_DRAINING)),
            replacement_claims=tuple(data.get("replacementClaims") or ()),
            replacement_deadline=_parse(data.get("replacementDeadline")),
            progress={str(k): PodProgress.from_dict(v) for k, v in (data.get("progress") or {}).items()},
            events=tuple(data.get("events") or ()),
            launching_since=_parse(data.get("launchingSince")),
            step_failures=int(data.get("stepFailures", 0)),
        )
