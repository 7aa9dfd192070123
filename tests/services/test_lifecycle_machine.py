"""A NodeClaim's life under concurrent actors, crashes and faults: a Hypothesis state machine
driving the real services on the in-memory fakes (``tests/support/fakes.py``).

**Actors.** Each actor rule is one Lambda invocation of a real public entry point, in its own
container (a warm :class:`~joiner.services.context.Runtime`, replaced by a cold one when the
invocation dies):

* the scanner in two containers, ``scanner-a`` and ``scanner-b``
  (:func:`joiner.services.provisioning.run_scanner` in economy mode: one
  :func:`~joiner.services.provisioning.provision` round, then the NodeClaim mirror sync);
* the interruption handler (:func:`joiner.services.interruption.handle_interruption` on a
  normalized EventBridge event: spot warning, rebalance, AWS Health scheduled change, instance
  stopping, instance terminated by EC2); an event whose invocation failed or died is
  delivered again (``interruption_redelivered``), at most :data:`MAX_DELIVERIES` times;
* the disruption pass as its handler runs it (:func:`joiner.services.disruption.run_disruption`,
  then :func:`joiner.services.deletion.handle_deletions`): emptiness, consolidation, and node
  repair (a Node NotReady past its repair time);
* delete to drain alone (:func:`~joiner.services.deletion.handle_deletions`), after
  ``kubectl delete`` of a NodeClaim mirror or a Node (``kubectl_delete``);
* garbage collection (:func:`joiner.services.gc.collect_garbage`);
* the termination function (:func:`joiner.services.termination.handle_continuation`) on the
  work queue's continuations when they are due; a message whose invocation failed or died
  comes back after ``RECEIVED_VISIBILITY_SECONDS``;
* ``joiner uninstall`` and ``--undo`` (:func:`joiner.services.deletion.remove_finalizers`,
  :func:`~joiner.services.deletion.remove_uninstall_marker`).

**The world** (rules too): pods arrive and leave; a launched instance's kubelet registers its
Node under the instance's one name, with what its launch template says (no claim label: only
registration adds it), Ready or not, and again after a restart if the Node was deleted; a
Node's Ready condition changes; someone runs ``kubectl delete nodeclaim|node``. ``tick``
advances the clock (1 s to past ``ORPHAN_AFTER``, gc's ``INSTANCE_GRACE``, the registration
timeout and the repair time); then EC2 boots pending instances and reclaims spot instances two
minutes after their warning, kubelets register booted instances' Nodes and finish terminating
pods, the pod GC removes pods of Nodes or instances that are gone, ReplicaSets recreate lost
and evicted pods, kube-scheduler binds pending pods (nominated Node first) to Ready,
schedulable Nodes with room, and the termination function receives what is due. With
``scheduled``, a tick of a minute or more also runs the scheduled functions once (a scanner
round and the disruption pass, in either order, then gc after five minutes or more), without
faults. kube-scheduler clears a nomination to a Node that is gone right after every invocation
(its deletion requeues the pod at once).

**Faults**, at the ports only (Joiner's code is never replaced). Every port of a runtime is
wrapped (:class:`Port`): the invocation dies just before its *n*-th write, whatever port it
goes to (n drawn per invocation; dying before a read is dying after the write before it):
:class:`Crash`, a ``BaseException``, is raised there and at every later call of the invocation,
and the rule swallows it; drawn calls of any kind raise throttling errors
(``StateError`` ProvisionedThroughputExceeded, ``Ec2Error`` RequestLimitExceeded,
``KubernetesError`` 429) or, for Kubernetes writes, 409 conflicts; a NodeClaim patch with a
stale resourceVersion answers 409 as the API server does (:class:`WorldKube`). The open-claims
index lags (:class:`tests.support.fakes.LaggingOpenClaims`): a claim another container created
less than :data:`INDEX_LAG` ago is missing from the eventually consistent index, and found
exactly where the adapter's strongly consistent reads find it (its own recent writes, and the
``RECENT#CLAIM`` partition, which the model has exactly when :mod:`joiner.adapters.state` does).
A termination lease's wall-clock wait returns at once (:class:`VirtualWallClock`).

**Invariants**, after every step:

1. no unbound pod is promised to two in-flight claims (``reserved``, ``launched``,
   ``registered`` with its Node there and not being deleted: capacity on its way for the pod).
   An initialized or terminating claim's pods are history, and a replacement names them again;
2. each limited NodePool's reserved total is the sum of its reservations and, once a scanner
   round has run cleanly after the last crash or fault, every reservation is an open claim's;
3. after a clean gc run, every running instance tagged as this cluster's is younger than gc's
   ``INSTANCE_GRACE``, recorded by an open claim, tagged for an open claim that has not
   recorded an instance yet, or under termination; and no open claim keeps a running instance
   whose Node is gone with no termination under way;
4. Joiner removes pods from a Node only through the Eviction API: it deletes a pod only in a
   drain (the deadline's deletions), and terminates an instance, or deletes the Node of a
   running one, under non-DaemonSet pods that are bound and not terminating only once a
   drain's deadline has passed (checked at the ports, as the call is made);
5. from a clean ``joiner uninstall`` to ``--undo``, no Node or mirror the uninstall saw has
   Joiner's finalizer again, nor, while the uninstall's marker is on some object, one created
   since.

The defects the machine found are replayed at the end of the module: strict xfails while
unfixed (the machine tolerates exactly those, :attr:`LifecycleMachine.tolerate_known`, and
keeps looking for others), regression tests once fixed. Its runs are swarm tests: each
example leaves a random subset of the optional rules out (:data:`SWARM`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import itertools
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import joiner.adapters.state as state_adapter
from joiner import ports
from joiner.domain import labels as wk
from joiner.domain.gc import INSTANCE_GRACE
from joiner.domain.nodeclaims import TERMINATION_FINALIZER
from joiner.domain.resources import EMPTY
from joiner.domain.termination import TerminationState
from joiner.events.normalization import normalize
from joiner.ports import IN_FLIGHT_STATES, ClaimState, Ec2Error, KubernetesError, StateError
from joiner.services import deletion
from joiner.services.context import Runtime
from joiner.services.disruption import run_disruption
from joiner.services.gc import collect_garbage
from joiner.services.interruption import handle_interruption
from joiner.services.provisioning import run_scanner
from joiner.services.registration import NODE_LOST_AFTER
from joiner.services.termination import RECEIVED_VISIBILITY_SECONDS, TERMINATION_KIND, InvalidWorkMessage, TerminationBusy, handle_continuation
from joiner.settings import Settings
from tests.events.fixtures import load_event
from tests.support.fakes import (
    SMALL_CATALOG_TYPES,
    DrainingKubernetes,
    FakeBlobs,
    FakeClock,
    FakeEc2,
    FakePricing,
    FakeState,
    LaggingOpenClaims,
    RecordingMetrics,
    node_class_json,
    node_json,
    node_pool_json,
    pod_json,
    small_catalog,
)

CLUSTER = "test-cluster"
SETTINGS = Settings(cluster_name=CLUSTER, region="us-east-1", state_table="state", idempotency_table="idem")
#: How far the open-claims index lags behind a claim another container created.
INDEX_LAG = timedelta(seconds=10)
#: Whether the state adapter under test reads the ``RECENT#CLAIM`` partition (commit 3abbe84):
#: the lag model follows the adapter it models.
ADAPTER_HAS_RECENT_PARTITION = hasattr(state_adapter, "_RECENT_CLAIMS")
#: ``joiner.services.deletion.UNINSTALLING_ANNOTATION`` (named here too: older versions lack it).
UNINSTALLING = "joiner.dev/uninstalling"
#: At most this many pods exist at once (arrivals and ReplicaSets stop there).
MAX_PODS = 6
POOL_LIMIT = {"cpu": "4"}
CAPACITY = {name: (cpu * 1000, pods) for name, cpu, _memory, pods, _price, _arch in SMALL_CATALOG_TYPES}
MEMORY = {name: memory for name, _cpu, memory, _pods, _price, _arch in SMALL_CATALOG_TYPES}
#: An instance boots (``pending`` -> ``running``) this long after its launch.
BOOT = timedelta(seconds=30)
#: EC2 reclaims a spot instance this long after its interruption warning.
SPOT_NOTICE = timedelta(minutes=2)
#: Rules an example may leave out (swarm testing); the scanner, pods arriving and time never are.
SWARM = (
    "pod_leaves",
    "kubelet_registers",
    "kubectl_delete",
    "node_condition",
    "interruption",
    "disruption",
    "delete_to_drain",
    "gc",
    "termination_worker",
    "uninstall",
)
#: Interruption deliveries of one event before it is dead-lettered.
MAX_DELIVERIES = 5
GONE = ("shutting-down", "terminated", "stopping", "stopped")
#: Defects of the current code the machine finds, pinned by the xfail tests below.


def _note(text: str) -> None:
    """A line in a failing example's report (outside Hypothesis, e.g. the replays below: none)."""
    try:
        note(text)
    except InvalidArgument:
        pass


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- faults at the ports


class Crash(BaseException):
    """The Lambda invocation dies here (timeout, out of memory, the sandbox recycled): no later
    call of the invocation happens. A ``BaseException``, so Joiner's ``except Exception``
    handlers do not survive it."""


@dataclasses.dataclass(frozen=True)
class FaultPlan:
    """One invocation's faults: it dies just before its ``crash_at``-th write (a call that
    changes something: dying before a read is dying after the write before it, reads change
    nothing), and each ``(n, kind)`` of ``errors`` makes its n-th call of any kind fail with
    ``throttle`` or ``conflict``."""

    crash_at: int | None = None
    errors: tuple[tuple[int, str], ...] = ()

    def __repr__(self) -> str:  # evaluable, as short as the plan
        if not self.errors:
            return f"FaultPlan({self.crash_at})" if self.crash_at else "FaultPlan()"
        return f"FaultPlan({self.crash_at}, {self.errors!r})"


NO_FAULTS = FaultPlan()
FAULT_PLANS = st.one_of(
    st.just(NO_FAULTS),
    st.builds(FaultPlan, st.integers(1, 16)),  # most invocations make fewer writes
    st.builds(FaultPlan, st.none(), st.lists(st.tuples(st.integers(1, 60), st.sampled_from(("throttle", "conflict"))), min_size=1, max_size=2).map(tuple)),
)


def _methods(protocol: type) -> frozenset[str]:
    return frozenset(name for name in dir(protocol) if not name.startswith("_"))


KUBE_METHODS = _methods(ports.KubernetesPort)
EC2_METHODS = _methods(ports.Ec2Port)
STATE_METHODS = _methods(ports.StatePort)
QUEUE_METHODS = _methods(ports.QueuePort)
BLOB_METHODS = _methods(ports.BlobPort)
STATE_WRITES = frozenset(
    {
        "put_claim",
        "update_claim",
        "reserve_capacity",
        "release_capacity",
        "shrink_reservation",
        "acquire_lease",
        "release_lease",
        "mark_unavailable",
        "put_item",
        "delete_item",
    }
)
EC2_WRITES = frozenset({"create_fleet", "terminate_instances", "ensure_launch_template", "delete_launch_template"})
KUBE_WRITES = frozenset(
    {
        "patch_node",
        "set_node_finalizer",
        "delete_node",
        "evict_pod",
        "delete_pod",
        "nominate_pod",
        "create_event",
        "patch_node_pool_status",
        "patch_node_class_status",
        "create_node_claim",
        "patch_node_claim",
        "delete_node_claim",
        "patch_node_overlay_status",
    }
)
WRITES = {"state": STATE_WRITES, "ec2": EC2_WRITES, "kube": KUBE_WRITES, "queue": QUEUE_METHODS, "blobs": frozenset({"put"})}


def _fault(port: str, method: str, kind: str) -> Exception | None:
    if port == "state":
        return StateError(f"{method}: ProvisionedThroughputExceededException (injected)", code="ProvisionedThroughputExceededException")
    if port == "ec2":
        return Ec2Error(f"{method}: Request limit exceeded (injected)", code="RequestLimitExceeded")
    if port == "kube":
        if kind == "conflict" and method in KUBE_WRITES:
            return KubernetesError(f"{method}: the object has been modified (injected 409)", status=409)
        return KubernetesError(f"{method}: Too Many Requests (injected 429)", status=429)
    if port == "blobs":
        return ports.BlobError(f"{method}: SlowDown (injected 503)")
    return None  # the work queue: crashes only


class Faults:
    """The current invocation's fault plan, counting its external calls (thread-safe: a round's
    launches run on several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.begin(NO_FAULTS)

    def begin(self, plan: FaultPlan) -> None:
        with self._lock:
            self.plan = plan
            self.calls = 0
            self.writes = 0
            self.crashed = False
            self.crash = ""  # where it died
            self.injected: list[str] = []

    def hit(self, port: str, method: str) -> None:
        with self._lock:
            if self.crashed:
                raise Crash("the invocation is dead")
            self.calls += 1
            if method in WRITES[port]:
                self.writes += 1
                if self.writes == self.plan.crash_at:
                    self.crashed = True
                    self.crash = f"before write {self.writes} (call {self.calls}): {port}.{method}"
                    raise Crash(self.crash)
            kind = dict(self.plan.errors).get(self.calls)
            error = _fault(port, method, kind) if kind else None
            if error is not None:
                self.injected.append(f"{kind}@{self.calls} {port}.{method}")
        if error is not None:
            raise error


class Port:
    """A port as one invocation sees it: each call of a port method counts in the fault plan
    (and may crash or fail), then ``before`` checks it, then the fake answers."""

    def __init__(
        self, target: Any, name: str, methods: frozenset[str], faults: Faults, before: Callable[[str, tuple[Any, ...], dict[str, Any]], None] | None = None
    ) -> None:
        self._target, self._name, self._methods, self._faults, self._before = target, name, methods, faults, before

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if attr not in self._methods or not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._faults.hit(self._name, attr)
            if self._before is not None:
                self._before(attr, args, kwargs)
            return value(*args, **kwargs)

        return call


# ---------------------------------------------------------------- the world's fakes


class WorldKube(DrainingKubernetes):
    """The API server: pods terminate gracefully (DrainingKubernetes), and a NodeClaim patch
    carrying a resourceVersion is conditional on it (409 when stale), as for any custom resource."""

    def patch_node_claim(self, name: str, patch: ports.JsonDict, *, status: bool = False) -> bool:
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            current = self._objects["node_claims"].get(name)
            if current is not None and wanted and not status and str(current["metadata"].get("resourceVersion")) != str(wanted):
                self.calls.append("patch_node_claim")
                raise KubernetesError(f"nodeclaims {name!r}: the object has been modified", status=409)
        return super().patch_node_claim(name, patch, status=status)

    def replace(self, kind: str, obj: ports.JsonDict) -> None:
        meta = obj["metadata"]
        self.remove(kind, meta.get("namespace"), meta["name"])
        self.add(kind, obj)


class WorkQueue:
    """The SQS work queue: messages become due ``delay_seconds`` after they are sent."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.messages: list[tuple[datetime, int, ports.JsonDict]] = []
        self._order = itertools.count()
        self._lock = threading.Lock()

    def send(self, body: ports.JsonDict, delay_seconds: int = 0, dedup_id: str | None = None) -> None:
        if not 0 <= delay_seconds <= 900:
            raise ValueError(f"delay_seconds must be within 0..900, got {delay_seconds}")
        with self._lock:
            self.messages.append((self.clock.now() + timedelta(seconds=delay_seconds), next(self._order), copy.deepcopy(body)))

    def redeliver(self, body: ports.JsonDict, at: datetime) -> None:
        """A received message whose invocation failed or died: visible again at ``at``."""
        with self._lock:
            self.messages.append((at, next(self._order), body))

    def take_due(self) -> ports.JsonDict | None:
        with self._lock:
            due = sorted(m for m in self.messages if m[0] <= self.clock.now())
            if not due:
                return None
            self.messages.remove(due[0])
            return due[0][2]


@dataclasses.dataclass
class Container:
    """One Lambda execution environment: a warm runtime until it dies (then a cold one, a new
    writer as far as the state table's index is concerned)."""

    name: str
    generation: int = 0
    invocations: int = 0
    runtime: Runtime | None = None

    @property
    def writer(self) -> str:
        return f"{self.name}#{self.generation}"


def _instance_of(node: ports.JsonDict) -> str:
    return str((node.get("spec") or {}).get("providerID") or "").rsplit("/", 1)[-1]


def _ready(node: ports.JsonDict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or [])


def _is_daemon(pod: ports.JsonDict) -> bool:
    return any(ref.get("kind") == "DaemonSet" for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


def _key(pod: ports.JsonDict) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


CATALOG = small_catalog()


# ---------------------------------------------------------------- the machine


class LifecycleMachine(RuleBasedStateMachine):
    #: Leave out of the invariants the defects of the current code that the xfail tests at the
    #: end of this module pin (each names one): the machine keeps looking for the others.
    tolerate_known = True

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.kube = WorldKube(self.clock)
        self.ec2 = FakeEc2(CLUSTER, clock=self.clock)
        self.state = FakeState()
        self.index = LaggingOpenClaims(self.state, self.clock, INDEX_LAG, recent_partition=ADAPTER_HAS_RECENT_PARTITION)
        self.queue = WorkQueue(self.clock)
        #: the cluster state's image, shared by every container (the scanner's writes, cold
        #: containers' restores)
        self.blobs = FakeBlobs()
        self.metrics = RecordingMetrics()
        self.faults = Faults()
        self.containers = {
            name: Container(name) for name in ("scanner-a", "scanner-b", "interruption", "disruption", "gc", "delete-to-drain", "termination", "cli")
        }
        self.pools: list[str] = []
        self.quiet: frozenset[str] = frozenset()
        self.cpu: dict[str, int] = {}  # pod key -> requested milli-CPU
        self.numbers = itertools.count(1)
        self.inbox: list[tuple[ports.JsonDict, int]] = []  # interruption events to (re)deliver, deliveries so far
        self.reclaim_at: dict[str, datetime] = {}
        self.node_names: dict[str, str] = {}  # instance id -> its Node's name (kubelets register under it)
        self.violations: list[str] = []
        self.dirty = False  # a crash or fault since the last clean scanner round
        self.check_leaks = False
        self.check_lost = False
        self.uninstalled = False
        self.uninstalled_objects: set[str] = set()  # uids of the Nodes and mirrors the last clean uninstall saw
        #: uids of the Nodes and mirrors a clean pass that syncs mirrors or handles deletions
        #: (scanner, gc, disruption, delete-to-drain) has seen since the uninstall
        self.passed_objects: set[str] = set()
        self.actor = ""
        self.known: set[str] = set()  # the known defects met (tolerated)

    # ------------------------------------------------------------ setup

    @initialize(
        two_pools=st.booleans(),
        pods=st.lists(st.sampled_from([250, 500, 1000]), min_size=1, max_size=4),
        quiet=st.tuples(*(st.booleans() for _ in SWARM)).map(lambda left_out: frozenset(n for n, out in zip(SWARM, left_out) if out)),
    )
    def cluster(self, two_pools: bool, pods: list[int], quiet: frozenset[str] = frozenset()) -> None:
        """One or two NodePools (4 CPU each), a few pending pods, and (swarm testing) the rules
        this example leaves out: fewer kinds of step make deeper sequences of the others."""
        self.quiet = quiet
        self.kube.add("node_classes", node_class_json(discovery=CLUSTER))
        requirements = [
            {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "c5.xlarge"]},
            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]},
        ]
        self.pools = ["a", "b"] if two_pools else ["a"]
        for name, weight in zip(self.pools, (20, 10)):
            self.kube.add("node_pools", node_pool_json(name, requirements=requirements, limits=POOL_LIMIT, weight=weight))
        for cpu in pods:
            self.new_pod(cpu)

    # ------------------------------------------------------------ invoking an actor

    def runtime(self, container: Container) -> Runtime:
        if container.runtime is None:
            faults = self.faults
            container.runtime = Runtime(
                settings=SETTINGS,
                kube_port=Port(self.kube, "kube", KUBE_METHODS, faults, self._kube_call),
                ec2_port=Port(self.ec2, "ec2", EC2_METHODS, faults, self._ec2_call),
                state_port=Port(self.index.writer(container.writer), "state", STATE_METHODS, faults),
                queue_port=Port(self.queue, "queue", QUEUE_METHODS, faults),
                blobs_port=Port(self.blobs, "blobs", BLOB_METHODS, faults),
                pricing_port=FakePricing(),
                catalog_value=CATALOG,
                clock=self.clock,
                sleep=self.clock.sleep,
                metric=self.metrics,
            )
        container.invocations += 1
        container.runtime.invocation_id = f"{container.writer}-{container.invocations}"
        return container.runtime

    def invoke(self, name: str, plan: FaultPlan, action: Callable[[Runtime], Any], *, allowed: tuple[type[Exception], ...] = ()) -> tuple[Any, bool]:
        """Run ``action`` as one invocation of ``name``'s container under ``plan``. Returns
        (its result or None, whether it ran cleanly: no crash, no fault, no failure)."""
        container = self.containers[name]
        runtime = self.runtime(container)
        self.actor = name
        self.faults.begin(plan)
        result, outcome = None, "ok"
        try:
            result = action(runtime)
        except Crash:
            outcome = f"died {self.faults.crash}"
            container.generation += 1
            container.runtime = None
        except (StateError, Ec2Error, KubernetesError, *allowed) as error:  # type: ignore[misc]  # (a tuple of exception classes)
            if not self.faults.injected and not isinstance(error, allowed):
                raise  # a failure no fault explains
            outcome = f"failed ({type(error).__name__}: {error})"
        injected = list(self.faults.injected)
        self.faults.begin(NO_FAULTS)
        self.clear_stale_nominations()
        clean = outcome == "ok" and not injected
        self.dirty |= not clean
        _note(f"  {name}: {outcome}{'; injected ' + ', '.join(injected) if injected else ''}")
        return result, clean

    # ------------------------------------------------------------ invariant 4's oracle at the ports

    def _drain_deadline_passed(self, node: str) -> bool:
        item = self.state.get_item(TERMINATION_KIND, node)
        if item is None:
            return False
        deadline = TerminationState.from_dict(item).deadline
        return deadline is not None and deadline <= self.clock.now()

    def _bound(self, node: str) -> list[str]:
        """Non-DaemonSet pods bound to ``node`` that are not terminating."""
        return [_key(p) for p in self.kube.list_pods_on_node(node) if not _is_daemon(p) and not p["metadata"].get("deletionTimestamp")]

    def _nodes_of(self, instance_id: str) -> list[ports.JsonDict]:
        return [n for n in self.kube.list_nodes() if _instance_of(n) == instance_id]

    def _running(self, instance_id: str) -> bool:
        record = self.ec2.instances.get(instance_id)
        return record is not None and record.state not in GONE

    def _kube_call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if method == "delete_pod":
            namespace, name = args[0], args[1]
            pod = self.kube.get("pods", namespace, name)
            node = ((pod or {}).get("spec") or {}).get("nodeName")
            if pod is not None and node and self.state.get_item(TERMINATION_KIND, node) is None:
                self.violations.append(f"pod {namespace}/{name} deleted on Node {node} outside a drain")
        elif method == "delete_node":
            name = args[0]
            node = self.kube.get("nodes", None, name)
            if node is not None and self._running(_instance_of(node)):
                pods = self._bound(name)
                if pods and not self._drain_deadline_passed(name):
                    self.violations.append(f"Node {name} of running instance {_instance_of(node)} deleted under {pods}, not drained")

    def _ec2_call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if method != "terminate_instances":
            return
        for instance_id in args[0]:
            if not self._running(instance_id):
                continue
            for node in self._nodes_of(instance_id):
                name = node["metadata"]["name"]
                pods = self._bound(name)
                if pods and not self._drain_deadline_passed(name):
                    self.violations.append(f"instance {instance_id} terminated under {pods} on Node {name}, not drained")

    # ------------------------------------------------------------ the world

    def live_pods(self) -> list[ports.JsonDict]:
        return [p for p in self.kube.list_pods() if not p["metadata"].get("deletionTimestamp")]

    def new_pod(self, cpu: int) -> None:
        name = f"p{next(self.numbers)}"
        pod = pod_json(name, cpu=f"{cpu}m", memory="128Mi", created=self.clock.now())
        self.kube.add("pods", pod)
        self.cpu[f"default/{name}"] = cpu

    @precondition(lambda self: len(self.kube.list_pods()) < MAX_PODS)
    @rule(cpu=st.sampled_from([250, 500, 1000]))
    def pod_arrives(self, cpu: int) -> None:
        self.new_pod(cpu)

    def _schedulable(self, node: ports.JsonDict) -> bool:
        spec = node.get("spec") or {}
        return (
            _ready(node)
            and not spec.get("unschedulable")
            and not node["metadata"].get("deletionTimestamp")
            and self._running(_instance_of(node))
            and not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [])
        )

    def _room(self, node: ports.JsonDict) -> tuple[int, int]:
        cpu, pods = CAPACITY.get(node["metadata"]["labels"].get(wk.INSTANCE_TYPE, ""), (0, 0))
        bound = self.kube.list_pods_on_node(node["metadata"]["name"])
        return cpu - sum(self.cpu.get(_key(p), 0) for p in bound), pods - len(bound)

    def kube_scheduler(self) -> None:
        """Binds the pending pods that fit (nominated Node first) to Ready, schedulable Nodes."""
        self.clear_stale_nominations()
        nodes = {n["metadata"]["name"]: n for n in self.kube.list_nodes() if self._schedulable(n)}
        for pod in self.live_pods():
            if (pod.get("spec") or {}).get("nodeName"):
                continue
            nominated = (pod.get("status") or {}).get("nominatedNodeName")
            for name in sorted(nodes, key=lambda n: n != nominated):
                cpu, count = self._room(nodes[name])
                if self.cpu.get(_key(pod), 0) <= cpu and count > 0:
                    self.kube.bind(pod["metadata"]["namespace"], pod["metadata"]["name"], name)
                    bound = self.kube.get("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
                    bound["status"]["phase"] = "Running"
                    self.kube.replace("pods", bound)
                    break

    def clear_stale_nominations(self) -> None:
        """kube-scheduler at once (after every invocation too): a Node's deletion requeues the
        pods nominated to it, the attempt fails there, preemption finds nothing, and the
        scheduler clears their nomination."""
        existing = {n["metadata"]["name"] for n in self.kube.list_nodes() if not n["metadata"].get("deletionTimestamp")}
        for pod in self.live_pods():
            nominated = (pod.get("status") or {}).get("nominatedNodeName")
            if nominated and nominated not in existing and not (pod.get("spec") or {}).get("nodeName"):
                pod["status"].pop("nominatedNodeName")
                self.kube.replace("pods", pod)

    def unregistered(self) -> list[ports.InstanceRecord]:
        known = {_instance_of(n) for n in self.kube.list_nodes()}
        return [r for _, r in sorted(self.ec2.instances.items()) if r.state in ("pending", "running") and r.instance_id not in known]

    @precondition(lambda self: "kubelet_registers" not in self.quiet and bool(self.unregistered()))
    @rule(pick=st.integers(0, 20), ready=st.booleans())
    def kubelet_registers(self, pick: int, ready: bool) -> None:
        """One instance's kubelet registers its Node, booted or not, Ready or not, or registers it
        again (under the same name) after a restart if the Node was deleted (at a tick, every
        booted instance's kubelet may register its Node Ready, once)."""
        candidates = self.unregistered()
        self.register(candidates[pick % len(candidates)], ready)

    def register(self, record: ports.InstanceRecord, ready: bool) -> None:
        """The kubelet registers the Node with what the launch template says, no more."""
        request = next((r for r in self.ec2.fleet_requests if r.tags.get(wk.NODECLAIM) == record.tags.get(wk.NODECLAIM)), None)
        template = request.launch_template.id if request is not None else ""
        inputs = self.ec2.template_inputs.get(template, {})
        cpu, pods = CAPACITY[record.instance_type]
        name = self.node_names.setdefault(record.instance_id, f"ip-10-0-0-{next(self.numbers)}")  # its private DNS name
        node = node_json(
            name,
            instance_id=record.instance_id,
            zone=record.zone,
            instance_type=record.instance_type,
            cpu=str(cpu // 1000),
            memory=MEMORY[record.instance_type],
            pods=str(pods),
            labels=inputs.get("labels") or {},
            taints=[{"key": t.key, "value": t.value or "", "effect": t.effect} for t in inputs.get("taints") or ()],
            created=self.clock.now(),
        )
        node["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": _stamp(self.clock.now())}]
        self.kube.add("nodes", node)
        self.ec2.instances[record.instance_id] = dataclasses.replace(record, state="running")
        self.kube_scheduler()  # a Node turning Ready wakes the scheduler at once

    def _set_ready(self, node: ports.JsonDict, status: str) -> None:
        conditions = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") != "Ready"]
        old: dict[str, Any] = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})
        if old.get("status") == status:
            return
        node["status"]["conditions"] = [*conditions, {"type": "Ready", "status": status, "lastTransitionTime": _stamp(self.clock.now())}]
        self.kube.replace("nodes", node)

    def _reclaim(self, instance_id: str) -> None:
        record = self.ec2.instances[instance_id]
        if record.state in GONE:
            return
        self.ec2.instances[instance_id] = dataclasses.replace(record, state="terminated")
        for node in self._nodes_of(instance_id):
            self._set_ready(node, "Unknown")
        self.inbox.append((self._event("state_change_terminated.json", instance_id), 0))

    @precondition(lambda self: "pod_leaves" not in self.quiet and bool(self.kube.list_pods()))
    @rule(pick=st.integers(0, 20), everything=st.booleans())
    def pod_leaves(self, pick: int, everything: bool) -> None:
        """A Deployment scales down by one (``everything``: to zero)."""
        pods = self.kube.list_pods()
        for pod in pods if everything else [pods[pick % len(pods)]]:
            self.kube.remove("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])

    @precondition(lambda self: "kubectl_delete" not in self.quiet and bool(self.kube.list_nodes()))
    @rule(kind=st.sampled_from(["nodeclaim", "node"]), pick=st.integers(0, 20))
    def kubectl_delete(self, kind: str, pick: int) -> None:
        """``kubectl delete nodeclaim|node NAME`` (held by the finalizers it carries)."""
        objects = self.kube.list_node_claims() if kind == "nodeclaim" else self.kube.list_nodes()
        if objects:
            name = objects[pick % len(objects)]["metadata"]["name"]
            self.kube.delete_node_claim(name) if kind == "nodeclaim" else self.kube.delete_node(name)

    @precondition(lambda self: "node_condition" not in self.quiet and bool(self.kube.list_nodes()))
    @rule(pick=st.integers(0, 20), ready=st.booleans())
    def node_condition(self, pick: int, ready: bool) -> None:
        """A Node's Ready condition changes (its ``lastTransitionTime`` now)."""
        nodes = self.kube.list_nodes()
        self._set_ready(nodes[pick % len(nodes)], "True" if ready else "False")
        self.kube_scheduler()

    @rule(seconds=st.sampled_from([1, 5, 15, 60, 200, 310, 920, 1900]), kubelets=st.booleans(), scheduled=st.sampled_from(["", "scan-first", "pass-first"]))
    def tick(self, seconds: int, kubelets: bool, scheduled: str) -> None:
        """Time passes; kubelets (``kubelets``: those of booted instances register their Nodes),
        the pod GC, EC2, ReplicaSets and kube-scheduler do their part, and the termination
        function receives the continuations now due. With ``scheduled``, a tick of a minute or
        more also runs the scheduled functions once: a scanner round (the scanner's minute) and
        the disruption pass (every minute), in the order it says, then, after five minutes or
        more, gc. What the tick runs has no faults: the actor rules inject them."""
        self.clock.advance(seconds)
        now = self.clock.now()
        for instance_id, when in sorted(self.reclaim_at.items()):
            if when <= now:
                del self.reclaim_at[instance_id]
                self._reclaim(instance_id)
        for record in list(self.ec2.instances.values()):
            if record.state == "pending" and record.launch_time is not None and now - record.launch_time >= BOOT:
                self.ec2.instances[record.instance_id] = dataclasses.replace(record, state="running")
        if kubelets:  # a kubelet registers once; only a restart (kubelet_registers) registers a deleted Node again
            for record in self.unregistered():
                if record.launch_time is not None and now - record.launch_time >= BOOT and record.instance_id not in self.node_names:
                    self.register(record, True)
        lost = self.kube.finish_terminating()  # evicted and deleted pods whose grace is over
        nodes = {n["metadata"]["name"]: n for n in self.kube.list_nodes()}
        for node in nodes.values():
            if not self._running(_instance_of(node)):
                self._set_ready(node, "Unknown")  # the kubelet is gone
        for pod in self.kube.list_pods():
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name and (node_name not in nodes or not self._running(_instance_of(nodes[node_name]))):
                self.kube.remove("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])  # the pod GC
                lost.append(_key(pod))
        for key in lost:  # their ReplicaSets make new ones
            if len(self.kube.list_pods()) < MAX_PODS:
                self.new_pod(self.cpu.get(key, 500))
        self.kube_scheduler()
        self.drain_queue()
        if scheduled and seconds >= 60:
            if scheduled == "scan-first":
                self.scanner("scanner-a", NO_FAULTS)
            if "disruption" not in self.quiet:
                self.disruption(NO_FAULTS)
            if scheduled == "pass-first":
                self.scanner("scanner-a", NO_FAULTS)
            if seconds >= 300 and "gc" not in self.quiet:
                self.gc(NO_FAULTS)
            self.kube_scheduler()
            self.drain_queue()

    def drain_queue(self) -> None:
        """The termination function receives every continuation due, without faults."""
        while (body := self.queue.take_due()) is not None:
            self.continue_termination(body, NO_FAULTS)

    # ------------------------------------------------------------ the actors

    @rule(container=st.sampled_from(["scanner-a", "scanner-b"]), plan=FAULT_PLANS)
    def scanner(self, container: str, plan: FaultPlan) -> None:
        summary, clean = self.invoke(container, plan, lambda runtime: run_scanner(runtime, "economy"))
        if clean and summary is not None and summary.rounds:
            self.dirty = False
            self.check_lost = True
            self.passed()

    def _event(self, fixture: str, instance_id: str) -> ports.JsonDict:
        return load_event(fixture, instance_id=instance_id, event_id=f"event-{next(self.numbers)}", time=self.clock.now())

    def deliver(self, plan: FaultPlan) -> None:
        raw, deliveries = self.inbox.pop(0)
        event = normalize(raw, now=self.clock.now())
        _, clean = self.invoke("interruption", plan, lambda runtime: handle_interruption(runtime, event, self.clock.now()), allowed=(TerminationBusy,))
        if not clean and deliveries + 1 < MAX_DELIVERIES:
            self.inbox.append((raw, deliveries + 1))  # redelivered after its visibility timeout

    @precondition(lambda self: "interruption" not in self.quiet and bool(self.ec2.instances))
    @rule(kind=st.sampled_from(["spot", "rebalance", "scheduled-change", "stopping", "reclaimed"]), pick=st.integers(0, 20), plan=FAULT_PLANS)
    def interruption(self, kind: str, pick: int, plan: FaultPlan) -> None:
        """An EventBridge event about an instance, delivered at once: a spot warning (EC2
        reclaims the instance two minutes later), a rebalance recommendation, an AWS Health
        scheduled retirement (hours ahead), the instance stopping (someone stopped it), or
        EC2 took it away (its state-change ``terminated``)."""
        instances = sorted(self.ec2.instances)
        instance_id = instances[pick % len(instances)]
        record = self.ec2.instances[instance_id]
        if kind == "reclaimed":
            self._reclaim(instance_id)  # queues the state-change event
            if record.state in GONE:
                self.inbox.insert(0, (self._event("state_change_terminated.json", instance_id), 0))
            else:
                self.inbox.insert(0, self.inbox.pop())
        else:
            if kind == "spot" and record.state not in GONE:
                self.reclaim_at.setdefault(instance_id, self.clock.now() + SPOT_NOTICE)
            if kind == "stopping" and record.state not in GONE:
                self.ec2.instances[instance_id] = dataclasses.replace(record, state="stopping")
            fixture = {
                "spot": "spot_interruption.json",
                "rebalance": "rebalance_recommendation.json",
                "scheduled-change": "health_scheduled_change.json",
                "stopping": "state_change_stopping.json",
            }[kind]
            self.inbox.insert(0, (self._event(fixture, instance_id), 0))
        self.deliver(plan)

    @precondition(lambda self: bool(self.inbox))
    @rule(plan=FAULT_PLANS)
    def interruption_redelivered(self, plan: FaultPlan) -> None:
        self.deliver(plan)

    @precondition(lambda self: "disruption" not in self.quiet and bool(self.kube.list_nodes()))
    @rule(plan=FAULT_PLANS)
    def disruption(self, plan: FaultPlan) -> None:
        def handler(runtime: Runtime) -> None:  # functions/disruption/handler.py
            summary = run_disruption(runtime, self.clock.now())
            try:
                deletion.handle_deletions(runtime, runtime.clock.now(), just_read=summary.status == "computed")
            except (StateError, Ec2Error, KubernetesError, TerminationBusy):
                if not self.faults.injected:
                    raise  # the handler logs it (the next pass or gc tries again): the rule reports it

        if self.invoke("disruption", plan, handler, allowed=(TerminationBusy,))[1]:
            self.passed()

    @precondition(lambda self: "delete_to_drain" not in self.quiet and bool(self.kube.list_nodes() or self.kube.list_node_claims()))
    @rule(plan=FAULT_PLANS)
    def delete_to_drain(self, plan: FaultPlan) -> None:
        if self.invoke("delete-to-drain", plan, lambda runtime: deletion.handle_deletions(runtime, self.clock.now()), allowed=(TerminationBusy,))[1]:
            self.passed()

    @precondition(lambda self: "gc" not in self.quiet and bool(self.ec2.instances or self.state.open_claims()))
    @rule(plan=FAULT_PLANS)
    def gc(self, plan: FaultPlan) -> None:
        result, clean = self.invoke("gc", plan, lambda runtime: collect_garbage(runtime, self.clock.now()))
        self.check_leaks = clean and result is not None and result.ran and not result.errors
        if self.check_leaks:
            self.passed()

    def passed(self) -> None:
        """A pass that releases Joiner's finalizers while the cluster is marked ended cleanly."""
        if self.uninstalled:
            self.passed_objects = {o["metadata"]["uid"] for o in (*self.kube.list_nodes(), *self.kube.list_node_claims())}

    @precondition(lambda self: "termination_worker" not in self.quiet and any(m[0] <= self.clock.now() for m in self.queue.messages))
    @rule(plan=FAULT_PLANS)
    def termination_worker(self, plan: FaultPlan) -> None:
        """Delivers every continuation due, one invocation each (``plan`` for the first)."""
        while (body := self.queue.take_due()) is not None:
            self.continue_termination(body, plan)
            plan = NO_FAULTS

    def continue_termination(self, body: ports.JsonDict, plan: FaultPlan) -> None:
        def receive(runtime: Runtime) -> None:
            try:
                handle_continuation(runtime, body, self.clock.now())
            except InvalidWorkMessage:
                pass  # acknowledged

        _, clean = self.invoke("termination", plan, receive)
        if not clean:  # the message comes back after its visibility timeout
            self.queue.redeliver(body, self.clock.now() + timedelta(seconds=RECEIVED_VISIBILITY_SECONDS))

    @precondition(lambda self: "uninstall" not in self.quiet and not self.uninstalled and bool(self.kube.list_nodes() or self.kube.list_node_claims()))
    @rule(plan=FAULT_PLANS)
    def uninstall(self, plan: FaultPlan) -> None:
        def run(runtime: Runtime) -> Any:
            if len(inspect.signature(deletion.remove_finalizers).parameters) > 1:
                return deletion.remove_finalizers(runtime.kube, self.clock.now())
            return deletion.remove_finalizers(runtime.kube)  # type: ignore[call-arg]  # before 9c4c164

        result, clean = self.invoke("cli", plan, run)
        if clean and not getattr(result, "failed", ()) and not getattr(result, "unmarked", ()):
            self.uninstalled = True
            self.uninstalled_objects = {o["metadata"]["uid"] for o in (*self.kube.list_nodes(), *self.kube.list_node_claims())}
            self.passed_objects = set()

    @precondition(lambda self: self.uninstalled)
    @rule()
    def uninstall_undo(self) -> None:
        """``joiner uninstall --undo``: Joiner stays, its finalizers may come back."""
        undo = getattr(deletion, "remove_uninstall_marker", None)  # (nothing to undo before 9c4c164)
        if undo is not None:
            self.invoke("cli", NO_FAULTS, lambda runtime: undo(runtime.kube))
        self.uninstalled = False

    # ------------------------------------------------------------ invariants

    def check_invariants_now(self) -> None:
        """Every invariant, as Hypothesis runs them after a step (for the replays below)."""
        for check in (
            self.no_pod_is_promised_twice,
            self.reservations_belong_to_open_claims,
            self.no_instance_leaks_past_gc,
            self.no_claim_outlives_its_node,
            self.pods_leave_nodes_only_by_eviction,
            self.uninstall_leaves_no_finalizer,
        ):
            check()

    def open_claims(self) -> list[ports.ClaimRecord]:
        return self.state.open_claims()  # the fake itself: strongly consistent, all of them

    @invariant()
    def no_pod_is_promised_twice(self) -> None:
        unbound = {_key(p) for p in self.live_pods() if not (p.get("spec") or {}).get("nodeName")}
        staying = {n["metadata"]["name"] for n in self.kube.list_nodes() if not n["metadata"].get("deletionTimestamp")}
        promised: dict[str, str] = {}
        for claim in self.open_claims():
            if claim.state not in IN_FLIGHT_STATES or (claim.node_name and claim.node_name not in staying):
                continue  # (a registered claim whose Node is being deleted, or gone, brings its pods nothing)
            for pod in set(claim.pods) & unbound:
                assert pod not in promised, f"pod {pod} is promised to {promised[pod]} and {claim.claim_id} ({claim.state})"
                promised[pod] = claim.claim_id

    @invariant()
    def reservations_belong_to_open_claims(self) -> None:
        open_ids = {c.claim_id for c in self.open_claims()}
        for pool in self.pools:
            held = self.state.reservations(pool)
            total = EMPTY
            for amount in held.values():
                total = total + amount
            assert self.state.reserved_capacity(pool) == total, f"pool {pool}: reserved total is not the sum of its reservations"
            if not self.dirty:
                stray = sorted(set(held) - open_ids)
                assert not stray, f"pool {pool}: reservations {stray} have no open claim after a clean scanner round ({held})"

    @invariant()
    def no_instance_leaks_past_gc(self) -> None:
        if not self.check_leaks:
            return
        self.check_leaks = False
        now = self.clock.now()
        claims = self.open_claims()
        recorded = {c.instance_id for c in claims if c.instance_id}
        launching = {c.claim_id for c in claims if not c.instance_id}
        draining = {TerminationState.from_dict(item).instance_id for item in self.state.list_items(TERMINATION_KIND)}
        for record in self.ec2.running_instances():
            if record.tags.get("joiner.dev/cluster") != CLUSTER or record.state in GONE:
                continue
            if record.launch_time is not None and now - record.launch_time < INSTANCE_GRACE:
                continue
            if record.instance_id in recorded or record.tags.get(wk.NODECLAIM) in launching or record.instance_id in draining:
                continue
            raise AssertionError(
                f"instance {record.instance_id} ({record.state}, claim tag {record.tags.get(wk.NODECLAIM)}) runs with no open claim "
                f"after a clean gc run, launched {(now - record.launch_time) if record.launch_time else '?'} ago"
            )

    @invariant()
    def no_claim_outlives_its_node(self) -> None:
        """After a clean scanner round, a registered claim whose Node is gone with no
        termination under way is noted, and closed once it has been gone ``NODE_LOST_AFTER``."""
        if not self.check_lost:
            return
        self.check_lost = False
        now = self.clock.now()
        nodes = {_instance_of(n) for n in self.kube.list_nodes()}
        draining = {TerminationState.from_dict(item).claim_id for item in self.state.list_items(TERMINATION_KIND)}
        for claim in self.open_claims():
            if claim.state not in (ClaimState.REGISTERED, ClaimState.INITIALIZED) or claim.instance_id in nodes or claim.claim_id in draining:
                continue
            assert claim.node_lost_at is not None, f"claim {claim.claim_id} ({claim.state}) lost its Node unnoticed after a clean scanner round"
            assert now - claim.node_lost_at < NODE_LOST_AFTER, (
                f"claim {claim.claim_id} ({claim.state}) stays open with instance {claim.instance_id} {now - claim.node_lost_at} after its Node "
                f"{claim.node_name} was found gone, after a clean scanner round"
            )

    @invariant()
    def pods_leave_nodes_only_by_eviction(self) -> None:
        assert not self.violations, "; ".join(self.violations)

    @invariant()
    def uninstall_leaves_no_finalizer(self) -> None:
        """From a clean ``joiner uninstall`` to its ``--undo``: no Node or mirror that the
        uninstall saw has Joiner's finalizer again, and, while the uninstall's marker is on
        some Node or mirror (what tells a Joiner still running that it was uninstalled,
        docs/disruption.md), neither has one created since. With no object left carrying the
        marker, a Joiner still running cannot know, and new objects get it as before. A
        container that never listed the mirrors may create one with the finalizer (it does not
        read what grows with the cluster to find out, docs/disruption.md): the next clean pass
        that syncs mirrors or handles deletions releases it."""
        if not self.uninstalled:
            return
        objects = [("node", n) for n in self.kube.list_nodes()] + [("nodeclaim", m) for m in self.kube.list_node_claims()]
        marked = any(UNINSTALLING in (o["metadata"].get("annotations") or {}) for _, o in objects)
        held = []
        for kind, obj in objects:
            meta = obj["metadata"]
            if TERMINATION_FINALIZER not in (meta.get("finalizers") or []):
                continue
            if meta["uid"] not in self.uninstalled_objects:
                if not marked or meta["uid"] not in self.passed_objects:
                    continue
            held.append(f"{kind}/{meta['name']}")
        assert not held, f"after joiner uninstall, Joiner's finalizer is back on {held}"


LifecycleMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class VirtualWallClock:
    """The wall clock as Joiner's services see it in the machine: ``sleep`` returns at once and
    moves ``monotonic`` on by what it slept. Waiting on the wall clock (a termination lease held
    by another invocation) is waiting for another invocation to act, and in the machine none
    runs meanwhile: a held lease stays held (its expiry is judged at the step's own time), so
    the real wait would only cost seconds of test time."""

    def __init__(self) -> None:
        self.slept = 0.0

    def sleep(self, seconds: float) -> None:
        self.slept += max(0.0, seconds)

    def monotonic(self) -> float:
        return time.monotonic() + self.slept

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@pytest.fixture(autouse=True)
def virtual_wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualWallClock()
    for name, module in sorted(sys.modules.items()):
        if name.startswith("joiner.") and getattr(module, "time", None) is time:
            monkeypatch.setattr(module, "time", clock)


@pytest.fixture(autouse=True)
def quiet_logs() -> Iterator[None]:
    """Joiner's INFO logs cost more than the fakes: a failing example's notes say what happened."""
    logger = logging.getLogger("joiner")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


test_lifecycle = LifecycleMachine.TestCase


# ---------------------------------------------------------------- the defects it found, replayed

# Each replays a shrunk example the machine found, with nothing tolerated. Those of defects not
# fixed yet are strict xfails: once the fix lands the replay passes, the xfail turns into a
# failure, and the fix removes the mark and the machine's matching ``tolerate_known``
# exception. The others stay as regression tests of their fixes.


class StrictMachine(LifecycleMachine):
    tolerate_known = False


def replay(*steps: Callable[[LifecycleMachine], object]) -> StrictMachine:
    machine = StrictMachine()
    machine.cluster(two_pools=False, pods=[500])
    machine.check_invariants_now()
    for step in steps:
        step(machine)
        machine.check_invariants_now()
    machine.teardown()
    return machine


def test_no_mirror_created_after_joiner_uninstall_gets_the_finalizer() -> None:
    replay(
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # a claim and its mirror
        lambda m: m.uninstall(NO_FAULTS),  # its finalizer removed, the mirror marked
        lambda m: m.pod_arrives(1000),
        lambda m: m.pod_arrives(1000),
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # a second claim: its mirror is created with the finalizer
    )


def test_a_warm_scanner_whose_mirrors_predate_the_uninstall_creates_none_with_the_finalizer() -> None:
    machine = StrictMachine()
    machine.cluster(two_pools=False, pods=[250], quiet=frozenset({"pod_leaves"}))
    steps: list[Callable[[LifecycleMachine], object]] = [
        *(lambda m: m.pod_arrives(250) for _ in range(3)),
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # one claim; its container lists the mirrors
        lambda m: m.pod_arrives(1000),  # room for it on no claim in flight
        lambda m: m.uninstall(NO_FAULTS),  # every mirror marked, no Joiner Node yet
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # the launch's mirror, created as the cluster is now
    ]
    for step in steps:
        step(machine)
        machine.check_invariants_now()
    machine.teardown()


@pytest.mark.parametrize("kind", ["spot", "scheduled-change"])
def test_an_interruption_drains_a_node_no_scanner_round_has_recorded_yet(kind: str) -> None:
    replay(
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # launched: the claim records the instance
        lambda m: m.kubelet_registers(0, True),  # its kubelet registers the Node (no claim label yet)
        lambda m: m.tick(1, False, ""),  # kube-scheduler binds the pod to it
        lambda m: m.interruption(kind, 0, NO_FAULTS),  # before any scanner round recorded the Node
    )


def test_a_deletion_found_past_its_stuck_time_is_drained_not_dropped_with_its_replacement_launched() -> None:
    machine = StrictMachine()
    machine.cluster(two_pools=False, pods=[250], quiet=frozenset())
    steps: list[Callable[[LifecycleMachine], object]] = [
        *(lambda m: m.pod_arrives(250) for _ in range(4)),
        lambda m: m.scanner("scanner-a", NO_FAULTS),
        lambda m: m.pod_arrives(250),
        lambda m: m.kubelet_registers(0, False),  # its Node, not Ready yet
        lambda m: m.delete_to_drain(NO_FAULTS),  # the finalizer on it
        lambda m: m.kubectl_delete("nodeclaim", 0),
        lambda m: m.delete_to_drain(FaultPlan(3)),  # its replacement launched, then the pass dies
        lambda m: m.tick(1900, False, "scan-first"),  # no pass for 31 minutes: the old claim must not stay beside it
    ]
    for step in steps:
        step(machine)
        machine.check_invariants_now()
    machine.teardown()


def test_a_claim_whose_node_was_deleted_at_once_does_not_stay_open() -> None:
    machine = replay(
        lambda m: m.scanner("scanner-a", NO_FAULTS),
        lambda m: m.kubelet_registers(0, True),
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # registered and initialized
        lambda m: m.kubectl_delete("node", 0),  # before any delete-to-drain pass put the finalizer on it
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # the Node is noted gone
        lambda m: m.tick(int(NODE_LOST_AFTER.total_seconds()), False, ""),
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # still gone: the claim is closed, the instance terminated
        lambda m: m.gc(NO_FAULTS),
    )
    closed = [c for c in (c for pool in machine.pools for c in machine.state.claims_by_node_pool(pool)) if c.reason == "node deleted"]
    assert len(closed) == 1 and closed[0].state == ClaimState.CLOSED
    assert machine.ec2.instances[closed[0].instance_id or ""].state in GONE


def test_a_claim_whose_node_comes_back_in_time_stays() -> None:
    machine = replay(
        lambda m: m.scanner("scanner-a", NO_FAULTS),
        lambda m: m.kubelet_registers(0, True),
        lambda m: m.scanner("scanner-a", NO_FAULTS),
        lambda m: m.kubectl_delete("node", 0),
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # noted gone
        lambda m: m.tick(60, False, ""),
        lambda m: m.kubelet_registers(0, True),  # the kubelet restarts and registers it again
        lambda m: m.scanner("scanner-a", NO_FAULTS),
        lambda m: m.tick(int(NODE_LOST_AFTER.total_seconds()), False, ""),
        lambda m: m.scanner("scanner-a", NO_FAULTS),
    )
    (claim,) = machine.state.open_claims()
    assert claim.state == ClaimState.INITIALIZED and claim.node_lost_at is None


def test_a_registration_timeout_never_terminates_a_node_held_for_its_drain() -> None:
    replay(
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # launched at 09:00
        lambda m: m.tick(820, False, ""),
        lambda m: m.kubelet_registers(0, True),  # a slow boot: the Node registers at 09:13:40, the pod binds
        lambda m: m.delete_to_drain(NO_FAULTS),  # Joiner's finalizer on it (its claim found by providerID)
        lambda m: m.kubectl_delete("node", 0),  # held by the finalizer
        lambda m: m.tick(120, False, ""),
        lambda m: m.scanner("scanner-a", NO_FAULTS),  # 15 minutes after the launch, before the next delete-to-drain pass
    )
