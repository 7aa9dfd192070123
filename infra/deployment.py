"""The deployment's numbers, without the CDK: the functions (timeout, memory, concurrency), the
queues' redrive and visibility, the interruption rules' event patterns.

The constructs (functions.py, queues.py, work_queue.py, ingestion.py) are built from them; the
local test world (``testworld.stack``, ``testworld.simulator``) creates the same queues and
routing and gives each function its deployed timeout, reading them from here. This module
imports only the standard library, so the demo needs no CDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BATCHING_WINDOW_SECONDS",
    "FUNCTION_SPECS",
    "INTERRUPTION_RULES",
    "INTERRUPTION_VISIBILITY_SECONDS",
    "MAX_RECEIVE_COUNT",
    "RESPONSIVE_ONLY",
    "SPECS_BY_NAME",
    "VISIBILITY_MARGIN_SECONDS",
    "WORK_MAX_RECEIVE_COUNT",
    "WORK_VISIBILITY_SECONDS",
    "FunctionSpec",
    "InterruptionRule",
    "specs_for_mode",
    "visibility_seconds",
]

# ---------------------------------------------------------------- functions


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """One function. ``reserved_concurrency`` 1 where two overlapping runs would act on the
    same decision twice (a scan, a consolidation, a sweep); ``sqs_max_concurrency`` caps
    queue consumers without reserving account concurrency."""

    name: str
    description: str
    timeout_seconds: int
    memory_mb: int
    reserved_concurrency: int | None = None
    sqs_max_concurrency: int | None = None


FUNCTION_SPECS: tuple[FunctionSpec, ...] = (
    FunctionSpec("scanner", "Pending-pod scan: plans and launches nodes", 75, 1024, reserved_concurrency=1),
    FunctionSpec("interruption", "Spot interruptions, rebalance, state changes, scheduled maintenance", 30, 512, sqs_max_concurrency=10),
    FunctionSpec("termination", "Cordon, drain and terminate nodes (continued through the work queue)", 60, 512, sqs_max_concurrency=5),
    # CPU-bound (its simulations): 1,769 MB buys Lambda's whole vCPU, so a pass over 5,000
    # nodes stays within a third of its timeout for about the same GB-seconds.
    FunctionSpec("disruption", "Consolidation, expiry and drift", 120, 1769, reserved_concurrency=1),
    FunctionSpec("gc", "Garbage collection: leaked instances, orphaned nodes, stale launch templates", 120, 512, reserved_concurrency=1),
    # Responsive mode only: waits on a pod watch (its CPU share at 128 MB is plenty for JSON
    # lines) for 55 s of each minute and wakes the scanner; timeout = window + exit reserve.
    FunctionSpec("watcher", "Watches for pending pods and wakes the scanner (responsive mode)", 62, 128, reserved_concurrency=1),
)
#: Functions deployed only in responsive mode.
RESPONSIVE_ONLY: frozenset[str] = frozenset({"watcher"})


def specs_for_mode(scanner_mode: str) -> tuple[FunctionSpec, ...]:
    """The functions a deployment in ``scanner_mode`` has (economy: no watcher)."""
    return tuple(spec for spec in FUNCTION_SPECS if scanner_mode == "responsive" or spec.name not in RESPONSIVE_ONLY)


SPECS_BY_NAME: Mapping[str, FunctionSpec] = {spec.name: spec for spec in FUNCTION_SPECS}

#: Small: interruption warnings give two minutes; a second of batching costs nothing there.
BATCHING_WINDOW_SECONDS = 1

# ---------------------------------------------------------------- queues

#: A message that failed this many receives goes to the dead-letter queue.
MAX_RECEIVE_COUNT = 5
#: Seconds past the consumer's timeout (and the batching window) before a message comes back.
VISIBILITY_MARGIN_SECONDS = 5
#: A continuation is dead-lettered after this many receives. The termination handler makes a
#: message received again invisible for longer each time (20 s, 20 s, 40 s, 80 s, then 120 s:
#: joiner.services.termination.received_visibility), so a continuation failing on an outage
#: of DynamoDB, the Kubernetes API or EC2 is retried for 42 minutes before it is
#: dead-lettered (joiner.services.termination.WORK_MAX_RECEIVES; a test compares).
WORK_MAX_RECEIVE_COUNT = 24


def visibility_seconds(consumer_timeout_seconds: int, batching_window_seconds: int = BATCHING_WINDOW_SECONDS) -> int:
    """The function timeout plus the batching window plus :data:`VISIBILITY_MARGIN_SECONDS`
    (why so short: :func:`infra.queues.visibility_timeout_for`)."""
    return consumer_timeout_seconds + batching_window_seconds + VISIBILITY_MARGIN_SECONDS


#: The interruption queue's visibility timeout (its consumer is the interruption function).
INTERRUPTION_VISIBILITY_SECONDS = visibility_seconds(SPECS_BY_NAME["interruption"].timeout_seconds)
#: The work queue's visibility timeout (its consumer is the termination function).
WORK_VISIBILITY_SECONDS = visibility_seconds(SPECS_BY_NAME["termination"].timeout_seconds)

# ---------------------------------------------------------------- interruption rules


@dataclass(frozen=True, slots=True)
class InterruptionRule:
    construct_id: str
    description: str
    source: str
    #: one detail-type, or several that name the same event
    detail_type: str | tuple[str, ...]
    detail: dict[str, Any] | None = None

    @property
    def detail_types(self) -> list[str]:
        return [self.detail_type] if isinstance(self.detail_type, str) else list(self.detail_type)


INTERRUPTION_RULES: tuple[InterruptionRule, ...] = (
    InterruptionRule("SpotInterruptionRule", "EC2 spot interruption warnings (2 minutes' notice)", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    InterruptionRule("RebalanceRule", "EC2 rebalance recommendations (elevated spot interruption risk)", "aws.ec2", "EC2 Instance Rebalance Recommendation"),
    InterruptionRule(
        "StateChangeRule",
        "EC2 instances stopping or terminating outside Joiner",
        "aws.ec2",
        "EC2 Instance State-change Notification",
        {"state": ["stopping", "stopped", "shutting-down", "terminated"]},
    ),
    InterruptionRule(
        "CapacityReservationInterruptionRule",
        "EC2 interruptible capacity reservation reclaiming an instance",
        "aws.ec2",
        "EC2 Capacity Reservation Instance Interruption Warning",
    ),
    # AWS documents this event under both names (EC2 user guide, EventBridge event reference).
    InterruptionRule(
        "CapacityBlockExpirationRule",
        "EC2 Capacity Block ending (its instances terminate 10 minutes later)",
        "aws.ec2",
        ("Capacity Block Reservation Expiration Warning", "Capacity Block Expiration Warning"),
    ),
    InterruptionRule(
        "ScheduledChangeRule",
        "AWS Health scheduled maintenance for EC2 instances",
        "aws.health",
        "AWS Health Event",
        {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
    ),
)
