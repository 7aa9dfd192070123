"""Realistic workloads shared by the benchmarks: many pod shapes, an architecture mix.

A real cluster's pending pods come in hundreds of distinct (CPU, memory) requests, not
the handful of Karpenter's scheduling benchmark. :func:`realistic_shapes` draws them
from log-normal distributions (CPU around 500m, memory around 2 GiB per vCPU, both
rounded the way people write requests: CPU to 50m, memory to 64Mi), with a fixed seed;
:func:`realistic_pods` assigns pods to shapes with Zipf-like popularity (a few
deployments are big, most are small) and to an architecture: ``arm64`` only, ``amd64``
only or either. :data:`FAMILIES` are 84 real us-east-1 instance types of both
architectures (compute, general and memory families of generations 6 and 7).

:func:`snapshot_yaml` renders such pods with a NodeClass and NodePool as the YAML
``joiner plan`` reads, so a benchmark can time parsing and planning separately.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from joiner.domain import labels as wk
from joiner.domain.model import Pod
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.resources import Resources

__all__ = ["FAMILIES", "ARCH_MIX", "realistic_shapes", "realistic_pods", "sliver_pods", "snapshot_yaml", "tiny_pods", "two_shape_pods"]

MI = 2**20 * 1000
GI = 2**30 * 1000

#: Instance families of the realistic NodePool (84 instance types, amd64 and arm64).
FAMILIES = ("c6g", "c6i", "c7g", "m6g", "m6i", "m7g", "r6g", "r6i", "r7g")

#: Share of pods that require arm64, require amd64, or run on either.
ARCH_MIX = (("arm64", 0.3), ("amd64", 0.3), ("", 0.4))


def realistic_shapes(count: int, seed: int = 14) -> list[tuple[int, int]]:
    """``count`` distinct (CPU millicores, memory milli-bytes) requests, sorted."""
    rng = random.Random(seed)
    shapes: set[tuple[int, int]] = set()
    while len(shapes) < count:
        cpu = min(15_000, max(50, round(math.exp(rng.gauss(math.log(500), 1.0)) / 50) * 50))
        gib_per_cpu = math.exp(rng.gauss(math.log(2.0), 0.7))
        memory_mi = min(120 * 1024, max(64, round(cpu / 1000 * gib_per_cpu * 1024 / 64) * 64))
        shapes.add((cpu, memory_mi * MI))
    return sorted(shapes)


def realistic_pods(pods: int, shapes: int = 340, seed: int = 14, arch_mix: bool = True) -> tuple[Pod, ...]:
    """``pods`` pending pods over ``shapes`` shapes (Zipf-like weights); with ``arch_mix``
    a pod requires arm64, amd64 or neither in the :data:`ARCH_MIX` proportions."""
    rng = random.Random(seed)
    table = realistic_shapes(shapes, seed)
    rng.shuffle(table)
    weights = [1.0 / (rank + 1) ** 0.8 for rank in range(len(table))]
    result = []
    for i in range(pods):
        index = rng.choices(range(len(table)), weights)[0] if i >= len(table) else i
        cpu, memory = table[index]
        arch = ""
        if arch_mix:
            roll = rng.random()
            for value, share in ARCH_MIX:
                roll -= share
                if roll < 0:
                    arch = value
                    break
        selector = Requirements([Requirement.create(wk.ARCH, "In", [arch])]) if arch else Requirements()
        name = f"app-{index:03d}-{i:05d}"
        result.append(
            Pod(
                "shop",
                name,
                uid=name,
                labels={"app": f"app-{index:03d}"},
                requests=Resources({"cpu": cpu, "memory": memory, "pods": 1000}),
                node_selector=selector,
            )
        )
    return tuple(result)


def two_shape_pods(pods: int) -> tuple[Pod, ...]:
    """Half CPU-heavy (3.5 vCPU, 1 GiB), half memory-heavy (250m, 7 GiB) pods: the optimum
    packs memory tight on mixed nodes."""
    result = []
    for i in range(pods):
        cpu, memory = (3500, 1 * GI) if i % 2 == 0 else (250, 7 * GI)
        name = f"two-{i:05d}"
        result.append(Pod("shop", name, uid=name, labels={"app": f"two-{i % 2}"}, requests=Resources({"cpu": cpu, "memory": memory, "pods": 1000})))
    return tuple(result)


def tiny_pods(pods: int) -> tuple[Pod, ...]:
    """``pods`` pods of 50m / 64Mi (the pods-per-node limit binds)."""
    return tuple(
        Pod("shop", f"tiny-{i:05d}", uid=f"tiny-{i}", labels={"app": "tiny"}, requests=Resources({"cpu": 50, "memory": 64 * MI, "pods": 1000}))
        for i in range(pods)
    )


def sliver_pods(
    large: int,
    tiny: int,
    nodes: Sequence[tuple[int, int]],
    seed: int = 31,
    sliver: tuple[float, float] = (0.08, 0.12),
    tiny_size: tuple[int, int] = (50, 64 * MI),
    tiny_arch: str = "",
) -> tuple[Pod, ...]:
    """``large`` pods that each fill a node of one of ``nodes`` (its room for pods: CPU
    millicores, memory milli-bytes) but for a sliver, and ``tiny`` pods of ``tiny_size``
    (requiring the architecture ``tiny_arch`` when set).

    Per node shape the sliver is drawn from ``sliver`` (a share of the room, separately for
    CPU and memory) and the large request is the rest, rounded down to 50m and 64Mi; large
    pods go round robin over ``nodes``. Each sliver holds a few tiny pods: the optimum
    tucks them in there instead of giving them nodes of their own."""
    rng = random.Random(seed)
    shapes = []
    for cpu, memory in nodes:
        cpu_share, memory_share = rng.uniform(*sliver), rng.uniform(*sliver)
        shapes.append((int(cpu * (1 - cpu_share)) // 50 * 50, int(memory * (1 - memory_share)) // (64 * MI) * 64 * MI))
    result = []
    for i in range(large):
        shape = i % len(shapes)
        cpu, memory = shapes[shape]
        name = f"large-{shape}-{i:05d}"
        result.append(Pod("shop", name, uid=name, labels={"app": f"large-{shape}"}, requests=Resources({"cpu": cpu, "memory": memory, "pods": 1000})))
    cpu, memory = tiny_size
    selector = Requirements([Requirement.create(wk.ARCH, "In", [tiny_arch])]) if tiny_arch else Requirements()
    for i in range(tiny):
        name = f"small-{i:05d}"
        result.append(
            Pod("shop", name, uid=name, labels={"app": "small"}, requests=Resources({"cpu": cpu, "memory": memory, "pods": 1000}), node_selector=selector)
        )
    return tuple(result)


_HEADER = """apiVersion: joiner.dev/v1
kind: NodeClass
metadata: {{name: default}}
spec:
  amiFamily: AL2023
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{joiner.dev/discovery: bench}}}}]
  securityGroupSelectorTerms: [{{tags: {{joiner.dev/discovery: bench}}}}]
  role: JoinerNodeRole-bench
---
apiVersion: joiner.dev/v1
kind: NodePool
metadata: {{name: default}}
spec:
  template:
    spec:
      nodeClassRef: {{group: joiner.dev, kind: NodeClass, name: default}}
      requirements:
        - {{key: joiner.dev/capacity-type, operator: In, values: [on-demand]}}
        - {{key: joiner.dev/instance-family, operator: In, values: [{families}]}}
        - {{key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}}
"""

_POD = """---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, uid: {uid}, labels: {{app: {app}}}}}
spec:{selector}
  containers:
    - name: main
      image: registry.example.com/{app}:1.0
      resources: {{requests: {{cpu: {cpu}m, memory: {memory}Mi}}}}
"""


def snapshot_yaml(pods: tuple[Pod, ...]) -> str:
    """The YAML snapshot ``joiner plan`` reads: the NodeClass, a NodePool over
    :data:`FAMILIES` (on-demand, both architectures) and ``pods``."""
    parts = [_HEADER.format(families=", ".join(FAMILIES))]
    for pod in pods:
        arch = pod.node_selector.get_or_exists(wk.ARCH)
        values = [] if arch.complement else sorted(arch.values)
        selector = f"\n  nodeSelector: {{kubernetes.io/arch: {values[0]}}}" if values else ""
        parts.append(
            _POD.format(
                name=pod.name,
                namespace=pod.namespace,
                uid=pod.uid,
                app=pod.labels["app"],
                selector=selector,
                cpu=pod.requests["cpu"],
                memory=pod.requests["memory"] // MI,
            )
        )
    return "".join(parts)
