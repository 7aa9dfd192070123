"""Provisioning: pending pods -> node claims -> EC2 Fleet launches, one round at a time.

A round (:func:`provision`):

1. takes the cluster's ``provisioning`` lease (a DynamoDB conditional write), so two
   overlapping scanner invocations never plan the same pods at once;
2. reads the cluster (one list of all pods split by ``spec.nodeName``, Nodes, DaemonSets,
   RuntimeClasses, NodePools, NodeClasses) and the open claims and unavailable offerings
   from DynamoDB, and runs :mod:`joiner.services.registration` on them;
3. plans with the scheduling core: launched-but-unregistered claims are capacity
   (:class:`~joiner.domain.model.InFlightClaim`) and count against limits;
4. for every new node claim: derives its id from the NodePool and its pods' uids (a
   retried round for the same pods yields the same id and so the same EC2 ClientToken),
   reserves its capacity against the NodePool limit with a conditional write *before*
   any EC2 call, records the claim, and launches it with one ``instant`` CreateFleet;
5. on capacity errors marks the failed offerings unavailable for three minutes and
   re-plans the affected pods at once, in the same invocation, without them (other
   zones, types, capacity types), up to :data:`MAX_LAUNCH_ATTEMPTS` times;
6. explains every pod it cannot place with a ``FailedScheduling`` event carrying the
   planner's reason, and reports metrics and NodePool status.

:func:`run_scanner` runs rounds for one scanner invocation: ``economy`` mode runs one,
``responsive`` mode keeps polling for about a minute and batches bursts of new pods.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain import snapshot as snap
from joiner.domain.amis import PUBLISHED, STANDARD, VARIANTS, variant_of, variant_requirements
from joiner.domain.costs import PUBLIC_IPV4_PER_HOUR, block_device_cost_per_hour
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
    zonal_subnets,
)
from joiner.domain.model import (
    InFlightClaim,
    InstanceType,
    Node,
    NodeClaimPlan,
    NodeClass,
    NodePool,
    OfferingKey,
    Plan,
    Pod,
    UnschedulablePod,
    nodeclass_hash,
    nodepool_hash,
)
from joiner.domain.planning import build_problem
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.reservations import reservation_for, with_reserved_offerings
from joiner.domain.resources import EMPTY, Resources
from joiner.domain.scheduling import solve
from joiner.observability import logger
from joiner.ports import (
    CAPACITY_BLOCK,
    CapacityReservation,
    ClaimRecord,
    ClaimState,
    ClaimStateConflict,
    Ec2Error,
    FleetRequest,
    FleetResult,
    InstanceRecord,
    JsonDict,
    KubernetesError,
    LaunchTemplateNotFound,
    LaunchTemplateRef,
    StatePort,
    Subnet,
)
from joiner.services.cluster_state import object_reference
from joiner.services.leases import Lease, RenewingLease
from joiner.services.nodeclaims import mirror_claim
from joiner.services.registration import RegistrationResult, reconcile_registration

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = [
    "LEASE_NAME", "LEASE_TTL_SECONDS", "UNAVAILABLE_FOR", "MAX_LAUNCH_ATTEMPTS", "LIMIT_REACHED",
    "LaunchedClaim", "LaunchFailure", "RoundResult", "ScanSummary", "provision", "run_scanner", "claim_id_for",
    "PlanningRound", "launch_all", "unreserved_usage", "published_unreserved", "UNRESERVED_KIND",
]

LEASE_NAME = "provisioning"
#: A round renews the lease; a crashed holder blocks others for at most this long.
LEASE_TTL_SECONDS = 60
#: A round renews its lease this often (wall clock) while launching.
LEASE_RENEW_SECONDS = 20
#: How long an offering that returned a capacity error is left out (Karpenter: 3 minutes).
UNAVAILABLE_FOR = timedelta(minutes=3)
#: CreateFleet calls (plans) per claim's pods within one round before giving up until the next.
MAX_LAUNCH_ATTEMPTS = 4
#: Parallel CreateFleet calls and event writes.
CONCURRENCY = 8
#: A ``reserved`` claim this old belongs to a round that died between reserving and
#: recording its launch. Must exceed the scanner function's timeout (no round outlives it).
ORPHAN_AFTER = timedelta(minutes=3)
#: Pod events (Nominated, FailedScheduling) one round writes at most; the rest are logged.
MAX_POD_EVENTS_PER_ROUND = 2000
#: The reason prefix of pods refused by a NodePool limit.
LIMIT_REACHED = "limit reached"
#: Capacity-type preference when a claim allows both.
SPOT, ON_DEMAND = wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_ON_DEMAND
NODES = "nodes"
#: State items holding each limited NodePool's usage by Nodes no reservation covers.
UNRESERVED_KIND = "UNRESERVED"


# ---------------------------------------------------------------- results


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


# ---------------------------------------------------------------- claim identity


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


# ---------------------------------------------------------------- the round


@dataclass
class _ClassEnv:
    """A NodeClass resolved against EC2 for this round."""

    node_class: NodeClass
    subnets: tuple[Subnet, ...] = ()
    security_groups: tuple[str, ...] = ()
    #: active capacity reservations its capacityReservationSelectorTerms select
    reservations: tuple[CapacityReservation, ...] = ()
    error: str = ""
    #: the Ready condition's reason when ``error`` is set
    reason: str = ""

    @property
    def zones(self) -> frozenset[str]:
        return frozenset(s.zone for s in self.subnets)


@dataclass
class _Job:
    """One node claim being launched in this round."""

    plan: NodeClaimPlan
    claim_id: str
    pods: tuple[Pod, ...]
    pool: NodePool
    env: _ClassEnv
    types: tuple[InstanceType, ...]  # candidates, cheapest first, within the limit and one architecture
    arch: str


@dataclass
class _Outcome:
    job: _Job
    launched: LaunchedClaim | None = None
    capacity_failure: bool = False
    failure: LaunchFailure | None = None
    #: (offering, EC2 error code) for every capacity error in the answer
    capacity_errors: list[tuple[OfferingKey, str]] = field(default_factory=list)


class PlanningRound:
    def __init__(self, runtime: Runtime, now: datetime, owner: str, lease: Lease | None = None) -> None:
        self.runtime = runtime
        self.now = now
        self.owner = owner
        #: the lease this round holds (the scanner's provisioning lease); None for rounds that
        #: take none (replacement launches, disruption's reads)
        self.lease = lease
        self.kube = runtime.kube
        self.state = runtime.state
        self.invalid: list[str] = []
        #: (kind, name) -> why a NodePool or NodeClass could not be read
        self.invalid_by_name: dict[tuple[str, str], str] = {}
        self.unschedulable: dict[str, UnschedulablePod] = {}
        self.launched: list[LaunchedClaim] = []
        self.failures: list[LaunchFailure] = []
        self.existing_claims: list[str] = []
        self.capacity_errors: list[OfferingKey] = []
        self.attempts: dict[str, int] = {}
        self.pod_events: list[tuple[JsonDict, str, str, str]] = []
        #: pod key -> a reference to write events on (unbound pods only, see :meth:`read`)
        self.pod_refs: dict[str, JsonDict] = {}
        #: keys of unbound pods kube-scheduler marked unschedulable
        self.marked_unschedulable: set[str] = set()
        self.plans = 0
        #: whether :meth:`read` read the cluster's pods and Nodes
        self.workloads = True
        #: open claims by id, kept current as this round reserves, launches and closes them
        self.open_by_id: dict[str, ClaimRecord] = {}
        #: claims of nodes being taken away (replacement rounds): they never host the pods again
        self.retiring_claims: set[str] = set()
        #: capacity reservation id -> instances this round may still launch into it
        self.reservation_left: dict[str, int] = {}
        #: held around a reserved launch (choice of reservation, CreateFleet, count): parallel
        #: launches never both count on a reservation's last slot
        self.reservation_lock = threading.Lock()

    def keep_lease(self) -> None:
        """Keep the round's lease while a long launch wave runs (a round without one: nothing)."""
        if self.lease is not None:
            self.lease.keep()

    # ------------------------------------------------------------ read

    def read(self, *, workloads: bool = True) -> None:
        """Read the cluster and the state, all reads in parallel (the round's latency is the
        slowest list, usually pods). Pods and Nodes are parsed page by page as they stream in
        and only their compact, interned form is kept (:mod:`joiner.domain.interning`): the
        raw list is never held, so memory follows the parsed model, not the API's JSON.

        ``workloads=False`` reads neither pods nor Nodes (a replacement for one node's pods
        is planned onto new capacity only): what it reads then does not grow with the
        cluster, and limits count the Nodes no reservation covers as the last scanner round
        found them (:data:`UNRESERVED_KIND`)."""
        kube, state, now = self.kube, self.state, self.now
        self.workloads = workloads
        reads: dict[str, Callable[[], Any]] = {
            "workloads": self._read_workloads if workloads else self._read_runtime_classes_only,
            "daemonsets": kube.list_daemonsets,
            "pools": kube.list_node_pools,
            "classes": kube.list_node_classes,
            "claims": state.open_claims,
            "unavailable": lambda: state.unavailable_offerings(now),
        }
        with ThreadPoolExecutor(max_workers=len(reads), thread_name_prefix="joiner-read") as pool:
            futures = {name: pool.submit(function) for name, function in reads.items()}
            answers = {name: future.result() for name, future in futures.items()}
        runtime_classes, pods, nodes = answers["workloads"]
        daemonsets_raw, pools_raw, classes_raw = answers["daemonsets"], answers["pools"], answers["classes"]
        self.claims = answers["claims"]
        self.unavailable = set(answers["unavailable"])
        self.pods = tuple(pods)
        self.nodes = tuple(nodes)
        #: every Node read, also those a replacement round leaves out of planning (going away):
        #: they count against limits until their capacity is released
        self.all_nodes = self.nodes
        self.daemonsets = tuple(d for d in (self._parse(lambda o: snap.parse_daemonset(o, runtime_classes), o) for o in daemonsets_raw) if d is not None)
        self.pools_raw = {str((o.get("metadata") or {}).get("name")): o for o in pools_raw}
        self.pools = {p.name: p for p in (self._parse(snap.parse_node_pool, o, event_object=True) for o in pools_raw) if p is not None}
        self.classes_raw = {str((o.get("metadata") or {}).get("name")): o for o in classes_raw}
        self.classes = {c.name: c for c in (self._parse(snap.parse_node_class, o, event_object=True) for o in classes_raw) if c is not None}
        self.snapshot = snap.Snapshot(
            pods=self.pods,
            nodes=tuple(sorted(self.nodes, key=lambda n: n.name)),
            daemonsets=tuple(sorted(self.daemonsets, key=lambda d: (d.namespace, d.name))),
            node_pools=tuple(self.pools[name] for name in sorted(self.pools)),
            node_classes=tuple(self.classes[name] for name in sorted(self.classes)),
            runtime_classes=runtime_classes,
            **self._read_volumes(),
        )

    def _read_runtime_classes_only(self) -> tuple[dict[str, Resources], list[Pod], list[Node]]:
        return self._read_runtime_classes(), [], []

    def _read_runtime_classes(self) -> dict[str, Resources]:
        runtime_classes: dict[str, Resources] = {}
        for obj in self.kube.list_runtime_classes():
            parsed = self._parse(snap.parse_runtime_class, obj)
            if parsed is not None:
                runtime_classes[parsed[0]] = parsed[1]
        return runtime_classes

    def _read_workloads(self) -> tuple[dict[str, Resources], list[Pod], list[Node]]:
        """RuntimeClasses (pods need their overhead), then pods and Nodes from the container's
        :class:`~joiner.services.cluster_state.ClusterCache`: listed once, then caught up from
        the changes since. Keeps an event reference only for unbound pods and notes which of
        them kube-scheduler marked unschedulable."""
        runtime_classes = self._read_runtime_classes()
        found = self.runtime.cluster_state.read(
            self.kube, runtime_classes,
            lambda obj, memo: self._parse(lambda o: snap.parse_pod(o, runtime_classes, memo=memo), obj, event_pod=True),
            lambda obj: self._parse(snap.parse_node, obj),
        )
        self.pod_refs = {entry.pod.key: entry.reference for entry in found.pods if entry.reference is not None}
        self.marked_unschedulable = {entry.pod.key for entry in found.pods if entry.marked_unschedulable}
        return runtime_classes, [entry.pod for entry in found.pods], list(found.nodes)

    def _read_volumes(self) -> dict[str, Any]:
        """Volume claims, volumes, storage classes and CSINodes, read only when a pod uses a
        persistent volume (most rounds of a cluster without StatefulSets need none of them)."""
        if not any(pod.volume_claims for pod in self.pods):
            return {}
        from joiner.domain.volumes import VOLUME_KINDS

        found: dict[str, list[Any]] = {field_name: [] for _, field_name in VOLUME_KINDS.values()}
        try:
            objects = self.kube.list_volume_objects()
        except KubernetesError as error:
            logger.warning("volume objects could not be read (RBAC for persistentvolumeclaims, persistentvolumes, "
                           "storageclasses, csinodes applied?): planning without volume topology", extra={"error": str(error)})
            self.runtime.count("VolumeTopologyUnavailable")
            return {"volumes_known": False}
        for obj in objects:
            entry = VOLUME_KINDS.get(str(obj.get("kind")))
            parsed = self._parse(entry[0], obj) if entry is not None else None
            if entry is not None and parsed is not None:
                found[entry[1]].append(parsed)
        return {name: tuple(items) for name, items in found.items()}

    def _parse(self, parser: Callable[[Any], Any], obj: JsonDict, *, event_pod: bool = False, event_object: bool = False) -> Any:
        try:
            return parser(obj)
        except snap.SnapshotError as error:
            self.invalid.append(str(error))
            logger.warning("skipping invalid object", extra={"error": str(error)})
            if event_pod:
                self._pod_event(object_reference(obj), "FailedScheduling", f"Joiner cannot read this pod: {error}", "Warning")
            elif event_object:
                self._emit(obj, "InvalidSpec", str(error), "Warning")
                self.invalid_by_name[(str(obj.get("kind")), str((obj.get("metadata") or {}).get("name")))] = str(error)
            return None

    # ------------------------------------------------------------ environment

    def resolve_classes(self) -> None:
        """Subnets and security groups of every NodeClass, and whether Joiner may pass its
        instance profile (cached briefly per runtime; failures are tried again next round)."""
        self.envs: dict[str, _ClassEnv] = {}
        for name in sorted(self.classes):
            node_class = self.classes[name]
            key = ("class-env", repr(node_class))  # NodeClass holds dicts: its repr is the cache key
            cached = self.runtime.resolved.get(key, self.now)
            if cached is not None:
                self.envs[name] = cached
                continue
            env = _ClassEnv(node_class)
            try:
                env.subnets = tuple(self.runtime.ec2.resolve_subnets(node_class.subnet_selector_terms))
                env.security_groups = tuple(self.runtime.ec2.resolve_security_groups(node_class.security_group_selector_terms))
                if not env.subnets:
                    env.error, env.reason = "no subnet matches subnetSelectorTerms", "SubnetsNotFound"
                elif not env.security_groups:
                    env.error, env.reason = "no security group matches securityGroupSelectorTerms", "SecurityGroupsNotFound"
            except Ec2Error as error:
                env.error, env.reason = f"resolving selectors failed: {error}", "ResolutionFailed"
            if not env.error:
                try:
                    self.runtime.ec2.instance_profile(node_class)
                except Ec2Error as error:
                    env.error, env.reason = str(error), "InstanceProfileNotAllowed"
            if not env.error and node_class.capacity_reservation_terms:
                try:
                    env.reservations = tuple(self.runtime.ec2.resolve_capacity_reservations(node_class.capacity_reservation_terms))
                except Ec2Error as error:
                    # Reservations only add offerings: without them the NodePool still launches
                    # spot or on-demand, and the next resolution tries again.
                    logger.warning("resolving capacity reservations failed", extra={"nodeclass": name, "error": str(error)})
                    self.envs[name] = env
                    continue
            self.envs[name] = env
            if not env.error:
                self.runtime.resolved.put(key, env, self.now)
        for env in self.envs.values():
            for reservation in env.reservations:
                self.reservation_left.setdefault(reservation.id, reservation.available)
        self.apply_unavailable_reservations()

    def apply_unavailable_reservations(self) -> None:
        """Reservations marked unavailable (:class:`OfferingKey` with ``reservation_id``: an
        interruption is reclaiming them) count as full for this round, so neither the plan nor
        a launch targets them; an instance type and zone that no NodeClass's reservations have
        room for any more is no longer offered as ``reserved``."""
        marked = {key.reservation_id for key in self.unavailable if key.reservation_id}
        if not marked:
            return
        touched: set[tuple[str, str]] = set()
        for env in self.envs.values():
            for reservation in env.reservations:
                if reservation.id in marked:
                    self.reservation_left[reservation.id] = 0
                    touched.add((reservation.instance_type, reservation.zone))
        for instance_type, zone in sorted(touched):
            if not any(reservation_for(instance_type, zone, env.reservations, self.reservation_left) for env in self.envs.values()):
                self.unavailable.add(OfferingKey(instance_type, zone, wk.CAPACITY_TYPE_RESERVED))

    def pool_problem(self, pool: NodePool) -> str:
        """Why a NodePool cannot launch now ("" when it can)."""
        env = self.envs.get(pool.node_class)
        if pool.node_class not in self.classes:
            invalid = next((e for (kind, name), e in self.invalid_by_name.items() if name == pool.node_class and kind != "NodePool"), None)
            return f"NodeClass {pool.node_class} is invalid: {invalid}" if invalid else f"NodeClass {pool.node_class} not found"
        if env is None or env.error:
            return f"NodeClass {pool.node_class}: {env.error if env else 'not resolved'}"
        return ""

    def instance_types(self) -> dict[str, tuple[InstanceType, ...]]:
        """Per NodePool: the catalog's types as its NodeClass makes them (offerings priced with
        its volumes), with offerings limited to the zones its subnets cover and a public IPv4
        address's price added where the subnet a launch would use there assigns one."""
        result: dict[str, tuple[InstanceType, ...]] = {}
        for name in sorted(self.pools):
            pool = self.pools[name]
            if self.pool_problem(pool):
                result[name] = ()
                continue
            env = self.envs[pool.node_class]
            base = self.runtime.catalog.for_node_class(env.node_class)
            public = public_ip_zones(env.subnets)
            result[name] = _zonal(self.runtime, base, env.zones, public, self.now)
            if env.reservations:
                fixed = block_device_cost_per_hour(env.node_class)
                node_costs = {zone: fixed + (PUBLIC_IPV4_PER_HOUR if zone in public else 0.0) for zone in env.zones}
                result[name] = with_reserved_offerings(result[name], env.reservations, env.zones, self.reservation_left, node_costs)
        result = self._with_overlays(result)
        self.types_by_pool = result
        self.type_index = {pool: {t.name: t for t in types} for pool, types in result.items()}
        return result

    def _with_overlays(self, types: dict[str, tuple[InstanceType, ...]]) -> dict[str, tuple[InstanceType, ...]]:
        """``types`` with the cluster's NodeOverlays applied (:func:`joiner.domain.overlays.apply_overlays`);
        what each overlay matched, or why it was not applied, is kept for its status. When the
        overlays cannot be read, the ones this container read last are applied."""
        from joiner.domain.overlays import apply_overlays

        try:
            raw = self.kube.list_node_overlays()
            self.runtime.node_overlays = raw
        except KubernetesError as error:
            raw = self.runtime.node_overlays or []
            logger.warning("NodeOverlays could not be read; applying the ones read last", extra={"error": str(error), "overlays": len(raw)})
            self.runtime.count("NodeOverlaysUnreadable")
        self.overlays_raw: dict[str, JsonDict] = {str((o.get("metadata") or {}).get("name")): o for o in raw}
        self.overlay_errors: dict[str, str] = {}
        overlays = []
        for obj in raw:
            try:
                overlays.append(snap.parse_node_overlay(obj))
            except snap.SnapshotError as error:
                self.overlay_errors[str((obj.get("metadata") or {}).get("name"))] = str(error)
        applied = apply_overlays(types, overlays, self.pools)
        self.overlay_outcomes = dict(applied.outcomes)
        return dict(applied.instance_types)

    # ------------------------------------------------------------ usage and limits

    def compute_usage(self, registration: RegistrationResult) -> None:
        """What each NodePool's Nodes use (capacity plus a ``nodes`` count: NodePool status),
        and the figure its limit is checked against.

        The limit figure is the pool's reserved total (every claim from its reservation until
        its capacity is released, registered or not: one DynamoDB item, checked and updated
        atomically by :meth:`~joiner.ports.StatePort.reserve_capacity`) plus what Nodes that
        no reservation covers use (:attr:`unreserved`). Registration moves nothing between
        the two, so a round that read the cluster before a concurrent round registered a
        Node still checks against a figure that contains that Node's capacity."""
        in_use: dict[str, Resources] = {}
        node_counts: dict[str, int] = {}
        for node in self.nodes:
            if node.deleting:
                continue
            pool = node.labels.get(wk.NODEPOOL) or registration.node_pools.get(node.name)
            if not pool:
                continue
            in_use[pool] = in_use.get(pool, EMPTY) + node.capacity + {NODES: 1000}
            node_counts[pool] = node_counts.get(pool, 0) + 1
        self.in_use = in_use
        self.node_counts = node_counts
        limited = [name for name in sorted(self.pools) if self.pools[name].limits is not None]
        self.reservations = {name: self._settled(name, self.state.reservations(name)) for name in limited}
        self.reserved = {name: _total(held.values()) for name, held in self.reservations.items()}
        if self.workloads:
            self.unreserved = unreserved_usage(self.all_nodes, self.claims, self.reservations, registration.node_pools)
        else:
            published = published_unreserved(self.state)
            self.unreserved = {}
            for name in self.reservations:
                if name in published:
                    self.unreserved[name] = published[name]
                    continue
                # No full round has published this pool's figure yet: its own Nodes are read.
                nodes = [n for n in (self._parse(snap.parse_node, o) for o in self.kube.iter_nodes(label_selector=f"{wk.NODEPOOL}={name}")) if n is not None]
                self.unreserved.update(unreserved_usage(nodes, self.claims, {name: self.reservations[name]}))

    def publish_unreserved(self) -> None:
        """Store each limited NodePool's :attr:`unreserved` figure where a round that reads no
        Nodes finds it (:meth:`read` with ``workloads=False``); written only when it changed."""
        stored = published_unreserved(self.state)
        for name in sorted(self.reservations):
            usage = self.unreserved.get(name, EMPTY)
            if stored.get(name, EMPTY) != usage:
                self.state.put_item(UNRESERVED_KIND, name, {"pool": name, "unreserved": dict(usage.items())})
        for name in sorted(set(stored) - set(self.reservations)):
            self.state.delete_item(UNRESERVED_KIND, name)

    def _settled(self, pool: str, held: dict[str, Resources]) -> dict[str, Resources]:
        """``held`` without reservations of closed claims, which are released now: a caller
        that died between closing a claim and releasing it (both idempotent, in that order)
        would otherwise hold the limit forever. A closed claim's capacity is gone (every path
        terminates the instance, or never had one, before closing). A reservation with no
        claim record is kept: :meth:`prepare` reserves just before it writes the claim."""
        open_ids = {c.claim_id for c in self.claims}
        for claim_id in sorted(set(held) - open_ids):
            try:
                claim = self.state.get_claim(claim_id)
                if claim is not None and claim.state == ClaimState.CLOSED:
                    self.state.release_capacity(pool, claim_id)
                    del held[claim_id]
            except Exception as error:  # noqa: BLE001 - counted as held; tried again next round
                logger.warning("releasing the reservation of a closed claim failed", extra={"claim": claim_id, "error": str(error)})
        return held

    def limit_usage(self, pool: str) -> Resources:
        """What counts against ``pool``'s limit (see :meth:`compute_usage`)."""
        return self.unreserved.get(pool, EMPTY) + self.reserved.get(pool, EMPTY)

    def remaining(self, pool: NodePool) -> Resources | None:
        if pool.limits is None:
            return None
        used = self.limit_usage(pool.name)
        return Resources({name: pool.limits.get(name, 0) - used.get(name, 0) for name in pool.limits})

    # ------------------------------------------------------------ in-flight claims

    def in_flight(self, claims: Iterable[ClaimRecord]) -> list[InFlightClaim]:
        result = []
        for claim in claims:
            if claim.state != ClaimState.LAUNCHED or not claim.instance_type or not claim.zone:
                continue
            pool = self.pools.get(claim.node_pool)
            instance_type = self.type_index.get(claim.node_pool, {}).get(claim.instance_type)
            if instance_type is None and pool is not None and pool.node_class in self.classes:
                instance_type = self.runtime.catalog.type_for_node_class(claim.instance_type, self.classes[pool.node_class])
            if pool is None or instance_type is None:
                continue
            capacity_type = claim.capacity_type or ON_DEMAND
            requirements = instance_type.requirements.intersect(pool.template_requirements()).intersect(
                Requirements.from_labels({wk.ZONE: claim.zone, wk.CAPACITY_TYPE: capacity_type, wk.NODECLAIM: claim.claim_id})
            )
            result.append(
                InFlightClaim(
                    name=claim.claim_id,
                    node_pool=claim.node_pool,
                    instance_type=claim.instance_type,
                    zone=claim.zone,
                    capacity_type=capacity_type,
                    allocatable=instance_type.allocatable,
                    capacity=instance_type.capacity,
                    requirements=requirements,
                    pods=tuple(claim.pods),
                )
            )
        return sorted(result, key=lambda c: c.name)

    def promised_to_reserved(self) -> dict[str, str]:
        """Pod key -> the ``reserved`` claim its pods were reserved for.

        A ``reserved`` claim's CreateFleet may already have run: a live round is launching
        it, or a round died between CreateFleet and recording the launch (the instance is
        found by its ``joiner.dev/nodeclaim`` tag once the claim is :data:`ORPHAN_AFTER`
        old). Its instance type is not known yet, so it cannot serve as in-flight capacity;
        its pods are therefore not planned at all until it is launched (then it is in-flight
        capacity), adopted, or closed (then they are pending again). A changed pending set
        would otherwise derive another claim id for the same pods and buy capacity twice.
        Claims of nodes being taken away (:attr:`retiring_claims`) promise nothing."""
        promised: dict[str, str] = {}
        for claim in sorted(self.open_by_id.values(), key=lambda c: c.claim_id):
            if claim.state != ClaimState.RESERVED or claim.claim_id in self.retiring_claims:
                continue
            for pod in claim.pods:
                promised.setdefault(pod, claim.claim_id)
        return promised

    # ------------------------------------------------------------ planning

    def solve(self, pending: Sequence[Pod], in_flight: Sequence[InFlightClaim]) -> Plan:
        """Plan ``pending`` with this round's zonal instance types; limits see the Nodes'
        capacity plus every reservation (launched and about-to-launch claims)."""
        problem = build_problem(self.snapshot, self.runtime.catalog, pending=pending, in_flight=in_flight, unavailable=frozenset(self.unavailable))
        usage = {name: self.limit_usage(name) for name in sorted(self.pools)}
        self.plans += 1
        return solve(dataclasses.replace(problem, instance_types=self.types_by_pool, pool_usage=usage))

    # ------------------------------------------------------------ launching

    def prepare(self, claim_plan: NodeClaimPlan, pods_by_key: Mapping[str, Pod], identity: Sequence[str] | None = None) -> _Job | None:
        """Pick the claim id, filter candidates to the limit, reserve and record the claim.

        Returns None when nothing is to be launched for it (an existing claim covers these
        pods, or the limit refuses it; the latter is reported). ``identity``: what the claim
        id derives from instead of the pods' uids (a static NodePool's replica).
        """
        pool = self.pools[claim_plan.node_pool]
        pods = tuple(pods_by_key[key] for key in claim_plan.pods if key in pods_by_key)
        pod_ids = list(identity) if identity is not None else [p.uid or p.key for p in pods]

        claim_id, existing = self._claim_identity(pool.name, pod_ids)
        if existing is not None and claim_id not in self.attempts:
            # Already launched for exactly these pods (a retried round), or being launched by
            # another round (reserved, not yet orphaned): nothing to do here.
            self.existing_claims.append(claim_id)
            return None

        candidates = [self.type_index[pool.name][name] for name in claim_plan.instance_types if name in self.type_index.get(pool.name, {})]
        remaining = self.remaining(pool)
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
        if not self.state.reserve_capacity(pool.name, claim_id, amount, pool.limits, self.unreserved.get(pool.name, EMPTY)):
            self._limit_reached(claim_plan, pods, pool, claim_id, existing)
            return None
        if pool.limits is not None and existing is None:
            self.reserved[pool.name] = self.reserved.get(pool.name, EMPTY) + amount

        if existing is None:
            record = ClaimRecord(
                claim_id=claim_id,
                node_pool=pool.name,
                state=ClaimState.RESERVED,
                created_at=self.now,
                pods=tuple(p.key for p in pods),
                reserved=amount,
                pool_hash=nodepool_hash(pool),
                class_hash=nodeclass_hash(self.envs[pool.node_class].node_class),
            )
            if not self.state.put_claim(record):
                # Another invocation created it between our read and write: it owns the launch.
                self.existing_claims.append(claim_id)
                return None
            self.open_by_id[claim_id] = record
        env = self.envs[pool.node_class]
        job_plan = dataclasses.replace(claim_plan, instance_types=tuple(t.name for t in candidates))
        return _Job(job_plan, claim_id, pods, pool, env, tuple(candidates), arch)

    def _claim_identity(self, pool: str, pod_ids: Sequence[str]) -> tuple[str, ClaimRecord | None]:
        """The first id in the claim's generation sequence that is not closed, terminating or
        retiring. A node's pods replanned for its replacement are often exactly the pods its
        own claim was launched for: that claim (its node is going away) must not count as
        the replacement."""
        for generation in range(1000):
            claim_id = claim_id_for(pool, pod_ids, generation)
            existing = self.open_by_id.get(claim_id)
            if existing is None:
                existing = self.state.get_claim(claim_id)
            if existing is None:
                return claim_id, None
            if existing.state not in (ClaimState.CLOSED, ClaimState.TERMINATING) and claim_id not in self.retiring_claims:
                return claim_id, existing
        raise RuntimeError(f"NodePool {pool}: 1000 closed claims for the same pods")

    def _limit_reached(self, claim_plan: NodeClaimPlan, pods: Sequence[Pod], pool: NodePool, claim_id: str, existing: ClaimRecord | None) -> None:
        """The limit refused this claim (a concurrent round reserved first): worded like the
        planner's own limit reason, so users see one message whichever caught it."""
        remaining = self.remaining(pool) or EMPTY
        smallest = min((self.type_index[pool.name][n] for n in claim_plan.instance_types if n in self.type_index.get(pool.name, {})),
                       key=lambda t: (t.capacity.get("cpu", 0), t.name), default=None)
        wanted = (smallest.capacity if smallest is not None else EMPTY) + {NODES: 1000}
        blocked = sorted(name for name in remaining if wanted.get(name, 0) > remaining[name]) or sorted(pool.limits or ())
        reason = f'nodepool "{pool.name}": {LIMIT_REACHED} ({", ".join(blocked)})'
        if existing is not None and existing.state == ClaimState.RESERVED:
            self._close(existing.claim_id, pool.name, "limit reached")
        self.failures.append(LaunchFailure(claim_id, pool.name, claim_plan.pods, "LimitReached", reason))
        for pod in pods:
            self._unschedulable(pod, reason)

    def launch(self, job: _Job) -> _Outcome:
        """:meth:`launch_once`, serialised with the round's other launches while it may go into
        a capacity reservation (rare; spot and on-demand launches stay parallel)."""
        if job.env.reservations and wk.CAPACITY_TYPE_RESERVED in (job.plan.capacity_types or CAPACITY_TYPE_PREFERENCE):
            with self.reservation_lock:
                return self.launch_once(job)
        return self.launch_once(job)

    def launch_once(self, job: _Job) -> _Outcome:
        """One CreateFleet for ``job`` (a second one if the token was already used with other
        parameters; the same one again, with the same token, after re-creating a launch
        template gc deleted)."""
        outcome = _Outcome(job)
        runtime = self.runtime
        prices = _prices(job.types)
        unavailable = frozenset(self.unavailable)
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
                    plan, job.claim_id, capacity_type, job.env.subnets, template, prices, unavailable,
                    launch_tags(runtime.settings.cluster_name, job.pool.name, job.claim_id, job.env.node_class.tags),
                    attempt=attempt, templates=templates, zone_templates=zone_templates,
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
                logger.warning("launch template is gone; re-creating it", extra={"claim": job.claim_id, "template": request.launch_template.name, "code": error.code})
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

    def _reservation_templates(self, job: _Job) -> tuple[dict[tuple[str, str], LaunchTemplateRef], str]:
        """Per (instance type, zone) of the claim with a reservation that has room: the launch
        template targeting it (the type's AMI variant, the reservation's id), and the request's
        reservation type. Only these are made: a reserved launch needs no template without a
        target. A type whose AMI variant has no AMI is left out while another launches; when
        none resolves, its error is raised.

        CreateFleet takes one market per request and at most one Capacity Block: when the
        cheapest pair's reservation is a Capacity Block, the request is that pair alone in the
        capacity-block market; otherwise the Capacity Blocks are left out (the next attempt
        may take them)."""
        prices = _prices(job.types)
        zones = sorted(set(job.plan.zones) & set(job.env.zones)) if job.plan.zones else sorted(job.env.zones)
        candidates: list[tuple[float, int, str, str, CapacityReservation]] = []
        for index, name in enumerate(job.plan.instance_types):
            for zone in zones:
                reservation = reservation_for(name, zone, job.env.reservations, self.reservation_left)
                if reservation is None or OfferingKey(name, zone, wk.CAPACITY_TYPE_RESERVED) in self.unavailable:
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

    def _took_reservation(self, job: _Job, instance_type: str, zone: str) -> None:
        """One instance launched into a reservation of (type, zone): one less left this round;
        a pair with none left is no longer offered (the round's re-plans skip it)."""
        reservation = reservation_for(instance_type, zone, job.env.reservations, self.reservation_left)
        if reservation is not None:
            self.reservation_left[reservation.id] = self.reservation_left.get(reservation.id, reservation.available) - 1
        if reservation_for(instance_type, zone, job.env.reservations, self.reservation_left) is None:
            self.unavailable.add(OfferingKey(instance_type, zone, wk.CAPACITY_TYPE_RESERVED))

    def _forget_launch_template(self, template_id: str) -> None:
        """Drop every cached resolution naming this template (every NodePool and capacity
        type that shares it); the adapter forgot its own cache entry already."""
        self.runtime.resolved.discard(
            lambda key, value: isinstance(key, tuple) and bool(key) and key[0] == "launch-template"
            and isinstance(value, LaunchTemplateRef) and value.id == template_id
        )

    def _launch_templates(self, job: _Job, capacity_type: str) -> tuple[NodeClaimPlan, LaunchTemplateRef, dict[str, LaunchTemplateRef]]:
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

    def _variant_template(self, job: _Job, capacity_type: str, variant: str, reservation: CapacityReservation | None = None) -> LaunchTemplateRef:
        reservation_id = reservation.id if reservation is not None else None
        reservation_type = reservation.reservation_type if reservation is not None else "default"
        tenancy = tenancy_of(job.plan.requirements)
        key = ("launch-template", repr(job.env.node_class), repr(job.pool), job.arch, capacity_type, job.env.security_groups, variant, reservation_id,
               reservation_type, tenancy)
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
            job.env.node_class, job.arch, cluster, job.env.security_groups, ami,
            labels=labels, taints=node_taints(job.pool), capacity_reservation_id=reservation_id, reservation_type=reservation_type, tenancy=tenancy,
        )
        self.runtime.resolved.put(key, template, self.now)
        return template

    def _fleet_outcome(self, outcome: _Outcome, request: FleetRequest, result: FleetResult, attempt: int) -> _Outcome:
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
            price = _prices(job.types).get(OfferingKey(instance.instance_type, instance.zone, instance.capacity_type), 0.0)
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

    def record_launch(self, outcome: _Outcome) -> bool:
        """Record the instance on the claim, shrink the reservation to what was launched,
        and tell the pods and the NodePool.

        The write is conditional on the claim still being ``reserved``: gc (abandoned
        reservations) or another round (orphans) may have closed it meanwhile. Then the
        instance just launched belongs to nobody: it is terminated, the reservation
        released, and False returned (the pods stay pending for the next round)."""
        launched = outcome.launched
        assert launched is not None
        job = outcome.job
        held = self.open_by_id[launched.claim_id].reserved
        instance_type = next((t for t in job.types if t.name == launched.instance_type), None)
        actual = instance_type.capacity + {NODES: 1000} if instance_type is not None else held
        try:
            self.open_by_id[launched.claim_id] = self.state.update_claim(
                launched.claim_id,
                expected_state=ClaimState.RESERVED,
                state=ClaimState.LAUNCHED,
                instance_id=launched.instance_id,
                instance_type=launched.instance_type,
                zone=launched.zone,
                capacity_type=launched.capacity_type,
                price=launched.price,
                launched_at=self.now,
                reserved=actual,
            )
        except ClaimStateConflict as conflict:
            if not self._launch_overtaken(outcome, conflict.current):
                return False
            actual = held  # another writer recorded this very instance: leave its reservation be
        self.launched.append(launched)
        if actual != held and all(value <= held.get(name, 0) for name, value in actual.items()):
            # The reservation covered the largest candidate; keep only what was launched, in
            # one conditional write (the pool never looks emptier than it is).
            self.state.shrink_reservation(launched.node_pool, launched.claim_id, actual)
            if launched.node_pool in self.reserved:
                self.reserved[launched.node_pool] = self.reserved[launched.node_pool] - held + actual
        self.runtime.count("ClaimsLaunched", 1)
        pool_obj = self.pools_raw.get(launched.node_pool)
        if pool_obj is not None:
            self._emit(
                pool_obj, "Launched",
                f"Launched nodeclaim {launched.claim_id}: {launched.instance_type} {launched.capacity_type} in {launched.zone} "
                f"({launched.instance_id}, ${launched.price:.4f}/h) for {len(launched.pods)} pod(s)",
            )
        for key in launched.pods:
            obj = self.pod_refs.get(key)
            if obj is not None:
                self._pod_event(
                    obj, "Nominated",
                    f"Pod should schedule on nodeclaim {launched.claim_id} ({launched.instance_type} {launched.capacity_type} in {launched.zone}, {launched.instance_id})",
                )
        mirror_claim(self.runtime, self.open_by_id[launched.claim_id])
        return True

    def _launch_overtaken(self, outcome: _Outcome, current: ClaimRecord) -> bool:
        """``record_launch`` found the claim no longer ``reserved``. True when the claim
        records this very instance (another round adopted it: nothing lost); otherwise the
        instance is terminated (nobody owns it) and False returned."""
        launched = outcome.launched
        assert launched is not None
        self.open_by_id[launched.claim_id] = current
        if current.instance_id == launched.instance_id and current.state != ClaimState.CLOSED:
            logger.info("launch already recorded", extra={"claim": launched.claim_id, "instance": launched.instance_id, "state": str(current.state)})
            return True
        logger.warning("claim changed while its launch was recorded: terminating the instance", extra={
            "claim": launched.claim_id, "state": str(current.state), "reason": current.reason or "no reason", "instance": launched.instance_id,
        })
        try:
            self.runtime.ec2.terminate_instances([launched.instance_id])
        except Ec2Error as error:  # gc terminates it later: tagged for a closed claim, unclaimed
            logger.error("terminating an unowned instance failed", extra={"claim": launched.claim_id, "instance": launched.instance_id, "error": str(error)})
        if current.state == ClaimState.CLOSED:
            self.state.release_capacity(launched.node_pool, launched.claim_id)  # idempotent
            failure = LaunchFailure(
                launched.claim_id, launched.node_pool, launched.pods, "ClaimClosed",
                f"claim closed while its launch was recorded ({current.reason or 'closed'}); instance {launched.instance_id} terminated",
            )
            self.failures.append(failure)
            self.runtime.count("LaunchFailures", 1, reason=failure.reason)
        return False

    def mark_unavailable(self, failed: Iterable[tuple[OfferingKey, str]]) -> None:
        """Leave these offerings out for :data:`UNAVAILABLE_FOR`, here and in every other invocation."""
        until = self.now + UNAVAILABLE_FOR
        for key, code in sorted(set(failed)):
            if key in self.unavailable:
                continue
            self.state.mark_unavailable(key, until, code)
            self.unavailable.add(key)
            self.capacity_errors.append(key)
            self.runtime.count("CapacityErrors", 1)

    def _close(self, claim_id: str, pool: str, reason: str, *, expected_state: str | None = None) -> bool:
        """Close a claim and release its reservation. With ``expected_state``, only from that
        state: False (nothing changed) when a concurrent transition moved it elsewhere."""
        release = True
        try:
            closed = self.state.update_claim(claim_id, expected_state=expected_state, state=ClaimState.CLOSED, closed_at=self.now, reason=reason)
            self.open_by_id[claim_id] = closed
        except ClaimStateConflict as conflict:
            self.open_by_id[claim_id] = conflict.current
            release = conflict.current.state == ClaimState.CLOSED  # closed by someone else: releasing again is harmless
            return release
        finally:
            if release:
                self.state.release_capacity(pool, claim_id)
        return True

    def is_closed(self, claim_id: str) -> bool:
        found = self.open_by_id.get(claim_id)
        return found is not None and found.state == ClaimState.CLOSED

    def fail(self, failure: LaunchFailure, pods: Sequence[Pod], reason_text: str) -> None:
        self._close(failure.claim_id, failure.node_pool, failure.reason)
        self.failures.append(failure)
        self.runtime.count("LaunchFailures", 1, reason=failure.reason)
        for pod in pods:
            self._unschedulable(pod, reason_text)

    # ------------------------------------------------------------ events

    def _unschedulable(self, pod: Pod, reason: str) -> None:
        if LIMIT_REACHED in reason and pod.key not in self.unschedulable:
            self.runtime.count("LimitReached", 1)
        self.unschedulable[pod.key] = UnschedulablePod(pod.key, reason)
        obj = self.pod_refs.get(pod.key)
        if obj is not None:
            self._pod_event(obj, "FailedScheduling", f"Joiner: {reason}", "Warning")

    def _pod_event(self, obj: JsonDict, reason: str, message: str, event_type: str = "Normal") -> None:
        self.pod_events.append((obj, reason, message, event_type))

    def _emit(self, obj: JsonDict, reason: str, message: str, event_type: str = "Normal") -> bool:
        meta = obj.get("metadata") or {}
        key = (meta.get("uid") or f"{obj.get('kind')}/{meta.get('namespace')}/{meta.get('name')}", reason, message)
        if not self.runtime.recent_events.add_if_absent(key, self.now):
            return False
        try:
            self.kube.create_event(obj, reason, message, event_type)
        except KubernetesError as error:
            logger.warning("writing an event failed", extra={"reason": reason, "object": f'{meta.get("namespace", "")}/{meta.get("name")}', "error": str(error)})
            return False
        return True

    def flush_pod_events(self) -> None:
        # Explanations (warnings) first: when the cap cuts, it cuts Nominated notices.
        ordered = sorted(self.pod_events, key=lambda event: event[3] != "Warning")
        events = ordered[:MAX_POD_EVENTS_PER_ROUND]
        if len(self.pod_events) > len(events):
            logger.warning("pod events not written this round (over the limit)", extra={"skipped": len(self.pod_events) - len(events), "limit": MAX_POD_EVENTS_PER_ROUND})
        self.pod_events = []
        if len(events) <= 4:
            for event in events:
                self._emit(*event)
            return
        with ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="joiner-events") as pool:
            list(pool.map(lambda e: self._emit(*e), events))


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
    work = PlanningRound(runtime, now, owner, lease)
    work.read()
    registration = reconcile_registration(runtime, work.claims, work.nodes, work.pools, now)
    for message in registration.errors:
        logger.warning("registration failed", extra={"error": message})
    work.resolve_classes()
    work.instance_types()
    work.compute_usage(registration)
    work.publish_unreserved()
    for claim_id in registration.timed_out:
        pool_obj = work.pools_raw.get(next((c.node_pool for c in work.claims if c.claim_id == claim_id), ""))
        if pool_obj is not None:
            work._emit(pool_obj, "RegistrationTimeout", f"nodeclaim {claim_id}: no Node registered within 15 minutes; instance terminated", "Warning")

    open_claims = list(registration.claims)
    orphans_closed, orphans_adopted = _settle_orphans(work, open_claims)
    work.open_by_id = {c.claim_id: c for c in open_claims if c.claim_id not in orphans_closed}
    in_flight = work.in_flight(work.open_by_id.values())

    pending = [p for p in work.pods if p.is_pending and p.key in work.marked_unschedulable]
    ages = [(now - (p.unschedulable_since or p.created or now)).total_seconds() for p in pending]
    if pending:  # an idle cluster emits no series: each costs $0.30 a month (the alarm reads missing as fine)
        runtime.count("PodsPending", len(pending))
        runtime.count("PendingPodAgeSeconds", max(ages), "Seconds")
    promised = work.promised_to_reserved()
    work.existing_claims.extend(sorted({promised[p.key] for p in pending if p.key in promised}))
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
                work._unschedulable(pod, item.reason)
        launch_started = time.perf_counter()
        replan_seconds = launch_all(work, plan, pods_by_key, in_flight)
        launch_seconds = time.perf_counter() - launch_started - replan_seconds
        plan_seconds += replan_seconds
        runtime.count("DecisionSeconds", time.perf_counter() - started, "Seconds")

    _provision_static(work)
    work.flush_pod_events()
    _patch_pool_status(work)
    _patch_class_status(work)
    _patch_overlay_status(work)
    cost = sum(c.price or 0.0 for c in work.open_by_id.values() if c.state in (ClaimState.LAUNCHED, ClaimState.REGISTERED, ClaimState.INITIALIZED))
    if cost > 0:
        runtime.count("ManagedCostPerHour", round(cost, 6), "None")
    runtime.count("ScanCompleted", 1)
    total = time.perf_counter() - started
    return RoundResult(
        ran=True,
        pending_pods=len(pending),
        pending_pod_uids=frozenset(p.uid or p.key for p in pending),
        launched=tuple(work.launched),
        existing_claims=tuple(work.existing_claims),
        failures=tuple(work.failures),
        unschedulable=tuple(work.unschedulable[k] for k in sorted(work.unschedulable)),
        capacity_errors=tuple(work.capacity_errors),
        plans=work.plans,
        registration=registration,
        invalid_objects=tuple(work.invalid),
        orphans_closed=tuple(orphans_closed),
        orphans_adopted=tuple(orphans_adopted),
        read_seconds=read_done - started,
        plan_seconds=plan_seconds,
        launch_seconds=launch_seconds,
        total_seconds=total,
    )


def published_unreserved(state: StatePort) -> dict[str, Resources]:
    """NodePool -> the unreserved usage the last full round published (:meth:`PlanningRound.publish_unreserved`)."""
    found: dict[str, Resources] = {}
    for item in state.list_items(UNRESERVED_KIND):
        amounts = item.get("unreserved")
        if isinstance(amounts, dict):
            found[str(item.get("pool"))] = Resources({str(k): int(v) for k, v in amounts.items()})
    return found


def launch_all(work: PlanningRound, plan: Plan, pods_by_key: Mapping[str, Pod], in_flight: list[InFlightClaim]) -> float:
    """Launch the plan's claims in waves. Pods of claims that failed on capacity are
    re-planned at once without the failed offerings; each wave is one CreateFleet per
    claim. Returns the seconds spent re-planning."""
    replan_seconds = 0.0
    claim_plans = list(plan.node_claims)
    failed: dict[str, _Outcome] = {}
    for wave in range(MAX_LAUNCH_ATTEMPTS):
        jobs = [job for job in (work.prepare(c, pods_by_key) for c in claim_plans) if job is not None]
        # A claim that failed in the previous wave and was not planned again is closed now;
        # its pods were re-planned onto other claims or reported by the re-plan.
        planned_ids = {job.claim_id for job in jobs}
        for claim_id in sorted(set(failed) - planned_ids):
            _give_up(work, failed.pop(claim_id), report_pods=False)
        work.keep_lease()
        outcomes = _run_parallel(work.launch, jobs, work.keep_lease)
        failed = {}
        retry_pods: list[Pod] = []
        for outcome in outcomes:
            if outcome.capacity_errors:
                work.mark_unavailable(outcome.capacity_errors)
            if outcome.launched is not None:
                try:
                    recorded = work.record_launch(outcome)
                except Exception as error:  # noqa: BLE001 - the instance exists; the adapter's tag guard and gc find it
                    logger.error("launched but recording failed", extra={"claim": outcome.launched.claim_id, "instance": outcome.launched.instance_id, "error": str(error)})
                    work.launched.append(outcome.launched)
                    recorded = True
                if recorded:
                    in_flight.append(_in_flight_from(outcome))
                continue
            assert outcome.failure is not None
            if outcome.capacity_failure:
                failed[outcome.job.claim_id] = outcome
                retry_pods.extend(outcome.job.pods)
            else:
                failure = outcome.failure
                work.fail(failure, outcome.job.pods, f"launch failed: {failure.reason}: {failure.message}")
        if not failed or wave == MAX_LAUNCH_ATTEMPTS - 1:
            break
        started = time.perf_counter()
        replan = work.solve(sorted(retry_pods, key=lambda p: p.key), sorted(in_flight, key=lambda c: c.name))
        replan_seconds += time.perf_counter() - started
        failed_by_pod = {key: outcome for outcome in failed.values() for key in outcome.job.plan.pods}
        for item in replan.unschedulable:
            pod = pods_by_key.get(item.pod)
            if pod is not None:
                work._unschedulable(pod, f"{item.reason} (after capacity errors: {_short(failed_by_pod.get(item.pod))})")
                work.runtime.count("InsufficientCapacity", 1)
        claim_plans = list(replan.node_claims)
    for claim_id in sorted(failed):
        _give_up(work, failed[claim_id], report_pods=True)
    return replan_seconds




def _give_up(work: PlanningRound, outcome: _Outcome, *, report_pods: bool) -> None:
    """Close a claim that failed on capacity (releasing its reservation)."""
    job = outcome.job
    if work.is_closed(job.claim_id):
        return
    failure = outcome.failure or LaunchFailure(job.claim_id, job.pool.name, job.plan.pods, "InsufficientCapacity", "")
    reason = f"insufficient capacity after {MAX_LAUNCH_ATTEMPTS} attempts: {failure.message}"
    pods = [p for p in job.pods if p.key not in work.unschedulable] if report_pods else []
    work.fail(failure, pods, reason)
    if pods:
        work.runtime.count("InsufficientCapacity", len(pods))


def _short(outcome: _Outcome | None) -> str:
    if outcome is None or outcome.failure is None:
        return "none"
    return outcome.failure.message[:300]


def _in_flight_from(outcome: _Outcome) -> InFlightClaim:
    launched = outcome.launched
    assert launched is not None
    job = outcome.job
    instance_type = next((t for t in job.types if t.name == launched.instance_type), job.types[0])
    requirements = instance_type.requirements.intersect(job.pool.template_requirements()).intersect(
        Requirements.from_labels({wk.ZONE: launched.zone, wk.CAPACITY_TYPE: launched.capacity_type, wk.NODECLAIM: launched.claim_id})
    )
    return InFlightClaim(
        name=launched.claim_id,
        node_pool=launched.node_pool,
        instance_type=launched.instance_type,
        zone=launched.zone,
        capacity_type=launched.capacity_type,
        allocatable=instance_type.allocatable,
        capacity=instance_type.capacity,
        requirements=requirements,
        pods=launched.pods,
    )


def _settle_orphans(work: PlanningRound, claims: list[ClaimRecord]) -> tuple[list[str], list[str]]:
    """``reserved`` claims older than :data:`ORPHAN_AFTER` belong to a round that died
    between reserving and recording its launch: adopt the instance it started (found by
    its ``joiner.dev/nodeclaim`` tag) or close the claim and return its reservation."""
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
                price = _prices(pool_types.values()).get(OfferingKey(record.instance_type, record.zone, record.capacity_type), 0.0)
                claims[index] = work.state.update_claim(
                    claim.claim_id, expected_state=ClaimState.RESERVED, state=ClaimState.LAUNCHED, instance_id=record.instance_id,
                    instance_type=record.instance_type, zone=record.zone, capacity_type=record.capacity_type, price=price,
                    launched_at=record.launch_time or work.now,
                )
                adopted.append(claim.claim_id)
            elif work._close(claim.claim_id, claim.node_pool, "launch abandoned", expected_state=ClaimState.RESERVED):
                closed.append(claim.claim_id)
            else:  # moved on concurrently (launched by its round): theirs stands
                claims[claims.index(claim)] = work.open_by_id.get(claim.claim_id, claim)
        except ClaimStateConflict as conflict:  # settled concurrently (gc, another round): theirs stands
            claims[claims.index(claim)] = conflict.current
            logger.info("orphaned claim was settled concurrently", extra={"claim": claim.claim_id, "state": str(conflict.current.state)})
        except Exception as error:  # noqa: BLE001
            logger.warning("settling an orphaned claim failed", extra={"claim": claim.claim_id, "error": str(error)})
    return closed, adopted


# ---------------------------------------------------------------- static NodePools


def static_identity(index: int) -> tuple[str, ...]:
    """What a static NodePool's replica ``index`` claim id derives from (with the pool and the
    generation, :func:`claim_id_for`): a retried launch of the same replica reuses its id."""
    return (f"static-replica/{index}",)


def _static_plan(work: PlanningRound, pool: NodePool) -> NodeClaimPlan | None:
    """One replica of static ``pool`` as a claim plan (:func:`joiner.domain.disruption.static_replica`)."""
    from joiner.domain.disruption import static_replica

    replica = static_replica(pool, work.types_by_pool.get(pool.name, ()), frozenset(work.unavailable))
    if replica is None:
        return None
    return NodeClaimPlan(
        node_pool=pool.name, instance_types=replica.instance_types, zones=replica.zones, capacity_types=replica.capacity_types,
        pods=(), price=replica.price, requirements=pool.template_requirements(), requests=EMPTY,
    )


def live_replicas(work: PlanningRound, pool: NodePool) -> int:
    """Replicas static ``pool`` has now: its open claims not going away (reserved, launched,
    registered, initialized), plus any of its Nodes not being deleted that no open claim
    records (so the scanner and the disruption pass count alike)."""
    open_claims = {
        c.claim_id for c in work.open_by_id.values()
        if c.node_pool == pool.name and c.state not in (ClaimState.CLOSED, ClaimState.TERMINATING) and c.claim_id not in work.retiring_claims
    }
    recorded = {c.claim_id for c in work.open_by_id.values()}
    unclaimed = sum(
        1 for node in work.nodes
        if node.labels.get(wk.NODEPOOL) == pool.name and not node.deleting and node.labels.get(wk.NODECLAIM) not in recorded
        and not any(t.key == wk.DISRUPTED_TAINT_KEY for t in node.taints)
    )
    return len(open_claims) + unclaimed


def launch_static_replicas(work: PlanningRound, pool: NodePool, count: int) -> list[str]:
    """Launch ``count`` replicas of static ``pool`` (claims without pods), each under the
    lowest replica index no open claim holds, within ``limits.nodes``. A capacity error is
    retried at once on the remaining offerings (the same claim ids); a replica that cannot
    launch is closed, reported on the NodePool, and tried again by the next round. Returns
    the claim ids launched."""
    launched: list[str] = []
    if count <= 0 or pool.deleting:
        return launched
    identities: list[tuple[str, ...]] = []
    for index in range(count + len(work.open_by_id) + 1):
        identity = static_identity(index)
        _, existing = work._claim_identity(pool.name, identity)
        if existing is None:
            identities.append(identity)
            if len(identities) == count:
                break
    pool_obj = work.pools_raw.get(pool.name) or {"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": pool.name}}
    retrying: dict[tuple[str, ...], _Outcome] = {}  # replicas that failed on capacity, to try on other offerings
    for wave in range(MAX_LAUNCH_ATTEMPTS):
        plan = _static_plan(work, pool)
        jobs = []
        for identity in identities if plan is not None else ():
            job = work.prepare(plan, {}, identity=identity)  # type: ignore[arg-type]
            if job is not None:
                jobs.append((identity, job))
                retrying.pop(identity, None)
        for outcome in retrying.values():  # nothing left to try: closed, the next round starts a new generation
            _give_up(work, outcome, report_pods=False)
        if plan is None:
            work._emit(pool_obj, "StaticReplicasNotLaunched",
                       f"{len(identities)} replica(s) missing: no instance type of the NodePool has an available offering", "Warning")
            break
        work.keep_lease()
        outcomes = _run_parallel(work.launch, [job for _, job in jobs], work.keep_lease)
        by_claim = {job.claim_id: identity for identity, job in jobs}
        retrying = {}
        for outcome in outcomes:
            if outcome.capacity_errors:
                work.mark_unavailable(outcome.capacity_errors)
            if outcome.launched is not None:
                try:
                    work.record_launch(outcome)
                except Exception as error:  # noqa: BLE001 - the instance exists; the adapter's tag guard and gc find it
                    logger.error("static replica launched but recording failed", extra={"claim": outcome.launched.claim_id, "instance": outcome.launched.instance_id, "error": str(error)})
                    work.launched.append(outcome.launched)
                launched.append(outcome.launched.claim_id)
            elif outcome.capacity_failure and wave < MAX_LAUNCH_ATTEMPTS - 1:
                retrying[by_claim[outcome.job.claim_id]] = outcome
            else:
                _give_up(work, outcome, report_pods=False)
                if outcome.failure is not None:
                    work._emit(pool_obj, "StaticReplicasNotLaunched", f"replica {outcome.job.claim_id}: {outcome.failure.reason}: {outcome.failure.message}", "Warning")
        identities = list(retrying)
        if not identities:
            break
    if launched:
        work.runtime.count("StaticReplicasLaunched", len(launched), nodePool=pool.name)
    return launched


def _provision_static(work: PlanningRound) -> None:
    """Bring every static NodePool up to ``spec.replicas`` whatever the pods need (Karpenter's
    StaticCapacity); the disruption pass removes a surplus."""
    for name in sorted(work.pools):
        pool = work.pools[name]
        if pool.replicas is None or pool.deleting or work.pool_problem(pool):
            continue
        missing = pool.replicas - live_replicas(work, pool)
        if missing > 0:
            logger.info("static nodepool: launching replicas", extra={"nodepool": name, "launching": missing, "replicas": pool.replicas})
            launch_static_replicas(work, pool, missing)


def _patch_pool_status(work: PlanningRound) -> None:
    """NodePool status: resources and node count of its Nodes, and a Ready condition."""
    for name in sorted(work.pools_raw):
        pool = work.pools.get(name)
        raw = work.pools_raw.get(name) or {}
        current = raw.get("status") or {}
        usage = work.in_use.get(name, EMPTY)
        resources = Resources({k: v for k, v in usage.items() if k != NODES}).as_quantities()
        resources[NODES] = str(work.node_counts.get(name, 0))
        if pool is None:
            problem, reason = work.invalid_by_name.get((str(raw.get("kind")), name), "cannot be read"), "InvalidSpec"
        else:
            problem, reason = work.pool_problem(pool), "NodeClassNotReady"
        ready: dict[str, Any] = {
            "type": "Ready",
            "status": "False" if problem else "True",
            "reason": reason if problem else "Ready",
            "message": problem,
        }
        previous = next((c for c in current.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
        unchanged = previous is not None and all(previous.get(k) == v for k, v in ready.items())
        ready["lastTransitionTime"] = previous.get("lastTransitionTime") if unchanged and previous else work.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        others = [c for c in current.get("conditions") or [] if isinstance(c, dict) and c.get("type") != "Ready"]
        status = {"resources": resources, "nodes": work.node_counts.get(name, 0), "conditions": [*others, ready]}
        if current.get("resources") == resources and current.get("nodes") == status["nodes"] and unchanged:
            continue
        try:
            work.kube.patch_node_pool_status(name, status)
        except KubernetesError as error:
            logger.warning("NodePool status patch failed", extra={"nodepool": name, "error": str(error)})


def _patch_overlay_status(work: PlanningRound) -> None:
    """NodeOverlay status: the instance types and NodePools it matched, and conditions
    ``ValidationSucceeded`` and ``Ready`` (False with reason ``Conflict`` naming the other
    overlay, or ``RuntimeValidation`` with the parse error), as Karpenter's controller writes."""
    from joiner.domain.overlays import MAX_LISTED_TYPES, OverlayOutcome

    stamp = work.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in sorted(getattr(work, "overlays_raw", {})):
        current = work.overlays_raw[name].get("status") or {}
        outcome = work.overlay_outcomes.get(name, OverlayOutcome())
        error = work.overlay_errors.get(name)
        if error is not None:
            reason, message = "RuntimeValidation", error
        elif outcome.conflict:
            reason, message = "Conflict", outcome.conflict
        else:
            reason, message = "", ""
        conditions = []
        previous = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, dict)}
        for kind in ("ValidationSucceeded", "Ready"):
            condition: dict[str, Any] = {"type": kind, "status": "False" if reason else "True", "reason": reason or kind, "message": message}
            old = previous.get(kind)
            same = old is not None and all(old.get(k) == v for k, v in condition.items())
            condition["lastTransitionTime"] = old.get("lastTransitionTime") if same and old else stamp
            conditions.append(condition)
        status: dict[str, Any] = {
            "instanceTypes": list(outcome.instance_types[:MAX_LISTED_TYPES]),
            "instanceTypeCount": len(outcome.instance_types),
            "nodePools": list(outcome.node_pools[:MAX_LISTED_TYPES]),
            "conditions": conditions,
        }
        if all(current.get(k) == v for k, v in status.items() if k != "conditions") and all(
            previous.get(c["type"]) == c for c in conditions
        ):
            continue
        try:
            work.kube.patch_node_overlay_status(name, status)
        except KubernetesError as error:
            logger.warning("NodeOverlay status patch failed", extra={"nodeoverlay": name, "error": str(error)})


#: ``maxItems`` of a NodeClass's ``status.subnets`` and ``status.securityGroups`` in the CRD.
STATUS_MAX_ITEMS = 1000


def _class_amis(work: PlanningRound, node_class: NodeClass) -> tuple[list[JsonDict], str]:
    """The AMIs a launch of this NodeClass uses now, one per architecture and AL2023 variant
    (:data:`~joiner.domain.amis.PUBLISHED`; one per architecture for AMIs chosen by id, name
    or tags), as ``status.amis`` entries, and the first lookup error. Shares the disruption
    pass's cache keys; lookups EKS answers with no such AMI are remembered as misses."""
    try:
        version = work.runtime.cluster().version
    except Exception as error:  # noqa: BLE001 - reported in the condition, tried again next round
        return [], f"reading the cluster's Kubernetes version failed: {error}"
    by_alias = any(term.alias for term in node_class.ami_selector_terms) or not node_class.ami_selector_terms
    wanted = PUBLISHED if by_alias else tuple((arch, STANDARD) for arch in sorted({arch for arch, _ in PUBLISHED}))
    amis: list[JsonDict] = []
    first_error = ""
    for arch, variant in wanted:
        key = ("ami", repr(node_class), version, arch, variant)
        missing = ("ami-missing", *key[1:])
        ami = work.runtime.resolved.get(key, work.now)
        if ami is None and work.runtime.resolved.get(missing, work.now) is None:
            try:
                ami = work.runtime.ec2.resolve_ami(node_class, version, arch, variant)
            except Ec2Error as error:
                first_error = first_error or str(error)
                if error.code == "AMINotFound":
                    work.runtime.resolved.put(missing, str(error), work.now)
                continue
            if ami:
                work.runtime.resolved.put(key, ami, work.now)
        if ami:
            requirements: list[JsonDict] = [{"key": wk.ARCH, "operator": "In", "values": [arch]}]
            if by_alias:
                requirements += variant_requirements(variant)
            amis.append({"id": str(ami), "requirements": requirements})
    if not amis and not first_error:
        first_error = str(work.runtime.resolved.get(("ami-missing", repr(node_class), version, *wanted[0]), work.now) or "no AMI resolved")
    return amis, first_error


def _patch_class_status(work: PlanningRound) -> None:
    """NodeClass status: what its selectors resolve to (subnets, security groups, AMIs) and a
    Ready condition saying whether nodes can launch from it, and if not, why. Written only
    when something changed (the condition's transition time is kept while it holds)."""
    for name in sorted(work.classes_raw):
        raw = work.classes_raw[name]
        current = raw.get("status") or {}
        node_class = work.classes.get(name)
        env = work.envs.get(name)
        subnets: list[JsonDict] = []
        groups: list[JsonDict] = []
        amis: list[JsonDict] = []
        reservations: list[JsonDict] = []
        if node_class is None:
            problem, reason = work.invalid_by_name.get((str(raw.get("kind")), name), "cannot be read"), "InvalidSpec"
        elif env is None:
            problem, reason = "not resolved", "ResolutionFailed"
        else:
            # within the CRD's maxItems, or the API server would refuse the whole patch
            subnets = [{"id": s.id, "zone": s.zone} for s in sorted(env.subnets, key=lambda s: (s.zone, s.id))][:STATUS_MAX_ITEMS]
            groups = [{"id": group} for group in sorted(env.security_groups)][:STATUS_MAX_ITEMS]
            reservations = [
                {"id": r.id, "instanceType": r.instance_type, "availabilityZone": r.zone, "ownerID": r.owner_id,
                 "instanceMatchCriteria": r.match_criteria, "reservationType": r.reservation_type}
                for r in env.reservations
            ][:STATUS_MAX_ITEMS]
            problem, reason = env.error, env.reason or "ResolutionFailed"
            if not problem:
                amis, ami_error = _class_amis(work, node_class)
                if not amis:
                    problem, reason = f"no AMI: {ami_error}", "AMINotFound"
        ready: JsonDict = {
            "type": "Ready",
            "status": "False" if problem else "True",
            "reason": reason if problem else "Ready",
            "message": problem,
        }
        generation = (raw.get("metadata") or {}).get("generation")
        if isinstance(generation, int):
            ready["observedGeneration"] = generation
        previous = next((c for c in current.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
        unchanged = previous is not None and all(previous.get(k) == v for k, v in ready.items())
        ready["lastTransitionTime"] = (
            previous.get("lastTransitionTime") if previous is not None and previous.get("status") == ready["status"] and previous.get("lastTransitionTime")
            else work.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        others = [c for c in current.get("conditions") or [] if isinstance(c, dict) and c.get("type") != "Ready"]
        status: JsonDict = {"subnets": subnets, "securityGroups": groups, "amis": amis, "conditions": [*others, ready]}
        if reservations or current.get("capacityReservations"):
            status["capacityReservations"] = reservations
        if unchanged and all(current.get(field) == status.get(field) for field in ("subnets", "securityGroups", "amis", "capacityReservations")):
            continue
        try:
            work.kube.patch_node_class_status(name, status)
        except KubernetesError as error:
            logger.warning("NodeClass status patch failed", extra={"nodeclass": name, "error": str(error)})


# ---------------------------------------------------------------- helpers


def _run_parallel(function: Callable[[_Job], _Outcome], jobs: Sequence[_Job], between: Callable[[], None]) -> list[_Outcome]:
    """``function`` over ``jobs`` on up to :data:`CONCURRENCY` threads, results in job
    order; ``between`` runs on the calling thread as each one completes."""
    if len(jobs) <= 1:
        return [function(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=min(CONCURRENCY, len(jobs)), thread_name_prefix="joiner-launch") as pool:
        futures = {pool.submit(function, job): index for index, job in enumerate(jobs)}
        results: list[_Outcome | None] = [None] * len(jobs)
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


def unreserved_usage(
    nodes: Iterable[Node],
    claims: Iterable[ClaimRecord],
    reservations: Mapping[str, Mapping[str, Resources]],
    node_pools: Mapping[str, str] | None = None,
) -> dict[str, Resources]:
    """Per limited NodePool (the keys of ``reservations``: pool -> claim id -> amount), the
    capacity plus one ``nodes`` of its Nodes that no reservation covers. A Node is covered when
    the open claim that launched its instance holds a reservation, or, for an instance no open
    claim records yet (a launch not recorded), when its ``joiner.dev/nodeclaim`` label names a
    reserved claim that records no instance: a kubelet can label itself, so a label naming
    another instance's claim covers nothing. ``node_pools`` (node name -> pool, from
    registration) places Nodes whose labels are not set yet. Deleting Nodes count too: their
    instance may run until termination ends."""
    claim_of_instance = {c.instance_id: c.claim_id for c in claims if c.instance_id}
    with_instance = set(claim_of_instance.values())
    result: dict[str, Resources] = {}
    for node in nodes:
        pool = node.labels.get(wk.NODEPOOL) or (node_pools or {}).get(node.name)
        if pool is None or pool not in reservations:
            continue
        claim_id = claim_of_instance.get(node.instance_id or "")
        if claim_id is None:
            label = node.labels.get(wk.NODECLAIM)
            claim_id = label if label and label not in with_instance else None
        if claim_id and claim_id in reservations[pool]:
            continue
        result[pool] = result.get(pool, EMPTY) + node.capacity + {NODES: 1000}
    return result


def _total(amounts: Iterable[Resources]) -> Resources:
    total = EMPTY
    for amount in amounts:
        total = total + amount
    return total


def _prices(types: Iterable[InstanceType]) -> dict[OfferingKey, float]:
    return {
        OfferingKey(t.name, o.zone, o.capacity_type): o.price
        for t in types
        for o in t.offerings
        if o.available
    }


def _failed_offerings(error: Any, request: FleetRequest, zone_of_subnet: Mapping[str, str]) -> list[OfferingKey]:
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


def _summarize_errors(errors: Sequence[Any], request: FleetRequest) -> str:
    """``InsufficientInstanceCapacity: c5.large spot in us-east-1a, us-east-1b`` per code and type."""
    grouped: dict[tuple[str, str, str], set[str]] = {}
    for error in errors:
        key = (error.code, error.instance_type or "any type", error.capacity_type or request.capacity_type)
        grouped.setdefault(key, set()).add(error.zone or "any zone")
    return "; ".join(f"{code}: {name} {ct} in {', '.join(sorted(zones))}" for (code, name, ct), zones in sorted(grouped.items()))


def public_ip_zones(subnets: Iterable[Subnet]) -> frozenset[str]:
    """Zones whose launch subnet (:func:`~joiner.domain.launch.zonal_subnets`: the one a fleet
    request uses there) gives instances a public IPv4 address."""
    return frozenset(zone for zone, subnet in zonal_subnets(subnets).items() if subnet.map_public_ip)


def _zonal(runtime: Runtime, types: tuple[InstanceType, ...], zones: frozenset[str], public: frozenset[str], now: datetime) -> tuple[InstanceType, ...]:
    """``types`` with offerings outside ``zones`` removed and those in ``public`` zones priced
    with a public IPv4 address (memoised per runtime)."""
    key = ("zonal", id(types), zones, public)
    cached: tuple[tuple[InstanceType, ...], tuple[InstanceType, ...]] | None = runtime.resolved.get(key, now)
    if cached is not None and cached[0] is types:
        return cached[1]
    result = []
    for instance_type in types:
        offerings = tuple(
            (dataclasses.replace(o, price=o.price + PUBLIC_IPV4_PER_HOUR) if o.zone in public else o)
            for o in instance_type.offerings if o.zone in zones
        )
        if offerings == instance_type.offerings:
            result.append(instance_type)
        elif offerings:
            offered = frozenset(o.zone for o in offerings if o.available)
            requirements = instance_type.requirements.add(Requirement(wk.ZONE, False, offered))
            result.append(dataclasses.replace(instance_type, offerings=offerings, requirements=requirements))
    filtered = tuple(result)
    runtime.resolved.put(key, (types, filtered), now)
    return filtered


# ---------------------------------------------------------------- scanner loop


#: Seconds a round may need at most; no round starts with less Lambda time left than this.
ROUND_RESERVE_SECONDS = 15.0
POLL_SECONDS = 1.0
#: After a skipped (lease busy) or failed round, wait this long before trying again.
RETRY_SECONDS = 5.0


def sync_node_claims(runtime: Runtime) -> None:
    """The NodeClaim mirrors after a round (:mod:`joiner.services.nodeclaims`); never raises."""
    from joiner.services.nodeclaims import sync_node_claims as sync

    try:
        sync(runtime)
    except Exception:  # noqa: BLE001 - a mirror must never fail a scan
        logger.exception("nodeclaim mirror sync failed")


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
            due_batch = batch_started is not None and last_new is not None and (
                (now - last_new).total_seconds() >= settings.batch_idle_seconds
                or (now - batch_started).total_seconds() >= settings.batch_max_seconds
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
