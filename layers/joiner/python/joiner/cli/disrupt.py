"""``joiner disrupt SNAPSHOT [--catalog FILE] [--now TIME] [-o table|wide|json|yaml]``: what one
disruption pass would do to a cluster snapshot.

The contract: ``-o json`` prints exactly one JSON object
``{"commands": [{"method", "nodes", "replacements": [{"instanceTypes", "price"}],
"savingsPerHour", "reason"}], "blocked": [{"node", "reason"}]}``; malformed input exits
with status 2 and one line naming the object and field.

Offline, a node's price is its offering's price in the catalog (instance type, zone and
``joiner.dev/capacity-type`` labels), its age comes from ``creationTimestamp``, and there is
no EC2: for AMI, subnet and security-group drift a node states its instance's launch inputs
in the ``joiner.dev/ami-id``, ``joiner.dev/subnet-id`` and ``joiner.dev/security-group-ids``
(comma-separated) annotations, and the NodeClass's selector terms stand for its current
resolution only where every term names an ID (any other term: unknown, no drift).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from joiner.cli.inputs import add_snapshot_arguments, load_snapshot_and_catalog
from joiner.cli.main import UsageError
from joiner.cli.output import columns, emit

if TYPE_CHECKING:
    from joiner.domain.disruption import Decision, NodeFacts, ResolvedNodeClass
    from joiner.domain.model import SelectorTerm
    from joiner.domain.snapshot import Snapshot


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("disrupt", help="print the disruption commands (consolidation, drift, expiration, emptiness) for a cluster snapshot")
    add_snapshot_arguments(parser)
    parser.add_argument("--now", help="the pass's time (ISO 8601, e.g. 2025-01-06T09:00:00Z); default: the current time")
    parser.set_defaults(handler=run)


def _now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    from joiner.domain.bounded import EARLIEST_TIME, LATEST_TIME, time_in_range

    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--now: expected an ISO 8601 time such as 2025-01-06T09:00:00Z, got {text!r}") from None
    # Budget schedules are UTC crontabs (as Karpenter's): a time given with an offset is the
    # same instant in UTC.
    try:
        moment = moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    except OverflowError:
        moment = LATEST_TIME + (LATEST_TIME - EARLIEST_TIME)  # beyond the range: reported below
    if not time_in_range(moment):
        raise UsageError(f"--now: {text!r} is out of range (expected a time between {EARLIEST_TIME.year} and {LATEST_TIME.year})")
    return moment


def offline_node_classes(snapshot: Snapshot) -> dict[str, ResolvedNodeClass]:
    """Resolved launch inputs a snapshot alone can tell: selector terms that name IDs."""
    from joiner.domain.disruption import ResolvedNodeClass

    result: dict[str, ResolvedNodeClass] = {}
    for node_class in snapshot.node_classes:
        def ids(terms: Sequence[SelectorTerm]) -> frozenset[str] | None:
            if not terms or any(t.id is None for t in terms):
                return None
            return frozenset(str(t.id) for t in terms)

        result[node_class.name] = ResolvedNodeClass(
            amis=ids(node_class.ami_selector_terms),
            subnets=ids(node_class.subnet_selector_terms),
            security_groups=ids(node_class.security_group_selector_terms),
        )
    return result


def offline_facts(snapshot: Snapshot) -> dict[str, NodeFacts]:
    """Per node, the launch inputs its annotations state (nodes without them: unknown)."""
    from joiner.domain.disruption import NodeFacts, launch_inputs_from_annotations

    result: dict[str, NodeFacts] = {}
    for node in snapshot.nodes:
        launch = launch_inputs_from_annotations(node)
        if launch is not None:
            result[node.name] = NodeFacts(launch=launch)
    return result


def run(args: argparse.Namespace) -> int:
    from joiner.domain.catalog import CatalogError
    from joiner.domain.disruption import DisruptionInput, decide
    from joiner.domain.planning import instance_types_by_pool

    now = _now(args.now)
    snapshot, catalog = load_snapshot_and_catalog(args)
    try:
        types = instance_types_by_pool(snapshot.node_pools, snapshot.node_classes, catalog, snapshot.node_overlays)
    except CatalogError as error:
        raise UsageError(f"catalog {args.catalog or '(bundled)'}: {error}") from None
    decision = decide(DisruptionInput(
        snapshot=snapshot, instance_types=types, now=now, facts=offline_facts(snapshot), node_classes=offline_node_classes(snapshot),
    ))
    emit(args.output, decision.to_dict(), lambda wide: render_table(decision, wide=wide))
    return 0


def render_table(decision: Decision, *, wide: bool = False) -> str:
    """The commands as a table (``wide``: every replacement type and the reason in full),
    then the nodes that were not disrupted and why."""
    lines = []
    if decision.commands:
        rows = []
        for command in decision.commands:
            replacements = []
            for replacement in command.replacements:
                types = replacement.instance_types if wide else replacement.instance_types[:1]
                more = "" if wide or len(replacement.instance_types) == 1 else f" (+{len(replacement.instance_types) - 1})"
                replacements.append(f"{'|'.join(types)}{more} <= ${replacement.price:.4f}/h")
            reason = command.reason if wide or len(command.reason) <= 80 else command.reason[:77] + "..."
            rows.append((command.method, ",".join(command.nodes), f"{command.savings_per_hour:.4f}", "; ".join(replacements) or "-", reason))
        lines += columns(("METHOD", "NODES", "SAVES/H", "REPLACEMENTS", "REASON"), rows, frozenset({2}))
    else:
        lines.append("no disruption")
    if decision.blocked:
        lines.append("")
        lines += columns(("NOT DISRUPTED", "REASON"), [(item.node, item.reason) for item in decision.blocked])
    return "\n".join(lines) + "\n"
