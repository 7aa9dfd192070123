"""Leases that keep one invocation's work exclusive: the collaborator a planning round or a
termination step renews between its actions.

A lease is a DynamoDB item written with a condition (:meth:`joiner.ports.StatePort.acquire_lease`);
its holder renews it before it expires. Work that needs no lease (replacement launches, whose
safety comes from conditional reservations and claim ids derived from the pods) passes None.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from joiner.observability import logger

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = ["Lease", "RenewingLease"]


class Lease(Protocol):
    """A lease its holder keeps while it works."""

    def keep(self) -> None:
        """Renew the lease when renewal is due (cheap otherwise: call it between actions).
        What losing it means is the lease's own rule: a termination step's raises, a planning
        round's logs and goes on."""
        ...


class RenewingLease:
    """A lease taken elsewhere (``name`` held by ``owner``), renewed every ``renew_seconds`` of
    wall time for ``ttl_seconds`` more. Losing it is logged, not raised: the work it guards stays
    safe without it (a planning round's reservations and claim ids), the lease only spares a
    concurrent invocation the same work."""

    def __init__(self, runtime: Runtime, name: str, owner: str, *, ttl_seconds: int, renew_seconds: float) -> None:
        self.runtime, self.name, self.owner = runtime, name, owner
        self.ttl_seconds, self.renew_seconds = ttl_seconds, renew_seconds
        self.renewed = time.monotonic()

    def keep(self) -> None:
        if time.monotonic() - self.renewed < self.renew_seconds:
            return
        self.renewed = time.monotonic()
        try:
            if not self.runtime.state.acquire_lease(self.name, self.owner, self.runtime.clock.now(), self.ttl_seconds):
                logger.warning("lease taken over by another invocation", extra={"lease": self.name, "owner": self.owner})
        except Exception as error:  # noqa: BLE001 - logged: the guarded work stays safe without the lease
            logger.warning("renewing a lease failed", extra={"lease": self.name, "error": f"{type(error).__name__}: {error}"})
