"""Registration: match the Nodes kubelets register to the claims Joiner launched.

Runs at the start of every provisioning round, on the Nodes and open claims the round
has just read:

* A launched claim whose instance has a Node (``providerID aws:///<zone>/<instance-id>``)
  becomes ``registered`` (time, node name). Its limit reservation stays: it is released only
  when the capacity is gone (termination, garbage collection). A round that read the cluster
  before the Node registered checks the limit against the same figure as one that read it
  after; nothing moves between "reserved" and "in use" (see
  :meth:`joiner.services.planning_round.PlanningRound.compute_usage`).
* The Node gets the labels the claim implies when they are missing:
  ``joiner.dev/nodeclaim``, ``joiner.dev/nodepool``, ``joiner.dev/capacity-type``, the
  instance type's attributes (``joiner.dev/instance-family``, ...), the zone and
  ``joiner.dev/registered`` (``joiner.dev/initialized`` once initialized), and every
  Karpenter alias of them (``karpenter.sh/capacity-type``,
  ``karpenter.k8s.aws/instance-family``, ...): kube-scheduler matches keys literally.
* A registered claim becomes ``initialized`` when its Node is Ready and none of the
  NodePool's ``startupTaints`` is left on it.
* A launched claim with no Node :data:`REGISTRATION_TIMEOUT` after launch is given up:
  the instance is terminated, the claim closed (``registration timeout``) and its
  reservation released. Its pods are still pending, so the same round re-plans them.
* A registered or initialized claim whose Node is gone with no termination under way (the
  Node deleted past Joiner's finalizer: before it was on it, or after it was let go) is noted
  (``node_lost_at``); still without a Node :data:`NODE_LOST_AFTER` later (a restarted kubelet
  registers it again within that), the instance is terminated and the claim closed
  (``node deleted``): nothing on it can run any more, and it holds its NodePool's limit.

Every step is idempotent: a retried round finds the claim already registered, the
labels already set, the instance already terminating.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from joiner.domain import labels as wk
from joiner.domain.model import NODECLASS_HASH_KEY, NODEPOOL_HASH_KEY, InstanceType, Node, NodePool
from joiner.observability import logger
from joiner.ports import ClaimRecord, ClaimState, ClaimStateConflict, Ec2Error, KubernetesError
from joiner.services.lifecycle import advance, close_claim, note_node_lost
from joiner.services.nodeclaims import mirror_claim

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = ["NODE_LOST_AFTER", "REGISTRATION_TIMEOUT", "RegistrationResult", "reconcile_registration", "claim_labels", "is_initialized"]

#: How long a launched instance may take to register its Node (Karpenter's default too).
REGISTRATION_TIMEOUT = timedelta(minutes=15)
#: How long a registered claim's Node may be gone (no termination under way) before the claim
#: is closed and its instance terminated.
NODE_LOST_AFTER = timedelta(minutes=5)

#: Labels registration always enforces; the others are only set when absent (the
#: bootstrap or the user may already have set them).
_MARKERS = frozenset({wk.REGISTERED, wk.INITIALIZED})


@dataclass(frozen=True, slots=True)
class RegistrationResult:
    """What one registration pass did. ``claims`` are the open claims afterwards (updated)."""

    claims: tuple[ClaimRecord, ...] = ()
    registered: tuple[str, ...] = ()
    initialized: tuple[str, ...] = ()
    timed_out: tuple[str, ...] = ()
    #: claims closed because their Node was gone :data:`NODE_LOST_AFTER`
    nodes_lost: tuple[str, ...] = ()
    labeled_nodes: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    #: node name -> NodePool, for Nodes matched to a claim (labels may not be set yet)
    node_pools: Mapping[str, str] = field(default_factory=dict)


def claim_labels(
    claim: ClaimRecord, *, initialized: bool, instance_type: InstanceType | None = None, zone_ids: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The labels a Node launched for ``claim`` must carry: the claim's own, the attributes of
    its instance type (``instance_type``, from the catalog) and its zone, each Joiner key also
    under every alias the planner accepts (:func:`joiner.domain.labels.with_alias_labels`), so
    kube-scheduler binds the pods that select ``karpenter.k8s.aws/instance-family`` and the like."""
    labels: dict[str, str] = {}
    if instance_type is not None:
        labels.update(
            (key, value) for key, value in instance_type.requirements.labels().items() if key not in (wk.ZONE, wk.ZONE_ID, wk.CAPACITY_TYPE, wk.HOSTNAME)
        )
    if claim.zone:
        labels[wk.ZONE] = claim.zone
        zone_id = (zone_ids or {}).get(claim.zone)
        if zone_id:
            labels[wk.ZONE_ID] = zone_id
    labels.update({wk.NODECLAIM: claim.claim_id, wk.NODEPOOL: claim.node_pool, wk.REGISTERED: "true"})
    if claim.capacity_type:
        labels[wk.CAPACITY_TYPE] = claim.capacity_type
    if initialized:
        labels[wk.INITIALIZED] = "true"
    return wk.with_alias_labels(labels)


def _zone_ids(runtime: Runtime) -> Mapping[str, str]:
    try:
        return runtime.catalog.zone_ids
    except Exception:  # noqa: BLE001 - without the catalog the node just lacks its zone-id label
        return {}


def _instance_type(runtime: Runtime, claim: ClaimRecord, errors: list[str]) -> InstanceType | None:
    if not claim.instance_type:
        return None
    try:
        found = runtime.catalog.instance_type(claim.instance_type)
    except Exception as error:  # noqa: BLE001 - a catalog failure must not block the claim's other labels
        errors.append(f"claim {claim.claim_id}: instance type {claim.instance_type}: {error}")
        return None
    if found is None:
        errors.append(f"claim {claim.claim_id}: instance type {claim.instance_type} is not in the catalog: its labels are not set")
    return found


def is_initialized(node: Node, pool: NodePool | None) -> bool:
    """Ready and free of the NodePool's startup taints (matched on key and effect)."""
    if not node.ready:
        return False
    if pool is None:
        return True
    startup = {(t.key, t.effect) for t in pool.startup_taints}
    return not any((t.key, t.effect) in startup for t in node.taints)


def reconcile_registration(
    runtime: Runtime,
    claims: Iterable[ClaimRecord],
    nodes: Iterable[Node],
    node_pools: Mapping[str, NodePool],
    now: datetime,
) -> RegistrationResult:
    """Advance open claims through registered/initialized, time out lost launches.

    Failures of single calls are logged in ``errors`` and retried next round; they never
    stop the pass (one broken Node must not block registration of the others).
    """
    by_instance: dict[str, Node] = {}
    #: instances whose Node is being deleted: registered, held for their drain (never timed out)
    draining: set[str] = set()
    for candidate in sorted(nodes, key=lambda n: n.name):
        instance_id = candidate.instance_id
        if instance_id is not None and not candidate.deleting:
            by_instance.setdefault(instance_id, candidate)
        elif instance_id is not None:
            draining.add(instance_id)

    kube = runtime.kube
    remaining: list[ClaimRecord] = []
    registered: list[str] = []
    initialized: list[str] = []
    timed_out: list[str] = []
    lost: list[str] = []
    labeled: list[str] = []
    errors: list[str] = []
    node_pools_by_node: dict[str, str] = {}

    for claim in sorted(claims, key=lambda c: c.claim_id):
        if claim.state == ClaimState.CLOSED:
            continue
        node = by_instance.get(claim.instance_id) if claim.instance_id else None
        if node is None:
            if claim.state == ClaimState.LAUNCHED and claim.instance_id not in draining and _registration_overdue(claim, now):
                if _time_out(runtime, claim, now, errors):
                    timed_out.append(claim.claim_id)
                    continue
            elif claim.state in (ClaimState.REGISTERED, ClaimState.INITIALIZED) and claim.instance_id and claim.instance_id not in draining:
                still_open = _node_lost(runtime, claim, now, errors)
                if still_open is None:
                    lost.append(claim.claim_id)
                    continue
                claim = still_open
            remaining.append(claim)
            continue
        if claim.node_lost_at is not None:
            try:
                claim = note_node_lost(runtime, claim, None)
            except ClaimStateConflict as conflict:
                claim = conflict.current
            except Exception as error:  # noqa: BLE001 - retried next round
                errors.append(f"claim {claim.claim_id}: clearing its lost Node: {error}")

        node_pools_by_node[node.name] = claim.node_pool
        was = claim.state
        try:
            if claim.state == ClaimState.LAUNCHED:
                claim = advance(runtime, claim.claim_id, ClaimState.REGISTERED, expected=ClaimState.LAUNCHED, registered_at=now, node_name=node.name)
                registered.append(claim.claim_id)
                runtime.count("NodesRegistered", 1)
                if claim.launched_at is not None:
                    runtime.count("RegistrationSeconds", (now - claim.launched_at).total_seconds(), "Seconds")
            if claim.state == ClaimState.REGISTERED and is_initialized(node, node_pools.get(claim.node_pool)):
                claim = advance(runtime, claim.claim_id, ClaimState.INITIALIZED, expected=ClaimState.REGISTERED, initialized_at=now)
                initialized.append(claim.claim_id)
                runtime.count("NodesInitialized", 1)
            if claim.state != was:
                mirror_claim(runtime, claim)
        except ClaimStateConflict as conflict:  # moved on concurrently (terminating, closed): as it is now
            claim = conflict.current
            if claim.state not in (ClaimState.REGISTERED, ClaimState.INITIALIZED):
                remaining.append(claim)
                continue
        except Exception as error:  # noqa: BLE001 - one claim's failure must not stop the others
            errors.append(f"claim {claim.claim_id}: {error}")
            remaining.append(claim)
            continue

        if claim.state in (ClaimState.REGISTERED, ClaimState.INITIALIZED):
            desired = claim_labels(
                claim, initialized=claim.state == ClaimState.INITIALIZED, instance_type=_instance_type(runtime, claim, errors), zone_ids=_zone_ids(runtime)
            )
            missing = {k: v for k, v in desired.items() if k not in node.labels or (k in _MARKERS and node.labels[k] != v)}
            patch: dict[str, dict[str, str]] = {"labels": missing} if missing else {}
            stamps = {
                key: value
                for key, value in ((NODEPOOL_HASH_KEY, claim.pool_hash), (NODECLASS_HASH_KEY, claim.class_hash))
                if value and node.annotations.get(key) != value
            }
            if stamps:
                patch["annotations"] = stamps
            if patch:
                try:
                    kube.patch_node(node.name, {"metadata": patch})
                    labeled.append(node.name)
                except KubernetesError as error:
                    errors.append(f"node {node.name}: labeling: {error}")
        remaining.append(claim)

    return RegistrationResult(
        claims=tuple(remaining),
        registered=tuple(registered),
        initialized=tuple(initialized),
        timed_out=tuple(timed_out),
        nodes_lost=tuple(lost),
        labeled_nodes=tuple(labeled),
        errors=tuple(errors),
        node_pools=node_pools_by_node,
    )


def _registration_overdue(claim: ClaimRecord, now: datetime) -> bool:
    started = claim.launched_at or claim.created_at
    return now - started >= REGISTRATION_TIMEOUT


def _node_lost(runtime: Runtime, claim: ClaimRecord, now: datetime, errors: list[str]) -> ClaimRecord | None:
    """A registered claim without its Node: noted the first time, closed (its instance
    terminated) :data:`NODE_LOST_AFTER` later. The claim as it is now; None when closed."""
    try:
        if claim.node_lost_at is None:
            logger.info("claim's Node is gone", extra={"claim": claim.claim_id, "node": claim.node_name, "instance": claim.instance_id})
            return note_node_lost(runtime, claim, now)
        if now - claim.node_lost_at < NODE_LOST_AFTER:
            return claim
        outcome = close_claim(runtime, claim, "node deleted", now, path="registration", expected=(ClaimState.REGISTERED, ClaimState.INITIALIZED))
    except ClaimStateConflict as conflict:
        return conflict.current
    except Exception as error:  # noqa: BLE001 - retried next round
        errors.append(f"claim {claim.claim_id}: its Node is gone: {error}")
        return claim
    if not outcome.closed_now:
        if not outcome.owned:
            errors.append(f"claim {claim.claim_id}: instance {claim.instance_id} is not tagged as this cluster's: not terminated")
        return outcome.claim if outcome.claim is not None and outcome.claim.state != ClaimState.CLOSED else None
    runtime.count("NodesLost", 1)
    return None


def _time_out(runtime: Runtime, claim: ClaimRecord, now: datetime, errors: list[str]) -> bool:
    """Terminate a never-registered instance and close its claim. False when it must be retried."""
    try:
        outcome = close_claim(runtime, claim, "registration timeout", now, path="registration", expected=ClaimState.LAUNCHED)
    except Ec2Error as error:
        errors.append(f"claim {claim.claim_id}: terminating {claim.instance_id}: {error}")
        return False
    except Exception as error:  # noqa: BLE001
        errors.append(f"claim {claim.claim_id}: closing after registration timeout: {error}")
        return False
    if not outcome.closed_now:
        if not outcome.owned:
            errors.append(f"claim {claim.claim_id}: instance {claim.instance_id} is not tagged as this cluster's: not terminated")
        return False
    runtime.count("RegistrationTimeouts", 1)
    return True
