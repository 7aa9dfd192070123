"""The scanner handler with ``JOINER_KARPENTER_CRDS=true`` in its environment (what
``-c readKarpenterCrds=true`` sets): the runtime's Kubernetes adapter, built from the
environment, reads Karpenter's own NodePool and EC2NodeClass on the emulator and the scanner
launches from them; without the variable the same cluster launches nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from joiner.settings import Settings
from tests.functions.test_scanner_handler import SCHEDULED_EVENT, load_handler
from tests.support.fakes import FakeWorld, fake_world, pod_json
from tests.support.karpenter import ec2_node_class, install_karpenter_crds, karpenter_pool, stored
from tests.support.kube_fixtures import kube_emulator  # noqa: F401 - fixture
from testworld.kube_emulator import KubeEmulator
from testworld.lambdas import LambdaContext

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


@pytest.fixture
def cluster(kube_emulator: KubeEmulator) -> Iterator[tuple[FakeWorld, KubeEmulator]]:  # noqa: F811
    world = fake_world()
    install_karpenter_crds(kube_emulator)
    kube_emulator.apply(
        stored(
            ec2_node_class(
                "default",
                role=f"JoinerNodeRole-{world.cluster}",
                subnetSelectorTerms=[{"tags": {"joiner.dev/discovery": world.cluster}}],
                securityGroupSelectorTerms=[{"tags": {"joiner.dev/discovery": world.cluster}}],
            )
        )
    )
    kube_emulator.apply(stored(karpenter_pool("default", "default")))
    kube_emulator.apply(pod_json("web-0", node_selector={"karpenter.sh/nodepool": "default"}))
    yield world, kube_emulator


def run_scanner(world: FakeWorld, emulator: KubeEmulator, environment: dict[str, str]) -> Any:
    from joiner.services.context import build_runtime

    env = {
        "JOINER_CLUSTER_NAME": world.cluster,
        "JOINER_STATE_TABLE": "joiner-state",
        "JOINER_SCANNER_MODE": "economy",
        "JOINER_KUBERNETES_HOST": emulator.url,
        **environment,
    }
    # Kubernetes from the environment, as in Lambda; EC2 and state on the fakes
    runtime = build_runtime(
        Settings.from_env(env),
        ec2_port=world.ec2,
        state_port=world.state,
        queue_port=world.queue,
        pricing_port=world.pricing,
        catalog_value=world.catalog,
        clock=world.clock,
        sleep=world.clock.sleep,
        metric=world.metrics,
    )
    module = load_handler()
    module.configure(runtime)
    try:
        return module.handler(SCHEDULED_EVENT, LambdaContext())
    finally:
        module.reset()


def test_the_scanner_launches_from_karpenters_node_pool_when_the_environment_opts_in(cluster: tuple[FakeWorld, KubeEmulator]) -> None:
    world, emulator = cluster
    result = run_scanner(world, emulator, {"JOINER_KARPENTER_CRDS": "true"})
    assert (result["claimsLaunched"], result["pendingPods"], result["errors"]) == (1, 1, 0)
    (request,) = world.ec2.fleet_requests
    assert request.tags["joiner.dev/nodepool"] == "default" and request.capacity_type == "spot"  # the pool's requirement
    conditions = emulator.get("nodepools.karpenter.sh", "default")["status"]["conditions"]  # type: ignore[index]
    assert {c["type"]: c["status"] for c in conditions}["JoinerConverted"] == "True"


def test_without_the_opt_in_karpenters_objects_are_not_read(cluster: tuple[FakeWorld, KubeEmulator]) -> None:
    world, emulator = cluster
    result = run_scanner(world, emulator, {})
    assert result["claimsLaunched"] == 0 and world.ec2.fleet_requests == []
    assert not emulator.requests(path="karpenter")
    assert not (emulator.get("nodepools.karpenter.sh", "default") or {}).get("status")
