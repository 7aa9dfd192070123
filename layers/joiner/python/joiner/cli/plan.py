"""``joiner plan SNAPSHOT [--catalog FILE] [-o table|wide|json|yaml]``: the nodes Joiner would launch.

The contract other tools rely on: ``-o json`` prints exactly one JSON object
(``nodeClaims``, ``existingNodes``, ``unschedulable``, ``costPerHour``); malformed input
exits with status 2 and one line naming the object and field.
"""

from __future__ import annotations

import argparse

from joiner.cli.inputs import add_snapshot_arguments, load_snapshot_and_catalog
from joiner.cli.output import columns, emit


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("plan", help="print the node claims Joiner would launch for a cluster snapshot")
    add_snapshot_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from joiner.domain.planning import plan_snapshot

    snapshot, catalog = load_snapshot_and_catalog(args)
    plan = plan_snapshot(snapshot, catalog)
    emit(args.output, plan.to_dict(), lambda wide: render_table(plan, wide=wide))
    return 0


def render_table(plan, *, wide: bool = False) -> str:  # type: ignore[no-untyped-def]
    """Human-readable plan: one row per claim (``wide``: every instance type it may launch as),
    then existing placements and the pods nothing can host."""
    lines = []
    if plan.node_claims:
        rows = []
        for claim in plan.node_claims:
            shown = claim.instance_types[1:] if wide else claim.instance_types[1:4]
            alternatives = ", ".join(shown) + (" ..." if not wide and len(claim.instance_types) > 4 else "")
            rows.append(
                (
                    claim.node_pool,
                    claim.instance_types[0],
                    f"{claim.price:.4f}",
                    str(len(claim.pods)),
                    ",".join(claim.zones),
                    ",".join(claim.capacity_types),
                    alternatives or "-",
                )
            )
        lines += columns(("NODEPOOL", "INSTANCE TYPE", "PRICE/H", "PODS", "ZONES", "CAPACITY", "ALTERNATIVES"), rows, frozenset({2, 3}))
    elif plan.unschedulable:
        lines.append(f"no new nodes: {len(plan.unschedulable)} pod(s) that no NodePool can host")
    else:
        lines.append("no new nodes needed")
    for node in plan.existing_nodes:
        if node.pods:
            lines.append(f"existing node {node.name}: {len(node.pods)} pod(s)" + (f" ({', '.join(node.pods)})" if wide else ""))
    lines += unschedulable_lines(plan.unschedulable, wide=wide)
    lines.append(f"new nodes: {len(plan.node_claims)}, cost per hour: ${plan.cost_per_hour:.4f}")
    return "\n".join(lines) + "\n"


def unschedulable_lines(items, *, wide: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    """One line per distinct reason, in first-seen order: ``unschedulable default/web-0: ...``
    for one pod, ``unschedulable 20 pods (default/web-0, default/web-1, default/web-2 ...): ...``
    for several (``wide``: every pod named)."""
    groups: dict[str, list[str]] = {}
    for item in items:
        groups.setdefault(item.reason, []).append(item.pod)
    lines = []
    for reason, pods in groups.items():
        if len(pods) == 1:
            lines.append(f"unschedulable {pods[0]}: {reason}")
        else:
            shown = pods if wide or len(pods) <= 3 else [*pods[:3], "..."]
            lines.append(f"unschedulable {len(pods)} pods ({', '.join(shown)}): {reason}")
    return lines
