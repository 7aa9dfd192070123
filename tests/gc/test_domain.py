"""plan_gc: every rule, every guard, the cap, the bookkeeping, and Node parsing."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from joiner.domain.gc import (
    KIND_CLAIM,
    KIND_INSTANCE,
    KIND_LAUNCH_TEMPLATE,
    KIND_NODE,
    GcInputs,
    GcPolicy,
    parse_gc_node,
    plan_gc,
    terminating_names,
)
from tests.gc.builders import CLUSTER, LONG_AGO, NOW, claim, instance, minutes, node, template


def inputs(**fields) -> GcInputs:
    return GcInputs(cluster=CLUSTER, now=NOW, **fields)


def plan(**fields):
    return plan_gc(inputs(**fields))


# ---------------------------------------------------------------- instances


def test_an_instance_without_a_claim_after_the_grace_is_terminated() -> None:
    result = plan(instances=(instance("i-orphan", launched=NOW - minutes(6)),))
    assert result.targets(KIND_INSTANCE) == ("i-orphan",)
    assert "no claim" in result.of_kind(KIND_INSTANCE)[0].reason


@pytest.mark.parametrize(("age", "collected"), [(minutes(4), False), (minutes(4.99), False), (minutes(5), True)])
def test_the_five_minute_grace_is_measured_from_the_launch_time(age: timedelta, collected: bool) -> None:
    result = plan(instances=(instance("i-new", launched=NOW - age),))
    assert (result.targets(KIND_INSTANCE) == ("i-new",)) is collected
    if not collected:
        assert "launched" in (result.kept_reason(KIND_INSTANCE, "i-new") or "")


def test_an_instance_with_an_unknown_launch_time_is_kept() -> None:
    result = plan(instances=(instance("i-x", launched=None),))
    assert not result.actions and result.kept_reason(KIND_INSTANCE, "i-x") == "launch time unknown"


def test_an_instance_owned_by_an_open_claim_is_not_touched() -> None:
    result = plan(instances=(instance("i-1", claim="c1"),), claims=(claim("c1", instance_id="i-1"),))
    assert not result.actions and not result.kept


def test_an_instance_tagged_for_an_open_claim_not_yet_recording_it_is_kept_however_old() -> None:
    # the provisioning round launched, the claim update is in flight (or the round died: it adopts it)
    result = plan(
        instances=(instance("i-1", claim="c1", launched=NOW - timedelta(hours=1)),),
        claims=(claim("c1", state="reserved", created=NOW - minutes(2)),),
    )
    assert not result.actions
    assert "claim c1 is open" in (result.kept_reason(KIND_INSTANCE, "i-1") or "")


def test_a_duplicate_launch_for_a_claim_that_owns_another_instance_is_terminated() -> None:
    result = plan(
        instances=(instance("i-1", claim="c1"), instance("i-2", claim="c1")),
        claims=(claim("c1", instance_id="i-1"),),
    )
    assert result.targets(KIND_INSTANCE) == ("i-2",)
    assert "duplicate launch" in result.of_kind(KIND_INSTANCE)[0].reason


def test_an_instance_whose_claim_is_closed_is_terminated() -> None:
    result = plan(instances=(instance("i-1", claim="c-closed"),), claims=(replace(claim("c-closed", instance_id="i-1"), state="closed"),))
    assert result.targets(KIND_INSTANCE) == ("i-1",)
    assert result.of_kind(KIND_INSTANCE)[0].claim_id == "c-closed"


def test_an_instance_with_a_node_is_never_terminated_for_lack_of_a_claim() -> None:
    result = plan(instances=(instance("i-1"),), nodes=(node("n1", "i-1", ready=True),))
    assert not result.actions
    assert "Node n1" in (result.kept_reason(KIND_INSTANCE, "i-1") or "")


def test_an_instance_under_termination_is_kept() -> None:
    result = plan(instances=(instance("i-1"),), terminating_instances=frozenset({"i-1"}))
    assert not result.actions and result.kept_reason(KIND_INSTANCE, "i-1") == "termination in progress"


@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_an_instance_already_going_away_is_left_alone(state: str) -> None:
    assert not plan(instances=(instance("i-1", state=state),)).actions


@pytest.mark.parametrize("state", ["pending", "stopping", "stopped"])
def test_other_live_states_are_collected_too(state: str) -> None:
    assert plan(instances=(instance("i-1", state=state),)).targets(KIND_INSTANCE) == ("i-1",)


def test_an_instance_tagged_for_another_cluster_is_never_touched() -> None:
    result = plan(instances=(instance("i-1", cluster="other-cluster"), instance("i-2", cluster=None)))
    assert not result.actions


# ---------------------------------------------------------------- claims


def test_a_claim_whose_instance_terminated_is_closed_and_its_node_deleted_first() -> None:
    result = plan(
        claims=(claim("c1", instance_id="i-1", node="n1", pool="gpu"),),
        described={"i-1": instance("i-1", state="terminated")},
        nodes=(node("n1", "i-1"),),
    )
    assert [(a.kind, a.target) for a in result.actions] == [(KIND_NODE, "n1"), (KIND_CLAIM, "c1")]
    close = result.of_kind(KIND_CLAIM)[0]
    assert close.node_pool == "gpu" and close.instance_id == "i-1" and "terminated" in close.reason
    delete = result.of_kind(KIND_NODE)[0]
    assert delete.uid == "uid-n1" and delete.instance_id == "i-1" and delete.claim_id == "c1"


def test_a_claim_whose_instance_is_shutting_down_is_closed() -> None:
    result = plan(claims=(claim("c1", instance_id="i-1"),), instances=(instance("i-1", state="shutting-down"),))
    assert result.targets(KIND_CLAIM) == ("c1",) and "shutting-down" in result.actions[0].reason


def test_a_claim_whose_instance_vanished_is_closed_after_the_grace_only() -> None:
    old = plan(claims=(claim("c1", instance_id="i-1", launched=NOW - minutes(6)),), described={"i-1": None})
    assert old.targets(KIND_CLAIM) == ("c1",) and "no longer exists" in old.actions[0].reason
    fresh = plan(claims=(claim("c1", instance_id="i-1", launched=NOW - minutes(2)),), described={"i-1": None})
    assert not fresh.actions and "not visible yet" in (fresh.kept_reason(KIND_CLAIM, "c1") or "")


def test_a_claim_whose_instance_was_not_looked_up_is_never_closed() -> None:
    result = plan(claims=(claim("c1", instance_id="i-1"),))
    assert not result.actions and "not looked up" in (result.kept_reason(KIND_CLAIM, "c1") or "")


def test_a_claim_with_a_live_instance_is_not_touched() -> None:
    result = plan(claims=(claim("c1", instance_id="i-1", node="n1"),), instances=(instance("i-1", claim="c1"),), nodes=(node("n1", "i-1"),))
    assert not result.actions and not result.kept


def test_a_ready_node_keeps_its_claim_open_even_if_ec2_says_the_instance_is_gone() -> None:
    result = plan(
        claims=(claim("c1", instance_id="i-1", node="n1"),),
        described={"i-1": instance("i-1", state="terminated")},
        nodes=(node("n1", "i-1", ready=True),),
    )
    assert not result.actions
    assert "Ready" in (result.kept_reason(KIND_CLAIM, "c1") or "")


def test_a_young_node_keeps_its_claim_open() -> None:
    result = plan(
        claims=(claim("c1", instance_id="i-1", node="n1"),),
        described={"i-1": instance("i-1", state="terminated")},
        nodes=(node("n1", "i-1", created=NOW - minutes(3)),),
    )
    assert not result.actions and "registered 3 min ago" in (result.kept_reason(KIND_CLAIM, "c1") or "")


def test_a_node_already_being_deleted_does_not_hold_the_claim_and_is_not_deleted_again() -> None:
    result = plan(
        claims=(claim("c1", instance_id="i-1", node="n1"),),
        described={"i-1": instance("i-1", state="terminated")},
        nodes=(node("n1", "i-1", ready=True, deleting=True),),
    )
    assert [(a.kind, a.target) for a in result.actions] == [(KIND_CLAIM, "c1")]


@pytest.mark.parametrize("field", ["node", "instance", "claim"])
def test_nothing_under_termination_is_touched(field: str) -> None:
    terminating = {
        "node": {"terminating_nodes": frozenset({"n1"})},
        "instance": {"terminating_instances": frozenset({"i-1"})},
        "claim": {"terminating_claims": frozenset({"c1"})},
    }[field]
    result = plan(
        claims=(claim("c1", state="terminating", instance_id="i-1", node="n1"),),
        instances=(instance("i-1", state="shutting-down"),),
        nodes=(node("n1", "i-1"),),
        **terminating,
    )
    assert not result.actions


def test_a_terminating_claim_without_a_termination_item_is_closed_when_its_instance_is_gone() -> None:
    result = plan(claims=(claim("c1", state="terminating", instance_id="i-1"),), described={"i-1": instance("i-1", state="terminated")})
    assert result.targets(KIND_CLAIM) == ("c1",)


def test_a_reserved_claim_belongs_to_provisioning_until_it_is_far_too_old() -> None:
    young = plan(claims=(claim("c1", state="reserved", created=NOW - minutes(20)),))
    assert not young.actions and not young.kept
    old = plan(claims=(claim("c1", state="reserved", created=NOW - minutes(30), pool="gpu"),))
    assert [(a.kind, a.target, a.node_pool) for a in old.actions] == [(KIND_CLAIM, "c1", "gpu")]
    assert "never launched" in old.actions[0].reason and old.actions[0].instance_id is None


def test_an_old_reserved_claim_with_an_instance_tagged_for_it_is_kept() -> None:
    result = plan(
        claims=(claim("c1", state="reserved", created=NOW - timedelta(hours=1)),),
        instances=(instance("i-1", claim="c1"),),
    )
    assert not result.actions
    assert "provisioning adopts it" in (result.kept_reason(KIND_CLAIM, "c1") or "")


def test_a_non_reserved_claim_without_an_instance_id_is_kept() -> None:
    result = plan(claims=(claim("c1", state="launched", created=NOW - timedelta(days=1)),))
    assert not result.actions and "without an instance id" in (result.kept_reason(KIND_CLAIM, "c1") or "")


def test_a_node_name_reused_by_another_instance_is_not_deleted_with_the_claim() -> None:
    result = plan(
        claims=(claim("c1", instance_id="i-old", node="ip-10-0-0-1"),),
        described={"i-old": instance("i-old", state="terminated")},
        instances=(instance("i-new", claim="c2"),),
        nodes=(node("ip-10-0-0-1", "i-new", ready=True),),
    )
    assert [(a.kind, a.target) for a in result.actions] == [(KIND_CLAIM, "c1")]
    assert "runs on i-new" in (result.kept_reason(KIND_NODE, "ip-10-0-0-1") or "")


# ---------------------------------------------------------------- nodes


def test_a_joiner_node_whose_instance_terminated_is_deleted() -> None:
    result = plan(nodes=(node("n1", "i-1"),), described={"i-1": instance("i-1", state="terminated")})
    assert result.targets(KIND_NODE) == ("n1",) and result.actions[0].claim_id is None


def test_a_joiner_node_whose_instance_is_not_found_is_deleted() -> None:
    result = plan(nodes=(node("n1", "i-1"),), described={"i-1": None})
    assert result.targets(KIND_NODE) == ("n1",) and "no longer exists" in result.actions[0].reason


def test_an_unlabelled_node_is_ours_only_if_its_instance_carries_the_cluster_tag() -> None:
    ours = plan(nodes=(node("n1", "i-1", managed=False),), described={"i-1": instance("i-1", state="terminated")})
    assert ours.targets(KIND_NODE) == ("n1",)
    foreign = plan(
        nodes=(node("n2", "i-2", managed=False), node("n3", "i-3", managed=False)),
        described={"i-2": instance("i-2", state="terminated", cluster=None), "i-3": None},
    )
    assert not foreign.actions and not foreign.kept


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"ready": True}, "Ready"),
        ({"created": NOW - minutes(9)}, "registered 9 min ago"),
        ({"created": None}, "creation time unknown"),
    ],
)
def test_node_guards(changes: dict, reason: str) -> None:
    result = plan(nodes=(replace(node("n1", "i-1"), **changes),), described={"i-1": None})
    assert not result.actions and reason in (result.kept_reason(KIND_NODE, "n1") or "")


def test_a_node_under_termination_is_kept() -> None:
    result = plan(nodes=(node("n1", "i-1"),), described={"i-1": None}, terminating_nodes=frozenset({"n1"}))
    assert not result.actions and "termination in progress" in (result.kept_reason(KIND_NODE, "n1") or "")


def test_nodes_with_live_or_unknown_instances_or_no_provider_id_or_being_deleted_are_ignored() -> None:
    result = plan(
        nodes=(node("live", "i-1"), node("unknown", "i-2"), node("no-provider", None), node("deleting", "i-3", deleting=True)),
        instances=(instance("i-1", claim="c1"),),
        described={"i-3": None},
        claims=(claim("c1", instance_id="i-1"),),
    )
    assert not result.actions and not result.kept


def test_a_node_owned_by_an_open_claim_is_left_to_the_claim_rule() -> None:
    # the claim rule holds the Node back (it is young): the Node rule must not delete it either
    result = plan(
        nodes=(node("n1", "i-1", created=NOW - minutes(1)),),
        claims=(claim("c1", instance_id="i-1"),),
        described={"i-1": instance("i-1", state="terminated")},
    )
    assert not result.actions and result.kept_reason(KIND_NODE, "n1") is None and result.kept_reason(KIND_CLAIM, "c1")


# ---------------------------------------------------------------- launch templates


def test_a_template_in_use_by_a_live_instance_is_kept_and_its_mark_forgotten() -> None:
    result = plan(
        templates=(template("lt-1"),),
        instances=(instance("i-1", claim="c1", template="lt-1"),),
        claims=(claim("c1", instance_id="i-1"),),
        template_unused_since={"lt-1": NOW - timedelta(days=2)},
    )
    assert not result.actions and result.unmark == ("lt-1",) and not result.mark_unused


def test_a_template_seen_unused_for_the_first_time_is_marked_not_deleted() -> None:
    result = plan(templates=(template("lt-1"),), node_classes=frozenset({"default"}))
    assert not result.actions and result.mark_unused == {"lt-1": NOW}


@pytest.mark.parametrize(("unused_for", "deleted"), [(timedelta(hours=23), False), (timedelta(hours=24), True)])
def test_a_template_of_an_existing_node_class_is_deleted_after_a_day_unused(unused_for: timedelta, deleted: bool) -> None:
    result = plan(templates=(template("lt-1"),), template_unused_since={"lt-1": NOW - unused_for}, node_classes=frozenset({"default"}))
    assert (result.targets(KIND_LAUNCH_TEMPLATE) == ("lt-1",)) is deleted
    assert not result.mark_unused


@pytest.mark.parametrize(("unused_for", "deleted"), [(minutes(59), False), (minutes(60), True)])
def test_a_template_whose_node_class_is_gone_is_deleted_after_an_hour_unused(unused_for: timedelta, deleted: bool) -> None:
    result = plan(templates=(template("lt-1", node_class="old"),), template_unused_since={"lt-1": NOW - unused_for}, node_classes=frozenset({"default"}))
    assert (result.targets(KIND_LAUNCH_TEMPLATE) == ("lt-1",)) is deleted
    if deleted:
        assert "NodeClass old is gone" in result.actions[0].reason


def test_unknown_node_classes_count_as_existing() -> None:
    result = plan(templates=(template("lt-1", node_class="old"),), template_unused_since={"lt-1": NOW - timedelta(hours=2)}, node_classes=None)
    assert not result.actions


def test_template_idleness_never_starts_before_its_creation_or_when_its_age_is_unknown() -> None:
    young = plan(
        templates=(template("lt-1", created=NOW - minutes(10), node_class="old"),),
        template_unused_since={"lt-1": NOW - timedelta(days=5)},
        node_classes=frozenset(),
    )
    unknown = plan(
        templates=(template("lt-2", created=None, node_class="old"),), template_unused_since={"lt-2": NOW - timedelta(days=5)}, node_classes=frozenset()
    )
    assert not young.actions and not unknown.actions


def test_templates_referenced_explicitly_or_only_by_dying_instances() -> None:
    result = plan(
        templates=(template("lt-1", referenced=True, node_class="old"), template("lt-2", node_class="old")),
        instances=(instance("i-9", state="shutting-down", template="lt-2"),),
        template_unused_since={"lt-1": NOW - timedelta(days=5), "lt-2": NOW - timedelta(days=5)},
        node_classes=frozenset(),
    )
    assert result.targets(KIND_LAUNCH_TEMPLATE) == ("lt-2",) and result.unmark == ("lt-1",)


def test_a_template_used_by_an_instance_found_by_id_is_in_use() -> None:
    result = plan(
        templates=(template("lt-1", node_class="old"),),
        node_classes=frozenset(),
        described={"i-1": instance("i-1", state="stopped", template="lt-1", cluster=None)},
        template_unused_since={"lt-1": NOW - timedelta(days=5)},
    )
    assert not result.actions and result.unmark == ("lt-1",)


def test_marks_of_templates_that_no_longer_exist_are_forgotten() -> None:
    assert plan(template_unused_since={"lt-gone": NOW - timedelta(days=1)}).unmark == ("lt-gone",)


# ---------------------------------------------------------------- cap, order, determinism


def test_at_most_max_per_kind_actions_of_a_kind_per_run() -> None:
    many = tuple(instance(f"i-{n}") for n in range(5))
    result = plan_gc(inputs(instances=many), GcPolicy(max_per_kind=2))
    assert result.targets(KIND_INSTANCE) == ("i-0", "i-1")
    assert all("limit of 2" in (result.kept_reason(KIND_INSTANCE, f"i-{n}") or "") for n in (2, 3, 4))


def test_the_cap_keeps_a_claim_and_its_nodes_together() -> None:
    gone = {f"i-{n}": instance(f"i-{n}", state="terminated") for n in range(3)}
    result = plan_gc(
        inputs(
            claims=tuple(claim(f"c{n}", instance_id=f"i-{n}") for n in range(3)),
            nodes=(node("n-orphan", "i-9"), *(node(f"n{n}", f"i-{n}") for n in range(3))),
            described={**gone, "i-9": None},
        ),
        GcPolicy(max_per_kind=2),
    )
    assert [(a.kind, a.target) for a in result.actions] == [
        (KIND_NODE, "n0"),
        (KIND_CLAIM, "c0"),
        (KIND_NODE, "n1"),
        (KIND_CLAIM, "c1"),
    ]
    assert result.kept_reason(KIND_CLAIM, "c2") and result.kept_reason(KIND_NODE, "n2") and result.kept_reason(KIND_NODE, "n-orphan")


def test_the_plan_is_deterministic_whatever_the_input_order() -> None:
    instances = (instance("i-b"), instance("i-a"), instance("i-c", state="terminated"))
    nodes = (node("n2", "i-x"), node("n1", "i-y"))
    described = {"i-x": None, "i-y": None}
    first = plan(instances=instances, nodes=nodes, described=described)
    second = plan(instances=tuple(reversed(instances)), nodes=tuple(reversed(nodes)), described=described)
    assert first == second
    assert first.targets(KIND_INSTANCE) == ("i-a", "i-b") and first.targets(KIND_NODE) == ("n1", "n2")


def test_an_empty_world_plans_nothing() -> None:
    result = plan()
    assert not result.actions and not result.kept and not result.mark_unused and not result.unmark


# ---------------------------------------------------------------- parsing


def test_parse_gc_node() -> None:
    raw = {
        "metadata": {"name": "n1", "uid": "u1", "labels": {"joiner.dev/nodepool": "default"}, "creationTimestamp": "2025-01-06T10:00:00Z"},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "Unknown"}]},
    }
    parsed = parse_gc_node(raw)
    assert (parsed.name, parsed.uid, parsed.instance_id, parsed.ready, parsed.deleting) == ("n1", "u1", "i-0123456789abcdef0", False, False)
    assert parsed.created == LONG_AGO and parsed.labelled_joiner
    ready = parse_gc_node({**raw, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    assert ready.ready
    assert not parse_gc_node({**raw, "status": {"conditions": []}}).ready  # never reported
    assert parse_gc_node({**raw, "status": {}}).ready  # unreadable: assumed healthy, so kept
    odd = parse_gc_node(
        {"metadata": {"name": "x", "creationTimestamp": "yesterday", "deletionTimestamp": "2025-01-06T11:00:00Z"}, "spec": {"providerID": "gce://p/z/i-1"}}
    )
    assert odd.instance_id is None and odd.created is None and odd.deleting and not odd.labelled_joiner


def test_terminating_names() -> None:
    items = [{"node": "n1", "instanceId": "i-1", "claimId": "c1"}, {"node": "n2", "instanceId": None, "claimId": ""}]
    assert terminating_names(items) == (frozenset({"n1", "n2"}), frozenset({"i-1"}), frozenset({"c1"}))
