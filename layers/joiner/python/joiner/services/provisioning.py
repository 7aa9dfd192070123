"""Provisioning, the scanner: pending pods -> node claims -> EC2 Fleet launches, one round at a time.

A round (:func:`provision`):

1. takes the cluster's ``provisioning`` lease (a DynamoDB conditional write), so two
   overlapping scanner invocations never plan the same pods at once;
2. reads the cluster and the state (:class:`~joiner.services.planning_round.PlanningRound`:
   pods, Nodes, DaemonSets, RuntimeClasses, NodePools, NodeClasses, open claims and
   unavailable offerings) and runs :mod:`joiner.services.registration` on them;
3. settles orphaned claims (a round that died between reserving and launching) and plans
   with the scheduling core: launched-but-unregistered claims are capacity
   (:class:`~joiner.domain.model.InFlightClaim`) and count against limits;
4. launches the plan (:mod:`joiner.services.launcher`: claim ids from the pods, limit
   reservations before any EC2 call, one ``instant`` CreateFleet per claim, capacity errors
   re-planned at once without the failed offerings);
5. brings static NodePools up to their replicas (:mod:`joiner.services.static_pools`);
6. explains every pod it cannot place with a ``FailedScheduling`` event carrying the
   planner's reason, and writes metrics and NodePool, NodeClass and NodeOverlay status
   (:mod:`joiner.services.pool_status`).

:func:`run_scanner` runs rounds for one scanner invocation: ``economy`` mode runs one,
``responsive`` mode keeps polling for about a minute and batches bursts of new pods.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain.model import OfferingKey, UnschedulablePod
from joiner.observability import logger
from joiner.ports import ClaimRecord, ClaimState, ClaimStateConflict, Ec2Error, InstanceRecord, KubernetesError
from joiner.services.launcher import LaunchedClaim, Launcher, LaunchFailure, launch_all, offering_prices
from joiner.services.leases import RenewingLease
from joiner.services.lifecycle import advance
from joiner.services.nomination import nominate_for_registering_nodes
from joiner.services.planning_round import PlanningRound
from joiner.services.pool_status import write_statuses
from joiner.services.registration import RegistrationResult, reconcile_registration
from joiner.services.static_pools import provision_static

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = [
    "LEASE_NAME",
    "LEASE_TTL_SECONDS",
    "ORPHAN_AFTER",
    "RoundResult",
    "ScanSummary",
    "provision",
    "run_scanner",
]

LEASE_NAME = "provisioning"
#: A round renews the lease; a crashed holder blocks others for at most this long.
LEASE_TTL_SECONDS = 60
#: A round renews its lease this often (wall clock) while launching.
LEASE_RENEW_SECONDS = 20
#: A ``reserved`` claim this old belongs to a round that died between reserving and
#: recording its launch. Must exceed the scanner function's timeout (no round outlives it).
ORPHAN_AFTER = timedelta(minutes=3)


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class RoundResult:
    """What one provisioning round did (tests and the handler summary read it)."""

    ran: bool = True
    skipped_reason: str = ""
    pending_pods: int = 0
    pending_pod_uids: frozenset[str] = frozenset()
    launched: tuple[LaunchedClaim, ...] = ()
    #: claims already launched (or being launched) for these exact pods: nothing new started
    existing_claims: tuple[str, ...] = ()
    failures: tuple[LaunchFailure, ...] = ()
    #: every pod reported with FailedScheduling this round, with the reason
    unschedulable: tuple[UnschedulablePod, ...] = ()
    capacity_errors: tuple[OfferingKey, ...] = ()
    plans: int = 0
    registration: RegistrationResult = RegistrationResult()
    #: pod key -> the registering node this round nominated it to
    nominated: Mapping[str, str] = field(default_factory=dict)
    invalid_objects: tuple[str, ...] = ()
    orphans_closed: tuple[str, ...] = ()
    orphans_adopted: tuple[str, ...] = ()
    read_seconds: float = 0.0
    plan_seconds: float = 0.0
    launch_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def decision_seconds(self) -> float:
        """Read state -> plan -> launch requests answered."""
        return self.read_seconds + self.plan_seconds + self.launch_seconds

    def reason_for(self, pod_key: str) -> str | None:
        for item in self.unschedulable:
            if item.pod == pod_key:
                return item.reason
        return None


@dataclass(frozen=True)
class ScanSummary:
    mode: str
    rounds: int = 0
    skipped: int = 0
    errors: int = 0
    results: tuple[RoundResult, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        ran = [r for r in self.results if r.ran]
        return {
            "mode": self.mode,
            "rounds": self.rounds,
            "skipped": self.skipped,
            "errors": self.errors,
            "claimsLaunched": sum(len(r.launched) for r in ran),
            "launchFailures": sum(len(r.failures) for r in ran),
            "unschedulablePods": len({u.pod for r in ran for u in r.unschedulable}),
            "pendingPods": ran[-1].pending_pods if ran else 0,
        }


# ---------------------------------------------------------------- one round


def provision(runtime: Runtime, now: datetime | None = None, *, owner: str | None = None, keep_lease: bool = False) -> RoundResult:
    """One provisioning round under the cluster's provisioning lease.

    Returns a skipped result (and counts ``ScanSkipped``) when another invocation holds the
    lease. ``keep_lease`` leaves the lease held for the next round of the same invocation
    (:func:`run_scanner` releases it at the end).
    """
    now = now or runtime.clock.now()
    owner = owner or runtime.invocation_id
    if not runtime.state.acquire_lease(LEASE_NAME, owner, now, LEASE_TTL_SECONDS):
        runtime.count("ScanSkipped", 1)
        return RoundResult(ran=False, skipped_reason="another invocation holds the provisioning lease")
    try:
        return _run_round(runtime, now, owner)
    finally:
        if not keep_lease:
            runtime.state.release_lease(LEASE_NAME, owner)


def _run_round(runtime: Runtime, now: datetime, owner: str) -> RoundResult:
    started = time.perf_counter()
    lease = RenewingLease(runtime, LEASE_NAME, owner, ttl_seconds=LEASE_TTL_SECONDS, renew_seconds=LEASE_RENEW_SECONDS)
    work = PlanningRound.for_cluster(runtime, now)
    launcher = Launcher(work, lease)
    registration = reconcile_registration(runtime, work.claims, work.nodes, work.pools, now)
    for message in registration.errors:
        logger.warning("registration failed", extra={"error": message})
    nomination = nominate_for_registering_nodes(runtime, registration.claims, work.nodes, work.pods, work.pools)
    for message in nomination.errors:
        logger.warning("nomination failed", extra={"error": message})
    work.note_nominations(nomination.nominated, nomination.not_held)
    work.compute_usage(registration)
    work.publish_unreserved()
    for claim_id in registration.timed_out:
        pool_obj = work.pools_raw.get(next((c.node_pool for c in work.claims if c.claim_id == claim_id), ""))
        if pool_obj is not None:
            work.emit_event(pool_obj, "RegistrationTimeout", f"nodeclaim {claim_id}: no Node registered within 15 minutes; instance terminated", "Warning")

    open_claims = list(registration.claims)
    orphans_closed, orphans_adopted = _settle_orphans(launcher, open_claims)
    work.track_claims(c for c in open_claims if c.claim_id not in orphans_closed)
    in_flight = work.in_flight(work.open_by_id.values())

    waiting = [p for p in work.pods if p.is_pending and p.key in work.marked_unschedulable]
    ages = [(now - (p.unschedulable_since or p.created or now)).total_seconds() for p in waiting]
    if waiting:  # an idle cluster emits no series: each costs $0.30 a month (the alarm reads missing as fine)
        runtime.count("PodsPending", len(waiting))
        runtime.count("PendingPodAgeSeconds", max(ages), "Seconds")
    # a pod nominated to a Node that takes pods (by kube-scheduler's preemption or by this round)
    # waits for it: it is not planned, and takes its room there (domain.planning.nominated_pods)
    live = {node.name for node in work.nodes if node.accepts_pods}
    pending = [p for p in waiting if p.nominated_node not in live]
    promised = work.promised_to_reserved()
    launcher.existing_claims.extend(sorted({promised[p.key] for p in pending if p.key in promised}))
    to_plan = [p for p in pending if p.key not in promised]
    read_done = time.perf_counter()

    plan_seconds = 0.0
    launch_seconds = 0.0
    if to_plan:
        pods_by_key = {p.key: p for p in to_plan}
        plan_started = time.perf_counter()
        plan = work.solve(to_plan, in_flight)
        plan_seconds += time.perf_counter() - plan_started
        for item in plan.unschedulable:
            pod = pods_by_key.get(item.pod)
            if pod is not None:
                work.report_unschedulable(pod, item.reason)
        launch_started = time.perf_counter()
        replan_seconds = launch_all(launcher, plan, pods_by_key, in_flight)
        launch_seconds = time.perf_counter() - launch_started - replan_seconds
        plan_seconds += replan_seconds
        runtime.count("DecisionSeconds", time.perf_counter() - started, "Seconds")

    provision_static(launcher)
    work.flush_pod_events()
    write_statuses(work)
    cost = sum(c.price or 0.0 for c in work.open_by_id.values() if c.state in (ClaimState.LAUNCHED, ClaimState.REGISTERED, ClaimState.INITIALIZED))
    if cost > 0:
        runtime.count("ManagedCostPerHour", round(cost, 6), "None")
    runtime.count("ScanCompleted", 1)
    total = time.perf_counter() - started
    return RoundResult(
        ran=True,
        pending_pods=len(pending),
        pending_pod_uids=frozenset(p.uid or p.key for p in pending),
        launched=tuple(launcher.launched),
        existing_claims=tuple(launcher.existing_claims),
        failures=tuple(launcher.failures),
        unschedulable=tuple(work.unschedulable[k] for k in sorted(work.unschedulable)),
        capacity_errors=tuple(launcher.capacity_errors),
        plans=work.plans,
        registration=registration,
        nominated=nomination.nominated,
        invalid_objects=tuple(work.invalid),
        orphans_closed=tuple(orphans_closed),
        orphans_adopted=tuple(orphans_adopted),
        read_seconds=read_done - started,
        plan_seconds=plan_seconds,
        launch_seconds=launch_seconds,
        total_seconds=total,
    )


def _settle_orphans(launcher: Launcher, claims: list[ClaimRecord]) -> tuple[list[str], list[str]]:
    """``reserved`` claims older than :data:`ORPHAN_AFTER` belong to a round that died
    between reserving and recording its launch: adopt the instance it started (found by
    its ``joiner.dev/nodeclaim`` tag) or close the claim and return its reservation."""
    work = launcher.work
    orphans = [c for c in claims if c.state == ClaimState.RESERVED and work.now - c.created_at >= ORPHAN_AFTER]
    if not orphans:
        return [], []
    closed: list[str] = []
    adopted: list[str] = []
    try:
        instances = work.runtime.ec2.list_cluster_instances(work.runtime.settings.cluster_name)
    except Ec2Error as error:
        logger.warning("cannot look up instances of orphaned claims", extra={"error": str(error)})
        return [], []
    by_claim: dict[str, InstanceRecord] = {}
    for instance in instances:
        claim_id = instance.tags.get(wk.NODECLAIM)
        if claim_id and instance.state in ("pending", "running"):
            by_claim.setdefault(claim_id, instance)
    for claim in orphans:
        record = by_claim.get(claim.claim_id)
        try:
            if record is not None:
                index = claims.index(claim)
                pool_types = work.type_index.get(claim.node_pool, {})
                price = offering_prices(pool_types.values()).get(OfferingKey(record.instance_type, record.zone, record.capacity_type), 0.0)
                claims[index] = advance(
                    work.runtime,
                    claim.claim_id,
                    ClaimState.LAUNCHED,
                    expected=ClaimState.RESERVED,
                    instance_id=record.instance_id,
                    instance_type=record.instance_type,
                    zone=record.zone,
                    capacity_type=record.capacity_type,
                    price=price,
                    launched_at=record.launch_time or work.now,
                )
                adopted.append(claim.claim_id)
            elif launcher.close(claim.claim_id, claim.node_pool, "launch abandoned", expected_state=ClaimState.RESERVED):
                closed.append(claim.claim_id)
            else:  # moved on concurrently (launched by its round): theirs stands
                claims[claims.index(claim)] = work.open_by_id.get(claim.claim_id, claim)
        except ClaimStateConflict as conflict:  # settled concurrently (gc, another round): theirs stands
            claims[claims.index(claim)] = conflict.current
            logger.info("orphaned claim was settled concurrently", extra={"claim": claim.claim_id, "state": str(conflict.current.state)})
        except Exception as error:  # noqa: BLE001
            logger.warning("settling an orphaned claim failed", extra={"claim": claim.claim_id, "error": str(error)})
    return closed, adopted


# ---------------------------------------------------------------- scanner loop


#: Seconds a round may need at most; no round starts with less Lambda time left than this.
ROUND_RESERVE_SECONDS = 15.0
POLL_SECONDS = 1.0
#: After a skipped (lease busy) or failed round, wait this long before trying again.
RETRY_SECONDS = 5.0


def sync_node_claims(runtime: Runtime) -> None:
    """The NodeClaim mirrors after a round (:mod:`joiner.services.nodeclaims`), then the
    cluster state's image when one is due (:mod:`joiner.services.cluster_image`); never raises."""
    from joiner.services.nodeclaims import sync_node_claims as sync

    try:
        sync(runtime)
    except Exception:  # noqa: BLE001 - a mirror must never fail a scan
        logger.exception("nodeclaim mirror sync failed")
    try:
        runtime.save_cluster_image()  # after the mirrors: the image holds them as synced
    except Exception:  # noqa: BLE001 - the image only spares cold containers a list
        logger.exception("cluster state image not written")


def run_scanner(
    runtime: Runtime,
    mode: str | None = None,
    *,
    remaining_ms: Callable[[], int] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> ScanSummary:
    """Run the scanner for one invocation.

    ``economy``: one round. ``responsive``: a round at once, then poll pending pods every
    second for ``scan_window_seconds``; when new pending pods appear, wait until none has
    appeared for ``batch_idle_seconds`` (or ``batch_max_seconds`` passed since the first)
    and run a round. ``remaining_ms`` (the Lambda context's) stops the loop early enough
    that a round never runs into the function timeout.
    """
    settings = runtime.settings
    mode = mode or settings.scanner_mode
    if mode not in ("economy", "responsive"):
        raise ValueError(f"scanner mode must be 'economy' or 'responsive', got {mode!r}")
    sleep = sleep or runtime.sleep
    clock = runtime.clock
    owner = runtime.invocation_id
    results: list[RoundResult] = []
    errors = 0
    last_error: Exception | None = None

    if mode == "economy":
        single = provision(runtime, clock.now(), owner=owner)
        if single.ran:
            sync_node_claims(runtime)
        return ScanSummary(mode, rounds=int(single.ran), skipped=int(not single.ran), results=(single,))

    start = clock.now()
    window_end = start + timedelta(seconds=settings.scan_window_seconds)

    def time_left() -> float:
        left = (window_end - clock.now()).total_seconds()
        if remaining_ms is not None:
            left = min(left, remaining_ms() / 1000.0 - ROUND_RESERVE_SECONDS)
        return left

    def run_round() -> RoundResult | None:
        nonlocal errors, last_error
        try:
            result = provision(runtime, clock.now(), owner=owner, keep_lease=True)
        except Exception as error:  # noqa: BLE001 - keep scanning; reported in the summary and metrics
            errors += 1
            last_error = error
            runtime.count("ScanErrors", 1)
            logger.exception("provisioning round failed")
            return None
        results.append(result)
        if result.ran:
            sync_node_claims(runtime)  # best-effort, after the launches: never delays one
        return result

    try:
        first = run_round()
        known: set[str] = set(first.pending_pod_uids) if first is not None and first.ran else set()
        retry_at = None if first is not None and first.ran else clock.now() + timedelta(seconds=RETRY_SECONDS)
        batch_started: datetime | None = None
        last_new: datetime | None = None
        while time_left() > POLL_SECONDS:
            sleep(POLL_SECONDS)
            now = clock.now()
            try:
                pending = runtime.kube.list_pending_pods()
            except KubernetesError as error:
                errors += 1
                last_error = error
                runtime.count("ScanErrors", 1)
                logger.warning("listing pending pods failed", extra={"error": str(error)})
                continue
            uids = {str((p.get("metadata") or {}).get("uid") or "") for p in pending}
            new = uids - known
            known = uids
            if new:
                last_new = now
                batch_started = batch_started or now
            due_batch = (
                batch_started is not None
                and last_new is not None
                and ((now - last_new).total_seconds() >= settings.batch_idle_seconds or (now - batch_started).total_seconds() >= settings.batch_max_seconds)
            )
            due_retry = retry_at is not None and now >= retry_at and bool(uids)
            if not (due_batch or due_retry):
                continue
            result = run_round()
            batch_started = last_new = None
            if result is not None and result.ran:
                retry_at = None
                known |= set(result.pending_pod_uids)
            else:
                retry_at = clock.now() + timedelta(seconds=RETRY_SECONDS)
        if batch_started is not None and (remaining_ms is None or remaining_ms() / 1000.0 > ROUND_RESERVE_SECONDS):
            run_round()
    finally:
        try:
            runtime.state.release_lease(LEASE_NAME, owner)
        except Exception as error:  # noqa: BLE001 - the lease expires on its own
            logger.warning("releasing the provisioning lease failed", extra={"error": str(error)})

    ran = [r for r in results if r.ran]
    if errors and not ran and last_error is not None:
        raise last_error
    return ScanSummary(mode, rounds=len(ran), skipped=len(results) - len(ran), errors=errors, results=tuple(results))
