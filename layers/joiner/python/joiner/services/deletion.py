"""Delete to drain: ``kubectl delete nodeclaim NAME`` / ``kubectl delete node NAME`` as in Karpenter.

Joiner puts :data:`~joiner.domain.nodeclaims.TERMINATION_FINALIZER` on the Nodes of its open
claims and on their NodeClaim mirrors. A deletion then only sets ``deletionTimestamp``; this
pass (run by every garbage collection and every disruption pass) sees it and starts the
node's termination as an interruption does: cordon, a replacement when its pods need one,
a drain honouring PDBs until the NodePool's ``terminationGracePeriod``, the instance
terminated, the Node's finalizer removed and the Node deleted
(:func:`joiner.services.termination.begin_termination`). The mirror's finalizer is removed
when its claim is closed (:func:`joiner.services.nodeclaims.sync_node_claims`).

A claim's Node is the one whose name the scanner recorded, or the one whose
``joiner.dev/nodeclaim`` label or providerID (``aws:///<zone>/<instance-id>``) names the claim
or its instance: the kubelet registers the Node and pods bind to it before a scanner round
records it, and a deleted mirror of such a claim is drained like any other. Only a claim
whose instance has no Node at all is terminated at once.

A finalizer never outlives Joiner's ability to act on it
(:func:`~joiner.domain.nodeclaims.deletion_step`): on objects Joiner does not manage, with
``JOINER_DELETE_TO_DRAIN=false``, or held :data:`~joiner.domain.nodeclaims.STUCK_DELETION_AFTER`
with no termination under way and its termination still unable to begin, it is removed; ``joiner uninstall`` (and ``make destroy``)
removes every one of them before the stack goes (:func:`remove_finalizers`), after marking
Joiner's objects with :data:`UNINSTALLING_ANNOTATION`: while a Node or mirror carries it, this
pass adds no finalizer and releases those it finds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain.model import Node
from joiner.domain.nodeclaims import TERMINATION_FINALIZER, UNINSTALLING_ANNOTATION, DeletionStep, deletion_step, uninstall_marked
from joiner.observability import logger
from joiner.ports import ClaimRecord, ClaimState, Ec2Error, JsonDict, KubernetesError
from joiner.services.cluster_state import parse_cached_node

if TYPE_CHECKING:
    from joiner.ports import KubernetesPort
    from joiner.services.context import Runtime

__all__ = [
    "DeletionResult",
    "handle_deletions",
    "remove_finalizers",
    "remove_uninstall_marker",
    "uninstall_marked",
    "UninstallResult",
    "DELETED_REASON",
    "UNINSTALLING_ANNOTATION",
    "CONFLICT_ATTEMPTS",
]

#: The termination reason of a node deleted by a user (Karpenter's NodeClaim deletion).
DELETED_REASON = "Deleted"


@dataclass
class DeletionResult:
    finalizers_added: list[str] = field(default_factory=list)
    finalizers_released: list[str] = field(default_factory=list)
    terminations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _meta(obj: JsonDict) -> JsonDict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def handle_deletions(runtime: Runtime, now: datetime, *, just_read: bool = False) -> DeletionResult:
    """Add, act on and release Joiner's finalizer on Nodes and NodeClaim mirrors. Errors are
    collected per object (one broken object never stops the others); read failures propagate.
    ``just_read``: this invocation read Nodes and mirrors through the cluster state moments
    ago (the disruption pass): use them as they are instead of catching up again."""
    from joiner.services.termination import TERMINATION_KIND

    result = DeletionResult()
    node_list = runtime.cluster_state.nodes(runtime.kube, parse_cached_node, refresh=not just_read)
    mirrors = runtime.cluster_state.node_claims(runtime.kube, refresh=not just_read)
    marked = uninstall_marked(node_list, mirrors.values())
    if marked:
        logger.info("delete to drain paused: joiner uninstall marked the cluster", extra={"annotation": UNINSTALLING_ANNOTATION, "objects": marked})
    enabled = runtime.settings.delete_to_drain and not marked
    claims = [c for c in runtime.state.open_claims() if c.state != ClaimState.CLOSED]
    by_id = {c.claim_id: c for c in claims}
    by_node = {c.node_name: c for c in claims if c.node_name}
    by_instance = {c.instance_id: c for c in claims if c.instance_id}
    terminating = {str(item.get("node")) for item in runtime.state.list_items(TERMINATION_KIND)}
    #: the Nodes being deleted, whole (a termination reads them), fetched by name; every
    #: other Node is seen in the container's cluster state (caught up from the changes since
    #: its last read), so a pass reads what changed, not the cluster
    nodes: dict[str, JsonDict] = {}
    #: claim id -> the Node its instance registered, recorded by the scanner or not yet: the
    #: kubelet registers the Node and pods bind to it before a scanner round records its name
    registered: dict[str, str] = {}
    for node in node_list:
        name = node.name
        claim = _claim_of(node, by_node, by_id, by_instance)
        if claim is not None:
            registered.setdefault(claim.claim_id, name)
        step = deletion_step(node.finalizers, node.deletion_time, managed=claim is not None, enabled=enabled, terminating=name in terminating, now=now)
        try:
            if step is DeletionStep.TERMINATE or step is DeletionStep.TERMINATE_OR_RELEASE:
                raw = runtime.kube.get_node(name)
                if raw is None or _time(_meta(raw).get("deletionTimestamp")) is None:
                    continue  # gone, or the kept state is behind: the next pass sees it
                nodes[name] = raw
                try:
                    _node_step(runtime, DeletionStep.TERMINATE, name, raw, claim, now, result)
                except (KubernetesError, Ec2Error) as error:
                    if step is DeletionStep.TERMINATE:
                        raise
                    result.errors.append(f"node {name}: held since {node.deletion_time}, its termination cannot begin: {error}")
                    _node_step(runtime, DeletionStep.RELEASE, name, None, claim, now, result)
            else:
                _node_step(runtime, step, name, None, claim, now, result)
        except (KubernetesError, Ec2Error) as error:
            result.errors.append(f"node {name}: {error}")

    for mirror in mirrors.values():
        meta = _meta(mirror)
        name = str(meta.get("name"))
        claim = by_id.get(str((meta.get("labels") or {}).get(wk.NODECLAIM)))
        node_name = (claim.node_name or registered.get(claim.claim_id)) if claim is not None else None
        step = deletion_step(
            meta.get("finalizers") or [],
            _time(meta.get("deletionTimestamp")),
            managed=claim is not None,
            enabled=enabled,
            terminating=bool(node_name and node_name in terminating),
            now=now,
        )
        try:
            if step is DeletionStep.ADD_FINALIZER or step is DeletionStep.RELEASE:
                _set_mirror_finalizer(runtime.kube, mirror, present=step is DeletionStep.ADD_FINALIZER)
                (result.finalizers_added if step is DeletionStep.ADD_FINALIZER else result.finalizers_released).append(f"nodeclaim/{name}")
            elif (step is DeletionStep.TERMINATE or step is DeletionStep.TERMINATE_OR_RELEASE) and claim is not None:
                try:
                    _terminate_claim(runtime, mirror, claim, node_name, nodes, now, result)
                except (KubernetesError, Ec2Error) as error:
                    if step is DeletionStep.TERMINATE:
                        raise
                    result.errors.append(f"nodeclaim {name}: held since {meta.get('deletionTimestamp')}, its termination cannot begin: {error}")
                    _set_mirror_finalizer(runtime.kube, mirror, present=False)
                    result.finalizers_released.append(f"nodeclaim/{name}")
        except (KubernetesError, Ec2Error) as error:
            result.errors.append(f"nodeclaim {name}: {error}")
    for message in result.errors:
        logger.warning("delete to drain failed", extra={"error": message})
    if result.finalizers_released:
        runtime.count("DeletionFinalizersReleased", len(result.finalizers_released))
    return result


def _claim_of(node: Node, by_node: Mapping[str, ClaimRecord], by_id: Mapping[str, ClaimRecord], by_instance: Mapping[str, ClaimRecord]) -> ClaimRecord | None:
    """The open claim a Node is of: the one that recorded its name, else the one its
    ``joiner.dev/nodeclaim`` label names, else the one of its instance (its providerID)."""
    return by_node.get(node.name) or by_id.get(str(node.labels.get(wk.NODECLAIM))) or (by_instance.get(node.instance_id) if node.instance_id else None)


def _terminate_claim(
    runtime: Runtime, mirror: JsonDict, claim: ClaimRecord, node_name: str | None, nodes: Mapping[str, JsonDict], now: datetime, result: DeletionResult
) -> None:
    """A deleted mirror's claim: its Node drained and terminated, or, with no Node yet, the
    instance terminated and the claim closed at once (nothing to drain)."""
    meta = _meta(mirror)
    claim_node = nodes.get(node_name or "") or (runtime.kube.get_node(node_name) if node_name else None)
    if claim_node is not None:
        _terminate(runtime, node_name or "", claim_node, claim, now, result, deleted_at=_time(meta.get("deletionTimestamp")))
    else:
        _terminate_unregistered(runtime, claim, now)
        _set_mirror_finalizer(runtime.kube, mirror, present=False)
        result.terminations.append(claim.claim_id)


def _node_step(
    runtime: Runtime, step: DeletionStep, name: str, node: JsonDict | None, claim: ClaimRecord | None, now: datetime, result: DeletionResult
) -> None:
    if step is DeletionStep.ADD_FINALIZER:
        runtime.kube.set_node_finalizer(name, TERMINATION_FINALIZER, True)
        result.finalizers_added.append(f"node/{name}")
    elif step is DeletionStep.RELEASE:
        runtime.kube.set_node_finalizer(name, TERMINATION_FINALIZER, False)
        result.finalizers_released.append(f"node/{name}")
    elif step is DeletionStep.TERMINATE and claim is not None and node is not None:
        _terminate(runtime, name, node, claim, now, result)


def _grace_deadline(runtime: Runtime, claim: ClaimRecord, deleted_at: datetime | None) -> datetime | None:
    """``deletionTimestamp`` plus the NodePool's ``terminationGracePeriod`` (none: PDBs are honoured without end)."""
    from joiner.domain.snapshot import SnapshotError, parse_node_pool

    if deleted_at is None:
        return None
    for raw in runtime.kube.list_node_pools():
        if _meta(raw).get("name") != claim.node_pool:
            continue
        try:
            grace = parse_node_pool(raw).termination_grace_period
        except SnapshotError:
            return None
        return deleted_at + grace if grace is not None else None
    return None


def _terminate(
    runtime: Runtime, name: str, node: JsonDict, claim: ClaimRecord, now: datetime, result: DeletionResult, *, deleted_at: datetime | None = None
) -> None:
    """Begin the node's termination with a replacement for its pods, as an interruption does.
    The NodePool's ``terminationGracePeriod`` counts from the earlier of the Node's deletion
    and ``deleted_at`` (the NodeClaim's, when the claim was deleted): Karpenter counts from
    the NodeClaim's deletion, so deleting only the NodeClaim bounds the drain too."""
    from joiner.services.replacement import ClusterView
    from joiner.services.termination import AlreadyRead, TerminationRequest, begin_termination

    deleted = [t for t in (_time(_meta(node).get("deletionTimestamp")), deleted_at) if t is not None]
    deadline = _grace_deadline(runtime, claim, min(deleted) if deleted else None)
    request = TerminationRequest(
        name,
        DELETED_REASON,
        deadline,
        instance_id=claim.instance_id,
        claim_id=claim.claim_id,
        node_pool=claim.node_pool,
        wait_for_replacement=True,
        urgent=False,
    )
    begin_termination(runtime, request, now, seen=AlreadyRead(node=node, claim=claim), replacements=ClusterView(runtime))
    result.terminations.append(name)


def _terminate_unregistered(runtime: Runtime, claim: ClaimRecord, now: datetime) -> None:
    """Close a claim whose instance has no Node (its mirror's finalizer is the caller's)."""
    from joiner.services.lifecycle import close_claim

    outcome = close_claim(runtime, claim, DELETED_REASON, now, path="deletion", mirror=False)
    if not outcome.owned:
        raise Ec2Error(f"instance {claim.instance_id} is not tagged as this cluster's: not terminated", code="NotOwned")


def _set_mirror_finalizer(kube: KubernetesPort, mirror: JsonDict, *, present: bool, annotations: Mapping[str, str | None] | None = None) -> bool:
    """Add or remove Joiner's finalizer on a NodeClaim mirror, other finalizers kept (and write
    ``annotations``, None removing one); conditional on the mirror's resourceVersion (custom
    resources take no strategic merge patch): a mirror written meanwhile answers 409. False
    when there was nothing to write or the mirror is gone."""
    meta = _meta(mirror)
    current = [str(f) for f in meta.get("finalizers") or []]
    wanted = [f for f in current if f != TERMINATION_FINALIZER] + ([TERMINATION_FINALIZER] if present else [])
    have = meta.get("annotations") or {}
    changed = {key: value for key, value in (annotations or {}).items() if have.get(key) != value}
    if wanted == current and not changed:
        return False
    patch: dict[str, Any] = {"metadata": {}}
    if wanted != current:
        patch["metadata"]["finalizers"] = wanted or None
    if changed:
        patch["metadata"]["annotations"] = changed
    if meta.get("resourceVersion"):
        patch["metadata"]["resourceVersion"] = meta["resourceVersion"]
    return kube.patch_node_claim(str(meta.get("name")), patch)


# ---------------------------------------------------------------- joiner uninstall

#: Writes of one object ``joiner uninstall`` tries, re-reading it after each 409 (a write
#: landed between its read and the conditional patch).
CONFLICT_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class UninstallResult:
    """What ``joiner uninstall`` changed (``kind/name``) and what it could not (``kind/name: error``)."""

    #: the finalizers removed (uninstall) or the objects the marker was removed from (undo)
    changed: tuple[str, ...] = ()
    #: the objects whose finalizer (undo: marker) is still there
    failed: tuple[str, ...] = ()
    #: the objects the marker could not be written on (their finalizer was still removed)
    unmarked: tuple[str, ...] = ()

    @property
    def failed_objects(self) -> tuple[str, ...]:
        return tuple(item.split(": ", 1)[0] for item in self.failed)


def _joiners_node(meta: JsonDict) -> bool:
    labels = meta.get("labels") or {}
    return TERMINATION_FINALIZER in (meta.get("finalizers") or []) or wk.NODEPOOL in labels or wk.NODECLAIM in labels


def remove_finalizers(kube: KubernetesPort, marked_at: datetime) -> UninstallResult:
    """``joiner uninstall``: remove Joiner's finalizer from every Node and NodeClaim mirror, so
    nothing Joiner can no longer act on holds a deletion.

    First :data:`UNINSTALLING_ANNOTATION` (``marked_at``) goes on Joiner's Nodes, so a Joiner
    still running (garbage collection, the disruption pass) adds no finalizer back; then each
    Node's finalizer is removed (a strategic merge patch), then each mirror's, in one
    conditional patch with the marker, re-read and retried after a 409 up to
    :data:`CONFLICT_ATTEMPTS` times. One object that cannot be changed never stops the others."""
    stamp = marked_at.isoformat()
    changed: list[str] = []
    failed: list[str] = []
    unmarked: list[str] = []
    node_metas = [_meta(node) for node in kube.list_nodes()]
    for meta in node_metas:
        name = str(meta.get("name"))
        if not _joiners_node(meta) or (meta.get("annotations") or {}).get(UNINSTALLING_ANNOTATION):
            continue
        try:
            kube.patch_node(name, {"metadata": {"annotations": {UNINSTALLING_ANNOTATION: stamp}}})
        except KubernetesError as error:
            if error.status != 404:
                unmarked.append(f"node/{name}: {error}")
    for meta in node_metas:
        name = str(meta.get("name"))
        if TERMINATION_FINALIZER not in (meta.get("finalizers") or []):
            continue
        try:
            if kube.set_node_finalizer(name, TERMINATION_FINALIZER, False):
                changed.append(f"node/{name}")
        except KubernetesError as error:
            failed.append(f"node/{name}: {error}")
    for mirror in kube.list_node_claims():
        name = str(_meta(mirror).get("name"))
        had = TERMINATION_FINALIZER in (_meta(mirror).get("finalizers") or [])
        try:
            if _retry_conflicts(kube, mirror, present=False, annotations={UNINSTALLING_ANNOTATION: stamp}) and had:
                changed.append(f"nodeclaim/{name}")
        except KubernetesError as error:
            (failed if had else unmarked).append(f"nodeclaim/{name}: {error}")
    for item in failed:
        logger.warning("finalizer not removed", extra={"object": item})
    return UninstallResult(tuple(changed), tuple(failed), tuple(unmarked))


def remove_uninstall_marker(kube: KubernetesPort) -> UninstallResult:
    """``joiner uninstall --undo``: remove :data:`UNINSTALLING_ANNOTATION` from every Node and
    NodeClaim mirror, so a Joiner still running adds its finalizers again at its next pass."""
    changed: list[str] = []
    failed: list[str] = []
    for node in kube.list_nodes():
        meta = _meta(node)
        name = str(meta.get("name"))
        if UNINSTALLING_ANNOTATION not in (meta.get("annotations") or {}):
            continue
        try:
            kube.patch_node(name, {"metadata": {"annotations": {UNINSTALLING_ANNOTATION: None}}})
            changed.append(f"node/{name}")
        except KubernetesError as error:
            if error.status != 404:
                failed.append(f"node/{name}: {error}")
    for mirror in kube.list_node_claims():
        meta = _meta(mirror)
        name = str(meta.get("name"))
        if UNINSTALLING_ANNOTATION not in (meta.get("annotations") or {}):
            continue
        present = TERMINATION_FINALIZER in (meta.get("finalizers") or [])
        try:
            if _retry_conflicts(kube, mirror, present=present, annotations={UNINSTALLING_ANNOTATION: None}):
                changed.append(f"nodeclaim/{name}")
        except KubernetesError as error:
            failed.append(f"nodeclaim/{name}: {error}")
    return UninstallResult(tuple(changed), tuple(failed))


def _retry_conflicts(kube: KubernetesPort, mirror: JsonDict, *, present: bool, annotations: Mapping[str, str | None]) -> bool:
    """:func:`_set_mirror_finalizer`, the mirror re-read after each 409 (at most
    :data:`CONFLICT_ATTEMPTS` writes); False when nothing was left to write or it is gone."""
    name = str(_meta(mirror).get("name"))
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return _set_mirror_finalizer(kube, mirror, present=present, annotations=annotations)
        except KubernetesError as error:
            if error.status != 409 or attempt == CONFLICT_ATTEMPTS:
                raise
            logger.info("nodeclaim changed meanwhile: read again", extra={"nodeclaim": name, "attempt": attempt})
        fresh = kube.get_node_claim(name)
        if fresh is None:
            return False
        mirror = fresh
    return False
