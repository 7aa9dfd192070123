"""Property: random interleavings of reserve / launch-shrink / register / terminate / fail,
by rounds that read the cluster at different moments, never let the capacity that exists
exceed a NodePool limit (issue 10, defect 3).

A "round" reads the Nodes (and the open claims), later reads the pool's reservations and
computes what uncovered Nodes use with the provisioning service's own
:func:`~joiner.services.planning_round.unreserved_usage`, and later still reserves with that
figure; anything may happen in between. The state is the in-memory fake and the DynamoDB
adapter against moto, which implement the same conditional semantics.

The protocol before the fix (registration released the reservation, and ``in_use`` was every
Node the round had read) fails this property within a few thousand examples, e.g. one round
reserving, a registration, then the same round reserving again with its stale figure."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from joiner.adapters.aws import AwsClients
from joiner.adapters.state import StateAdapter
from joiner.domain import labels as wk
from joiner.domain.model import Node
from joiner.domain.resources import EMPTY, Resources
from joiner.ports import ClaimRecord
from joiner.services.planning_round import unreserved_usage
from tests.support.fakes import FakeClock, FakeState
from testworld.aws import REGION, create_state_table, fake_credentials

POOL = "p"
LIMIT = Resources({"cpu": 8000})
T0 = datetime(2025, 3, 1, tzinfo=UTC)
#: a Node of an older version whose claim's reservation was released at registration
LEGACY = Node("legacy", labels={wk.NODEPOOL: POOL, wk.NODECLAIM: "legacy"}, capacity=Resources({"cpu": 2000}), provider_id="aws:///z/i-legacy")


@dataclasses.dataclass
class Claim:
    claim_id: str
    reserved: Resources  # what the reservation says
    capacity: Resources  # what exists (0 before launch)
    node: bool = False
    gone: bool = False


@dataclasses.dataclass
class Round:
    nodes: tuple[Node, ...] = ()
    claims: tuple[ClaimRecord, ...] = ()
    in_use: Resources | None = None


class Model:
    def __init__(self, state: object) -> None:
        self.state = state
        self.claims: dict[str, Claim] = {}
        self.rounds: dict[int, Round] = {}
        self.ids = itertools.count()

    def nodes(self) -> tuple[Node, ...]:
        nodes = [LEGACY]
        for claim in self.claims.values():
            if claim.node and not claim.gone:
                nodes.append(
                    Node(
                        f"node-{claim.claim_id}",
                        labels={wk.NODEPOOL: POOL, wk.NODECLAIM: claim.claim_id},
                        capacity=claim.capacity,
                        provider_id=f"aws:///z/i-{claim.claim_id}",
                    )
                )
        return tuple(nodes)

    def records(self) -> tuple[ClaimRecord, ...]:
        return tuple(ClaimRecord(c.claim_id, POOL, "launched", T0, instance_id=f"i-{c.claim_id}") for c in self.claims.values() if not c.gone)

    def existing(self) -> Resources:
        total = LEGACY.capacity
        for claim in self.claims.values():
            if not claim.gone:
                total = total + claim.capacity
        return total

    def step(self, op: str, round_index: int, size: int, pick: int) -> None:
        live = sorted(c for c, claim in self.claims.items() if not claim.gone)
        chosen = self.claims[live[pick % len(live)]] if live else None
        if op == "read":
            self.rounds[round_index] = Round(self.nodes(), self.records())
        elif op == "usage" and round_index in self.rounds:
            work = self.rounds[round_index]
            held = self.state.reservations(POOL)  # type: ignore[attr-defined]
            work.in_use = unreserved_usage(work.nodes, work.claims, {POOL: held}).get(POOL, EMPTY)
        elif op == "reserve" and round_index in self.rounds and self.rounds[round_index].in_use is not None:
            amount = Resources({"cpu": 2000 * size})
            claim_id = f"c{next(self.ids)}"
            in_use = self.rounds[round_index].in_use
            assert in_use is not None
            if self.state.reserve_capacity(POOL, claim_id, amount, LIMIT, in_use):  # type: ignore[attr-defined]
                # conservatively, the instance exists from the moment it is reserved
                self.claims[claim_id] = Claim(claim_id, amount, amount)
        elif op == "launch-smaller" and chosen is not None and not chosen.node and chosen.reserved["cpu"] > 2000:
            smaller = Resources({"cpu": chosen.reserved["cpu"] - 2000})
            self.state.shrink_reservation(POOL, chosen.claim_id, smaller)  # type: ignore[attr-defined]
            chosen.reserved = chosen.capacity = smaller
        elif op == "register" and chosen is not None:
            chosen.node = True
        elif op == "terminate" and chosen is not None:
            chosen.gone = True  # instance terminated and Node deleted, then the reservation released
            self.state.release_capacity(POOL, chosen.claim_id)  # type: ignore[attr-defined]
            self.state.release_capacity(POOL, chosen.claim_id)  # type: ignore[attr-defined]  # a retry
        assert self.existing()["cpu"] <= LIMIT["cpu"], (op, self.claims)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["read", "usage", "reserve", "reserve", "launch-smaller", "register", "terminate"]),
        st.integers(0, 2),  # which round
        st.integers(1, 2),  # 2 or 4 CPU
        st.integers(0, 20),  # which claim
    ),
    max_size=40,
)


@settings(max_examples=1000, deadline=None)
@given(OPS)
def test_fake_state_never_lets_existing_capacity_exceed_the_limit(ops: list[tuple[str, int, int, int]]) -> None:
    model = Model(FakeState())
    for op in ops:
        model.step(*op)


_tables = itertools.count()


@pytest.fixture(scope="module")
def dynamodb() -> Iterator[AwsClients]:
    with fake_credentials(), mock_aws():
        yield AwsClients(REGION)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_dynamodb_state_never_lets_existing_capacity_exceed_the_limit(dynamodb: AwsClients, ops: list[tuple[str, int, int, int]]) -> None:
    table = dynamodb.table(create_state_table(dynamodb.dynamodb, f"limits-{next(_tables)}"))
    model = Model(StateAdapter(table, FakeClock()))
    for op in ops:
        model.step(*op)


def test_a_node_counts_once_and_a_self_applied_claim_label_covers_nothing() -> None:
    one = Resources({"cpu": 2000})
    claims = [ClaimRecord("c1", POOL, "registered", T0, instance_id="i-c1"), ClaimRecord("c2", POOL, "reserved", T0)]
    held = {POOL: {"c1": one + {"nodes": 1000}, "c2": one + {"nodes": 1000}}}

    def node(name: str, instance: str, claim: str | None) -> Node:
        labels = {wk.NODEPOOL: POOL} | ({wk.NODECLAIM: claim} if claim else {})
        return Node(name, labels=labels, capacity=one, provider_id=f"aws:///z/{instance}")

    covered = [node("n1", "i-c1", None), node("n2", "i-c2", "c2")]  # by its claim's instance; by label (launch not recorded)
    assert unreserved_usage(covered, claims, held) == {}
    impostor = node("n3", "i-other", "c1")  # names a claim that records another instance
    unlabelled = node("n4", "i-unknown", None)
    assert unreserved_usage([*covered, impostor, unlabelled], claims, held) == {POOL: Resources({"cpu": 4000, "nodes": 2000})}
    assert unreserved_usage([impostor], claims, {}) == {}  # pools without limits are not computed
