"""The fault-injection soak: seeded simulations of a small cluster, the five real handlers on
moto and the Kubernetes emulator (:mod:`testworld.simulator`), with faults injected around
every external call (:mod:`testworld.chaos`) and Joiner's safety invariants checked after
every simulated step.

A seed picks a scenario (pool limit, workloads, a PodDisruptionBudget or not, a spot
interruption and/or rebalance recommendation, a scale-up and a scale-down) and, unless told
which, one to three :data:`FAULT_KINDS`; each invocation then draws its faults from the seed:

``crash`` / ``crash-after-launch`` / ``crash-after-claim-write`` / ``crash-mid-drain``
    the execution environment dies after the n-th call (of any kind, ``CreateFleet``, claim
    item write, pod eviction or deletion); SQS keeps the batch until its visibility timeout.
``sqs-duplicate`` / ``sqs-reorder``
    a batch is delivered twice; a batch is shuffled, split, or one message held back.
``scanner-overlap``
    a scanner invocation pauses after its n-th call while a second execution environment's
    scanner runs a whole round (before or after the first one's lease expired).
``kube-429`` / ``kube-500`` / ``kube-timeout``
    the next 1-5 Kubernetes requests on a path answer 429 or 500/503 or drop the connection.
``ec2-capacity`` / ``ec2-throttle``
    ``CreateFleet`` overrides fail with ``InsufficientInstanceCapacity``; EC2 calls answer
    ``RequestLimitExceeded`` (beyond botocore's retries).

Invariants (:class:`Violation`\\ s, each naming the pod/claim/instance and the simulated time):

``double-launch``  no pod is promised by the claims of two instances in flight at once;
``limit``          no NodePool's running instances exceed its limits at any checked instant;
``stranded-pods``  no pod is on a node when EC2 reclaims it, if a live invocation had the
                   warning or the node's termination step before the deadline;
``untracked``      every instance launched more than :data:`TRACK_GRACE` before the end is
                   terminated or recorded by its claim as registered (adopted included);
``unowned``        no Joiner function terminates, cordons, drains or deletes the decoy: an
                   instance without Joiner tags whose Node carries Joiner's labels.

Development-only (moto, the emulator).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
import types
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from testworld.chaos import CRASH_KINDS, Armed, Gate, LambdaDeath, SimulatedCrash
from testworld.scenario import Scenario, parse_scenario
from testworld.simulator import Simulation
from testworld.stack import LocalQueue

__all__ = [
    "EXTREME_DURATIONS",
    "EXTREME_GRACE_SECONDS",
    "FAULT_KINDS",
    "INVARIANTS",
    "TRACK_GRACE",
    "SoakResult",
    "SoakSimulation",
    "Violation",
    "run_seed",
    "soak_scenario",
]

FAULT_KINDS: tuple[str, ...] = (
    *CRASH_KINDS,
    "sqs-duplicate",
    "sqs-reorder",
    "scanner-overlap",
    "kube-429",
    "kube-500",
    "kube-timeout",
    "ec2-capacity",
    "ec2-throttle",
)
INVARIANTS = ("double-launch", "limit", "stranded-pods", "untracked", "unowned")
#: Instances launched this long before the end must be registered or terminated by then
#: (boot, orphan settlement after 3 minutes, the next scanner tick).
TRACK_GRACE = timedelta(minutes=5)
DECOY_TAINT = "soak.joiner.dev/decoy"
#: The menu of extreme values a seed draws from (each one the API server admits): the web
#: workload's ``terminationGracePeriodSeconds`` (any int64 >= 0; past 292 years Joiner clamps
#: it) and the NodePool's ``expireAfter``, ``terminationGracePeriod`` and a scheduled budget's
#: ``duration`` (the CRD's pattern admits any count of hours, past Go's maximum too).
EXTREME_GRACE_SECONDS = (0, 30, 2**31 - 1, 100_000_000_000_000, 2**63 - 1)
EXTREME_DURATIONS = ("Never", "720h", "2562047h", "99999999999999h")
_KUBE_PATHS = ("/pods", "/nodes", "/eviction", "/nodepools", "/poddisruptionbudgets", "")
_SPOT_WARNING = "EC2 Spot Instance Interruption Warning"


@dataclass(frozen=True)
class Violation:
    """One broken invariant: which, when (simulated, since the start), about what, and why."""

    invariant: str
    at: timedelta
    subject: str
    detail: str

    def explain(self) -> str:
        seconds = int(self.at.total_seconds())
        return f"[{seconds // 60:02d}:{seconds % 60:02d}] {self.invariant}: {self.subject}: {self.detail}"


@dataclass
class SoakResult:
    """One seed's run."""

    seed: int
    kinds: tuple[str, ...]
    scenario: str
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    invocations: Counter[str] = field(default_factory=Counter)
    timeline: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    def reproduce(self) -> str:
        """The command that runs this seed again."""
        return f"python -m bench.soak --seed {self.seed} --faults {','.join(self.kinds) or 'none'} --verbose"


# ---------------------------------------------------------------- scenarios


def soak_scenario(rng: random.Random, cluster: str = "soak") -> Scenario:
    """A small scenario drawn from ``rng``: one spot NodePool with a CPU limit, one or two
    workloads (one behind a PodDisruptionBudget), a spot interruption and/or a rebalance
    recommendation (sometimes both for the same instance, sometimes warnings for two instances
    at once), a scale-up and a scale-down; instances boot in 40, 70 or 100 s."""
    limit = rng.choice([6, 8, 12, 16])
    boot = rng.choice([40, 70, 100])  # launch -> Node Ready: shorter or longer than a scanner period
    web = rng.randint(3, 10)
    web_cpu = rng.choice(["500m", "1"])
    pool: dict[str, Any] = {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodePool",
        "metadata": {"name": "spot"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "c5.xlarge", "c5.2xlarge"]},
                        {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["spot"]},
                    ],
                }
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s", "budgets": [{"nodes": "100%"}]},
            "limits": {"cpu": str(limit)},
        },
    }
    node_class = {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": cluster}}],
            "role": f"JoinerNodeRole-{cluster}",
        },
    }
    objects: list[dict[str, Any]] = [node_class, pool]
    workloads: list[dict[str, Any]] = [{"name": "web", "replicas": 0, "cpu": web_cpu, "memory": "256Mi"}]
    events: list[dict[str, Any]] = [{"at": "20s", "scale": {"workload": "web", "replicas": web}}]
    if rng.random() < 0.5:
        workloads.append({"name": "api", "replicas": 0, "cpu": "500m", "memory": "256Mi"})
        objects.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "api", "namespace": "default"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "api"}}},
            }
        )
        events.append({"at": "20s", "scale": {"workload": "api", "replicas": rng.randint(2, 4)}})
    # after the first launch (scanner tick at 60 s) has booted, even when a crash costs one tick
    warned = 60 + boot + rng.randint(70, 110)
    shape = rng.choice(["spot", "spot", "rebalance", "both", "burst"])
    if shape in ("spot", "both", "burst"):
        events.append({"at": f"{warned}s", "spotInterruption": {"nodePool": "spot"}})
    if shape == "burst":
        events.append({"at": f"{warned}s", "spotInterruption": {"nodePool": "spot", "index": 1}})
    if shape in ("rebalance", "both"):
        events.append({"at": f"{warned}s", "rebalanceRecommendation": {"nodePool": "spot"}})
    events.append({"at": f"{warned + rng.randint(40, 80)}s", "scale": {"workload": "web", "replicas": web + rng.randint(1, 6)}})
    events.append({"at": f"{warned + rng.randint(150, 200)}s", "scale": {"workload": "web", "replicas": rng.randint(0, 2)}})
    # Extremes the API server admits, from a generator of their own (seeded by ``rng``'s state,
    # which it leaves as it is): every other draw of a seed, its fault kinds included, is unchanged.
    extremes = random.Random(repr(rng.getstate()))
    grace = extremes.choice(EXTREME_GRACE_SECONDS) if extremes.random() < 0.5 else 30
    workloads[0]["terminationGracePeriodSeconds"] = grace
    template = pool["spec"]["template"]["spec"]
    template["expireAfter"] = extremes.choice(EXTREME_DURATIONS)
    long_grace = extremes.choice([None, *EXTREME_DURATIONS[1:]])
    if long_grace is not None:
        template["terminationGracePeriod"] = long_grace
    pool["spec"]["disruption"]["budgets"].append({"nodes": "100%", "schedule": "@daily", "duration": extremes.choice(EXTREME_DURATIONS[1:])})
    return parse_scenario(
        {
            "name": f"soak-{shape}-limit{limit}-boot{boot}s-grace{grace}",
            "cluster": cluster,
            "duration": "9m",
            "bootDelay": f"{boot}s",
            "objects": objects,
            "workloads": workloads,
            "events": events,
        }
    )


def pick_kinds(rng: random.Random, allowed: Sequence[str] = FAULT_KINDS) -> tuple[str, ...]:
    """One to three fault kinds of ``allowed``, in :data:`FAULT_KINDS` order."""
    chosen = set(rng.sample(list(allowed), min(len(allowed), rng.randint(1, 3))))
    return tuple(kind for kind in FAULT_KINDS if kind in chosen)


# ---------------------------------------------------------------- powertools on the simulated clock


@contextlib.contextmanager
def powertools_clock(now: Callable[[], datetime]) -> Iterator[None]:
    """powertools Idempotency reads ``datetime.datetime.now()`` for its record expiries and its
    in-progress expiry; in simulated time they must follow the simulated clock, or a crashed
    invocation's in-progress record would outlive the redelivery that must replace it."""
    import datetime as real

    from aws_lambda_powertools.utilities.idempotency import base
    from aws_lambda_powertools.utilities.idempotency.persistence import (
        base as persistence_base,
    )
    from aws_lambda_powertools.utilities.idempotency.persistence import (
        datarecord,
        dynamodb,
    )

    class SimulatedDatetime(real.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            current = now()
            return current.astimezone(tz) if tz is not None else current.astimezone().replace(tzinfo=None)

    shim = types.SimpleNamespace(**{name: getattr(real, name) for name in dir(real) if not name.startswith("__")})
    shim.datetime = SimulatedDatetime
    modules = (base, persistence_base, datarecord, dynamodb)
    saved = [getattr(module, "dt") for module in modules]  # noqa: B009 - each module's ``import datetime as dt``
    for module in modules:
        setattr(module, "dt", shim)  # noqa: B010
    try:
        yield
    finally:
        for module, original in zip(modules, saved, strict=True):
            setattr(module, "dt", original)  # noqa: B010


# ---------------------------------------------------------------- the simulation


class SoakSimulation(Simulation):
    """A :class:`Simulation` with the faults of ``kinds`` drawn from ``seed`` and the
    invariants of the module docstring checked after every step."""

    def __init__(
        self, scenario: Scenario, *, seed: int, kinds: Sequence[str], functions_dir: Path | None = None, verbose: bool = False, scanner_mode: str = "economy"
    ) -> None:
        super().__init__(
            scenario,
            functions_dir=functions_dir,
            verbose=verbose,
            start=datetime(2026, 1, 5, 9, 0, tzinfo=UTC) + timedelta(days=seed % 97),
            scanner_mode=scanner_mode,
        )
        unknown = sorted(set(kinds) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"unknown fault kind {unknown[0]!r} (one of {', '.join(FAULT_KINDS)})")
        self.seed = seed
        self.kinds = frozenset(kinds)
        self.rng = random.Random(seed * 7919 + 17)
        self.faults: Counter[str] = Counter()
        self.violations: list[Violation] = []
        self.gates: dict[str, Gate] = {}
        self._reported: set[tuple[str, ...]] = set()
        self._claim_of: dict[str, str] = {}  # instance -> claim id (its joiner.dev/nodeclaim tag)
        self._drain_chance: set[str] = set()  # instances whose warning or termination step reached a live invocation
        self._crashed = False
        self._overlap_module: ModuleType | None = None
        self._runtime_inputs: tuple[Any, Callable[..., None]] | None = None
        self.decoy: str | None = None
        self.decoy_node: str | None = None

    # ------------------------------------------------------------ reporting

    def _violate(self, invariant: str, key: tuple[str, ...], subject: str, detail: str) -> None:
        if (invariant, *key) in self._reported:
            return
        self._reported.add((invariant, *key))
        violation = Violation(invariant, self._elapsed(), subject, detail)
        self.violations.append(violation)
        self._note("soak", f"VIOLATION {invariant}", f"{subject}: {detail}")

    # ------------------------------------------------------------ setup

    def _setup(self) -> None:
        with _cached_moto_amis():
            super()._setup()
        self._exit.enter_context(powertools_clock(self.clock.now))
        self._create_decoy()
        if "scanner-overlap" in self.kinds and "scanner" in self.handlers and self._runtime_inputs is not None:
            from testworld.lambdas import handler_path

            self._overlap_module = _load_copy(handler_path("scanner", self.functions_dir), "joiner_function_scanner_soak_overlap")
            settings, metric = self._runtime_inputs
            self._overlap_module.configure(self._build_runtime("scanner-overlap", settings, metric))

    def _build_runtime(self, name: str, settings: Any, metric: Callable[..., None]) -> Any:
        import boto3

        from joiner.adapters.aws import AwsClients
        from joiner.adapters.kubernetes import KubernetesClient
        from joiner.services.context import build_runtime

        self._runtime_inputs = (settings, metric)
        gate = Gate(name, on_capacity_failure=self._capacity_failure)
        session = boto3.Session(region_name=settings.region)
        gate.install_aws(session)
        kube = KubernetesClient.from_settings(settings, clock=self.clock, sleep=self.clock.sleep)
        gate.install_kubernetes(kube._pool)
        self.gates[name] = gate
        return build_runtime(
            settings,
            clock=self.clock,
            sleep=self.clock.sleep,
            metric=metric,
            catalog_value=self.catalog,
            kube_port=kube,
            _aws=AwsClients(settings.region, settings.aws_endpoint_url, session=session),
        )

    def _create_decoy(self) -> None:
        """An instance Joiner does not own (no Joiner tags) whose Node claims to be Joiner's
        (``joiner.dev/nodepool`` and ``joiner.dev/initialized`` labels, as a kubelet may set
        on itself), tainted so it stays empty."""
        from joiner.domain import labels as wk
        from joiner.domain.model import KubeletConfig, Taint
        from testworld.cluster import BootSpec

        assert self.stack.network is not None
        _, subnet = min(self.stack.network.subnets.items())
        answer = self.stack.ec2.run_instances(
            ImageId=self.stack.amis["x86_64"],
            InstanceType="m5.large",
            MinCount=1,
            MaxCount=1,
            SubnetId=subnet,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": f"kubernetes.io/cluster/{self.scenario.cluster}", "Value": "owned"}, {"Key": "Name", "Value": "someone-elses"}],
                }
            ],
        )
        self.decoy = answer["Instances"][0]["InstanceId"]
        self.ec2.observe(actor="ec2")
        instance = self.ec2.instances[self.decoy]
        boot = BootSpec(labels={wk.NODEPOOL: "spot", wk.INITIALIZED: "true"}, taints=(Taint(DECOY_TAINT, "", "NoSchedule"),), kubelet=KubeletConfig())
        node = self.cluster.register_node(self.decoy, instance.private_dns, instance.instance_type, instance.zone, boot)
        self.decoy_node = node["metadata"]["name"]

    # ------------------------------------------------------------ faults per invocation

    def _draw(self, name: str) -> tuple[Armed, list[tuple[str, str, int]], bool]:
        """This invocation's faults: the gate's plan, Kubernetes faults (kind, path, times) and
        whether a second scanner overlaps it."""
        rng, kinds = self.rng, self.kinds
        crash: tuple[str, int] | None = None
        options = []
        if "crash" in kinds and rng.random() < 0.25:
            options.append(("crash", rng.randint(1, 30)))
        if "crash-after-launch" in kinds and name in ("scanner", "interruption") and rng.random() < 0.6:
            options.append(("crash-after-launch", rng.randint(1, 2)))
        if "crash-after-claim-write" in kinds and rng.random() < 0.5:
            options.append(("crash-after-claim-write", rng.randint(1, 4)))
        if "crash-mid-drain" in kinds and name in ("interruption", "termination", "disruption") and rng.random() < 0.6:
            options.append(("crash-mid-drain", rng.randint(1, 3)))
        if options:
            crash = options[rng.randrange(len(options))]
        throttle: frozenset[int] = frozenset()
        if "ec2-throttle" in kinds and rng.random() < 0.4:
            throttle = frozenset(rng.sample(range(1, 9), rng.randint(1, 2)))
        capacity = None
        if "ec2-capacity" in kinds and name in ("scanner", "interruption") and rng.random() < 0.7:
            capacity = _random_offerings(random.Random(rng.random()), rng.choice([0.3, 0.6, 1.0]))
        kube: list[tuple[str, str, int]] = []
        for kind in ("kube-429", "kube-500", "kube-timeout"):
            if kind in kinds and rng.random() < 0.4:
                kube.append((kind, rng.choice(_KUBE_PATHS), rng.randint(1, 5)))
        overlap = "scanner-overlap" in kinds and name == "scanner" and self._overlap_module is not None and rng.random() < 0.5
        pause = rng.randint(1, 20) if overlap else None
        if "kube-500" in kinds and name in ("interruption", "termination") and rng.random() < 0.5:
            # every eviction answers 500 beyond the client's attempts, as for a pod two PodDisruptionBudgets select
            kube.append(("kube-500", "/eviction", rng.randint(4, 8)))
        return Armed(crash=crash, pause_after=pause, throttle_ec2=throttle, capacity=capacity), kube, overlap

    def _call_handler(self, name: str, module: ModuleType, event: dict[str, Any], context: Any) -> dict[str, Any] | None:
        from testworld.kube_emulator import KubeEmulator

        emulator = self.emulator
        assert isinstance(emulator, KubeEmulator), "the fault-injection soak runs on the API emulator"
        gate = self.gates[name]
        armed, kube, overlap = self._draw(name)
        injected = []
        for kind, path, times in kube:
            if kind == "kube-timeout":
                injected.append((kind, emulator.disconnect_next(None, path, times=times)))
            else:
                status = 429 if kind == "kube-429" else self.rng.choice([500, 503])
                injected.append((kind, emulator.fail_next(None, path, status=status, times=times, retry_after=1 if status == 429 else None)))
        failures_before = len(gate.capacity.failures)
        gate.arm(armed)
        self._crashed = False
        try:
            if overlap:
                response = self._overlapped(module, event, context, gate)
            else:
                response = super()._call_handler(name, module, event, context)
            if gate.dead:
                raise LambdaDeath(f"{name}: died after {gate.died_after}")
            return response
        except LambdaDeath as death:
            self._crashed = True
            kind = armed.crash[0] if armed.crash else "crash"
            self.faults[kind] += 1
            raise SimulatedCrash(str(death)) from None
        finally:
            gate.disarm()
            emulator.clear_faults()
            for kind, fault in injected:
                if fault.hits:
                    self.faults[kind] += 1
            if gate.throttled:
                self.faults["ec2-throttle"] += 1
            if len(gate.capacity.failures) > failures_before:
                self.faults["ec2-capacity"] += 1

    def _overlapped(self, module: ModuleType, event: dict[str, Any], context: Any, gate: Gate) -> dict[str, Any] | None:
        """Run the scanner in a thread until its armed pause, let a second execution
        environment's scanner run a round meanwhile (after a gap that may outlast the first
        one's lease), then let the first one finish."""
        from joiner.services.provisioning import LEASE_TTL_SECONDS
        from testworld.lambdas import LambdaContext, scheduled_event

        box: dict[str, Any] = {}

        def first() -> None:
            try:
                box["response"] = Simulation._call_handler(self, "scanner", module, event, context)
            except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = error

        thread = threading.Thread(target=first, name="soak-scanner-first", daemon=True)
        thread.start()
        while thread.is_alive() and not gate.paused.wait(0.005):
            pass
        if gate.paused.is_set() and thread.is_alive():
            gap = self.rng.choice([5, LEASE_TTL_SECONDS + 5, 2 * LEASE_TTL_SECONDS])
            self.clock.advance(gap)
            self._settle()
            second = self.gates["scanner-overlap"]
            second.arm(Armed())
            assert self._overlap_module is not None
            self.result.invocations["scanner"] += 1
            self.faults["scanner-overlap"] += 1
            try:
                ctx = LambdaContext(aws_request_id=str(uuid.uuid4()), function_name=f"{self.scenario.cluster}-scanner")
                Simulation._call_handler(self, "scanner", self._overlap_module, scheduled_event("overlap", self.clock.now()), ctx)
            except Exception as error:  # noqa: BLE001 - reported as Lambda would
                self.result.handler_errors.append(f"scanner (overlapping): {type(error).__name__}: {error}")
            finally:
                second.disarm()
                gate.release()
        thread.join(timeout=300)
        if "error" in box:
            raise box["error"]
        response: dict[str, Any] | None = box.get("response")
        return response

    # ------------------------------------------------------------ SQS: duplicates, reordering, redelivery

    def _deliver_messages(self, function: str, queue: LocalQueue, messages: list[dict[str, Any]]) -> None:
        from testworld.lambdas import sqs_event

        sqs = self.stack.sqs
        batches = [messages]
        if "sqs-reorder" in self.kinds and self.rng.random() < 0.5:
            shuffled = list(messages)
            self.rng.shuffle(shuffled)
            if len(shuffled) > 1 and self.rng.random() < 0.5:
                held = shuffled.pop()
                sqs.change_message_visibility(QueueUrl=queue.url, ReceiptHandle=held["ReceiptHandle"], VisibilityTimeout=self.rng.randint(5, 90))
            cut = self.rng.randint(1, len(shuffled)) if shuffled else 0
            batches = [b for b in (shuffled[:cut], shuffled[cut:]) if b]
            self.faults["sqs-reorder"] += 1
        for batch in batches:
            response = self._deliver(function, sqs_event(batch, queue.arn, region=self.region), batch)
            if "sqs-duplicate" in self.kinds and self.rng.random() < 0.3:
                self.faults["sqs-duplicate"] += 1
                self._deliver(function, sqs_event(batch, queue.arn, region=self.region), batch, duplicate=True)
            self._acknowledge(queue, batch, response)

    def _deliver(self, function: str, event: dict[str, Any], batch: list[dict[str, Any]], *, duplicate: bool = False) -> dict[str, Any] | None:
        trigger = ("duplicate delivery, " if duplicate else "") + self._describe_batch(batch)
        response = self._invoke(function, event, trigger)
        if not self._crashed:
            nodes = {node: instance for instance, node in self.cluster.registered.items()}
            for message in batch:
                try:
                    body = json.loads(message["Body"])
                except ValueError:
                    continue
                if not isinstance(body, dict):
                    continue
                if body.get("detail-type") == _SPOT_WARNING:
                    self._drain_chance.add(str((body.get("detail") or {}).get("instance-id")))
                elif body.get("kind") == "termination" and body.get("node") in nodes:
                    self._drain_chance.add(nodes[body["node"]])
        return response

    # ------------------------------------------------------------ invariants

    def _invoke(self, name: str, event: dict[str, Any], trigger: str) -> dict[str, Any] | None:
        response = super()._invoke(name, event, trigger)
        self._check_unowned(name)
        self._check_step()
        return response

    def _instant(self) -> None:
        super()._instant()
        self._check_step()

    def _loop(self) -> None:
        super()._loop()
        self._check_end()

    def _instance_gone(self, instance: Any) -> None:
        node = self.cluster.registered.get(instance.instance_id)
        reclaimed = instance.terminated_by == "ec2" and any(r.instance_id == instance.instance_id for r in self.ec2.interruptions)
        if reclaimed and node is not None and self.emulator.get("Node", node) is not None:
            left = sorted(self.cluster.pods_on(node))
            if left and instance.instance_id in self._drain_chance:
                self._violate(
                    "stranded-pods",
                    (instance.instance_id,),
                    f"instance {instance.instance_id} (node {node})",
                    f"{len(left)} pod(s) still on it when EC2 reclaimed it: {', '.join(left[:6])}; "
                    "the warning or a termination step reached a live invocation before the deadline",
                )
        super()._instance_gone(instance)

    def _check_unowned(self, function: str) -> None:
        if self.decoy is None or self.decoy_node is None:
            return
        decoy = self.ec2.instances.get(self.decoy)
        subject = f"instance {self.decoy} (node {self.decoy_node}, no Joiner tags)"
        if decoy is not None and decoy.terminated is not None and decoy.terminated_by == "joiner":
            self._violate("unowned", ("terminated",), subject, f"terminated by {function}")
        node = self.emulator.get("Node", self.decoy_node)
        if node is None:
            self._violate("unowned", ("deleted",), subject, f"its Node was deleted (after {function})")
        elif (node.get("spec") or {}).get("unschedulable"):
            self._violate("unowned", ("cordoned",), subject, f"cordoned by {function}")
        elif any(
            t.get("key") != DECOY_TAINT and t.get("key", "").startswith(("joiner.dev/", "karpenter.sh/")) for t in (node.get("spec") or {}).get("taints") or []
        ):
            self._violate("unowned", ("tainted",), subject, f"tainted by {function}")

    def _claims(self) -> dict[str, dict[str, Any]]:
        from boto3.dynamodb.types import TypeDeserializer

        deserialize = TypeDeserializer().deserialize
        items = []
        for page in self.stack.dynamodb.get_paginator("scan").paginate(
            TableName=self.stack.state_table, FilterExpression="sk = :c", ExpressionAttributeValues={":c": {"S": "CLAIM"}}
        ):
            items += page["Items"]
        claims = {}
        for item in items:
            record = {key: deserialize(value) for key, value in item.items()}
            claims[str(record.get("claimId") or record["pk"].split("#", 1)[-1])] = record
        return claims

    def _claim_ids(self, instance_ids: list[str]) -> dict[str, str]:
        from joiner.domain import labels as wk

        unknown = [i for i in instance_ids if i not in self._claim_of]
        if unknown:
            pages = self.stack.ec2.get_paginator("describe_instances").paginate(InstanceIds=unknown)
            for page in pages:
                for reservation in page["Reservations"]:
                    for raw in reservation["Instances"]:
                        tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
                        self._claim_of[raw["InstanceId"]] = tags.get(wk.NODECLAIM, "")
        return {i: self._claim_of.get(i, "") for i in instance_ids}

    def _check_step(self) -> None:
        """After every instant and every invocation: double launches and limits."""
        running = [i for i in self.ec2.running() if i.managed]
        if not running:
            return
        self._check_limits(running)
        in_flight = [i for i in running if i.instance_id not in self.cluster.registered]
        if len(in_flight) < 2:
            return
        claims = self._claims()
        claim_ids = self._claim_ids([i.instance_id for i in in_flight])
        promised: dict[str, list[str]] = {}
        for instance in in_flight:
            claim = claims.get(claim_ids[instance.instance_id]) or {}
            for pod in claim.get("pods") or ():
                promised.setdefault(str(pod), []).append(instance.instance_id)
        for pod, holders in sorted(promised.items()):
            if len(holders) > 1:
                described = ", ".join(
                    f"{h} ({self.ec2.instances[h].instance_type}, claim {claim_ids[h]} {(claims.get(claim_ids[h]) or {}).get('state', '?')})"
                    for h in sorted(holders)
                )
                self._violate("double-launch", (pod, *sorted(holders)), f"pod {pod}", f"promised to {len(holders)} instances in flight: {described}")

    def _check_limits(self, running: list[Any]) -> None:
        from joiner.domain.resources import Resources

        by_pool: dict[str, list[Any]] = {}
        for instance in running:
            by_pool.setdefault(instance.node_pool, []).append(instance)
        for pool, instances in sorted(by_pool.items()):
            obj = self.emulator.get("NodePool", pool)
            limits_raw = ((obj or {}).get("spec") or {}).get("limits")
            if not limits_raw:
                continue
            limits = Resources.parse(limits_raw)
            used: Counter[str] = Counter()
            for instance in instances:
                info = self.catalog.instance_type(instance.instance_type)
                for resource, amount in (info.capacity if info is not None else {}).items():
                    used[resource] += amount
            for resource, limit in sorted(limits.items()):
                if used[resource] > limit:
                    warned = {r.instance_id for r in self.ec2.interruptions}
                    members = ", ".join(
                        f"{i.instance_id} {i.instance_type}" + (" (spot warning)" if i.instance_id in warned else "")
                        for i in sorted(instances, key=lambda i: (i.launched, i.instance_id))
                    )
                    self._violate(
                        "limit",
                        (pool, resource),
                        f"NodePool {pool}",
                        f"{resource} {used[resource] / 1000:g} > limit {limit / 1000:g} across {len(instances)} running instances: {members}",
                    )

    def _check_end(self) -> None:
        """Every instance launched more than :data:`TRACK_GRACE` ago is terminated or recorded
        by its claim as registered."""
        cutoff = self.clock.now() - TRACK_GRACE
        old = [i for i in self.ec2.running() if i.managed and i.launched <= cutoff]
        if not old:
            return
        claims = self._claims()
        claim_ids = self._claim_ids([i.instance_id for i in old])
        for instance in old:
            claim = claims.get(claim_ids[instance.instance_id])
            state = (claim or {}).get("state")
            tracked = claim is not None and claim.get("instanceId") == instance.instance_id and state in ("registered", "initialized", "terminating")
            if not tracked:
                what = "no claim record" if claim is None else f"claim {claim_ids[instance.instance_id]} is {state!r} for instance {claim.get('instanceId')!r}"
                node = self.cluster.registered.get(instance.instance_id)
                self._violate(
                    "untracked",
                    (instance.instance_id,),
                    f"instance {instance.instance_id} ({instance.instance_type})",
                    f"running since {_fmt(instance.launched - self.start)}" + (f" as node {node}" if node else " without a Node") + f", yet {what}",
                )


def _fmt(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def _random_offerings(rng: random.Random, share: float) -> Callable[[str, str, str], bool]:
    """A stable random choice of failing offerings (each fails with probability ``share``)."""
    decided: dict[tuple[str, str, str], bool] = {}
    lock = threading.Lock()

    def failing(instance_type: str, zone: str, capacity_type: str) -> bool:
        with lock:
            key = (instance_type, zone, capacity_type)
            if key not in decided:
                decided[key] = rng.random() < share
            return decided[key]

    return failing


_AMIS: dict[str, str] = {}


@contextlib.contextmanager
def _cached_moto_amis() -> Iterator[None]:
    """moto's bundled AMIs are the same on every fresh server: look them up once per process
    (the lookup is the slowest part of building the stack)."""
    from testworld import stack

    original = getattr(stack, "moto_amis")  # noqa: B009 - the name stack.py calls, not a public export

    def cached(ec2: Any) -> dict[str, str]:
        if not _AMIS:
            _AMIS.update(original(ec2))
        return dict(_AMIS)

    setattr(stack, "moto_amis", cached)  # noqa: B010
    try:
        yield
    finally:
        setattr(stack, "moto_amis", original)  # noqa: B010


def _load_copy(path: Path, module_name: str) -> ModuleType:
    """A second copy of a handler module: another execution environment of the same function."""
    import importlib.util
    import sys

    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no Lambda handler at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def run_seed(seed: int, kinds: Sequence[str] | None = None, *, functions_dir: Path | None = None, verbose: bool = False) -> SoakResult:
    """Run one seed: its scenario, its fault kinds (``kinds``, or drawn from the seed)."""
    rng = random.Random(seed)
    scenario = soak_scenario(rng)
    chosen = tuple(kinds) if kinds is not None else pick_kinds(rng)
    wall = time.monotonic()
    # Odd seeds run responsive mode (the watcher's wake-ups between the scanner's ticks), even
    # seeds economy: drawn from the seed's parity, so the seed's own random draws are unchanged.
    mode = "responsive" if seed % 2 else "economy"
    simulation = SoakSimulation(scenario, seed=seed, kinds=chosen, functions_dir=functions_dir, verbose=verbose, scanner_mode=mode)
    result = simulation.run()
    return SoakResult(
        seed=seed,
        kinds=chosen,
        scenario=scenario.name,
        faults=simulation.faults,
        violations=list(simulation.violations),
        invocations=Counter(result.invocations),
        timeline=[f"{_fmt(e.at)} {e.source}: {e.event} -> {e.action}" for e in result.entries],
        wall_seconds=time.monotonic() - wall,
    )
