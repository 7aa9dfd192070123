"""NodeClaim mirrors: what ``kubectl get jncl`` shows of a claim kept in DynamoDB.

DynamoDB stays the source of truth; a ``joiner.dev/v1`` NodeClaim is a best-effort, read-only
view of one open claim. Pure: the object is computed from the claim record, the NodePool it
belongs to, and the conditions the mirror shows now: those another pass wrote (disruption:
``Drifted``, ``Consolidatable``) are kept, and every condition keeps its
``lastTransitionTime`` while its status does not change (as Kubernetes conditions do).
:func:`transition_events` names what changed between two versions of a mirror, as the
Events ``kubectl describe nodeclaim`` lists.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.model import Node
from joiner.ports import ClaimRecord, ClaimState

__all__ = [
    "API_VERSION",
    "CLAIM_CONDITIONS",
    "MAX_MIRRORED_PODS",
    "TERMINATION_FINALIZER",
    "STUCK_DELETION_AFTER",
    "UNINSTALLING_ANNOTATION",
    "uninstall_marked",
    "DeletionStep",
    "deletion_step",
    "EventType",
    "MirrorCondition",
    "MirrorEvent",
    "disrupting_condition",
    "disruption_reason",
    "involved_object",
    "mirror_name",
    "node_claim_object",
    "status_differs",
    "terminated_event",
    "transition_events",
    "with_conditions",
]

API_VERSION = "joiner.dev/v1"
#: Condition types computed from the claim record; any other type on a mirror (written by
#: the disruption pass) is kept as it is.
CLAIM_CONDITIONS = ("Launched", "Registered", "Initialized", "Ready", "Disrupting")
#: The CRD bounds ``spec.pods``.
MAX_MIRRORED_PODS = 100
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
#: The condition reason of a disruption method (as Karpenter names its disruption reasons).
_METHOD_REASONS = {"emptiness": "Empty", "expiration": "Expired", "drift": "Drifted", "consolidation": "Underutilized"}
#: Conditions of a claim's progress: once ``True`` they stay so.
_PROGRESS = ("Launched", "Registered", "Initialized", "Ready")
#: Conditions whose turning ``True`` is an Event on the NodeClaim, in the order they happen.
_EVENT_CONDITIONS = ("Launched", "Registered", "Initialized", "Disrupting")


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


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


@dataclass(frozen=True)
class MirrorEvent:
    """An Event to record on a NodeClaim (``kubectl describe nodeclaim`` lists them)."""

    reason: str
    message: str
    type: EventType = EventType.NORMAL


def disruption_reason(text: str) -> str:
    """The condition reason for a termination reason as Joiner records it on a claim:
    ``disruption/<method>`` -> the method's reason (``Drifted``, ``Underutilized``, ``Empty``,
    ``Expired``); an interruption kind (``spot-interruption``) -> ``SpotInterruption``;
    anything else in the same CamelCase, ``Terminating`` when nothing is left."""
    method = text.removeprefix("disruption/") if text.startswith("disruption/") else None
    if method in _METHOD_REASONS:
        return _METHOD_REASONS[method]
    words = re.findall(r"[A-Za-z0-9]+", method if method is not None else text)
    reason = "".join(word[:1].upper() + word[1:] for word in words).lstrip("0123456789")[:128]
    return reason or "Terminating"


def disrupting_condition(reason: str, message: str = "", since: datetime | None = None, *, deadline: datetime | None = None) -> MirrorCondition:
    """``Disrupting=True`` for a termination begun for ``reason`` (as :func:`disruption_reason`
    reads it); ``message`` says why (default: the reason in words), ``deadline`` when the
    drain must end."""
    words = message or reason.replace("/", ": ").replace("-", " ").strip() or "terminating"
    if deadline is not None:
        words += f"; drain deadline {_timestamp(deadline)}"
    return MirrorCondition("Disrupting", "True", disruption_reason(reason), words, since)


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


def _launched_message(claim: ClaimRecord) -> str:
    what = " ".join(part for part in (claim.instance_type, claim.capacity_type) if part)
    where = f" in {claim.zone}" if claim.zone else ""
    price = f", ${claim.price:.4f}/h" if claim.price is not None else ""
    return f"instance {claim.instance_id}" + (f" ({what}{where}{price})" if what or where or price else "")


def _claim_conditions(claim: ClaimRecord, now: datetime) -> list[MirrorCondition]:
    """The conditions the claim record implies. A condition the record dates carries that
    moment; one that turned ``True`` undated carries ``now``; the waiting ones (``Unknown``,
    ``Disrupting=False``) carry none: they date from when the mirror first shows them."""
    launched = claim.instance_id is not None
    registered = claim.registered_at is not None or claim.state in (ClaimState.REGISTERED, ClaimState.INITIALIZED)
    initialized = claim.initialized_at is not None or claim.state == ClaimState.INITIALIZED
    node = f"node {claim.node_name}" if claim.node_name else ""
    conditions = [
        MirrorCondition("Launched", "True", "Launched", _launched_message(claim), claim.launched_at or now)
        if launched
        else MirrorCondition("Launched", "Unknown", "Launching", "limit reserved; CreateFleet in flight"),
        MirrorCondition("Registered", "True", "Registered", node, claim.registered_at or now)
        if registered
        else MirrorCondition("Registered", "Unknown", "AwaitingRegistration"),
        MirrorCondition("Initialized", "True", "Initialized", f"{node} is Ready" if node else "", claim.initialized_at or now)
        if initialized
        else MirrorCondition("Initialized", "Unknown", "AwaitingInitialization"),
    ]
    ready = launched and registered and initialized
    conditions.append(MirrorCondition("Ready", "True", "Ready", "", claim.initialized_at or now) if ready else MirrorCondition("Ready", "Unknown", "NotReady"))
    conditions.append(
        disrupting_condition(claim.reason, since=now) if claim.state == ClaimState.TERMINATING else MirrorCondition("Disrupting", "False", "NotDisrupting")
    )
    return conditions


def node_claim_object(
    claim: ClaimRecord,
    node_pool: Mapping[str, Any] | None,
    kept_conditions: Iterable[Mapping[str, Any]] = (),
    *,
    now: datetime | None = None,
    updates: Sequence[MirrorCondition] = (),
) -> dict[str, Any]:
    """The NodeClaim mirror of ``claim`` : spec (NodePool,
    NodeClass, pods) and status (state, instance, type, zone, capacity type, price, node,
    conditions). ``node_pool`` (raw JSON, when it exists) gives the owner reference, so
    deleting a NodePool removes its mirrors; ``kept_conditions`` are the mirror's current
    conditions: those of other types than :data:`CLAIM_CONDITIONS` are kept, each
    condition whose status is unchanged keeps its ``lastTransitionTime`` (a ``Disrupting=True``
    also its reason and message: the first writer knew why), and ``Launched``,
    ``Registered``, ``Initialized`` and ``Ready`` never go back from ``True``. ``updates`` are applied last
    (a finding, a disruption's reason); a condition that changes status without a known
    moment takes ``now`` (default: when the claim was created)."""
    metadata: dict[str, Any] = {
        "name": mirror_name(claim.claim_id),
        "labels": {wk.NODEPOOL: claim.node_pool, wk.NODECLAIM: claim.claim_id},
        "annotations": {"joiner.dev/source-of-truth": "dynamodb"},
    }
    spec: dict[str, Any] = {"nodePool": claim.node_pool, "pods": sorted(claim.pods)[:MAX_MIRRORED_PODS]}
    pool_meta = (node_pool or {}).get("metadata") or {}
    if pool_meta.get("uid"):
        metadata["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": "NodePool",
                "name": claim.node_pool,
                "uid": pool_meta["uid"],
                "blockOwnerDeletion": False,
                "controller": False,
            }
        ]
    node_class = (((((node_pool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}).get("name")
    if isinstance(node_class, str) and node_class:
        spec["nodeClass"] = node_class
    status: dict[str, Any] = {"state": claim.state}
    for key, value in (
        ("instanceID", claim.instance_id),
        ("instanceType", claim.instance_type),
        ("zone", claim.zone),
        ("capacityType", claim.capacity_type),
        ("nodeName", claim.node_name),
    ):
        if value:
            status[key] = value
    if claim.instance_id and claim.zone:
        status["providerID"] = f"aws:///{claim.zone}/{claim.instance_id}"
    if claim.price is not None:
        status["price"] = f"{claim.price:.4f}"
    kept = [dict(c) for c in kept_conditions if isinstance(c, Mapping)]
    previous = {str(c.get("type")): c for c in kept}
    moment = now or claim.created_at
    computed: list[MirrorCondition] = []
    for condition in _claim_conditions(claim, moment):
        current = previous.get(condition.type)
        if current is None and condition.since is None:
            condition = dataclasses.replace(condition, since=claim.created_at)  # shown since the claim exists
        elif condition.type in _PROGRESS and condition.status != "True" and current is not None and current.get("status") == "True":
            # a claim never goes back: a terminating claim the record no longer dates stays registered
            condition = MirrorCondition(condition.type, "True", str(current.get("reason") or condition.type), str(current.get("message") or ""))
        elif condition.type == "Disrupting" and condition.status == "True" and current is not None and current.get("status") == "True":
            condition = dataclasses.replace(
                condition, reason=str(current.get("reason") or condition.reason), message=str(current.get("message") or condition.message)
            )
        computed.append(condition)
    status["conditions"] = with_conditions(with_conditions(kept, computed, moment), updates, moment)
    return {"apiVersion": API_VERSION, "kind": "NodeClaim", "metadata": metadata, "spec": spec, "status": status}


def with_conditions(current: Sequence[Mapping[str, Any]], updates: Sequence[MirrorCondition], now: datetime | None = None) -> list[dict[str, Any]]:
    """``current`` conditions with ``updates`` applied by type. A condition whose status does
    not change keeps its ``lastTransitionTime`` (as Kubernetes conditions do); one that
    changes takes the update's ``since``, else ``now``."""
    by_type = {str(c.get("type")): dict(c) for c in current if isinstance(c, Mapping)}
    for update in updates:
        previous = by_type.get(update.type)
        fresh = update.to_json()
        if previous is not None and previous.get("status") == update.status and previous.get("lastTransitionTime"):
            fresh["lastTransitionTime"] = previous["lastTransitionTime"]
        elif "lastTransitionTime" not in fresh and now is not None:
            fresh["lastTransitionTime"] = _timestamp(now)
        by_type[update.type] = fresh
    return sorted(by_type.values(), key=lambda c: str(c.get("type")))[:16]


def involved_object(mirror: Mapping[str, Any]) -> dict[str, Any]:
    """What an Event on ``mirror`` names as its involved object (``kubectl describe`` finds
    the Events of an object by kind, name and uid)."""
    meta = mirror.get("metadata") or {}
    return {"apiVersion": API_VERSION, "kind": "NodeClaim", "metadata": {key: meta[key] for key in ("name", "uid", "resourceVersion") if meta.get(key)}}


def _true(conditions: Iterable[Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in conditions if isinstance(c, Mapping) and c.get("status") == "True"}


def transition_events(before: Iterable[Any] | None, after: Iterable[Any]) -> list[MirrorEvent]:
    """The Events of a mirror going from conditions ``before`` (None: it did not exist) to
    ``after``: one per condition of ``Launched``, ``Registered``, ``Initialized`` and
    ``Disrupting`` that became ``True``, in that order. Nothing that did not change."""
    was, now = _true(before or ()), _true(after)
    events = []
    for kind in _EVENT_CONDITIONS:
        if kind in now and kind not in was:
            condition = now[kind]
            message = str(condition.get("message") or "")
            if kind == "Disrupting":
                message = f"Disrupting NodeClaim: {condition.get('reason')}" + (f" ({message})" if message else "")
            events.append(MirrorEvent(kind, message or f"{kind} NodeClaim"))
    return events


def terminated_event(claim: ClaimRecord) -> MirrorEvent:
    """The Event of a claim closed: its instance is gone (or was never launched)."""
    what = f"instance {claim.instance_id} terminated" if claim.instance_id else "no instance launched"
    return MirrorEvent("Terminated", f"{what}; {claim.reason}" if claim.reason else what)


def _comparable(conditions: Any) -> list[tuple[str, str, str, str, bool]]:
    return sorted(
        (str(c.get("type")), str(c.get("status")), str(c.get("reason")), str(c.get("message", "")), bool(c.get("lastTransitionTime")))
        for c in conditions or ()
        if isinstance(c, Mapping)
    )


def status_differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether writing ``desired``'s status would change what ``current`` shows (transition
    times alone do not count, but a condition without one gets one)."""
    now, want = dict(current.get("status") or {}), dict(desired.get("status") or {})
    return _comparable(now.pop("conditions", None)) != _comparable(want.pop("conditions", None)) or now != want


#: The finalizer Joiner puts on its Nodes and NodeClaim mirrors (Karpenter's ``karpenter.sh/termination``):
#: ``kubectl delete`` then waits while Joiner replaces, drains and terminates, and Joiner removes it.
TERMINATION_FINALIZER = "joiner.dev/termination"
#: A deletion Joiner's finalizer has held this long with no termination under way gets one
#: last try: its termination begins, or, if that fails, the finalizer is removed, so a
#: deletion never waits forever on a Joiner that cannot act.
STUCK_DELETION_AFTER = timedelta(minutes=15)
#: Written by ``joiner uninstall`` on Joiner's Nodes and NodeClaim mirrors (its value: when)
#: before it removes their finalizers. While any Node or mirror carries it, a running Joiner
#: adds its finalizer to nothing (not even to a mirror it creates) and releases it where it
#: finds it (as with ``JOINER_DELETE_TO_DRAIN=false``); ``joiner uninstall --undo`` removes it.
UNINSTALLING_ANNOTATION = "joiner.dev/uninstalling"


def uninstall_marked(nodes: Iterable[Node], mirrors: Iterable[Mapping[str, Any]]) -> int:
    """How many of these Nodes and NodeClaim mirrors carry :data:`UNINSTALLING_ANNOTATION`."""

    def annotations(mirror: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = mirror.get("metadata")
        found = meta.get("annotations") if isinstance(meta, Mapping) else None
        return found if isinstance(found, Mapping) else {}

    return sum(1 for node in nodes if UNINSTALLING_ANNOTATION in node.annotations) + sum(
        1 for mirror in mirrors if UNINSTALLING_ANNOTATION in annotations(mirror)
    )


class DeletionStep(enum.Enum):
    NONE = "none"
    ADD_FINALIZER = "add-finalizer"
    TERMINATE = "terminate"
    #: terminate; if the termination cannot begin, release the finalizer
    TERMINATE_OR_RELEASE = "terminate-or-release"
    RELEASE = "release"


def deletion_step(
    finalizers: Sequence[str],
    deletion: datetime | None,
    *,
    managed: bool,
    enabled: bool,
    terminating: bool,
    now: datetime,
) -> DeletionStep:
    """What to do with a Node or NodeClaim mirror and Joiner's finalizer.

    ``managed``: the object is one of Joiner's open claims (its instance can be drained and
    terminated); ``terminating``: a termination of its node is under way. A deletion of an
    object Joiner does not manage, or one with delete-to-drain turned off, releases the
    finalizer at once; one held for :data:`STUCK_DELETION_AFTER` with nothing under way (the
    passes did not run, or failed) is terminated if it can be, else released."""
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
        return DeletionStep.TERMINATE_OR_RELEASE
    return DeletionStep.TERMINATE
