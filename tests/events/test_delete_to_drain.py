"""Delete to drain (services/deletion.py) with in-memory fakes: Joiner's finalizer added to its
Nodes and NodeClaim mirrors, ``kubectl delete`` draining and terminating through it, and every
way a finalizer Joiner cannot act on is let go."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.nodeclaims import STUCK_DELETION_AFTER, TERMINATION_FINALIZER, DeletionStep, deletion_step
from joiner.ports import ClaimRecord
from joiner.services.context import build_runtime
from joiner.services.deletion import DELETED_REASON, handle_deletions, remove_finalizers
from joiner.services.nodeclaims import sync_node_claims
from joiner.services.termination import TERMINATION_KIND
from tests.events.test_termination_service import INSTANCE, SETTINGS
from tests.events.test_termination_service import World as TerminationWorld
from tests.support.fakes import EPOCH, node_json

F = TERMINATION_FINALIZER


# ---------------------------------------------------------------- the rule


@given(
    st.lists(st.sampled_from([F, "other/finalizer"]), max_size=3, unique=True),
    st.one_of(st.none(), st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)).map(lambda d: d.replace(tzinfo=EPOCH.tzinfo))),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
)
def test_a_deletion_is_never_held_by_a_finalizer_joiner_cannot_act_on(finalizers, deletion, managed, enabled, terminating, now) -> None:
    now = now.replace(tzinfo=EPOCH.tzinfo)
    step = deletion_step(finalizers, deletion, managed=managed, enabled=enabled, terminating=terminating, now=now)
    if deletion is not None and F in finalizers:
        if not managed or not enabled:
            assert step is DeletionStep.RELEASE
        elif not terminating:
            assert step is (DeletionStep.TERMINATE_OR_RELEASE if now - deletion >= STUCK_DELETION_AFTER else DeletionStep.TERMINATE)
        else:
            assert step is DeletionStep.NONE  # the termination under way removes it
    if deletion is None:
        assert step is (
            DeletionStep.ADD_FINALIZER
            if managed and enabled and F not in finalizers
            else DeletionStep.RELEASE
            if F in finalizers and not enabled
            else DeletionStep.NONE
        )
    if deletion is not None and F not in finalizers:
        assert step is DeletionStep.NONE  # never added to an object already going


# ---------------------------------------------------------------- with the fakes


class World(TerminationWorld):
    def __init__(self, *, enabled: bool = True) -> None:
        super().__init__()
        settings = dataclasses.replace(SETTINGS, delete_to_drain=enabled)
        self.runtime = build_runtime(
            settings,
            kube_port=self.kube,
            ec2_port=self.ec2,
            state_port=self.state,
            queue_port=self.queue,
            clock=self.clock,
            metric=self.metrics,
            sleep=self.clock.sleep,
        )

    def node(self) -> dict:
        return self.kube.get("nodes", None, "n1")

    def kubectl_delete_node(self) -> None:
        node = self.node()
        node["metadata"]["deletionTimestamp"] = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        self.kube.remove("nodes", None, "n1")
        self.kube.add("nodes", node)


@pytest.fixture
def world() -> World:
    return World()


def test_managed_nodes_and_mirrors_get_the_finalizer_and_others_do_not(world: World) -> None:
    world.kube.add("nodes", node_json("not-ours", instance_id="i-00000000000000009"))
    sync_node_claims(world.runtime)
    (mirror,) = world.kube.list_node_claims()
    assert mirror["metadata"]["finalizers"] == [F]  # created with it
    result = handle_deletions(world.runtime, world.clock.now())
    assert result.finalizers_added == ["node/n1"]
    assert world.node()["metadata"]["finalizers"] == [F]
    assert not world.kube.get("nodes", None, "not-ours")["metadata"].get("finalizers")
    assert handle_deletions(world.runtime, world.clock.now()).finalizers_added == []  # idempotent


def test_kubectl_delete_node_cordons_drains_terminates_and_lets_the_node_go(world: World) -> None:
    world.pod("app")
    handle_deletions(world.runtime, world.clock.now())
    world.kube.delete_node("n1")  # kubectl delete node n1: held by the finalizer
    assert world.node()["metadata"]["deletionTimestamp"]
    result = handle_deletions(world.runtime, world.clock.now())
    assert result.terminations == ["n1"]
    assert world.node()["spec"]["unschedulable"] is True
    assert world.state.get_item(TERMINATION_KIND, "n1") is not None and world.state.get_claim("c1").state == "terminating"
    assert handle_deletions(world.runtime, world.clock.now()).terminations == []  # under way: not begun twice
    world.run_until_done()
    assert world.kube.get("nodes", None, "n1") is None  # finalizer removed after the instance was terminated
    assert world.ec2.instances[INSTANCE].state in ("shutting-down", "terminated")
    assert world.state.get_claim("c1").state == "closed" and world.state.get_claim("c1").reason == DELETED_REASON
    assert "default/app" in world.kube.evictions


def test_kubectl_delete_nodeclaim_drains_its_node_and_the_mirror_goes_when_the_claim_closes(world: World) -> None:
    sync_node_claims(world.runtime)
    handle_deletions(world.runtime, world.clock.now())
    (mirror,) = world.kube.list_node_claims()
    name = mirror["metadata"]["name"]
    world.kube.delete_node_claim(name)  # kubectl delete nodeclaim: held
    assert world.kube.get("node_claims", None, name)["metadata"]["deletionTimestamp"]
    assert handle_deletions(world.runtime, world.clock.now()).terminations == ["n1"]
    world.run_until_done()
    assert world.state.get_claim("c1").state == "closed"
    sync_node_claims(world.runtime)
    assert world.kube.list_node_claims() == []


def test_a_deleted_mirror_of_an_unregistered_claim_terminates_the_instance(world: World) -> None:
    world.state.put_claim(ClaimRecord("c2", "default", "launched", EPOCH, instance_id="i-00000000000000002"))
    world.ec2.add_instance("i-00000000000000002")
    sync_node_claims(world.runtime)
    name = next(m["metadata"]["name"] for m in world.kube.list_node_claims() if m["metadata"]["labels"][wk.NODECLAIM] == "c2")
    world.kube.delete_node_claim(name)
    handle_deletions(world.runtime, world.clock.now())
    assert world.ec2.instances["i-00000000000000002"].state in ("shutting-down", "terminated")
    assert world.state.get_claim("c2").state == "closed"
    assert world.kube.get("node_claims", None, name) is None


def test_a_deletion_joiner_cannot_act_on_is_released(world: World) -> None:
    foreign = node_json("foreign", instance_id="i-00000000000000009")
    foreign["metadata"].update(finalizers=[F, "other/x"], deletionTimestamp="2026-01-01T00:00:00Z")
    world.kube.add("nodes", foreign)
    result = handle_deletions(world.runtime, world.clock.now())
    assert "node/foreign" in result.finalizers_released
    assert world.kube.get("nodes", None, "foreign")["metadata"]["finalizers"] == ["other/x"]  # others kept


def test_a_deletion_held_too_long_with_nothing_under_way_is_still_drained_when_joiner_can_act(world: World) -> None:
    handle_deletions(world.runtime, world.clock.now())
    world.kubectl_delete_node()
    world.clock.advance(int(STUCK_DELETION_AFTER.total_seconds()) + 1)  # e.g. Joiner's functions could not reach the cluster
    result = handle_deletions(world.runtime, world.clock.now())
    assert result.finalizers_released == [] and result.terminations == ["n1"]  # drained as asked, not dropped
    assert world.ec2.instances[INSTANCE].state in ("shutting-down", "terminated") or world.state.list_items(TERMINATION_KIND)
    assert world.metrics.total("DeletionFinalizersReleased") == 0


def test_a_deletion_held_too_long_whose_termination_cannot_begin_is_released(world: World) -> None:
    handle_deletions(world.runtime, world.clock.now())
    world.kubectl_delete_node()
    world.clock.advance(int(STUCK_DELETION_AFTER.total_seconds()) + 1)
    world.kube.fail("patch_node")  # its cordon: the termination cannot begin
    result = handle_deletions(world.runtime, world.clock.now())
    assert result.finalizers_released == ["node/n1"] and world.kube.get("nodes", None, "n1") is None
    assert world.metrics.total("DeletionFinalizersReleased") == 1


def test_turned_off_every_finalizer_is_removed_and_uninstall_removes_them_all() -> None:
    on = World()
    sync_node_claims(on.runtime)
    handle_deletions(on.runtime, on.clock.now())
    off = World(enabled=False)
    off.kube, off.state = on.kube, on.state
    off.runtime = build_runtime(
        dataclasses.replace(SETTINGS, delete_to_drain=False),
        kube_port=on.kube,
        ec2_port=on.ec2,
        state_port=on.state,
        queue_port=on.queue,
        clock=on.clock,
        metric=on.metrics,
        sleep=on.clock.sleep,
    )
    released = handle_deletions(off.runtime, on.clock.now()).finalizers_released
    assert sorted(released)[0].startswith("node/") and len(released) == 2
    handle_deletions(on.runtime, on.clock.now())  # on again: added back
    assert sorted(remove_finalizers(on.kube, on.clock.now()).changed) == sorted(released)
    assert not on.node()["metadata"].get("finalizers") and not on.kube.list_node_claims()[0]["metadata"].get("finalizers")


def test_a_grace_period_bounds_the_drain(world: World) -> None:
    world.kube.add(
        "node_pools",
        {"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": {"template": {"spec": {"terminationGracePeriod": "10m"}}}},
    )
    world.pod("app")
    handle_deletions(world.runtime, world.clock.now())
    world.kubectl_delete_node()
    handle_deletions(world.runtime, world.clock.now())
    stored = world.state.get_item(TERMINATION_KIND, "n1")
    assert stored is not None and stored["reason"] == DELETED_REASON
    assert stored["deadline"] == (world.clock.now() + timedelta(minutes=10)).isoformat()
