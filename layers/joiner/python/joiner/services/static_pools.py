"""Static NodePools (``spec.replicas``, Karpenter's StaticCapacity): a fixed number of nodes
whatever the pods need.

The scanner brings every static NodePool up to its replicas each round
(:func:`provision_static`); the disruption pass removes a surplus and replaces a repaired or
drifted replica (:func:`launch_static_replicas`). A replica's claim id derives from its
NodePool and its replica index (:func:`static_identity`), so a retried launch of the same
replica reuses its id; replicas launch through the :class:`~joiner.services.launcher.Launcher`
(limit reservations, claim records) like any claim, with no pods.
"""

from __future__ import annotations

from joiner.domain import labels as wk
from joiner.domain.model import NodeClaimPlan, NodePool
from joiner.domain.resources import EMPTY
from joiner.observability import logger
from joiner.ports import ClaimState
from joiner.services.launcher import MAX_LAUNCH_ATTEMPTS, Launcher, LaunchJob, LaunchOutcome, give_up, run_parallel
from joiner.services.planning_round import PlanningRound

__all__ = ["static_identity", "live_replicas", "launch_static_replicas", "provision_static"]


def static_identity(index: int) -> tuple[str, ...]:
    """What a static NodePool's replica ``index`` claim id derives from (with the pool and the
    generation, :func:`~joiner.services.launcher.claim_id_for`): a retried launch of the same replica reuses its id."""
    return (f"static-replica/{index}",)


def _static_plan(work: PlanningRound, pool: NodePool) -> NodeClaimPlan | None:
    """One replica of static ``pool`` as a claim plan (:func:`joiner.domain.disruption.static_replica`)."""
    from joiner.domain.disruption import static_replica

    replica = static_replica(pool, work.types_by_pool.get(pool.name, ()), frozenset(work.unavailable))
    if replica is None:
        return None
    return NodeClaimPlan(
        node_pool=pool.name,
        instance_types=replica.instance_types,
        zones=replica.zones,
        capacity_types=replica.capacity_types,
        pods=(),
        price=replica.price,
        requirements=pool.template_requirements(),
        requests=EMPTY,
    )


def live_replicas(work: PlanningRound, pool: NodePool) -> int:
    """Replicas static ``pool`` has now: its open claims not going away (reserved, launched,
    registered, initialized), plus any of its Nodes not being deleted that no open claim
    records (so the scanner and the disruption pass count alike)."""
    open_claims = {
        c.claim_id
        for c in work.open_by_id.values()
        if c.node_pool == pool.name and c.state not in (ClaimState.CLOSED, ClaimState.TERMINATING) and c.claim_id not in work.retiring_claims
    }
    recorded = {c.claim_id for c in work.open_by_id.values()}
    unclaimed = sum(
        1
        for node in work.nodes
        if node.labels.get(wk.NODEPOOL) == pool.name and not node.deleting and node.labels.get(wk.NODECLAIM) not in recorded and not node.disrupted
    )
    return len(open_claims) + unclaimed


def launch_static_replicas(launcher: Launcher, pool: NodePool, count: int) -> list[str]:
    """Launch ``count`` replicas of static ``pool`` (claims without pods), each under the
    lowest replica index no open claim holds, within ``limits.nodes``. A capacity error is
    retried at once on the remaining offerings (the same claim ids); a replica that cannot
    launch is closed, reported on the NodePool, and tried again by the next round. Returns
    the claim ids launched."""
    work = launcher.work
    launched: list[str] = []
    if count <= 0 or pool.deleting:
        return launched
    identities: list[tuple[str, ...]] = []
    for index in range(count + len(work.open_by_id) + 1):
        identity = static_identity(index)
        _, existing = launcher.claim_identity(pool.name, identity)
        if existing is None:
            identities.append(identity)
            if len(identities) == count:
                break
    pool_obj = work.pools_raw.get(pool.name) or {"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": pool.name}}
    retrying: dict[tuple[str, ...], LaunchOutcome] = {}  # replicas that failed on capacity, to try on other offerings
    for wave in range(MAX_LAUNCH_ATTEMPTS):
        plan = _static_plan(work, pool)
        jobs: list[tuple[tuple[str, ...], LaunchJob]] = []
        for identity in identities if plan is not None else ():
            job = launcher.prepare(plan, {}, identity=identity) if plan is not None else None
            if job is not None:
                jobs.append((identity, job))
                retrying.pop(identity, None)
        for outcome in retrying.values():  # nothing left to try: closed, the next round starts a new generation
            give_up(launcher, outcome, report_pods=False)
        if plan is None:
            work.emit_event(
                pool_obj,
                "StaticReplicasNotLaunched",
                f"{len(identities)} replica(s) missing: no instance type of the NodePool has an available offering",
                "Warning",
            )
            break
        launcher.keep_lease()
        outcomes = run_parallel(launcher.launch, [job for _, job in jobs], launcher.keep_lease)
        by_claim = {job.claim_id: identity for identity, job in jobs}
        retrying = {}
        for outcome in outcomes:
            if outcome.capacity_errors:
                launcher.mark_unavailable(outcome.capacity_errors)
            if outcome.launched is not None:
                try:
                    launcher.record_launch(outcome)
                except Exception as error:  # noqa: BLE001 - the instance exists; the adapter's tag guard and gc find it
                    logger.error(
                        "static replica launched but recording failed",
                        extra={"claim": outcome.launched.claim_id, "instance": outcome.launched.instance_id, "error": str(error)},
                    )
                    launcher.launched.append(outcome.launched)
                launched.append(outcome.launched.claim_id)
            elif outcome.capacity_failure and wave < MAX_LAUNCH_ATTEMPTS - 1:
                retrying[by_claim[outcome.job.claim_id]] = outcome
            else:
                give_up(launcher, outcome, report_pods=False)
                if outcome.failure is not None:
                    work.emit_event(
                        pool_obj, "StaticReplicasNotLaunched", f"replica {outcome.job.claim_id}: {outcome.failure.reason}: {outcome.failure.message}", "Warning"
                    )
        identities = list(retrying)
        if not identities:
            break
    if launched:
        work.runtime.count("StaticReplicasLaunched", len(launched), nodePool=pool.name)
    return launched


def provision_static(launcher: Launcher) -> None:
    """Bring every static NodePool of the launcher's round up to ``spec.replicas`` whatever the
    pods need (Karpenter's StaticCapacity); the disruption pass removes a surplus."""
    work = launcher.work
    for name in sorted(work.pools):
        pool = work.pools[name]
        if pool.replicas is None or pool.deleting or work.pool_problem(pool):
            continue
        missing = pool.replicas - live_replicas(work, pool)
        if missing > 0:
            logger.info("static nodepool: launching replicas", extra={"nodepool": name, "launching": missing, "replicas": pool.replicas})
            launch_static_replicas(launcher, pool, missing)
