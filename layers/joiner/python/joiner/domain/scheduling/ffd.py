"""Karpenter's packing as the baseline: first-fit-decreasing.

Pods by CPU then memory descending, each onto the first node (existing, in-flight, or
claim opened so far) that takes it, else a new claim; every claim finally launches as
the cheapest instance type that fits its pods. Same constraint handling as ``solve``.
"""

from __future__ import annotations

from joiner.domain.model import Plan
from joiner.domain.scheduling.context import Context
from joiner.domain.scheduling.problem import SchedulingProblem

__all__ = ["ffd_plan", "ffd_cost"]


def ffd_plan(problem: SchedulingProblem) -> Plan:
    from joiner.domain.scheduling.solver import run_engine

    return run_engine(Context(problem), optimize=False)[0]


def ffd_cost(problem: SchedulingProblem) -> float:
    """Hourly price of the first-fit-decreasing plan's new claims."""
    return ffd_plan(problem).cost_per_hour
