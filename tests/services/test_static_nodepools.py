"""Static NodePools (``spec.replicas``, Karpenter's StaticCapacity) in the provisioning round, on
the in-memory fakes: the scanner launches the missing replicas whatever the pods need, under
claim ids derived from pool, replica index and generation; ``limits.nodes`` caps them; pending
pods never launch a static pool; a NodeClass selecting a capacity reservation fills it."""

from __future__ import annotations

from typing import Any

from joiner.domain import labels as wk
from joiner.domain.model import OfferingKey
from joiner.ports import CapacityReservation
from joiner.services.launcher import claim_id_for
from joiner.services.provisioning import provision
from joiner.services.static_pools import static_identity
from tests.support.fakes import FakeWorld, fake_world, node_class_json, node_pool_json, pod_json


def static_world(
    replicas: int, *, limits: dict[str, Any] | None = None, capacity_types: tuple[str, ...] = ("on-demand",), reservation: int | None = None
) -> FakeWorld:
    world = fake_world()
    node_class = node_class_json(discovery=world.cluster)
    if reservation is not None:
        node_class["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"team": "ml"}}]
        world.ec2.capacity_reservations.append((CapacityReservation("cr-0a1b2c3d", "c5.large", "us-east-1b", available=reservation), {"team": "ml"}))
    world.kube.add("node_classes", node_class)
    pool = node_pool_json(
        "fixed",
        limits=limits,
        requirements=[
            {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "c5.xlarge"]},
            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)},
        ],
    )
    pool["spec"]["replicas"] = replicas
    world.kube.add("node_pools", pool)
    return world


def test_the_scanner_launches_the_missing_replicas_without_any_pod() -> None:
    world = static_world(3)
    result = provision(world.runtime(), world.clock.now())
    ids = sorted(c.claim_id for c in result.launched)
    assert ids == sorted(claim_id_for("fixed", static_identity(i), 0) for i in range(3))
    assert all(c.instance_type == "c5.large" for c in result.launched)  # the cheapest the template allows
    # the next round finds them in flight: nothing more
    again = provision(world.runtime(), world.clock.now())
    assert again.launched == () and len(world.ec2.fleet_requests) == 3


def test_a_replica_that_could_not_launch_is_retried_under_the_next_generation() -> None:
    world = static_world(1)
    world.ec2.insufficient.update(OfferingKey(t, z, "on-demand") for t in ("c5.large", "c5.xlarge") for z in ("us-east-1a", "us-east-1b", "us-east-1c"))
    first = provision(world.runtime(), world.clock.now())
    assert first.launched == () and first.failures
    world.ec2.insufficient.clear()
    world.clock.advance(240)  # the refused offerings are tried again
    (launched,) = provision(world.runtime(), world.clock.now()).launched
    assert launched.claim_id == claim_id_for("fixed", static_identity(0), 1)


def test_limits_nodes_caps_the_replicas() -> None:
    world = static_world(3, limits={"nodes": "2"})
    result = provision(world.runtime(), world.clock.now())
    assert len(result.launched) == 2


def test_pending_pods_never_launch_a_static_pool() -> None:
    world = static_world(1)
    world.kube.add("pods", pod_json("web", cpu="30"))  # fits no c5.large or c5.xlarge anyway
    world.kube.add("pods", pod_json("small", cpu="100m"))
    result = provision(world.runtime(), world.clock.now())
    (launched,) = result.launched
    assert launched.claim_id == claim_id_for("fixed", static_identity(0), 0) and launched.pods == ()


def test_a_static_pool_on_a_capacity_reservation_launches_every_replica_reserved() -> None:
    world = static_world(2, capacity_types=("reserved",), reservation=2)
    result = provision(world.runtime(), world.clock.now())
    assert sorted((c.capacity_type, c.instance_type, c.zone) for c in result.launched) == [("reserved", "c5.large", "us-east-1b")] * 2
    inputs = [world.ec2.template_inputs[r.overrides[0].launch_template.id] for r in world.ec2.fleet_requests]  # type: ignore[union-attr]
    assert {i["capacity_reservation_id"] for i in inputs} == {"cr-0a1b2c3d"}


def test_a_full_reservation_leaves_the_missing_replicas_for_a_later_round() -> None:
    world = static_world(3, capacity_types=("reserved",), reservation=2)
    result = provision(world.runtime(), world.clock.now())
    assert [c.capacity_type for c in result.launched] == ["reserved", "reserved"]
