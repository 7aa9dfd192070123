"""Disruption decision time on large clusters.

Clusters of N managed c5.2xlarge nodes (on-demand, three zones) with 30 pods each (memory
from {128Mi, 256Mi, 512Mi}, fixed seed; a fifth of them in a zonal topology spread), against
the bundled catalog and a NodePool allowing c5/m5 large to 4xlarge in those zones, default
budget (10 %). Two scenarios per size:

* ``packed``: 30 x 260m CPU fill every node (7.8 of 7.91 CPUs); nothing can go, so the pass
  runs its whole search (multi-node binary search over 100 candidates, then the single-node
  pre-filter): the worst case for decision time;
* ``underutilized``: 175m pods, and one node in ten carries only 3 (150m) pods; the pass
  finds a multi-node command taking as many nodes as the budget allows.

``python -m bench.disruption [NODE_COUNTS...]`` (default 100 500 1000) prints one JSON object
per run: ``{"bench":"disruption","nodes":N,"pods":P,"scenario":S,"seconds":T,
"simulations":K,"commands":C,"nodesDisrupted":D}``.
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime, timedelta

from bench import parse_counts
from joiner.domain import labels as wk
from joiner.domain.catalog import load_bundled_catalog
from joiner.domain.disruption import DisruptionInput, decide
from joiner.domain.model import LabelSelector, Node, NodeClass, NodePool, Pod, TopologySpreadConstraint
from joiner.domain.planning import instance_types_by_pool
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.resources import Resources
from joiner.domain.snapshot import Snapshot

__all__ = ["benchmark_input", "main"]

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
TYPES = ("c5.large", "c5.xlarge", "c5.2xlarge", "c5.4xlarge", "m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge")
MI = 2**20 * 1000  # memory is in milli-bytes
PODS_PER_NODE = 30


def benchmark_input(nodes: int, scenario: str = "packed", seed: int = 7) -> DisruptionInput:
    """A DisruptionInput with ``nodes`` c5.2xlarge nodes of 30 pods (3 on every tenth node
    when ``scenario`` is ``underutilized``)."""
    rng = random.Random(seed)
    catalog = load_bundled_catalog()
    pool = NodePool(
        "default",
        requirements=Requirements(
            [
                Requirement.create(wk.INSTANCE_TYPE, "In", TYPES),
                Requirement.create(wk.CAPACITY_TYPE, "In", [wk.CAPACITY_TYPE_ON_DEMAND]),
                Requirement.create(wk.ZONE, "In", ZONES),  # the subnets' zones: spread domains
            ]
        ),
    )
    node_class = NodeClass("default")
    types = instance_types_by_pool([pool], [node_class], catalog)
    c5 = next(t for t in types["default"] if t.name == "c5.2xlarge")
    created = NOW - timedelta(days=2)
    spread = (TopologySpreadConstraint(1, wk.ZONE, label_selector=LabelSelector(match_labels=(("app", "spread"),))),)
    node_list, pods = [], []
    for i in range(nodes):
        name = f"ip-10-0-{i // 250}-{i % 250}.ec2.internal"
        zone = ZONES[i % 3]
        node_list.append(
            Node(
                name,
                labels={
                    wk.NODEPOOL: "default",
                    wk.INITIALIZED: "true",
                    wk.INSTANCE_TYPE: "c5.2xlarge",
                    wk.ZONE: zone,
                    wk.CAPACITY_TYPE: wk.CAPACITY_TYPE_ON_DEMAND,
                    wk.HOSTNAME: name,
                    wk.ARCH: "amd64",
                    wk.OS: "linux",
                },
                allocatable=c5.allocatable,
                capacity=c5.capacity,
                ready=True,
                created=created,
                provider_id=f"aws:///{zone}/i-{i:017x}",
            )
        )
        count = 3 if scenario == "underutilized" and i % 10 == 0 else PODS_PER_NODE
        cpu = 260 if scenario == "packed" else 175
        for j in range(count):
            spreading = (i * PODS_PER_NODE + j) % 5 == 0
            pods.append(
                Pod(
                    "default",
                    f"p-{i}-{j}",
                    uid=f"uid-{i}-{j}",
                    labels={"app": "spread" if spreading else f"app-{j % 7}"},
                    requests=Resources({"cpu": cpu if count == PODS_PER_NODE else 150, "memory": rng.choice((128, 256, 512)) * MI, "pods": 1000}),
                    topology_spread=spread if spreading else (),
                    node_name=name,
                    phase="Running",
                    owner_kind="ReplicaSet",
                    owner_name=f"app-{j % 7}",
                    created=created,
                )
            )
    snapshot = Snapshot(pods=tuple(pods), nodes=tuple(node_list), node_pools=(pool,), node_classes=(node_class,))
    return DisruptionInput(snapshot=snapshot, instance_types=types, now=NOW)


def main(argv: list[str] | None = None) -> int:
    counts = [int(a) for a in parse_counts("bench.disruption", __doc__, argv, ["100", "500", "1000"], what="NODE_COUNTS")]
    for count in counts:
        for scenario in ("packed", "underutilized"):
            inp = benchmark_input(count, scenario)
            start = time.perf_counter()
            decision = decide(inp)
            seconds = time.perf_counter() - start
            print(
                json.dumps(
                    {
                        "bench": "disruption",
                        "nodes": count,
                        "pods": len(inp.snapshot.pods),
                        "scenario": scenario,
                        "seconds": round(seconds, 3),
                        "simulations": decision.simulations,
                        "commands": len(decision.commands),
                        "nodesDisrupted": sum(len(c.nodes) for c in decision.commands),
                    }
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
