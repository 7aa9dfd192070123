"""Delete to drain: ``kubectl delete nodeclaim NAME`` / ``kubectl delete node NAME`` as in Karpenter.

Joiner puts :data:`~joiner.domain.nodeclaims.TERMINATION_FINALIZER` on the Nodes of its open
claims and on their NodeClaim mirrors. A deletion then only sets ``deletionTimestamp``; this
pass (run by every garbage collection and every disruption pass) sees it and starts the
node's termination as an interruption does: cordon, a replacement when its pods need one,
a drain honouring PDBs until the NodePool's ``terminationGracePeriod``, the instance
terminated, the Node's finalizer removed and the Node deleted
(:func:`joiner.services.termination.begin_termination`). The mirror's finalizer is removed
when its claim is closed (:func:`joiner.services.nodeclaims.sync_node_claims`).

A finalizer never outlives Joiner's ability to act on it
(:func:`~joiner.domain.nodeclaims.deletion_step`): on objects Joiner does not manage, with
``JOINER_DELETE_TO_DRAIN=false``, or held :data:`~joiner.domain.nodeclaims.STUCK_DELETION_AFTER`
with no termination under way, it is removed; ``joiner uninstall`` (and ``make destroy``)
removes every one of them before the stack goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain.model import Node
from joiner.domain.nodeclaims import TERMINATION_FINALIZER, DeletionStep, deletion_step
from joiner.domain.snapshot import SnapshotError, parse_node
from joiner.observability import logger
from joiner.ports import ClaimRecord, ClaimState, Ec2Error, JsonDict, KubernetesError

if TYPE_CHECKING:
    from joiner.ports import KubernetesPort
    from joiner.services.context import Runtime

__all__ = ["DeletionResult", "handle_deletions", "remove_finalizers", "DELETED_REASON"]

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
    enabled = runtime.settings.delete_to_drain
    claims = [c for c in runtime.state.open_claims() if c.state != ClaimState.CLOSED]
    by_id = {c.claim_id: c for c in claims}
    by_node = {c.node_name: c for c in claims if c.node_name}
    terminating = {str(item.get("node")) for item in runtime.state.list_items(TERMINATION_KIND)}
    #: the Nodes being deleted, whole (a termination reads them), fetched by name; every
    #: other Node is seen in the container's cluster state (caught up from the changes since
    #: its last read), so a pass reads what changed, not the cluster
    nodes: dict[str, JsonDict] = {}
    for node in runtime.cluster_state.nodes(runtime.kube, _parse_node, refresh=not just_read):
        name = node.name
        claim = by_node.get(name) or by_id.get(str(node.labels.get(wk.NODECLAIM)))
        step = deletion_step(node.finalizers, node.deletion_time, managed=claim is not None,
                             enabled=enabled, terminating=name in terminating, now=now)
        try:
            if step is DeletionStep.TERMINATE:
                raw = runtime.kube.get_node(name)
                if raw is None or _time(_meta(raw).get("deletionTimestamp")) is None:
                    continue  # gone, or the kept state is behind: the next pass sees it
                nodes[name] = raw
                _node_step(runtime, step, name, raw, claim, now, result)
            else:
                _node_step(runtime, step, name, None, claim, now, result)
        except (KubernetesError, Ec2Error) as error:
            result.errors.append(f"node {name}: {error}")

    for mirror in runtime.cluster_state.node_claims(runtime.kube, refresh=not just_read).values():
        meta = _meta(mirror)
        name = str(meta.get("name"))
        claim = by_id.get(str((meta.get("labels") or {}).get(wk.NODECLAIM)))
        node_name = claim.node_name if claim is not None else None
        step = deletion_step(meta.get("finalizers") or [], _time(meta.get("deletionTimestamp")), managed=claim is not None,
                             enabled=enabled, terminating=bool(node_name and node_name in terminating), now=now)
        try:
            if step is DeletionStep.ADD_FINALIZER or step is DeletionStep.RELEASE:
                _set_mirror_finalizer(runtime.kube, mirror, present=step is DeletionStep.ADD_FINALIZER)
                (result.finalizers_added if step is DeletionStep.ADD_FINALIZER else result.finalizers_released).append(f"nodeclaim/{name}")
            elif step is DeletionStep.TERMINATE and claim is not None:
                claim_node = nodes.get(node_name or "") or (runtime.kube.get_node(node_name) if node_name else None)
                if claim_node is not None:
                    _terminate(runtime, node_name or "", claim_node, claim, now, result)
                else:  # launched, no Node yet: nothing to drain
                    _terminate_unregistered(runtime, claim, now)
                    _set_mirror_finalizer(runtime.kube, mirror, present=False)
                    result.terminations.append(claim.claim_id)
        except (KubernetesError, Ec2Error) as error:
            result.errors.append(f"nodeclaim {name}: {error}")
    for message in result.errors:
        logger.warning("delete to drain failed", extra={"error": message})
    if result.finalizers_released:
        runtime.count("DeletionFinalizersReleased", len(result.finalizers_released))
    return result


def _parse_node(obj: JsonDict) -> Node | None:
    """The Node the cluster state keeps (as every pass parses it); None when it is invalid
    (the planning passes report those)."""
    try:
        return parse_node(obj)
    except SnapshotError:
        return None


def _node_step(runtime: Runtime, step: DeletionStep, name: str, node: JsonDict | None, claim: ClaimRecord | None, now: datetime,
               result: DeletionResult) -> None:
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


def _terminate(runtime: Runtime, name: str, node: JsonDict, claim: ClaimRecord, now: datetime, result: DeletionResult) -> None:
    """Begin the node's termination with a replacement for its pods, as an interruption does."""
    from joiner.domain.termination import reschedulable_pods
    from joiner.services.interruption import ClusterView
    from joiner.services.termination import begin_termination, parse_node_pods

    view = ClusterView(runtime)
    view.disrupted.add(name)

    def replace_pods(pods_raw: Sequence[JsonDict]) -> tuple[str, ...]:
        pending = reschedulable_pods(parse_node_pods(pods_raw)[0])
        if not pending:
            return ()
        try:
            return tuple(view.launch_replacement(pending, now))
        except Exception as error:  # noqa: BLE001 - the drain goes ahead; the scanner provisions for the pods
            runtime.count("ReplacementFailed", kind=DELETED_REASON)
            logger.warning("replacement for a deleted node failed", extra={"error": str(error)})
            return ()

    deadline = _grace_deadline(runtime, claim, _time(_meta(node).get("deletionTimestamp")))
    begin_termination(
        runtime, name, DELETED_REASON, deadline, now, instance_id=claim.instance_id, claim_id=claim.claim_id,
        node_pool=claim.node_pool, wait_for_replacement=True, node=node, claim=claim, replace_pods=replace_pods, urgent=False,
    )
    result.terminations.append(name)


def _terminate_unregistered(runtime: Runtime, claim: ClaimRecord, now: datetime) -> None:
    if claim.instance_id:
        try:
            runtime.ec2.terminate_instances([claim.instance_id])
        except Ec2Error as error:
            if error.code not in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
                raise
    runtime.state.update_claim(claim.claim_id, state=ClaimState.CLOSED, closed_at=now, reason=DELETED_REASON)
    runtime.state.release_capacity(claim.node_pool, claim.claim_id)


def _set_mirror_finalizer(kube: KubernetesPort, mirror: JsonDict, *, present: bool) -> None:
    """Add or remove Joiner's finalizer on a NodeClaim mirror, other finalizers kept; conditional
    on the mirror's resourceVersion (custom resources take no strategic merge patch)."""
    meta = _meta(mirror)
    current = [str(f) for f in meta.get("finalizers") or []]
    wanted = [f for f in current if f != TERMINATION_FINALIZER] + ([TERMINATION_FINALIZER] if present else [])
    if wanted == current:
        return
    patch: dict[str, Any] = {"metadata": {"finalizers": wanted or None}}
    if meta.get("resourceVersion"):
        patch["metadata"]["resourceVersion"] = meta["resourceVersion"]
    kube.patch_node_claim(str(meta.get("name")), patch)


def remove_finalizers(kube: KubernetesPort) -> list[str]:
    """Remove Joiner's finalizer from every Node and NodeClaim mirror (``joiner uninstall``):
    nothing Joiner can no longer act on may hold a deletion. Returns what it changed."""
    removed = []
    for node in kube.list_nodes():
        meta = _meta(node)
        if TERMINATION_FINALIZER in (meta.get("finalizers") or []):
            kube.set_node_finalizer(str(meta.get("name")), TERMINATION_FINALIZER, False)
            removed.append(f"node/{meta.get('name')}")
    for mirror in kube.list_node_claims():
        meta = _meta(mirror)
        if TERMINATION_FINALIZER in (meta.get("finalizers") or []):
            _set_mirror_finalizer(kube, mirror, present=False)
            removed.append(f"nodeclaim/{meta.get('name')}")
    return removed
