"""StateAdapter against moto DynamoDB: claims, limit reservations (including real concurrent
callers over HTTP), leases, unavailable offerings and generic items."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from joiner.adapters.aws import AwsClients
from joiner.adapters.state import ClaimNotFound, ClaimStateConflict, StateAdapter, StateError
from joiner.domain.model import OfferingKey
from joiner.domain.resources import Resources
from joiner.ports import ClaimRecord, ClaimState
from testworld.aws import REGION, SerialMotoServer, create_state_table, fake_credentials

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
TABLE = "joiner-state"


class Clock:
    def __init__(self, moment: datetime = T0) -> None:
        self.moment = moment

    def now(self) -> datetime:
        return self.moment

    def advance(self, **delta: float) -> None:
        self.moment += timedelta(**delta)


@pytest.fixture()
def clock() -> Clock:
    return Clock()


_tables = itertools.count()


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with fake_credentials(), mock_aws():
        yield AwsClients(REGION)


@pytest.fixture()
def table(aws: AwsClients) -> object:
    """A fresh state table per test (moto stays up for the module)."""
    name = create_state_table(aws.dynamodb, f"{TABLE}-{next(_tables)}")
    return aws.table(name)


@pytest.fixture()
def state(table, clock) -> StateAdapter:
    return StateAdapter(table, clock)


def cpu(cores: float, memory_gi: int = 0) -> Resources:
    return Resources.parse({"cpu": str(cores), "memory": f"{memory_gi}Gi"} if memory_gi else {"cpu": str(cores)})


def record(claim_id: str = "c1", pool: str = "default", **changes) -> ClaimRecord:
    base: dict[str, Any] = dict(claim_id=claim_id, node_pool=pool, state="reserved", created_at=T0)
    base.update(changes)
    return ClaimRecord(**base)


# ---------------------------------------------------------------- claims


def test_claim_round_trip_and_conditional_create(state: StateAdapter) -> None:
    full = record(
        instance_id="i-1",
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type="spot",
        price=0.0354,
        pods=("ns/a", "ns/b"),
        node_name="ip-10-0-0-1",
        reserved=Resources.parse({"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}),
        launched_at=T0 + timedelta(seconds=5),
        reason="pending pods",
    )
    assert state.put_claim(full) is True
    assert state.put_claim(record(state="launched")) is False  # retry: the original stays
    assert state.get_claim("c1") == full
    assert state.get_claim("nope") is None


def test_update_claim_sets_removes_and_reports_missing(state: StateAdapter) -> None:
    state.put_claim(record(instance_id="i-1", reason="x"))
    updated = state.update_claim("c1", state="registered", node_name="node-a", registered_at=T0 + timedelta(minutes=1), reason=None)
    assert (updated.state, updated.node_name, updated.reason, updated.instance_id) == ("registered", "node-a", "", "i-1")
    assert updated.registered_at == T0 + timedelta(minutes=1)
    assert state.get_claim("c1") == updated
    with pytest.raises(ClaimNotFound):
        state.update_claim("ghost", state="launched")
    with pytest.raises(StateError, match="unknown or immutable"):
        state.update_claim("c1", colour="blue")
    with pytest.raises(StateError, match="cannot be removed"):
        state.update_claim("c1", node_pool=None)
    assert state.get_claim("ghost") is None  # the failed update created nothing


def test_update_claim_with_expected_state_is_conditional(state: StateAdapter) -> None:
    state.put_claim(record())
    launched = state.update_claim("c1", expected_state="reserved", state="launched", instance_id="i-1")
    assert launched.state == "launched" and launched.instance_id == "i-1"
    with pytest.raises(ClaimStateConflict) as conflict:
        state.update_claim("c1", expected_state="reserved", state="closed", closed_at=T0, reason="gc")
    assert isinstance(conflict.value, StateError) and conflict.value.code == "ClaimStateConflict"
    assert conflict.value.current == launched and conflict.value.expected == ("reserved",)
    assert state.get_claim("c1") == launched  # nothing written
    registered = state.update_claim("c1", expected_state=("launched", "registered"), state="registered", node_name="n1")
    assert registered.state == "registered" and registered.node_name == "n1"
    with pytest.raises(ClaimStateConflict):
        state.update_claim("c1", expected_state=("reserved", "launched"))  # no fields: checked on a read
    assert state.update_claim("c1", expected_state="registered") == registered
    with pytest.raises(ClaimNotFound):
        state.update_claim("ghost", expected_state="reserved", state="closed")
    with pytest.raises(StateError, match="expected_state"):
        state.update_claim("c1", expected_state=(), state="closed")
    assert state.get_claim("ghost") is None


def test_closed_claims_expire_and_leave_open_claims(state: StateAdapter, table, clock: Clock) -> None:
    for index in range(3):
        state.put_claim(record(f"c{index}", created_at=T0 + timedelta(seconds=index)))
    state.update_claim("c1", state="closed", closed_at=T0 + timedelta(minutes=5))
    assert [c.claim_id for c in state.open_claims()] == ["c0", "c2"]
    raw = table.get_item(Key={"pk": "CLAIM#c1", "sk": "CLAIM"})["Item"]
    assert int(raw["expiresAt"]) == int((T0 + timedelta(minutes=5, days=1)).timestamp())
    reopened = state.update_claim("c1", state="terminating")
    assert reopened.state == "terminating"
    assert "expiresAt" not in table.get_item(Key={"pk": "CLAIM#c1", "sk": "CLAIM"})["Item"]


def test_claim_states_are_stored_as_the_strings_older_items_hold(state: StateAdapter, table) -> None:
    """``ClaimState`` members go to DynamoDB as plain strings (items written before the enum
    read back unchanged, no migration), and items holding plain strings compare equal to them."""
    assert [s.value for s in ClaimState] == ["reserved", "launched", "registered", "initialized", "terminating", "closed"]
    state.put_claim(record("old"))  # a plain string, as before the enum
    state.put_claim(record("new", state=ClaimState.RESERVED))
    for claim_id in ("old", "new"):
        state.update_claim(claim_id, expected_state=ClaimState.RESERVED, state=ClaimState.CLOSED, closed_at=T0)
        raw = table.get_item(Key={"pk": f"CLAIM#{claim_id}", "sk": "CLAIM"})["Item"]
        assert raw["state"] == "closed" and type(raw["state"]) is str and "expiresAt" in raw
        claim = state.get_claim(claim_id)
        assert claim is not None and claim.state == ClaimState.CLOSED
    assert state.open_claims() == []


def test_claim_lookups_by_instance_and_node_pool(state: StateAdapter) -> None:
    state.put_claim(record("a1", "alpha", instance_id="i-a1"))
    state.put_claim(record("a2", "alpha", created_at=T0 + timedelta(seconds=1)))
    state.put_claim(record("b1", "beta", instance_id="i-b1"))
    state.put_item("termination", "x", {"id": "x"})  # another kind on the same GSI must not leak in
    assert state.claim_by_instance("i-b1").claim_id == "b1"
    assert state.claim_by_instance("i-none") is None
    state.update_claim("a2", instance_id="i-a2")
    assert state.claim_by_instance("i-a2").claim_id == "a2"
    assert [c.claim_id for c in state.claims_by_node_pool("alpha")] == ["a1", "a2"]
    assert state.claims_by_node_pool("gamma") == []


# ---------------------------------------------------------------- reservations


def test_reservations_respect_limits_and_are_idempotent(state: StateAdapter) -> None:
    limits = Resources.parse({"cpu": "10", "memory": "40Gi"})
    nothing = Resources()
    assert state.reserve_capacity("p", "c1", cpu(4, 16), limits, nothing)
    assert state.reserve_capacity("p", "c1", cpu(4, 16), limits, nothing)  # retry: not counted twice
    assert state.reserved_capacity("p") == cpu(4, 16)
    assert state.reserve_capacity("p", "c2", cpu(4, 16), limits, nothing)
    assert not state.reserve_capacity("p", "c3", cpu(4, 1), limits, nothing)  # cpu 12 > 10
    assert not state.reserve_capacity("p", "c3", cpu(1, 1), limits, Resources.parse({"cpu": "2"}))  # in use counts
    assert state.reserve_capacity("p", "c3", cpu(2, 8), limits, nothing)  # exactly at the limit
    assert state.reserved_capacity("p") == cpu(10, 40)
    state.release_capacity("p", "c2")
    state.release_capacity("p", "c2")  # idempotent
    assert state.reserved_capacity("p") == cpu(6, 24)
    assert state.reserve_capacity("p", "c4", cpu(4, 16), limits, nothing)


def test_unlimited_pools_and_resources(state: StateAdapter) -> None:
    assert state.reserve_capacity("free", "c1", cpu(1000), None, Resources())
    gpu_only = Resources.parse({"nvidia.com/gpu": "1"})
    big = Resources.parse({"cpu": "500", "nvidia.com/gpu": "1"})
    assert state.reserve_capacity("g", "c1", big, gpu_only, Resources())  # cpu is not limited
    assert not state.reserve_capacity("g", "c2", big, gpu_only, Resources())
    assert state.reserved_capacity("g") == big
    assert state.reserved_capacity("never-used") == Resources()


def test_zero_limit_blocks_and_release_of_unknown_is_noop(state: StateAdapter) -> None:
    zero = Resources.keeping_zeros({"cpu": 0})
    assert not state.reserve_capacity("z", "c1", cpu(1), zero, Resources())
    state.release_capacity("z", "never-reserved")
    assert state.reserved_capacity("z") == Resources()
    with pytest.raises(StateError, match="negative"):
        state.reserve_capacity("z", "c2", Resources({"cpu": -1}), None, Resources())


@pytest.fixture(scope="module")
def moto_server() -> Iterator[SerialMotoServer]:
    with fake_credentials():
        server = SerialMotoServer()
        server.start()
        try:
            AwsClients(REGION, server.endpoint).dynamodb  # warm the session
            yield server
        finally:
            server.stop()


def _race(server: SerialMotoServer, table: str, callers: int, action) -> list:
    """Run ``action(adapter, index)`` in ``callers`` threads released together, each with its
    own DynamoDB client and connection, like overlapping Lambda invocations."""
    session = boto3.Session(region_name=REGION)
    adapters = [StateAdapter(AwsClients(REGION, server.endpoint, session=session).table(table), Clock()) for _ in range(callers)]
    barrier = threading.Barrier(callers)
    results: list = [None] * callers
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = action(adapters[index], index)
        except BaseException as error:  # noqa: BLE001 - surfaced below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return results


def test_concurrent_reservations_never_exceed_the_limit(moto_server: SerialMotoServer) -> None:
    with fake_credentials():
        clients = AwsClients(REGION, moto_server.endpoint)
        create_state_table(clients.dynamodb, "race-reserve")
        limits = Resources.parse({"cpu": "5"})
        for pool in ("fresh", "warm"):
            if pool == "warm":  # the pool item already exists
                StateAdapter(clients.table("race-reserve"), Clock()).reserve_capacity(pool, "seed", cpu(1), limits, Resources())
            outcomes = _race(
                moto_server,
                "race-reserve",
                8,
                lambda adapter, i, pool=pool: adapter.reserve_capacity(pool, f"claim-{i}", cpu(1), limits, Resources()),
            )
            adapter = StateAdapter(clients.table("race-reserve"), Clock())
            expected = 5 if pool == "fresh" else 4
            assert sum(outcomes) == expected
            assert adapter.reserved_capacity(pool) == cpu(5)


def test_concurrent_releases_subtract_once(moto_server: SerialMotoServer) -> None:
    with fake_credentials():
        clients = AwsClients(REGION, moto_server.endpoint)
        create_state_table(clients.dynamodb, "race-release")
        adapter = StateAdapter(clients.table("race-release"), Clock())
        adapter.reserve_capacity("p", "a", cpu(3), None, Resources())
        adapter.reserve_capacity("p", "b", cpu(2), None, Resources())
        _race(moto_server, "race-release", 6, lambda other, i: other.release_capacity("p", "a"))
        assert adapter.reserved_capacity("p") == cpu(2)


def test_a_shrink_racing_a_release_subtracts_each_amount_once(moto_server: SerialMotoServer) -> None:
    """A launch recording its smaller instance type while termination releases the claim: the
    pool ends with the other claims' reservations only, whichever wins."""
    with fake_credentials():
        clients = AwsClients(REGION, moto_server.endpoint)
        create_state_table(clients.dynamodb, "race-shrink")
        adapter = StateAdapter(clients.table("race-shrink"), Clock())
        for round_index in range(3):
            claim = f"a{round_index}"
            adapter.reserve_capacity("p", claim, cpu(8), None, Resources())
            adapter.reserve_capacity("p", f"b{round_index}", cpu(1), None, Resources())
            _race(
                moto_server,
                "race-shrink",
                2,
                lambda other, i, claim=claim: other.shrink_reservation("p", claim, cpu(2)) if i == 0 else other.release_capacity("p", claim),
            )
            assert adapter.reservations("p") == {f"b{i}": cpu(1) for i in range(round_index + 1)}
            assert adapter.reserved_capacity("p") == cpu(round_index + 1)


def test_closing_and_recording_a_launch_race_exactly_one_wins(moto_server: SerialMotoServer) -> None:
    """gc closing an abandoned reservation and provisioning recording its launch, at once:
    both conditional on ``reserved``, so exactly one transition happens, and the loser sees
    the winner's record."""
    with fake_credentials():
        clients = AwsClients(REGION, moto_server.endpoint)
        create_state_table(clients.dynamodb, "race-claim")
        adapter = StateAdapter(clients.table("race-claim"), Clock())
        for round_ in range(5):
            claim_id = f"c{round_}"
            adapter.put_claim(record(claim_id))

            def act(other: StateAdapter, index: int, claim_id: str = claim_id) -> object:
                try:
                    if index == 0:
                        return other.update_claim(claim_id, expected_state="reserved", state="closed", closed_at=T0, reason="gc")
                    return other.update_claim(claim_id, expected_state="reserved", state="launched", instance_id="i-1", launched_at=T0)
                except ClaimStateConflict as conflict:
                    return conflict

            outcomes = _race(moto_server, "race-claim", 2, act)
            winners = [o for o in outcomes if isinstance(o, ClaimRecord)]
            losers = [o for o in outcomes if isinstance(o, ClaimStateConflict)]
            assert len(winners) == 1 and len(losers) == 1
            assert losers[0].current == winners[0] == adapter.get_claim(claim_id)
            assert winners[0].state in ("closed", "launched")


# ---------------------------------------------------------------- leases


def test_lease_exclusivity_renewal_and_expiry(state: StateAdapter) -> None:
    assert state.acquire_lease("scanner", "inv-a", T0, 60)
    assert not state.acquire_lease("scanner", "inv-b", T0 + timedelta(seconds=30), 60)
    assert state.acquire_lease("scanner", "inv-a", T0 + timedelta(seconds=50), 60)  # renewal to T0+110
    assert not state.acquire_lease("scanner", "inv-b", T0 + timedelta(seconds=100), 60)
    assert state.acquire_lease("scanner", "inv-b", T0 + timedelta(seconds=110), 60)  # expired
    assert not state.acquire_lease("scanner", "inv-a", T0 + timedelta(seconds=120), 60)
    state.release_lease("scanner", "inv-a")  # not the owner: nothing happens
    assert not state.acquire_lease("scanner", "inv-c", T0 + timedelta(seconds=121), 60)
    state.release_lease("scanner", "inv-b")
    assert state.acquire_lease("scanner", "inv-c", T0 + timedelta(seconds=122), 60)
    assert state.acquire_lease("other", "inv-b", T0 + timedelta(seconds=122), 60)  # leases are independent


def test_lease_never_ends_early_with_fractional_times(state: StateAdapter) -> None:
    start = T0 + timedelta(milliseconds=500)
    assert state.acquire_lease("l", "a", start, 10)
    assert not state.acquire_lease("l", "b", start + timedelta(seconds=9, milliseconds=900), 10)


# ---------------------------------------------------------------- unavailable offerings


def test_unavailable_offerings_filter_expired_items(state: StateAdapter, table) -> None:
    soon = OfferingKey("c5.large", "us-east-1a", "spot")
    later = OfferingKey("m5.large", "us-east-1b", "on-demand")
    state.mark_unavailable(soon, T0 + timedelta(minutes=3), "InsufficientInstanceCapacity")
    state.mark_unavailable(later, T0 + timedelta(minutes=10), "InsufficientInstanceCapacity")
    assert state.unavailable_offerings(T0) == {soon, later}
    assert state.unavailable_offerings(T0 + timedelta(minutes=5)) == {later}  # item still stored, TTL is lazy
    assert table.get_item(Key={"pk": "UNAVAILABLE#c5.large#us-east-1a#spot", "sk": "UNAVAILABLE"}).get("Item")
    state.mark_unavailable(later, T0 + timedelta(minutes=1), "shorter")  # never shortens
    assert state.unavailable_offerings(T0 + timedelta(minutes=5)) == {later}
    state.mark_unavailable(soon, T0 + timedelta(minutes=20), "again")  # extends
    assert state.unavailable_offerings(T0 + timedelta(minutes=15)) == {soon}


def test_a_reservation_is_marked_unavailable_apart_from_its_offering(state: StateAdapter, table) -> None:
    """One record per reservation: other reservations of the same type and zone, and the
    offering as a whole, stay available; records written before reservations had one read back as before."""
    block = OfferingKey("p5.48xlarge", "us-east-1a", "reserved", reservation_id="cr-0a1b2c3d4e5f60718")
    offering = OfferingKey("p5.48xlarge", "us-east-1a", "reserved")
    state.mark_unavailable(block, T0 + timedelta(minutes=40), "capacity-block-expiration e1")
    state.mark_unavailable(offering, T0 + timedelta(minutes=3), "ReservationCapacityExceeded")
    assert state.unavailable_offerings(T0) == {block, offering}
    assert state.unavailable_offerings(T0 + timedelta(minutes=5)) == {block}
    item = table.get_item(Key={"pk": "UNAVAILABLE#reservation#cr-0a1b2c3d4e5f60718", "sk": "UNAVAILABLE"})["Item"]
    assert item["reservationId"] == "cr-0a1b2c3d4e5f60718" and item["instanceType"] == "p5.48xlarge"
    # the same reservation named without its type and zone is the same record (the later expiry wins)
    state.mark_unavailable(OfferingKey("", "", "reserved", reservation_id=block.reservation_id), T0 + timedelta(minutes=50), "again")
    assert state.unavailable_offerings(T0 + timedelta(minutes=45)) == {OfferingKey("", "", "reserved", reservation_id=block.reservation_id)}


# ---------------------------------------------------------------- generic items


def test_generic_items(state: StateAdapter, clock: Clock) -> None:
    data = {"id": "n1", "pods": ["a", "b"], "ratio": 0.25, "nested": {"ok": True, "n": None}}
    assert state.put_item("termination", "n1", data)
    assert state.get_item("termination", "n1") == data
    assert state.get_item("TERMINATION", "n1") == data  # kinds are case-insensitive
    assert not state.put_item("termination", "n1", {"id": "other"}, if_absent=True)
    assert state.get_item("termination", "n1") == data
    state.put_item("termination", "n0", {"id": "n0"}, expires_at=T0 + timedelta(minutes=1))
    state.put_item("disruption", "d1", {"id": "d1"})
    assert state.list_items("termination") == [{"id": "n0"}, data]
    clock.advance(minutes=2)
    assert state.get_item("termination", "n0") is None  # expired, even though not yet deleted
    assert state.list_items("termination") == [data]
    assert state.put_item("termination", "n0", {"id": "new"}, if_absent=True)  # expired counts as absent
    state.delete_item("termination", "n1")
    assert state.get_item("termination", "n1") is None
    assert state.list_items("termination") == [{"id": "new"}]
    assert state.list_items("disruption") == [{"id": "d1"}]


@pytest.mark.parametrize("kind", ["claim", "POOL", "lease", "unavailable", "bad#kind", "", "9lives"])
def test_reserved_or_malformed_kinds_are_refused(state: StateAdapter, kind: str) -> None:
    with pytest.raises(StateError):
        state.put_item(kind, "x", {})


def test_non_json_data_is_refused(state: StateAdapter) -> None:
    with pytest.raises(StateError, match="JSON"):
        state.put_item("termination", "x", {"when": datetime.now(UTC)})
