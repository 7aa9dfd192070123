"""One round's view of the cluster (Karpenter's ``state.Cluster`` as a round reads it): the
read, NodeClass resolution, instance types, usage and limits, the claims in flight, planning,
and the round's events.

:class:`PlanningRound` reads the cluster and the state in parallel (pods and Nodes through the
container's :class:`~joiner.services.cluster_state.ClusterCache`), resolves each NodeClass's
subnets, security groups and capacity reservations, prices each NodePool's instance types for
its zones (NodeOverlays applied), and works out what counts against each NodePool's limit.
The scanner (:mod:`joiner.services.provisioning`), the interruption service's replacements
and the disruption pass plan with it; :mod:`joiner.services.launcher` launches its plans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain import snapshot as snap
from joiner.domain.costs import PUBLIC_IPV4_PER_HOUR, block_device_cost_per_hour
from joiner.domain.launch import zonal_subnets
from joiner.domain.model import DaemonSet, InFlightClaim, InstanceType, Node, NodeClass, NodePool, OfferingKey, Plan, Pod, UnschedulablePod
from joiner.domain.planning import build_problem
from joiner.domain.requirements import Requirement
from joiner.domain.reservations import reservation_for, with_reserved_offerings
from joiner.domain.reservations import room as reservation_room
from joiner.domain.resources import EMPTY, Resources
from joiner.domain.scheduling import solve
from joiner.observability import logger
from joiner.ports import CapacityReservation, ClaimRecord, ClaimState, Ec2Error, JsonDict, KubernetesError, StatePort, Subnet
from joiner.services.cluster_state import object_reference
from joiner.services.registration import RegistrationResult

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = [
    "UNRESERVED_KIND",
    "NODES",
    "LIMIT_REACHED",
    "MAX_POD_EVENTS_PER_ROUND",
    "EVENT_CONCURRENCY",
    "ClassEnv",
    "PlanningRound",
    "published_unreserved",
    "unreserved_usage",
    "public_ip_zones",
    "zonal",
]

#: State items holding each limited NodePool's usage by Nodes no reservation covers.
UNRESERVED_KIND = "UNRESERVED"
#: The resource counting Nodes in usage, limits and reservations (1000 per Node: milli-units).
NODES = "nodes"
#: The reason prefix of pods refused by a NodePool limit.
LIMIT_REACHED = "limit reached"
#: Pod events (Nominated, FailedScheduling) one round writes at most; the rest are logged.
MAX_POD_EVENTS_PER_ROUND = 2000
#: Parallel event writes.
EVENT_CONCURRENCY = 8


@dataclass
class ClassEnv:
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


class PlanningRound:
    """The cluster as one round sees it: what it read (pods, Nodes, DaemonSets, NodePools,
    NodeClasses, open claims, unavailable offerings), the NodeClasses resolved against EC2,
    each NodePool's instance types, usage and limits, and the claims in flight; it plans with
    them (:meth:`solve`) and reports pods and objects in events. Launching its plans is the
    :class:`~joiner.services.launcher.Launcher`'s."""

    def __init__(self, runtime: Runtime, now: datetime) -> None:
        self.runtime = runtime
        self.now = now
        self.kube = runtime.kube
        self.state = runtime.state
        self.invalid: list[str] = []
        #: (kind, name) -> why a NodePool or NodeClass could not be read
        self.invalid_by_name: dict[tuple[str, str], str] = {}
        self.unschedulable: dict[str, UnschedulablePod] = {}
        self.pod_events: list[tuple[JsonDict, str, str, str]] = []
        #: pod key -> a reference to write events on (unbound pods only, see :meth:`read`)
        self.pod_refs: dict[str, JsonDict] = {}
        #: keys of unbound pods kube-scheduler marked unschedulable
        self.marked_unschedulable: set[str] = set()
        self.plans = 0
        #: what Nodes no reservation covers use, per limited NodePool: chosen by how the round read
        self._unreserved_of: Callable[[RegistrationResult], dict[str, Resources]] = self._unreserved_of_nodes
        #: open claims by id, kept current as this round reserves, launches and closes them
        self.open_by_id: dict[str, ClaimRecord] = {}
        #: claims of nodes being taken away (replacement rounds): they never host the pods again
        self.retiring_claims: set[str] = set()
        #: capacity reservation id -> instances this round may still launch into it
        self.reservation_left: dict[str, int] = {}
        # What the reads, the NodeClass resolution and the catalog fill in (the constructors
        # :meth:`for_cluster` and :meth:`for_replacement` run them all).
        self.claims: list[ClaimRecord] = []
        self.unavailable: set[OfferingKey] = set()
        self.pods: tuple[Pod, ...] = ()
        self.nodes: tuple[Node, ...] = ()
        self.all_nodes: tuple[Node, ...] = ()
        self.daemonsets: tuple[DaemonSet, ...] = ()
        self.pools_raw: dict[str, JsonDict] = {}
        self.pools: dict[str, NodePool] = {}
        self.classes_raw: dict[str, JsonDict] = {}
        self.classes: dict[str, NodeClass] = {}
        self.snapshot = snap.Snapshot()
        self.envs: dict[str, ClassEnv] = {}
        self.types_by_pool: dict[str, tuple[InstanceType, ...]] = {}
        self.type_index: dict[str, dict[str, InstanceType]] = {}
        self.overlays_raw: dict[str, JsonDict] = {}
        self.overlay_errors: dict[str, str] = {}
        self.overlay_outcomes: dict[str, Any] = {}
        self.in_use: dict[str, Resources] = {}
        self.node_counts: dict[str, int] = {}
        self.reservations: dict[str, dict[str, Resources]] = {}
        self.reserved: dict[str, Resources] = {}
        self.unreserved: dict[str, Resources] = {}

    @classmethod
    def for_cluster(cls, runtime: Runtime, now: datetime) -> PlanningRound:
        """A round that read the whole cluster (:meth:`read`), its NodeClasses resolved and
        its NodePools' instance types known, tracking every open claim it read. Usage and
        limits follow registration: :meth:`compute_usage`."""
        return cls._built(runtime, now, replacement=False)

    @classmethod
    def for_replacement(cls, runtime: Runtime, now: datetime) -> PlanningRound:
        """:meth:`for_cluster` without pods and Nodes (:meth:`read_for_replacement`): a round
        that plans a disrupted node's pods onto new capacity only."""
        return cls._built(runtime, now, replacement=True)

    @classmethod
    def _built(cls, runtime: Runtime, now: datetime, *, replacement: bool) -> PlanningRound:
        work = cls(runtime, now)
        if replacement:
            work.read_for_replacement()
        else:
            work.read()
        work.resolve_classes()
        work.instance_types()
        work.track_claims(work.claims)
        return work

    # ------------------------------------------------------------ read

    def read(self) -> None:
        """Read the cluster and the state, all reads in parallel (the round's latency is the
        slowest list, usually pods). Pods and Nodes are parsed page by page as they stream in
        and only their compact, interned form is kept (:mod:`joiner.domain.interning`): the
        raw list is never held, so memory follows the parsed model, not the API's JSON."""
        self._read(self._read_workloads)
        self._unreserved_of = self._unreserved_of_nodes

    def read_for_replacement(self) -> None:
        """:meth:`read` without pods and Nodes, for a round that plans one node's pods onto new
        capacity only: what it reads does not grow with the cluster, and limits count the Nodes
        no reservation covers as the last scanner round found them (:data:`UNRESERVED_KIND`)."""
        self._read(self._read_runtime_classes_only)
        self._unreserved_of = self._unreserved_published

    def _read(self, read_workloads: Callable[[], tuple[dict[str, Resources], list[Pod], list[Node]]]) -> None:
        kube, state, now = self.kube, self.state, self.now
        reads: dict[str, Callable[[], Any]] = {
            "workloads": read_workloads,
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
            self.kube,
            runtime_classes,
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
            logger.warning(
                "volume objects could not be read (RBAC for persistentvolumeclaims, persistentvolumes, "
                "storageclasses, csinodes applied?): planning without volume topology",
                extra={"error": str(error)},
            )
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
                self.pod_event(object_reference(obj), "FailedScheduling", f"Joiner cannot read this pod: {error}", "Warning")
            elif event_object:
                self.emit_event(obj, "InvalidSpec", str(error), "Warning")
                self.invalid_by_name[(str(obj.get("kind")), str((obj.get("metadata") or {}).get("name")))] = str(error)
            return None

    # ------------------------------------------------------------ environment

    def resolve_classes(self) -> None:
        """Subnets and security groups of every NodeClass, and whether Joiner may pass its
        instance profile (cached briefly per runtime; failures are tried again next round)."""
        self.envs = {}
        for name in sorted(self.classes):
            node_class = self.classes[name]
            key = ("class-env", repr(node_class))  # NodeClass holds dicts: its repr is the cache key
            cached = self.runtime.resolved.get(key, self.now)
            if cached is not None:
                self.envs[name] = cached
                continue
            env = ClassEnv(node_class)
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
                # one that has ended (or a Capacity Block about to) has no room: judged at this
                # round's time, as the resolution above is cached
                self.reservation_left.setdefault(reservation.id, reservation_room(reservation, self.now))
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
            result[name] = zonal(self.runtime, base, env.zones, public, self.now)
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
        self.overlays_raw = {str((o.get("metadata") or {}).get("name")): o for o in raw}
        self.overlay_errors = {}
        overlays = []
        for obj in raw:
            try:
                overlays.append(snap.parse_node_overlay(obj))
            except snap.SnapshotError as error:
                self.overlay_errors[str((obj.get("metadata") or {}).get("name"))] = str(error)
        applied = apply_overlays(types, overlays, self.pools)
        self.overlay_outcomes = dict(applied.outcomes)
        return dict(applied.instance_types)

    def only_types(self, allowed: Iterable[str]) -> None:
        """Plan and launch with no instance types but ``allowed`` (disruption's replacements:
        the types its simulation found cheaper)."""
        names = frozenset(allowed)
        self.types_by_pool = {pool: tuple(t for t in types if t.name in names) for pool, types in self.types_by_pool.items()}
        self.type_index = {pool: {t.name: t for t in types} for pool, types in self.types_by_pool.items()}

    # ------------------------------------------------------------ claims this round tracks

    def track_claims(self, claims: Iterable[ClaimRecord]) -> None:
        """The open claims this round plans with and keeps current (:attr:`open_by_id`)."""
        self.open_by_id = {c.claim_id: c for c in claims}

    def track(self, claim: ClaimRecord) -> None:
        """``claim`` as it is now (reserved, launched, closed by this round or found so)."""
        self.open_by_id[claim.claim_id] = claim

    def count_reserved(self, pool: str, added: Resources, removed: Resources = EMPTY) -> None:
        """This round reserved ``added`` (and returned ``removed``) of a limited pool's capacity
        (a shrink of a pool this round counts nothing for is ignored)."""
        if pool not in self.reserved and removed:
            return
        self.reserved[pool] = self.reserved.get(pool, EMPTY) + added - removed

    def took_reservation(self, reservation_id: str, available: int) -> int:
        """One instance launched into a capacity reservation; how many this round may still launch into it."""
        left = self.reservation_left.get(reservation_id, available) - 1
        self.reservation_left[reservation_id] = left
        return left

    def mark_unavailable(self, key: OfferingKey) -> bool:
        """Leave ``key`` out of this round's plans; False when it was already."""
        if key in self.unavailable:
            return False
        self.unavailable.add(key)
        return True

    def refresh_unavailable(self) -> None:
        """Read the unavailable offerings again (another invocation may have marked some) and
        apply the reservation marks among them."""
        self.unavailable = set(self.state.unavailable_offerings(self.now))
        self.apply_unavailable_reservations()

    def replacing(self, retiring_nodes: Iterable[str], workloads: tuple[Sequence[Node], Sequence[Pod]] | None = None) -> None:
        """Prepare a plan for the pods of nodes being taken away: their claims retire (they
        never host those pods again), and, when the round read ``workloads`` (Nodes and pods),
        the nodes and their pods leave the existing capacity. Usage is counted again and the
        unavailable offerings read again."""
        excluded = frozenset(retiring_nodes)
        self.retiring_claims = {c.claim_id for c in self.claims if c.node_name in excluded}
        if workloads is not None:
            nodes, pods = workloads
            self.retiring_claims |= {claim for n in nodes if n.name in excluded and (claim := n.labels.get(wk.NODECLAIM))}
            self.nodes = tuple(n for n in nodes if n.name not in excluded)
            self.snapshot = dataclasses.replace(self.snapshot, nodes=self.nodes, pods=tuple(p for p in pods if p.node_name not in excluded))
        self.compute_usage(RegistrationResult())
        self.refresh_unavailable()

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
        self.unreserved = self._unreserved_of(registration)

    def _unreserved_of_nodes(self, registration: RegistrationResult) -> dict[str, Resources]:
        """From the Nodes :meth:`read` found."""
        return unreserved_usage(self.all_nodes, self.claims, self.reservations, registration.node_pools)

    def _unreserved_published(self, registration: RegistrationResult) -> dict[str, Resources]:
        """As the last full round published it (:meth:`read_for_replacement` reads no Nodes)."""
        published = published_unreserved(self.state)
        unreserved: dict[str, Resources] = {}
        for name in self.reservations:
            if name in published:
                unreserved[name] = published[name]
                continue
            # No full round has published this pool's figure yet: its own Nodes are read.
            nodes = [n for n in (self._parse(snap.parse_node, o) for o in self.kube.iter_nodes(label_selector=f"{wk.NODEPOOL}={name}")) if n is not None]
            unreserved.update(unreserved_usage(nodes, self.claims, {name: self.reservations[name]}))
        return unreserved

    def publish_unreserved(self) -> None:
        """Store each limited NodePool's :attr:`unreserved` figure where a round that reads no
        Nodes finds it (:meth:`read_for_replacement`); written only when it changed."""
        stored = published_unreserved(self.state)
        for name in sorted(self.reservations):
            usage = self.unreserved.get(name, EMPTY)
            if stored.get(name, EMPTY) != usage:
                self.state.put_item(UNRESERVED_KIND, name, {"pool": name, "unreserved": dict(usage.items())})
        for name in sorted(set(stored) - set(self.reservations)):
            self.state.delete_item(UNRESERVED_KIND, name)

    def _settled(self, pool: str, held: dict[str, Resources]) -> dict[str, Resources]:
        """``held`` without reservations whose claim is closed or has no record, which are
        released now: a caller that died between closing a claim and releasing it (both
        idempotent, in that order) would otherwise hold the limit forever. A closed claim's
        capacity is gone (every path terminates the instance, or never had one, before
        closing), and a claim record is always written before its reservation
        (:meth:`joiner.services.launcher.Launcher.prepare`), so a reservation without one
        holds nothing."""
        open_ids = {c.claim_id for c in self.claims}
        for claim_id in sorted(set(held) - open_ids):
            try:
                claim = self.state.get_claim(claim_id)
                if claim is None or claim.state == ClaimState.CLOSED:
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
            capacity_type = claim.capacity_type or wk.CAPACITY_TYPE_ON_DEMAND
            result.append(InFlightClaim.launched_as(claim.claim_id, pool, instance_type, claim.zone, capacity_type, tuple(claim.pods)))
        return sorted(result, key=lambda c: c.name)

    def promised_to_reserved(self) -> dict[str, str]:
        """Pod key -> the ``reserved`` claim its pods were reserved for.

        A ``reserved`` claim's CreateFleet may already have run: a live round is launching
        it, or a round died between CreateFleet and recording the launch (the instance is
        found by its ``joiner.dev/nodeclaim`` tag once the claim is :data:`~joiner.services.provisioning.ORPHAN_AFTER`
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

    def note_nominations(self, nominated: Mapping[str, str], not_held: Collection[str] = ()) -> None:
        """Pods nominated this round (pod key -> node): planned as the API server now has them;
        ``not_held``: pods whose nomination their scheduler does not read, planned as not nominated."""
        if not nominated and not not_held:
            return
        self.pods = tuple(
            dataclasses.replace(p, nominated_node=nominated[p.key])
            if p.key in nominated
            else dataclasses.replace(p, nominated_node=None)
            if p.key in not_held
            else p
            for p in self.pods
        )
        self.snapshot = dataclasses.replace(self.snapshot, pods=self.pods)

    def solve(self, pending: Sequence[Pod], in_flight: Sequence[InFlightClaim]) -> Plan:
        """Plan ``pending`` with this round's zonal instance types; limits see the Nodes'
        capacity plus every reservation (launched and about-to-launch claims)."""
        problem = build_problem(self.snapshot, self.runtime.catalog, pending=pending, in_flight=in_flight, unavailable=frozenset(self.unavailable))
        usage = {name: self.limit_usage(name) for name in sorted(self.pools)}
        self.plans += 1
        return solve(dataclasses.replace(problem, instance_types=self.types_by_pool, pool_usage=usage))

    # ------------------------------------------------------------ events

    def report_unschedulable(self, pod: Pod, reason: str) -> None:
        if LIMIT_REACHED in reason and pod.key not in self.unschedulable:
            self.runtime.count("LimitReached", 1)
        self.unschedulable[pod.key] = UnschedulablePod(pod.key, reason)
        obj = self.pod_refs.get(pod.key)
        if obj is not None:
            self.pod_event(obj, "FailedScheduling", f"Joiner: {reason}", "Warning")

    def pod_event(self, obj: JsonDict, reason: str, message: str, event_type: str = "Normal") -> None:
        self.pod_events.append((obj, reason, message, event_type))

    def emit_event(self, obj: JsonDict, reason: str, message: str, event_type: str = "Normal") -> bool:
        meta = obj.get("metadata") or {}
        key = (meta.get("uid") or f"{obj.get('kind')}/{meta.get('namespace')}/{meta.get('name')}", reason, message)
        if not self.runtime.recent_events.add_if_absent(key, self.now):
            return False
        try:
            self.kube.create_event(obj, reason, message, event_type)
        except KubernetesError as error:
            logger.warning(
                "writing an event failed", extra={"reason": reason, "object": f"{meta.get('namespace', '')}/{meta.get('name')}", "error": str(error)}
            )
            return False
        return True

    def flush_pod_events(self) -> None:
        # Explanations (warnings) first: when the cap cuts, it cuts Nominated notices.
        ordered = sorted(self.pod_events, key=lambda event: event[3] != "Warning")
        events = ordered[:MAX_POD_EVENTS_PER_ROUND]
        if len(self.pod_events) > len(events):
            logger.warning(
                "pod events not written this round (over the limit)", extra={"skipped": len(self.pod_events) - len(events), "limit": MAX_POD_EVENTS_PER_ROUND}
            )
        self.pod_events = []
        if len(events) <= 4:
            for event in events:
                self.emit_event(*event)
            return
        with ThreadPoolExecutor(max_workers=EVENT_CONCURRENCY, thread_name_prefix="joiner-events") as pool:
            list(pool.map(lambda e: self.emit_event(*e), events))


def published_unreserved(state: StatePort) -> dict[str, Resources]:
    """NodePool -> the unreserved usage the last full round published (:meth:`PlanningRound.publish_unreserved`)."""
    found: dict[str, Resources] = {}
    for item in state.list_items(UNRESERVED_KIND):
        amounts = item.get("unreserved")
        if isinstance(amounts, dict):
            found[str(item.get("pool"))] = Resources({str(k): int(v) for k, v in amounts.items()})
    return found


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


def public_ip_zones(subnets: Iterable[Subnet]) -> frozenset[str]:
    """Zones whose launch subnet (:func:`~joiner.domain.launch.zonal_subnets`: the one a fleet
    request uses there) gives instances a public IPv4 address."""
    return frozenset(zone for zone, subnet in zonal_subnets(subnets).items() if subnet.map_public_ip)


def zonal(runtime: Runtime, types: tuple[InstanceType, ...], zones: frozenset[str], public: frozenset[str], now: datetime) -> tuple[InstanceType, ...]:
    """``types`` with offerings outside ``zones`` removed and those in ``public`` zones priced
    with a public IPv4 address (memoised per runtime)."""
    key = ("zonal", id(types), zones, public)
    cached: tuple[tuple[InstanceType, ...], tuple[InstanceType, ...]] | None = runtime.resolved.get(key, now)
    if cached is not None and cached[0] is types:
        return cached[1]
    result = []
    for instance_type in types:
        offerings = tuple(
            (dataclasses.replace(o, price=o.price + PUBLIC_IPV4_PER_HOUR) if o.zone in public else o) for o in instance_type.offerings if o.zone in zones
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
