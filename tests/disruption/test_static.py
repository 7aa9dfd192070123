"""Static NodePools (``spec.replicas``) in the disruption decision and in planning: never
emptied or consolidated, never launched for pods, drift and expiry replaced one for one by a
replica (within budgets and ``limits.nodes``), the surplus above ``replicas`` removed without
budgets, not-yet-Ready nodes first, then empty ones, then the cheapest to disrupt."""

from __future__ import annotations

from datetime import timedelta

import pytest

from joiner.domain.disruption import EXPIRATION, SCALE_DOWN, validate
from joiner.domain.model import InFlightClaim
from joiner.domain.requirements import Requirements
from joiner.domain.resources import EMPTY
from joiner.domain.snapshot import SnapshotError, parse_node_pool
from tests.disruption.builders import T0, disruption_input, managed_node, pool, run, running_pod, snapshot


def static(replicas: int, **kwargs: object) -> dict[str, object]:
    return pool("fixed", replicas=replicas, **kwargs)  # type: ignore[arg-type]


def nodes(count: int, **kwargs: object) -> list[dict[str, object]]:
    return [managed_node(f"s{i}", pool="fixed", **kwargs) for i in range(count)]  # type: ignore[arg-type]


def test_static_nodes_are_never_emptied_or_consolidated() -> None:
    decision = run(static(3), *nodes(3), running_pod("p", "s0", cpu="100m"))
    assert decision.commands == ()
    assert all(not consolidatable for _, _, consolidatable in decision.standing)


def test_a_dynamic_pool_alone_is_consolidated_as_before() -> None:
    (command,) = run(pool("fixed"), *nodes(3)).commands
    assert command.method == "emptiness"


def test_the_surplus_goes_without_budgets_empty_nodes_first() -> None:
    objects = [static(1, budgets=[{"nodes": "0"}]), *nodes(3), running_pod("p0", "s0"), running_pod("p2", "s2"), running_pod("p2b", "s2")]
    (command,) = run(*objects).commands
    assert command.method == SCALE_DOWN and command.replacements == ()
    assert command.nodes == ("s1", "s0")  # s1 empty; then s0, cheaper to disrupt than s2 (one pod against two)
    assert "3 nodes for 1 replicas" in command.reason


def test_nodes_not_yet_ready_go_first_and_going_ones_do_not_count() -> None:
    young = managed_node("s9", pool="fixed", initialized=False)
    (command,) = run(static(2), *nodes(2), young).commands
    assert command.nodes == ("s9",)
    going = managed_node("s8", pool="fixed", taints=[{"key": "joiner.dev/disrupted", "effect": "NoSchedule"}])
    assert run(static(2), *nodes(2), going).commands == ()


def test_claims_in_flight_count_towards_the_replicas() -> None:
    claim = InFlightClaim(
        name="fixed-x",
        node_pool="fixed",
        instance_type="c5.xlarge",
        zone="us-east-1a",
        capacity_type="on-demand",
        allocatable=EMPTY,
        capacity=EMPTY,
        requirements=Requirements(),
        pods=(),
    )
    (command,) = run(static(2), *nodes(2), in_flight=(claim,)).commands
    assert command.method == SCALE_DOWN and len(command.nodes) == 1


def test_validation_keeps_a_scale_down_only_while_the_surplus_remains() -> None:
    (command,) = run(static(2), *nodes(3)).commands
    keep, _ = validate(command, disruption_input(snapshot(static(2), *nodes(3)), now=T0 + timedelta(seconds=20)))
    assert keep == command
    dropped, why = validate(command, disruption_input(snapshot(static(3), *nodes(3)), now=T0 + timedelta(seconds=20)))
    assert dropped is None and "beyond its replicas" in why


def test_an_expired_static_node_is_replaced_by_a_replica_within_budgets() -> None:
    objects = [static(2, expire_after="1h"), *nodes(2), running_pod("p", "s0")]
    commands = run(*objects).commands
    assert [c.method for c in commands] == [EXPIRATION, EXPIRATION]
    for command in commands:
        (replacement,) = command.replacements
        assert replacement.node_pool == "fixed" and replacement.pods == () and replacement.instance_types
    assert run(static(2, expire_after="1h", budgets=[{"nodes": "0"}]), *nodes(2)).commands == ()


def test_limits_nodes_leaves_no_room_for_a_drift_replacement() -> None:
    drifted = [managed_node(f"s{i}", pool="fixed", labels={"team": "old"}) for i in range(2)]
    decision = run(pool("fixed", replicas=2, limits={"nodes": 2}, labels={"team": "new"}), *drifted)
    assert decision.commands == ()
    assert any("limits.nodes leaves no room" in b.reason for b in decision.blocked)
    (first, second) = run(pool("fixed", replicas=2, limits={"nodes": 4}, labels={"team": "new"}), *drifted).commands
    assert first.replacements and second.replacements


def test_pending_pods_never_launch_a_static_pool() -> None:
    pending = running_pod("p", "")
    pending["spec"].pop("nodeName", None)
    pending["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    decision = run(static(1), *nodes(1, created=T0 - timedelta(minutes=1)), pending)
    assert decision.commands == ()


def test_replicas_allow_only_limits_nodes_and_no_weight() -> None:
    assert parse_node_pool(static(3, limits={"nodes": 5})).replicas == 3
    with pytest.raises(SnapshotError, match="only 'limits.nodes' is supported"):
        parse_node_pool(static(3, limits={"cpu": 8}))
    weighted = static(3)
    weighted["spec"]["weight"] = 10  # type: ignore[index]
    with pytest.raises(SnapshotError, match="'weight' is not supported"):
        parse_node_pool(weighted)
    with pytest.raises(SnapshotError, match="at least 0"):
        parse_node_pool(static(-1))
