"""The local simulation behind ``joiner demo`` / ``joiner simulate``: Joiner's real Lambda
handlers, through their normal entry points, on moto (a real HTTP server) and the Kubernetes
API emulator, in simulated time, with a simulated kubelet, kube-scheduler, ReplicaSet
controller and EC2 around them.

The loop jumps simulated time from one thing that can happen to the next — a scheduled
function's tick, a scenario event, an instance finishing its boot, an SQS message becoming
visible, EC2 reclaiming an interrupted instance — at most :data:`MAX_STEP` at a time. At
each instant, in order: scenario events, EC2, the cluster's controllers, the scheduled
functions due (EventBridge ``Scheduled Event``), then the SQS consumers (interruption queue
-> ``interruption``, work queue -> ``termination``) until no message is visible; the
cluster's controllers run again after every invocation.

Handlers run against the simulated clock (their :class:`~joiner.services.context.Runtime`
gets it); the scanner runs one round per invocation, as deployed. Each function gets its own
runtime, as each Lambda function has its own execution environment. A handler whose
``functions/<name>/handler.py`` does not exist is skipped.

``scanner_mode="responsive"`` adds the watcher as deployed: every minute a watcher window of
``scan_window_seconds`` opens; inside it the watcher's own batching state
(:class:`joiner.services.watcher.PendingPods`, the one the function runs) observes the unbound
pods at every instant, as its watch stream would deliver them, and wakes the scanner through its
real handler when a batch is due (or when the window closes on an open batch). Pods that become
pending between windows are seen when the next window opens, as the resumed watch replays them.
The loop steps to every batch deadline, so wake-ups happen at the simulated second they would.
:meth:`SimulationResult.provisioning_latency` then gives, per pod served by a launch, pending to
CreateFleet (the launching round's wall time added: simulated time stands still while a handler
runs) and pending to Ready.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testworld.cloud import Interruption, Rebalance
    from testworld.cluster import KubeHarness
    from testworld.real_world import RealKube
    from testworld.stack import LocalQueue

__all__ = [
    "MAX_STEP",
    "QUEUE_CONSUMERS",
    "SCHEDULED",
    "WATCHER_PERIOD_SECONDS",
    "CapacityFailure",
    "CheckResult",
    "Entry",
    "ObjectDeletion",
    "PodDeletion",
    "Sample",
    "SimClock",
    "Simulation",
    "SimulationResult",
    "UnavailableMark",
    "percentile",
]

#: scheduled function -> seconds between EventBridge ticks (infra/schedules.py).
SCHEDULED: Mapping[str, int] = {"scanner": 60, "disruption": 60, "gc": 300}
#: Responsive mode: a watcher window opens every minute (the watcher's schedule).
WATCHER_PERIOD_SECONDS = 60
WATCHER_OFFSET_SECONDS = 20
#: queue -> the function its event source mapping invokes.
QUEUE_CONSUMERS: Mapping[str, str] = {"interruption": "interruption", "work": "termination"}
#: The longest jump of simulated time between two looks at the world.
MAX_STEP = timedelta(seconds=30)
#: Simulated spot price as a fraction of the on-demand price (the bundled catalog has no spot
#: prices; in AWS they come from DescribeSpotPriceHistory).
SPOT_PRICE_FACTOR = 0.35
#: SQS batches one queue may deliver at one instant before time moves on (a guard against loops).
MAX_BATCHES_PER_INSTANT = 50


class SimClock:
    """Simulated UTC time: the handlers' clock; ``sleep`` advances it instead of waiting."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            if when > self._now:
                self._now = when

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))


@dataclass(frozen=True)
class Entry:
    """One timeline row: when (since the start), who, what happened, what was done."""

    at: timedelta
    source: str
    event: str
    action: str


@dataclass(frozen=True)
class Sample:
    """The world at one instant."""

    at: timedelta
    nodes: Mapping[str, int]  # Ready managed nodes by instance type
    pending: int
    cost: float
    launched: Mapping[str, int]  # managed instances launched so far, by type
    lost: int
    cordoned: Mapping[str, int] = field(default_factory=dict)  # cordoned managed Nodes by NodePool
    capacity: Mapping[str, int] = field(default_factory=dict)  # Ready managed Nodes by capacity type


@dataclass(frozen=True)
class PodDeletion:
    """A pod a Joiner function evicted (``via`` ``eviction``) or deleted (``delete``)."""

    at: datetime
    pod: str
    node: str | None
    via: str
    grace_seconds: int | None
    function: str


@dataclass
class ObjectDeletion:
    """A scenario's ``delete`` of a NodeClaim or a Node and what became of it: ``held`` when a
    finalizer kept it (Joiner's delete-to-drain), ``drained`` when no pod but DaemonSet and
    static ones was left on its node, ``terminated`` (and by whom) its instance, ``node_gone``
    and ``gone`` when the Node and the deleted object were removed."""

    at: datetime
    kind: str
    name: str
    node: str | None
    instance_id: str | None
    held: bool
    pods_at_deletion: int = 0
    drained: datetime | None = None
    terminated: datetime | None = None
    terminated_by: str | None = None
    node_gone: datetime | None = None
    gone: datetime | None = None

    @property
    def handled(self) -> bool:
        """Held by Joiner's finalizer, drained, its instance terminated by Joiner, the Node and the object gone."""
        return self.held and self.drained is not None and self.terminated_by == "joiner" and self.node_gone is not None and self.gone is not None


@dataclass(frozen=True)
class CapacityFailure:
    """A CreateFleet override the simulated EC2 answered with a capacity error."""

    at: datetime
    function: str
    instance_type: str
    zone: str
    capacity_type: str
    code: str


@dataclass(frozen=True)
class UnavailableMark:
    """An offering Joiner recorded as unavailable in its state table, as first seen."""

    seen: datetime
    instance_type: str
    zone: str
    capacity_type: str
    expires: datetime
    reason: str


@dataclass(frozen=True)
class CheckResult:
    """An expectation's outcome: ``passed`` True/False, or None when skipped."""

    description: str
    passed: bool | None
    detail: str


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class SimulationResult:
    """Everything a run produced."""

    scenario: Any
    start: datetime
    entries: list[Entry] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    instances: list[Any] = field(default_factory=list)
    interruptions: list[Any] = field(default_factory=list)
    rebalances: list[Any] = field(default_factory=list)
    pods: list[Any] = field(default_factory=list)
    pod_deletions: list[PodDeletion] = field(default_factory=list)
    #: the scenario's deletions of NodeClaims and Nodes
    deletions: list[ObjectDeletion] = field(default_factory=list)
    #: the NodeClaims the scenario started with (testworld.claims.RunningClaim)
    node_claims: list[Any] = field(default_factory=list)
    capacity_failures: list[CapacityFailure] = field(default_factory=list)
    unavailable_marks: list[UnavailableMark] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    handlers: list[str] = field(default_factory=list)
    missing_handlers: list[str] = field(default_factory=list)
    invocations: Counter[str] = field(default_factory=Counter)
    #: wall-clock seconds each function's invocations took (what Lambda would bill, minus
    #: the network latency the local servers do not have)
    handler_seconds: dict[str, float] = field(default_factory=dict)
    handler_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: instance id -> wall seconds of the invocation that launched it; -> when its node became Ready
    launch_round_seconds: dict[str, float] = field(default_factory=dict)
    registered_at: dict[str, datetime] = field(default_factory=dict)
    #: ``economy`` (the scanner runs once a minute) or ``responsive`` (a watcher wakes it)
    scanner_mode: str = "economy"
    #: responsive mode: watcher windows opened and scanner wake-ups
    watcher_windows: int = 0
    wake_ups: int = 0
    wall_seconds: float = 0.0
    simulated_seconds: float = 0.0
    #: ``emulator`` or ``real`` (etcd, kube-apiserver, kube-scheduler: :mod:`testworld.real_world`)
    kube: str = "emulator"
    kube_version: str = ""
    #: real mode: every request of a Joiner identity the API server's audit log recorded
    kube_requests: list[Any] = field(default_factory=list)
    #: real mode: pods kube-scheduler left pending although the model placed them
    scheduler_disagreements: list[Any] = field(default_factory=list)
    #: real mode: wall seconds spent waiting for kube-scheduler (simulated time standing still)
    scheduler_wait_seconds: float = 0.0

    @property
    def launched(self) -> Counter[str]:
        """Managed instances launched, by type."""
        return Counter(i.instance_type for i in self.instances if i.managed)

    @property
    def terminated(self) -> Counter[str]:
        """Managed instances terminated, by type."""
        return Counter(i.instance_type for i in self.instances if i.managed and i.terminated is not None)

    def pending_seconds(self) -> list[float]:
        """Every workload pod's pending time (creation to binding; to deletion or the end if never bound)."""
        end = self.start + timedelta(seconds=self.simulated_seconds)
        return [p.pending_seconds(end) for p in self.pods]

    def pending_caused_by(self, node: str | None, since: datetime) -> float:
        """Pod-seconds pending caused by taking ``node``'s pods away from ``since`` on: for each
        of its pods Joiner evicted or deleted, or that went down with it, the pending time of
        the pod its ReplicaSet created in its place (the first pod of the same workload
        created at or after the removal, each matched once). Zero when the pods moved
        straight onto Ready capacity."""
        if node is None:
            return 0.0
        end = self.start + timedelta(seconds=self.simulated_seconds)
        records = {p.key: p for p in self.pods}
        removals: dict[str, datetime] = {}
        for deletion in self.pod_deletions:
            if deletion.node == node and deletion.at >= since:
                removals.setdefault(deletion.pod, deletion.at)
        for pod in self.pods:
            if pod.node == node and pod.lost and pod.gone is not None and pod.gone >= since:
                removals.setdefault(pod.key, pod.gone)
        taken: set[str] = set()
        total = 0.0
        for key, at in sorted(removals.items(), key=lambda item: (item[1], item[0])):
            removed = records.get(key)
            if removed is None:
                continue
            successors = sorted(
                (p for p in self.pods if p.workload == removed.workload and p.key not in taken and p.key != key and p.created >= at),
                key=lambda p: (p.created, p.key),
            )
            if successors:
                taken.add(successors[0].key)
                total += successors[0].pending_seconds(end)
        return total

    def provisioning_latency(self, *, with_round_wall_time: bool = True) -> list[tuple[float, float]]:
        """(pending -> CreateFleet, pending -> Ready) seconds of every pod bound to a node that was
        launched after it was created: the pods a launch served. CreateFleet is counted at the
        end of the launching invocation (its wall time added to the simulated instant, and to
        Ready, since the boot starts after it); without ``with_round_wall_time`` the simulated
        instants alone, which do not depend on how busy this machine is."""
        by_node = {i.private_dns: i for i in self.instances if i.managed}
        latencies = []
        for pod in self.pods:
            instance = by_node.get(pod.node or "")
            if pod.bound is None or instance is None or instance.launched < pod.created:
                continue
            round_seconds = self.launch_round_seconds.get(instance.instance_id, 0.0) if with_round_wall_time else 0.0
            fleet = (instance.launched - pod.created).total_seconds() + round_seconds
            ready_at = self.registered_at.get(instance.instance_id)
            # the boot starts after CreateFleet: the round's wall time delays Ready as much
            ready = (ready_at - pod.created).total_seconds() + round_seconds if ready_at is not None else fleet
            latencies.append((fleet, max(ready, fleet)))
        return latencies

    def interruption_pending(self) -> list[float]:
        """:meth:`pending_caused_by` for every spot interruption, in order."""
        return [self.pending_caused_by(r.node, r.warned) for r in self.interruptions]

    @property
    def pods_lost(self) -> int:
        return sum(1 for p in self.pods if p.lost)

    @property
    def passed(self) -> bool:
        """No expectation failed and no handler raised."""
        return all(c.passed is not False for c in self.checks) and not self.handler_errors

    @property
    def speedup(self) -> float:
        return self.simulated_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.records.append(f"{record.name}: {record.getMessage()}")
        except Exception:  # noqa: BLE001 - a log line must never fail the simulation
            pass


@contextlib.contextmanager
def _quiet_logs(capture: _Capture, verbose: bool) -> Iterator[None]:
    """Joiner's JSON logs go to ``capture`` (warnings and up) instead of stdout."""
    target = logging.getLogger("joiner")
    saved = (list(target.handlers), target.level, target.propagate)
    if not verbose:
        target.handlers = [capture]
        target.setLevel(logging.WARNING)
        target.propagate = False
    try:
        yield
    finally:
        target.handlers, level, target.propagate = saved[0], saved[1], saved[2]
        target.setLevel(level)


def _fmt_delta(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


class Simulation:
    """Run a :class:`~testworld.scenario.Scenario`.

    ``on_entry`` is called with each timeline :class:`Entry` as it happens and ``on_progress``
    with (simulated elapsed, scenario duration) after every instant (progress display).
    """

    def __init__(
        self,
        scenario: Any,
        *,
        functions_dir: Path | None = None,
        on_entry: Callable[[Entry], None] | None = None,
        on_progress: Callable[[timedelta, timedelta], None] | None = None,
        verbose: bool = False,
        start: datetime | None = None,
        region: str | None = None,
        scanner_mode: str = "economy",
        on_end: Callable[[Simulation], None] | None = None,
        kube: str = "emulator",
        kube_dir: Path | None = None,
    ) -> None:
        from testworld.aws import REGION

        if scanner_mode not in ("economy", "responsive"):
            raise ValueError(f"scanner_mode must be 'economy' or 'responsive', got {scanner_mode!r}")
        if kube not in ("emulator", "real"):
            raise ValueError(f"kube must be 'emulator' or 'real', got {kube!r}")
        self.kube = kube
        self.kube_dir = kube_dir
        self.scenario = scenario
        self.scanner_mode = scanner_mode
        #: called after the last step, with moto and the API emulator still up (``--hold``)
        self.on_end = on_end
        self.region = region or REGION
        self.functions_dir = functions_dir
        self.on_entry = on_entry or (lambda entry: None)
        self.on_progress = on_progress or (lambda at, total: None)
        self.verbose = verbose
        self.start = start or datetime.now(UTC).replace(microsecond=0)
        self.clock = SimClock(self.start)
        self.result = SimulationResult(scenario=scenario, start=self.start, scanner_mode=scanner_mode, kube=kube)
        self._capture = _Capture()

    # ------------------------------------------------------------ public

    def run(self) -> SimulationResult:
        """Set up, run the scenario to its end, evaluate the expectations."""
        import joiner.observability  # noqa: F401 - its powertools Logger configures itself on import: before we quiet it
        from testworld.aws import environment, fake_credentials

        wall = time.monotonic()
        env = {"POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_DEV": "false"}
        with fake_credentials(self.region), environment(env), _quiet_logs(self._capture, self.verbose), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                self._setup()
            except BaseException:
                if hasattr(self, "_exit"):
                    self._exit.close()  # what was started (a control plane, moto) stops
                raise
            try:
                self._loop()
                if self.on_end is not None:
                    self.on_end(self)
            finally:
                self._teardown()
        self.result.wall_seconds = time.monotonic() - wall
        self.result.simulated_seconds = (self.clock.now() - self.start).total_seconds()
        self.result.warnings = list(self._capture.records)
        self.result.checks = self._evaluate()
        return self.result

    # ------------------------------------------------------------ setup

    def _setup(self) -> None:
        import urllib3

        from testworld.aws import SerialMotoServer
        from testworld.cloud import SimulatedEc2, spot_fleet_security_groups
        from testworld.cluster import SimulatedCluster
        from testworld.kube_emulator import KubeEmulator
        from testworld.lambdas import SqsTime, handler_path, load_handler
        from testworld.stack import LocalStack

        self._exit = contextlib.ExitStack()
        self.moto = SerialMotoServer()
        self.moto.start()
        self._exit.callback(self.moto.stop)
        urllib3.PoolManager().request("POST", f"{self.moto.endpoint}/moto-api/reset")
        self._exit.enter_context(SqsTime(self.clock))
        self._exit.enter_context(spot_fleet_security_groups())
        self.real: RealKube | None = None
        self.emulator: KubeHarness
        if self.kube == "real":
            self.emulator = self._start_real_kube()
        else:
            emulator = KubeEmulator(clock=self.clock.now).start()
            self._exit.callback(emulator.close)
            self.emulator = emulator

        scenario = self.scenario
        region = self.region
        self.stack = LocalStack(self.moto.endpoint, scenario.cluster, region).create(tuple(f"{region}{letter}" for letter in "abc"))
        self.catalog = _with_simulated_spot_prices(self._region_catalog())
        self.ec2 = SimulatedEc2(self.stack.ec2, self.stack.events, scenario.cluster, self.catalog, self.clock.now, region)
        self.cluster: SimulatedCluster
        if self.real is not None:
            from testworld.real_world import RealCluster

            self.cluster = RealCluster(self.emulator, self.catalog, region, self.clock.now, note=self._note, kube=self.real)
        else:
            self.cluster = SimulatedCluster(self.emulator, self.catalog, region, self.clock.now, note=self._note)
        for obj in scenario.objects:
            self.emulator.apply(obj)
        where = (
            f"kube-apiserver {self.real.version} with etcd and kube-scheduler on {self.emulator.url}"
            if self.real is not None
            else f"Kubernetes API on {self.emulator.url}"
        )
        self._note(
            "setup",
            "stack and cluster created",
            f"moto on {self.moto.endpoint}, {where}; {len(scenario.objects)} object{'s' if len(scenario.objects) != 1 else ''} installed",
        )
        for workload in scenario.workloads:
            self.cluster.add_workload(workload)

        settings = self.stack.settings(self.emulator.url, scanner_mode="economy")
        self.metrics: list[tuple[str, float, dict[str, str]]] = []

        def record(name: str, value: float = 1, unit: str = "Count", **dimensions: str) -> None:
            self.metrics.append((name, value, dimensions))

        from testworld.faults import CapacityInjector, inject_capacity_errors

        self._capacity_events = [e for e in scenario.events if e.kind == "capacityError"]
        self._invoking = "?"
        self.injector = CapacityInjector(failing=self._capacity_fails, on_failure=self._capacity_failure)
        self.handlers: dict[str, ModuleType] = {}
        wanted = sorted(set(SCHEDULED) | set(QUEUE_CONSUMERS.values()))
        for name in wanted:
            if not handler_path(name, self.functions_dir).exists():
                self.result.missing_handlers.append(name)
                continue
            module = load_handler(name, self.functions_dir)
            runtime = self._build_runtime(name, self._function_settings(name, settings), record)
            if hasattr(module, "reset"):
                module.reset()
            module.configure(runtime)
            if self._capacity_events:
                inject_capacity_errors(runtime.aws.ec2, self._capacity_fails, injector=self.injector)
            self.handlers[name] = module
        self._install_claims(settings, record)
        self.result.handlers = sorted(self.handlers)
        if self.result.missing_handlers:
            self._note("setup", "functions not found", "skipped: " + ", ".join(self.result.missing_handlers))
        self._next_tick = {name: self.start + timedelta(seconds=period) for name, period in SCHEDULED.items() if name in self.handlers}
        self._watch: Any = None
        if self.scanner_mode == "responsive" and "scanner" in self.handlers:
            from joiner.domain.wake import BatchWindow
            from joiner.services.watcher import PendingPods

            self._watch = PendingPods(BatchWindow(settings.batch_idle_seconds, settings.batch_max_seconds))
            self._joining_seen: set[str] = set()
            self._watch_window = timedelta(seconds=settings.scan_window_seconds)
            # EventBridge does not align two rate rules: the watcher's windows open 20 s after the
            # scanner's ticks, so a pod pending in the gap between windows waits for the next
            # window instead of being rescued by a tick that happens to follow the gap.
            self._watch_opens = self.start + timedelta(seconds=WATCHER_OFFSET_SECONDS)
            self._watch_closes = self.start + self._watch_window
            self.result.watcher_windows = 1
        self._queues = {"interruption": self.stack.interruption, "work": self.stack.work}
        self._events = list(scenario.events)
        self._replacements: dict[str, list[str]] = {}  # instance -> interrupted instance it replaces

    def _install_claims(self, settings: Any, metric: Callable[..., None]) -> None:
        """The scenario's NodeClaims as running capacity Joiner launched before the start
        (:mod:`testworld.claims`), and the Pods bound to their nodes."""
        #: pod key -> node, for the Pods the scenario binds itself (no workload's)
        self._pinned: dict[str, str] = {
            f"{(o['metadata'].get('namespace') or 'default')}/{o['metadata']['name']}": str(o["spec"]["nodeName"])
            for o in self.scenario.objects
            if o.get("kind") == "Pod" and (o.get("spec") or {}).get("nodeName")
        }
        claims = getattr(self.scenario, "node_claims", ())
        if not claims:
            return
        from testworld.claims import install_claims

        runtime = self._build_runtime("setup", settings, metric)
        running = install_claims(
            claims, stack=self.stack, ec2=self.ec2, cluster=self.cluster, kube=self.emulator, state=runtime.state, catalog=self.catalog, now=self.clock.now
        )
        self.result.node_claims = running
        for claim in running:
            instance = self.ec2.instances[claim.instance_id]
            pods = sum(1 for node in self._pinned.values() if node == claim.node)
            self._note(
                "setup",
                f"NodeClaim {claim.name} ({claim.api_version}) running",
                f"{instance.instance_type} ({instance.capacity_type}, {instance.zone}) {claim.instance_id}, node {claim.node} Ready, "
                f"{pods} pod{'s' if pods != 1 else ''} bound to it; Joiner's claim, mirror and finalizers in place",
            )

    def _start_real_kube(self) -> KubeHarness:
        """Real mode: a fresh control plane for this run (stopped at teardown)."""
        import tempfile

        from testworld.real_world import RealHarness, RealKube

        work = Path(tempfile.mkdtemp(prefix="joiner-kube-", dir=self.kube_dir))
        self.real = RealKube.start(work)
        self.result.kube_version = self.real.version

        def stop() -> None:
            import shutil

            leaked = self.real.stop() if self.real is not None else []
            if leaked:
                raise RuntimeError(f"real Kubernetes: process groups still alive after stopping: {leaked}")
            shutil.rmtree(work, ignore_errors=True)

        self._exit.callback(stop)
        return RealHarness(self.real)

    def _function_settings(self, name: str, settings: Any) -> Any:
        """Real mode: the function's own identity (bearer token, the API server's CA)."""
        import dataclasses

        if self.real is None or name not in self.real.functions:
            return settings
        return dataclasses.replace(settings, kubernetes_token=self.real.token(name), kubernetes_ca_file=self.real.ca_file)

    def _build_runtime(self, name: str, settings: Any, metric: Callable[..., None]) -> Any:
        """The runtime of function ``name``'s execution environment (the fault-injection soak
        builds its own, with hooks on its clients)."""
        from joiner.services.context import build_runtime

        return build_runtime(settings, clock=self.clock, sleep=self.clock.sleep, metric=metric, catalog_value=self.catalog)

    def _call_handler(self, name: str, module: ModuleType, event: dict[str, Any], context: Any) -> dict[str, Any] | None:
        """One Lambda invocation of ``module``'s handler (stdout swallowed)."""
        with contextlib.redirect_stdout(io.StringIO()):
            response: dict[str, Any] | None = module.handler(event, context)
        return response

    def _region_catalog(self) -> Any:
        """us-east-1: the bundled catalog. Elsewhere: built from moto's DescribeInstanceTypes and
        offerings for the region exactly as the functions build it (moto has no Pricing API, so
        priced from the bundled us-east-1 table, the functions' fallback)."""
        from joiner.adapters.ec2 import Ec2Adapter
        from joiner.domain.catalog import BUNDLED_REGIONS, load_bundled_catalog
        from joiner.services.catalog import build_region_catalog

        if self.region in BUNDLED_REGIONS:
            return load_bundled_catalog(self.region)
        adapter = Ec2Adapter(self.stack.ec2, None, None, self.scenario.cluster, self.clock)
        return build_region_catalog(adapter, None, self.region, count=lambda name: None, warn=lambda message, extra: self._note("setup", message, str(extra)))

    def _teardown(self) -> None:
        for module in self.handlers.values():
            with contextlib.suppress(Exception):
                module.reset()
        self.result.instances = list(self.ec2.instances.values()) if hasattr(self, "ec2") else []
        self.result.interruptions = list(self.ec2.interruptions) if hasattr(self, "ec2") else []
        self.result.rebalances = list(self.ec2.rebalances) if hasattr(self, "ec2") else []
        self.result.pods = list(self.cluster.pods.values()) if hasattr(self, "cluster") else []
        if self.real is not None and hasattr(self, "emulator"):
            from testworld.real_world import RealCluster, RealHarness

            with contextlib.suppress(Exception):
                assert isinstance(self.emulator, RealHarness)
                self.emulator.deletions  # noqa: B018 - reads the audit log to its end
                self.result.kube_requests = list(self.emulator.joiner_requests)
            real_cluster = getattr(self, "cluster", None)
            if isinstance(real_cluster, RealCluster):
                self.result.scheduler_disagreements = list(real_cluster.disagreements)
                self.result.scheduler_wait_seconds = real_cluster.scheduler_wait_seconds
        self._exit.close()

    # ------------------------------------------------------------ the loop

    def _elapsed(self) -> timedelta:
        return self.clock.now() - self.start

    def _note(self, source: str, event: str, action: str) -> None:
        entry = Entry(self._elapsed(), source, event, action)
        self.result.entries.append(entry)
        self.on_entry(entry)

    def _loop(self) -> None:
        end = self.start + self.scenario.duration
        check_times = sorted({self.start + c.at for c in self.scenario.expect if c.at is not None})
        while True:
            self._instant()
            self._sample()
            self.on_progress(self._elapsed(), self.scenario.duration)
            now = self.clock.now()
            if now >= end:
                break
            self.clock.set(min(self._next_time(now, check_times), end))

    def _next_time(self, now: datetime, check_times: list[datetime]) -> datetime:
        from testworld.lambdas import next_visible_in

        candidates = [now + MAX_STEP, *self._next_tick.values()]
        candidates += [self.start + e.at for e in self._events]
        candidates += [self.start + e.until for e in self._capacity_events if e.until is not None]
        candidates += [t for t in check_times if t > now]
        if self._watch is not None:
            due = self._watch.batch.due_at(self._watch.window)
            candidates += [c for c in (due, self._watch_closes, self._watch_opens + timedelta(seconds=WATCHER_PERIOD_SECONDS)) if c is not None]
        boot = self.scenario.boot_delay
        not_ready = timedelta(seconds=self.cluster.not_ready_seconds)
        for instance in self.ec2.running():
            name = self.cluster.registered.get(instance.instance_id)
            if name is None:
                candidates.append(instance.launched + boot - not_ready)
            if name is None or name not in self.cluster.node_ready_at:
                candidates.append(instance.launched + boot)
        reclaim = self.ec2.next_reclaim()
        if reclaim is not None:
            candidates.append(reclaim)
        for name, queue in self._queues.items():
            if QUEUE_CONSUMERS[name] in self.handlers and queue is not None:
                wait = next_visible_in(queue.url, self.region)
                if wait is not None:
                    candidates.append(now + timedelta(seconds=wait + 0.001))
        later = [c for c in candidates if c > now]
        return min(later) if later else now + MAX_STEP

    def _instant(self) -> None:
        now = self.clock.now()
        while self._events and self.start + self._events[0].at <= now:
            self._scenario_event(self._events.pop(0))
        for record in self.ec2.due_reclaims():
            instance = self.ec2.reclaim(record)
            self._note("ec2", f"spot instance {instance.instance_id} reclaimed", "terminated at the end of the two-minute notice")
            self._instance_gone(instance)
        self._settle()
        for name in list(self._next_tick):
            if self._next_tick[name] <= now:
                self._next_tick[name] = now + timedelta(seconds=SCHEDULED[name])
                from testworld.lambdas import scheduled_event

                event = scheduled_event(f"{self.scenario.cluster}-{name}-schedule", now, region=self.region)
                self._invoke(name, event, "scheduled tick")
        if self._watch is not None:
            self._watcher_step(now)
        self._drain_queues()

    def _watcher_step(self, now: datetime) -> None:
        """Responsive mode's watcher at this instant (see the module docstring)."""
        watch = self._watch
        if now >= self._watch_opens + timedelta(seconds=WATCHER_PERIOD_SECONDS):
            if watch.batch.pods:
                self._wake_scanner("window end")
            self._watch_opens += timedelta(seconds=WATCHER_PERIOD_SECONDS)
            self._watch_closes = self._watch_opens + self._watch_window
            self.result.watcher_windows += 1
        if not self._watch_opens <= now <= self._watch_closes:
            return
        unbound = {p["metadata"]["uid"]: p for p in self.emulator.list("Pod") if not (p.get("spec") or {}).get("nodeName")}
        for uid in [uid for uid in watch.known if uid not in unbound]:
            watch.observe("DELETED", {"metadata": {"uid": uid}}, now)
        for pod in unbound.values():
            watch.observe("MODIFIED", pod, now)
        from joiner.domain import labels as wk

        for node in self.emulator.list("Node"):  # the watcher's nodes stream (JOINING_NODES_SELECTOR)
            labels, name = node["metadata"].get("labels") or {}, node["metadata"]["name"]
            if wk.NODEPOOL in labels and wk.REGISTERED not in labels and name not in self._joining_seen:
                self._joining_seen.add(name)
                watch.replan(now)
        if watch.due(now):
            self._wake_scanner("batch")
        elif now >= self._watch_closes and watch.batch.pods:
            self._wake_scanner("window end")

    def _wake_scanner(self, reason: str) -> None:
        pods = self._watch.take()
        self.result.wake_ups += 1
        self._invoke("scanner", {"mode": "economy"}, f"watcher wake-up ({reason}, {pods} pod{'s' if pods != 1 else ''})")

    def _settle(self, *, observe: bool = True) -> None:
        """The cluster's reaction to whatever just happened (kubelets, controllers, scheduler);
        ``observe=False`` when EC2 was just observed."""
        from testworld.cluster import kubelet_registration

        if observe:
            _, gone = self.ec2.observe(actor="ec2")
            for instance in gone:
                self._instance_gone(instance)
        now = self.clock.now()
        not_ready = timedelta(seconds=self.cluster.not_ready_seconds)
        for instance in self.ec2.running():
            ready = instance.launched + self.scenario.boot_delay <= now
            name = self.cluster.registered.get(instance.instance_id)
            if name is not None:
                if name in self.cluster.node_ready_at or not ready:
                    continue
                self.cluster.mark_ready(name)
                self._note("kubelet", f"node {name} Ready", f"{instance.instance_type} ({instance.capacity_type}, {instance.zone})")
            elif instance.launched + self.scenario.boot_delay - not_ready > now:
                continue
            else:
                boot = kubelet_registration(self.ec2.user_data(instance.instance_id))
                node = self.cluster.register_node(instance.instance_id, instance.private_dns, instance.instance_type, instance.zone, boot, ready=ready)
                self._note(
                    "kubelet",
                    f"node {node['metadata']['name']} registered",
                    f"{instance.instance_type} ({instance.capacity_type}, {instance.zone}) " + ("Ready" if ready else "not ready yet"),
                )
                if not ready:
                    continue
            self.result.registered_at[instance.instance_id] = now
            warned: list[Interruption | Rebalance] = [*self.ec2.interruptions, *self.ec2.rebalances]
            for record in warned:
                if instance.instance_id in self._replacements.get(record.instance_id, []) and record.replacement_ready is None:
                    record.replacement_ready = now
        self.cluster.reconcile()
        self._track_interruptions()
        self._track_deletions()

    def _instance_gone(self, instance: Any) -> None:
        lost = self.cluster.instance_gone(instance.instance_id)
        if lost:
            self._note(
                "node-lifecycle",
                f"instance {instance.instance_id} gone with {len(lost)} pod{'s' if len(lost) != 1 else ''} on it",
                "Node deleted; pods lost: " + ", ".join(lost[:5]) + (" ..." if len(lost) > 5 else ""),
            )

    def _track_interruptions(self) -> None:
        now = self.clock.now()
        for record in self.ec2.interruptions:
            instance = self.ec2.instances[record.instance_id]
            if record.drained is None:
                node = record.node
                if node is None or self.emulator.get("Node", node) is None or not self.cluster.pods_on(node):
                    record.drained = now
            if record.terminated is None and instance.terminated is not None:
                record.terminated, record.terminated_by = instance.terminated, instance.terminated_by
        for rebalance in self.ec2.rebalances:
            instance = self.ec2.instances[rebalance.instance_id]
            node_obj = self.emulator.get("Node", rebalance.node) if rebalance.node else None
            if rebalance.cordoned is None and node_obj is not None and (node_obj.get("spec") or {}).get("unschedulable"):
                rebalance.cordoned = now
            if rebalance.drained is None and rebalance.drain_started is not None and (node_obj is None or not self.cluster.pods_on(rebalance.node or "")):
                rebalance.drained = now
            if rebalance.terminated is None and instance.terminated is not None:
                rebalance.terminated, rebalance.terminated_by = instance.terminated, instance.terminated_by

    def _track_deletions(self) -> None:
        now = self.clock.now()
        for record in self.result.deletions:
            node = self.emulator.get("Node", record.node) if record.node else None
            if record.drained is None and (node is None or not self.cluster.pods_on(record.node or "")):
                record.drained = now
            if record.node_gone is None and node is None:
                record.node_gone = now
            if record.gone is None and self.emulator.get(record.kind, record.name) is None:
                record.gone = now
                if record.held:
                    self._note(
                        "kube-apiserver",
                        f"{record.kind.lower()} {record.name} removed",
                        f"its finalizer released {_fmt_delta(now - record.at)} after the deletion",
                    )
            instance = self.ec2.instances.get(record.instance_id or "")
            if record.terminated is None and instance is not None and instance.terminated is not None:
                record.terminated, record.terminated_by = instance.terminated, instance.terminated_by

    def _delete(self, event: Any) -> None:
        """``kubectl delete nodeclaim NAME`` / ``kubectl delete node NAME``."""
        kind, name = event.object_kind, event.name
        found = self.emulator.get(kind, name)
        if found is None:
            self._note("scenario", f"kubectl delete {kind.lower()} {name}", "not found: nothing deleted")
            self.result.handler_errors.append(f"{event.where}: {kind} {name} no longer exists")
            return
        claim = next((c for c in self.result.node_claims if (c.name if kind == "NodeClaim" else c.node) == name), None)
        node = claim.node if claim is not None else (name if kind == "Node" else None)
        instance_id = claim.instance_id if claim is not None else None
        self.emulator.delete(kind, name)
        held = self.emulator.get(kind, name) is not None
        pods = len(self.cluster.pods_on(node)) if node else 0
        self.result.deletions.append(ObjectDeletion(self.clock.now(), kind, name, node, instance_id, held, pods))
        finalizers = ", ".join((found.get("metadata") or {}).get("finalizers") or [])
        self._note(
            "scenario",
            f"kubectl delete {kind.lower()} {name}",
            f"deletionTimestamp set, {finalizers} holds it; node {node} has {pods} pod{'s' if pods != 1 else ''} to drain"
            if held
            else "deleted at once (no finalizer)",
        )
        self._track_deletions()

    def _scenario_event(self, event: Any) -> None:
        if event.kind == "delete":
            self._delete(event)
            return
        if event.kind == "scale":
            self.cluster.scale(event.workload, event.replicas)
            self._note("scenario", f"{event.workload} scaled to {event.replicas}", "")
            return
        if event.kind == "capacityError":
            until = f"until {_fmt_delta(event.until)}" if event.until is not None else "until the end"
            self._note("ec2", f"no capacity: {event.describe_offerings()}", f"CreateFleet answers InsufficientInstanceCapacity {until}")
            return
        if event.kind == "nodeCondition":
            self._node_condition(event)
            return
        candidates = [
            i
            for i in self.ec2.running()
            if i.managed
            and i.capacity_type == "spot"
            and i.instance_id in self.cluster.registered
            and (event.node_pool is None or i.node_pool == event.node_pool)
            and (event.instance_type is None or i.instance_type == event.instance_type)
        ]
        candidates.sort(key=lambda i: (i.launched, i.instance_id))
        if event.index >= len(candidates):
            self._note("scenario", "spot interruption requested", f"no running spot instance matches ({event.where}): nothing interrupted")
            self.result.handler_errors.append(f"{event.where}: no running spot instance matched the interruption")
            return
        instance = candidates[event.index]
        node = self.cluster.registered.get(instance.instance_id)
        pods = len(self.cluster.pods_on(node)) if node else 0
        if event.kind == "rebalanceRecommendation":
            policy = self._rebalance_policy(instance.node_pool)
            self.ec2.recommend_rebalance(instance, node, pods, policy)
            self._note(
                "ec2",
                f"rebalance recommendation for {instance.instance_id}",
                f"node {node} ({instance.instance_type}, {pods} pods); NodePool {instance.node_pool} rebalance: {policy}",
            )
            return
        record = self.ec2.interrupt(instance, node, pods)
        self._note(
            "ec2",
            f"spot interruption warning for {instance.instance_id}",
            f"node {node} ({instance.instance_type}, {pods} pods); EC2 reclaims it at {_fmt_delta(record.deadline - self.start)}",
        )

    def _node_condition(self, event: Any) -> None:
        """A Node reports a condition (its kubelet, or the EKS node monitoring agent)."""
        candidates = sorted(
            (
                i
                for i in self.ec2.running()
                if i.managed
                and i.instance_id in self.cluster.registered
                and (event.node_pool is None or i.node_pool == event.node_pool)
                and (event.instance_type is None or i.instance_type == event.instance_type)
            ),
            key=lambda i: (i.launched, i.instance_id),
        )
        if event.index >= len(candidates):
            self._note("scenario", f"node condition {event.condition}={event.status} requested", f"no running node matches ({event.where})")
            self.result.handler_errors.append(f"{event.where}: no running node matched the node condition")
            return
        node = self.cluster.registered[candidates[event.index].instance_id]
        self.cluster.set_node_condition(node, event.condition, event.status, event.reason)
        self._note(
            "node-monitoring", f"node {node} reports {event.condition}={event.status}", f"{len(self.cluster.pods_on(node))} pods on it; reason {event.reason}"
        )

    def _rebalance_policy(self, pool: str) -> str:
        obj = self.emulator.get("NodePool", pool) if pool else None
        return str((((obj or {}).get("spec") or {}).get("interruption") or {}).get("rebalance") or "replace")

    # ------------------------------------------------------------ capacity errors

    def _capacity_fails(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        now = self.clock.now()
        return any(
            self.start + e.at <= now and (e.until is None or now < self.start + e.until) and e.fails(instance_type, zone, capacity_type)
            for e in self._capacity_events
        )

    def _capacity_failure(self, failure: Any) -> None:
        self.result.capacity_failures.append(
            CapacityFailure(self.clock.now(), self._invoking, failure.instance_type, failure.zone, failure.capacity_type, failure.code)
        )

    def _record_unavailable(self) -> list[UnavailableMark]:
        """Offerings Joiner's state table holds as unavailable, newly seen."""
        table = self.stack.dynamodb
        items = []
        for page in table.get_paginator("scan").paginate(
            TableName=self.stack.state_table, FilterExpression="begins_with(pk, :p)", ExpressionAttributeValues={":p": {"S": "UNAVAILABLE#"}}
        ):
            items += page["Items"]
        known = {(m.instance_type, m.zone, m.capacity_type, m.expires) for m in self.result.unavailable_marks}
        new = []
        for item in items:
            expires = datetime.fromtimestamp(int(item["expiresAt"]["N"]), UTC)
            key = (item["instanceType"]["S"], item["zone"]["S"], item["capacityType"]["S"], expires)
            if key not in known:
                new.append(UnavailableMark(self.clock.now(), *key, item.get("reason", {}).get("S", "")))
        self.result.unavailable_marks.extend(sorted(new, key=lambda m: (m.instance_type, m.zone, m.capacity_type)))
        return new

    # ------------------------------------------------------------ invoking handlers

    def _invoke(self, name: str, event: dict[str, Any], trigger: str) -> dict[str, Any] | None:
        from infra.deployment import SPECS_BY_NAME
        from testworld.lambdas import LambdaContext

        module = self.handlers[name]
        nodes_before = {n["metadata"]["name"]: bool((n.get("spec") or {}).get("unschedulable")) for n in self.emulator.list("Node")}
        deletions_before = len(self.emulator.deletions)
        failures_before = len(self.result.capacity_failures)
        self._invoking = name
        self.result.invocations[name] += 1
        context = LambdaContext(
            aws_request_id=str(uuid.uuid4()), function_name=f"{self.scenario.cluster}-{name}", remaining_ms=1000 * SPECS_BY_NAME[name].timeout_seconds
        )
        response: dict[str, Any] | None = None
        error: str | None = None
        started = time.perf_counter()
        try:
            response = self._call_handler(name, module, event, context)
        except Exception as failure:  # noqa: BLE001 - a failing invocation is reported, as Lambda would
            error = f"{type(failure).__name__}: {failure}"
            self.result.handler_errors.append(f"{_fmt_delta(self._elapsed())} {name}: {error}")
        finally:
            took = time.perf_counter() - started
            self.result.handler_seconds[name] = self.result.handler_seconds.get(name, 0.0) + took
        launched, gone = self.ec2.observe(actor="joiner")
        for instance in launched:
            self.result.launch_round_seconds[instance.instance_id] = took
        actions: list[str] = []
        failures = self.result.capacity_failures[failures_before:]
        if failures:
            by_offering = Counter(f"{f.instance_type} {f.capacity_type} in {f.zone}" for f in failures)
            actions.append(f"{failures[0].code} for " + ", ".join(sorted(by_offering)))
            marks = self._record_unavailable()
            if marks:
                until = max(m.expires for m in marks)
                actions.append(f"marked {len(marks)} offering{'s' if len(marks) != 1 else ''} unavailable until {_fmt_delta(until - self.start)}")
        if launched:
            by_kind = Counter(f"{i.instance_type} ({i.capacity_type})" for i in launched)
            actions.append("launched " + ", ".join(f"{n} x {k}" if n > 1 else k for k, n in sorted(by_kind.items())))
            if name == "interruption":
                warned: list[Interruption | Rebalance] = [*self.ec2.interruptions, *self.ec2.rebalances]
                for record in warned:
                    if record.replacement_ready is None and record.terminated is None:
                        self._replacements.setdefault(record.instance_id, []).extend(i.instance_id for i in launched)
        nodes_after = {n["metadata"]["name"]: bool((n.get("spec") or {}).get("unschedulable")) for n in self.emulator.list("Node")}
        cordoned = sorted(n for n, u in nodes_after.items() if u and not nodes_before.get(n, False))
        if cordoned:
            actions.append("cordoned " + ", ".join(cordoned))
        new = self.emulator.deletions[deletions_before:]
        self._record_deletions(name, new)
        evicted = Counter(d.via for d in new if d.kind == "Pod")
        if evicted.get("eviction"):
            actions.append(f"evicted {evicted['eviction']} pod{'s' if evicted['eviction'] != 1 else ''}")
        deleted_pods = sum(n for via, n in evicted.items() if via != "eviction")
        if deleted_pods:
            actions.append(f"deleted {deleted_pods} pod{'s' if deleted_pods != 1 else ''}")
        if gone:
            actions.append("terminated " + ", ".join(f"{i.instance_id} ({i.instance_type})" for i in gone))
        deleted_nodes = [d.name for d in new if d.kind == "Node"]
        if deleted_nodes:
            actions.append("deleted node " + ", ".join(deleted_nodes))
        if error:
            actions.append(f"failed: {error}")
        elif response and response.get("batchItemFailures"):
            actions.append(f"{len(response['batchItemFailures'])} message(s) left for redelivery")
        if actions:
            self._note(f"joiner/{name}", trigger, "; ".join(actions))
        for instance in gone:
            self._instance_gone(instance)
        self._settle(observe=False)
        return response

    def _record_deletions(self, function: str, deletions: list[Any]) -> None:
        now = self.clock.now()
        for deletion in deletions:
            if deletion.kind != "Pod":
                continue
            key = f"{deletion.namespace}/{deletion.name}"
            record = self.cluster.pods.get(key)
            node = record.node if record is not None else getattr(self, "_pinned", {}).get(key)
            self.result.pod_deletions.append(PodDeletion(now, key, node, deletion.via, deletion.grace_period_seconds, function))
            for rebalance in self.ec2.rebalances:
                if node is not None and rebalance.node == node and rebalance.drain_started is None:
                    rebalance.drain_started = now

    def _drain_queues(self) -> None:
        for _ in range(MAX_BATCHES_PER_INSTANT):
            delivered = False
            for queue_name, function in QUEUE_CONSUMERS.items():
                queue = self._queues.get(queue_name)
                if function not in self.handlers or queue is None:
                    continue
                messages = self.stack.sqs.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
                if not messages:
                    continue
                delivered = True
                self._deliver_messages(function, queue, messages)
            if not delivered:
                return

    def _deliver_messages(self, function: str, queue: LocalQueue, messages: list[dict[str, Any]]) -> None:
        """One Lambda invocation for the received ``messages`` (the fault-injection soak
        overrides this to duplicate, reorder and split batches)."""
        from testworld.lambdas import sqs_event

        response = self._invoke(function, sqs_event(messages, queue.arn, region=self.region), self._describe_batch(messages))
        self._acknowledge(queue, messages, response)

    def _acknowledge(self, queue: LocalQueue, batch: list[dict[str, Any]], response: dict[str, Any] | None) -> None:
        """Delete what the invocation acknowledged, as Lambda's SQS poller does; a crashed
        invocation (no response) acknowledges nothing."""
        failed = {item["itemIdentifier"] for item in (response or {}).get("batchItemFailures", [])} if response is not None else {m["MessageId"] for m in batch}
        for message in batch:
            if message["MessageId"] not in failed:
                self.stack.sqs.delete_message(QueueUrl=queue.url, ReceiptHandle=message["ReceiptHandle"])

    @staticmethod
    def _describe_batch(messages: list[dict[str, Any]]) -> str:
        import json

        described = []
        for message in messages:
            try:
                body = json.loads(message["Body"])
            except ValueError:
                described.append("unparseable message")
                continue
            if "detail-type" in body:
                detail = body.get("detail") or {}
                what = {
                    "EC2 Spot Instance Interruption Warning": "spot interruption warning",
                    "EC2 Instance State-change Notification": f"state change to {detail.get('state')}",
                }.get(body["detail-type"], body["detail-type"])
                described.append(f"{what} {detail.get('instance-id', '')}".strip())
            elif body.get("kind") == "termination":
                described.append(f"termination step {body.get('node')}")
            else:
                described.append(str(body.get("kind") or "message"))
        return "SQS: " + "; ".join(described)

    # ------------------------------------------------------------ measuring

    def _sample(self) -> None:
        from joiner.domain import labels as wk

        nodes: Counter[str] = Counter()
        cordoned: Counter[str] = Counter()
        capacity: Counter[str] = Counter()
        for node in self.emulator.list("Node"):
            labels = node["metadata"].get("labels") or {}
            instance_id = (node.get("spec") or {}).get("providerID", "").rsplit("/", 1)[-1]
            instance = self.ec2.instances.get(instance_id)
            if instance is not None and instance.managed:
                nodes[labels.get(wk.INSTANCE_TYPE, instance.instance_type)] += 1
                capacity[instance.capacity_type] += 1
                if (node.get("spec") or {}).get("unschedulable"):
                    cordoned[instance.node_pool] += 1
        launched = Counter(i.instance_type for i in self.ec2.instances.values() if i.managed)
        sample = Sample(
            self._elapsed(),
            dict(nodes),
            self.cluster.pending_pods(),
            round(self.ec2.cost_per_hour(), 4),
            dict(launched),
            sum(1 for p in self.cluster.pods.values() if p.lost),
            dict(cordoned),
            dict(capacity),
        )
        if self.result.samples and self.result.samples[-1].at == sample.at:
            self.result.samples[-1] = sample
        else:
            self.result.samples.append(sample)

    def _sample_at(self, at: timedelta | None) -> Sample:
        samples = self.result.samples
        if at is None:
            return samples[-1]
        chosen = samples[0]
        for sample in samples:
            if sample.at <= at:
                chosen = sample
        return chosen

    def _evaluate(self) -> list[CheckResult]:
        results = []
        pending = self.result.pending_seconds()
        for check in self.scenario.expect:
            missing = [h for h in check.requires if h not in self.handlers]
            if missing:
                results.append(CheckResult(check.describe(), None, "skipped: functions/" + ", ".join(f"{m}/handler.py" for m in missing) + " not present"))
                continue
            sample = self._sample_at(check.at)
            name, value = check.name, check.value
            if name in ("nodes", "launched"):
                got = {k: v for k, v in (sample.nodes if name == "nodes" else sample.launched).items() if v}
                want = {k: v for k, v in value.items() if v}
                results.append(CheckResult(check.describe(), got == want, f"got {_counts(got)}"))
            elif name == "nodeCount":
                got_count = sum(sample.nodes.values())
                results.append(CheckResult(check.describe(), got_count == value, f"got {got_count}"))
            elif name == "pendingPods":
                results.append(CheckResult(check.describe(), sample.pending == value, f"got {sample.pending}"))
            elif name == "podsLost":
                results.append(CheckResult(check.describe(), sample.lost == value, f"got {sample.lost}"))
            elif name == "pendingMax":
                got_seconds = max(pending, default=0.0)
                results.append(CheckResult(check.describe(), got_seconds <= value.total_seconds(), f"got {got_seconds:.0f}s"))
            elif name == "capacityErrors":
                until = self.start + check.at if check.at is not None else None
                got_count = sum(1 for f in self.result.capacity_failures if until is None or f.at <= until)
                results.append(CheckResult(check.describe(), got_count == value, f"got {got_count}"))
            elif name == "costPerHourAtMost":
                results.append(CheckResult(check.describe(), sample.cost <= value + 1e-9, f"got ${sample.cost:.4f}"))
            elif name == "rebalancesHandled":
                rebalances = self.ec2.rebalances
                ok = bool(rebalances) and all(r.handled for r in rebalances)
                detail = f"{sum(r.handled for r in rebalances)}/{len(rebalances)} handled as their NodePool asks"
                results.append(CheckResult(check.describe(), ok == value, detail))
            elif name in ("pendingP50", "pendingP99"):
                got_seconds = percentile(pending, 50 if name == "pendingP50" else 99)
                results.append(CheckResult(check.describe(), got_seconds <= value.total_seconds(), f"got {got_seconds:.0f}s"))
            elif name == "interruptionPendingMax":
                caused = self.result.interruption_pending() + [self.result.pending_caused_by(r.node, r.warned) for r in self.result.rebalances]
                got_seconds = max(caused, default=0.0)
                results.append(
                    CheckResult(
                        check.describe(), bool(caused) and got_seconds <= value.total_seconds(), f"got {got_seconds:.0f} pod-seconds (worst of {len(caused)})"
                    )
                )
            elif name == "deletionsDrained":
                deletions = self.result.deletions
                ok = bool(deletions) and all(d.handled for d in deletions)
                detail = f"{sum(d.handled for d in deletions)}/{len(deletions)} held, drained, terminated by Joiner and released"
                results.append(CheckResult(check.describe(), ok == value, detail))
            elif name == "interruptionsWithinDeadline":
                records = self.result.interruptions
                ok = bool(records) and all(r.within_deadline for r in records)
                detail = f"{sum(r.within_deadline for r in records)}/{len(records)} within deadline"
                results.append(CheckResult(check.describe(), ok == value, detail))
        return results


def _with_simulated_spot_prices(catalog: Any) -> Any:
    """The catalog with a spot offering next to every on-demand one, at :data:`SPOT_PRICE_FACTOR`."""
    prices = {
        (name, offering.zone): round(offering.price * SPOT_PRICE_FACTOR, 4)
        for name in catalog.names
        for offering in catalog.offerings(name)
        if offering.capacity_type == "on-demand"
    }
    return catalog.with_spot_prices(prices)


def _counts(counts: Mapping[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + "}" if counts else "{}"
