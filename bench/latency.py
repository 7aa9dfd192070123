"""``python -m bench.latency``: pending pod to CreateFleet and to Ready, per scanner mode, in
the simulator (the real handlers on moto and the Kubernetes emulator, simulated time).

Workload: the classic scenario's NodePools and a seeded stream of arrivals over 40 minutes:
episodes of 1-10 replicas of pods of 250m-2 CPU arrive at random moments (some between watcher
windows), stay 3-6 minutes and leave, so nodes come and go and most arrivals need a launch.
Only pods a launch served are measured (bound to a node launched after they were created).

``economy``: the scanner's one round a minute. ``responsive``: the watcher (a window of 55 s
every minute, 20 s after the scanner's tick, 1 s idle / 10 s maximum batching from the first pending pod) wakes the scanner;
the scheduled round still runs every minute. CreateFleet is counted at the end of the
launching round (its wall time on this machine added, since simulated time stands still while
a handler runs); Ready adds the scenario's 60 s boot.

Prints one JSON object per mode: ``{"bench": "latency", "mode", "pods", "fleetP50", "fleetP99",
"readyP50", "readyP99", "wakeUps", "scannerInvocations", "simulatedMinutes", "wallSeconds"}``.
Targets (issue 14): responsive p50 <= 5 s and p99 <= 12 s to CreateFleet.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_P50, TARGET_P99 = 5.0, 12.0
CPU_SIZES = ("250m", "500m", "1", "2")


def arrivals_scenario(seed: int, episodes: int = 60, minutes: int = 40) -> Any:
    """The classic scenario's objects with a seeded stream of workload episodes."""
    import yaml

    from testworld.scenario import bundled_scenario, parse_scenario

    classic = yaml.safe_load(bundled_scenario().read_text(encoding="utf-8"))
    rng = random.Random(seed)
    workloads: list[dict[str, Any]] = []
    timed: list[tuple[float, dict[str, Any]]] = []
    for index in range(episodes):
        name = f"burst-{index:02d}"
        workloads.append({"name": name, "replicas": 0, "cpu": rng.choice(CPU_SIZES), "memory": f"{rng.choice((256, 512, 1024))}Mi"})
        start = rng.uniform(60, minutes * 60)
        stay = rng.uniform(180, 360)
        timed.append((start, {"at": f"{start:.1f}s", "scale": {"workload": name, "replicas": rng.randint(1, 10)}}))
        timed.append((start + stay, {"at": f"{start + stay:.1f}s", "scale": {"workload": name, "replicas": 0}}))
    events = [event for _, event in sorted(timed, key=lambda pair: (pair[0], json.dumps(pair[1])))]
    document = {
        "name": f"arrivals-{seed}",
        "cluster": classic["cluster"],
        "duration": f"{minutes + 8}m",
        "bootDelay": classic.get("bootDelay", "60s"),
        "objects": classic["objects"],
        "workloads": workloads,
        "events": events,
    }
    return parse_scenario(document, source=f"bench/latency seed {seed}")


def measure(mode: str, seed: int) -> dict[str, Any]:
    from testworld.simulator import Simulation, percentile

    scenario = arrivals_scenario(seed)
    result = Simulation(scenario, functions_dir=ROOT / "functions", scanner_mode=mode).run()
    latencies = result.provisioning_latency()
    fleet = [pair[0] for pair in latencies]
    ready = [pair[1] for pair in latencies]
    return {
        "bench": "latency",
        "mode": mode,
        "seed": seed,
        "pods": len(latencies),
        "fleetP50": round(percentile(fleet, 50), 2),
        "fleetP99": round(percentile(fleet, 99), 2),
        "readyP50": round(percentile(ready, 50), 2),
        "readyP99": round(percentile(ready, 99), 2),
        "wakeUps": result.wake_ups,
        "scannerInvocations": result.invocations["scanner"],
        "handlerErrors": len(result.handler_errors),
        "simulatedMinutes": round(result.simulated_seconds / 60, 1),
        "wallSeconds": round(result.wall_seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--mode", action="append", choices=("economy", "responsive"), help="default: both")
    args = parser.parse_args(argv)
    failed = False
    for mode in args.mode or ("economy", "responsive"):
        line = measure(mode, args.seed)
        if mode == "responsive":
            line["target"] = {"fleetP50": TARGET_P50, "fleetP99": TARGET_P99}
            line["met"] = line["fleetP50"] <= TARGET_P50 and line["fleetP99"] <= TARGET_P99
            failed = failed or not line["met"]
        print(json.dumps(line), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
