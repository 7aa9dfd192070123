"""``joiner plan SNAPSHOT [--catalog FILE] [-o json|table]``: the nodes Joiner would launch.

The contract other tools rely on: ``-o json`` prints exactly one JSON object
(``nodeClaims``, ``existingNodes``, ``unschedulable``, ``costPerHour``); malformed input
exits with status 2 and one line naming the object and field.
"""

from __future__ import annotations

import argparse
import json
import sys

from joiner.cli.inputs import add_snapshot_arguments, load_snapshot_and_catalog


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("plan", help="print the node claims Joiner would launch for a cluster snapshot")
    add_snapshot_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from joiner.domain.planning import plan_snapshot

    snapshot, catalog = load_snapshot_and_catalog(args)
    plan = plan_snapshot(snapshot, catalog)
    if args.output == "json":
        json.dump(plan.to_dict(), sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(render_table(plan))
    return 0


def render_table(plan) -> str:  # type: ignore[no-untyped-def]
    """Human-readable plan: one row per claim, then existing placements and unschedulable pods."""
    lines = []
    if plan.node_claims:
        rows = [("NODEPOOL", "INSTANCE TYPE", "PRICE/H", "PODS", "ZONES", "CAPACITY", "ALTERNATIVES")]
        for claim in plan.node_claims:
            alternatives = ", ".join(claim.instance_types[1:4]) + (" ..." if len(claim.instance_types) > 4 else "")
            rows.append((claim.node_pool, claim.instance_types[0], f"{claim.price:.4f}", str(len(claim.pods)),
                         ",".join(claim.zones), ",".join(claim.capacity_types), alternatives))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        numeric = {2, 3}
        for row in rows:
            cells = [cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
            lines.append("  ".join(cells + [row[-1]]).rstrip())
    else:
        lines.append("no new nodes needed")
    for node in plan.existing_nodes:
        if node.pods:
            lines.append(f"existing node {node.name}: {len(node.pods)} pod(s)")
    for item in plan.unschedulable:
        lines.append(f"unschedulable {item.pod}: {item.reason}")
    lines.append(f"new nodes: {len(plan.node_claims)}, cost per hour: ${plan.cost_per_hour:.4f}")
    return "\n".join(lines) + "\n"
