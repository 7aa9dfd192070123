"""The scheduled disruption pass: decide, validate 15 s later, execute.

Every invocation (EventBridge, every minute), under the lease ``disruption`` so two
overlapping invocations never act twice:

1. read the cluster and the state with the provisioning round's reader (pods, nodes,
   DaemonSets, NodePools, NodeClasses, open claims, unavailable offerings) plus the
   PodDisruptionBudgets, the terminations in progress, and what earlier passes remembered
   (when each node was first seen empty, recent nominations);
2. if a command computed by an earlier pass is pending and at least
   :data:`~joiner.domain.disruption.VALIDATION_DELAY` old, re-simulate it on the fresh read
   (:func:`joiner.domain.disruption.validate`): a command whose result changed is dropped,
   the others are executed;
3. decide anew (:func:`joiner.domain.disruption.decide`, the executed nodes counting as
   going) and persist the commands as the pending ones for the next pass.

Executing a command: replacements are launched first through the interruption service's
:class:`~joiner.services.interruption.ClusterView` (the provisioning path: claim ids from
the pods' uids, limit reservations, Nominated events); then every node of the command
begins its termination (:func:`joiner.services.termination.begin_termination`) with the
replacement claims and ``wait_for_replacement``, so the drain starts only once the
replacements are Ready, evicts through the PDB-respecting Eviction API, and continues
through the work queue. The pending item is marked ``executing`` before the first action,
so a crash mid-way is finished (idempotently) by the next pass instead of re-validated.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain.disruption import (
    NOMINATION_WINDOW,
    VALIDATION_DELAY,
    Command,
    Decision,
    DisruptionInput,
    NodeFacts,
    ResolvedNodeClass,
    decide,
    validate,
)
from joiner.domain.resources import EMPTY
from joiner.observability import logger

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = [
    "COMMAND_KIND", "PENDING_ID", "EMPTY_KIND", "NOMINATION_KIND", "LEASE_NAME", "LEASE_TTL_SECONDS",
    "DisruptionSummary", "read_input", "run_disruption", "execute_command",
]

COMMAND_KIND = "DISRUPTION"
PENDING_ID = "pending"
EMPTY_KIND = "DISRUPTION_EMPTY"
NOMINATION_KIND = "NOMINATION"
LEASE_NAME = "disruption"
#: Longer than the function's 120 s timeout.
LEASE_TTL_SECONDS = 150
#: Pending commands older than this are stale whatever they say (a pass was missed).
PENDING_MAX_AGE = timedelta(minutes=10)


@dataclass(frozen=True)
class DisruptionSummary:
    """What one pass did."""

    status: str  # computed, waiting (pending command not yet validatable), busy (lease held)
    executed: tuple[Command, ...] = ()
    dropped: tuple[tuple[tuple[str, ...], str], ...] = ()
    pending: tuple[Command, ...] = ()
    blocked: int = 0
    simulations: int = 0
    decision_seconds: float = 0.0
    errors: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "executed": [c.to_dict() for c in self.executed],
            "dropped": [{"nodes": list(nodes), "reason": reason} for nodes, reason in self.dropped],
            "pending": [c.to_dict() for c in self.pending],
            "blocked": self.blocked,
            "simulations": self.simulations,
            "decisionSeconds": round(self.decision_seconds, 3),
            "errors": list(self.errors),
        }


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def read_input(runtime: Runtime, now: datetime) -> DisruptionInput:
    """The cluster, the state and what earlier passes remembered, as a domain input."""
    from joiner.domain.snapshot import SnapshotError, parse_pdb
    from joiner.services import provisioning as prov
    from joiner.services.registration import RegistrationResult
    from joiner.services.termination import TERMINATION_KIND

    work = prov._Round(runtime, now, owner=f"disruption/{runtime.invocation_id}")
    work.renew_lease = lambda: None  # type: ignore[method-assign]  # reads only: no provisioning lease
    work.read()
    work.resolve_classes()
    types = work.instance_types()
    work.compute_usage(RegistrationResult())
    state = runtime.state
    pdbs = []
    for raw in runtime.kube.list_pdbs():
        try:
            pdbs.append(parse_pdb(raw))
        except SnapshotError as error:
            logger.warning("skipping invalid PodDisruptionBudget", extra={"error": str(error)})
    snapshot = dataclasses.replace(work.snapshot, pdbs=tuple(sorted(pdbs, key=lambda p: (p.namespace, p.name))))

    terminating = {str(item.get("node")) for item in state.list_items(TERMINATION_KIND)}
    empty_since = {str(item.get("node")): _time(item.get("since")) for item in state.list_items(EMPTY_KIND)}
    nominated = {str(item.get("node")): _time(item.get("at")) for item in state.list_items(NOMINATION_KIND)}
    claims = {c.node_name: c for c in work.claims if c.node_name}
    facts: dict[str, NodeFacts] = {}
    for node in snapshot.nodes:
        claim = claims.get(node.name)
        facts[node.name] = NodeFacts(
            price=claim.price if claim is not None else None,
            initialized_at=claim.initialized_at if claim is not None else None,
            terminating=node.name in terminating,
            nominated_at=nominated.get(node.name),
            # never seen empty before: it counts as empty from now on
            empty_since=empty_since.get(node.name) or now,
        )
    classes = {}
    for name, env in sorted(getattr(work, "envs", {}).items()):
        if env.error:
            continue
        classes[name] = ResolvedNodeClass(subnets=frozenset(s.id for s in env.subnets), security_groups=frozenset(env.security_groups))
    usage = {name: work.in_use.get(name, EMPTY) + work.reserved.get(name, EMPTY) for name in sorted(work.pools)}
    return DisruptionInput(
        snapshot=snapshot,
        instance_types=types,
        now=now,
        facts=facts,
        node_classes=classes,
        in_flight=tuple(work.in_flight(work.claims)),
        unavailable=frozenset(work.unavailable),
        pool_usage=usage,
    )


def execute_command(runtime: Runtime, command: Command, inp: DisruptionInput, now: datetime) -> list[str]:
    """Launch the command's replacements, then begin every node's termination (drained
    once the replacements are Ready). Returns errors (the other nodes still go ahead)."""
    from joiner.domain.termination import reschedulable_pods
    from joiner.services.termination import TerminationBusy, begin_termination

    nodes = {n.name: n for n in inp.snapshot.nodes}
    pools = {p.name: p for p in inp.snapshot.node_pools}
    errors: list[str] = []
    claims: tuple[str, ...] = ()
    if command.replacements:
        view = _replacement_view(runtime, command, now)
        view.disrupted.update(command.nodes)
        view.disrupted.update(name for name, facts in inp.facts.items() if facts.terminating)
        pods = reschedulable_pods(p for p in inp.snapshot.pods if p.node_name in command.nodes)
        try:
            claims = view.launch_replacement(pods, now) if pods else ()
        except Exception as error:  # noqa: BLE001 - never drain without a replacement we promised
            runtime.count("DisruptionReplacementFailed", method=command.method)
            return [f"replacement launch failed: {type(error).__name__}: {error}"]
        if not claims:
            runtime.count("DisruptionReplacementFailed", method=command.method)
            return ["replacement launch produced no claim; nodes left alone"]
    for name in command.nodes:
        node = nodes.get(name)
        pool = pools.get(node.labels.get(wk.NODEPOOL, "")) if node is not None else None
        grace = pool.termination_grace_period if pool is not None else None
        try:
            begin_termination(
                runtime, name, f"disruption/{command.method}", now + grace if grace is not None else None, now,
                instance_id=node.instance_id if node is not None else None,
                claim_id=node.labels.get(wk.NODECLAIM) if node is not None else None,
                node_pool=pool.name if pool is not None else None,
                replacement_claims=claims,
                wait_for_replacement=bool(claims),
            )
        except TerminationBusy as error:
            errors.append(f"{name}: {error}")
    runtime.count("DisruptionCommandsExecuted", method=command.method)
    runtime.count("NodesDisrupted", len(command.nodes), method=command.method)
    logger.info("disruption command executed", extra={"command": command.to_dict(), "claims": list(claims)})
    return errors


def _replacement_view(runtime: Runtime, command: Command, now: datetime) -> Any:
    """A :class:`~joiner.services.interruption.ClusterView` whose launches may only use the
    command's replacement types: the ones the simulation found cheaper at their worst-case
    price, never the candidates' own types."""
    from joiner.services.interruption import ClusterView, _replacement_round

    view = ClusterView(runtime)
    work = _replacement_round(runtime, now)
    work.read()
    work.resolve_classes()
    work.instance_types()
    allowed = {name for r in command.replacements for name in r.instance_types}
    work.types_by_pool = {pool: tuple(t for t in types if t.name in allowed) for pool, types in work.types_by_pool.items()}
    work.type_index = {pool: {t.name: t for t in types} for pool, types in work.types_by_pool.items()}
    work.open_by_id = {c.claim_id: c for c in work.claims}
    view._in_flight = work.in_flight(work.open_by_id.values())
    view._all_nodes = work.nodes
    view._all_pods = work.snapshot.pods
    view._round = work
    return view


def _remember(runtime: Runtime, inp: DisruptionInput, decision: Decision, now: datetime) -> None:
    """Track since when candidates are empty and which nodes were just nominated."""
    state = runtime.state
    empty = set(decision.empty)
    for item in state.list_items(EMPTY_KIND):
        if str(item.get("node")) not in empty:
            state.delete_item(EMPTY_KIND, str(item.get("node")))
    for name in sorted(empty):
        state.put_item(EMPTY_KIND, name, {"node": name, "since": now.isoformat()}, if_absent=True)
    for name in decision.nominated:
        state.put_item(NOMINATION_KIND, name, {"node": name, "at": now.isoformat()}, expires_at=now + NOMINATION_WINDOW)


def run_disruption(runtime: Runtime, now: datetime | None = None, *, dry_run: bool = False) -> DisruptionSummary:
    """One disruption pass (see the module docstring). ``dry_run`` decides and validates
    but neither executes nor persists commands."""
    now = now or runtime.clock.now()
    state = runtime.state
    owner = f"disruption/{runtime.invocation_id}"
    if not state.acquire_lease(LEASE_NAME, owner, now, LEASE_TTL_SECONDS):
        runtime.count("DisruptionBusy")
        return DisruptionSummary("busy")
    try:
        return _pass(runtime, now, dry_run)
    finally:
        state.release_lease(LEASE_NAME, owner)


def _pass(runtime: Runtime, now: datetime, dry_run: bool) -> DisruptionSummary:
    state = runtime.state
    started = time.monotonic()
    inp = read_input(runtime, now)
    pending = state.get_item(COMMAND_KIND, PENDING_ID)
    executed: list[Command] = []
    dropped: list[tuple[tuple[str, ...], str]] = []
    errors: list[str] = []
    if pending is not None:
        computed_at = _time(pending.get("computedAt")) or now
        commands = [Command.from_state(c) for c in pending.get("commands", [])]
        if pending.get("status") == "executing":
            executed = commands  # a pass died mid-way: finish it (every step is idempotent)
        elif now - computed_at < VALIDATION_DELAY:
            return DisruptionSummary("waiting", pending=tuple(commands), decision_seconds=time.monotonic() - started)
        elif now - computed_at > PENDING_MAX_AGE:
            dropped = [(c.nodes, "stale: computed too long ago") for c in commands]
        else:
            for command in commands:
                fresh, why = validate(command, inp)
                if fresh is None:
                    dropped.append((command.nodes, why))
                else:
                    executed.append(fresh)
        if not dry_run:
            if executed:
                state.put_item(COMMAND_KIND, PENDING_ID, {**pending, "status": "executing", "commands": [c.to_state() for c in executed]})
                for command in executed:
                    errors += execute_command(runtime, command, inp, now)
            state.delete_item(COMMAND_KIND, PENDING_ID)
        for nodes, why in dropped:
            runtime.count("DisruptionCommandsDropped")
            logger.info("disruption command dropped at validation", extra={"nodes": list(nodes), "reason": why})

    going = {n for c in executed for n in c.nodes}
    facts = {name: dataclasses.replace(f, terminating=f.terminating or name in going) for name, f in inp.facts.items()}
    decision = decide(dataclasses.replace(inp, facts=facts))
    if not dry_run:
        _remember(runtime, inp, decision, now)
        if decision.commands:
            state.put_item(COMMAND_KIND, PENDING_ID, {"computedAt": now.isoformat(), "status": "pending", "commands": [c.to_state() for c in decision.commands]})
    seconds = time.monotonic() - started
    runtime.count("DisruptionDecisionSeconds", seconds, "Seconds")
    for command in decision.commands:
        runtime.count("DisruptionCommandsComputed", method=command.method)
    return DisruptionSummary(
        "computed", tuple(executed), tuple(dropped), decision.commands, len(decision.blocked), decision.simulations, seconds, tuple(errors),
    )


def pending_commands(runtime: Runtime) -> Sequence[Command]:
    """The commands waiting for validation (for tooling)."""
    item = runtime.state.get_item(COMMAND_KIND, PENDING_ID)
    return [Command.from_state(c) for c in (item or {}).get("commands", [])]
