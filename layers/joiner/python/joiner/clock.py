"""The clocks behind :class:`joiner.ports.Clock`: the wall clock every function runs on, and a
fixed one for reading the state as of a given moment (``joiner status --at``). The only module
that defines a clock class (the test world's simulated clock aside)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["SystemClock", "FixedClock"]


class SystemClock:
    """The wall clock, timezone-aware UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class FixedClock:
    """Always the same moment."""

    moment: datetime

    def now(self) -> datetime:
        return self.moment
