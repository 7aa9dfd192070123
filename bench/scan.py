"""Scanner benchmarks: ``python -m bench.scan`` prints one JSON object per line.

* ``scan_decision``: one provisioning round (read state -> parse -> plan -> launch requests)
  for N pending pods, on the in-memory fakes of :mod:`tests.support.fakes` (Kubernetes,
  EC2, DynamoDB state) with the bundled us-east-1 catalog. It measures Joiner's own work:
  no network latency is included (each real API call adds its round trip; launches run
  8 at a time). Reported: read/plan/launch/decision seconds (median of ``repeats``),
  claims launched, pods placed; then a second round on the same runtime (pods in flight,
  parsed pods reused), which launches nothing. Rows for the mixed web/batch workload (seven
  shapes) at each size, then one ``diverse`` row: 10,000 pods drawn from 340 distinct
  shapes (``bench.plan_mix``'s), issue 14's realistic mix.
* ``scanner_import``: cold-start import time of ``functions/scanner/handler.py`` in fresh
  interpreters (median of 5), and of the adapters its first invocation loads (boto3,
  botocore, urllib3); plus the heaviest top-level imports from ``python -X importtime``.
  ``python -m bench.coldstart`` measures the whole cold start (import and first call) of
  every function on the built layer.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES = (100, 1_000, 10_000)

#: (deployment, cpu, memory, replicas share): a mixed web/batch workload.
WORKLOADS = (
    ("web", "250m", "512Mi", 0.30),
    ("api", "500m", "1Gi", 0.20),
    ("worker", "1", "2Gi", 0.20),
    ("cache", "500m", "4Gi", 0.10),
    ("batch", "2", "4Gi", 0.10),
    ("ml", "4", "16Gi", 0.05),
    ("tiny", "100m", "128Mi", 0.05),
)


def _world(pods: int, diverse: bool = False) -> Any:
    from joiner.domain.catalog import load_bundled_catalog
    from tests.support.fakes import daemonset_json, fake_world, node_class_json, node_pool_json, pod_json

    world = fake_world(catalog=load_bundled_catalog())
    world.kube.add("node_classes", node_class_json(discovery=world.cluster))
    world.kube.add(
        "node_pools",
        node_pool_json(
            requirements=[
                {"key": "joiner.dev/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "joiner.dev/instance-generation", "operator": "Gt", "values": ["4"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            limits={"cpu": "100000"},
        ),
    )
    world.kube.add("daemonsets", daemonset_json("node-agent"))
    if diverse:
        import random

        from bench.plan_mix import _shapes

        rng = random.Random(11)
        shapes = _shapes(rng)
        for index in range(pods):
            milli_cpu, memory_mi = shapes[rng.randrange(len(shapes))]
            world.kube.add("pods", pod_json(f"svc-{index:05d}", cpu=f"{milli_cpu}m", memory=f"{memory_mi}Mi", labels={"app": f"svc-{index % 97}"}))
        return world
    made = 0
    for name, cpu, memory, share in WORKLOADS:
        count = max(1, round(pods * share)) if made < pods else 0
        count = min(count, pods - made)
        for index in range(count):
            world.kube.add("pods", pod_json(f"{name}-{index:05d}", cpu=cpu, memory=memory, labels={"app": name}))
        made += count
    for index in range(pods - made):
        world.kube.add("pods", pod_json(f"extra-{index:05d}", cpu="250m", memory="256Mi"))
    return world


def bench_decision(pods: int, repeats: int, diverse: bool = False) -> dict[str, Any]:
    from joiner.services.provisioning import provision

    samples, again = [], []
    for attempt in range(repeats):
        world = _world(pods, diverse)
        runtime = world.runtime(f"bench-{attempt}")
        samples.append(provision(runtime, world.clock.now()))
        world.clock.advance(5)
        again.append(provision(runtime, world.clock.now()))  # same pods, now in flight: nothing to launch
    launched = samples[-1].launched
    return {
        "bench": "scan_decision",
        "backend": "fakes (in-memory Kubernetes/EC2/DynamoDB), bundled us-east-1 catalog",
        "pending_pods": pods,
        "workload": "diverse (340 shapes)" if diverse else "web/batch mix (7 shapes)",
        "repeats": repeats,
        "claims_launched": len(launched),
        "pods_placed": sum(len(c.pods) for c in launched),
        "unschedulable": len(samples[-1].unschedulable),
        "read_seconds": round(statistics.median(r.read_seconds for r in samples), 4),
        "plan_seconds": round(statistics.median(r.plan_seconds for r in samples), 4),
        "launch_seconds": round(statistics.median(r.launch_seconds for r in samples), 4),
        "decision_seconds": round(statistics.median(r.decision_seconds for r in samples), 4),
        "round_seconds": round(statistics.median(r.total_seconds for r in samples), 4),
        "cost_per_hour": round(sum(c.price for c in launched), 4),
        "next_round_seconds": round(statistics.median(r.total_seconds for r in again), 4),
        "next_round_read_seconds": round(statistics.median(r.read_seconds for r in again), 4),
        "next_round_launched": len(again[-1].launched),
    }


_TIMED_IMPORT = """
import importlib.util, sys, time
started = time.perf_counter()
spec = importlib.util.spec_from_file_location("scanner_handler", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
handler = time.perf_counter() - started
import joiner.adapters.aws, joiner.adapters.kubernetes, boto3, urllib3
print(handler, time.perf_counter() - started)
"""


def bench_import(runs: int = 5) -> dict[str, Any]:
    handler = str(ROOT / "functions" / "scanner" / "handler.py")
    env_cmd = [sys.executable, "-c", _TIMED_IMPORT.format(path=handler)]
    handler_times, with_adapters = [], []
    for _ in range(runs):
        output = subprocess.run(env_cmd, capture_output=True, text=True, check=True, cwd=ROOT).stdout.split()
        handler_times.append(float(output[0]))
        with_adapters.append(float(output[1]))
    trace = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            f"import importlib.util; s=importlib.util.spec_from_file_location('h', {handler!r}); m=importlib.util.module_from_spec(s); s.loader.exec_module(m)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stderr
    top: list[tuple[int, str]] = []
    for line in trace.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if match and len(match.group(2)) <= 1:  # top-level imports only
            top.append((int(match.group(1)), match.group(3)))
    top.sort(reverse=True)
    return {
        "bench": "scanner_import",
        "handler_import_seconds": round(statistics.median(handler_times), 3),
        "handler_plus_adapters_seconds": round(statistics.median(with_adapters), 3),
        "runs": runs,
        "heaviest_top_level_imports_ms": {name: round(us / 1000, 1) for us, name in top[:6]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--repeats", type=int, default=3, help="rounds per size below 10,000 pods (10,000: one)")
    parser.add_argument("--no-diverse", action="store_true", help="skip the 10,000-pod, 340-shape row")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    logging.getLogger("joiner").setLevel(logging.ERROR)  # e.g. the per-round event cap notice
    # Warm the catalog's per-kubelet memo so the first size does not pay for building it.
    bench_decision(10, 1)
    for size in args.sizes:
        print(json.dumps(bench_decision(size, args.repeats if size < 10_000 else 1)), flush=True)
    if not args.no_diverse:
        print(json.dumps(bench_decision(10_000, 1, diverse=True)), flush=True)
    print(json.dumps(bench_import()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
