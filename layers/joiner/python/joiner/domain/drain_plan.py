"""What deleting a NodeClaim or a Node would do, worked out offline from a cluster snapshot.

``kubectl delete nodeclaim NAME`` (or ``node NAME``) starts Joiner's delete-to-drain: the node
is cordoned and drained until it is empty, or until the NodePool's ``terminationGracePeriod``
counted from the deletion has passed, then its instance is terminated. :func:`plan_deletion`
replays that drain step by step with the very function the termination handler runs at each
step, :func:`joiner.domain.termination.plan_drain` (drain order, do-not-disrupt, the deadline
rule), and in between plays the part of the cluster a snapshot can stand for:

* an eviction is refused while a PodDisruptionBudget selecting the pod allows no disruption:
  its ``status.disruptionsAllowed`` when the snapshot has it, else what the disruption
  controller would compute from its spec and the pods' Ready conditions. Each eviction of a
  Ready pod uses one; an evicted pod's successor is not taken to be Ready before the drain
  ends (offline there is no scheduler), so a budget never allows more than it does now;
* a pod two budgets select is refused whatever they allow (the Eviction API answers 500);
* an evicted pod leaves at once; a pod deleted by the deadline rule leaves when its grace
  period ends;
* nothing else changes: while no pod can move, the clock goes straight to the next moment
  one can (a deadline-rule deletion window opening, a grace period ending, the deadline).

Joiner first launches a replacement for the pods that need a new home and holds the
evictions until it is Ready, at the latest until :func:`~joiner.domain.termination.drain_start_by`;
the plan starts the evictions at ``drain_start`` (default: the deletion). The deadline rule's
deletions and the termination at the deadline do not depend on it.

Pure: the snapshot and the times are passed in.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.model import Node, NodeClaim, NodePool, Pod, PodDisruptionBudget, do_not_disrupt_grace
from joiner.domain.termination import (
    DELETE_SLACK,
    DISRUPTED_TAINT,
    GROUPS,
    PodProgress,
    drain_group,
    drain_start_by,
    is_drainable,
    plan_drain,
    record_deletion,
    record_eviction,
    reschedulable_pods,
)

__all__ = ["DeletionPlan", "DeletionTargetError", "DrainPlan", "PodFate", "budget_allowance", "find_target", "plan_deletion", "plan_node_drain"]

#: Steps one plan may take (a guard: a drain has a few per pod).
MAX_STEPS = 10_000


class DeletionTargetError(ValueError):
    """The NodeClaim or Node to delete is not in the snapshot (the message says what is)."""


@dataclass(frozen=True, slots=True)
class PodFate:
    """What the drain does to one pod. ``outcome``: ``evicted``, ``deleted`` (the deadline
    rule: PDBs and do-not-disrupt no longer hold), ``skipped`` (the drain leaves it: static,
    tolerating the disrupted taint, finished), ``remains`` (still there when the instance is
    terminated, or when the drain waits without end). ``group`` is its place in the drain
    order (:data:`~joiner.domain.termination.GROUPS`), None for skipped pods; ``blocked_by``
    what held it back (``PodDisruptionBudget ns/name``, ``do-not-disrupt``)."""

    pod: str
    outcome: str
    group: str | None
    at: datetime | None = None
    grace_seconds: int | None = None
    reason: str = ""
    blocked_by: tuple[str, ...] = ()
    blocked_since: datetime | None = None

    def to_dict(self, start: datetime) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "outcome": self.outcome,
            "group": self.group,
            "at": _iso(self.at),
            "after": _after(self.at, start),
            "graceSeconds": self.grace_seconds,
            "reason": self.reason,
            "blockedBy": list(self.blocked_by),
            "blockedSince": _iso(self.blocked_since),
        }


@dataclass(frozen=True, slots=True)
class DrainPlan:
    """The drain of ``node`` from ``start``: each pod's fate, in the order the pods leave
    (skipped and remaining ones last), and when the instance is terminated (None: the drain
    waits without end, ``reason`` says on what)."""

    node: str
    start: datetime
    deadline: datetime | None
    pods: tuple[PodFate, ...]
    finished_at: datetime | None
    reason: str


@dataclass(frozen=True, slots=True)
class DeletionPlan:
    """What deleting ``kind``/``name`` at ``deleted_at`` does."""

    kind: str
    name: str
    deleted_at: datetime
    node_claim: str | None
    node: str | None
    node_pool: str | None
    termination_grace_period: timedelta | None
    deadline: datetime | None
    #: the pods Joiner launches a replacement for before it evicts (none: it evicts at once)
    replacement_for: tuple[str, ...]
    #: when the drain starts at the latest while the replacement boots (with a deadline)
    drain_start_by: datetime | None
    drain: DrainPlan | None
    terminated_at: datetime | None
    outcome: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "deletedAt": _iso(self.deleted_at),
            "nodeClaim": self.node_claim,
            "node": self.node,
            "nodePool": self.node_pool,
            "terminationGracePeriod": _duration(self.termination_grace_period),
            "deadline": _iso(self.deadline),
            "replacementFor": list(self.replacement_for),
            "drainStartBy": _iso(self.drain_start_by),
            "pods": [fate.to_dict(self.deleted_at) for fate in (self.drain.pods if self.drain else ())],
            "instanceTerminatedAt": _iso(self.terminated_at),
            "after": _after(self.terminated_at, self.deleted_at),
            "outcome": self.outcome,
        }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment is not None else None


def _duration(value: timedelta | None) -> str | None:
    if value is None:
        return None
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n) or "0s"


def _after(moment: datetime | None, start: datetime) -> str | None:
    """``+2m28s``: how long after ``start``."""
    if moment is None:
        return None
    return "+" + (_duration(moment - start) or "0s")


# ---------------------------------------------------------------- budgets


def _scaled(value: str, total: int) -> int:
    """An int-or-percent of ``total``, percentages rounded up (as the disruption controller does)."""
    if value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _healthy(pdb: PodDisruptionBudget, pods: Iterable[Pod]) -> tuple[int, int]:
    """(currentHealthy, desiredHealthy) as the disruption controller computes them."""
    matching = [p for p in pods if pdb.selects(p) and not p.is_terminal]
    healthy = sum(1 for p in matching if p.ready and not p.deleting and p.phase == "Running")
    expected = len(matching)
    if pdb.max_unavailable is not None:
        desired = max(0, expected - _scaled(pdb.max_unavailable, expected))
    elif pdb.min_available is not None:
        desired = _scaled(pdb.min_available, expected)
    else:
        desired = 0
    return healthy, desired


def budget_allowance(pdb: PodDisruptionBudget, pods: Iterable[Pod]) -> int:
    """How many evictions ``pdb`` allows now: ``status.disruptionsAllowed`` when known, else
    computed from its spec and the pods it selects."""
    if pdb.disruptions_allowed is not None:
        return pdb.disruptions_allowed
    healthy, desired = _healthy(pdb, pods)
    return max(0, healthy - desired)


class _Budgets:
    """The budgets' allowances through one plan."""

    def __init__(self, pdbs: Sequence[PodDisruptionBudget], pods: Sequence[Pod]) -> None:
        self.pdbs = pdbs
        self.pods = pods
        self.allowed = {(p.namespace, p.name): budget_allowance(p, pods) for p in pdbs}

    def selecting(self, pod: Pod) -> list[PodDisruptionBudget]:
        return [pdb for pdb in self.pdbs if pdb.selects(pod)]

    def evict(self, pod: Pod) -> str | None:
        """None when the Eviction API lets ``pod`` go (its budget's allowance used), else why not."""
        selecting = self.selecting(pod)
        if len(selecting) > 1:
            names = ", ".join(sorted(f"{p.namespace}/{p.name}" for p in selecting))
            return f"selected by {len(selecting)} PodDisruptionBudgets ({names}): the Eviction API refuses it"
        if not selecting:
            return None
        pdb = selecting[0]
        key = (pdb.namespace, pdb.name)
        if not pod.ready:
            healthy, desired = _healthy(pdb, self.pods)
            if pdb.unhealthy_pod_eviction_policy == "AlwaysAllow" or healthy >= desired:
                return None  # an unhealthy pod takes nothing from the budget
        if self.allowed[key] <= 0:
            return f"PodDisruptionBudget {pdb.namespace}/{pdb.name} allows no disruption"
        self.allowed[key] -= 1
        return None


# ---------------------------------------------------------------- the drain


def _protection_ends(pod: Pod) -> datetime | None:
    """When a do-not-disrupt annotation with a duration stops protecting the pod (None: never, or not one)."""
    if pod.created is None:
        return None
    ends = [
        pod.created + grace
        for key in (wk.DO_NOT_DISRUPT, wk.KARPENTER_DO_NOT_DISRUPT)
        if key in pod.annotations and isinstance(grace := do_not_disrupt_grace(pod.annotations[key]), timedelta)
    ]
    return max(ends) if ends else None


def _skip_reason(pod: Pod) -> str:
    if pod.is_mirror:
        return "static pod (kubernetes.io/config.mirror): never evicted, it goes with the instance"
    if pod.is_terminal:
        return f"finished ({pod.phase}): nothing to drain"
    kind = "DaemonSet pod" if pod.is_daemonset_pod else "pod"
    return f"{kind} tolerating the {DISRUPTED_TAINT.key}:{DISRUPTED_TAINT.effect} taint: not evicted (it would only come back), it goes with the instance"


def plan_node_drain(
    pods: Iterable[Pod],
    pdbs: Sequence[PodDisruptionBudget],
    *,
    node: str,
    start: datetime,
    deadline: datetime | None,
) -> DrainPlan:
    """The drain of ``node`` from ``start`` with ``deadline`` (None: no terminationGracePeriod),
    step by step through :func:`~joiner.domain.termination.plan_drain` (see the module docstring)."""
    everyone = tuple(pods)
    budgets = _Budgets(pdbs, everyone)
    present: dict[str, Pod] = {p.key: p for p in everyone if p.node_name == node}
    fates: dict[str, PodFate] = {}
    for pod in present.values():
        if not is_drainable(pod):
            fates[pod.key] = PodFate(pod.key, "skipped", None, reason=_skip_reason(pod))
    progress: dict[str, PodProgress] = {}
    leaves: dict[str, datetime] = {}
    ends: dict[str, datetime] = {}
    for pod in present.values():
        if pod.deleting and pod.key not in fates:  # on its way out: gone when its grace ends at the latest
            ends[pod.key] = leaves[pod.key] = start + timedelta(seconds=pod.termination_grace_seconds)
    blocked: dict[str, dict[str, None]] = {}
    blocked_since: dict[str, datetime] = {}
    why: dict[str, str] = {}
    now = start
    finished_at: datetime | None = None
    reason = ""
    for _ in range(MAX_STEPS):
        for key in [k for k, t in leaves.items() if t <= now and k in present]:
            del present[key]
        step = plan_drain(present.values(), now=now, deadline=deadline, progress=progress, deletion_deadlines=ends)
        if step.finished:
            finished_at = now
            reason = "empty" if step.empty else "deadline"
            break
        moved = False
        for deletion in step.delete:
            pod = present[deletion.key]
            held = tuple(blocked.get(pod.key, ()))
            fates[pod.key] = PodFate(
                pod.key,
                "deleted",
                GROUPS[drain_group(pod)],
                now,
                deletion.grace_seconds,
                "deadline rule: deleted so its grace period ends by the deadline" + (f" ({why[pod.key]})" if pod.key in why else ""),
                held,
                blocked_since.get(pod.key),
            )
            progress[pod.key] = record_deletion(progress.get(pod.key), deletion.grace_seconds, now)
            present[pod.key] = replace(pod, deleting=True)
            ends[pod.key] = leaves[pod.key] = now + timedelta(seconds=deletion.grace_seconds)
            moved = True
        for pod in step.evict:
            refused = budgets.evict(pod)
            if refused is None:
                fates[pod.key] = PodFate(
                    pod.key,
                    "evicted",
                    GROUPS[drain_group(pod)],
                    now,
                    reason="evicted through the Eviction API",
                    blocked_by=tuple(blocked.get(pod.key, ())),
                    blocked_since=blocked_since.get(pod.key),
                )
                progress[pod.key] = record_eviction(progress.get(pod.key), "evicted", now)
                del present[pod.key]
                moved = True
            else:
                status = "blocked" if refused.startswith("PodDisruptionBudget") else "failed"
                progress[pod.key] = record_eviction(progress.get(pod.key), status, now, refused)
                holder = refused.split(" allows", 1)[0] if status == "blocked" else "PodDisruptionBudgets"
                blocked.setdefault(pod.key, {})[holder] = None
                blocked_since.setdefault(pod.key, now)
                why[pod.key] = refused
        for key, waiting in step.waiting:
            if waiting.startswith("do-not-disrupt"):
                blocked.setdefault(key, {})["do-not-disrupt"] = None
                blocked_since.setdefault(key, now)
                why[key] = "do-not-disrupt"
        following = step.next_check_at
        if not moved:
            # Offline nothing but the clock changes now: go to the next moment something can.
            candidates = [t for k, t in leaves.items() if k in present and t > now]
            if deadline is not None:
                candidates.append(deadline)
                candidates += [opens for p in present.values() if (opens := deadline - timedelta(seconds=p.termination_grace_seconds) - DELETE_SLACK) > now]
            candidates += [ends_at for p in present.values() if (ends_at := _protection_ends(p)) is not None and ends_at > now]
            if not candidates:
                holders = sorted(f"{k} ({why.get(k, 'waiting')})" for k in present if k not in fates)
                reason = "waits without end: " + "; ".join(holders) + ", and no terminationGracePeriod bounds the drain"
                break
            following = min(candidates)
        if following is None or following <= now:
            following = now + timedelta(seconds=1)
        now = following
    else:
        reason = f"not finished after {MAX_STEPS} steps"
    for key in present:
        if key not in fates:
            pod = present[key]
            fates[key] = PodFate(
                key,
                "remains",
                GROUPS[drain_group(pod)],
                reason=("still there at the deadline: it goes with the instance" if finished_at is not None else f"held: {why.get(key, 'waiting')}"),
                blocked_by=tuple(blocked.get(key, ())),
                blocked_since=blocked_since.get(key),
            )
    order = {"evicted": 0, "deleted": 0, "remains": 1, "skipped": 2}
    ordered = sorted(fates.values(), key=lambda f: (order[f.outcome], f.at or start, GROUPS.index(f.group) if f.group else 0, f.pod))
    return DrainPlan(node, start, deadline, tuple(ordered), finished_at, reason)


# ---------------------------------------------------------------- deletions


def _suggest(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    known = ", ".join(sorted(names)[:10]) + (" ..." if len(names) > 10 else "") if names else "none"
    return (f' (did you mean "{close[0]}"?)' if close else "") + f"; the snapshot holds: {known}"


def find_target(kind: str, name: str, nodes: Sequence[Node], claims: Sequence[NodeClaim]) -> tuple[NodeClaim | None, Node | None]:
    """The NodeClaim and Node a deletion of ``kind`` (``NodeClaim`` or ``Node``) ``name``
    concerns: a claim's Node is the one its ``status.nodeName`` names, else the one with its
    providerID or its ``joiner.dev/nodeclaim`` label (as Joiner's delete-to-drain finds it).
    :class:`DeletionTargetError` when ``name`` is not in the snapshot."""
    by_name = {n.name: n for n in nodes}
    if kind == "NodeClaim":
        claim = next((c for c in claims if c.name == name), None)
        if claim is None:
            raise DeletionTargetError(f"no NodeClaim named {name!r}{_suggest(name, [c.name for c in claims])}")
        node = by_name.get(claim.node_name or "") or next(
            (n for n in nodes if (claim.provider_id and n.provider_id == claim.provider_id) or n.labels.get(wk.NODECLAIM) == claim.name), None
        )
        return claim, node
    if kind != "Node":
        raise DeletionTargetError(f"cannot delete a {kind} (a NodeClaim or a Node)")
    found = by_name.get(name)
    if found is None:
        raise DeletionTargetError(f"no Node named {name!r}{_suggest(name, list(by_name))}")
    claim = next(
        (c for c in claims if c.node_name == name or (c.provider_id and c.provider_id == found.provider_id) or c.name == found.labels.get(wk.NODECLAIM)), None
    )
    return claim, found


def plan_deletion(
    kind: str,
    name: str,
    *,
    nodes: Sequence[Node],
    claims: Sequence[NodeClaim],
    pods: Sequence[Pod],
    pdbs: Sequence[PodDisruptionBudget],
    pools: Mapping[str, NodePool],
    deleted_at: datetime,
    drain_start: datetime | None = None,
) -> DeletionPlan:
    """What deleting ``kind`` ``name`` at ``deleted_at`` does (see the module docstring). The
    deadline is ``deleted_at`` plus the NodePool's ``terminationGracePeriod``, as Joiner's
    delete-to-drain counts it (none: budgets and do-not-disrupt hold without end)."""
    claim, node = find_target(kind, name, nodes, claims)
    pool_name = (node.node_pool if node is not None else None) or (claim.node_pool if claim is not None else None)
    pool = pools.get(pool_name or "")
    grace = pool.termination_grace_period if pool is not None else None
    deadline = deleted_at + grace if grace is not None else None
    base = DeletionPlan(
        kind, name, deleted_at, claim.name if claim else None, node.name if node else None, pool_name, grace, deadline, (), None, None, None, ""
    )
    if node is None:
        return replace(base, terminated_at=deleted_at, outcome="the claim has no Node (not registered): nothing to drain, its instance is terminated at once")
    if pool_name is None:
        return replace(base, outcome=f"Node {node.name} belongs to no NodePool: Joiner does not drain it (its finalizer, if any, is released)")
    on_node = [p for p in pods if p.node_name == node.name]
    moving = reschedulable_pods(on_node)
    start_by = drain_start_by(moving, deadline) if deadline is not None and moving else None
    drain = plan_node_drain(pods, pdbs, node=node.name, start=drain_start or deleted_at, deadline=deadline)
    if drain.finished_at is None:
        outcome = drain.reason
    elif drain.reason == "empty":
        forced = sum(1 for fate in drain.pods if fate.outcome == "deleted")
        outcome = "drained: the node is empty and its instance terminated" + (
            f" ({forced} pod{'s' if forced != 1 else ''} deleted by the deadline rule)" if forced else ""
        )
    else:
        outcome = "the terminationGracePeriod deadline passed: the instance is terminated with what is left"
    if pool is None:
        outcome += f" (NodePool {pool_name} is not in the snapshot: no terminationGracePeriod known)"
    return replace(base, replacement_for=tuple(p.key for p in moving), drain_start_by=start_by, drain=drain, terminated_at=drain.finished_at, outcome=outcome)
