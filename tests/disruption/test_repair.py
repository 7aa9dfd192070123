"""Node auto repair in the disruption decision: EKS's repair times per condition, Karpenter's
20 % rule per NodePool, the per-NodePool opt-out, forcefulness (no budget, do-not-disrupt or
blocking PodDisruptionBudget holds a repair back) and validation."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.disruption import (
    MAX_UNHEALTHY_PERCENT,
    REPAIR,
    REPAIR_POLICIES,
    Command,
    repair_allowed,
    unhealthy,
    validate,
)
from joiner.domain.model import Node, NodeCondition
from tests.disruption.builders import T0, disruption_input, managed_node, pdb, pool, run, running_pod, snapshot

MINUTE = timedelta(minutes=1)


def sick(name: str, condition: str = "Ready", status: str = "Unknown", since: timedelta = 31 * MINUTE, **kwargs: Any) -> dict[str, Any]:
    """A managed node whose ``condition`` has been ``status`` for ``since`` at T0."""
    node = managed_node(name, **kwargs)
    conditions = [c for c in node["status"]["conditions"] if c["type"] != condition]
    conditions.append({"type": condition, "status": status, "lastTransitionTime": (T0 - since).isoformat()})
    node["status"]["conditions"] = conditions
    return node


def healthy(count: int, prefix: str = "ok") -> list[dict[str, Any]]:
    return [managed_node(f"{prefix}{i:02d}") for i in range(count)]


@pytest.mark.parametrize(
    ("condition", "status", "after"),
    [
        ("Ready", "False", 30),
        ("Ready", "Unknown", 30),
        ("AcceleratedHardwareReady", "False", 10),
        ("ContainerRuntimeReady", "False", 30),
        ("KernelReady", "False", 30),
        ("NetworkingReady", "False", 30),
        ("StorageReady", "False", 30),
    ],
)
def test_each_condition_is_repaired_after_its_eks_repair_time_and_not_before(condition: str, status: str, after: int) -> None:
    objects = [pool(), *healthy(9)]
    early = run(*objects, sick("bad", condition, status, (after - 1) * MINUTE))
    assert all(c.method != REPAIR for c in early.commands)
    (command,) = run(*objects, sick("bad", condition, status, after * MINUTE)).commands
    assert (command.method, command.nodes) == (REPAIR, ("bad",))
    assert f"{condition}={status} for {after}m (repair after {after}m)" in command.reason


def test_healthy_statuses_and_other_conditions_are_never_repaired() -> None:
    objects = [pool(), *healthy(4)]
    for condition, status in (("AcceleratedHardwareReady", "True"), ("MemoryPressure", "True"), ("DiskPressure", "True"), ("KernelReady", "Unknown")):
        assert all(c.method != REPAIR for c in run(*objects, sick("n", condition, status, timedelta(days=3))).commands), condition


def test_a_condition_without_transition_time_is_not_judged() -> None:
    node = managed_node("bad")
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    assert all(c.method != REPAIR for c in run(pool(), *healthy(9), node).commands)


def test_more_than_twenty_percent_unhealthy_blocks_every_repair_in_the_pool() -> None:
    """Karpenter's rule, rounded up: 1 of 3 may be repaired; 2 of 5 may not (ceil(1) = 1)."""
    (command,) = run(pool(), *healthy(2), sick("bad")).commands
    assert command.method == REPAIR
    decision = run(pool(), *healthy(3), sick("bad1"), sick("bad2", "KernelReady", "False", 5 * MINUTE))
    assert all(c.method != REPAIR for c in decision.commands)
    (held,) = decision.repair_blocked
    assert held.node == "bad1" and "2 of the 5 nodes of nodepool default are unhealthy" in held.reason


def test_the_rule_counts_per_nodepool() -> None:
    """Unhealthy nodes of another NodePool do not hold this one's repair back."""
    other = [sick(f"o{i}", pool="other") for i in range(3)]
    decision = run(pool(), pool("other"), *healthy(4), sick("bad"), *other)
    repaired = {n for c in decision.commands if c.method == REPAIR for n in c.nodes}
    assert repaired == {"bad"}
    assert {b.node for b in decision.repair_blocked} == {"o0", "o1", "o2"}


def test_a_nodepool_can_opt_out() -> None:
    decision = run(pool(repair="Disabled"), *healthy(9), sick("bad"))
    assert all(c.method != REPAIR for c in decision.commands)


def test_repair_is_forceful_budgets_do_not_disrupt_and_blocking_pdbs_do_not_hold_it() -> None:
    objects = [
        pool(budgets=[{"nodes": "0"}]),
        *healthy(9),
        sick("bad", "AcceleratedHardwareReady", "False", 15 * MINUTE),
        running_pod("p1", "bad", annotations={"karpenter.sh/do-not-disrupt": "true"}),
        pdb("web", "web", allowed=0),
    ]
    (command,) = run(*objects).commands
    assert (command.method, command.nodes) == (REPAIR, ("bad",))


def test_pods_of_a_repaired_node_get_a_replacement_when_they_fit_nowhere_else() -> None:
    (command,) = run(pool(), sick("bad", "NetworkingReady", "False", 40 * MINUTE), running_pod("p1", "bad", cpu="3")).commands
    assert command.method == REPAIR
    (replacement,) = command.replacements
    assert replacement.pods == ("default/p1",) and replacement.node_pool == "default"


def test_repair_goes_ahead_when_no_replacement_can_be_launched() -> None:
    """Replace where capacity allows: a pod too big for any type waits, the node goes anyway."""
    (command,) = run(pool(), sick("bad"), running_pod("huge", "bad", cpu="500")).commands
    assert command.method == REPAIR and command.replacements == () and "1 pod(s) will wait" in command.reason


def test_validation_drops_a_repair_when_the_node_recovered() -> None:
    objects = [pool(), *healthy(4)]
    (command,) = run(*objects, sick("bad")).commands
    fresh, why = validate(command, disruption_input(snapshot(*objects, sick("bad")), now=T0 + MINUTE))
    assert fresh is not None and fresh.nodes == ("bad",) and why == ""
    recovered, why = validate(command, disruption_input(snapshot(*objects, managed_node("bad")), now=T0 + MINUTE))
    assert recovered is None and "no longer due for repair" in why


def test_validation_drops_a_repair_the_twenty_percent_rule_now_blocks() -> None:
    objects = [pool(), *healthy(3)]
    (command,) = run(*objects, sick("bad")).commands
    assert isinstance(command, Command)
    later = snapshot(*objects, sick("bad"), sick("worse", "StorageReady", "False", MINUTE))
    dropped, why = validate(command, disruption_input(later, now=T0 + MINUTE))
    assert dropped is None and "are unhealthy" in why


# ---------------------------------------------------------------- properties

_DATES = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC))


@given(since=_DATES, policy=st.sampled_from(REPAIR_POLICIES), extra=st.sampled_from(REPAIR_POLICIES))
def test_the_condition_due_first_is_reported(since: datetime, policy: Any, extra: Any) -> None:
    conditions = {policy.condition: NodeCondition(policy.condition, policy.status, since)}
    if extra.condition != policy.condition:
        conditions[extra.condition] = NodeCondition(extra.condition, extra.status, since)
    node = Node("n", conditions=tuple(conditions.values()))
    found = unhealthy(node)
    assert found is not None and found.since == since
    wanted = min((p for p in REPAIR_POLICIES if p.condition in conditions and conditions[p.condition].status == p.status), key=lambda p: (p.after, p.condition))
    assert (found.condition, found.after) == (wanted.condition, wanted.after)
    assert unhealthy(dataclasses.replace(node, conditions=tuple(NodeCondition(c.type, "True", since) for c in node.conditions))) is None


@given(unhealthy_nodes=st.integers(0, 2**63 - 1), total=st.integers(0, 2**63 - 1))
def test_the_twenty_percent_rule_is_exact_at_any_size(unhealthy_nodes: int, total: int) -> None:
    allowed = repair_allowed(unhealthy_nodes, total)
    # the smallest whole number of nodes that is at least 20 % of the total
    threshold = next(t for t in (total * MAX_UNHEALTHY_PERCENT // 100, total * MAX_UNHEALTHY_PERCENT // 100 + 1) if t * 100 >= total * MAX_UNHEALTHY_PERCENT)
    assert allowed == (unhealthy_nodes <= threshold)
