"""Keep the cluster's NodeClaim mirrors in step with the claims in DynamoDB.

Two ways, both best-effort (a mirror never blocks or fails a launch, a drain or a pass: every
error is logged, counted as ``NodeClaimMirrorErrors`` and left for the next write):

* :func:`mirror_claim` writes one claim's mirror when the claim changes: launched
  (provisioning), registered and initialized (registration), ``Disrupting`` when a
  termination begins (with its reason; the disruption pass adds its method's why),
  ``Terminated`` and deleted when the claim is closed. Each change is also an Event on the
  NodeClaim, so ``kubectl describe nodeclaim`` tells the claim's story.
* :func:`sync_node_claims` reconciles them all: a mirror for every open claim (created, or
  patched where it shows something else), none for a claim that is closed or gone. It runs
  after the scanner's rounds, in the disruption pass (with its ``Drifted`` and
  ``Consolidatable`` findings) and in the garbage collector: it repairs what a failed write
  left and catches up a cluster whose mirrors are missing (the CRD installed on a running
  cluster). Its writes are paced at :data:`MIRROR_WRITE_QPS` (client-side, as client-go's
  rate limiter) and bounded by time: briefly after a scanner round (:data:`MAX_SYNC_SECONDS`,
  a wake-up for pending pods waits for it), longer in the disruption pass and gc
  (:data:`CATCH_UP_SYNC_SECONDS`). A 5,000-node cluster's 10,000 writes (create, then status)
  take the first minute's syncs (7,000) and the second's. Each sync starts at a random place
  in the claims, so two syncs running at once mostly write different mirrors.

Ordering makes deletion safe against a concurrent launch: the mirrors are listed *before*
the claims are read (a strongly consistent scan), and a mirror is only ever created after
its claim was written, so every mirror listed whose claim is not open belongs to a claim
that was closed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from joiner.domain.nodeclaims import (
    TERMINATION_FINALIZER,
    MirrorCondition,
    MirrorEvent,
    involved_object,
    mirror_name,
    node_claim_object,
    status_differs,
    terminated_event,
    transition_events,
    uninstall_marked,
)
from joiner.observability import logger
from joiner.ports import ClaimRecord, ClaimState, JsonDict, KubernetesError, StateError

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = ["CATCH_UP_SYNC_SECONDS", "MAX_SYNC_SECONDS", "MIRROR_WRITE_BURST", "MIRROR_WRITE_QPS", "MirrorSync", "mirror_claim", "sync_node_claims"]

#: Writes a second a sync sends at most. Karpenter's client defaults to 200 QPS (burst 300);
#: one sequential client holds a single seat of the API server's priority-and-fairness
#: concurrency (``workload-low``, where a workload's service account or IAM-mapped user
#: lands, has hundreds by default), so this is a courtesy to the API server, not a limit
#: it enforces.
MIRROR_WRITE_QPS = 200.0
#: Writes sent without waiting before the pace applies (a few claims' changes never wait).
MIRROR_WRITE_BURST = 100
#: A sync's time for writing by default: the scanner's, whose next round (a watcher's wake-up
#: for pending pods) waits for it. What is left is done by the next sync.
MAX_SYNC_SECONDS = 5.0
#: ... and that of the disruption pass (every minute) and the garbage collector, which nothing
#: waits for (a quarter of their 120 s timeout): they catch a cluster's mirrors up.
CATCH_UP_SYNC_SECONDS = 30.0
#: What a sync logs when a write to a mirror of no open claim (delete) or, while uninstalling,
#: to an open claim's (release its finalizer) fails.
_CANNOT = {"delete": "nodeclaim mirrors: cannot delete one", "release": "nodeclaim mirrors: cannot release a finalizer"}
#: The NodePools mirrors name as their owners, cached briefly (runtime.resolved, a minute).
_POOLS_KEY = ("nodeclaim-mirrors", "node-pools")


@dataclass(frozen=True)
class MirrorSync:
    """What one reconciliation did."""

    created: int = 0
    updated: int = 0
    deleted: int = 0
    errors: int = 0
    skipped: str = ""
    #: writes not done for lack of time (the next sync does them)
    deferred: int = 0


class _Pacer:
    """Client-side rate limit (a token bucket): at most ``qps`` writes a second after ``burst``."""

    def __init__(self, qps: float, burst: int) -> None:
        self.interval = 1.0 / qps if qps > 0 else 0.0
        self.tolerance = max(0, burst - 1) * self.interval
        self.due = time.monotonic()  # when the next write is due at the steady pace

    def wait(self) -> None:
        now = time.monotonic()
        self.due = max(self.due, now)
        delay = self.due - now - self.tolerance
        if delay > 0:
            time.sleep(delay)
        self.due += self.interval


def _node_pools(runtime: Runtime, *, fresh: list[JsonDict] | None = None) -> dict[str, JsonDict]:
    """The NodePools (raw JSON) by name, read at most once a minute per execution environment."""
    now = runtime.clock.now()
    if fresh is None:
        cached: dict[str, JsonDict] | None = runtime.resolved.get(_POOLS_KEY, now)
        if cached is not None:
            return cached
        fresh = runtime.kube.list_node_pools()
    pools = {str((p.get("metadata") or {}).get("name")): p for p in fresh}
    runtime.resolved.put(_POOLS_KEY, pools, now)
    return pools


def _conditions(mirror: Mapping[str, Any] | None) -> list[Any]:
    found = ((mirror or {}).get("status") or {}).get("conditions")
    return list(found) if isinstance(found, list) else []


def _finalize_new_mirrors(runtime: Runtime, mirrors: Iterable[JsonDict]) -> bool:
    """Whether a mirror created now gets Joiner's finalizer (so ``kubectl delete`` drains
    through it, :mod:`joiner.services.deletion`): not with delete-to-drain off, nor while
    ``joiner uninstall`` has marked the cluster (any Node this container read, or any of
    ``mirrors``, carries :data:`~joiner.domain.nodeclaims.UNINSTALLING_ANNOTATION`)."""
    if not runtime.settings.delete_to_drain:
        return False
    nodes, _ = runtime.cluster_state.known()
    return not uninstall_marked(nodes, mirrors)


def _finalize_new_mirror(runtime: Runtime) -> bool:
    """:func:`_finalize_new_mirrors` for one mirror created outside a sync, from what this
    container read, without reading what grows with the cluster: its mirrors may predate an
    uninstall, but ``joiner uninstall`` marks every mirror, so one of them read again tells (one
    GET). A container that never listed them decides from its Nodes alone; a finalizer it adds
    after an uninstall is released by the scanner's sync or the next delete-to-drain pass, which
    see the marker."""
    if not runtime.settings.delete_to_drain:
        return False
    nodes, known = runtime.cluster_state.known()
    if uninstall_marked(nodes, known.values()):
        return False
    name = min(known, default=None)
    probe = runtime.kube.get_node_claim(name) if name is not None else None
    return probe is None or not uninstall_marked((), (probe,))


def _write(
    runtime: Runtime, name: str, current: JsonDict | None, desired: JsonDict, pace: _Pacer | None = None, *, finalize: Callable[[], bool]
) -> tuple[JsonDict | None, str]:
    """Create ``desired`` or bring ``current`` to it: (the mirror as written, or None when
    someone else created it meanwhile; ``created``, ``updated`` or ``""``). ``finalize``:
    asked only when creating, whether the new mirror gets Joiner's finalizer."""
    kube = runtime.kube

    def paced() -> None:
        if pace is not None:
            pace.wait()

    if current is None:
        paced()
        created_object = {k: v for k, v in desired.items() if k != "status"}
        if finalize():
            created_object["metadata"] = dict(created_object["metadata"], finalizers=[TERMINATION_FINALIZER])
        created = kube.create_node_claim(created_object)
        if created is None:
            return None, ""
        paced()
        kube.patch_node_claim(name, {"status": desired["status"]}, status=True)
        return created, "created"
    changed = ""
    if _spec_or_meta_differs(current, desired):
        paced()
        kube.patch_node_claim(
            name,
            {
                "metadata": {k: desired["metadata"][k] for k in ("labels", "annotations", "ownerReferences") if k in desired["metadata"]},
                "spec": desired["spec"],
            },
        )
        changed = "updated"
    if status_differs(current, desired):
        paced()
        kube.patch_node_claim(name, {"status": desired["status"]}, status=True)
        changed = "updated"
    return current, changed


def _meta_of(mirror: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = mirror.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _release_finalizer(runtime: Runtime, name: str, mirror: JsonDict) -> None:
    """Remove Joiner's finalizer from a mirror (others kept), conditional on its resourceVersion."""
    meta = _meta_of(mirror)
    finalizers = [f for f in meta.get("finalizers") or [] if f != TERMINATION_FINALIZER]
    if len(finalizers) != len(meta.get("finalizers") or []):
        runtime.kube.patch_node_claim(name, {"metadata": {"finalizers": finalizers or None, "resourceVersion": meta.get("resourceVersion")}})


def _delete_mirror(runtime: Runtime, name: str, mirror: JsonDict) -> None:
    """Delete the mirror of a closed claim, releasing Joiner's finalizer first (nothing is left
    to drain, and the deletion must not wait on it)."""
    _release_finalizer(runtime, name, mirror)
    runtime.kube.delete_node_claim(name, uid=_meta_of(mirror).get("uid"))


def mirror_claim(runtime: Runtime, claim: ClaimRecord | str | None, *, condition: MirrorCondition | None = None, event: MirrorEvent | None = None) -> bool:
    """Write ``claim``'s mirror now (a claim id is read first; None does nothing): created or
    brought up to date, with ``condition`` applied over what the claim implies; a closed
    claim's mirror gets its ``Terminated`` Event and is deleted. Every condition that turned
    ``True`` (Launched, Registered, Initialized, Disrupting) and ``event`` are recorded as
    Events on the NodeClaim. True when the mirror shows the claim. Never raises."""
    claim_id = claim if isinstance(claim, str) else claim.claim_id if claim is not None else None
    if not claim_id:
        return False
    try:
        return _mirror_claim(runtime, claim if isinstance(claim, ClaimRecord) else runtime.state.get_claim(claim_id), condition, event)
    except Exception as error:  # noqa: BLE001 - a mirror never fails a launch, a drain or a pass
        logger.warning("nodeclaim mirror not written", extra={"claim": claim_id, "error": f"{type(error).__name__}: {error}"})
        runtime.count("NodeClaimMirrorErrors", operation="mirror")
        return False


def _mirror_claim(runtime: Runtime, claim: ClaimRecord | None, condition: MirrorCondition | None, event: MirrorEvent | None) -> bool:
    if claim is None:
        return False
    kube = runtime.kube
    name = mirror_name(claim.claim_id)
    current = kube.get_node_claim(name)
    extra = [event] if event is not None else []
    if claim.state == ClaimState.CLOSED:
        if current is not None:
            _record(runtime, current, [terminated_event(claim), *extra])
            _delete_mirror(runtime, name, current)
        return True
    now = runtime.clock.now()
    updates = (condition,) if condition is not None else ()
    desired = node_claim_object(claim, _node_pools(runtime).get(claim.node_pool), _conditions(current), now=now, updates=updates)
    try:
        mirror, _ = _write(runtime, name, current, desired, finalize=lambda: _finalize_new_mirror(runtime))
    except KubernetesError as error:
        if current is None and error.status == 404:
            return False  # no NodeClaim CRD in this cluster: no mirrors
        raise
    if mirror is None:  # created by a concurrent writer since the read: bring that one up to date
        current = kube.get_node_claim(name)
        if current is None:
            return False
        desired = node_claim_object(claim, _node_pools(runtime).get(claim.node_pool), _conditions(current), now=now, updates=updates)
        mirror, _ = _write(runtime, name, current, desired, finalize=lambda: False)
        assert mirror is not None
    before = _conditions(current) if current is not None else None
    _record(runtime, mirror, [*transition_events(before, desired["status"]["conditions"]), *extra])
    return True


def _record(runtime: Runtime, mirror: JsonDict, events: Sequence[MirrorEvent]) -> None:
    involved = involved_object(mirror)
    for item in events:
        runtime.kube.create_event(involved, item.reason, item.message, item.type.value)


def sync_node_claims(
    runtime: Runtime,
    *,
    findings: Mapping[str, Sequence[MirrorCondition]] | None = None,
    claims: Sequence[ClaimRecord] | None = None,
    seconds: float | None = None,
) -> MirrorSync:
    """Reconcile the NodeClaim mirrors with the open claims. ``findings``: extra conditions
    by claim id (the disruption pass's ``Drifted``/``Consolidatable``), merged into the
    mirror's conditions. ``claims``: the open claims when the caller just read them (they
    must have been read *after* this call lists the mirrors, so pass them only if fresh:
    by default they are read here). ``seconds``: the time for writing (default
    :data:`MAX_SYNC_SECONDS`). Never raises."""
    try:
        existing = runtime.cluster_state.node_claims(runtime.kube)
    except KubernetesError as error:
        logger.warning("nodeclaim mirrors: cannot list them", extra={"error": str(error)})
        runtime.count("NodeClaimMirrorErrors", operation="list")
        return MirrorSync(errors=1, skipped=f"list failed: {error}")
    try:
        open_claims = list(claims) if claims is not None else runtime.state.open_claims()
        pools = _node_pools(runtime, fresh=runtime.kube.list_node_pools())
    except (KubernetesError, StateError) as error:
        logger.warning("nodeclaim mirrors: cannot read claims or NodePools", extra={"error": str(error)})
        runtime.count("NodeClaimMirrorErrors", operation="read")
        return MirrorSync(errors=1, skipped=f"read failed: {error}")

    created = updated = deleted = errors = deferred = 0
    started = time.monotonic()
    pace = _Pacer(MIRROR_WRITE_QPS, MIRROR_WRITE_BURST)
    now = runtime.clock.now()

    budget = MAX_SYNC_SECONDS if seconds is None else seconds

    def exhausted() -> bool:
        return time.monotonic() - started > budget

    ordered = sorted(open_claims, key=lambda c: (c.created_at, c.claim_id))
    start = random.randrange(len(ordered)) if ordered else 0
    wanted = {mirror_name(claim.claim_id) for claim in ordered}
    finalize_new = _finalize_new_mirrors(runtime, existing.values())

    for claim in ordered[start:] + ordered[:start]:
        name = mirror_name(claim.claim_id)
        current = existing.get(name)
        updates = findings.get(claim.claim_id, ()) if findings else ()
        desired = node_claim_object(claim, pools.get(claim.node_pool), _conditions(current), now=now, updates=updates)
        if current is not None and not _spec_or_meta_differs(current, desired) and not status_differs(current, desired):
            continue
        if exhausted():
            deferred += 1
            continue
        try:
            _, change = _write(runtime, name, current, desired, pace, finalize=lambda: finalize_new)
            created += change == "created"
            updated += change == "updated"
        except KubernetesError as error:
            errors += 1
            logger.warning("nodeclaim mirrors: cannot write one", extra={"nodeclaim": name, "error": str(error)})
            runtime.count("NodeClaimMirrorErrors", operation="write")

    uninstalling = runtime.settings.delete_to_drain and not finalize_new  # joiner uninstall marked the cluster
    for name, mirror in sorted(existing.items()):
        if name in wanted:  # an open claim's: its finalizer goes while uninstalling
            if not uninstalling or TERMINATION_FINALIZER not in (_meta_of(mirror).get("finalizers") or []):
                continue
            operation = "release"
        elif exhausted():
            deferred += 1
            continue
        else:
            operation = "delete"
        pace.wait()
        try:
            if operation == "release":
                _release_finalizer(runtime, name, mirror)
                updated += 1
            else:
                _delete_mirror(runtime, name, mirror)
                deleted += 1
        except KubernetesError as error:
            errors += 1
            logger.warning(_CANNOT[operation], extra={"nodeclaim": name, "error": str(error)})
            runtime.count("NodeClaimMirrorErrors", operation=operation)
    if created or updated or deleted or deferred:
        logger.info(
            "nodeclaim mirrors synced", extra={"mirrors_created": created, "mirrors_updated": updated, "mirrors_deleted": deleted, "deferred": deferred}
        )
    return MirrorSync(created, updated, deleted, errors, deferred=deferred)


def _spec_or_meta_differs(current: JsonDict, desired: JsonDict) -> bool:
    if (current.get("spec") or {}) != desired["spec"]:
        return True
    meta, want = current.get("metadata") or {}, desired["metadata"]
    return any((meta.get(key) or None) != (want.get(key) or None) for key in ("labels", "ownerReferences")) or any(
        (meta.get("annotations") or {}).get(key) != value for key, value in (want.get("annotations") or {}).items()
    )
