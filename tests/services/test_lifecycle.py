"""The claim lifecycle's one close path and its transitions, on the fakes: terminate only an
instance whose own tags name this cluster, EC2 no longer knowing it is success, then closed,
reservation released, mirror updated; a close that died half-way is finished by the next."""

from __future__ import annotations

from datetime import timedelta

import pytest

from joiner.domain.lifecycle import TransitionError
from joiner.domain.resources import Resources
from joiner.ports import ClaimRecord, ClaimState, ClaimStateConflict, Ec2Error
from joiner.services.lifecycle import advance, close_claim, terminate_instance
from joiner.services.ownership import NOT_OWNED_METRIC
from tests.support.fakes import FakeWorld, fake_world

LIMIT = Resources({"cpu": 8000})


@pytest.fixture
def world() -> FakeWorld:
    return fake_world()


def launched(world: FakeWorld, claim_id: str = "default-a", instance_id: str = "i-0000000000000000a", **tags: str) -> ClaimRecord:
    now = world.clock.now() - timedelta(minutes=3)
    claim = ClaimRecord(
        claim_id,
        "default",
        ClaimState.LAUNCHED,
        now,
        instance_id=instance_id,
        instance_type="c5.large",
        zone="us-east-1a",
        capacity_type="spot",
        price=0.03,
        reserved=Resources({"cpu": 2000}),
        launched_at=now,
    )
    world.state.put_claim(claim)
    world.state.reserve_capacity("default", claim_id, claim.reserved, LIMIT, Resources())
    if tags or instance_id:
        world.ec2.add_instance(instance_id, "c5.large", tags=tags or None)
    return claim


def test_closing_terminates_the_instance_then_closes_and_releases(world: FakeWorld) -> None:
    claim = launched(world)
    outcome = close_claim(world.runtime(), claim, "test", world.clock.now(), path="test")
    assert outcome.closed_now and outcome.claim is not None and outcome.claim.state == ClaimState.CLOSED
    assert world.ec2.terminated == [claim.instance_id]
    assert world.state.reservations("default") == {}


def test_an_instance_whose_tags_do_not_name_the_cluster_is_neither_terminated_nor_closed(world: FakeWorld) -> None:
    claim = launched(world, **{"joiner.dev/cluster": "someone-else"})
    outcome = close_claim(world.runtime(), claim, "test", world.clock.now(), path="test")
    assert not outcome.owned and not outcome.closed_now
    assert world.ec2.terminated == []
    assert world.state.get_claim(claim.claim_id).state == ClaimState.LAUNCHED  # type: ignore[union-attr]
    assert world.state.reservations("default") == {claim.claim_id: claim.reserved}
    assert world.metrics.total(NOT_OWNED_METRIC, path="test") == 1


def test_an_instance_ec2_no_longer_knows_is_gone_and_the_claim_closes(world: FakeWorld) -> None:
    claim = launched(world, instance_id="")
    claim = world.state.update_claim(claim.claim_id, instance_id="i-00000000000000099")
    outcome = close_claim(world.runtime(), claim, "test", world.clock.now(), path="test")
    assert outcome.closed_now and world.ec2.terminated == []  # nothing to terminate
    assert world.state.reservations("default") == {}


def test_a_close_that_died_before_releasing_is_finished_by_the_next_close(world: FakeWorld) -> None:
    claim = launched(world)
    world.state.update_claim(claim.claim_id, state=ClaimState.CLOSED, closed_at=world.clock.now(), reason="died before release")
    outcome = close_claim(world.runtime(), claim.claim_id, "again", world.clock.now(), path="test")
    assert not outcome.closed_now and world.state.reservations("default") == {}
    assert world.state.get_claim(claim.claim_id).reason == "died before release"  # type: ignore[union-attr]


def test_a_failed_termination_leaves_the_claim_open_for_a_retry(world: FakeWorld) -> None:
    claim = launched(world)
    world.ec2.fail("terminate_instances")
    with pytest.raises(Ec2Error):
        close_claim(world.runtime(), claim, "test", world.clock.now(), path="test")
    assert world.state.get_claim(claim.claim_id).state == ClaimState.LAUNCHED  # type: ignore[union-attr]
    assert close_claim(world.runtime(), claim.claim_id, "test", world.clock.now(), path="test").closed_now


def test_closing_only_from_the_expected_state_leaves_a_claim_that_moved_on(world: FakeWorld) -> None:
    claim = launched(world)
    outcome = close_claim(world.runtime(), claim, "abandoned", world.clock.now(), path="test", expected=ClaimState.RESERVED)
    assert not outcome.closed_now and world.ec2.terminated == []
    assert world.state.reservations("default") == {claim.claim_id: claim.reserved}


def test_a_reservation_without_a_record_is_released(world: FakeWorld) -> None:
    world.state.reserve_capacity("default", "default-ghost", Resources({"cpu": 2000}), LIMIT, Resources())
    outcome = close_claim(world.runtime(), "default-ghost", "ghost", world.clock.now(), path="test", node_pool="default")
    assert outcome.claim is None and world.state.reservations("default") == {}


def test_transitions_are_conditional_on_the_states_the_table_allows(world: FakeWorld) -> None:
    claim = launched(world)
    runtime = world.runtime()
    with pytest.raises(TransitionError):
        advance(runtime, claim.claim_id, ClaimState.CLOSED)
    with pytest.raises(TransitionError):
        advance(runtime, claim.claim_id, ClaimState.REGISTERED, expected=ClaimState.INITIALIZED)
    marked = advance(runtime, claim.claim_id, ClaimState.TERMINATING, reason="interrupted")
    assert marked.state == ClaimState.TERMINATING
    with pytest.raises(ClaimStateConflict):  # a registration pass that read it launched does not bring it back
        advance(runtime, claim.claim_id, ClaimState.REGISTERED, expected=ClaimState.LAUNCHED, node_name="n")
    assert world.state.get_claim(claim.claim_id).state == ClaimState.TERMINATING  # type: ignore[union-attr]


def test_terminating_an_instance_already_shutting_down_asks_nothing_of_ec2(world: FakeWorld) -> None:
    claim = launched(world)
    world.ec2.terminate_instances([claim.instance_id or ""])
    calls = len(world.ec2.terminated)
    assert terminate_instance(world.runtime(), claim.instance_id or "", path="test")
    assert len(world.ec2.terminated) == calls
