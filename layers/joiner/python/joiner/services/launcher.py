"""Launching a round's node claims (Karpenter's ``nodeclaim/lifecycle/launch.go``): prepare,
launch, record, close.

For every node claim of a plan, :class:`Launcher`:

1. **prepares** it: derives its id from the NodePool and its pods' uids (a retried round for
   the same pods yields the same id and so the same EC2 ClientToken), keeps only candidate
   types within the NodePool's limit, reserves their capacity against the limit with a
   conditional write *before* any EC2 call, and records the claim (``reserved``);
2. **launches** it with one ``instant`` CreateFleet, with the launch template of each AMI
   variant its types need, or into a capacity reservation;
3. **records** the instance on the claim (``launched``), shrinks the reservation to what was
   launched, and tells the pods (``Nominated``) and the NodePool;
4. **closes** claims that cannot launch, releasing their reservations.

:func:`launch_all` runs waves: offerings that answer with a capacity error are marked
unavailable for :data:`UNAVAILABLE_FOR` and the affected pods re-planned at once without
them, up to :data:`MAX_LAUNCH_ATTEMPTS` times.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import timedelta

from joiner.domain import labels as wk
from joiner.domain.amis import STANDARD, VARIANTS, variant_of
from joiner.domain.launch import (
    CAPACITY_TYPE_PREFERENCE,
    LaunchError,
    NoOfferingsError,
    build_fleet_request,
    choose_capacity_type,
    exotic_names,
    launch_tags,
    node_labels,
    node_taints,
    tenancy_of,
)
from joiner.domain.model import InFlightClaim, InstanceType, NodeClaimPlan, NodePool, OfferingKey, Plan, Pod, nodeclass_hash, nodepool_hash
from joiner.domain.reservations import reservation_for
from joiner.domain.resources import EMPTY, Resources
from joiner.observability import logger
from joiner.ports import (
    CAPACITY_BLOCK,
    CapacityReservation,
    ClaimRecord,
    ClaimState,
    ClaimStateConflict,
    Ec2Error,
    FleetError,
    FleetRequest,
    FleetResult,
    LaunchTemplateNotFound,
    LaunchTemplateRef,
)
from joiner.services.leases import Lease
from joiner.services.lifecycle import advance, close_claim, terminate_instance
from joiner.services.nodeclaims import mirror_claim
from joiner.services.planning_round import LIMIT_REACHED, NODES, ClassEnv, PlanningRound

__all__ = [
    "UNAVAILABLE_FOR",
    "MAX_LAUNCH_ATTEMPTS",
    "CONCURRENCY",
    "LaunchedClaim",
    "LaunchFailure",
    "LaunchJob",
    "LaunchOutcome",
    "Launcher",
    "claim_id_for",
    "launch_all",
    "give_up",
    "in_flight_from",
    "run_parallel",
    "offering_prices",
]

#: How long an offering that returned a capacity error is left out (Karpenter: 3 minutes).
UNAVAILABLE_FOR = timedelta(minutes=3)
#: CreateFleet calls (plans) per claim's pods within one round before giving up until the next.
MAX_LAUNCH_ATTEMPTS = 4
#: Parallel CreateFleet calls.
CONCURRENCY = 8


@dataclass(frozen=True, slots=True)
class LaunchedClaim:
    claim_id: str
    node_pool: str
    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str
    price: float
    pods: tuple[str, ...]
    client_token: str
    attempts: int


@dataclass(frozen=True, slots=True)
class LaunchFailure:
    """A claim given up in this round. ``reason`` is an EC2 error code, ``InsufficientCapacity``
    (every offering failed) or ``LimitReached``."""

    claim_id: str
    node_pool: str
    pods: tuple[str, ...]
    reason: str
    message: str


def claim_id_for(node_pool: str, pod_ids: Iterable[str], generation: int = 0) -> str:
    """A claim name derived from its NodePool and pods, stable across retries.

    ``generation`` moves past claims for the same pods that were closed (launch failed,
    registration timed out), so a later attempt gets a fresh id and ClientToken. The result
    is a valid label value (at most 63 characters, alphanumeric at both ends).
    """
    material = "\n".join([node_pool, str(generation), *sorted(pod_ids)])
    digest = hashlib.sha256(material.encode("utf-8")).hexdigest()[:16]
    prefix = node_pool[:40].rstrip("-._") or "claim"
    return f"{prefix}-{digest}"


@dataclass
class LaunchJob:
    """One node claim being launched in this round."""

    plan: NodeClaimPlan
    claim_id: str
    pods: tuple[Pod, ...]
    pool: NodePool
    env: ClassEnv
    types: tuple[InstanceType, ...]  # candidates, cheapest first, within the limit and one architecture
    arch: str


@dataclass
class LaunchOutcome:
    """What launching one job did: launched, or failed (on capacity: retried on other offerings)."""

    job: LaunchJob
    launched: LaunchedClaim | None = None
    capacity_failure: bool = False
    failure: LaunchFailure | None = None
    #: (offering, EC2 error code) for every capacity error in the answer
    capacity_errors: list[tuple[OfferingKey, str]] = field(default_factory=list)


class Launcher:
    """Launches one round's claims: prepare (claim id, limit reservation, claim record),
    launch (one ``instant`` CreateFleet, its templates and capacity reservations), record
    (the instance on the claim) and close. It plans nothing and reads nothing of the cluster:
    ``work`` is the round it launches for, whose claims and offerings it keeps current.

    ``lease`` is the lease its caller holds (the scanner's provisioning lease), kept between
    launches; None for launches that take none. Replacement launches (interruption,
    disruption) take none: a scanner round may be running and must not be blocked by (nor
    block) them. That is safe because limit reservations are conditional writes and claim ids
    derive from the pods, so two launchers never launch twice for the same pods nor past a
    limit.

    ``replacing``: the pods are a disrupted node's, running there, so a claim once launched
    for them whose Node is Ready elsewhere is not theirs any more (kube-scheduler bound them
    crosswise) and never passes for their replacement. A scanner round's pending pods may be
    about to bind to their claim's just-Ready Node: there it still counts."""

    def __init__(self, work: PlanningRound, lease: Lease | None = None, *, replacing: bool = False) -> None:
        self.work = work
        self.replacing = replacing
        self.runtime = work.runtime
        self.state = work.state
        self.now = work.now
        self.lease = lease
        self.launched: list[LaunchedClaim] = []
        self.failures: list[LaunchFailure] = []
        #: claims already launched (or being launched) for pods this launcher was asked to launch for
        self.existing_claims: list[str] = []
        self.capacity_errors: list[OfferingKey] = []
        #: claim id -> CreateFleet attempts made (the next one's ClientToken suffix)
        self.attempts: dict[str, int] = {}
        #: held around a reserved launch (choice of reservation, CreateFleet, count): parallel
        #: launches never both count on a reservation's last slot
        self.reservation_lock = threading.Lock()

    def keep_lease(self) -> None:
        """Keep the caller's lease while a long launch wave runs (without one: nothing)."""
        if self.lease is not None:
            self.lease.keep()

    def prepare(self, claim_plan: NodeClaimPlan, pods_by_key: Mapping[str, Pod], identity: Sequence[str] | None = None) -> LaunchJob | None:
        """Pick the claim id, filter candidates to the limit, record the claim and reserve.

        Returns None when nothing is to be launched for it (an existing claim covers these
        pods, or the limit refuses it; the latter is reported). ``identity``: what the claim
        id derives from instead of the pods' uids (a static NodePool's replica).
        """
        pool = self.work.pools[claim_plan.node_pool]
        pods = tuple(pods_by_key[key] for key in claim_plan.pods if key in pods_by_key)
        pod_ids = list(identity) if identity is not None else [p.uid or p.key for p in pods]

        claim_id, existing = self.claim_identity(pool.name, pod_ids, skip_initialized=self.replacing and identity is None)
        if existing is not None and claim_id not in self.attempts:
            # Already launched for exactly these pods (a retried round), or being launched by
            # another round (reserved, not yet orphaned): nothing to do here.
            self.existing_claims.append(claim_id)
            return None

        new_claim = existing is None
        candidates = [self.work.type_index[pool.name][name] for name in claim_plan.instance_types if name in self.work.type_index.get(pool.name, {})]
        remaining = self.work.remaining(pool)
        if remaining is not None:
            if existing is not None:
                # A claim reserved earlier (previous wave, or a resumed round) may use its own reservation.
                remaining = Resources({name: room + existing.reserved.get(name, 0) for name, room in remaining.items()})
            candidates = [t for t in candidates if _fits_limit(t, remaining)]
        if not candidates:
            self._limit_reached(claim_plan, pods, pool, claim_id, existing)
            return None
        arch = _arch(candidates[0])
        candidates = [t for t in candidates if _arch(t) == arch]
        amount = _reservation(candidates)

        if existing is not None:
            amount = existing.reserved  # reserving is idempotent per claim: the first amount stands
        else:
            # The record first, then the reservation: a reservation then never exists without
            # a record (any round releases one whose claim is closed or missing), and a record
            # left without its reservation is a ``reserved`` claim the orphan pass settles.
            record = ClaimRecord(
                claim_id=claim_id,
                node_pool=pool.name,
                state=ClaimState.RESERVED,
                created_at=self.now,
                pods=tuple(p.key for p in pods),
                reserved=amount,
                pool_hash=nodepool_hash(pool),
                class_hash=nodeclass_hash(self.work.envs[pool.node_class].node_class),
            )
            if not self.state.put_claim(record):
                # Another invocation created it between our read and write: it owns the launch.
                self.existing_claims.append(claim_id)
                return None
            self.work.track(record)
            existing = record
        try:
            reserved = self.state.reserve_capacity(pool.name, claim_id, amount, pool.limits, self.work.unreserved.get(pool.name, EMPTY))
        except Exception:
            if new_claim:
                self._close_quietly(claim_id, pool.name, "reservation failed")
            raise
        if not reserved:
            self._limit_reached(claim_plan, pods, pool, claim_id, existing)
            return None
        if pool.limits is not None and new_claim:
            self.work.count_reserved(pool.name, amount)
        env = self.work.envs[pool.node_class]
        job_plan = dataclasses.replace(claim_plan, instance_types=tuple(t.name for t in candidates))
        return LaunchJob(job_plan, claim_id, pods, pool, env, tuple(candidates), arch)

    def claim_identity(self, pool: str, pod_ids: Sequence[str], *, skip_initialized: bool = False) -> tuple[str, ClaimRecord | None]:
        """The first id in the claim's generation sequence that is not closed, terminating or
        retiring (nor, with ``skip_initialized``, initialized). A node's pods replanned for
        its replacement are often exactly the pods its own claim was launched for: that claim
        (its node is going away) must not count as the replacement, nor with
        ``skip_initialized`` one whose Node is Ready elsewhere (see :class:`Launcher`)."""
        skipped = (ClaimState.CLOSED, ClaimState.TERMINATING, *((ClaimState.INITIALIZED,) if skip_initialized else ()))
        for generation in range(1000):
            claim_id = claim_id_for(pool, pod_ids, generation)
            existing = self.work.open_by_id.get(claim_id)
            if existing is None:
                existing = self.state.get_claim(claim_id)
            if existing is None:
                return claim_id, None
            if existing.state not in skipped and claim_id not in self.work.retiring_claims:
                return claim_id, existing
        raise RuntimeError(f"NodePool {pool}: 1000 closed claims for the same pods")

    def _limit_reached(self, claim_plan: NodeClaimPlan, pods: Sequence[Pod], pool: NodePool, claim_id: str, existing: ClaimRecord | None) -> None:
        """The limit refused this claim (a concurrent round reserved first): worded like the
        planner's own limit reason, so users see one message whichever caught it."""
        remaining = self.work.remaining(pool) or EMPTY
        smallest = min(
            (self.work.type_index[pool.name][n] for n in claim_plan.instance_types if n in self.work.type_index.get(pool.name, {})),
            key=lambda t: (t.capacity.get("cpu", 0), t.name),
            default=None,
        )
        wanted = (smallest.capacity if smallest is not None else EMPTY) + {NODES: 1000}
        blocked = sorted(name for name in remaining if wanted.get(name, 0) > remaining[name]) or sorted(pool.limits or ())
        reason = f'nodepool "{pool.name}": {LIMIT_REACHED} ({", ".join(blocked)})'
        if existing is not None and existing.state == ClaimState.RESERVED:
            self.close(existing.claim_id, pool.name, "limit reached")
        self.failures.append(LaunchFailure(claim_id, pool.name, claim_plan.pods, "LimitReached", reason))
        for pod in pods:
            self.work.report_unschedulable(pod, reason)

    def launch(self, job: LaunchJob) -> LaunchOutcome:
        """:meth:`launch_once`, serialised with the round's other launches while it may go into
        a capacity reservation (rare; spot and on-demand launches stay parallel)."""
        if job.env.reservations and wk.CAPACITY_TYPE_RESERVED in (job.plan.capacity_types or CAPACITY_TYPE_PREFERENCE):
            with self.reservation_lock:
                return self.launch_once(job)
        return self.launch_once(job)

    def launch_once(self, job: LaunchJob) -> LaunchOutcome:
        """One CreateFleet for ``job`` (a second one if the token was already used with other
        parameters; the same one again, with the same token, after re-creating a launch
        template gc deleted)."""
        outcome = LaunchOutcome(job)
        runtime = self.runtime
        prices = offering_prices(job.types)
        unavailable = frozenset(self.work.unavailable)
        template_refreshed = False
        tries = 0
        while tries < 2:
            tries += 1
            attempt = self.attempts.get(job.claim_id, 0)
            self.attempts[job.claim_id] = attempt + 1
            try:
                capacity_type = choose_capacity_type(job.plan, prices, unavailable, job.env.subnets)
                zone_templates: dict[tuple[str, str], LaunchTemplateRef] | None = None
                templates: dict[str, LaunchTemplateRef] | None = None
                reservation_type = "default"
                if capacity_type == wk.CAPACITY_TYPE_RESERVED:
                    plan, (zone_templates, reservation_type) = job.plan, self._reservation_templates(job)
                    if not zone_templates:
                        raise NoOfferingsError(f"node claim {job.claim_id}: every selected capacity reservation is full")
                    template = zone_templates[min(zone_templates)]
                else:
                    plan, template, templates = self._launch_templates(job, capacity_type)
                request = build_fleet_request(
                    plan,
                    job.claim_id,
                    capacity_type,
                    job.env.subnets,
                    template,
                    prices,
                    unavailable,
                    launch_tags(runtime.settings.cluster_name, job.pool.name, job.claim_id, job.env.node_class.tags),
                    attempt=attempt,
                    templates=templates,
                    zone_templates=zone_templates,
                    exotic=exotic_names(job.types),
                )
                if reservation_type != request.reservation_type:
                    request = dataclasses.replace(request, reservation_type=reservation_type)
            except NoOfferingsError as error:
                outcome.capacity_failure = True
                outcome.failure = LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, "InsufficientCapacity", str(error))
                return outcome
            except (LaunchError, Ec2Error) as error:
                code = getattr(error, "code", "") or "InvalidLaunchConfiguration"
                outcome.failure = LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, code, str(error))
                return outcome
            try:
                result = runtime.ec2.create_fleet(request)
            except LaunchTemplateNotFound as error:
                if template_refreshed:
                    outcome.failure = LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, error.code or "Ec2Error", str(error))
                    return outcome
                # gc deleted the (cached) template: nothing was launched. Forget it, let
                # ensure_launch_template create it again and retry this very attempt: the
                # same client token, so EC2 deduplicates as for any retried call (a token it
                # did record answers IdempotentParameterMismatch: the next attempt below).
                template_refreshed = True
                for stale in request.launch_templates:
                    self._forget_launch_template(stale.id)
                logger.warning(
                    "launch template is gone; re-creating it", extra={"claim": job.claim_id, "template": request.launch_template.name, "code": error.code}
                )
                self.attempts[job.claim_id] = attempt
                tries -= 1
                continue
            except Ec2Error as error:
                if error.code == "IdempotentParameterMismatch":
                    continue  # that token was spent by an earlier run with other offerings: next attempt
                outcome.failure = LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, error.code or "Ec2Error", str(error))
                return outcome
            outcome = self._fleet_outcome(outcome, request, result, attempt)
            if outcome.launched is not None and capacity_type == wk.CAPACITY_TYPE_RESERVED:
                self._took_reservation(job, outcome.launched.instance_type, outcome.launched.zone)
            return outcome
        outcome.failure = LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, "IdempotentParameterMismatch", "client tokens already used")
        return outcome

    def _reservation_templates(self, job: LaunchJob) -> tuple[dict[tuple[str, str], LaunchTemplateRef], str]:
        """Per (instance type, zone) of the claim with a reservation that has room: the launch
        template targeting it (the type's AMI variant, the reservation's id), and the request's
        reservation type. Only these are made: a reserved launch needs no template without a
        target. A type whose AMI variant has no AMI is left out while another launches; when
        none resolves, its error is raised.

        CreateFleet takes one market per request and at most one Capacity Block: when the
        cheapest pair's reservation is a Capacity Block, the request is that pair alone in the
        capacity-block market; otherwise the Capacity Blocks are left out (the next attempt
        may take them)."""
        prices = offering_prices(job.types)
        zones = sorted(set(job.plan.zones) & set(job.env.zones)) if job.plan.zones else sorted(job.env.zones)
        candidates: list[tuple[float, int, str, str, CapacityReservation]] = []
        for index, name in enumerate(job.plan.instance_types):
            for zone in zones:
                reservation = reservation_for(name, zone, job.env.reservations, self.work.reservation_left)
                if reservation is None or OfferingKey(name, zone, wk.CAPACITY_TYPE_RESERVED) in self.work.unavailable:
                    continue
                candidates.append((prices.get(OfferingKey(name, zone, wk.CAPACITY_TYPE_RESERVED), float("inf")), index, name, zone, reservation))
        candidates.sort(key=lambda c: c[:4])
        reservation_type = candidates[0][4].reservation_type if candidates else "default"
        if reservation_type == CAPACITY_BLOCK:
            candidates = candidates[:1]
        else:
            candidates = [c for c in candidates if c[4].reservation_type != CAPACITY_BLOCK]
        out: dict[tuple[str, str], LaunchTemplateRef] = {}
        variant_of_type = {t.name: variant_of(t) for t in job.types}
        first_error: Ec2Error | None = None
        for _price, _index, name, zone, reservation in candidates:
            try:
                out[(name, zone)] = self._variant_template(job, wk.CAPACITY_TYPE_RESERVED, variant_of_type.get(name, STANDARD), reservation)
            except Ec2Error as error:
                if error.code != "AMINotFound":
                    raise
                first_error = first_error or error
        if not out and first_error is not None:
            raise first_error
        return out, reservation_type

    def _took_reservation(self, job: LaunchJob, instance_type: str, zone: str) -> None:
        """One instance launched into a reservation of (type, zone): one less left this round;
        a pair with none left is no longer offered (the round's re-plans skip it)."""
        reservation = reservation_for(instance_type, zone, job.env.reservations, self.work.reservation_left)
        if reservation is not None:
            self.work.took_reservation(reservation.id, reservation.available)
        if reservation_for(instance_type, zone, job.env.reservations, self.work.reservation_left) is None:
            self.work.mark_unavailable(OfferingKey(instance_type, zone, wk.CAPACITY_TYPE_RESERVED))

    def _forget_launch_template(self, template_id: str) -> None:
        """Drop every cached resolution naming this template (every NodePool and capacity
        type that shares it); the adapter forgot its own cache entry already."""
        self.runtime.resolved.discard(
            lambda key, value: (
                isinstance(key, tuple) and bool(key) and key[0] == "launch-template" and isinstance(value, LaunchTemplateRef) and value.id == template_id
            )
        )

    def _launch_templates(self, job: LaunchJob, capacity_type: str) -> tuple[NodeClaimPlan, LaunchTemplateRef, dict[str, LaunchTemplateRef]]:
        """The launch template of each candidate type: one per AL2023 variant the types need
        (``standard``, ``nvidia``, ``neuron``: :mod:`joiner.domain.amis`). Types whose variant
        has no AMI (an alias EKS publishes no such variant for) are left out of the plan while
        another variant launches; when none resolves, the first error is raised. Returns the
        plan, the cheapest type's template and the template per type."""
        variant_of_type = {t.name: variant_of(t) for t in job.types}
        wanted = sorted({variant_of_type.get(name, STANDARD) for name in job.plan.instance_types}, key=VARIANTS.index)
        by_variant: dict[str, LaunchTemplateRef] = {}
        first_error: Ec2Error | None = None
        for variant in wanted:
            try:
                by_variant[variant] = self._variant_template(job, capacity_type, variant)
            except Ec2Error as error:
                if error.code != "AMINotFound" or len(wanted) == 1:
                    raise
                first_error = first_error or error
                logger.warning("no AMI for a variant; its instance types are left out", extra={"claim": job.claim_id, "variant": variant, "error": str(error)})
        if not by_variant:
            assert first_error is not None
            raise first_error
        names = tuple(name for name in job.plan.instance_types if variant_of_type.get(name, STANDARD) in by_variant)
        plan = job.plan if len(names) == len(job.plan.instance_types) else dataclasses.replace(job.plan, instance_types=names)
        templates = {name: by_variant[variant_of_type.get(name, STANDARD)] for name in names}
        return plan, templates[names[0]], templates

    def _variant_template(self, job: LaunchJob, capacity_type: str, variant: str, reservation: CapacityReservation | None = None) -> LaunchTemplateRef:
        reservation_id = reservation.id if reservation is not None else None
        reservation_type = reservation.reservation_type if reservation is not None else "default"
        tenancy = tenancy_of(job.plan.requirements)
        key = (
            "launch-template",
            repr(job.env.node_class),
            repr(job.pool),
            job.arch,
            capacity_type,
            job.env.security_groups,
            variant,
            reservation_id,
            reservation_type,
            tenancy,
        )
        cached: LaunchTemplateRef | None = self.runtime.resolved.get(key, self.now)
        if cached is not None:
            return cached
        cluster = self.runtime.cluster()
        ec2 = self.runtime.ec2
        ami = ec2.resolve_ami(job.env.node_class, cluster.version, job.arch, variant)
        labels = node_labels(job.pool, capacity_type)
        labels.update(wk.with_alias_labels({wk.INSTANCE_TENANCY: tenancy}))
        if reservation_id:
            labels.update(wk.with_alias_labels({wk.CAPACITY_RESERVATION_ID: reservation_id}))
        template = ec2.ensure_launch_template(
            job.env.node_class,
            job.arch,
            cluster,
            job.env.security_groups,
            ami,
            labels=labels,
            taints=node_taints(job.pool),
            capacity_reservation_id=reservation_id,
            reservation_type=reservation_type,
            tenancy=tenancy,
        )
        self.runtime.resolved.put(key, template, self.now)
        return template

    def _fleet_outcome(self, outcome: LaunchOutcome, request: FleetRequest, result: FleetResult, attempt: int) -> LaunchOutcome:
        job = outcome.job
        zone_of_subnet = {o.subnet_id: o.zone for o in request.overrides}
        hard_errors = []
        for error in result.errors:
            if not error.is_capacity_error:
                hard_errors.append(error)
                continue
            for key in _failed_offerings(error, request, zone_of_subnet):
                outcome.capacity_errors.append((key, error.code))
        if result.instances:
            instance = result.instances[0]
            price = offering_prices(job.types).get(OfferingKey(instance.instance_type, instance.zone, instance.capacity_type), 0.0)
            outcome.launched = LaunchedClaim(
                claim_id=job.claim_id,
                node_pool=job.pool.name,
                instance_id=instance.instance_id,
                instance_type=instance.instance_type,
                zone=instance.zone or zone_of_subnet.get(instance.subnet_id, ""),
                capacity_type=instance.capacity_type or request.capacity_type,
                price=price,
                pods=job.plan.pods,
                client_token=request.client_token,
                attempts=attempt + 1,
            )
            return outcome
        if hard_errors:
            first = hard_errors[0]
            outcome.failure = LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, first.code, first.message)
        else:
            outcome.capacity_failure = True
            messages = _summarize_errors(result.errors, request) or "CreateFleet launched no instance"
            outcome.failure = LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, "InsufficientCapacity", messages)
        return outcome

    def record_launch(self, outcome: LaunchOutcome) -> bool:
        """Record the instance on the claim, shrink the reservation to what was launched,
        and tell the pods and the NodePool.

        The write is conditional on the claim still being ``reserved``: gc (abandoned
        reservations) or another round (orphans) may have closed it meanwhile. Then the
        instance just launched belongs to nobody: it is terminated, the reservation
        released, and False returned (the pods stay pending for the next round)."""
        launched = outcome.launched
        assert launched is not None
        job = outcome.job
        held = self.work.open_by_id[launched.claim_id].reserved
        instance_type = next((t for t in job.types if t.name == launched.instance_type), None)
        actual = instance_type.capacity + {NODES: 1000} if instance_type is not None else held
        try:
            recorded = advance(
                self.runtime,
                launched.claim_id,
                ClaimState.LAUNCHED,
                expected=ClaimState.RESERVED,
                instance_id=launched.instance_id,
                instance_type=launched.instance_type,
                zone=launched.zone,
                capacity_type=launched.capacity_type,
                price=launched.price,
                launched_at=self.now,
                reserved=actual,
            )
            self.work.track(recorded)
        except ClaimStateConflict as conflict:
            if not self._launch_overtaken(outcome, conflict.current):
                return False
            actual = held  # another writer recorded this very instance: leave its reservation be
        self.launched.append(launched)
        if actual != held and all(value <= held.get(name, 0) for name, value in actual.items()):
            # The reservation covered the largest candidate; keep only what was launched, in
            # one conditional write (the pool never looks emptier than it is).
            self.state.shrink_reservation(launched.node_pool, launched.claim_id, actual)
            self.work.count_reserved(launched.node_pool, actual, held)
        self.runtime.count("ClaimsLaunched", 1)
        pool_obj = self.work.pools_raw.get(launched.node_pool)
        if pool_obj is not None:
            self.work.emit_event(
                pool_obj,
                "Launched",
                f"Launched nodeclaim {launched.claim_id}: {launched.instance_type} {launched.capacity_type} in {launched.zone} "
                f"({launched.instance_id}, ${launched.price:.4f}/h) for {len(launched.pods)} pod(s)",
            )
        for key in launched.pods:
            obj = self.work.pod_refs.get(key)
            if obj is not None:
                self.work.pod_event(
                    obj,
                    "Nominated",
                    f"Pod should schedule on nodeclaim {launched.claim_id} ({launched.instance_type} {launched.capacity_type} in {launched.zone}, {launched.instance_id})",
                )
        mirror_claim(self.runtime, self.work.open_by_id[launched.claim_id])
        return True

    def _launch_overtaken(self, outcome: LaunchOutcome, current: ClaimRecord) -> bool:
        """``record_launch`` found the claim no longer ``reserved``. True when the claim
        records this very instance (another round adopted it: nothing lost); otherwise the
        instance is terminated (nobody owns it) and False returned."""
        launched = outcome.launched
        assert launched is not None
        self.work.track(current)
        if current.instance_id == launched.instance_id and current.state != ClaimState.CLOSED:
            logger.info("launch already recorded", extra={"claim": launched.claim_id, "instance": launched.instance_id, "state": str(current.state)})
            return True
        logger.warning(
            "claim changed while its launch was recorded: terminating the instance",
            extra={
                "claim": launched.claim_id,
                "state": str(current.state),
                "reason": current.reason or "no reason",
                "instance": launched.instance_id,
            },
        )
        try:
            terminate_instance(self.runtime, launched.instance_id, path="launch", claim=launched.claim_id)
        except Ec2Error as error:  # gc terminates it later: tagged for a closed claim, unclaimed
            logger.error("terminating an unowned instance failed", extra={"claim": launched.claim_id, "instance": launched.instance_id, "error": str(error)})
        if current.state == ClaimState.CLOSED:
            close_claim(self.runtime, current, current.reason or "closed", self.now, path="launch", terminate=False)  # releases, idempotent
            failure = LaunchFailure(
                launched.claim_id,
                launched.node_pool,
                launched.pods,
                "ClaimClosed",
                f"claim closed while its launch was recorded ({current.reason or 'closed'}); instance {launched.instance_id} terminated",
            )
            self.failures.append(failure)
            self.runtime.count("LaunchFailures", 1, reason=failure.reason)
        return False

    def mark_unavailable(self, failed: Iterable[tuple[OfferingKey, str]]) -> None:
        """Leave these offerings out for :data:`UNAVAILABLE_FOR`, here and in every other invocation."""
        until = self.now + UNAVAILABLE_FOR
        for key, code in sorted(set(failed)):
            if key in self.work.unavailable:
                continue
            self.state.mark_unavailable(key, until, code)
            self.work.mark_unavailable(key)
            self.capacity_errors.append(key)
            self.runtime.count("CapacityErrors", 1)

    def close(self, claim_id: str, pool: str, reason: str, *, expected_state: str | None = None) -> bool:
        """Close a claim this launcher reserved (:func:`~joiner.services.lifecycle.close_claim`)
        and release its reservation: only from ``expected_state`` (``reserved`` unless given);
        False (nothing changed) when a concurrent transition moved it elsewhere."""
        record = self.work.open_by_id.get(claim_id) or claim_id
        expected = ClaimState(expected_state) if expected_state is not None else ClaimState.RESERVED
        outcome = close_claim(self.runtime, record, reason, self.now, path="launch", expected=expected, node_pool=pool, mirror=False)
        if outcome.claim is not None:
            self.work.track(outcome.claim)
        return outcome.closed_now or (outcome.claim is not None and outcome.claim.state == ClaimState.CLOSED)

    def _close_quietly(self, claim_id: str, pool: str, reason: str) -> None:
        """Close a claim whose reservation could not be made; on failure the orphan pass does."""
        try:
            self.close(claim_id, pool, reason, expected_state=ClaimState.RESERVED)
        except Exception as error:  # noqa: BLE001 - the orphan pass closes it after ORPHAN_AFTER
            logger.warning("closing a claim whose reservation failed failed", extra={"claim": claim_id, "error": str(error)})

    def is_closed(self, claim_id: str) -> bool:
        found = self.work.open_by_id.get(claim_id)
        return found is not None and found.state == ClaimState.CLOSED

    def fail(self, failure: LaunchFailure, pods: Sequence[Pod], reason_text: str) -> None:
        self.close(failure.claim_id, failure.node_pool, failure.reason)
        self.failures.append(failure)
        self.runtime.count("LaunchFailures", 1, reason=failure.reason)
        for pod in pods:
            self.work.report_unschedulable(pod, reason_text)


def launch_all(launcher: Launcher, plan: Plan, pods_by_key: Mapping[str, Pod], in_flight: list[InFlightClaim]) -> float:
    """Launch the plan's claims in waves. Pods of claims that failed on capacity are
    re-planned at once (with the launcher's round) without the failed offerings; each wave
    is one CreateFleet per claim. Launched claims join ``in_flight``. Returns the seconds
    spent re-planning."""
    work = launcher.work
    replan_seconds = 0.0
    claim_plans = list(plan.node_claims)
    failed: dict[str, LaunchOutcome] = {}
    for wave in range(MAX_LAUNCH_ATTEMPTS):
        jobs = [job for job in (launcher.prepare(c, pods_by_key) for c in claim_plans) if job is not None]
        # A claim that failed in the previous wave and was not planned again is closed now;
        # its pods were re-planned onto other claims or reported by the re-plan.
        planned_ids = {job.claim_id for job in jobs}
        for claim_id in sorted(set(failed) - planned_ids):
            give_up(launcher, failed.pop(claim_id), report_pods=False)
        launcher.keep_lease()
        outcomes = run_parallel(launcher.launch, jobs, launcher.keep_lease)
        failed = {}
        retry_pods: list[Pod] = []
        for outcome in outcomes:
            if outcome.capacity_errors:
                launcher.mark_unavailable(outcome.capacity_errors)
            if outcome.launched is not None:
                try:
                    recorded = launcher.record_launch(outcome)
                except Exception as error:  # noqa: BLE001 - the instance exists; the adapter's tag guard and gc find it
                    logger.error(
                        "launched but recording failed",
                        extra={"claim": outcome.launched.claim_id, "instance": outcome.launched.instance_id, "error": str(error)},
                    )
                    launcher.launched.append(outcome.launched)
                    recorded = True
                if recorded:
                    in_flight.append(in_flight_from(outcome))
                continue
            assert outcome.failure is not None
            if outcome.capacity_failure:
                failed[outcome.job.claim_id] = outcome
                retry_pods.extend(outcome.job.pods)
            else:
                failure = outcome.failure
                launcher.fail(failure, outcome.job.pods, f"launch failed: {failure.reason}: {failure.message}")
        if not failed or wave == MAX_LAUNCH_ATTEMPTS - 1:
            break
        started = time.perf_counter()
        replan = work.solve(sorted(retry_pods, key=lambda p: p.key), sorted(in_flight, key=lambda c: c.name))
        replan_seconds += time.perf_counter() - started
        failed_by_pod = {key: outcome for outcome in failed.values() for key in outcome.job.plan.pods}
        for item in replan.unschedulable:
            pod = pods_by_key.get(item.pod)
            if pod is not None:
                work.report_unschedulable(pod, f"{item.reason} (after capacity errors: {_short(failed_by_pod.get(item.pod))})")
                work.runtime.count("InsufficientCapacity", 1)
        claim_plans = list(replan.node_claims)
    for claim_id in sorted(failed):
        give_up(launcher, failed[claim_id], report_pods=True)
    return replan_seconds


def give_up(launcher: Launcher, outcome: LaunchOutcome, *, report_pods: bool) -> None:
    """Close a claim that failed on capacity (releasing its reservation); ``report_pods``:
    its pods not reported yet are reported unschedulable."""
    work = launcher.work
    job = outcome.job
    if launcher.is_closed(job.claim_id):
        return
    failure = outcome.failure or LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, "InsufficientCapacity", "")
    reason = f"insufficient capacity after {MAX_LAUNCH_ATTEMPTS} attempts: {failure.message}"
    pods = [p for p in job.pods if p.key not in work.unschedulable] if report_pods else []
    launcher.fail(failure, pods, reason)
    if pods:
        work.runtime.count("InsufficientCapacity", len(pods))


def _short(outcome: LaunchOutcome | None) -> str:
    if outcome is None or outcome.failure is None:
        return "none"
    return outcome.failure.message[:300]


def in_flight_from(outcome: LaunchOutcome) -> InFlightClaim:
    """A launched claim as capacity the round's re-plans fill first."""
    launched = outcome.launched
    assert launched is not None
    job = outcome.job
    instance_type = next((t for t in job.types if t.name == launched.instance_type), job.types[0])
    claim = InFlightClaim.launched_as(launched.claim_id, job.pool, instance_type, launched.zone, launched.capacity_type, launched.pods)
    # A type Fleet named outside the job's (never expected): the first type's capacity, its own name.
    return claim if instance_type.name == launched.instance_type else dataclasses.replace(claim, instance_type=launched.instance_type)


def run_parallel(function: Callable[[LaunchJob], LaunchOutcome], jobs: Sequence[LaunchJob], between: Callable[[], None]) -> list[LaunchOutcome]:
    """``function`` over ``jobs`` on up to :data:`CONCURRENCY` threads, results in job
    order; ``between`` runs on the calling thread as each one completes."""
    if len(jobs) <= 1:
        return [function(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=min(CONCURRENCY, len(jobs)), thread_name_prefix="joiner-launch") as pool:
        futures = {pool.submit(function, job): index for index, job in enumerate(jobs)}
        results: list[LaunchOutcome | None] = [None] * len(jobs)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            between()
    return [r for r in results if r is not None]


def _arch(instance_type: InstanceType) -> str:
    requirement = instance_type.requirements.get(wk.ARCH)
    value = requirement.any_value() if requirement is not None else None
    return value or "amd64"


def _fits_limit(instance_type: InstanceType, remaining: Mapping[str, int]) -> bool:
    amount = instance_type.capacity + {NODES: 1000}
    return all(amount.get(name, 0) <= room for name, room in remaining.items())


def _reservation(types: Sequence[InstanceType]) -> Resources:
    """The most any candidate could add: per-resource maximum of their capacities, plus one node."""
    amount = EMPTY
    for instance_type in types:
        amount = amount.maximum(instance_type.capacity)
    return amount + {NODES: 1000}


def offering_prices(types: Iterable[InstanceType]) -> dict[OfferingKey, float]:
    return {OfferingKey(t.name, o.zone, o.capacity_type): o.price for t in types for o in t.offerings if o.available}


def _failed_offerings(error: FleetError, request: FleetRequest, zone_of_subnet: Mapping[str, str]) -> list[OfferingKey]:
    """The offerings a capacity error is about. An error naming no type (or zone) covers
    every override of the request that matches what it does name."""
    zone = error.zone or (zone_of_subnet.get(error.subnet_id) if error.subnet_id else None)
    capacity_type = error.capacity_type or request.capacity_type
    keys = [
        OfferingKey(o.instance_type, o.zone, capacity_type)
        for o in request.overrides
        if (error.instance_type is None or o.instance_type == error.instance_type) and (zone is None or o.zone == zone)
    ]
    if not keys and error.instance_type and zone:
        keys = [OfferingKey(error.instance_type, zone, capacity_type)]
    return keys


def _summarize_errors(errors: Sequence[FleetError], request: FleetRequest) -> str:
    """``InsufficientInstanceCapacity: c5.large spot in us-east-1a, us-east-1b`` per code and type."""
    grouped: dict[tuple[str, str, str], set[str]] = {}
    for error in errors:
        key = (error.code, error.instance_type or "any type", error.capacity_type or request.capacity_type)
        grouped.setdefault(key, set()).add(error.zone or "any zone")
    return "; ".join(f"{code}: {name} {ct} in {', '.join(sorted(zones))}" for (code, name, ct), zones in sorted(grouped.items()))
