"""A NodeClaim's life as a table: its states and every transition allowed between them.

``reserved`` (limit reserved, record written) -> ``launched`` (CreateFleet returned an
instance) -> ``registered`` (its Node exists) -> ``initialized`` (Ready, startup taints gone);
any open state -> ``terminating`` (drain under way) and -> ``closed`` (capacity gone, or never
launched). ``closed`` is final. :mod:`joiner.services.lifecycle` makes each transition one
conditional write from exactly the states this table allows.
"""

from __future__ import annotations

from collections.abc import Mapping

from joiner.ports import ClaimState

__all__ = ["TRANSITIONS", "OPEN_STATES", "sources", "allowed", "TransitionError"]

#: state -> the states a claim may move to from it
TRANSITIONS: Mapping[ClaimState, frozenset[ClaimState]] = {
    ClaimState.RESERVED: frozenset({ClaimState.LAUNCHED, ClaimState.TERMINATING, ClaimState.CLOSED}),
    ClaimState.LAUNCHED: frozenset({ClaimState.REGISTERED, ClaimState.TERMINATING, ClaimState.CLOSED}),
    ClaimState.REGISTERED: frozenset({ClaimState.INITIALIZED, ClaimState.TERMINATING, ClaimState.CLOSED}),
    ClaimState.INITIALIZED: frozenset({ClaimState.TERMINATING, ClaimState.CLOSED}),
    ClaimState.TERMINATING: frozenset({ClaimState.CLOSED}),
    ClaimState.CLOSED: frozenset(),
}

#: every state but ``closed``, in lifecycle order
OPEN_STATES: tuple[ClaimState, ...] = tuple(s for s in ClaimState if s is not ClaimState.CLOSED)


class TransitionError(ValueError):
    """A transition the table does not allow (a bug in the caller, never a race)."""


def sources(target: ClaimState) -> tuple[ClaimState, ...]:
    """The states from which a claim may move to ``target``, in lifecycle order."""
    return tuple(state for state in ClaimState if target in TRANSITIONS[state])


def allowed(current: str, target: ClaimState) -> bool:
    """Whether a claim in ``current`` may move to ``target``."""
    try:
        return target in TRANSITIONS[ClaimState(current)]
    except ValueError:
        return False
