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

Deletions: ``--delete nodeclaim/NAME`` or ``--delete node/NAME`` (repeatable) shows what
``kubectl delete`` of that NodeClaim (``joiner.dev/v1`` or ``karpenter.sh/v1``) or Node at
``--now`` would do, and NodeClaims and Nodes the snapshot already shows being deleted
(``deletionTimestamp``) are shown from their deletion on: the drain plan of
:mod:`joiner.domain.drain_plan` (which pods are evicted in which order, which a
PodDisruptionBudget or do-not-disrupt holds back, when the NodePool's
``terminationGracePeriod`` has them deleted, when the instance is terminated). With any, the
JSON object gains ``"deletions": [...]``; the nodes being deleted are not disruption candidates.
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
    from joiner.domain.drain_plan import DeletionPlan
    from joiner.domain.model import SelectorTerm
    from joiner.domain.snapshot import Snapshot


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("disrupt", help="print the disruption commands (consolidation, drift, expiration, emptiness) for a cluster snapshot")
    add_snapshot_arguments(parser)
    parser.add_argument("--now", help="the pass's time (ISO 8601, e.g. 2025-01-06T09:00:00Z); default: the current time")
    parser.add_argument(
        "--delete",
        action="append",
        default=[],
        metavar="KIND/NAME",
        help="also show what deleting nodeclaim/NAME or node/NAME at --now would do: its drain plan (repeatable)",
    )
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
    targets = [_target(text) for text in args.delete]
    snapshot, catalog = load_snapshot_and_catalog(args)
    deletions = deletion_plans(snapshot, targets, now)
    snapshot = _without_deleted(snapshot, deletions, now)
    try:
        types = instance_types_by_pool(snapshot.node_pools, snapshot.node_classes, catalog, snapshot.node_overlays)
    except CatalogError as error:
        raise UsageError(f"catalog {args.catalog or '(bundled)'}: {error}") from None
    decision = decide(
        DisruptionInput(
            snapshot=snapshot,
            instance_types=types,
            now=now,
            facts=offline_facts(snapshot),
            node_classes=offline_node_classes(snapshot),
        )
    )
    data = decision.to_dict()
    if deletions:
        data["deletions"] = [plan.to_dict() for plan in deletions]
    emit(args.output, data, lambda wide: render_table(decision, wide=wide) + render_deletions(deletions, wide=wide))
    return 0


#: ``--delete`` kinds as typed (kubectl's names) -> the kind.
_DELETE_KINDS = {"nodeclaim": "NodeClaim", "nodeclaims": "NodeClaim", "node": "Node", "nodes": "Node", "no": "Node"}


def _target(text: str) -> tuple[str, str]:
    kind, _, name = text.partition("/")
    if kind.lower() not in _DELETE_KINDS or not name:
        raise UsageError(f"--delete: expected nodeclaim/NAME or node/NAME, got {text!r}")
    return _DELETE_KINDS[kind.lower()], name


def deletion_plans(snapshot: Snapshot, targets: Sequence[tuple[str, str]], now: datetime) -> list[DeletionPlan]:
    """The drain plans of the ``targets`` deleted at ``now``, then of the NodeClaims and Nodes
    the snapshot shows being deleted (from their ``deletionTimestamp``), one per node."""
    from joiner.domain.drain_plan import DeletionTargetError, plan_deletion

    pools = {pool.name: pool for pool in snapshot.node_pools}

    def plan(kind: str, name: str, at: datetime) -> DeletionPlan:
        return plan_deletion(kind, name, nodes=snapshot.nodes, claims=snapshot.node_claims, pods=snapshot.pods, pdbs=snapshot.pdbs, pools=pools, deleted_at=at)

    plans: list[DeletionPlan] = []
    for kind, name in targets:
        try:
            plans.append(plan(kind, name, now))
        except DeletionTargetError as error:
            raise UsageError(f"--delete {kind.lower()}/{name}: {error}") from None
    seen = {p.node or f"nodeclaim/{p.name}" for p in plans}
    deleting = [("NodeClaim", c.name, c.deletion_time) for c in snapshot.node_claims if c.deletion_time is not None]
    deleting += [("Node", n.name, n.deletion_time) for n in snapshot.nodes if n.deletion_time is not None and n.node_pool]
    for kind, name, at in deleting:
        assert at is not None
        found = plan(kind, name, at)
        key = found.node or f"nodeclaim/{found.name}"
        if key not in seen:
            seen.add(key)
            plans.append(found)
    return plans


def _without_deleted(snapshot: Snapshot, plans: Sequence[DeletionPlan], now: datetime) -> Snapshot:
    """The snapshot with the nodes being deleted marked so (no disruption candidates)."""
    import dataclasses

    going = {plan.node for plan in plans if plan.node}
    if not going:
        return snapshot
    nodes = tuple(n if n.name not in going or n.deleting else dataclasses.replace(n, deleting=True, deletion_time=now) for n in snapshot.nodes)
    return dataclasses.replace(snapshot, nodes=nodes)


def _when(moment: datetime | None, start: datetime) -> str:
    if moment is None:
        return "-"
    seconds = int((moment - start).total_seconds())
    minutes, seconds = divmod(seconds, 60)
    return f"+{minutes}m{seconds:02d}s" if minutes else f"+{seconds}s"


def render_deletions(plans: Sequence[DeletionPlan], *, wide: bool = False) -> str:
    """Each deletion's drain: one line on the deletion, the pods in the order they leave, the end."""
    lines: list[str] = []
    for plan in plans:
        lines.append("")
        grace = plan.to_dict()["terminationGracePeriod"]
        deadline = f"terminationGracePeriod {grace}: deadline {_when(plan.deadline, plan.deleted_at)}" if grace else "no terminationGracePeriod"
        what = f"{plan.kind.lower()}/{plan.name}"
        lines.append(
            f"DELETE {what} at {plan.deleted_at.isoformat().replace('+00:00', 'Z')}: node {plan.node or '-'}, NodePool {plan.node_pool or '-'}, {deadline}"
        )
        if plan.replacement_for:
            latest = f", by {_when(plan.drain_start_by, plan.deleted_at)} at the latest" if plan.drain_start_by else ""
            lines.append(
                f"  a replacement is launched first for {len(plan.replacement_for)} pod{'s' if len(plan.replacement_for) != 1 else ''}; "
                f"evictions start once it is Ready{latest} (shown from the deletion on)"
            )
        if plan.drain is not None and plan.drain.pods:
            rows = []
            for fate in plan.drain.pods:
                reason = fate.reason if wide or len(fate.reason) <= 80 else fate.reason[:77] + "..."
                outcome = fate.outcome + (f" (grace {fate.grace_seconds}s)" if fate.grace_seconds is not None else "")
                rows.append((_when(fate.at, plan.deleted_at), fate.pod, fate.group or "-", outcome, ", ".join(fate.blocked_by) or "-", reason))
            lines += ["  " + line for line in columns(("AFTER", "POD", "GROUP", "OUTCOME", "HELD BY", "REASON"), rows)]
        ended = f"instance terminated at {_when(plan.terminated_at, plan.deleted_at)}: " if plan.terminated_at is not None else ""
        lines.append(f"  {ended}{plan.outcome}")
    return "\n".join(lines) + ("\n" if lines else "")


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
