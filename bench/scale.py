"""``python -m bench.scale``: memory, time and API reads of every function's real handler path on
large clusters.

A stand-in API server (:mod:`bench.kube_standin`, its own process) serves the cluster of
:mod:`bench.scale_world` (30 pods a node of about 7 KB, nodes of about 12 KB, ``nodes / 5``
pending pods, DaemonSets, the NodePool/NodeClass, a NodeClaim mirror per claim) and counts
requests and bytes. AWS is the in-memory fakes of :mod:`tests.support.fakes`: an instance per
node tagged as Joiner launched it and a claim recording it, so ownership checks pass.

Per size and function, the function's handler runs once in a process of its own (as Lambda
would: the handler module loaded from ``functions/<name>/handler.py``, configured with a runtime
whose Kubernetes client is built from the settings against the stand-in, invoked with an event
of the right shape):

* ``scanner``, ``disruption``, ``gc``: an EventBridge scheduled tick (the scanner deployed in
  ``economy``: one round, as the stack configures it in both modes);
* ``interruption``: an SQS batch holding one EC2 spot interruption warning for a managed node;
* ``termination``: the continuation of a termination requested for a managed node (its first
  drain step: cordon, read the node's pods, evict);
* ``watcher``: one watch window (``--window`` seconds instead of 55: the bytes are the first
  list plus the events, not a function of the window's length);
* ``nodeclaim_sync``: :func:`joiner.services.nodeclaims.sync_node_claims` (run after scanner
  rounds, disruption passes and gc; it has no handler of its own) on a cluster whose NodeClaim
  mirrors are all missing (the CRD installed on a running cluster), called again until it
  leaves nothing for the next sync, as deployed: each minute the scanner's short sync and the
  disruption pass's catch-up sync (concurrent there, one after the other here). The line adds
  ``syncs``, ``sync_wall_s`` (each), ``created`` and ``converged_s``: the minute of the last
  sync (from 0) times 60 plus that sync's wall, i.e. when the last mirror is written counted
  from the first minute's tick. ``wall_s`` is all syncs together.

One JSON line per function and size: ``{"bench": "scale", "function", "nodes", "pods", "pending",
"peak_rss_mb" (the process's VmHWM), "baseline_rss_mb" (after imports and the fakes, before the
handler), "wall_s" (the handler call), "cpu_s" (the measured process's CPU time in that call: the
wall on an idle machine is about this plus the API server's time), "memory_limit_mb", "timeout_s" (infra/deployment.py),
"api_requests", "api_read_mb" (response bytes the stand-in sent), "full_pod_lists", ...}``; a
function that fails (exception, MemoryError, killed, timed out) has an ``"error"``; the
disruption line adds ``consolidation_candidates`` and ``candidates_considered`` (judged this pass). Beside the
machine's wall time, ``lambda_wall_s`` is the call as Lambda would run it: its CPU seconds scaled
to the vCPU share Lambda gives the function's memory (``lambda_vcpu``: 1 vCPU per
:data:`LAMBDA_MB_PER_VCPU` MB, a single-threaded handler using at most one) plus the time it
waited (wall minus CPU), and ``targets`` says whether the call stays within half its memory and
a third of its timeout.

Then per size and mode one ``steady`` line: ten simulated minutes (``--minutes``) in one
process (warm runtimes, as Lambda keeps them), each minute some churn through the stand-in
(pods created and deleted, a few pending pods added and bound, status updates), then what runs
in that minute by infra/schedules.py: ``responsive``: a watcher window and a scanner round per
wake-up, the scanner's tick, the disruption pass, gc every 5 minutes; ``economy``: the same
without the watcher. A first minute starts the functions' containers (their first full lists)
and is counted apart (``cold_start_read_mb``); the measured minutes follow. Reported:
``warm_read_mb_per_minute`` (what the measured minutes read), ``api_read_mb_per_minute`` (that
plus the periodic resync: each container lists again every ``resync_minutes``, so the cold
minute's extra reads spread over that interval), ``full_pod_lists`` (unfiltered cluster-wide pod
lists in the measured minutes).

``--quick``: 100 nodes, two simulated minutes, short windows (the smoke test).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES = (500, 2_000, 5_000)
FUNCTIONS = ("scanner", "disruption", "interruption", "termination", "gc", "watcher", "nodeclaim_sync")
#: the function whose Lambda configuration applies to a measured path without its own function
CONFIG_OF = {"nodeclaim_sync": "gc"}
MODES = ("responsive", "economy")
MARKER = "@@bench.scale@@"
TOKEN = "bench-token"
MB = 1024 * 1024
#: Lambda allocates CPU in proportion to memory: one full vCPU at 1,769 MB.
LAMBDA_MB_PER_VCPU = 1769
#: The share of a function's memory and timeout a measured call may use (the scale targets).
MEMORY_TARGET_SHARE = 0.5
TIMEOUT_TARGET_SHARE = 1 / 3


def lambda_vcpu(memory_mb: int) -> float:
    """The vCPU share a single-threaded handler gets at ``memory_mb`` (at most 1)."""
    return min(1.0, memory_mb / LAMBDA_MB_PER_VCPU)


def lambda_wall_s(cpu_s: float, wall_s: float, memory_mb: int) -> float:
    """``wall_s`` as Lambda would take it at ``memory_mb``: the CPU seconds stretched to its vCPU
    share, the waiting (wall minus CPU) as it was."""
    return round(max(0.0, wall_s - cpu_s) + cpu_s / lambda_vcpu(memory_mb), 3)


def targets(peak_rss_mb: float | None, lambda_wall: float | None, memory_mb: int, timeout_s: int) -> dict[str, Any]:
    """Whether a call stays within half its memory and a third of its timeout (None: not measured)."""
    memory_ok = None if peak_rss_mb is None else peak_rss_mb <= memory_mb * MEMORY_TARGET_SHARE
    time_ok = None if lambda_wall is None else lambda_wall <= timeout_s * TIMEOUT_TARGET_SHARE
    return {
        "memory_mb_max": round(memory_mb * MEMORY_TARGET_SHARE, 1),
        "lambda_wall_s_max": round(timeout_s * TIMEOUT_TARGET_SHARE, 1),
        "memory": memory_ok,
        "time": time_ok,
        "met": bool(memory_ok and time_ok),
    }


# ---------------------------------------------------------------- the deployed configuration


def function_limits() -> dict[str, tuple[int, int]]:
    """name -> (memory MB, timeout s), the deployed FUNCTION_SPECS (infra/deployment.py, which
    imports no CDK)."""
    from infra.deployment import FUNCTION_SPECS

    return {spec.name: (spec.memory_mb, spec.timeout_seconds) for spec in FUNCTION_SPECS}


def schedule_minutes() -> dict[str, int]:
    """infra/schedules.py's SCHEDULE_MINUTES (parsed, for the same reason)."""
    tree = ast.parse((ROOT / "infra" / "schedules.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "SCHEDULE_MINUTES" and node.value is not None:
            return {str(k): int(v) for k, v in ast.literal_eval(node.value).items()}
    raise RuntimeError("no SCHEDULE_MINUTES in infra/schedules.py")


# ---------------------------------------------------------------- in the measured process


def _rss_mb(key: str = "VmHWM") -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(key + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class OffsetClock:
    """Real time from :data:`bench.scale_world.NOW`, plus the jumps of simulated minutes."""

    def __init__(self, start: Any) -> None:
        self.start, self.origin, self.jumped = start, time.monotonic(), 0.0

    def now(self) -> Any:
        from datetime import timedelta

        return self.start + timedelta(seconds=time.monotonic() - self.origin + self.jumped)

    def jump(self, seconds: float) -> None:
        self.jumped += max(0.0, seconds)


class _Aws:
    """The runtime's AWS clients where a handler asks for boto3 ones: Lambda (the watcher wakes
    the scanner), DynamoDB (powertools idempotency), SQS (visibility changes)."""

    class _Exceptions:
        ConditionalCheckFailedException = type("ConditionalCheckFailedException", (Exception,), {})

    def __init__(self) -> None:
        self.wakes: list[dict[str, Any]] = []
        self.exceptions = self._Exceptions

    def client(self, service: str) -> Any:
        return self

    def invoke(self, **call: Any) -> dict[str, Any]:
        self.wakes.append(call)
        return {"StatusCode": 202}

    def put_item(self, **_: Any) -> dict[str, Any]:
        return {}

    update_item = get_item = delete_item = change_message_visibility = change_message_visibility_batch = put_item


class LambdaContext:
    def __init__(self, function: str, memory_mb: int, timeout_s: int) -> None:
        import uuid

        self.aws_request_id = str(uuid.uuid4())
        self.function_name = f"joiner-{function}"
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:joiner-{function}"
        self.log_group_name = f"/aws/lambda/joiner-{function}"
        self.log_stream_name = "bench"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _load_handler(name: str) -> Any:
    import importlib.util

    module_name = f"joiner_function_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "functions" / name / "handler.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


class Cluster:
    """The AWS side of the measured process: fakes holding an instance and a claim per node."""

    def __init__(self, nodes: int, seed: int, url: str, window: float, state_dir: str = "") -> None:
        from bench.scale_world import CLUSTER, CREATED, NODE_TYPE, NOW, POOL, WorldSpec
        from joiner.domain import labels as wk
        from joiner.domain.launch import CLUSTER_TAG
        from joiner.ports import InstanceRecord
        from joiner.settings import Settings
        from tests.support.fakes import FakeEc2, FakePricing, FakeQueue, FakeState

        self.spec = WorldSpec(nodes, seed)
        self.clock = OffsetClock(NOW)
        self.ec2 = FakeEc2(CLUSTER, clock=self.clock)  # type: ignore[arg-type]
        for index in range(nodes):
            instance = self.spec.instance_id(index)
            self.ec2.instances[instance] = InstanceRecord(
                instance,
                NODE_TYPE,
                self.spec.zone(index),
                "running",
                CREATED,
                {CLUSTER_TAG: CLUSTER, wk.NODEPOOL: POOL, wk.NODECLAIM: self.spec.claim_id(index), wk.MANAGED_BY_TAG: CLUSTER},
                capacity_type=self.spec.capacity_type(index),
            )
        self.state = FakeState()
        for claim in self.spec.claims():
            self.state.put_claim(claim)
        self._publish_unreserved()
        self.queue = FakeQueue()
        self.pricing = FakePricing()
        self.aws = _Aws()
        self.settings = Settings(
            cluster_name=CLUSTER,
            region="us-east-1",
            state_table="joiner-state",
            idempotency_table="joiner-idempotency",
            kubernetes_host=url,
            kubernetes_token=TOKEN,
            scanner_mode="economy",
            scan_window_seconds=window,
            scanner_function="joiner-scanner",
            state_dir=state_dir,
        )
        #: (name, value) of every metric the functions emitted
        self.metrics: list[tuple[str, float]] = []
        from joiner.domain.catalog import load_bundled_catalog

        self.catalog = load_bundled_catalog()

    def _publish_unreserved(self) -> None:
        """What the scanner's last round left in the state: the limited NodePool's usage by Nodes
        no reservation covers (the claims here reserve nothing, so every Node)."""
        import json as _json

        from bench.scale_world import NODE_TEMPLATE, POOL
        from joiner.domain.snapshot import parse_node
        from joiner.services.planning_round import UNRESERVED_KIND, unreserved_usage

        node = parse_node(_json.loads(NODE_TEMPLATE.fill(self.spec.node_values(0, 1))))
        usage = unreserved_usage([node], [], {POOL: {}})[POOL]
        total = {name: value * self.spec.nodes for name, value in usage.items()}
        self.state.put_item(UNRESERVED_KIND, POOL, {"pool": POOL, "unreserved": total})

    def runtime(self) -> Any:
        """A function's own runtime (its Kubernetes client built from the settings) on the shared fakes."""
        from joiner.services.context import build_runtime

        return build_runtime(
            self.settings,
            ec2_port=self.ec2,
            state_port=self.state,
            queue_port=self.queue,
            pricing_port=self.pricing,
            catalog_value=self.catalog,
            clock=self.clock,
            sleep=time.sleep,
            metric=lambda name, value=1, *a, **k: self.metrics.append((name, value)),
            _aws=self.aws,
        )


def _scheduled(clock: OffsetClock, rule: str) -> dict[str, Any]:
    import uuid

    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": clock.now().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": [f"arn:aws:events:us-east-1:123456789012:rule/{rule}"],
        "detail": {},
    }


def _sqs(bodies: list[dict[str, Any]], queue: str) -> dict[str, Any]:
    import uuid

    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": f"handle-{index}",
                "body": json.dumps(body),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "0"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue}",
                "awsRegion": "us-east-1",
            }
            for index, body in enumerate(bodies)
        ]
    }


def _admin(url: str, path: str, body: Any = None) -> Any:
    import urllib.request

    request = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def _settle_disruption(url: str) -> None:
    """The steady state's NodePool allows no disruption (budget ``nodes: "0"``): a cluster at
    rest, where the disruption pass still reads and decides every minute but has nothing it may
    act on. (The generated world has slack: with its 10% budget the pass would consolidate
    hundreds of nodes a minute, and the traffic of the pods it moves is not the steady state's.)"""
    import urllib.request

    patch = {"spec": {"disruption": {"budgets": [{"nodes": "0"}]}}}
    from bench.scale_world import POOL

    request = urllib.request.Request(
        f"{url}/apis/joiner.dev/v1/nodepools/{POOL}",
        data=json.dumps(patch).encode(),
        method="PATCH",
        headers={"Content-Type": "application/merge-patch+json", "Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def _quiet() -> None:
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from aws_lambda_powertools.metrics.provider import cold_start

    from joiner.observability import logger

    logger.setLevel("ERROR")
    cold_start.is_cold_start = False


def _summary(result: Any) -> Any:
    text = json.dumps(result, default=str)
    return result if len(text) <= 400 else text[:400] + "..."


def run_image(nodes: int, seed: int, url: str, window: float, state_dir: str) -> dict[str, Any]:
    """In a process of its own: read the cluster as a warm scanner keeps it, then write its
    complete image into ``state_dir`` (what the cold functions restore), measuring the write."""
    from joiner.services.planning_round import PlanningRound

    _quiet()
    cluster = Cluster(nodes, seed, url, window, state_dir)
    runtime = cluster.runtime()
    PlanningRound.for_cluster(runtime, cluster.clock.now())
    runtime.cluster_state.node_claims(runtime.kube)
    baseline = _rss_mb("VmRSS")
    started, cpu_started = time.perf_counter(), time.process_time()
    written = runtime.save_cluster_image()
    assert written is not None and written.kind == "base", written
    return {
        "wall_s": round(time.perf_counter() - started, 3),
        "cpu_s": round(time.process_time() - cpu_started, 3),
        "image_mb": round(written.bytes / MB, 2),
        "objects": written.objects,
        "peak_rss_mb": _rss_mb(),
        "baseline_rss_mb": baseline,
    }


def run_function(function: str, nodes: int, seed: int, url: str, window: float, limits: tuple[int, int], state_dir: str = "") -> dict[str, Any]:
    """In the measured process: set up, invoke ``function``'s handler once, measure."""
    _quiet()
    cluster = Cluster(nodes, seed, url, window, state_dir)
    spec, clock = cluster.spec, cluster.clock
    runtime = cluster.runtime()
    target = spec.nodes // 2
    context = LambdaContext(function, *limits)
    call: Any
    if function == "nodeclaim_sync":
        from joiner.services.nodeclaims import CATCH_UP_SYNC_SECONDS, MAX_SYNC_SECONDS, sync_node_claims

        def call() -> Any:
            walls: list[float] = []
            created = errors = 0
            converged_s = None
            for minute in range(15):  # each minute the scanner's sync, then the disruption pass's (at once, deployed)
                for seconds in (MAX_SYNC_SECONDS, CATCH_UP_SYNC_SECONDS):
                    began = time.perf_counter()
                    result = sync_node_claims(runtime, seconds=seconds)
                    walls.append(round(time.perf_counter() - began, 3))
                    created, errors = created + result.created, errors + result.errors
                    if not result.deferred and not result.errors:
                        converged_s = round(minute * 60 + walls[-1], 1)
                        break
                if converged_s is not None:
                    break
            return {"syncs": len(walls), "sync_wall_s": walls, "created": created, "errors": errors, "converged_s": converged_s}
    elif function == "interruption":
        from tests.events.fixtures import load_event

        handler = _load_handler("interruption")
        handler.configure(runtime, dynamodb_client=cluster.aws)
        warning = load_event("spot_interruption.json", instance_id=spec.instance_id(target), event_id="new", time=clock.now())
        warning["resources"] = [f"arn:aws:ec2:{spec.zone(target)}:instance/{spec.instance_id(target)}"]

        def call() -> Any:
            return handler.handler(_sqs([warning], "joiner-interruption"), context)
    elif function == "termination":
        from datetime import timedelta

        from joiner.services.termination import request_termination

        handler = _load_handler("termination")
        handler.configure(runtime)
        now = clock.now()
        request_termination(
            runtime,
            spec.node_name(target),
            "bench: spot interruption",
            now + timedelta(minutes=2),
            now,
            instance_id=spec.instance_id(target),
            claim_id=spec.claim_id(target),
            node_pool="default",
        )

        def call() -> Any:
            return handler.handler(_sqs([{"kind": "termination", "node": spec.node_name(target)}], "joiner-work"), context)
    else:
        handler = _load_handler(function)
        handler.configure(runtime)

        def call() -> Any:
            return handler.handler(_scheduled(clock, f"joiner-{function}"), context)

    baseline = _rss_mb("VmRSS")
    _admin(url, "/_reset", {})
    started, cpu_started = time.perf_counter(), time.process_time()
    profile_to = os.environ.get("JOINER_BENCH_PROFILE")
    try:
        if profile_to:
            import cProfile

            with cProfile.Profile() as profiler:
                result = call()
            profiler.dump_stats(f"{profile_to}.{function}")
        else:
            result = call()
        outcome: dict[str, Any] = {"result": _summary(result)}
        if function == "disruption" and isinstance(result, dict):
            for key, name in (("consolidationCandidates", "consolidation_candidates"), ("candidatesConsidered", "candidates_considered")):
                if key in result:
                    outcome[name] = result[key]
    except MemoryError:
        outcome = {"error": "MemoryError"}
    except Exception as error:
        outcome = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
    outcome.update(
        wall_s=round(time.perf_counter() - started, 3), cpu_s=round(time.process_time() - cpu_started, 3), peak_rss_mb=_rss_mb(), baseline_rss_mb=baseline
    )
    if function == "watcher":
        outcome["wake_ups"] = len(cluster.aws.wakes)
    # the image's fetch and header, then each restored resource's decoding
    loads = [value for name, value in cluster.metrics if name == "ClusterImageLoadSeconds"]
    restored = runtime.cluster_state.restored()
    outcome["state_load_s"] = round(sum(loads) + sum(seconds for _, seconds in restored), 3) if restored else None
    outcome["image_restored"] = [resource for resource, _ in restored]
    return outcome


def run_steady(mode: str, nodes: int, seed: int, url: str, window: float, minutes: int, all_limits: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """In the measured process: ``minutes`` simulated minutes of ``mode`` (warm runtimes)."""
    _quiet()
    cluster = Cluster(nodes, seed, url, window)
    clock = cluster.clock
    every = schedule_minutes()
    handlers = {name: _load_handler(name) for name in ("scanner", "disruption", "gc", *(("watcher",) if mode == "responsive" else ()))}
    for handler in handlers.values():
        handler.configure(cluster.runtime())
    scale = max(1, nodes // 500)
    churn = [
        {"op": "add_running", "count": 20 * scale},
        {"op": "delete_pods", "count": 20 * scale},
        {"op": "add_pending", "count": 3 * scale},
        {"op": "bind_pending", "count": 3 * scale},
        {"op": "touch_pods", "count": 30 * scale},
        {"op": "touch_nodes", "count": 5 * scale},
    ]
    errors: list[str] = []
    invocations: dict[str, int] = {}

    by_function: dict[str, list[float]] = {}
    counting = False

    def invoke(name: str, event: Any) -> None:
        invocations[name] = invocations.get(name, 0) + 1
        before = _admin(url, "/_stats") if counting else None
        began, cpu_began = time.perf_counter(), time.process_time()
        try:
            handlers[name].handler(event, LambdaContext(name, *all_limits[name]))
        except Exception as error:
            errors.append(f"{name}: {type(error).__name__}: {str(error)[:200]}")
        if before is not None:
            took, cpu = time.perf_counter() - began, time.process_time() - cpu_began
            after = _admin(url, "/_stats")
            entry = by_function.setdefault(name, [0, 0.0, 0.0, 0.0])
            entry[0] += after["requests"] - before["requests"]
            entry[1] += (after["bytes_sent"] - before["bytes_sent"]) / MB
            entry[2] = max(entry[2], took)
            entry[3] = max(entry[3], lambda_wall_s(cpu, took, all_limits[name][0]))

    _settle_disruption(url)
    _admin(url, "/_reset", {})
    started = time.perf_counter()
    cold: dict[str, Any] = {}
    for minute in range(minutes + 1):  # minute 0 starts the containers (their first lists): counted apart
        if minute == 1:
            cold = _admin(url, "/_stats")
            _admin(url, "/_reset", {})
            counting = True
        began = time.monotonic()
        _admin(url, "/_mutate", {"ops": churn})
        if mode == "responsive":
            woken = len(cluster.aws.wakes)
            invoke("watcher", _scheduled(clock, "joiner-watcher"))
            for _ in range(len(cluster.aws.wakes) - woken):
                invoke("scanner", {"mode": "economy"})
        invoke("scanner", _scheduled(clock, "joiner-scanner"))
        if minute % every["disruption"] == 0:
            invoke("disruption", _scheduled(clock, "joiner-disruption"))
        if minute % every["gc"] == 0:
            invoke("gc", _scheduled(clock, "joiner-gc"))
        clock.jump(60.0 - (time.monotonic() - began))
    return {
        "wall_s": round(time.perf_counter() - started, 3),
        "peak_rss_mb": _rss_mb(),
        "invocations": invocations,
        "wake_ups": len(cluster.aws.wakes),
        "errors": errors[:5],
        "error_count": len(errors),
        "cold_read_mb": round(cold.get("bytes_sent", 0) / MB, 2),
        "cold_full_pod_lists": cold.get("full_pod_lists", 0),
        "by_function": {
            name: {
                "requests": int(requests),
                "read_mb": round(read, 2),
                "longest_wall_s": round(longest, 2),
                "longest_lambda_wall_s": round(stretched, 2),
                "memory_limit_mb": all_limits[name][0],
                "timeout_s": all_limits[name][1],
            }
            for name, (requests, read, longest, stretched) in sorted(by_function.items())
        },
    }


def child_main(raw: str) -> int:
    job = json.loads(raw)
    try:
        if job["function"] == "steady":
            answer = run_steady(
                job["mode"], job["nodes"], job["seed"], job["url"], job["window"], job["minutes"], {k: tuple(v) for k, v in job["limits"].items()}
            )  # type: ignore[misc]
        elif job["function"] == "image":
            answer = run_image(job["nodes"], job["seed"], job["url"], job["window"], job["state_dir"])
        else:
            answer = run_function(job["function"], job["nodes"], job["seed"], job["url"], job["window"], tuple(job["limits"]), job.get("state_dir", ""))  # type: ignore[arg-type]
    except MemoryError:
        answer = {"error": "MemoryError", "peak_rss_mb": _rss_mb()}
    except Exception as error:
        answer = {"error": f"{type(error).__name__}: {str(error)[:300]}", "peak_rss_mb": _rss_mb()}
    sys.stdout.write(MARKER + json.dumps(answer, default=str) + "\n")
    sys.stdout.flush()
    os._exit(0)  # watch threads may still be reading; a Lambda environment is frozen, not joined


# ---------------------------------------------------------------- the harness


def _spawn(job: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = dict(
        os.environ,
        POWERTOOLS_LOG_LEVEL="ERROR",
        POWERTOOLS_METRICS_DISABLED="true",
        POWERTOOLS_TRACE_DISABLED="true",
        POWERTOOLS_SERVICE_NAME="joiner",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.scale", "--child", json.dumps(job)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return {"error": f"killed after {timeout:.0f} s"}
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            answer: dict[str, Any] = json.loads(line[len(MARKER) :])
            return answer
    tail = " ".join(err.strip().splitlines()[-3:])[-300:]
    return {"error": f"exit {process.returncode}" + (" (killed: out of memory?)" if process.returncode == -9 else "") + (f": {tail}" if tail else "")}


def _read_counters(stats: dict[str, Any]) -> dict[str, Any]:
    return {
        "api_requests": stats["requests"],
        "api_read_mb": round(stats["bytes_sent"] / MB, 2),
        "full_pod_lists": stats["full_pod_lists"],
        "cache_reads": stats["cache_reads"],
        "watch_events": stats["watch_events"],
        "requests_by_verb": stats["by_verb"],
        "by_resource": {name: [entry["requests"], round(entry["bytes"] / MB, 2)] for name, entry in sorted(stats["by_resource"].items())},
    }


def _top_shapes(stats: dict[str, Any], count: int) -> dict[str, list[float]]:
    """The ``count`` request shapes that read the most: shape -> [requests, MB]."""
    shapes = sorted(stats.get("by_shape", {}).items(), key=lambda item: (-item[1]["bytes"], item[0]))[:count]
    return {shape: [entry["requests"], round(entry["bytes"] / MB, 2)] for shape, entry in shapes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", help=f"comma-separated cluster sizes (default {','.join(map(str, SIZES))})")
    parser.add_argument("--functions", default=",".join(FUNCTIONS), help=f"comma-separated, of {', '.join(FUNCTIONS)}; 'none' for none")
    parser.add_argument("--modes", default=",".join(MODES), help="steady-state modes; 'none' for none")
    parser.add_argument("--minutes", type=int, help="simulated minutes of the steady state (default 10)")
    parser.add_argument("--window", type=float, help="seconds a watcher window lasts here (default 5; 55 deployed)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child-timeout", type=float, default=1800.0, help="seconds before a measured process is killed")
    parser.add_argument("--quick", action="store_true", help="defaults of 100 nodes, 2 simulated minutes, 2 s windows")
    parser.add_argument("--no-image", action="store_true", help="cold functions list the cluster instead of restoring its image")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child)
    quick = {"nodes": "100", "minutes": 2, "window": 2.0}
    full = {"nodes": ",".join(map(str, SIZES)), "minutes": 10, "window": 5.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    sizes = [int(n) for n in args.nodes.split(",") if n.strip()]
    functions = [] if args.functions == "none" else [f.strip() for f in args.functions.split(",") if f.strip()]
    modes = [] if args.modes == "none" else [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(functions) - set(FUNCTIONS)) + sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown function or mode: {', '.join(unknown)}")
    limits = function_limits()
    import tempfile

    from bench.kube_standin import StandIn
    from bench.scale_world import WorldSpec

    for nodes in sizes:
        spec = WorldSpec(nodes, args.seed)
        with StandIn(nodes, seed=args.seed, token=TOKEN) as server, tempfile.TemporaryDirectory(prefix="bench-scale-image-") as state_dir:
            image_reported = False
            for function in functions:
                memory, timeout = limits[CONFIG_OF.get(function, function)]
                server.mutate({"op": "reset_world"})
                if function == "nodeclaim_sync":
                    server.mutate({"op": "drop_nodeclaims"})
                image: dict[str, Any] = {}
                if not args.no_image:
                    # The image a warm scanner wrote of this world (the functions below start cold).
                    image = _spawn(
                        {"function": "image", "nodes": nodes, "seed": args.seed, "url": server.url, "window": args.window, "state_dir": state_dir},
                        args.child_timeout,
                    )
                    if not image_reported:
                        image_reported = True
                        scanner_memory = limits["scanner"][0]
                        print(
                            json.dumps(
                                {"bench": "scale", "function": "image_write", "nodes": nodes, "pods": spec.pods, "memory_limit_mb": scanner_memory, **image}
                            ),
                            flush=True,
                        )
                server.reset()
                job = {
                    "function": function,
                    "nodes": nodes,
                    "seed": args.seed,
                    "url": server.url,
                    "window": args.window,
                    "limits": [memory, timeout],
                    "state_dir": "" if args.no_image else state_dir,
                }
                answer = _spawn(job, args.child_timeout)
                line: dict[str, Any] = {
                    "bench": "scale",
                    "function": function,
                    "nodes": nodes,
                    "pods": spec.pods,
                    "pending": spec.pending,
                    "peak_rss_mb": answer.get("peak_rss_mb"),
                    "wall_s": answer.get("wall_s"),
                    "cpu_s": answer.get("cpu_s"),
                    "memory_limit_mb": memory,
                    "timeout_s": timeout,
                    **_read_counters(server.stats()),
                    "baseline_rss_mb": answer.get("baseline_rss_mb"),
                    "image_restored": answer.get("image_restored", False),
                    "state_load_s": answer.get("state_load_s"),
                }
                # What the cold container read: the API server's bytes plus the image.
                image_mb = float(image.get("image_mb") or 0.0) if answer.get("image_restored") else 0.0
                line["cold_read_mb"] = round(float(line["api_read_mb"]) + image_mb, 2)
                cpu, wall = answer.get("cpu_s"), answer.get("wall_s")
                stretched = lambda_wall_s(cpu, wall, memory) if isinstance(cpu, (int, float)) and isinstance(wall, (int, float)) else None
                line.update(
                    lambda_vcpu=round(lambda_vcpu(memory), 3), lambda_wall_s=stretched, targets=targets(line["peak_rss_mb"], stretched, memory, timeout)
                )
                for key in ("wake_ups", "consolidation_candidates", "candidates_considered", "result", "error"):
                    if key in answer:
                        line[key] = answer[key]
                if function == "nodeclaim_sync" and isinstance(answer.get("result"), dict):
                    line.update({key: answer["result"][key] for key in ("syncs", "created", "converged_s") if key in answer["result"]})
                print(json.dumps(line), flush=True)
            for mode in modes:
                server.mutate({"op": "reset_world"})
                server.reset()
                job = {
                    "function": "steady",
                    "mode": mode,
                    "nodes": nodes,
                    "seed": args.seed,
                    "url": server.url,
                    "window": args.window,
                    "minutes": args.minutes,
                    "limits": {name: list(value) for name, value in limits.items()},
                }
                answer = _spawn(job, args.child_timeout)
                stats = server.stats()
                from joiner.services.cluster_state import RESYNC_AFTER_SECONDS

                warm = stats["bytes_sent"] / MB / max(1, args.minutes)
                # Each warm container lists again every RESYNC_AFTER_SECONDS: what the first
                # minute read beyond a warm minute, spread over that interval.
                resync = max(0.0, float(answer.get("cold_read_mb") or 0.0) - warm) / (RESYNC_AFTER_SECONDS / 60)
                line = {
                    "bench": "scale",
                    "function": "steady",
                    "mode": mode,
                    "nodes": nodes,
                    "api_read_mb_per_minute": round(warm + resync, 2),
                    "warm_read_mb_per_minute": round(warm, 2),
                    "cold_start_read_mb": answer.get("cold_read_mb"),
                    "resync_minutes": RESYNC_AFTER_SECONDS / 60,
                    "full_pod_lists": stats["full_pod_lists"],
                    "minutes": args.minutes,
                    "api_requests": stats["requests"],
                    "cache_reads": stats["cache_reads"],
                    "watch_events": stats["watch_events"],
                    "peak_rss_mb": answer.get("peak_rss_mb"),
                    "wall_s": answer.get("wall_s"),
                    "invocations": answer.get("invocations"),
                    "wake_ups": answer.get("wake_ups"),
                    "by_resource": _read_counters(stats)["by_resource"],
                    "by_function": answer.get("by_function"),
                    "by_shape": _top_shapes(stats, 40),
                }
                if answer.get("error") or answer.get("error_count"):
                    line["error"] = answer.get("error") or "; ".join(answer.get("errors") or [])
                    line["error_count"] = answer.get("error_count", 1)
                print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
