"""``python -m bench.soak``: the fault-injection soak (:mod:`testworld.soak`).

Runs seeds ``--start`` .. ``--start + --seeds - 1`` (or the one ``--seed``). Each seed is a
small simulated cluster with the five real handlers on moto and the Kubernetes emulator, its
faults drawn from the seed (``--faults`` restricts them to the kinds named), and Joiner's
invariants checked after every simulated step. Every violation is printed to stderr with the
command that reproduces its seed; the last stdout line is one JSON object::

    {"bench": "soak", "runs": N, "faults": {kind: count}, "violations": V, ...}

Exit status 1 when any invariant was violated.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    from testworld.soak import FAULT_KINDS, run_seed

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds (default 200)")
    parser.add_argument("--start", type=int, default=1, help="first seed (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="run only this seed")
    parser.add_argument("--faults", default="", help=f"comma-separated fault kinds, or none (default: drawn per seed from {', '.join(FAULT_KINDS)})")
    parser.add_argument("--verbose", action="store_true", help="print each run's timeline")
    args = parser.parse_args(argv)
    kinds: list[str] | None = [k for k in args.faults.split(",") if k] or None
    if kinds == ["none"]:
        kinds = []  # the scenario alone: what today's code does without faults
    unknown = sorted(set(kinds or ()) - set(FAULT_KINDS))
    if unknown:
        parser.error(f"unknown fault kind {unknown[0]!r} (one of {', '.join(FAULT_KINDS)})")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    seeds = [args.seed] if args.seed is not None else list(range(args.start, args.start + args.seeds))

    faults: Counter[str] = Counter()
    by_invariant: Counter[str] = Counter()
    failing: list[int] = []
    wall = time.monotonic()
    for seed in seeds:
        result = run_seed(seed, kinds, functions_dir=ROOT / "functions")
        faults.update(result.faults)
        by_invariant.update(v.invariant for v in result.violations)
        line = {
            "seed": seed,
            "scenario": result.scenario,
            "kinds": list(result.kinds),
            "faults": dict(sorted(result.faults.items())),
            "violations": len(result.violations),
            "seconds": round(result.wall_seconds, 1),
        }
        print(json.dumps(line), file=sys.stderr, flush=True)
        if result.violations:
            failing.append(seed)
            for violation in result.violations:
                print(f"  seed {seed}: {violation.explain()}", file=sys.stderr)
            print(f"  reproduce: {result.reproduce()}", file=sys.stderr, flush=True)
        if args.verbose:
            for entry in result.timeline:
                print(f"    {entry}", file=sys.stderr)
    summary = {
        "bench": "soak",
        "runs": len(seeds),
        "faults": dict(sorted(faults.items())),
        "violations": sum(by_invariant.values()),
        "by_invariant": dict(sorted(by_invariant.items())),
        "failing_seeds": failing,
        "seconds": round(time.monotonic() - wall, 1),
    }
    print(json.dumps(summary), flush=True)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
