"""``python -m bench.interruption``: how fast a burst of spot interruption warnings is handled.

For bursts of 1, 10 and 50 simultaneous warnings (one per node, each node running three
ReplicaSet pods and one DaemonSet pod), the warnings go through EventBridge into the
interruption queue (moto over HTTP) and are handed to the real interruption handler in SQS
batches of 10, as the event source mapping delivers them. Kubernetes is the local API
emulator over HTTP. Measured from the first message received to the burst fully handled:
every node cordoned, every replacement launch called, and the first drain step run for the
nodes whose pods need no new capacity. Nodes given a replacement keep their pods until it is
Ready (replace, then drain: docs/interruption.md), so their evictions are not expected here.

Prints one JSON object per burst size. Target: 50 warnings handled in < 10 s of handler time.

Replacement capacity is planned per invocation: the nodes named by the batch being handled
(and nodes already cordoned) are left out, healthy nodes with room are used. The 50-warning
burst arrives in five batches handled one after another, so the first batches place pods
on nodes that later batches take away (``nodesPlacedOnExistingNodes``); those pods go pending
when that happens and the scanner provisions for them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings

from bench import parse_none

BURSTS = (1, 10, 50)
PODS_PER_NODE = 3
TARGET_SECONDS_FOR_50 = 10.0


def run_burst(size: int, base, emulator_factory) -> dict[str, object]:  # type: ignore[no-untyped-def]
    from tests.events.world import SqsTime, World

    with emulator_factory() as emulator, SqsTime() as sqs_time:
        world = World(base, emulator, sqs_time)
        try:
            world.node_pool()
            instances = []
            for index in range(size):
                node = f"node-{index:03d}"
                instances.append(world.launch_node(node, zone=("us-east-1a", "us-east-1b", "us-east-1c")[index % 3]))
                for pod in range(PODS_PER_NODE):
                    world.add_pod(f"{node}-web-{pod}", node, app=f"web-{index}", cpu="250m")
                world.add_pod(f"{node}-logs", node, app="logs", daemonset=True, cpu="50m")
            own = {i["id"] for i in world.fleet_instances()}
            for instance in instances:
                world.publish("spot_interruption.json", instance)

            handler_seconds = 0.0
            invocations = 0
            failures = 0
            started = time.perf_counter()
            while True:
                messages = world.receive(world.interruption, 10)
                if not messages:
                    break
                before = time.perf_counter()
                response = world.invoke(world.interruption_handler, messages, world.interruption)
                handler_seconds += time.perf_counter() - before
                invocations += 1
                failures += len(response.get("batchItemFailures", []))
            wall_seconds = time.perf_counter() - started

            nodes = [world.node(f"node-{index:03d}") for index in range(size)]
            cordoned = sum(1 for n in nodes if n is not None and n["spec"].get("unschedulable"))
            evictions = len(world.evictions())
            replacements = [i for i in world.fleet_instances() if i["id"] not in own]
            state = world.runtime.state
            replaced_nodes = sum(1 for index in range(size) if (state.get_item("TERMINATION", f"node-{index:03d}") or {}).get("replacementClaims"))
            return {
                "bench": "interruption",
                "warnings": size,
                "invocations": invocations,
                "handlerSeconds": round(handler_seconds, 3),
                "wallSeconds": round(wall_seconds, 3),
                "perWarningMs": round(1000 * handler_seconds / size, 1),
                "nodesCordoned": cordoned,
                "evictionsIssued": evictions,
                # replace, then drain: only nodes whose pods fit on existing capacity drain now
                "evictionsExpected": (size - replaced_nodes) * PODS_PER_NODE,
                "drainsWaitingForReplacement": replaced_nodes,
                "replacementLaunches": len(replacements),
                "replacementInstanceTypes": sorted({i["type"] for i in replacements}),
                "nodesGivenNewCapacity": replaced_nodes,
                "nodesPlacedOnExistingNodes": size - replaced_nodes,
                "batchItemFailures": failures,
                "claimsTerminating": sum(1 for index in range(size) if getattr(state.get_claim(f"default-node-{index:03d}"), "state", "") == "terminating"),
                "targetMet": None if size != 50 else handler_seconds < TARGET_SECONDS_FOR_50,
            }
        finally:
            world.close()


def main(argv: list[str] | None = None) -> int:
    parse_none("bench.interruption", __doc__, argv)
    warnings.simplefilter("ignore")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    logging.disable(logging.WARNING)
    from aws_lambda_powertools.metrics.provider import cold_start

    from joiner.observability import logger

    logger.setLevel("ERROR")
    # powertools writes the ColdStart metric even with metrics disabled; stdout carries results only.
    cold_start.is_cold_start = False
    from tests.events.world import AwsBase
    from testworld.aws import SerialMotoServer, fake_credentials
    from testworld.kube_emulator import KubeEmulator

    with fake_credentials():
        server = SerialMotoServer()
        server.start()
        try:
            base = AwsBase(server)
            for size in BURSTS:
                result = run_burst(size, base, KubeEmulator)
                sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
                sys.stdout.flush()
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
