"""Capacity reservations (issue 12 item 12, Karpenter's ``reserved`` capacity type): a NodeClass
selects reservations, reserved offerings are preferred and priced near zero, a launch targets
its reservation through a launch template, a full reservation falls back and is marked
unavailable. On the in-memory fakes; the EC2 adapter's side is in tests/adapters."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from joiner.domain import labels as wk
from joiner.domain.launch import build_fleet_request
from joiner.domain.model import KubeletConfig, NodeClaimPlan, OfferingKey
from joiner.domain.requirements import Requirements
from joiner.domain.reservations import RESERVED_PRICE_FACTOR, reservation_for, with_reserved_offerings
from joiner.domain.resources import Resources
from joiner.domain.snapshot import SnapshotError, parse_node_class
from joiner.ports import CAPACITY_BLOCK, CapacityReservation, LaunchTemplateRef, Subnet
from joiner.services.launcher import UNAVAILABLE_FOR
from joiner.services.provisioning import provision
from tests.support.fakes import FakeWorld, fake_world, node_class_json, node_pool_json, pod_json, small_catalog

RESERVATION = CapacityReservation("cr-0a1b2c3d", "c5.large", "us-east-1b", available=1, owner_id="111122223333", match_criteria="targeted")


def reserved_world(*, capacity_types: tuple[str, ...] = ("reserved", "on-demand"), pods: int = 1, available: int = 1) -> FakeWorld:
    world = fake_world()
    node_class = node_class_json(discovery=world.cluster)
    node_class["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"team": "ml"}}]
    world.kube.add("node_classes", node_class)
    world.kube.add(
        "node_pools",
        node_pool_json(
            requirements=[
                {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "c5.xlarge"]},
                {"key": wk.CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)},
            ]
        ),
    )
    world.ec2.capacity_reservations.append((CapacityReservation(RESERVATION.id, "c5.large", "us-east-1b", available=available), {"team": "ml"}))
    world.ec2.capacity_reservations.append((CapacityReservation("cr-0other", "c5.large", "us-east-1a", available=5), {"team": "other"}))
    for index in range(pods):
        world.kube.add("pods", pod_json(f"web-{index}", cpu="1500m", memory="1Gi"))
    return world


def test_a_reserved_offering_is_preferred_and_launched_into_its_reservation() -> None:
    world = reserved_world()
    result = provision(world.runtime(), world.clock.now())
    (launched,) = result.launched
    assert (launched.capacity_type, launched.instance_type, launched.zone) == ("reserved", "c5.large", "us-east-1b")
    (request,) = world.ec2.fleet_requests
    assert request.capacity_type == "reserved"
    assert {(o.instance_type, o.zone) for o in request.overrides} == {("c5.large", "us-east-1b")}
    inputs = world.ec2.template_inputs[request.overrides[0].launch_template.id]  # type: ignore[union-attr]
    assert inputs["capacity_reservation_id"] == RESERVATION.id
    assert inputs["labels"][wk.CAPACITY_TYPE] == "reserved" and inputs["labels"]["karpenter.sh/capacity-type"] == "reserved"
    assert inputs["labels"][wk.CAPACITY_RESERVATION_ID] == RESERVATION.id
    assert inputs["labels"]["karpenter.k8s.aws/capacity-reservation-id"] == RESERVATION.id
    # only the reservation's template is made: no reserved-labelled template without a target
    assert [i["capacity_reservation_id"] for i in world.ec2.template_inputs.values() if i["labels"].get(wk.CAPACITY_TYPE) == "reserved"] == [RESERVATION.id]
    on_demand = next(o.price for o in world.runtime().catalog.instance_type("c5.large").offerings if o.capacity_type == "on-demand" and o.zone == "us-east-1b")
    # the reservation covers the instance; the node's root volume (20Gi gp3) is billed in full
    assert launched.price == pytest.approx(on_demand * RESERVED_PRICE_FACTOR + 20 * 0.08 / 730)


def test_a_full_reservation_falls_back_to_on_demand_within_the_round() -> None:
    """Two pods each needing a c5.large, one reserved slot: the first claim takes it, the
    second launches on demand (the round knows the reservation is full)."""
    world = reserved_world(pods=2)
    result = provision(world.runtime(), world.clock.now())
    assert sorted(c.capacity_type for c in result.launched) == ["on-demand", "reserved"]
    assert [r.capacity_type for r in world.ec2.fleet_requests].count("reserved") == 1


def test_a_reservation_ec2_reports_full_is_marked_unavailable_and_the_claim_falls_back() -> None:
    world = reserved_world()
    world.ec2.insufficient.add(OfferingKey("c5.large", "us-east-1b", "reserved"))  # answered ReservationCapacityExceeded
    now = world.clock.now()
    result = provision(world.runtime(), now)
    (launched,) = result.launched
    assert launched.capacity_type == "on-demand"
    key = OfferingKey("c5.large", "us-east-1b", "reserved")
    assert key in result.capacity_errors and world.state.unavailable_until(key) == now + UNAVAILABLE_FOR


def test_a_pool_that_does_not_allow_reserved_never_uses_reservations() -> None:
    world = reserved_world(capacity_types=("on-demand",))
    result = provision(world.runtime(), world.clock.now())
    assert [c.capacity_type for c in result.launched] == ["on-demand"]
    assert all(r.capacity_type == "on-demand" for r in world.ec2.fleet_requests)


def test_reserved_only_pools_wait_when_the_reservation_is_full() -> None:
    world = reserved_world(capacity_types=("reserved",), available=0)
    result = provision(world.runtime(), world.clock.now())
    assert result.launched == () and world.ec2.fleet_requests == []
    assert [u.pod for u in result.unschedulable] == ["default/web-0"]


def test_reserved_offerings_are_added_only_where_a_reservation_has_room() -> None:
    catalog = small_catalog()
    types = catalog.instance_types(KubeletConfig())
    reservations = (RESERVATION, CapacityReservation("cr-0full", "c5.xlarge", "us-east-1a", available=0))
    out = {t.name: t for t in with_reserved_offerings(types, reservations, ("us-east-1a", "us-east-1b"))}
    reserved = [o for o in out["c5.large"].offerings if o.capacity_type == "reserved"]
    assert [(o.zone, o.price > 0) for o in reserved] == [("us-east-1b", True)]
    assert "reserved" in out["c5.large"].requirements[wk.CAPACITY_TYPE].values
    assert not [o for o in out["c5.xlarge"].offerings if o.capacity_type == "reserved"]
    assert with_reserved_offerings(types, reservations, ("us-east-1b",), left={RESERVATION.id: 0}) == types
    assert reservation_for("c5.large", "us-east-1b", reservations, {}) == RESERVATION
    assert reservation_for("c5.large", "us-east-1b", reservations, {RESERVATION.id: 0}) is None


def test_a_reserved_fleet_request_names_each_reservation_template() -> None:
    claim = NodeClaimPlan(
        node_pool="default",
        instance_types=("c5.large", "c5.xlarge"),
        zones=("us-east-1a", "us-east-1b"),
        capacity_types=("reserved",),
        pods=("default/a",),
        requests=Resources(),
        requirements=Requirements(),
        price=0.0001,
    )
    subnets = [Subnet("subnet-a", "us-east-1a", 100), Subnet("subnet-b", "us-east-1b", 100)]
    default = LaunchTemplateRef("lt-default", "default")
    targeted = LaunchTemplateRef("lt-reserved", "reserved")
    prices = {OfferingKey("c5.large", "us-east-1b", "reserved"): 0.0001, OfferingKey("c5.xlarge", "us-east-1a", "reserved"): 0.0002}
    request = build_fleet_request(
        claim, "c1", "reserved", subnets, default, prices, frozenset(), {"joiner.dev/cluster": "c"}, zone_templates={("c5.large", "us-east-1b"): targeted}
    )
    assert [(o.instance_type, o.zone, o.launch_template) for o in request.overrides] == [("c5.large", "us-east-1b", targeted)]


@pytest.mark.parametrize(
    ("terms", "message"),
    [
        ([{"id": "cr-1", "tags": {"a": "b"}}], "id cannot be combined with tags or ownerID"),
        ([{"ownerID": "111122223333"}], "ownerID needs tags in the same term"),
        ([{"tags": {"a": "b"}, "ownerID": "12"}], "expected a 12-digit account id"),
        ([{"id": "sg-123"}], "expected an id such as cr-0123abcd"),
        ([{"name": "x"}], "not supported (a term may use id, tags, ownerID)"),
    ],
)
def test_malformed_reservation_terms_get_one_clear_error(terms: list[dict[str, Any]], message: str) -> None:
    node_class = node_class_json()
    node_class["spec"]["capacityReservationSelectorTerms"] = terms
    with pytest.raises(SnapshotError, match="spec.capacityReservationSelectorTerms") as error:
        parse_node_class(node_class)
    assert message in str(error.value)


def test_reservation_terms_parse_with_owner() -> None:
    node_class = node_class_json()
    node_class["spec"]["capacityReservationSelectorTerms"] = [{"id": "cr-0123abcd"}, {"tags": {"team": "ml"}, "ownerID": "111122223333"}]
    parsed = parse_node_class(node_class)
    assert [(t.id, t.tags, t.owner) for t in parsed.capacity_reservation_terms] == [
        ("cr-0123abcd", (), None),
        (None, (("team", "ml"),), "111122223333"),
    ]


# ---------------------------------------------------------------- Capacity Blocks and reclaimed reservations


def _select(world: FakeWorld, *reservations: CapacityReservation) -> None:
    """Only ``reservations`` (all selected by the NodeClass's ``team: ml`` term)."""
    world.ec2.capacity_reservations[:] = [(r, {"team": "ml"}) for r in reservations]


def test_a_capacity_block_launches_in_the_capacity_block_market() -> None:
    """EC2 Fleet launches into a Capacity Block only with DefaultTargetCapacityType
    ``capacity-block`` and a template in the capacity-block market."""
    world = reserved_world()
    _select(world, dataclasses.replace(RESERVATION, reservation_type=CAPACITY_BLOCK))
    result = provision(world.runtime(), world.clock.now())
    (launched,) = result.launched
    assert (launched.capacity_type, launched.zone) == ("reserved", "us-east-1b")
    (request,) = world.ec2.fleet_requests
    assert request.reservation_type == CAPACITY_BLOCK
    inputs = world.ec2.template_inputs[request.overrides[0].launch_template.id]  # type: ignore[union-attr]
    assert (inputs["capacity_reservation_id"], inputs["reservation_type"]) == (RESERVATION.id, CAPACITY_BLOCK)


@pytest.mark.parametrize(
    ("block_zone", "expected"),
    [
        ("us-east-1a", (CAPACITY_BLOCK, [("c5.large", "us-east-1a")])),  # the first pair is the block: it alone
        ("us-east-1c", ("default", [("c5.large", "us-east-1b")])),  # the first pair is an ordinary reservation: no block
    ],
)
def test_a_request_never_mixes_a_capacity_block_with_other_reservations(block_zone: str, expected: tuple[str, list[tuple[str, str]]]) -> None:
    """CreateFleet takes one market and at most one Capacity Block per request."""
    world = reserved_world()
    _select(world, RESERVATION, CapacityReservation("cr-0b10c4", "c5.large", block_zone, available=4, reservation_type=CAPACITY_BLOCK))
    provision(world.runtime(), world.clock.now())
    request = world.ec2.fleet_requests[0]
    assert (request.reservation_type, [(o.instance_type, o.zone) for o in request.overrides]) == expected


def test_a_reservation_marked_unavailable_is_never_targeted() -> None:
    """An interruption marks the reservation it reclaims unavailable: a round launches into the
    NodeClass's other reservation of that type and zone, and with none left, on demand."""
    world = reserved_world()
    busiest = CapacityReservation("cr-0b0b1e", "c5.large", "us-east-1b", available=5)  # preferred: the most room
    _select(world, RESERVATION, busiest)
    now = world.clock.now()
    world.state.mark_unavailable(OfferingKey("c5.large", "us-east-1b", "reserved", reservation_id=busiest.id), now + UNAVAILABLE_FOR, "test")
    result = provision(world.runtime(), now)
    assert [c.capacity_type for c in result.launched] == ["reserved"]
    (request,) = world.ec2.fleet_requests
    assert world.ec2.template_inputs[request.overrides[0].launch_template.id]["capacity_reservation_id"] == RESERVATION.id  # type: ignore[union-attr]

    world = reserved_world()
    _select(world, RESERVATION)
    world.state.mark_unavailable(OfferingKey("", "", "reserved", reservation_id=RESERVATION.id), now + UNAVAILABLE_FOR, "test")
    result = provision(world.runtime(), now)
    assert [c.capacity_type for c in result.launched] == ["on-demand"]
    assert all(r.capacity_type == "on-demand" for r in world.ec2.fleet_requests)


@pytest.mark.parametrize(
    ("reservation_type", "ends_in", "capacity_type"),
    [
        ("default", timedelta(seconds=0), "on-demand"),  # ended now
        ("default", timedelta(hours=-2), "on-demand"),  # ended, though EC2 still lists it active
        ("default", timedelta(minutes=1), "reserved"),  # an ordinary reservation is used to its end
        (CAPACITY_BLOCK, timedelta(minutes=-5), "on-demand"),
        (CAPACITY_BLOCK, timedelta(minutes=39), "on-demand"),  # about to be reclaimed: no new launch
        (CAPACITY_BLOCK, timedelta(minutes=41), "reserved"),
    ],
)
def test_a_reservation_is_offered_only_until_it_ends(reservation_type: str, ends_in: timedelta, capacity_type: str) -> None:
    """A reservation whose end time has come (a Capacity Block whose expiration warning was
    missed) is neither chosen nor counted as room: the claim launches on demand. A Capacity
    Block stops taking launches 40 minutes before its end, as Karpenter's provider does."""
    world = reserved_world()
    now = world.clock.now()
    _select(world, dataclasses.replace(RESERVATION, available=4, reservation_type=reservation_type, end_time=now + ends_in))
    result = provision(world.runtime(), now)
    assert [c.capacity_type for c in result.launched] == [capacity_type]
    assert [r.capacity_type for r in world.ec2.fleet_requests] == [capacity_type]


def test_a_reservation_that_ends_between_rounds_is_no_longer_offered() -> None:
    """The NodeClass's resolution is cached briefly; whether a reservation still lasts is
    judged each round at that round's time."""
    world = reserved_world()
    runtime = world.runtime()
    now = world.clock.now()
    _select(world, dataclasses.replace(RESERVATION, available=4, end_time=now + timedelta(seconds=20)))
    assert [c.capacity_type for c in provision(runtime, now).launched] == ["reserved"]
    world.kube.add("pods", pod_json("late", cpu="1500m", memory="1Gi"))
    world.clock.advance(30)
    assert [c.capacity_type for c in provision(runtime, world.clock.now()).launched] == ["on-demand"]


def test_offered_reads_the_end_time_against_now() -> None:
    from joiner.domain.reservations import CAPACITY_BLOCK_EXPIRING, offered, room

    now = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
    lasting = dataclasses.replace(RESERVATION, available=3)
    assert offered(lasting, now) and room(lasting, now) == 3
    ended = dataclasses.replace(lasting, end_time=now)
    assert not offered(ended, now) and room(ended, now) == 0
    assert offered(dataclasses.replace(lasting, end_time=datetime(2025, 1, 6, 9, 1)), now)  # naive: UTC
    block = dataclasses.replace(lasting, reservation_type=CAPACITY_BLOCK, end_time=now + CAPACITY_BLOCK_EXPIRING)
    assert not offered(block, now) and offered(block, now - timedelta(seconds=1))
