"""Volume topology cost: Karpenter's scheduling benchmark pods, each with its own EBS volume.

Every pod of :func:`bench.schedule.benchmark_pods` mounts one PVC bound to a PV in one of the
three zones (round robin), so every pod carries a zone requirement and an attach count.
``python -m bench.volumes [POD_COUNTS...]`` prints one JSON object per pod count:
``{"bench":"volumes","pods":N,"seconds":S,"apply_seconds":A,"pods_per_sec":R,"nodes":K,...}``
(``seconds`` includes ``apply_seconds``, the time :func:`joiner.domain.volumes.apply_volumes`
takes); compare with ``bench.schedule`` on the same counts.
"""

from __future__ import annotations

import dataclasses
import json
import time

from bench import parse_counts
from bench.schedule import ZONES, benchmark_instance_types, benchmark_problem
from joiner.domain import labels as wk
from joiner.domain.model import PersistentVolume, PersistentVolumeClaim, StorageClass
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.scheduling import solve
from joiner.domain.volumes import EBS_CSI_DRIVER, apply_volumes

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    counts = [int(a) for a in parse_counts("bench.volumes", __doc__, argv, ["100", "1000", "5000"])]
    types = benchmark_instance_types()
    for count in counts:
        base = benchmark_problem(count, types)
        claims, volumes, pods = [], [], []
        for index, pod in enumerate(base.pending):
            zone = ZONES[index % len(ZONES)]
            claims.append(PersistentVolumeClaim(pod.namespace, f"data-{pod.name}", "gp3", f"pv-{pod.name}"))
            volumes.append(PersistentVolume(f"pv-{pod.name}", (Requirements((Requirement.in_values(wk.ZONE, zone),)),), EBS_CSI_DRIVER))
            pods.append(dataclasses.replace(pod, volume_claims=((f"data-{pod.name}", None),)))
        classes = (StorageClass("gp3", EBS_CSI_DRIVER, "WaitForFirstConsumer"),)
        start = time.perf_counter()
        topology = apply_volumes(pods, (), (), claims, volumes, classes, ())
        applied = time.perf_counter()
        plan = solve(dataclasses.replace(base, pending=topology.pods, blocked=topology.blocked))
        seconds = time.perf_counter() - start
        placed = sum(len(c.pods) for c in plan.node_claims)
        print(
            json.dumps(
                {
                    "bench": "volumes",
                    "pods": count,
                    "seconds": round(seconds, 3),
                    "apply_seconds": round(applied - start, 3),
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
