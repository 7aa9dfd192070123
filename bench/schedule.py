"""Scheduling throughput on Karpenter's scheduling benchmark setup.

400 synthetic instance types (type i: i+1 vCPU, 2(i+1) GiB, 10(i+1) pods; spot in two
zones, on-demand in three; price 0.1 per vCPU + 0.1 per GiB) and pods in equal fifths:
plain, zonal spread (maxSkew 1), hostname spread (maxSkew 1), zonal self-affinity and
hostname anti-affinity, with CPU from {100m, 250m, 500m, 1, 1.5} and memory from
{100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi} drawn with a fixed seed.

``python -m bench.schedule [POD_COUNTS...]`` prints one JSON object per pod count:
``{"bench":"schedule","workload":"karpenter","pods":N,"seconds":S,"pods_per_sec":R,"nodes":K}``.

Realistic rows (``shapes:N``, ``python -m bench.schedule shapes:5000 shapes:20000``) plan N
pods of 340 distinct (CPU, memory) shapes with an architecture mix on 84 real instance
types (:mod:`bench.workloads`) the way ``joiner plan`` does: the YAML snapshot is parsed
(``parse_seconds``), then planned (``plan_seconds``); ``seconds`` is their sum (no launch:
``joiner plan`` only plans). ``cli:N`` runs ``joiner plan FILE -o json`` in a fresh
interpreter and reports its wall time (``seconds``, interpreter start and imports
included) and peak memory (``max_rss_mb``).
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

from bench import parse_counts
from joiner.domain import labels as wk
from joiner.domain.model import InstanceType, LabelSelector, NodePool, Offering, Pod, PodAffinityTerm, TopologySpreadConstraint
from joiner.domain.requirements import Requirements
from joiner.domain.resources import Resources
from joiner.domain.scheduling import SchedulingProblem, solve

__all__ = ["benchmark_instance_types", "benchmark_pods", "benchmark_problem", "main"]

ZONES = ("test-zone-1", "test-zone-2", "test-zone-3")
SPOT_ZONES = ZONES[:2]
CPU_CHOICES = (100, 250, 500, 1000, 1500)
MEMORY_CHOICES_MI = (100, 256, 512, 1024, 2048, 4096)
LABEL_VALUES = ("a", "b", "c", "d", "e", "f", "g")
GIB = 2**30


def benchmark_instance_types(count: int = 400) -> tuple[InstanceType, ...]:
    types = []
    for i in range(count):
        cpu, memory_gib, pods = i + 1, 2 * (i + 1), 10 * (i + 1)
        price = 0.1 * cpu + 0.1 * memory_gib
        offerings = [Offering(zone, "spot", price) for zone in SPOT_ZONES] + [Offering(zone, "on-demand", price) for zone in ZONES]
        name = f"fake-it-{i}"
        types.append(
            InstanceType(
                name=name,
                capacity=Resources({"cpu": cpu * 1000, "memory": memory_gib * GIB * 1000, "pods": pods * 1000}),
                overhead=Resources(),
                requirements=Requirements.from_labels({wk.INSTANCE_TYPE: name, wk.ARCH: "amd64", wk.OS: "linux"}),
                offerings=tuple(offerings),
            )
        )
    return tuple(types)


def benchmark_pods(count: int, seed: int = 42) -> tuple[Pod, ...]:
    rng = random.Random(seed)

    def requests() -> Resources:
        return Resources({"cpu": rng.choice(CPU_CHOICES), "memory": rng.choice(MEMORY_CHOICES_MI) * 2**20 * 1000, "pods": 1000})

    def value() -> str:
        return rng.choice(LABEL_VALUES)

    fifth = count // 5
    pods: list[Pod] = []

    def add(kind: str, n: int) -> None:
        for _ in range(n):
            name = f"{kind}-{len(pods):05d}"
            if kind == "plain":
                pods.append(Pod("default", name, uid=name, labels={"my-label": value()}, requests=requests()))
            elif kind in ("zone-spread", "host-spread"):
                key = wk.ZONE if kind == "zone-spread" else wk.HOSTNAME
                spread = TopologySpreadConstraint(1, key, "DoNotSchedule", LabelSelector((("my-label", value()),)))
                pods.append(Pod("default", name, uid=name, labels={"my-label": value()}, requests=requests(), topology_spread=(spread,)))
            elif kind == "zone-affinity":
                group = value()
                term = PodAffinityTerm(wk.ZONE, LabelSelector((("my-affinity", group),)))
                pods.append(Pod("default", name, uid=name, labels={"my-affinity": group}, requests=requests(), pod_affinity=(term,)))
            else:
                term = PodAffinityTerm(wk.HOSTNAME, LabelSelector((("app", "nginx"),)))
                pods.append(Pod("default", name, uid=name, labels={"app": "nginx"}, requests=requests(), pod_anti_affinity=(term,)))

    add("plain", count - 4 * fifth)
    add("zone-spread", fifth)
    add("host-spread", fifth)
    add("zone-affinity", fifth)
    add("host-anti", fifth)
    return tuple(pods)


def benchmark_problem(count: int, instance_types: tuple[InstanceType, ...] | None = None) -> SchedulingProblem:
    types = instance_types if instance_types is not None else benchmark_instance_types()
    return SchedulingProblem(pending=benchmark_pods(count), node_pools=(NodePool("default"),), instance_types={"default": types})


def bench_shapes(count: int) -> dict[str, object]:
    """Parse and plan ``count`` realistic pods (340 shapes, architecture mix) in-process."""
    from bench.workloads import realistic_pods, snapshot_yaml
    from joiner.domain.catalog import load_bundled_catalog
    from joiner.domain.planning import plan_snapshot
    from joiner.domain.snapshot import load_snapshot_yaml

    pods = realistic_pods(count)
    text = snapshot_yaml(pods)
    catalog = load_bundled_catalog()
    start = time.perf_counter()
    snapshot = load_snapshot_yaml(text)
    parsed = time.perf_counter()
    plan = plan_snapshot(snapshot, catalog)
    done = time.perf_counter()
    return {
        "bench": "schedule",
        "workload": "shapes",
        "pods": count,
        "shapes": len({(p.requests["cpu"], p.requests["memory"]) for p in pods}),
        "parse_seconds": round(parsed - start, 3),
        "plan_seconds": round(done - parsed, 3),
        "seconds": round(done - start, 3),
        "pods_per_sec": round(count / (done - start), 1),
        "nodes": len(plan.node_claims),
        "cost": round(plan.cost_per_hour, 4),
        "unschedulable": len(plan.unschedulable),
    }


def bench_cli(count: int) -> dict[str, object]:
    """``joiner plan FILE -o json`` end to end in a fresh interpreter."""
    from bench.workloads import realistic_pods, snapshot_yaml

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write(snapshot_yaml(realistic_pods(count)))
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "joiner.cli.main", "plan", handle.name, "-o", "json"], capture_output=True, text=True, env=os.environ.copy(), check=True
        )
        seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    finally:
        os.unlink(handle.name)
    plan = json.loads(result.stdout)
    return {
        "bench": "schedule",
        "workload": "cli",
        "pods": count,
        "seconds": round(seconds, 3),
        "pods_per_sec": round(count / seconds, 1),
        "nodes": len(plan["nodeClaims"]),
        "cost": plan["costPerHour"],
        "max_rss_mb": round(max(peak, before) / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_counts("bench.schedule", __doc__, argv, ["100", "1000", "5000", "10000", "shapes:5000", "shapes:20000", "cli:5000"])
    types = benchmark_instance_types()
    for arg in args:
        kind, _, number = arg.rpartition(":")
        if kind == "shapes":
            print(json.dumps(bench_shapes(int(number))), flush=True)
            continue
        if kind == "cli":
            print(json.dumps(bench_cli(int(number))), flush=True)
            continue
        count = int(number)
        problem = benchmark_problem(count, types)
        start = time.perf_counter()
        plan = solve(problem)
        seconds = time.perf_counter() - start
        placed = sum(len(c.pods) for c in plan.node_claims)
        print(
            json.dumps(
                {
                    "bench": "schedule",
                    "workload": "karpenter",
                    "pods": count,
                    "seconds": round(seconds, 3),
                    "pods_per_sec": round(count / seconds, 1),
                    "nodes": len(plan.node_claims),
                    "scheduled": placed,
                    "unschedulable": len(plan.unschedulable),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
