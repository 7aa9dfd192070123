"""What Joiner costs to run, computed (issue 15): ``python -m bench.cost_of_running``.

The bill is built from three measured inputs instead of estimates:

* the **synthesized template** of each mode (``infra.synth.build_app``, offline; ``responsive``
  has the watcher, ``economy`` does not): every function's memory,
  every schedule and its target, alarms, dashboards, KMS keys, tables, queues and SQS event
  source mappings;
* the **simulator** (``testworld``: the real handlers against moto and the Kubernetes
  emulator): an idle hour (the classic scenario's NodePools, no workload) and one busy episode
  (the classic scenario: 21 pods arrive, a spot interruption, the workloads leave). Measured:
  each function's invocations and wall-clock seconds, every DynamoDB and SQS request the
  handlers made, and every distinct custom metric (name and dimensions) they emitted;
* **list prices** in ``bench/data/aws-prices-us-east-1.json``, with their date.

A month is 30 days. *Idle month*: the schedules run, nothing happens (the idle hour x 720).
*Busy month*: every day is an idle day plus one busy episode's extra invocations and requests.
Each mode is simulated as deployed: in ``responsive`` mode the watcher wakes the scanner, whose
extra rounds are measured; the watcher itself is billed for its whole window (55 s a run at its
128 MB: it waits on the watch) plus one read and one write of its position per run. Every other
function is billed for its measured work. Local wall time has none of AWS's network latency:
durations are a lower bound (the report says so), to be read next to ``bench.coldstart``.

Prints one JSON object per (mode, month, item), then one ``total`` line per (mode, month):
``{"bench": "cost_of_running", "mode", "month", "item", "quantity", "unit", "usd"}``. Free
tiers are not subtracted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import tempfile
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench import parse_none

ROOT = Path(__file__).resolve().parents[1]
PRICES = Path(__file__).resolve().parent / "data" / "aws-prices-us-east-1.json"
FUNCTIONS = ("scanner", "interruption", "termination", "disruption", "gc", "watcher")
#: What the watcher reads and writes per run while nothing happens: its position, once each.
WATCHER_STATE_READS, WATCHER_STATE_WRITES = 1, 1
MONTH_MINUTES = 30 * 24 * 60
SCAN_WINDOW_SECONDS = 55.0
#: Lambda's SQS event source mapping long-polls each queue with five connections, 20 s each.
SQS_POLLERS, SQS_POLL_SECONDS = 5, 20
#: SSE-KMS data keys are reused for five minutes by SQS and DynamoDB.
KMS_DATA_KEY_REUSE_MINUTES = 5

__all__ = ["Inventory", "inventory", "main", "simulate"]


@dataclasses.dataclass
class Inventory:
    """What the synthesized template bills for."""

    memory_mb: dict[str, int]
    runs_per_month: dict[str, int]
    alarms: int
    dashboards: int
    kms_keys: int
    tables: int
    queues: int
    sqs_consumers: int


def _function_of(logical_id: str) -> str | None:
    lowered = logical_id.lower()
    return next((name for name in FUNCTIONS if name in lowered), None)


def inventory(template: dict[str, Any]) -> Inventory:
    """Count what the template creates that has a price."""
    resources = template.get("Resources", {})
    memory: dict[str, int] = {}
    by_logical: dict[str, str] = {}
    for logical_id, resource in resources.items():
        if resource.get("Type") == "AWS::Lambda::Function":
            name = _function_of(logical_id)
            if name is not None:
                memory[name] = int(resource["Properties"].get("MemorySize", 128))
                by_logical[logical_id] = name
    runs: dict[str, int] = dict.fromkeys(memory, 0)
    for resource in resources.values():
        properties = resource.get("Properties", {})
        expression = properties.get("ScheduleExpression")
        if resource.get("Type") != "AWS::Events::Rule" or not expression:
            continue
        match = re.fullmatch(r"rate\((\d+) minutes?\)", expression)
        if not match:
            continue
        for target in properties.get("Targets", []):
            arn = target.get("Arn", {})
            logical = arn.get("Fn::GetAtt", [None])[0] if isinstance(arn, dict) else None
            if logical in by_logical:
                runs[by_logical[logical]] += MONTH_MINUTES // int(match.group(1))
    count = Counter(resource.get("Type") for resource in resources.values())
    return Inventory(
        memory_mb=memory,
        runs_per_month=runs,
        alarms=count["AWS::CloudWatch::Alarm"],
        dashboards=count["AWS::CloudWatch::Dashboard"],
        kms_keys=count["AWS::KMS::Key"],
        tables=count["AWS::DynamoDB::Table"],
        queues=count["AWS::SQS::Queue"],
        sqs_consumers=sum(1 for r in resources.values() if r.get("Type") == "AWS::Lambda::EventSourceMapping"),
    )


def synthesized_template(mode: str = "responsive") -> dict[str, Any]:
    from infra.synth import SKIP_BUNDLING, build_app

    with tempfile.TemporaryDirectory(prefix="joiner-cost-") as outdir:
        assembly = build_app({"clusterName": "bench", "scannerMode": mode, **SKIP_BUNDLING}, outdir=outdir).synth()
        (stack,) = assembly.stacks
        return json.loads((Path(assembly.directory) / stack.template_file).read_text())


@contextlib.contextmanager
def _count_requests(counts: Counter[tuple[str, str]]) -> Iterator[None]:
    """Count every AWS request of every botocore client created meanwhile, by (service, operation)."""
    import botocore.session

    original = botocore.session.Session.create_client

    def create_client(self: Any, service_name: str, *args: Any, **kwargs: Any) -> Any:
        client = original(self, service_name, *args, **kwargs)

        def count(model: Any = None, **_: Any) -> None:
            if model is not None:
                counts[(service_name, model.name)] += 1

        client.meta.events.register("before-call", count)
        return client

    botocore.session.Session.create_client = create_client  # type: ignore[method-assign]
    try:
        yield
    finally:
        botocore.session.Session.create_client = original  # type: ignore[method-assign]


@dataclasses.dataclass
class Measured:
    invocations: Counter[str]
    seconds: dict[str, float]
    requests: Counter[tuple[str, str]]
    metrics: set[tuple[str, tuple[tuple[str, str], ...]]]


def simulate(busy: bool, mode: str = "economy") -> Measured:
    """The idle hour (``busy`` False) or the classic episode, with what the handlers did, in
    ``mode`` (responsive: the watcher wakes the scanner; its wake-up rounds are measured)."""
    from testworld.scenario import bundled_scenario, load_scenario
    from testworld.simulator import Simulation

    scenario = load_scenario(bundled_scenario())
    if not busy:
        scenario = dataclasses.replace(scenario, name="idle", duration=timedelta(hours=1), events=(), expect=())
    requests: Counter[tuple[str, str]] = Counter()
    with _count_requests(requests):
        simulation = Simulation(scenario, functions_dir=ROOT / "functions", scanner_mode=mode)
        result = simulation.run()
    metrics = {(name, tuple(sorted(dimensions.items()))) for name, _, dimensions in simulation.metrics}
    return Measured(Counter(result.invocations), dict(result.handler_seconds), requests, metrics)


def _lines(mode: str, month: str, inv: Inventory, prices: dict[str, Any], idle: Measured, busy: Measured | None) -> list[dict[str, Any]]:
    hours_idle = MONTH_MINUTES / 60  # the idle hour, scaled
    days = 30
    out: list[dict[str, Any]] = []

    def item(name: str, quantity: float, unit: str, usd: float) -> None:
        out.append({"bench": "cost_of_running", "mode": mode, "month": month, "item": name, "quantity": round(quantity, 3), "unit": unit, "usd": round(usd, 4)})

    invocations: dict[str, float] = {}
    for name in (function for function in FUNCTIONS if function in inv.memory_mb):
        per_run = idle.seconds.get(name, 0.0) / idle.invocations[name] if idle.invocations[name] else 0.0
        runs = float(inv.runs_per_month.get(name, 0)) or idle.invocations[name] * hours_idle
        extra_runs = 0.0
        extra_seconds = 0.0
        if busy is not None:
            extra_runs = max(0.0, busy.invocations[name] - idle.invocations[name] * 14 / 60) * days
            extra_seconds = max(0.0, busy.seconds.get(name, 0.0) - per_run * idle.invocations[name] * 14 / 60) * days
        seconds = runs * per_run + extra_seconds
        if name == "watcher":
            # Billed for its window: it waits on the watch (the simulator runs its batching state
            # in-process, so its own work is not in the measured seconds; it is a few list calls).
            seconds = runs * SCAN_WINDOW_SECONDS
        total_runs = runs + extra_runs
        invocations[name] = total_runs
        gb_seconds = seconds * inv.memory_mb.get(name, 128) / 1024
        item(f"lambda:{name}", gb_seconds, "GB-s", gb_seconds * prices["lambda_arm64_gb_second"])
    requests = sum(invocations.values())
    item("lambda:requests", requests, "requests", requests / 1e6 * prices["lambda_requests_per_million"])
    item("xray:traces", requests, "traces", requests / 1e6 * prices["xray_traces_recorded_per_million"])

    def monthly(counts: Counter[tuple[str, str]], service: str, operations: tuple[str, ...] | None = None) -> float:
        idle_count = sum(n for (s, op), n in idle.requests.items() if s == service and (operations is None or op in operations))
        total = idle_count * hours_idle
        if busy is not None:
            busy_count = sum(n for (s, op), n in busy.requests.items() if s == service and (operations is None or op in operations))
            total += max(0.0, busy_count - idle_count * 14 / 60) * days
        return total

    watcher_runs = float(inv.runs_per_month.get("watcher", 0))
    writes = monthly(idle.requests, "dynamodb", ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"))
    writes += watcher_runs * WATCHER_STATE_WRITES
    reads = monthly(idle.requests, "dynamodb", ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems")) + watcher_runs * WATCHER_STATE_READS
    item("dynamodb:writes", writes, "requests (1 WRU each)", writes / 1e6 * prices["dynamodb_on_demand_write_per_million"])
    item("dynamodb:reads", reads, "requests (1 RRU each)", reads / 1e6 * prices["dynamodb_on_demand_read_per_million"])
    item(
        "dynamodb:storage+pitr",
        inv.tables * 0.01,
        "GB (10 MB per table)",
        inv.tables * 0.01 * (prices["dynamodb_storage_gb_month"] + prices["dynamodb_pitr_gb_month"]),
    )
    # the cluster state's image: the scanner's writes, cold containers' reads, a few MB kept
    puts, gets = monthly(idle.requests, "s3", ("PutObject",)), monthly(idle.requests, "s3", ("GetObject",))
    item("s3:puts", puts, "requests (the cluster state's image)", puts / 1000 * prices["s3_put_per_1000"])
    item("s3:gets", gets, "requests (cold containers)", gets / 1000 * prices["s3_get_per_1000"])
    item("s3:storage", 0.01, "GB (the image, 10 MB)", 0.01 * prices["s3_standard_gb_month"])
    polls = inv.sqs_consumers * SQS_POLLERS * (MONTH_MINUTES * 60 / SQS_POLL_SECONDS)
    sqs = polls + monthly(idle.requests, "sqs")
    item("sqs:requests", sqs, "requests (event source polling included)", sqs / 1e6 * prices["sqs_requests_per_million"])
    item("kms:keys", inv.kms_keys, "keys", inv.kms_keys * prices["kms_customer_key_month"])
    kms_requests = (inv.queues + inv.tables) * MONTH_MINUTES / KMS_DATA_KEY_REUSE_MINUTES
    item("kms:requests", kms_requests, "requests (data key reuse)", kms_requests / 1e4 * prices["kms_requests_per_10k"])
    item("cloudwatch:alarms", inv.alarms, "alarms", inv.alarms * prices["cloudwatch_standard_alarm_month"])
    series = idle.metrics | (busy.metrics if busy is not None else set())
    item("cloudwatch:custom-metrics", len(series), "metric series (name and dimensions)", len(series) * prices["cloudwatch_custom_metric_month"])
    item("cloudwatch:dashboards", inv.dashboards, "dashboards", inv.dashboards * prices["cloudwatch_dashboard_month"])
    out.append(
        {
            "bench": "cost_of_running",
            "mode": mode,
            "month": month,
            "item": "total",
            "usd": round(sum(line["usd"] for line in out), 2),
            "note": "list prices of " + prices["date"] + ", no free tier; local durations are a lower bound",
        }
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parse_none("bench.cost_of_running", __doc__, argv)
    prices = json.loads(PRICES.read_text())
    for mode in ("responsive", "economy"):
        inv = inventory(synthesized_template(mode))
        idle = simulate(busy=False, mode=mode)
        busy = simulate(busy=True, mode=mode)
        for month, episode in (("idle", None), ("busy", busy)):
            for line in _lines(mode, month, inv, prices, idle, episode):
                print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
