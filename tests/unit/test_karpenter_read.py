"""Reading Karpenter's own objects (``JOINER_KARPENTER_CRDS``): which are read, converted as
``import-karpenter`` converts them, which are refused and why, and the ``JoinerConverted``
condition written on each (joiner.domain.karpenter)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.karpenter import (
    CONDITION_TYPE,
    READ_FROM_ANNOTATION,
    ReadOutcome,
    ReadReason,
    conversion_conditions,
    convert_object,
    read_karpenter,
)
from joiner.domain.snapshot import parse_node_class, parse_node_pool
from tests.support.karpenter import ec2_node_class, karpenter_pool


def joiner_object(kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "joiner.dev/v1", "kind": kind, "metadata": {"name": name, "uid": f"joiner-{name}"}, "spec": {}}


def outcome(view: Any, kind: str, name: str) -> ReadOutcome:
    (found,) = [o for o in view.outcomes if (o.kind, o.name) == (kind, name)]
    return found  # type: ignore[no-any-return]


def test_karpenters_objects_are_read_as_import_karpenter_converts_them() -> None:
    pool, node_class = karpenter_pool(), ec2_node_class()
    view = read_karpenter([], [], [pool], [node_class])
    (read_pool,), (read_class,) = view.node_pools, view.node_classes
    expected_pool, _ = convert_object(pool)
    assert read_pool["spec"] == expected_pool["spec"] and read_pool["apiVersion"] == "joiner.dev/v1"
    assert read_pool["spec"]["template"]["spec"]["requirements"] == [{"key": "joiner.dev/capacity-type", "operator": "In", "values": ["spot"]}]
    assert read_pool["metadata"]["annotations"][READ_FROM_ANNOTATION] == "karpenter.sh/v1 NodePool"
    # no uid: a NodeClaim's owner reference would name a joiner.dev NodePool that does not exist
    assert "uid" not in read_pool["metadata"] and read_pool["metadata"]["generation"] == 3
    assert read_pool["status"] == pool["status"]  # Joiner's status writes keep Karpenter's other conditions
    assert parse_node_pool(read_pool).node_class == "default" and parse_node_class(read_class).name == "default"
    assert outcome(view, "NodePool", "default").reason is ReadReason.CONVERTED
    # the class's role is a difference the condition names
    class_outcome = outcome(view, "EC2NodeClass", "default")
    assert class_outcome.read and class_outcome.reason is ReadReason.CONVERTED_WITH_DROPS
    assert "spec.role: KarpenterNodeRole: Joiner may only pass the node role of its stack" in class_outcome.message


def test_every_dropped_field_is_named_in_the_condition_never_silent() -> None:
    pool = karpenter_pool()
    pool["spec"]["template"]["spec"]["requirements"].append({"key": "kubernetes.io/hostname", "operator": "Exists"})
    pool["spec"]["template"]["metadata"] = {"labels": {"karpenter.sh/nodepool": "default", "team": "web"}}
    _, warnings = convert_object(pool)
    assert len(warnings) == 2
    message = outcome(read_karpenter([], [], [pool], [ec2_node_class()]), "NodePool", "default").message
    assert message.startswith("read by Joiner as joiner.dev/v1 NodePool default, with these differences: ")
    assert all(w.removeprefix("NodePool default: ") in message for w in warnings)


def test_joiners_own_objects_of_the_same_name_win() -> None:
    joiner_pool, joiner_class = joiner_object("NodePool", "default"), joiner_object("NodeClass", "other")
    view = read_karpenter([joiner_pool], [joiner_class], [karpenter_pool("default")], [ec2_node_class("other"), ec2_node_class("default")])
    assert view.node_pools == (joiner_pool,)
    assert [c["metadata"]["name"] for c in view.node_classes] == ["other", "default"]
    assert view.node_classes[0] == joiner_class
    shadowed = outcome(view, "NodePool", "default")
    assert shadowed.reason is ReadReason.SHADOWED and not shadowed.read
    assert shadowed.message == "Joiner reads its own joiner.dev/v1 NodePool default instead"
    assert outcome(view, "EC2NodeClass", "other").reason is ReadReason.SHADOWED


def test_a_refused_object_is_not_read_and_says_why() -> None:
    custom = ec2_node_class("custom", amiFamily="Custom", userData="#!/bin/bash")
    windows = karpenter_pool("windows", "default")
    windows["spec"]["template"]["spec"]["requirements"] = [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]
    misspelt = karpenter_pool("misspelt")
    misspelt["spec"]["template"]["spec"]["nodeClasRef"] = {}
    view = read_karpenter([], [], [windows, misspelt], [custom, ec2_node_class()])
    assert [p["metadata"]["name"] for p in view.node_pools] == []
    assert [c["metadata"]["name"] for c in view.node_classes] == ["default"]
    refused = outcome(view, "EC2NodeClass", "custom")
    assert refused.reason is ReadReason.REFUSED and "spec.amiFamily 'Custom'" in refused.message
    assert "asks for windows nodes; Joiner launches Linux" in outcome(view, "NodePool", "windows").message
    assert "nodeClasRef" in outcome(view, "NodePool", "misspelt").message


def test_a_pool_is_read_only_with_its_ec2nodeclass() -> None:
    view = read_karpenter(
        [],
        [joiner_object("NodeClass", "shadowed")],
        [karpenter_pool("a", "missing"), karpenter_pool("b", "custom"), karpenter_pool("c", "shadowed")],
        [ec2_node_class("custom", amiFamily="Custom"), ec2_node_class("shadowed")],
    )
    assert view.node_pools == ()
    reasons = {o.name: (o.reason, o.message) for o in view.outcomes if o.kind == "NodePool"}
    assert reasons["a"] == (ReadReason.NODE_CLASS_NOT_READ, "its EC2NodeClass missing does not exist")
    assert reasons["b"][0] is ReadReason.NODE_CLASS_NOT_READ and "is not read (ConversionRefused: " in reasons["b"][1]
    # Joiner's NodeClass of that name is not used for it: the pool would launch from another class
    assert reasons["c"][0] is ReadReason.NODE_CLASS_NOT_READ and "ShadowedByJoiner" in reasons["c"][1]


def test_a_static_karpenter_pool_stays_static() -> None:
    view = read_karpenter([], [], [karpenter_pool(replicas=4, limits={"nodes": 6})], [ec2_node_class()])
    (pool,) = view.node_pools
    assert parse_node_pool(pool).replicas == 4


names = st.sampled_from(["a", "b", "c", "default"])


@given(joiner_pools=st.sets(names), joiner_classes=st.sets(names), pools=st.dictionaries(names, names), classes=st.sets(names))
def test_names_stay_unique_joiners_objects_are_kept_and_each_karpenter_object_has_one_outcome(
    joiner_pools: set[str], joiner_classes: set[str], pools: dict[str, str], classes: set[str]
) -> None:
    view = read_karpenter(
        [joiner_object("NodePool", n) for n in sorted(joiner_pools)],
        [joiner_object("NodeClass", n) for n in sorted(joiner_classes)],
        [karpenter_pool(n, c) for n, c in pools.items()],
        [ec2_node_class(n) for n in sorted(classes)],
    )
    pool_names = [p["metadata"]["name"] for p in view.node_pools]
    class_names = [c["metadata"]["name"] for c in view.node_classes]
    assert len(pool_names) == len(set(pool_names)) and len(class_names) == len(set(class_names))
    assert all(joiner_object("NodePool", n) in view.node_pools for n in joiner_pools)
    assert all(joiner_object("NodeClass", n) in view.node_classes for n in joiner_classes)
    assert sorted((o.kind, o.name) for o in view.outcomes) == sorted([("NodePool", n) for n in pools] + [("EC2NodeClass", n) for n in classes])
    for o in view.outcomes:
        assert o.read == (
            o.name in (pool_names if o.kind == "NodePool" else class_names) and o.name not in (joiner_pools if o.kind == "NodePool" else joiner_classes)
        )
    # a read pool's class is one read from Karpenter, never a Joiner class of the same name
    for name in pool_names:
        if name not in joiner_pools:
            assert pools[name] in classes and pools[name] not in joiner_classes


def test_the_condition_is_set_kept_and_others_left_alone() -> None:
    pool = karpenter_pool()
    read = ReadOutcome("NodePool", "default", ReadReason.CONVERTED, "read by Joiner as joiner.dev/v1 NodePool default")
    conditions = conversion_conditions(read, pool, "2026-02-01T00:00:00Z")
    assert conditions is not None
    assert conditions[0] == pool["status"]["conditions"][0]  # Karpenter's Ready kept
    assert conditions[1] == {
        "type": CONDITION_TYPE,
        "status": "True",
        "reason": "Converted",
        "message": read.message,
        "observedGeneration": 3,
        "lastTransitionTime": "2026-02-01T00:00:00Z",
    }
    written = {**pool, "status": {"conditions": conditions}}
    assert conversion_conditions(read, written, "2026-03-01T00:00:00Z") is None  # already says so: no write
    # a new message with the same status keeps the transition time; a new status takes now
    same = conversion_conditions(ReadOutcome("NodePool", "default", ReadReason.CONVERTED_WITH_DROPS, "changed"), written, "2026-03-01T00:00:00Z")
    assert same is not None and same[1]["lastTransitionTime"] == "2026-02-01T00:00:00Z"
    refused = conversion_conditions(ReadOutcome("NodePool", "default", ReadReason.REFUSED, "no"), written, "2026-03-01T00:00:00Z")
    assert refused is not None and refused[1]["status"] == "False" and refused[1]["lastTransitionTime"] == "2026-03-01T00:00:00Z"
    assert [c["type"] for c in refused] == ["Ready", CONDITION_TYPE]


def test_importing_the_objects_later_drifts_no_node() -> None:
    """Switching from reading in place to `import-karpenter`'s joiner.dev objects (which then
    shadow Karpenter's) keeps every node: the same translation, the same hashes."""
    from joiner.domain.karpenter import convert_documents
    from joiner.domain.model import nodeclass_hash, nodepool_hash

    pool = karpenter_pool()
    pool["spec"]["template"]["metadata"] = {"labels": {"team": "web"}, "annotations": {"example.com/owner": "web"}}
    view = read_karpenter([], [], [pool], [ec2_node_class()])
    imported = convert_documents([ec2_node_class(), pool]).documents
    read_pool, imported_pool = parse_node_pool(view.node_pools[0]), parse_node_pool(imported[1])
    assert nodepool_hash(read_pool) == nodepool_hash(imported_pool) and read_pool.requirements == imported_pool.requirements
    assert nodeclass_hash(parse_node_class(view.node_classes[0])) == nodeclass_hash(parse_node_class(imported[0]))
