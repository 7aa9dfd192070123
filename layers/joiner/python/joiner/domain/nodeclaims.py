"""NodeClaim mirrors: what ``kubectl get jncl`` shows of a claim kept in DynamoDB.

DynamoDB stays the source of truth; a ``joiner.dev/v1`` NodeClaim is a best-effort, read-only
view of one open claim. Pure: the object is computed from the claim record, the NodePool it
belongs to, and the conditions another pass (disruption: ``Drifted``, ``Consolidatable``)
last wrote on the mirror, which are kept.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from joiner.domain import labels as wk
from joiner.ports import ClaimRecord

__all__ = [
    "API_VERSION",
    "CLAIM_CONDITIONS",
    "MAX_MIRRORED_PODS",
    "TERMINATION_FINALIZER",
    "STUCK_DELETION_AFTER",
    "DeletionStep",
    "deletion_step",
    "MirrorCondition",
    "mirror_name",
    "node_claim_object",
    "status_differs",
    "with_conditions",
]

API_VERSION = "joiner.dev/v1"
#: Condition types computed from the claim record; any other type on a mirror (written by
#: the disruption pass) is kept as it is.
CLAIM_CONDITIONS = ("Launched", "Registered", "Initialized", "Ready", "Disrupting")
#: The CRD bounds ``spec.pods``.
MAX_MIRRORED_PODS = 100
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


@dataclass(frozen=True)
class MirrorCondition:
    """One status condition: ``status`` is ``True``, ``False`` or ``Unknown``; ``since`` the
    moment it last changed, when known."""

    type: str
    status: str
    reason: str
    message: str = ""
    since: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message[:1024]}
        if self.since is not None:
            out["lastTransitionTime"] = _timestamp(self.since)
        return out


def mirror_name(claim_id: str) -> str:
    """The object name for ``claim_id``: the id itself when it is a DNS subdomain (claim ids
    are label values, almost always lowercase), else a lowercase form with a short hash so
    two ids never share a name."""
    if _DNS_SUBDOMAIN.match(claim_id):
        return claim_id
    cleaned = re.sub(r"[^a-z0-9.-]+", "-", claim_id.lower()).strip("-.")[:230] or "claim"
    return f"{cleaned}-{hashlib.sha256(claim_id.encode()).hexdigest()[:10]}"


def _timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _claim_conditions(claim: ClaimRecord) -> list[MirrorCondition]:
    launched = claim.instance_id is not None
    registered = claim.registered_at is not None or claim.state in ("registered", "initialized")
    initialized = claim.initialized_at is not None or claim.state == "initialized"
    terminating = claim.state == "terminating"
    conditions = [
        MirrorCondition("Launched", "True", "Launched", f"instance {claim.instance_id}", claim.launched_at) if launched
        else MirrorCondition("Launched", "Unknown", "Launching", "limit reserved; CreateFleet in flight", claim.created_at),
        MirrorCondition("Registered", "True", "Registered", f"node {claim.node_name or ''}".strip(), claim.registered_at) if registered
        else MirrorCondition("Registered", "Unknown", "AwaitingRegistration", "", claim.launched_at or claim.created_at),
        MirrorCondition("Initialized", "True", "Initialized", "", claim.initialized_at) if initialized
        else MirrorCondition("Initialized", "Unknown", "AwaitingInitialization", "", claim.registered_at or claim.created_at),
    ]
    ready = launched and registered and initialized
    conditions.append(MirrorCondition("Ready", "True" if ready else "Unknown", "Ready" if ready else "NotReady", "",
                                      claim.initialized_at if ready else None))
    conditions.append(MirrorCondition("Disrupting", "True", "Terminating", claim.reason or "terminating") if terminating
                      else MirrorCondition("Disrupting", "False", "NotDisrupting"))
    return conditions


def node_claim_object(claim: ClaimRecord, node_pool: Mapping[str, Any] | None, kept_conditions: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The NodeClaim mirror of ``claim`` : spec (NodePool,
    NodeClass, pods) and status (state, instance, type, zone, capacity type, price, node,
    conditions). ``node_pool`` (raw JSON, when it exists) gives the owner reference, so
    deleting a NodePool removes its mirrors; ``kept_conditions`` are the mirror's current
    conditions, of which those of other types than :data:`CLAIM_CONDITIONS` are kept."""
    metadata: dict[str, Any] = {
        "name": mirror_name(claim.claim_id),
        "labels": {wk.NODEPOOL: claim.node_pool, wk.NODECLAIM: claim.claim_id},
        "annotations": {"joiner.dev/source-of-truth": "dynamodb"},
    }
    spec: dict[str, Any] = {"nodePool": claim.node_pool, "pods": sorted(claim.pods)[:MAX_MIRRORED_PODS]}
    pool_meta = (node_pool or {}).get("metadata") or {}
    if pool_meta.get("uid"):
        metadata["ownerReferences"] = [{
            "apiVersion": API_VERSION, "kind": "NodePool", "name": claim.node_pool, "uid": pool_meta["uid"],
            "blockOwnerDeletion": False, "controller": False,
        }]
    node_class = (((((node_pool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}).get("name")
    if isinstance(node_class, str) and node_class:
        spec["nodeClass"] = node_class
    status: dict[str, Any] = {"state": claim.state}
    for key, value in (("instanceID", claim.instance_id), ("instanceType", claim.instance_type), ("zone", claim.zone),
                       ("capacityType", claim.capacity_type), ("nodeName", claim.node_name)):
        if value:
            status[key] = value
    if claim.instance_id and claim.zone:
        status["providerID"] = f"aws:///{claim.zone}/{claim.instance_id}"
    if claim.price is not None:
        status["price"] = f"{claim.price:.4f}"
    computed = [c.to_json() for c in _claim_conditions(claim)]
    others = [dict(c) for c in kept_conditions if isinstance(c, Mapping) and c.get("type") not in CLAIM_CONDITIONS]
    status["conditions"] = sorted(computed + others, key=lambda c: str(c.get("type")))[:16]
    return {"apiVersion": API_VERSION, "kind": "NodeClaim", "metadata": metadata, "spec": spec, "status": status}


def with_conditions(current: Sequence[Mapping[str, Any]], updates: Sequence[MirrorCondition]) -> list[dict[str, Any]]:
    """``current`` conditions with ``updates`` applied by type; a condition whose status does
    not change keeps its ``lastTransitionTime`` (as Kubernetes conditions do)."""
    by_type = {str(c.get("type")): dict(c) for c in current if isinstance(c, Mapping)}
    for update in updates:
        previous = by_type.get(update.type)
        fresh = update.to_json()
        if previous is not None and previous.get("status") == update.status and previous.get("lastTransitionTime"):
            fresh["lastTransitionTime"] = previous["lastTransitionTime"]
        by_type[update.type] = fresh
    return sorted(by_type.values(), key=lambda c: str(c.get("type")))[:16]


def _comparable(conditions: Any) -> list[tuple[str, str, str, str]]:
    return sorted((str(c.get("type")), str(c.get("status")), str(c.get("reason")), str(c.get("message", "")))
                  for c in conditions or () if isinstance(c, Mapping))


def status_differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether writing ``desired``'s status would change what ``current`` shows (transition
    times alone do not count)."""
    now, want = dict(current.get("status") or {}), dict(desired.get("status") or {})
    return _comparable(now.pop("conditions", None)) != _comparable(want.pop("conditions", None)) or now != want


#: The finalizer Joiner puts on its Nodes and NodeClaim mirrors (Karpenter's ``karpenter.sh/termination``):
#: ``kubectl delete`` then waits while Joiner replaces, drains and terminates, and Joiner removes it.
TERMINATION_FINALIZER = "joiner.dev/termination"
#: A deletion Joiner's finalizer has held this long with no termination under way is let go:
#: the finalizer is removed so a deletion never waits forever on a Joiner that cannot act.
STUCK_DELETION_AFTER = timedelta(minutes=15)


class DeletionStep(enum.Enum):
    NONE = "none"
    ADD_FINALIZER = "add-finalizer"
    TERMINATE = "terminate"
    RELEASE = "release"


def deletion_step(
    finalizers: Sequence[str], deletion: datetime | None, *, managed: bool, enabled: bool, terminating: bool, now: datetime,
) -> DeletionStep:
    """What to do with a Node or NodeClaim mirror and Joiner's finalizer.

    ``managed``: the object is one of Joiner's open claims (its instance can be drained and
    terminated); ``terminating``: a termination of its node is under way. A deletion of an
    object Joiner does not manage, or one with delete-to-drain turned off, releases the
    finalizer at once; one held for :data:`STUCK_DELETION_AFTER` with nothing under way too."""
    held = TERMINATION_FINALIZER in finalizers
    if deletion is None:
        if not held and managed and enabled:
            return DeletionStep.ADD_FINALIZER
        if held and not enabled:
            return DeletionStep.RELEASE
        return DeletionStep.NONE
    if not held:
        return DeletionStep.NONE
    if not managed or not enabled:
        return DeletionStep.RELEASE
    if terminating:
        return DeletionStep.NONE
    if now - deletion >= STUCK_DELETION_AFTER:
        return DeletionStep.RELEASE
    return DeletionStep.TERMINATE
