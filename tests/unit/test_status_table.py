"""``joiner status``'s NODEPOOLS table shows CAPACITY and RESERVED over the same resources."""

from __future__ import annotations

from joiner.cli.status import render_table


def test_capacity_and_reserved_show_the_same_resources() -> None:
    pool = {
        "name": "default",
        "nodeClass": "default",
        "ready": "True",
        "nodes": 1,
        "inFlight": 1,
        "limits": {"cpu": "100"},
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "58", "ephemeral-storage": "20Gi"},
        "reserved": {"cpu": "8", "nodes": "1"},
    }
    status = {"nodePools": [pool], "claimsInFlight": [], "terminations": [], "pendingPods": [], "unavailableOfferings": [], "recentDecisions": []}
    header, row = render_table(status).splitlines()[1:3]
    cells = row.split()
    capacity, reserved = cells[4], cells[5]
    names = [part.split("=")[0] for part in capacity.split(",")]
    assert names == [part.split("=")[0] for part in reserved.split(",")]
    assert names == ["cpu", "ephemeral-storage", "memory", "nodes", "pods"]
    assert "memory=0" in reserved and "nodes=0" in capacity and "cpu=8" in reserved
