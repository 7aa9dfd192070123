"""StateAdapter at scale, on moto: no item grows with the number of claims; reservations stay
within the limit and never leak under any interleaving of concurrent reserve, release and
shrink calls; open claims come from the sparse GSI; items an older version wrote keep working;
every call the adapter makes is one the deployed roles allow (the IAM guard)."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.core.botocore_stubber import MockRawResponse

from bench.state import MAX_ITEM_BYTES, item_size
from joiner.adapters.aws import AwsClients
from joiner.adapters.state import BY_OPEN_CLAIM, StateAdapter
from joiner.domain.resources import Resources
from joiner.ports import ClaimRecord, StateError
from tests.support.fakes import FakeState
from testworld import lambdas
from testworld.aws import REGION, create_state_table, fake_credentials, item_level_transaction_rollback

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
_names = itertools.count()


class Clock:
    def __init__(self, moment: datetime = T0) -> None:
        self.moment = moment

    def now(self) -> datetime:
        return self.moment


@pytest.fixture(scope="module")
def aws() -> Iterator[AwsClients]:
    with fake_credentials(), mock_aws(), item_level_transaction_rollback():
        yield AwsClients(REGION)


@pytest.fixture()
def table(aws: AwsClients) -> Any:
    return aws.table(create_state_table(aws.dynamodb, f"scale-{next(_names)}"))


def cpu(cores: int) -> Resources:
    return Resources({"cpu": cores * 1000, "nodes": 1000})


def record(claim_id: str, state: str = "reserved", **changes: Any) -> ClaimRecord:
    return ClaimRecord(claim_id=claim_id, node_pool="default", state=state, created_at=T0, **changes)


def items_of(table: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {}
    while True:
        page = table.scan(**kwargs)
        items.extend(page.get("Items", []))
        if not page.get("LastEvaluatedKey"):
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def legacy_pool(table: Any, pool: str, claims: dict[str, Resources]) -> None:
    """The pool item as the previous version kept it: the totals and a map of every claim."""
    total = sum(claims.values(), Resources())
    table.put_item(
        Item={
            "pk": f"POOL#{pool}",
            "sk": "POOL",
            "nodePoolName": pool,
            "reserved": {name: int(value) for name, value in total.items()},
            "claims": {claim_id: {name: int(value) for name, value in amount.items()} for claim_id, amount in claims.items()},
        }
    )


# ---------------------------------------------------------------- no item grows


def _reserve_many(state: StateAdapter, count: int) -> None:
    limits = Resources({"cpu": 10**12, "nodes": 10**9})
    for index in range(count):
        assert state.reserve_capacity("default", f"default-{index:016x}", cpu(4), limits, Resources())


def test_the_pool_item_and_each_reservation_item_keep_their_size_as_claims_grow(table: Any) -> None:
    state = StateAdapter(table, Clock())
    _reserve_many(state, 1)
    first = {item["sk"]: item_size(item) for item in items_of(table)}
    _reserve_many(state, 300)
    sizes: dict[str, int] = {}
    for item in items_of(table):
        sizes[item["sk"]] = item_size(item)
    assert sizes["POOL"] == first["POOL"]  # the totals' digits aside, nothing is added per claim
    assert {size for sk, size in sizes.items() if sk.startswith("RES#")} == {first["RES#default-0000000000000000"]}
    assert len(state.reservations("default")) == 300
    assert state.reserved_capacity("default") == Resources({"cpu": 1_200_000, "nodes": 300_000})


@pytest.mark.slow
def test_ten_thousand_reservations_in_one_pool_never_write_an_item_over_400_kb(table: Any) -> None:
    """Where the previous layout's pool item passed 400 KB (about 4,600 claims) and refused
    every reservation after."""
    state = StateAdapter(table, Clock())
    _reserve_many(state, 10_000)
    items = items_of(table)
    largest = max(item_size(item) for item in items)
    assert largest < 1024, largest  # constant-size items, far below the limit
    assert largest < MAX_ITEM_BYTES
    held = state.reservations("default")
    assert len(held) == 10_000
    assert sum(held.values(), Resources()) == state.reserved_capacity("default") == Resources({"cpu": 40_000_000, "nodes": 10_000_000})
    state.release_capacity("default", "default-0000000000000000")
    assert state.reserved_capacity("default") == Resources({"cpu": 39_996_000, "nodes": 9_999_000})


# ---------------------------------------------------------------- interleavings


@pytest.fixture(scope="module")
def racing(aws: AwsClients) -> SimpleNamespace:
    """Two adapters on separate clients of one table, and a one-shot hook on the first one's
    writes that runs the other's call just before the first one's write reaches DynamoDB: a
    concurrent call landing between its read and its write."""
    name = create_state_table(aws.dynamodb, f"racing-{next(_names)}")
    first, second = AwsClients(REGION), AwsClients(REGION)
    armed: dict[str, Any] = {}

    def interlope(**_: Any) -> None:
        action = armed.pop("action", None)
        if action is not None:
            armed["result"] = action()

    client = first.table(name).meta.client
    for operation in ("TransactWriteItems", "UpdateItem"):
        client.meta.events.register(f"before-call.dynamodb.{operation}", interlope)
    return SimpleNamespace(
        table=first.table(name),
        mine=StateAdapter(first.table(name), Clock(), sleep=lambda _: None),
        other=StateAdapter(second.table(name), Clock(), sleep=lambda _: None),
        armed=armed,
    )


LIMIT = Resources({"cpu": 6000})
CLAIMS = ("a", "b", "c", "d")
operation = st.one_of(
    st.tuples(st.just("reserve"), st.sampled_from(CLAIMS), st.integers(1, 4)),
    st.tuples(st.just("release"), st.sampled_from(CLAIMS), st.just(0)),
    st.tuples(st.just("shrink"), st.sampled_from(CLAIMS), st.integers(0, 3)),
)


def _apply(state: Any, pool: str, op: tuple[str, str, int]) -> object:
    kind, claim, cores = op
    amount = Resources({"cpu": cores * 1000}) if cores else Resources()
    try:
        if kind == "reserve":
            return state.reserve_capacity(pool, claim, amount, LIMIT, Resources())
        if kind == "release":
            return state.release_capacity(pool, claim)
        return state.shrink_reservation(pool, claim, amount)
    except StateError as error:
        return type(error).__name__


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(operation, st.none() | operation), min_size=1, max_size=12), legacy=st.booleans())
def test_any_interleaving_stays_within_the_limit_never_leaks_and_matches_the_fake(racing: SimpleNamespace, steps, legacy: bool) -> None:  # type: ignore[no-untyped-def]
    """Each step runs a call on one adapter; the optional second call runs on another adapter
    just before the first one's write. Every outcome, the totals and the reservations equal
    the in-memory fake's run of the same calls in the order DynamoDB applied them (the second
    call first when the first one wrote after it), so the adapter is linearizable; and the
    total is always the sum of the reservations and within the limit."""
    pool = f"p{next(_names)}"
    fake = FakeState()
    if legacy:  # a pool item the previous version wrote, holding claim "a"
        legacy_pool(racing.table, pool, {"a": Resources({"cpu": 2000})})
        fake.reserve_capacity(pool, "a", Resources({"cpu": 2000}), LIMIT, Resources())
    for first, second in steps:
        racing.armed.clear()
        if second is not None:
            racing.armed["action"] = lambda second=second: _apply(racing.other, pool, second)
        outcome = _apply(racing.mine, pool, first)
        if "action" in racing.armed:  # the first call wrote nothing: it went first
            racing.armed.pop("action")
            expected = _apply(fake, pool, first)
            if second is not None:
                assert _apply(racing.other, pool, second) == _apply(fake, pool, second)
        elif second is not None:
            assert racing.armed["result"] == _apply(fake, pool, second)
            expected = _apply(fake, pool, first)
        else:
            expected = _apply(fake, pool, first)
        assert outcome == expected, (first, second)
        held = racing.mine.reservations(pool)
        total = racing.mine.reserved_capacity(pool)
        assert held == fake.reservations(pool)
        assert total == sum(held.values(), Resources()) == fake.reserved_capacity(pool)
        assert total.get("cpu", 0) <= LIMIT["cpu"]


def test_a_transaction_cancelled_by_a_concurrent_one_is_retried(table: Any) -> None:
    """DynamoDB cancels a transaction that meets another on the same item (TransactionConflict):
    the adapter backs off and tries again, and the outcome is as if there had been no conflict."""
    sleeps: list[float] = []
    state = StateAdapter(table, Clock(), sleep=sleeps.append)
    conflicts = {"left": 3}
    cancelled = {
        "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled [None, TransactionConflict]"},
        "CancellationReasons": [{"Code": "None"}, {"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}],
    }

    def conflict(**_: Any) -> Any:  # answers instead of DynamoDB, as it answers a conflicting transaction
        if conflicts["left"] <= 0:
            return None
        conflicts["left"] -= 1
        return AWSResponse("https://dynamodb.us-east-1.amazonaws.com/", 400, {}, MockRawResponse(b"")), cancelled  # type: ignore[arg-type]

    events = table.meta.client.meta.events
    events.register_first("before-call.dynamodb.TransactWriteItems", conflict)
    try:
        assert state.reserve_capacity("p", "a", cpu(2), None, Resources())
        assert state.reserved_capacity("p") == cpu(2) and len(sleeps) >= 2
        conflicts["left"] = 100  # never clears: one clear error, nothing written
        with pytest.raises(StateError, match="concurrent"):
            state.reserve_capacity("p", "b", cpu(2), None, Resources())
        assert state.reservations("p") == {"a": cpu(2)}
    finally:
        events.unregister("before-call.dynamodb.TransactWriteItems", conflict)


# ---------------------------------------------------------------- the previous layout


def test_a_pool_item_written_by_the_previous_version_keeps_working(table: Any) -> None:
    def cores(n: int) -> Resources:
        return Resources({"cpu": n * 1000})

    legacy_pool(table, "p", {"old1": cores(2), "old2": cores(3)})
    state = StateAdapter(table, Clock())
    limits = Resources({"cpu": 8000})
    assert state.reservations("p") == {"old1": cores(2), "old2": cores(3)}
    assert state.reserve_capacity("p", "old1", cores(2), limits, Resources())  # already held: idempotent
    assert state.reserve_capacity("p", "old1", cores(2), limits, Resources({"cpu": 9000}))  # even past the limit
    assert not state.reserve_capacity("p", "new", cores(4), limits, Resources())  # 5 + 4 > 8
    assert state.reserve_capacity("p", "new", cores(3), limits, Resources())
    assert state.reserved_capacity("p") == cores(8)
    state.shrink_reservation("p", "old2", cores(1))
    state.release_capacity("p", "old1")
    state.release_capacity("p", "old1")
    assert state.reservations("p") == {"old2": cores(1), "new": cores(3)}
    assert state.reserved_capacity("p") == cores(4)
    state.release_capacity("p", "old2")
    pool_item = table.get_item(Key={"pk": "POOL#p", "sk": "POOL"})["Item"]
    assert pool_item["claims"] == {}  # drained; nothing new is ever added to it
    assert state.reservations("p") == {"new": cores(3)} and state.reserved_capacity("p") == cores(3)


# ---------------------------------------------------------------- open claims


def test_open_claims_come_from_the_sparse_index(table: Any) -> None:
    state = StateAdapter(table, Clock(), open_index_settle=timedelta(0))
    for claim_id in ("c1", "c2", "c3"):
        state.put_claim(record(claim_id))
    state.update_claim("c2", state="closed", closed_at=T0, reason="test")
    state.put_claim(record("c4", state="closed", closed_at=T0))
    indexed = table.query(IndexName=BY_OPEN_CLAIM, KeyConditionExpression="openClaim = :o", ExpressionAttributeValues={":o": "OPEN"})["Items"]
    assert sorted(item["claimId"] for item in indexed) == ["c1", "c3"]  # closed claims leave the index
    reader = StateAdapter(table, Clock(), open_index_settle=timedelta(0))  # wrote nothing: the index alone
    assert [c.claim_id for c in reader.open_claims()] == ["c1", "c3"]
    state.update_claim("c2", state="terminating")  # re-opened: back in the index
    assert [c.claim_id for c in reader.open_claims()] == ["c1", "c2", "c3"]
    assert not any(request.startswith("Scan") for request in _requests(table, reader.open_claims))


def _requests(table: Any, call: Callable[[], object]) -> list[str]:
    seen: list[str] = []

    def note(model: Any, **_: Any) -> None:
        seen.append(model.name)

    events = table.meta.client.meta.events
    events.register("before-call.dynamodb", note)
    try:
        call()
    finally:
        events.unregister("before-call.dynamodb", note)
    return seen


def test_claims_written_by_the_previous_version_are_found_and_backfilled_during_the_settle_period(table: Any) -> None:
    clock = Clock()
    old = StateAdapter(table, clock)
    old.put_claim(record("legacy"))
    table.update_item(Key={"pk": "CLAIM#legacy", "sk": "CLAIM"}, UpdateExpression="REMOVE openClaim")  # as the old version wrote it
    table.put_item(Item={"pk": "CLAIM#gone", "sk": "CLAIM", "claimId": "gone", "nodePool": "default", "state": "closed", "createdAt": T0.isoformat()})
    state = StateAdapter(table, clock)
    assert [c.claim_id for c in state.open_claims()] == ["legacy"]  # the consistent Scan, as before
    assert "Scan" in _requests(table, state.open_claims)
    assert table.get_item(Key={"pk": "CLAIM#legacy", "sk": "CLAIM"})["Item"]["openClaim"] == "OPEN"
    assert "openClaim" not in table.get_item(Key={"pk": "CLAIM#gone", "sk": "CLAIM"})["Item"]  # closed: left out
    clock.moment += timedelta(hours=1)
    later = StateAdapter(table, clock)
    assert [c.claim_id for c in later.open_claims()] == ["legacy"]
    assert "Scan" not in _requests(table, later.open_claims) and "Query" in _requests(table, later.open_claims)


@contextlib.contextmanager
def index_lagging(table: Any, hidden: set[str], stale: set[str]) -> Iterator[None]:
    """The GSI as DynamoDB may serve it just after writes: ``hidden`` claims not there yet,
    ``stale`` ones (closed since) still there as ``reserved``."""

    def lag(parsed: Any, model: Any, **_: Any) -> None:
        if model.name != "Query" or parsed.get("Items") is None:
            return
        kept = [item for item in parsed["Items"] if item.get("sk", {}).get("S") != "CLAIM" or item.get("claimId", {}).get("S") not in hidden]
        for claim_id in sorted(stale):
            kept.append(
                {
                    "pk": {"S": f"CLAIM#{claim_id}"},
                    "sk": {"S": "CLAIM"},
                    "claimId": {"S": claim_id},
                    "nodePool": {"S": "default"},
                    "state": {"S": "reserved"},
                    "createdAt": {"S": T0.isoformat()},
                    "openClaim": {"S": "OPEN"},
                }
            )
        parsed["Items"] = kept

    events = table.meta.client.meta.events
    events.register_first("after-call.dynamodb.Query", lag)
    try:
        yield
    finally:
        events.unregister("after-call.dynamodb.Query", lag)


def test_a_round_sees_its_own_writes_however_late_the_index_is(table: Any) -> None:
    """A claim created or closed by this container moments ago is read by id, consistently:
    the next round must not plan its pods again (a second launch) nor keep a closed claim."""
    state = StateAdapter(table, Clock(), open_index_settle=timedelta(0))
    state.put_claim(record("kept"))
    state.put_claim(record("new"))
    state.update_claim("kept", state="closed", closed_at=T0)
    other = StateAdapter(table, Clock(), open_index_settle=timedelta(0))
    with index_lagging(table, hidden={"new"}, stale={"kept"}):
        assert [c.claim_id for c in other.open_claims()] == ["kept", "new"]  # a stale closed claim only holds back its pods
        assert [c.claim_id for c in state.open_claims()] == ["new"]


def test_a_claim_another_container_created_moments_ago_is_found_however_late_the_index_is(table: Any) -> None:
    """The index does not show the claims another container just created: they are found by a
    strongly consistent read of the recent claims, for as long as the index may lag."""
    clock = Clock()
    writer = StateAdapter(table, clock, open_index_settle=timedelta(0))
    writer.put_claim(record("older"))
    clock.moment += timedelta(minutes=10)
    writer.put_claim(record("fresh"))
    reader = StateAdapter(table, clock, open_index_settle=timedelta(0))
    with index_lagging(table, hidden={"older", "fresh"}, stale=set()):
        assert [c.claim_id for c in reader.open_claims()] == ["fresh"]  # the index has had ten minutes for "older"
    assert [c.claim_id for c in reader.open_claims()] == ["fresh", "older"]


# ---------------------------------------------------------------- IAM


@contextlib.contextmanager
def as_function(name: str, table: Any) -> Iterator[None]:
    """Attribute the adapter's requests to ``name``'s deployed role (the IAM guard checks them)."""
    settings_ = SimpleNamespace(
        cluster_name="prod",
        region=REGION,
        state_table=table.name,
        idempotency_table="prod-idem",
        work_queue_url="",
        interruption_queue_url="",
        node_role="JoinerNodeRole-prod",
    )
    module = SimpleNamespace(_cold={"runtime": SimpleNamespace(settings=settings_)})
    token = lambdas._INVOCATION.set(lambdas.Invocation(name, module))  # type: ignore[arg-type]
    try:
        yield
    finally:
        lambdas._INVOCATION.reset(token)


@pytest.mark.parametrize("function", ["scanner", "gc", "termination", "interruption", "disruption"])
def test_every_call_is_allowed_to_the_functions_that_use_the_adapter(table: Any, function: str, iam_guard: Any) -> None:
    state = StateAdapter(table, Clock(), open_index_settle=timedelta(0))
    before = iam_guard.requests
    with as_function(function, table):
        state.put_claim(record("c1"))
        state.update_claim("c1", state="launched", instance_id="i-1")
        assert [c.claim_id for c in state.open_claims()] == ["c1"]  # index Query + TransactGetItems
        assert state.reserve_capacity("p", "c1", cpu(4), Resources({"cpu": 8000}), Resources())
        state.shrink_reservation("p", "c1", cpu(2))
        assert state.reservations("p") == {"c1": cpu(2)}
        state.release_capacity("p", "c1")
        assert state.claim_by_instance("i-1") is not None
    assert iam_guard.requests - before >= 10  # evaluated (a denial fails the test)
    assert not [f for f in iam_guard.findings if f.function == function]
