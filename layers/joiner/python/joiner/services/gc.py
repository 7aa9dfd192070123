"""Garbage collection: leaked instances, stale claims, orphaned Nodes, unused launch templates.

:func:`collect_garbage` (the ``gc`` function, every 5 minutes):

1. takes the cluster's ``gc`` lease (a DynamoDB conditional write), so two overlapping runs
   never act at once; a run that finds it held does nothing (``GarbageCollectionSkipped``);
2. reads, in this order, the instances tagged for the cluster, the open claims, the Nodes,
   the termination items, the launch templates, GC's template bookkeeping and the
   NodeClasses; then describes by id every instance a claim or a Node names that the listing
   did not return (terminated ones, other provisioners' ones). Instances are read before
   claims: a claim is written before its launch, so every listed instance's claim is seen;
3. decides with :func:`joiner.domain.gc.plan_gc` (rules and guards: docs/gc.md);
4. executes each action after re-reading what it acts on (a claim that appeared, a Node
   replaced under the same name or Ready again, a termination that started meanwhile all
   cancel the action), logs it and counts ``GarbageCollected`` with dimension ``kind``.

A failed action is logged, counted (``GarbageCollectionErrors``) and retried next run; it
never stops the others. Every action is idempotent (terminating a terminated instance,
closing a closed claim, deleting a deleted Node or template are no-ops), so a retried
invocation is harmless.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from joiner.domain.bounded import parse_aware_time
from joiner.domain.gc import (
    KIND_CLAIM,
    KIND_INSTANCE,
    KIND_LAUNCH_TEMPLATE,
    KIND_NODE,
    GcAction,
    GcInputs,
    GcKept,
    GcPlan,
    GcPolicy,
    GcTemplate,
    parse_gc_node,
    plan_gc,
    terminating_names,
)
from joiner.observability import logger
from joiner.ports import ClaimState, InstanceRecord, KubernetesError
from joiner.services.lifecycle import close_claim, terminate_instance
from joiner.services.termination import TERMINATION_KIND

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = ["LEASE_NAME", "LEASE_TTL_SECONDS", "TEMPLATE_MARK_KIND", "GcResult", "collect_garbage", "read_world", "execute_plan"]

LEASE_NAME = "gc"
#: Longer than one run can take (the gc function's 120 s timeout).
LEASE_TTL_SECONDS = 150
#: State items recording when GC first saw a launch template unused.
TEMPLATE_MARK_KIND = "GCTEMPLATE"
#: Backstop expiry of those items (DynamoDB TTL).
MARK_TTL = timedelta(days=30)


@dataclass(frozen=True, slots=True)
class GcResult:
    """What one run did. ``kept``: resources a guard held back (with the reason)."""

    ran: bool
    skipped_reason: str = ""
    terminated_instances: tuple[str, ...] = ()
    closed_claims: tuple[str, ...] = ()
    deleted_nodes: tuple[str, ...] = ()
    deleted_templates: tuple[str, ...] = ()
    kept: tuple[GcKept, ...] = ()
    errors: tuple[str, ...] = ()
    plan: GcPlan | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ran": self.ran,
            "skippedReason": self.skipped_reason,
            "terminatedInstances": list(self.terminated_instances),
            "closedClaims": list(self.closed_claims),
            "deletedNodes": list(self.deleted_nodes),
            "deletedLaunchTemplates": list(self.deleted_templates),
            "kept": len(self.kept),
            "errors": len(self.errors),
        }


def collect_garbage(runtime: Runtime, now: datetime | None = None, *, policy: GcPolicy = GcPolicy()) -> GcResult:
    """One garbage-collection run under the ``gc`` lease (see the module docstring).

    Read failures propagate (the invocation fails and the next run starts over); action
    failures are collected in :attr:`GcResult.errors`.
    """
    now = now or runtime.clock.now()
    owner = runtime.invocation_id
    if not runtime.state.acquire_lease(LEASE_NAME, owner, now, LEASE_TTL_SECONDS):
        runtime.count("GarbageCollectionSkipped", 1)
        logger.info("garbage collection skipped", extra={"reason": "lease held by another invocation"})
        return GcResult(ran=False, skipped_reason="another invocation holds the gc lease")
    try:
        inputs = read_world(runtime, now)
        plan = plan_gc(inputs, policy)
        result = execute_plan(runtime, plan, now)
        _handle_deletions(runtime, now)
        _sync_mirrors(runtime)
        return result
    finally:
        try:
            runtime.state.release_lease(LEASE_NAME, owner)
        except Exception as error:  # noqa: BLE001 - the lease expires on its own
            logger.warning("releasing the gc lease failed", extra={"error": str(error)})


def _handle_deletions(runtime: Runtime, now: datetime) -> None:
    """Delete to drain (:mod:`joiner.services.deletion`): finalizers added, deletions drained,
    finalizers Joiner cannot act on released (best-effort: never fails a collection)."""
    from joiner.services.deletion import handle_deletions

    try:
        handle_deletions(runtime, now)
    except Exception:  # noqa: BLE001
        logger.exception("delete-to-drain pass failed")


def _sync_mirrors(runtime: Runtime) -> None:
    """Mirrors of claims closed here, or whose earlier sync failed, go now (best-effort)."""
    from joiner.services.nodeclaims import CATCH_UP_SYNC_SECONDS, sync_node_claims

    try:
        sync_node_claims(runtime, seconds=CATCH_UP_SYNC_SECONDS)
    except Exception:  # noqa: BLE001 - a mirror must never fail a collection
        logger.exception("nodeclaim mirror sync failed")


def read_world(runtime: Runtime, now: datetime) -> GcInputs:
    """Everything :func:`plan_gc` needs, read through the ports (instances first)."""
    cluster = runtime.settings.cluster_name
    instances = runtime.ec2.list_cluster_instances(cluster)
    claims = runtime.state.open_claims()
    nodes = [node for node in (parse_gc_node(raw) for raw in runtime.kube.iter_nodes()) if node.name]
    terminating_nodes, terminating_instances, terminating_claims = terminating_names(runtime.state.list_items(TERMINATION_KIND))
    templates = runtime.ec2.list_launch_templates(cluster)
    marks: dict[str, datetime] = {}
    for item in runtime.state.list_items(TEMPLATE_MARK_KIND):
        since = parse_aware_time(item.get("unusedSince"))
        if isinstance(item.get("id"), str) and since is not None:
            marks[item["id"]] = since
    node_classes: frozenset[str] | None
    try:
        node_classes = frozenset(str((nc.get("metadata") or {}).get("name") or "") for nc in runtime.kube.list_node_classes())
    except KubernetesError as error:
        logger.warning("cannot list NodeClasses; every template's NodeClass counts as existing", extra={"error": str(error)})
        node_classes = None

    listed = {record.instance_id for record in instances}
    wanted = {c.instance_id for c in claims if c.instance_id} | {n.instance_id for n in nodes if n.instance_id}
    missing = sorted(wanted - listed)
    described: dict[str, InstanceRecord | None] = dict.fromkeys(missing)
    if missing:
        for record in runtime.ec2.describe_instances(missing):
            if record.instance_id in described:
                described[record.instance_id] = record
    return GcInputs(
        cluster=cluster,
        now=now,
        instances=tuple(instances),
        described=described,
        claims=tuple(claims),
        nodes=tuple(nodes),
        terminating_nodes=terminating_nodes,
        terminating_instances=terminating_instances,
        terminating_claims=terminating_claims,
        templates=tuple(GcTemplate.from_info(info) for info in templates),
        template_unused_since=marks,
        node_classes=node_classes,
    )


# ---------------------------------------------------------------- execution

_Outcome = tuple[bool, str]  # (done, why not)


def _terminate_instance(runtime: Runtime, action: GcAction, now: datetime) -> _Outcome:
    owner = runtime.state.claim_by_instance(action.target)
    if owner is not None and owner.state != ClaimState.CLOSED:
        return False, f"claim {owner.claim_id} now owns it"
    if action.claim_id:
        tagged = runtime.state.get_claim(action.claim_id)
        if tagged is not None and tagged.state != ClaimState.CLOSED and tagged.instance_id in (None, action.target):
            return False, f"claim {action.claim_id} is open now"
    if not terminate_instance(runtime, action.target, path="gc"):
        return False, "its tags do not name this cluster"
    return True, ""


def _delete_node(runtime: Runtime, action: GcAction, now: datetime) -> _Outcome:
    raw = runtime.kube.get_node(action.target)
    if raw is None:
        return False, "already gone"
    node = parse_gc_node(raw)
    if action.uid and node.uid != action.uid:
        return False, "replaced by a new Node of the same name"
    if node.instance_id != action.instance_id:
        return False, f"now runs on {node.instance_id}"
    if node.ready:
        return False, "Ready again"
    if node.deleting:
        return False, "already being deleted"
    if runtime.state.get_item(TERMINATION_KIND, action.target) is not None:
        return False, "termination started"
    try:
        # Only the Node just re-read: a Node re-created under this name since then has
        # another uid, and the API server refuses (409) instead of deleting it.
        if not runtime.kube.delete_node(action.target, uid=node.uid or action.uid or None):
            return False, "replaced by a new Node of the same name"
    except KubernetesError as error:
        if error.status != 404:
            raise
    return True, ""


def _close_claim(runtime: Runtime, action: GcAction, now: datetime) -> _Outcome:
    current = runtime.state.get_claim(action.target)
    if current is None or current.state == ClaimState.CLOSED:
        close_claim(runtime, current or action.target, "garbage collected", now, path="gc", node_pool=action.node_pool or "")  # finishes a crashed close
        return False, "already closed"
    if current.instance_id != action.instance_id:
        return False, f"claim now records instance {current.instance_id}"
    # Conditional on the state just read (``reserved`` for an abandoned reservation): a
    # provisioning round recording its launch at this instant wins, and GC backs off.
    outcome = close_claim(
        runtime, current, f"garbage collected: {action.reason}", now, path="gc", expected=ClaimState(current.state), node_pool=action.node_pool or ""
    )
    if outcome.closed_now:
        return True, ""
    if not outcome.owned:
        return False, "its instance's tags do not name this cluster"
    if outcome.claim is not None and outcome.claim.state != ClaimState.CLOSED:
        return False, f"claim moved to {outcome.claim.state} meanwhile"
    return False, "already closed"


def _delete_template(runtime: Runtime, action: GcAction, now: datetime) -> _Outcome:
    runtime.ec2.delete_launch_template(action.target)
    try:
        runtime.state.delete_item(TEMPLATE_MARK_KIND, action.target)
    except Exception as error:  # noqa: BLE001 - the mark expires or is dropped next run
        logger.warning("forgetting a launch template mark failed", extra={"template": action.target, "error": str(error)})
    return True, ""


_EXECUTORS: dict[str, Callable[[Runtime, GcAction, datetime], _Outcome]] = {
    KIND_INSTANCE: _terminate_instance,
    KIND_NODE: _delete_node,
    KIND_CLAIM: _close_claim,
    KIND_LAUNCH_TEMPLATE: _delete_template,
}


def execute_plan(runtime: Runtime, plan: GcPlan, now: datetime) -> GcResult:
    """Carry out ``plan`` action by action (each re-checked first), then GC's bookkeeping."""
    done: dict[str, list[str]] = {kind: [] for kind in _EXECUTORS}
    errors: list[str] = []
    kept = list(plan.kept)
    held_claims: set[str] = set()  # claims whose Node was not deleted: they stay open
    for item in plan.kept:
        logger.info("garbage kept", extra={"kind": item.kind, "target": item.target, "reason": item.reason})
    for action in plan.actions:
        fields = action.log_fields()
        if action.kind == KIND_CLAIM and action.target in held_claims:
            kept.append(GcKept(action.kind, action.target, "its Node was not deleted"))
            logger.info("garbage kept", extra={**fields, "why": "its Node was not deleted"})
            continue
        try:
            collected, why = _EXECUTORS[action.kind](runtime, action, now)
        except Exception as error:  # noqa: BLE001 - one failure must not stop the others
            errors.append(f"{action.kind} {action.target}: {error}")
            if action.kind == KIND_NODE and action.claim_id:
                held_claims.add(action.claim_id)
            logger.warning("garbage collection failed", extra={**fields, "error": str(error)})
            runtime.count("GarbageCollectionErrors", 1, kind=action.kind)
            continue
        if not collected:
            if action.kind == KIND_NODE and action.claim_id and why != "already gone":
                held_claims.add(action.claim_id)
            kept.append(GcKept(action.kind, action.target, f"re-check: {why}"))
            logger.info("garbage kept at re-check", extra={**fields, "why": why})
            continue
        done[action.kind].append(action.target)
        logger.info("garbage collected", extra=fields)
        runtime.count("GarbageCollected", 1, kind=action.kind)

    for template_id, since in plan.mark_unused.items():
        try:
            runtime.state.put_item(
                TEMPLATE_MARK_KIND, template_id, {"id": template_id, "unusedSince": since.isoformat()}, expires_at=now + MARK_TTL, if_absent=True
            )
        except Exception as error:  # noqa: BLE001 - bookkeeping only: retried next run
            errors.append(f"mark {template_id}: {error}")
            logger.warning("recording an unused launch template failed", extra={"template": template_id, "error": str(error)})
    for template_id in plan.unmark:
        try:
            runtime.state.delete_item(TEMPLATE_MARK_KIND, template_id)
        except Exception as error:  # noqa: BLE001
            errors.append(f"unmark {template_id}: {error}")
            logger.warning("forgetting a launch template mark failed", extra={"template": template_id, "error": str(error)})

    result = GcResult(
        ran=True,
        terminated_instances=tuple(done[KIND_INSTANCE]),
        closed_claims=tuple(done[KIND_CLAIM]),
        deleted_nodes=tuple(done[KIND_NODE]),
        deleted_templates=tuple(done[KIND_LAUNCH_TEMPLATE]),
        kept=tuple(kept),
        errors=tuple(errors),
        plan=plan,
    )
    logger.info("garbage collection finished", extra={"summary": result.to_dict()})
    return result
