"""Keep the cluster's NodeClaim mirrors in step with the claims in DynamoDB.

:func:`sync_node_claims` reconciles: a mirror for every open claim (created, or patched where
it shows something else), none for a claim that is closed or gone. It is called after the
scanner's rounds, by the disruption pass (with its ``Drifted`` and ``Consolidatable``
findings) and by the garbage collector, so a mirror lags its claim by at most about a minute
and a failed write is repaired by the next call.

Best-effort by design: the mirror never blocks or fails a launch, a drain or a pass. Every
Kubernetes error is logged, counted (``NodeClaimMirrorErrors``) and left for the next sync;
a cluster without the NodeClaim CRD simply has no mirrors. Writes per call are bounded in
number (:data:`MAX_WRITES_PER_SYNC`) and time (:data:`MAX_SYNC_SECONDS`).

Ordering makes deletion safe against a concurrent launch: the mirrors are listed *before*
the claims are read (a strongly consistent scan), and a mirror is only ever created after
its claim was written, so every mirror listed whose claim is not open belongs to a claim
that was closed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from joiner.domain.nodeclaims import (
    TERMINATION_FINALIZER,
    MirrorCondition,
    mirror_name,
    node_claim_object,
    status_differs,
    with_conditions,
)
from joiner.ports import ClaimRecord, JsonDict, KubernetesError, StateError
from joiner.services.context import Runtime

__all__ = ["MAX_SYNC_SECONDS", "MAX_WRITES_PER_SYNC", "MirrorSync", "sync_node_claims"]

log = logging.getLogger("joiner.nodeclaims")

#: Bounds one call's Kubernetes writes; what is left is done by the next call.
MAX_WRITES_PER_SYNC = 200
#: ... and its time: a slow or failing API server (each call retried with backoff) must not
#: hold the scanner's next round back for long.
MAX_SYNC_SECONDS = 5.0


@dataclass(frozen=True)
class MirrorSync:
    """What one reconciliation did."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    errors: int = 0
    skipped: str = ""


def sync_node_claims(
    runtime: Runtime,
    *,
    findings: Mapping[str, Sequence[MirrorCondition]] | None = None,
    claims: Sequence[ClaimRecord] | None = None,
) -> MirrorSync:
    """Reconcile the NodeClaim mirrors with the open claims. ``findings``: extra conditions
    by claim id (the disruption pass's ``Drifted``/``Consolidatable``), merged into the
    mirror's conditions. ``claims``: the open claims when the caller just read them (they
    must have been read *after* this call lists the mirrors, so pass them only if fresh:
    by default they are read here). Never raises."""
    try:
        existing = {str((m.get("metadata") or {}).get("name")): m for m in runtime.kube.list_node_claims()}
    except KubernetesError as error:
        log.warning("nodeclaim mirrors: cannot list them: %s", error)
        runtime.count("NodeClaimMirrorErrors", operation="list")
        return MirrorSync(errors=1, skipped=f"list failed: {error}")
    try:
        open_claims = list(claims) if claims is not None else runtime.state.open_claims()
        pools = {str((p.get("metadata") or {}).get("name")): p for p in runtime.kube.list_node_pools()}
    except (KubernetesError, StateError) as error:
        log.warning("nodeclaim mirrors: cannot read claims or NodePools: %s", error)
        runtime.count("NodeClaimMirrorErrors", operation="read")
        return MirrorSync(errors=1, skipped=f"read failed: {error}")

    created = updated = deleted = errors = writes = 0
    started = time.monotonic()

    def exhausted() -> bool:
        return writes >= MAX_WRITES_PER_SYNC or time.monotonic() - started > MAX_SYNC_SECONDS

    wanted: set[str] = set()
    for claim in sorted(open_claims, key=lambda c: (c.created_at, c.claim_id)):
        name = mirror_name(claim.claim_id)
        wanted.add(name)
        if exhausted():
            continue
        current = existing.get(name)
        kept = ((current or {}).get("status") or {}).get("conditions") or []
        if findings and claim.claim_id in findings:
            kept = with_conditions(kept, findings[claim.claim_id])
        desired = node_claim_object(claim, pools.get(claim.node_pool), kept)
        try:
            if current is None:
                writes += 1
                created_object = {k: v for k, v in desired.items() if k != "status"}
                if runtime.settings.delete_to_drain:  # kubectl delete drains through it (joiner.services.deletion)
                    created_object["metadata"] = dict(created_object["metadata"], finalizers=[TERMINATION_FINALIZER])
                runtime.kube.create_node_claim(created_object)
                writes += 1
                runtime.kube.patch_node_claim(name, {"status": desired["status"]}, status=True)
                created += 1
                continue
            changed = False
            if _spec_or_meta_differs(current, desired):
                writes += 1
                runtime.kube.patch_node_claim(name, {"metadata": {k: desired["metadata"][k] for k in ("labels", "annotations", "ownerReferences")
                                                                  if k in desired["metadata"]},
                                                     "spec": desired["spec"]})
                changed = True
            if status_differs(current, desired):
                writes += 1
                runtime.kube.patch_node_claim(name, {"status": desired["status"]}, status=True)
                changed = True
            updated += changed
        except KubernetesError as error:
            errors += 1
            log.warning("nodeclaim mirrors: cannot write %s: %s", name, error)
            runtime.count("NodeClaimMirrorErrors", operation="write")

    for name, mirror in sorted(existing.items()):
        if name in wanted or exhausted():
            continue
        writes += 1
        try:
            meta = mirror.get("metadata") or {}
            finalizers = [f for f in meta.get("finalizers") or [] if f != TERMINATION_FINALIZER]
            if len(finalizers) != len(meta.get("finalizers") or []):  # the claim is closed: nothing left to drain
                runtime.kube.patch_node_claim(name, {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta.get("resourceVersion")}})
            runtime.kube.delete_node_claim(name, uid=meta.get("uid"))
            deleted += 1
        except KubernetesError as error:
            errors += 1
            log.warning("nodeclaim mirrors: cannot delete %s: %s", name, error)
            runtime.count("NodeClaimMirrorErrors", operation="delete")
    if created or updated or deleted:
        log.info("nodeclaim mirrors: %d created, %d updated, %d deleted", created, updated, deleted)
    return MirrorSync(created, updated, deleted, errors)


def _spec_or_meta_differs(current: JsonDict, desired: JsonDict) -> bool:
    if (current.get("spec") or {}) != desired["spec"]:
        return True
    meta, want = current.get("metadata") or {}, desired["metadata"]
    return any((meta.get(key) or None) != (want.get(key) or None) for key in ("labels", "ownerReferences")) or any(
        (meta.get("annotations") or {}).get(key) != value for key, value in (want.get("annotations") or {}).items())
