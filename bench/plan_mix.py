"""``joiner plan`` end to end on a real cluster's mix (issue 14): hundreds of pod shapes.

Pods draw their (cpu, memory) from 340 distinct shapes (log-normal around 500m / 1 GiB, on a
10m / 16Mi grid, capped at 7 vCPU / 28 GiB), with a fixed seed; one on-demand NodePool allows
75 real instance types (c/m/r, generations 5-7, Intel and AMD, large to 8xlarge) of the
bundled us-east-1 catalog. Workloads:

* ``free``: every pod architecture-free;
* ``arch-mix``: a third arm64-only (``kubernetes.io/arch: arm64``, Graviton types added),
  a third amd64-only, a third free;
* ``tiny``: 50m / 64Mi pods only.

Each row reports the split: ``parse`` (the YAML snapshot, libyaml), ``plan`` (the solver), the
whole ``seconds``, the process's peak resident memory so far, the plan's cost, first-fit-decreasing's cost on the same problem and the
cost ratio. ``python -m bench.plan_mix [POD_COUNTS...]`` (default 5000 20000) prints one JSON
object per (workload, count).
"""

from __future__ import annotations

import json
import random
import resource
import time
from typing import Any

from bench import parse_counts

__all__ = ["INSTANCE_TYPES", "main", "snapshot_yaml"]

FAMILIES = ("c5", "m5", "r5", "c6i", "m6i", "r6i", "c7i", "m7i", "r7i", "c5a", "m5a", "r5a", "c6a", "m6a", "r6a")
ARM_FAMILIES = ("c6g", "m6g", "r6g", "c7g", "m7g")
SIZES = ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge")
INSTANCE_TYPES = tuple(f"{family}.{size}" for family in FAMILIES for size in SIZES)


def _shapes(rng: random.Random, count: int = 340) -> list[tuple[int, int]]:
    found: set[tuple[int, int]] = set()
    while len(found) < count:
        cpu = max(50, int(round(rng.lognormvariate(6.2, 0.9) / 10) * 10))
        memory = max(64, int(round(rng.lognormvariate(6.9, 0.9) / 16) * 16))
        found.add((min(cpu, 7000), min(memory, 28000)))
    return sorted(found)


def snapshot_yaml(pods: int, workload: str = "free", seed: int = 7) -> str:
    """The snapshot ``joiner plan`` reads for ``pods`` pods of ``workload``."""
    import yaml

    rng = random.Random(seed)
    shapes = _shapes(rng) if workload != "tiny" else [(50, 64)]
    types = list(INSTANCE_TYPES) + ([f"{f}.{s}" for f in ARM_FAMILIES for s in SIZES] if workload == "arch-mix" else [])
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "joiner.dev/v1",
            "kind": "NodeClass",
            "metadata": {"name": "default"},
            "spec": {"subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
        },
        {
            "apiVersion": "joiner.dev/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"},
                        "requirements": [
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
                            {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["on-demand"]},
                        ],
                    }
                }
            },
        },
    ]
    for index in range(pods):
        cpu, memory = shapes[rng.randrange(len(shapes))]
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}}}]}
        if workload == "arch-mix" and index % 3 < 2:
            spec["nodeSelector"] = {"kubernetes.io/arch": "arm64" if index % 3 == 0 else "amd64"}
        documents.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p{index}", "namespace": "default", "uid": f"u{index}"},
                "spec": spec,
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
            }
        )
    return yaml.safe_dump_all(documents)


def measure(pods: int, workload: str) -> dict[str, Any]:
    from joiner.domain.catalog import load_bundled_catalog
    from joiner.domain.planning import build_problem
    from joiner.domain.scheduling import ffd_cost, solve
    from joiner.domain.snapshot import load_snapshot_yaml

    text = snapshot_yaml(pods, workload)
    catalog = load_bundled_catalog("us-east-1")
    start = time.perf_counter()
    snapshot = load_snapshot_yaml(text)
    parsed = time.perf_counter()
    problem = build_problem(snapshot, catalog)
    plan = solve(problem)
    planned = time.perf_counter()
    baseline = ffd_cost(problem)
    return {
        "bench": "plan_mix",
        "workload": workload,
        "pods": pods,
        "parse": round(parsed - start, 3),
        "plan": round(planned - parsed, 3),
        "seconds": round(planned - start, 3),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "nodes": len(plan.node_claims),
        "unschedulable": len(plan.unschedulable),
        "cost": round(plan.cost_per_hour, 4),
        "ffd_cost": round(baseline, 4),
        "vs_ffd": round(plan.cost_per_hour / baseline, 4) if baseline else None,
    }


def main(argv: list[str] | None = None) -> int:
    counts = [int(a) for a in parse_counts("bench.plan_mix", __doc__, argv, ["5000", "20000"])]
    for workload in ("free", "arch-mix", "tiny"):
        for count in counts:
            print(json.dumps(measure(count, workload)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
