"""When the watcher wakes the scanner: Karpenter's batching window, measured from the first
pending pod.

A batch opens when a pod becomes pending and closes (the scanner is woken) when no new
pending pod has appeared for ``idle_seconds`` or ``max_seconds`` have passed since the
batch opened, whichever comes first: a burst of pods is planned together, a lone pod waits
about a second, and a steady trickle never delays the first pod by more than the maximum.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

__all__ = ["BatchWindow", "PendingBatch"]


@dataclass(frozen=True, slots=True)
class BatchWindow:
    """Karpenter's defaults: 1 s idle, 10 s maximum."""

    idle_seconds: float = 1.0
    max_seconds: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.idle_seconds <= self.max_seconds <= 300:
            raise ValueError(f"batch window: need 0 < idle ({self.idle_seconds}) <= max ({self.max_seconds}) <= 300 s")


@dataclass(frozen=True, slots=True)
class PendingBatch:
    """The pods (uids) that became pending since the scanner was last woken, when the first
    and the latest of them did."""

    pods: frozenset[str] = frozenset()
    first: datetime | None = None
    latest: datetime | None = None

    def add(self, uid: str, now: datetime) -> PendingBatch:
        """This batch with ``uid`` pending since ``now`` (a pod already in it changes nothing)."""
        if uid in self.pods:
            return self
        return replace(self, pods=self.pods | {uid}, first=self.first or now, latest=now)

    def due_at(self, window: BatchWindow) -> datetime | None:
        """When the scanner must be woken (None: nothing is waiting)."""
        if self.first is None or self.latest is None:
            return None
        return min(self.latest + timedelta(seconds=window.idle_seconds), self.first + timedelta(seconds=window.max_seconds))

    def is_due(self, now: datetime, window: BatchWindow) -> bool:
        due = self.due_at(window)
        return due is not None and now >= due
