"""The scanner Lambda handler: event parsing, the cached runtime, the summary it returns."""

from __future__ import annotations

from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest

from joiner.services.provisioning import LEASE_NAME
from tests.support.fakes import FakeWorld, fake_world, node_class_json, node_pool_json, pod_json
from testworld.lambdas import LambdaContext, scheduled_event
from testworld.lambdas import load_handler as load_function

#: The fakes record metrics; powertools then has none to flush and says so.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

SCHEDULED_EVENT = scheduled_event("joiner-scanner", datetime(2025, 1, 6, 9, tzinfo=UTC))


def load_handler() -> ModuleType:
    return load_function("scanner")


@pytest.fixture
def world() -> FakeWorld:
    world = fake_world()
    world.kube.add("node_classes", node_class_json(discovery=world.cluster))
    world.kube.add("node_pools", node_pool_json())
    world.kube.add("pods", pod_json("web-0"))
    return world


@pytest.fixture
def handler(world: FakeWorld) -> Any:
    module = load_handler()
    module.configure(world.runtime(settings=world.settings(scanner_mode="economy")))
    yield module
    module.reset()


def test_scheduled_event_runs_a_scan_and_returns_the_summary(handler: Any, world: FakeWorld) -> None:
    result = handler.handler(SCHEDULED_EVENT, LambdaContext())
    assert result == {
        "mode": "economy",
        "rounds": 1,
        "skipped": 0,
        "errors": 0,
        "claimsLaunched": 1,
        "launchFailures": 0,
        "unschedulablePods": 0,
        "pendingPods": 1,
    }
    assert len(world.ec2.fleet_requests) == 1


def test_the_request_id_owns_the_lease_and_the_runtime_is_reused(handler: Any, world: FakeWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = handler.cold_start.runtime()
    owners: list[str] = []
    original = world.state.acquire_lease

    def acquire_lease(name: str, owner: str, now: datetime, ttl: int) -> bool:
        owners.append(owner)
        return original(name, owner, now, ttl)

    monkeypatch.setattr(world.state, "acquire_lease", acquire_lease)
    handler.handler(SCHEDULED_EVENT, LambdaContext(aws_request_id="r-1"))
    handler.handler(SCHEDULED_EVENT, LambdaContext(aws_request_id="r-2"))
    assert owners == ["r-1", "r-2"] and handler.cold_start.runtime() is runtime
    assert world.state.lease_holder(LEASE_NAME) is None


def test_manual_invocation_with_an_empty_event_or_a_mode(handler: Any, world: FakeWorld) -> None:
    assert handler.handler({}, LambdaContext())["mode"] == "economy"
    responsive = handler.handler({"mode": "responsive"}, LambdaContext(remaining_ms=16_000))
    assert responsive["mode"] == "responsive" and responsive["rounds"] == 1  # no time left for more


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({**SCHEDULED_EVENT, "detail-type": "EC2 Spot Instance Interruption Warning"}, "expected detail-type 'Scheduled Event'"),
        ({key: value for key, value in SCHEDULED_EVENT.items() if key != "time"}, "time"),
        ({"mode": "fast"}, "mode must be one of economy, responsive"),
        ({"nodes": 3}, "unknown field(s) nodes"),
        (["not", "an", "object"], "expected a JSON object"),
    ],
)
def test_bad_events_are_rejected_with_a_clear_message_and_launch_nothing(handler: Any, world: FakeWorld, event: Any, message: str) -> None:
    with pytest.raises(handler.ScannerEventError, match=message.replace("(", r"\(").replace(")", r"\)")):
        handler.handler(event, LambdaContext())
    assert not world.ec2.fleet_requests


def test_cold_start_builds_the_runtime_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from joiner.settings import get_settings

    module = load_handler()
    module.reset()
    monkeypatch.setenv("JOINER_CLUSTER_NAME", "from-env")
    monkeypatch.setenv("JOINER_STATE_TABLE", "table-from-env")
    get_settings.cache_clear()
    try:
        runtime = module.configure()
        assert runtime.settings.cluster_name == "from-env" and runtime.settings.state_table == "table-from-env"
        assert runtime.kube_port is None and runtime.ec2_port is None  # adapters are built on first use
    finally:
        module.reset()
        get_settings.cache_clear()
