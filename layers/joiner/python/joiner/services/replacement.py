"""The one replacement seam: capacity for the pods of nodes being taken away.

Interruption, disruption (consolidation, drift, repair), delete-to-drain and static drift all
launch replacements through :class:`ClusterView`: what to exclude (the nodes going away) and
what to plan for (their pods, or a static NodePool's replicas) are arguments; the
:class:`~joiner.services.planning_round.PlanningRound` it plans with is built complete by its
constructors and prepared by its own :meth:`~joiner.services.planning_round.PlanningRound.replacing`.
A termination replaces its node's pods through :meth:`ClusterView.replace_node`, which never
fails the drain.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from joiner.domain import labels as wk
from joiner.domain.model import InFlightClaim, Node, NodePool, OfferingKey, Pod
from joiner.domain.node_pods import parse_node_pods
from joiner.domain.termination import DISRUPTED_TAINT, reschedulable_pods
from joiner.observability import logger
from joiner.ports import ClaimRecord, JsonDict
from joiner.services.ownership import instance_tags

if TYPE_CHECKING:
    from joiner.services.context import Runtime
    from joiner.services.launcher import Launcher
    from joiner.services.planning_round import PlanningRound

__all__ = ["ClusterView"]


@dataclass(frozen=True)
class _Workloads:
    """The Nodes and pods of a full read (disruption's :meth:`ClusterView.plan_with`), which
    replacement plans leave the disrupted nodes out of. The interruption path reads neither."""

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]


@dataclass
class ClusterView:
    """Cluster reads shared by the events of one invocation (a batch of up to 10 messages):
    Nodes, NodePools and open claims are read once, and nodes disrupted earlier in the
    batch are remembered so replacements for later ones never count on them. Thread-safe."""

    runtime: Runtime
    _nodes: dict[str, JsonDict | None] = field(default_factory=dict)
    _pools: dict[str, NodePool] | None = None
    _claims: dict[str, ClaimRecord | None] = field(default_factory=dict)
    disrupted: set[str] = field(default_factory=set)
    _round: PlanningRound | None = None
    _launcher: Launcher | None = None
    _in_flight: list[InFlightClaim] = field(default_factory=list)
    #: None on the interruption path: its round reads no Nodes nor pods (only new capacity is planned)
    _workloads: _Workloads | None = None
    _replacing: dict[str, Pod] = field(default_factory=dict)
    _marked: set[OfferingKey] = field(default_factory=set)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _planning: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _waiting: list[_ReplacementRequest] = field(default_factory=list, repr=False)
    _planner_busy: bool = False

    def node_of(self, instance_id: str) -> JsonDict | None:
        """The instance's Node, read by name: the claim that launched the instance records
        the Node it registered as, and a Node registered after the claim was last written is
        found by its ``joiner.dev/nodeclaim`` label (then checked by ``providerID``). An
        instance with no claim is not Joiner's to act on (:mod:`joiner.services.ownership`),
        so its Node is never looked for: no event reads more than the Nodes it names."""
        with self._lock:
            if instance_id in self._nodes:
                return self._nodes[instance_id]
        claim = self.claim_for(instance_id)
        node: JsonDict | None = None
        if claim is not None and claim.node_name:
            node = self.runtime.kube.get_node(claim.node_name)
            if node is not None and _instance_of(node) not in ("", instance_id):
                node = None  # the name was reused by another instance's Node
        # A claim that has not recorded its Node (or its instance: a launch whose invocation
        # died after CreateFleet, named by the instance's own tag) is found by its label.
        claim_id = claim.claim_id if claim is not None else instance_tags(self.runtime, [instance_id]).get(instance_id, {}).get(wk.NODECLAIM)
        if node is None and claim_id:
            selector = f"{wk.NODECLAIM}={claim_id}"
            node = next((n for n in self.runtime.kube.iter_nodes(label_selector=selector) if _instance_of(n) == instance_id), None)
        if node is None and claim_id and (claim is None or not claim.instance_id or not claim.node_name):
            # A Node no scanner round has recorded yet carries no claim label: a launch whose
            # invocation died before recording the instance, or a kubelet that registered since
            # the last round (a minute at most). Its pods run there: it is found by providerID so
            # that it is drained. Rare, and only for an instance tagged as Joiner's: the Nodes are
            # streamed, one kept.
            node = next((n for n in self.runtime.kube.iter_nodes() if _instance_of(n) == instance_id), None)
        with self._lock:
            self._nodes[instance_id] = node
            if node is not None and _is_disrupted(node):
                self.disrupted.add(node["metadata"]["name"])
        return node

    def expect_disruption(self, instance_ids: Iterable[str]) -> None:
        """Instances the batch's events are about to take away: their nodes are left out of
        every replacement plan of the invocation from the start, so a burst of warnings is
        never planned onto claims of nodes that are going too."""
        for instance_id in instance_ids:
            node = self.node_of(instance_id)
            if node is not None:
                with self._lock:
                    self.disrupted.add(node["metadata"]["name"])

    def plan_with(self, work: PlanningRound) -> None:
        """Plan this view's replacements with ``work``, a round its caller has read and
        narrowed (disruption: the cluster read in full, the replacement types the simulation
        chose), instead of one read on first use."""
        from joiner.services.launcher import Launcher

        with self._lock:
            self._in_flight = work.in_flight(work.open_by_id.values())
            self._workloads = _Workloads(work.nodes, work.snapshot.pods)
            self._round, self._launcher = work, Launcher(work, replacing=True)

    def first_mark(self, offering: OfferingKey) -> bool:
        """True the first time the invocation marks ``offering`` unavailable."""
        with self._lock:
            if offering in self._marked:
                return False
            self._marked.add(offering)
            return True

    def claim_for(self, instance_id: str) -> ClaimRecord | None:
        """The claim that records the instance (open or closed), looked up by instance id
        once per invocation."""
        with self._lock:
            if instance_id in self._claims:
                return self._claims[instance_id]
        found = self.runtime.state.claim_by_instance(instance_id)
        with self._lock:
            self._claims[instance_id] = found
        return found

    def node_pool(self, name: str) -> NodePool:
        with self._lock:
            if self._pools is None:
                from joiner.domain.snapshot import SnapshotError, parse_node_pool

                pools: dict[str, NodePool] = {}
                for raw in self.runtime.kube.list_node_pools():
                    try:
                        pool = parse_node_pool(raw)
                    except SnapshotError:
                        continue  # an invalid NodePool is reported by the scanner; its nodes still get defaults
                    pools[pool.name] = pool
                self._pools = pools
            return self._pools.get(name) or NodePool(name=name)

    def launch_replacement(self, pods: Sequence[Pod], now: datetime, *, excluding: Iterable[str] = ()) -> tuple[str, ...]:
        """Plan ``pods`` (pending copies of a disrupted node's pods) and launch the plan with
        the provisioning service's round machinery. Returns the claims that will host them:
        new ones and claims launched earlier in the invocation that have room.

        The cluster is read once per invocation. Every node disrupted so far is left out
        of the existing capacity and of the NodePool usage (it is going away). Each plan
        covers the pods of every node replaced so far in the invocation, so in-flight
        claims are filled in the planner's own way (their pods first) and never promised
        twice; pods already placed on existing nodes occupy them in later plans. Claim ids
        derive from the pods' uids, so a retried message finds its claims instead of
        launching again.

        Plans run one at a time. Requests arriving while a plan runs are planned together
        by the next one (group commit): a burst of ten warnings costs two or three plans,
        not ten, and packs their pods together.

        ``excluding``: Nodes going away besides those the view found disrupted (the nodes a
        command or a deletion takes away); from now on every plan of the view leaves them out.
        """
        with self._lock:
            self.disrupted.update(excluding)
        request = _ReplacementRequest(tuple(pods))
        with self._planning:
            self._waiting.append(request)
            while not request.done and self._planner_busy:
                self._planning.wait()
            if request.done:
                return request.result()
            self._planner_busy = True
            batch, self._waiting = self._waiting, []
        try:
            self._plan_batch(batch, now)
        except BaseException as error:  # noqa: BLE001 - handed to every waiter, re-raised by request.result()
            for item in batch:
                if not item.done:
                    item.error, item.done = error, True
        finally:
            with self._planning:
                self._planner_busy = False
                self._planning.notify_all()
        return request.result()

    def replace_node(self, node_name: str, pods_raw: Sequence[JsonDict], now: datetime, *, kind: str, event_id: str | None = None) -> tuple[str, ...]:
        """Launch capacity for the reschedulable pods of ``node_name`` (``pods_raw``: its pods
        as read), the node left out of every plan of the view from now on. Returns the claims
        that will host them; () when none is needed or the launch failed. Never raises: the
        drain goes ahead whatever the launch did, and the scanner provisions for pods left
        pending. A failure counts ``ReplacementFailed`` with ``kind`` (the termination's
        reason)."""
        pending = reschedulable_pods(parse_node_pods(pods_raw)[0])
        if not pending:
            return ()
        try:
            claims = self.launch_replacement(pending, now, excluding=(node_name,))
        except Exception as error:  # noqa: BLE001 - the drain must start whatever the launch did
            self.runtime.count("ReplacementFailed", kind=kind)
            logger.warning(
                "replacement launch failed; the drain goes ahead and the scanner provisions for the pods",
                extra={"node": node_name, "error": f"{type(error).__name__}: {error}", "event_id": event_id},
                exc_info=True,
            )
            return ()
        logger.info("replacement planned", extra={"node": node_name, "claims": list(claims), "pods": [p.key for p in pending], "event_id": event_id})
        return claims

    def launch_static_replicas(self, node_pools: Sequence[str], now: datetime, *, excluding: Iterable[str] = ()) -> tuple[str, ...]:
        """One replica of each of ``node_pools`` (static NodePools replacing nodes of theirs
        that are going away): the provisioning path's static launch (``limits.nodes``,
        reservations, claim ids per replica index) on a round that read the cluster, with the
        ``excluding`` nodes' claims retiring. Takes no lease (see
        :class:`~joiner.services.launcher.Launcher`)."""
        from joiner.services.launcher import Launcher
        from joiner.services.planning_round import PlanningRound
        from joiner.services.static_pools import launch_static_replicas

        with self._lock:
            self.disrupted.update(excluding)
            gone = frozenset(self.disrupted)
        work = PlanningRound.for_cluster(self.runtime, now)
        launcher = Launcher(work)
        work.replacing(gone)
        launched: list[str] = []
        for name in node_pools:
            pool = work.pools.get(name)
            if pool is None or work.pool_problem(pool):
                continue
            launched += launch_static_replicas(launcher, pool, 1)
        work.flush_pod_events()
        return tuple(launched)

    def _plan_batch(self, batch: Sequence[_ReplacementRequest], now: datetime) -> None:
        hosts = self._launch_replacement([pod for item in batch for pod in item.pods], now)
        for item in batch:
            mine = {p.key for p in item.pods}
            item.hosts = tuple(claim for claim, pods in hosts.items() if mine & pods)
            item.done = True

    def _launch_replacement(self, pods: Sequence[Pod], now: datetime) -> dict[str, set[str]]:
        """One plan and launch wave for ``pods``: claim id -> the keys of ``pods`` it hosts."""
        from joiner.services.launcher import Launcher, launch_all
        from joiner.services.planning_round import PlanningRound

        work, launcher = self._round, self._launcher
        if work is None or launcher is None:
            # Replacements take no lease (see :class:`~joiner.services.launcher.Launcher`) and
            # are planned onto new capacity only: no Nodes nor pods are read.
            work = PlanningRound.for_replacement(self.runtime, now)
            self._in_flight = work.in_flight(work.open_by_id.values())
            self._round, launcher = work, Launcher(work, replacing=True)
            self._launcher = launcher
        workloads = self._workloads
        work.replacing(self.disrupted, (workloads.nodes, workloads.pods) if workloads is not None else None)

        mine = {p.key for p in pods}
        for pod in pods:
            self._replacing[pod.key] = pod
        pending = sorted(self._replacing.values(), key=lambda p: p.key)
        by_key = {p.key: p for p in pending}
        before = len(launcher.launched)
        existing_before = len(launcher.existing_claims)
        plan = work.solve(pending, sorted(self._in_flight, key=lambda c: c.name))
        launch_all(launcher, plan, by_key, self._in_flight)
        work.flush_pod_events()
        if len(launcher.launched) > before:
            self.runtime.count("ReplacementsLaunched", len(launcher.launched) - before)

        in_flight = {c.name: set(c.pods) for c in self._in_flight}
        hosts: dict[str, set[str]] = {}
        for launched in launcher.launched[before:]:
            hosts.setdefault(launched.claim_id, set()).update(mine & set(launched.pods))
        for claim_id in launcher.existing_claims[existing_before:]:
            hosts.setdefault(claim_id, set()).update(mine & in_flight.get(claim_id, set()))
        placed_on_nodes: list[Pod] = []
        for existing in plan.existing_nodes:
            if existing.name in in_flight:
                hosts.setdefault(existing.name, set()).update(mine & set(existing.pods))
                continue
            placed_on_nodes += [dataclasses.replace(by_key[key], node_name=existing.name, phase="Running") for key in existing.pods if key in by_key]
        # Pods placed on existing nodes now occupy them; unschedulable ones are reported once.
        for pod in placed_on_nodes:
            self._replacing.pop(pod.key, None)
        for item in plan.unschedulable:
            self._replacing.pop(item.pod, None)
        if workloads is not None:
            self._workloads = dataclasses.replace(workloads, pods=tuple(sorted((*workloads.pods, *placed_on_nodes), key=lambda p: p.key)))
        return {claim: pods for claim, pods in sorted(hosts.items()) if pods}


@dataclass
class _ReplacementRequest:
    """One node's pods waiting for the planner (see :meth:`ClusterView.launch_replacement`)."""

    pods: tuple[Pod, ...]
    hosts: tuple[str, ...] = ()
    error: BaseException | None = None
    done: bool = False

    def result(self) -> tuple[str, ...]:
        if self.error is not None:
            raise self.error
        return self.hosts


def _instance_of(node: JsonDict) -> str:
    """The EC2 instance id in a Node's ``providerID`` (``aws:///zone/i-...``), "" when none."""
    provider = str((node.get("spec") or {}).get("providerID") or "")
    tail = provider.rsplit("/", 1)[-1]
    return tail if provider.startswith("aws://") and tail.startswith("i-") else ""


def _is_disrupted(node: JsonDict) -> bool:
    spec = node.get("spec") or {}
    return any(t.get("key") == DISRUPTED_TAINT.key for t in spec.get("taints") or [])
