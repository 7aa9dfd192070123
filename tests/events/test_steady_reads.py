"""A warm minute costs what changed, not the cluster: after the containers' first reads, the
scanner, the disruption pass (with delete to drain and the NodeClaim mirrors' sync) and the
watcher read the same on a cluster ten times larger with the same churn (``bench.scale``'s
stand-in API server counts what it serves, by request shape)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.scale_runs import scale_line


def _steady(nodes: int) -> dict[str, Any]:
    return scale_line("--nodes", str(nodes), "--functions", "none", "--modes", "responsive", "--minutes", "2")


@pytest.mark.slow
def test_a_warm_minute_reads_the_same_on_a_cluster_ten_times_larger() -> None:
    small, large = _steady(30), _steady(300)
    assert small["invocations"] == large["invocations"] and set(large["invocations"]) == {"watcher", "scanner", "disruption", "gc"}
    # No warm minute lists what grows with the cluster: pods, Nodes and mirrors are caught up
    # from the changes since the container's last read.
    for line in (small, large):
        listed = {
            shape: counts
            for shape, counts in line["by_shape"].items()
            if shape.split(" (")[0].split(" rv")[0] in ("list pods", "list nodes", "list nodeclaims")
        }
        assert listed == {}, listed
    assert large["full_pod_lists"] == 0
    # The same churn reads about the same (objects differ in names only).
    assert large["warm_read_mb_per_minute"] <= small["warm_read_mb_per_minute"] * 1.5 + 0.5, (small["by_shape"], large["by_shape"])
