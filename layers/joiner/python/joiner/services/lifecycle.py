"""The one owner of a NodeClaim's life: every state change and the one close path.

Each transition is one conditional write from the states :data:`joiner.domain.lifecycle.TRANSITIONS`
allows (a concurrent transition wins and the caller gets :class:`~joiner.ports.ClaimStateConflict`).
Closing a claim is always, in this order: terminate its instance if the instance's own tags
prove it is this cluster's (EC2 no longer knowing it is success), write ``closed``, release the
reservation, update the mirror. Each step is idempotent, so a caller that dies between two of
them leaves what any later close (or a scanner round, for a reservation) finishes. Nothing
else in the package writes ``closed`` or terminates instances
(``tests/unit/test_lifecycle_contract.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from joiner.domain.launch import CLUSTER_TAG
from joiner.domain.lifecycle import TransitionError, sources
from joiner.observability import logger
from joiner.ports import ClaimRecord, ClaimState, ClaimStateConflict, Ec2Error

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = ["ClosedClaim", "advance", "close_claim", "note_node_lost", "terminate_instance", "INSTANCE_GONE_CODES"]

#: Instance states in which nothing is left to terminate.
GONE_STATES = frozenset({"shutting-down", "terminated"})
#: EC2 error codes that mean the instance is already gone (or never was): termination succeeded.
INSTANCE_GONE_CODES = frozenset({"InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"})


@dataclass(frozen=True, slots=True)
class ClosedClaim:
    """What :func:`close_claim` did: the claim as it is now (None: no record), and whether this
    call closed it (False: it was closed already, or a concurrent transition won)."""

    claim: ClaimRecord | None
    closed_now: bool
    #: False when the instance's tags do not prove it is ours: nothing was terminated or closed
    owned: bool = True


def advance(runtime: Runtime, claim_id: str, target: ClaimState, *, expected: ClaimState | tuple[ClaimState, ...] | None = None, **fields: Any) -> ClaimRecord:
    """Move a claim to ``target`` (not ``closed``: see :func:`close_claim`) in one conditional
    write from the states the table allows (narrowed to ``expected`` when given), setting
    ``fields`` too. Raises :class:`~joiner.ports.ClaimStateConflict` when the claim is in
    another state (nothing written)."""
    if target is ClaimState.CLOSED:
        raise TransitionError("claims are closed through close_claim")
    allowed = sources(target)
    wanted = _as_states(expected, allowed)
    bad = [state for state in wanted if state not in allowed]
    if bad:
        raise TransitionError(f"no transition from {', '.join(bad)} to {target}")
    return runtime.state.update_claim(claim_id, expected_state=wanted, state=target, **fields)


def note_node_lost(runtime: Runtime, claim: ClaimRecord, lost_at: datetime | None) -> ClaimRecord:
    """Record when a registered claim's Node was first found gone (``None``: it is back), in
    one write conditional on the claim still being registered or initialized. Raises
    :class:`~joiner.ports.ClaimStateConflict` when it moved on (nothing written)."""
    return runtime.state.update_claim(claim.claim_id, expected_state=(ClaimState.REGISTERED, ClaimState.INITIALIZED), node_lost_at=lost_at)


def _as_states(expected: ClaimState | tuple[ClaimState, ...] | None, default: tuple[ClaimState, ...]) -> tuple[ClaimState, ...]:
    """``expected`` as a tuple of states; ``default`` when None."""
    if expected is None:
        return default
    return (expected,) if isinstance(expected, ClaimState) else tuple(expected)


def terminate_instance(runtime: Runtime, instance_id: str, *, path: str, **context: object) -> bool:
    """Terminate ``instance_id`` if its own EC2 tags name this cluster. True when it is gone
    (terminated now, already shutting down or terminated, or EC2 no longer knows it); False,
    counted and logged, when its tags do not prove it is ours (then nothing is done). Other
    EC2 errors propagate."""
    from joiner.services.ownership import refuse

    record = next((r for r in runtime.ec2.describe_instances([instance_id]) if r.instance_id == instance_id), None)
    if record is None or record.state in GONE_STATES:
        return True
    tags = record.tags
    if tags.get(CLUSTER_TAG) != runtime.settings.cluster_name:
        refuse(runtime, path, f"instance {instance_id} is not tagged {CLUSTER_TAG}={runtime.settings.cluster_name}", instance=instance_id, **context)
        return False
    try:
        runtime.ec2.terminate_instances([instance_id])
    except Ec2Error as error:
        if error.code not in INSTANCE_GONE_CODES and "NotFound" not in (error.code or ""):
            raise
    return True


def close_claim(
    runtime: Runtime,
    claim: ClaimRecord | str,
    reason: str,
    now: datetime,
    *,
    path: str,
    expected: ClaimState | tuple[ClaimState, ...] | None = None,
    node_pool: str = "",
    terminate: bool = True,
    mirror: bool = True,
) -> ClosedClaim:
    """Close a claim: its instance terminated (when ``terminate`` and it records one), the
    record ``closed`` with ``reason``, its reservation released, its mirror updated.

    ``claim``: the record as the caller read it, or its id (read first). ``expected``: close
    only from these states (a concurrent transition elsewhere wins: nothing is closed and the
    current record returned). ``node_pool``: the pool whose reservation to release when there
    is no record. ``terminate=False``: the caller has terminated the instance already (the
    drain's end). ``path`` names the caller in refusals and logs."""
    record = runtime.state.get_claim(claim) if isinstance(claim, str) else claim
    claim_id = claim if isinstance(claim, str) else claim.claim_id
    pool = record.node_pool if record is not None else node_pool
    if record is None:
        if pool:
            runtime.state.release_capacity(pool, claim_id)  # a reservation without a record holds nothing
        return ClosedClaim(None, False)
    if record.state == ClaimState.CLOSED:
        runtime.state.release_capacity(pool, claim_id)  # idempotent: finishes a close that died before it
        return ClosedClaim(record, False)
    states = _as_states(expected, sources(ClaimState.CLOSED))
    if record.state not in states:
        return ClosedClaim(record, False)
    if terminate and record.instance_id and not terminate_instance(runtime, record.instance_id, path=path, claim=claim_id):
        return ClosedClaim(record, False, owned=False)
    try:
        closed = runtime.state.update_claim(claim_id, expected_state=states, state=ClaimState.CLOSED, closed_at=now, reason=reason)
    except ClaimStateConflict as conflict:
        if conflict.current.state != ClaimState.CLOSED:
            logger.info("claim moved on before it was closed", extra={"claim": claim_id, "state": str(conflict.current.state), "path": path})
            return ClosedClaim(conflict.current, False)
        runtime.state.release_capacity(pool, claim_id)
        return ClosedClaim(conflict.current, False)
    runtime.state.release_capacity(pool, claim_id)
    if mirror:
        from joiner.services.nodeclaims import mirror_claim

        mirror_claim(runtime, closed)
    logger.info("claim closed", extra={"claim": claim_id, "reason": reason, "path": path, "instance": record.instance_id})
    return ClosedClaim(closed, True)
