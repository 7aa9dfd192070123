"""Pods nominated to a Node take its room in the plan, as kube-scheduler keeps it for them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain.model import Pod
from joiner.domain.planning import nominated_pods
from joiner.domain.resources import Resources

NODES = ("n1", "n2", "n3")


@st.composite
def pods(draw: st.DrawFn) -> list[Pod]:
    count = draw(st.integers(min_value=0, max_value=40))
    out = []
    for index in range(count):
        out.append(
            Pod(
                namespace="default",
                name=f"p{index}",
                uid=f"u{index}",
                requests=Resources({"cpu": draw(st.integers(1, 2**40))}),
                node_name=draw(st.sampled_from([None, None, *NODES])),
                nominated_node=draw(st.sampled_from([None, "gone", *NODES])),
                deleting=draw(st.booleans()),
                phase=draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])),
            )
        )
    return out


@settings(max_examples=200, deadline=None)
@given(pods(), st.sets(st.sampled_from(NODES)), st.sets(st.sampled_from([f"default/p{i}" for i in range(40)])))
def test_exactly_the_unbound_live_unplanned_nominations_count_as_bound_there(all_pods: list[Pod], live: set[str], planned: set[str]) -> None:
    found = nominated_pods(all_pods, live, planned)
    expected = {
        p.key: p.nominated_node
        for p in all_pods
        if p.node_name is None and p.nominated_node in live and p.key not in planned and not p.deleting and not p.is_terminal
    }
    assert {p.key: p.node_name for p in found} == expected
    by_key = {p.key: p for p in all_pods}
    assert all(p.requests == by_key[p.key].requests and p.nominated_node == p.node_name for p in found)


def test_a_pod_bound_meanwhile_is_counted_once_where_it_runs() -> None:
    bound = Pod(namespace="default", name="a", node_name="n2", nominated_node="n1", requests=Resources({"cpu": 1000}))
    assert nominated_pods([bound], {"n1", "n2"}, set()) == ()
