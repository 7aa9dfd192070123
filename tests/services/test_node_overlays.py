"""NodeOverlays in the provisioning round (fakes): launches priced and sized by them, status
written from the round, the last overlays kept while they cannot be read."""

from __future__ import annotations

import pytest

from joiner.ports import KubernetesError
from joiner.services.provisioning import provision
from tests.support.fakes import FakeWorld, fake_world, node_class_json, node_pool_json, pod_json


def overlay_json(name: str, requirements: list[dict], **spec: object) -> dict:
    return {"apiVersion": "joiner.dev/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": {"requirements": requirements, **spec}}


TYPE = "node.kubernetes.io/instance-type"


@pytest.fixture
def world() -> FakeWorld:
    world = fake_world()
    world.kube.add("node_classes", node_class_json(discovery=world.cluster))
    world.kube.add("node_pools", node_pool_json())  # c5.large, c5.xlarge, c5.2xlarge on demand
    for index in range(3):
        world.kube.add("pods", pod_json(f"web-{index}", cpu="1", memory="256Mi"))
    return world


def test_without_overlays_the_cheapest_fitting_type_launches(world: FakeWorld) -> None:
    result = provision(world.runtime(), world.clock.now())
    assert result.launched[0].instance_type == "c5.xlarge"
    assert world.kube.overlay_status_patches == []


def test_a_price_overlay_changes_what_launches_and_the_recorded_price(world: FakeWorld) -> None:
    # A licence makes c5.large and c5.xlarge dearer than c5.2xlarge: the round launches c5.2xlarge.
    world.kube.add(
        "node_overlays", overlay_json("licence", [{"key": TYPE, "operator": "In", "values": ["c5.large", "c5.xlarge"]}], priceAdjustment="+0.5", weight=10)
    )
    world.kube.add(
        "node_overlays", overlay_json("savings", [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}], priceAdjustment="-10%", weight=1)
    )
    result = provision(world.runtime(), world.clock.now())
    (launched,) = result.launched
    assert launched.instance_type == "c5.2xlarge"
    claim = world.state.get_claim(launched.claim_id)
    # One price change per offering: the licence (weight 10) on c5.xlarge, the savings elsewhere;
    # an adjustment applies to the offering's whole price, the node's root volume included.
    from joiner.domain.costs import block_device_cost_per_hour
    from joiner.domain.snapshot import parse_node_class

    volume = block_device_cost_per_hour(parse_node_class(world.kube.get("node_classes", None, "default")))
    assert claim is not None and claim.price == pytest.approx((0.34 + volume) * 0.9)
    statuses = dict(world.kube.overlay_status_patches)
    assert statuses["licence"]["instanceTypes"] == ["c5.large", "c5.xlarge"] and statuses["licence"]["nodePools"] == ["default"]
    assert statuses["savings"]["instanceTypeCount"] == 3
    assert all(c["status"] == "True" for s in statuses.values() for c in s["conditions"])


def test_a_conflict_and_an_unreadable_overlay_are_reported_on_their_status(world: FakeWorld) -> None:
    world.kube.add("node_overlays", overlay_json("a", [], price="0.01", weight=5))
    world.kube.add("node_overlays", overlay_json("b", [{"key": TYPE, "operator": "In", "values": ["c5.2xlarge"]}], price="0.02", weight=5))
    world.kube.add("node_overlays", overlay_json("bad", [], capacity={"cpu": "4"}))
    provision(world.runtime(), world.clock.now())
    statuses = dict(world.kube.overlay_status_patches)
    ready = {name: next(c for c in s["conditions"] if c["type"] == "Ready") for name, s in statuses.items()}
    assert ready["a"]["status"] == "False" and ready["a"]["reason"] == "Conflict" and "NodeOverlay b" in ready["a"]["message"]
    assert statuses["a"]["instanceTypes"] == []
    assert ready["b"]["status"] == "True" and statuses["b"]["instanceTypes"] == ["c5.2xlarge"]
    assert ready["bad"]["reason"] == "RuntimeValidation" and "spec.capacity.cpu" in ready["bad"]["message"]
    # Unchanged next round: no writes.
    world.kube.overlay_status_patches.clear()
    provision(world.runtime(), world.clock.now())
    assert world.kube.overlay_status_patches == []


def test_overlays_read_last_are_applied_while_they_cannot_be_read(world: FakeWorld) -> None:
    world.kube.add("node_overlays", overlay_json("licence", [{"key": TYPE, "operator": "In", "values": ["c5.large", "c5.xlarge"]}], priceAdjustment="+0.5"))
    pods = world.kube.list_pods()
    for pod in pods:
        world.kube.remove("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
    runtime = world.runtime()
    provision(runtime, world.clock.now())  # nothing pending: the overlays are read
    for pod in pods:
        world.kube.add("pods", pod)
    world.kube.fail("list_node_overlays", KubernetesError("unavailable", status=503))
    result = provision(runtime, world.clock.now())
    assert [c.instance_type for c in result.launched] == ["c5.2xlarge"]
    assert world.metrics.total("NodeOverlaysUnreadable") == 1
