"""The scheduling core: decide which nodes to launch for pending pods.

``solve(SchedulingProblem) -> Plan``. See ``docs/scheduling.md`` for the algorithm.
"""

from joiner.domain.scheduling.ffd import ffd_cost, ffd_plan
from joiner.domain.scheduling.problem import SchedulingProblem
from joiner.domain.scheduling.solver import solve

__all__ = ["SchedulingProblem", "solve", "ffd_plan", "ffd_cost"]
