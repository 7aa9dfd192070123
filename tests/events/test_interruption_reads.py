"""A spot warning costs the same on a small and on a ten-times larger cluster: the interruption
path reads the Node its event names, that Node's pods, the DaemonSets, NodePools and NodeClasses,
never the whole cluster (``bench.scale``'s stand-in API server counts what it serves)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.scale_runs import scale_line


def _measure(nodes: int) -> dict[str, Any]:
    return scale_line("--nodes", str(nodes), "--functions", "interruption", "--modes", "none", timeout=600)


@pytest.mark.slow
def test_a_spot_warning_reads_the_same_on_a_cluster_ten_times_larger() -> None:
    small, large = _measure(20), _measure(200)
    assert small["full_pod_lists"] == large["full_pod_lists"] == 0
    # Every request is one the event needs; none lists what grows with the cluster.
    assert large["api_requests"] == small["api_requests"], (small["by_resource"], large["by_resource"])
    for resource, (requests, megabytes) in large["by_resource"].items():
        assert requests == small["by_resource"][resource][0], resource
        assert megabytes <= small["by_resource"][resource][1] + 0.05, (resource, small["by_resource"][resource], megabytes)
    # The path ran to its end: the node was cordoned and its pods read; the old claim's NodeClaim
    # and its replacements' were written (one status patch each, read by name, never listed).
    assert large["requests_by_verb"].get("patch") == small["requests_by_verb"].get("patch")
    assert large["requests_by_verb"]["patch"] >= 3 and large["by_resource"]["pods"][0] == 1 and large["by_resource"]["nodeclaims"][0] >= 3
