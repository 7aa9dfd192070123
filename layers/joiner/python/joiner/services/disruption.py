"""The scheduled disruption pass: decide, validate 15 s later, execute.

Every invocation (EventBridge, every minute), under the lease ``disruption`` so two
overlapping invocations never act twice:

1. read the cluster and the state with the provisioning round's reader (pods, nodes,
   DaemonSets, NodePools, NodeClasses, open claims, unavailable offerings) plus the
   PodDisruptionBudgets, the terminations in progress, and what earlier passes remembered
   (when each node was first seen empty, recent nominations); for drift, the possible
   candidates' instances (one batched DescribeInstances: image, subnet, security groups)
   and what their NodeClasses resolve to now (subnets and security groups as provisioning
   resolves them, the AMI per architecture in use). Data that cannot be read is unknown,
   never drift: it is logged and counted (``DisruptionDriftInputsUnknown``, dimension
   ``input``);
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain.amis import ami_key, node_variant
from joiner.domain.disruption import (
    DRIFT,
    NOMINATION_WINDOW,
    REPAIR,
    VALIDATION_DELAY,
    Command,
    Decision,
    DisruptionInput,
    LaunchInputs,
    NodeFacts,
    Replacement,
    ResolvedNodeClass,
    decide,
    unhealthy,
    validate,
)
from joiner.domain.model import InstanceType, Node
from joiner.domain.nodeclaims import disrupting_condition
from joiner.domain.ownership import not_owned_reason
from joiner.observability import logger
from joiner.ports import InstanceRecord, KubernetesError
from joiner.services.nodeclaims import mirror_claim
from joiner.services.ownership import refuse

if TYPE_CHECKING:
    from joiner.services.context import Runtime
    from joiner.services.replacement import ClusterView

__all__ = [
    "COMMAND_KIND",
    "PENDING_ID",
    "EMPTY_KIND",
    "NOMINATION_KIND",
    "LEASE_NAME",
    "LEASE_TTL_SECONDS",
    "DRIFT_UNKNOWN_METRIC",
    "DisruptionSummary",
    "read_input",
    "run_disruption",
    "execute_command",
]

COMMAND_KIND = "DISRUPTION"
PENDING_ID = "pending"
EMPTY_KIND = "DISRUPTION_EMPTY"
NOMINATION_KIND = "NOMINATION"
#: where single-node consolidation stopped: the next pass starts after that candidate
CURSOR_KIND = "DISRUPTION_CURSOR"
CURSOR_ID = "single-node"
LEASE_NAME = "disruption"
#: Longer than the function's 120 s timeout.
LEASE_TTL_SECONDS = 150
#: What a pass aims to take at most (a third of the function's 120 s timeout less the
#: handler's delete-to-drain step after it, well inside the minute between ticks: with one
#: reserved instance, a pass still running when the next tick fires delays it). The mirrors' catch-up gets what the reading and deciding left of it, and
#: at least :data:`MIN_MIRROR_SECONDS`; the next pass (a warm one takes seconds) writes the rest.
PASS_SECONDS = 35.0
MIN_MIRROR_SECONDS = 1.0
#: Pending commands older than this are stale whatever they say (a pass was missed).
PENDING_MAX_AGE = timedelta(minutes=10)
#: Counted (dimension ``input``: instance, ami) when drift data cannot be read.
DRIFT_UNKNOWN_METRIC = "DisruptionDriftInputsUnknown"
#: Decision events (``DisruptionBlocked``, ``Unconsolidatable``): the same message on the same
#: object is repeated at most this often, at most :data:`MAX_DECISION_EVENTS` per pass.
DECISION_EVENT_KIND = "DECISION_EVENT"
DECISION_EVENT_REPEAT = timedelta(minutes=15)
MAX_DECISION_EVENTS = 25
#: Blocked reasons a user can act on (the rest: initializing, nominated, terminating ...).
_BLOCKING_MARKERS = ("do-not-disrupt", "PodDisruptionBudget", "disruption budget", "would not schedule")


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
    consolidation_candidates: int = 0
    candidates_considered: int = 0

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
            "consolidationCandidates": self.consolidation_candidates,
            "candidatesConsidered": self.candidates_considered,
        }


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def read_input(runtime: Runtime, now: datetime) -> DisruptionInput:
    """The cluster, the state and what earlier passes remembered, as a domain input."""
    from joiner.domain.snapshot import SnapshotError, parse_pdb
    from joiner.services.planning_round import PlanningRound
    from joiner.services.registration import RegistrationResult
    from joiner.services.termination import TERMINATION_KIND

    work = PlanningRound.for_cluster(runtime, now)  # reads only: no provisioning lease
    types = work.types_by_pool
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
    drift_nodes = _drift_nodes(snapshot, work.pools, terminating)
    labelled = [n for n in snapshot.nodes if n.labels.get(wk.NODEPOOL)]
    instances = _describe_instances(runtime, labelled)
    launches = _launch_inputs(runtime, drift_nodes, instances)
    claimed_instances = {c.instance_id: c.instance_id for c in work.claims if c.instance_id}
    claim_ids = {c.claim_id: c.instance_id or "" for c in work.claims}
    facts: dict[str, NodeFacts] = {}
    for node in snapshot.nodes:
        claim = claims.get(node.name)
        not_owned = None
        if node.labels.get(wk.NODEPOOL):
            not_owned = _not_owned(runtime, node, instances, claimed_instances, claim_ids)
            if not_owned is not None:
                refuse(runtime, "disruption", not_owned, node=node.name)
        facts[node.name] = NodeFacts(
            price=claim.price if claim is not None else None,
            initialized_at=claim.initialized_at if claim is not None else None,
            terminating=node.name in terminating,
            nominated_at=nominated.get(node.name),
            # never seen empty before: it counts as empty from now on
            empty_since=empty_since.get(node.name) or now,
            launch=launches.get(node.name),
            not_owned=not_owned,
        )
    amis = _current_amis(runtime, work, [n for n in drift_nodes if n.name in launches and launches[n.name].image_id], types, now)
    classes = {}
    envs = work.envs
    for name in sorted(set(envs) | set(amis)):
        env = envs.get(name)
        resolved = env if env is not None and not env.error else None
        classes[name] = ResolvedNodeClass(
            subnets=frozenset(s.id for s in resolved.subnets) if resolved is not None else None,
            security_groups=frozenset(resolved.security_groups) if resolved is not None else None,
            ami_by_arch=amis.get(name, {}),
        )
    usage = {name: work.limit_usage(name) for name in sorted(work.pools)}
    return DisruptionInput(
        snapshot=snapshot,
        instance_types=types,
        now=now,
        facts=facts,
        node_classes=classes,
        in_flight=tuple(work.in_flight(work.claims)),
        unavailable=frozenset(work.unavailable),
        pool_usage=usage,
        single_node_after=_cursor(runtime),
    )


def _cursor(runtime: Runtime) -> str | None:
    """The candidate the previous pass's single-node consolidation judged last (a malformed
    item counts as none: the pass starts from the cheapest candidate)."""
    item = runtime.state.get_item(CURSOR_KIND, CURSOR_ID)
    node = item.get("node") if item else None
    return node if isinstance(node, str) and node else None


def _drift_nodes(snapshot: Any, pools: Mapping[str, Any], terminating: set[str]) -> list[Node]:
    """Nodes that may be drift candidates: Joiner's (their NodePool exists), Ready,
    initialized, not going, with an EC2 instance id."""
    return [
        node
        for node in snapshot.nodes
        if node.labels.get(wk.NODEPOOL) in pools
        and node.ready
        and node.labels.get(wk.INITIALIZED) == "true"
        and not node.deleting
        and node.name not in terminating
        and node.instance_id
    ]


def _describe_instances(runtime: Runtime, nodes: Sequence[Node]) -> dict[str, InstanceRecord] | None:
    """The nodes' instances by id (one batched DescribeInstances); None when the call failed."""
    ids = sorted({str(n.instance_id) for n in nodes if n.instance_id})
    if not ids:
        return {}
    try:
        return {r.instance_id: r for r in runtime.ec2.describe_instances(ids)}
    except Exception as error:  # noqa: BLE001 - unknown instances: no node is owned, no launch input drifts
        logger.warning(
            "describing the nodes' instances failed; no node is disrupted and no launch input drifts this pass",
            extra={"error": f"{type(error).__name__}: {error}", "nodes": len(ids)},
        )
        return None


def _not_owned(
    runtime: Runtime,
    node: Node,
    instances: Mapping[str, InstanceRecord] | None,
    claimed: Mapping[str, str],
    claim_ids: Mapping[str, str],
) -> str | None:
    """Why ``node`` is not provably Joiner's (see :mod:`joiner.domain.ownership`), or None.
    ``claimed``: instance ids the open claims record; ``claim_ids``: open claim id -> the
    instance it records ("" none yet), for an instance whose own ``joiner.dev/nodeclaim`` tag
    names a claim that has not recorded it."""
    if instances is None:
        return "its instance could not be described"
    instance_id = str(node.instance_id) if node.instance_id else None
    record = instances.get(instance_id) if instance_id else None
    claim_instance = claimed.get(instance_id) if instance_id else None
    if claim_instance is None and record is not None:
        claim_instance = claim_ids.get(record.tags.get(wk.NODECLAIM, ""))
    return not_owned_reason(instance_id, record.tags if record is not None else None, claim_instance, runtime.settings.cluster_name)


def _launch_inputs(runtime: Runtime, nodes: Sequence[Node], instances: Mapping[str, InstanceRecord] | None) -> dict[str, LaunchInputs]:
    """Per node name, its instance's image, subnet and security groups (from ``instances``,
    the batched DescribeInstances of :func:`_describe_instances`). A failed call or a
    missing instance leaves the node unknown.

    An instance reporting no security group is unknown too: an EC2 instance in a VPC always
    has one, so an empty list means the answer lacks them (emulators do), not a change."""
    if not nodes:
        return {}
    if instances is None:
        runtime.count(DRIFT_UNKNOWN_METRIC, len(nodes), input="instance")
        return {}
    by_id = instances
    result: dict[str, LaunchInputs] = {}
    missing: list[str] = []
    for node in nodes:
        record = by_id.get(str(node.instance_id))
        if record is None:
            missing.append(node.name)
            continue
        result[node.name] = LaunchInputs(
            image_id=record.image_id or None,
            subnet_id=record.subnet_id or None,
            security_groups=frozenset(record.security_group_ids) or None,
        )
    if missing:
        runtime.count(DRIFT_UNKNOWN_METRIC, len(missing), input="instance")
        logger.warning(
            "drift: instances not found; their nodes are not checked for AMI, subnet or security-group drift",
            extra={"nodes": missing[:20], "count": len(missing)},
        )
    return result


def _node_arch(node: Node, types: Mapping[str, InstanceType]) -> str | None:
    arch = wk.normalize_labels(dict(node.labels)).get(wk.ARCH)
    if arch:
        return arch
    instance_type = types.get(node.labels.get(wk.INSTANCE_TYPE, ""))
    requirement = instance_type.requirements.get(wk.ARCH) if instance_type is not None else None
    return requirement.any_value() if requirement is not None else None


def _current_amis(
    runtime: Runtime,
    work: Any,
    nodes: Sequence[Node],
    types: Mapping[str, tuple[InstanceType, ...]],
    now: datetime,
) -> dict[str, dict[str, str]]:
    """Per NodeClass, per architecture and AL2023 variant its nodes run (keyed by
    :func:`~joiner.domain.amis.ami_key`): the AMI a launch would use now
    (``resolve_ami``, as provisioning calls it; cached in ``runtime.resolved`` like the
    NodeClass's subnets). A failed lookup leaves that NodeClass and architecture unknown."""
    wanted: dict[str, set[tuple[str, str]]] = {}
    by_pool = {name: {t.name: t for t in pool_types} for name, pool_types in types.items()}
    for node in nodes:
        pool = work.pools[node.labels[wk.NODEPOOL]]
        arch = _node_arch(node, by_pool.get(pool.name, {}))
        if arch and pool.node_class in work.classes:
            wanted.setdefault(pool.node_class, set()).add((arch, node_variant(node, by_pool.get(pool.name, {}))))
    if not wanted:
        return {}
    try:
        version = runtime.cluster().version
    except Exception as error:  # noqa: BLE001
        runtime.count(DRIFT_UNKNOWN_METRIC, sum(len(a) for a in wanted.values()), input="ami")
        logger.warning("drift: reading the cluster version failed; AMI drift skipped this pass", extra={"error": f"{type(error).__name__}: {error}"})
        return {}
    result: dict[str, dict[str, str]] = {}
    for name in sorted(wanted):
        node_class = work.classes[name]
        for arch, variant in sorted(wanted[name]):
            key = ("ami", repr(node_class), version, arch, variant)
            ami = runtime.resolved.get(key, now)
            if ami is None:
                try:
                    ami = runtime.ec2.resolve_ami(node_class, version, arch, variant)
                except Exception as error:  # noqa: BLE001 - unknown AMI never causes drift
                    runtime.count(DRIFT_UNKNOWN_METRIC, input="ami")
                    logger.warning(
                        "drift: resolving the NodeClass's AMI failed; AMI drift skipped for it",
                        extra={"nodeClass": name, "arch": arch, "error": f"{type(error).__name__}: {error}"},
                    )
                    continue
                if not ami:
                    continue
                runtime.resolved.put(key, ami, now)
            result.setdefault(name, {})[ami_key(arch, variant)] = str(ami)
    return result


def execute_command(runtime: Runtime, command: Command, inp: DisruptionInput, now: datetime) -> list[str]:
    """Launch the command's replacements, then begin every node's termination (drained
    once the replacements are Ready). Returns errors (the other nodes still go ahead).

    A static NodePool's replacement is a replica of that pool (launched whatever the pods
    need). A repair goes ahead when its replacements cannot be launched (the node is broken:
    its pods wait for capacity instead), and its drain deadline is the repair time plus the
    NodePool's terminationGracePeriod (none: at once, as Karpenter's repair)."""
    from joiner.domain.termination import reschedulable_pods
    from joiner.services.termination import TerminationBusy, TerminationRequest, begin_termination

    nodes = {n.name: n for n in inp.snapshot.nodes}
    pools = {p.name: p for p in inp.snapshot.node_pools}
    errors: list[str] = []
    claims: tuple[str, ...] = ()
    forced = command.method == REPAIR
    static = [r for r in command.replacements if r.node_pool in pools and pools[r.node_pool].static]
    dynamic = [r for r in command.replacements if r not in static]
    if dynamic:
        view = _replacement_view(runtime, command, now)
        going = (*command.nodes, *(name for name, facts in inp.facts.items() if facts.terminating))
        pods = reschedulable_pods(p for p in inp.snapshot.pods if p.node_name in command.nodes)
        failure = ""
        try:
            claims = view.launch_replacement(pods, now, excluding=going) if pods else ()
            if not claims:
                failure = "replacement launch produced no claim"
        except Exception as error:  # noqa: BLE001 - never drain without a replacement we promised
            failure = f"replacement launch failed: {type(error).__name__}: {error}"
        if failure:
            runtime.count("DisruptionReplacementFailed", method=command.method)
            if not forced:
                return [failure if "failed" in failure else f"{failure}; nodes left alone"]
            errors.append(f"{failure}; repairing without it")
    if static:
        failure = ""
        try:
            launched = _launch_static_replacements(runtime, command, static, now)
            claims += launched
            if len(launched) < len(static):
                failure = f"{len(static) - len(launched)} replacement replica(s) not launched"
        except Exception as error:  # noqa: BLE001 - never drain without a replacement we promised
            failure = f"replacement replica launch failed: {type(error).__name__}: {error}"
        if failure:
            runtime.count("DisruptionReplacementFailed", method=command.method)
            if command.method == DRIFT:
                return [f"{failure}; nodes left alone"]
            errors.append(failure)
    for name in command.nodes:
        node = nodes.get(name)
        pool = pools.get(node.labels.get(wk.NODEPOOL, "")) if node is not None else None
        grace = pool.termination_grace_period if pool is not None else None
        deadline = now + grace if grace is not None else (now if forced else None)
        if forced and node is not None:
            _record_repair(runtime, node, pool.name if pool is not None else "", now)
        try:
            begin_termination(
                runtime,
                TerminationRequest(
                    name,
                    f"disruption/{command.method}",
                    deadline,
                    instance_id=node.instance_id if node is not None else None,
                    claim_id=node.labels.get(wk.NODECLAIM) if node is not None else None,
                    node_pool=pool.name if pool is not None else None,
                    replacement_claims=claims,
                    wait_for_replacement=bool(claims),
                ),
                now,
            )
            mirror_claim(
                runtime,
                node.labels.get(wk.NODECLAIM) if node is not None else None,
                condition=disrupting_condition(f"disruption/{command.method}", command.reason),
            )
        except TerminationBusy as error:
            errors.append(f"{name}: {error}")
    runtime.count("DisruptionCommandsExecuted", method=command.method)
    runtime.count("NodesDisrupted", len(command.nodes), method=command.method)
    logger.info("disruption command executed", extra={"command": command.to_dict(), "claims": list(claims)})
    return errors


def _record_repair(runtime: Runtime, node: Node, pool: str, now: datetime) -> None:
    """The ``NodeRepair`` event on the Node and the metrics saying which condition and for how
    long (``NodesRepaired`` and ``NodeRepairUnhealthySeconds``, dimension ``condition``)."""
    finding = unhealthy(node)
    if finding is None:
        return
    condition = f"{finding.condition}={finding.status}"
    runtime.count("NodesRepaired", condition=condition, nodePool=pool)
    runtime.count("NodeRepairUnhealthySeconds", max(0.0, (now - finding.since).total_seconds()), "Seconds", condition=condition)
    logger.warning(
        "repairing an unhealthy node",
        extra={
            "node": node.name,
            "nodePool": pool,
            "condition": condition,
            "since": finding.since.isoformat(),
            "repairAfterSeconds": finding.after.total_seconds(),
        },
    )
    involved = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name}}
    try:
        runtime.kube.create_event(involved, "NodeRepair", f"replacing the node: {finding.describe(now)}", "Warning")
    except KubernetesError as error:
        logger.warning("repair event not recorded", extra={"node": node.name, "error": str(error)})


def _launch_static_replacements(runtime: Runtime, command: Command, replacements: Sequence[Replacement], now: datetime) -> tuple[str, ...]:
    """One replica of each replacement's static NodePool, through the replacement seam."""
    from joiner.services.replacement import ClusterView

    return ClusterView(runtime).launch_static_replicas([r.node_pool for r in replacements], now, excluding=command.nodes)


def _replacement_view(runtime: Runtime, command: Command, now: datetime) -> ClusterView:
    """A :class:`~joiner.services.interruption.ClusterView` whose launches may only use the
    command's replacement types: the ones the simulation found cheaper at their worst-case
    price, never the candidates' own types."""
    from joiner.services.planning_round import PlanningRound
    from joiner.services.replacement import ClusterView

    view = ClusterView(runtime)
    work = PlanningRound.for_cluster(runtime, now)
    work.only_types(name for r in command.replacements for name in r.instance_types)
    view.plan_with(work)
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


def _explain(runtime: Runtime, decision: Decision, now: datetime) -> None:
    """Kubernetes events saying why nodes are not disrupted: ``DisruptionBlocked`` on the Node
    (do-not-disrupt, a PodDisruptionBudget, pods with nowhere to go) and on its NodePool when
    a disruption budget held nodes back; ``Unconsolidatable`` on a Node consolidation
    declined (not cheaper enough, no replacement). Rate-limited through the state table; an
    API error costs the event, never the pass."""
    wanted: list[tuple[str, str, str, str]] = []  # (kind, name, reason, message)
    held_back: dict[str, int] = {}
    for item in decision.blocked:
        if not any(marker in item.reason for marker in _BLOCKING_MARKERS):
            continue
        wanted.append(("Node", item.node, "DisruptionBlocked", item.reason))
        if "disruption budget of nodepool " in item.reason:
            pool = item.reason.split("disruption budget of nodepool ", 1)[1].split(" ", 1)[0]
            held_back[pool] = held_back.get(pool, 0) + 1
    for pool, count in sorted(held_back.items()):
        wanted.append(("NodePool", pool, "DisruptionBlocked", f"the disruption budget held back {count} node(s) this pass"))
    wanted += [("Node", item.node, "Unconsolidatable", item.reason) for item in decision.unconsolidatable]
    wanted = [("Node", item.node, "NodeRepairBlocked", item.reason) for item in decision.repair_blocked] + wanted
    sent = 0
    for kind, name, reason, message in wanted:
        if sent >= MAX_DECISION_EVENTS:
            break
        key = f"{kind}.{name}.{reason}"
        previous = runtime.state.get_item(DECISION_EVENT_KIND, key)
        if previous and previous.get("message") == message and (_time(previous.get("at")) or now) > now - DECISION_EVENT_REPEAT:
            continue
        involved = (
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
            if kind == "Node"
            else {"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": name}}
        )
        try:
            runtime.kube.create_event(involved, reason, message, "Warning" if reason == "NodeRepairBlocked" else "Normal")
        except KubernetesError as error:
            logger.warning("decision event not recorded", extra={"object": f"{kind}/{name}", "error": str(error)})
            continue
        runtime.state.put_item(DECISION_EVENT_KIND, key, {"message": message, "at": now.isoformat()}, expires_at=now + 4 * DECISION_EVENT_REPEAT)
        runtime.count("DisruptionDecisionEvents", reason=reason)
        sent += 1


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
        if decision.single_node_last is not None and decision.single_node_last != inp.single_node_after:
            state.put_item(CURSOR_KIND, CURSOR_ID, {"node": decision.single_node_last, "at": now.isoformat()})
        _explain(runtime, decision, now)
        if decision.commands:
            state.put_item(
                COMMAND_KIND, PENDING_ID, {"computedAt": now.isoformat(), "status": "pending", "commands": [c.to_state() for c in decision.commands]}
            )
        _mirror(runtime, inp, decision, now, seconds=PASS_SECONDS - (time.monotonic() - started))  # last: its catch-up may take a while
    seconds = time.monotonic() - started
    if decision.commands or decision.blocked or decision.simulations:  # a decision about something
        runtime.count("DisruptionDecisionSeconds", seconds, "Seconds")
    for command in decision.commands:
        runtime.count("DisruptionCommandsComputed", method=command.method)
    return DisruptionSummary(
        "computed",
        tuple(executed),
        tuple(dropped),
        decision.commands,
        len(decision.blocked),
        decision.simulations,
        seconds,
        tuple(errors),
        decision.consolidation_candidates,
        decision.candidates_considered,
    )


def _mirror(runtime: Runtime, inp: DisruptionInput, decision: Decision, now: datetime, *, seconds: float) -> None:
    """The NodeClaim mirrors, with each candidate's ``Drifted`` and ``Consolidatable``
    standing (:mod:`joiner.services.nodeclaims`; best-effort, never fails the pass), written
    for ``seconds`` (at least :data:`MIN_MIRROR_SECONDS`, at most a catch-up's)."""
    from joiner.domain.nodeclaims import MirrorCondition
    from joiner.services.nodeclaims import CATCH_UP_SYNC_SECONDS, sync_node_claims

    claim_of = {node.name: node.labels.get(wk.NODECLAIM) for node in inp.snapshot.nodes}
    findings: dict[str, list[MirrorCondition]] = {}
    for node, drift, consolidatable in decision.standing:
        claim_id = claim_of.get(node)
        if not claim_id:
            continue
        findings[claim_id] = [
            MirrorCondition("Drifted", "True", "Drifted", drift, now) if drift else MirrorCondition("Drifted", "False", "NotDrifted", "", now),
            MirrorCondition("Consolidatable", "True" if consolidatable else "False", "Consolidatable" if consolidatable else "NotConsolidatable", "", now),
        ]
    try:
        sync_node_claims(runtime, findings=findings, seconds=min(CATCH_UP_SYNC_SECONDS, max(MIN_MIRROR_SECONDS, seconds)))
    except Exception:  # noqa: BLE001 - a mirror must never fail a pass
        logger.exception("nodeclaim mirror sync failed")


def pending_commands(runtime: Runtime) -> Sequence[Command]:
    """The commands waiting for validation (for tooling)."""
    item = runtime.state.get_item(COMMAND_KIND, PENDING_ID)
    return [Command.from_state(c) for c in (item or {}).get("commands", [])]
