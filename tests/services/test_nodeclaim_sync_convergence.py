"""The NodeClaim mirrors' sync catches a large cluster up by time and pace, not by a count of
writes (``python -m bench.scale --functions nodeclaim_sync`` measures it against an API server)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from joiner.ports import ClaimRecord
from joiner.services import nodeclaims
from joiner.services.nodeclaims import _Pacer, sync_node_claims
from tests.support.fakes import FakeWorld, fake_world, node_pool_json

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


def world_with_claims(count: int) -> FakeWorld:
    world = fake_world()
    world.kube.add("node_pools", node_pool_json("default"))
    start = world.clock.now()
    for index in range(count):
        world.state.put_claim(
            ClaimRecord(
                f"default-{index:05d}",
                "default",
                "initialized",
                start - timedelta(hours=1, seconds=index),
                instance_id=f"i-{index:017x}",
                instance_type="m5.large",
                zone="us-east-1a",
                capacity_type="spot",
                price=0.05,
                node_name=f"n{index}",
            )
        )
    return world


def test_a_cluster_without_mirrors_is_mirrored_in_one_sync_when_the_api_server_keeps_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,500 claims, no mirrors (the CRD installed on a running cluster): a sync used to stop
    after 200 writes (100 mirrors) and needed 15 more; now its time and pace decide, and an
    API server that keeps up gets them all at once."""
    monkeypatch.setattr(nodeclaims, "MIRROR_WRITE_QPS", 1e9)
    world = world_with_claims(1_500)
    runtime = world.runtime()
    result = sync_node_claims(runtime, seconds=60.0)
    assert (result.created, result.deferred, result.errors) == (1_500, 0, 0)
    assert len(world.kube.list_node_claims()) == 1_500
    again = sync_node_claims(runtime)
    assert (again.created, again.updated, again.deferred) == (0, 0, 0)  # converged: nothing more to write


def test_what_a_sync_has_no_time_for_is_left_for_the_next_and_never_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodeclaims, "MIRROR_WRITE_QPS", 1e9)
    world = world_with_claims(300)
    runtime = world.runtime()
    first = sync_node_claims(runtime, seconds=0.0)  # out of time after the first write
    assert first.created <= 1 and first.created + first.deferred == 300
    assert sync_node_claims(runtime, seconds=60.0).created == 300 - first.created
    assert len(world.kube.list_node_claims()) == 300


def test_the_pace_holds_writes_to_the_rate_after_the_burst() -> None:
    pacer = _Pacer(qps=500.0, burst=20)
    started = time.monotonic()
    for _ in range(20):  # the burst: no waiting
        pacer.wait()
    assert time.monotonic() - started < 0.02
    for _ in range(100):  # then 500 a second: 100 more take 0.2 s
        pacer.wait()
    assert 0.18 <= time.monotonic() - started < 0.6
