"""The simulator's kube-scheduler filters (testworld.node_match): literal label matching,
every NodeSelectorRequirement operator, OR of terms, tolerations against taints."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testworld.node_match import (
    node_affinity_misfit,
    node_selector_matches,
    requirement_matches,
    toleration_tolerates,
    untolerated_taint,
)

LABELS = {"karpenter.sh/capacity-type": "spot", "joiner.dev/capacity-type": "spot", "cpu": "8", "empty": ""}


def req(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def node(labels: dict[str, str], name: str = "n1", taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints or []}}


def pod(
    *, selector: dict[str, str] | None = None, terms: list[dict[str, Any]] | None = None, tolerations: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if selector is not None:
        spec["nodeSelector"] = selector
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"spec": spec}


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (req("karpenter.sh/capacity-type", "In", "spot", "on-demand"), True),
        (req("karpenter.sh/capacity-type", "In", "on-demand"), False),
        (req("missing", "In", "spot"), False),
        (req("karpenter.sh/capacity-type", "NotIn", "on-demand"), True),
        (req("karpenter.sh/capacity-type", "NotIn", "spot"), False),
        (req("missing", "NotIn", "spot"), True),  # NotIn holds when the label is absent
        (req("empty", "Exists"), True),
        (req("missing", "Exists"), False),
        (req("missing", "DoesNotExist"), True),
        (req("empty", "DoesNotExist"), False),
        (req("cpu", "Gt", "7"), True),
        (req("cpu", "Gt", "8"), False),
        (req("cpu", "Gt", "10"), False),  # numeric, not lexical ("8" > "10" as strings)
        (req("cpu", "Lt", "10"), True),
        (req("cpu", "Lt", "8"), False),
        (req("missing", "Lt", "10"), False),
        (req("cpu", "Gt", "7", "6"), False),  # Gt/Lt need exactly one value
        (req("cpu", "Gt", "seven"), False),
        (req("karpenter.sh/capacity-type", "Gt", "1"), False),  # label not an integer
        (req("karpenter.sh/capacity-type", "Equals", "spot"), False),  # unknown operator
    ],
)
def test_each_operator(requirement: dict[str, Any], expected: bool) -> None:
    assert requirement_matches(requirement, LABELS) is expected


def test_keys_are_matched_literally_never_through_aliases() -> None:
    joiner_only = {"joiner.dev/capacity-type": "spot", "joiner.dev/instance-family": "c5"}
    wanted = pod(selector={"karpenter.sh/capacity-type": "spot"})
    assert node_affinity_misfit(wanted, node(joiner_only)) == "didn't match Pod's node affinity/selector"
    assert node_affinity_misfit(wanted, node({**joiner_only, "karpenter.sh/capacity-type": "spot"})) is None
    by_affinity = pod(terms=[{"matchExpressions": [req("karpenter.k8s.aws/instance-family", "In", "c5")]}])
    assert node_affinity_misfit(by_affinity, node(joiner_only)) is not None
    assert node_affinity_misfit(by_affinity, node({"karpenter.k8s.aws/instance-family": "c5"})) is None


def test_node_selector_needs_every_key_with_its_exact_value() -> None:
    assert node_affinity_misfit(pod(selector={"a": "1", "b": "2"}), node({"a": "1", "b": "2", "c": "3"})) is None
    assert node_affinity_misfit(pod(selector={"a": "1", "b": "2"}), node({"a": "1"})) is not None
    assert node_affinity_misfit(pod(selector={"a": "1"}), node({"a": "10"})) is not None


def test_terms_are_ored_and_expressions_within_a_term_anded() -> None:
    spot = {"matchExpressions": [req("capacity", "In", "spot")]}
    c5_on_demand = {"matchExpressions": [req("family", "In", "c5"), req("capacity", "In", "on-demand")]}
    terms = [spot, c5_on_demand]
    assert node_selector_matches({"nodeSelectorTerms": terms}, node({"capacity": "spot"}))
    assert node_selector_matches({"nodeSelectorTerms": terms}, node({"capacity": "on-demand", "family": "c5"}))
    assert not node_selector_matches({"nodeSelectorTerms": terms}, node({"capacity": "on-demand", "family": "m5"}))
    assert not node_selector_matches({"nodeSelectorTerms": [c5_on_demand]}, node({"family": "c5"}))


def test_empty_terms_match_nothing_and_an_absent_affinity_everything() -> None:
    assert not node_selector_matches({"nodeSelectorTerms": []}, node({"a": "1"}))
    assert not node_selector_matches({"nodeSelectorTerms": [{}]}, node({"a": "1"}))
    assert not node_selector_matches({"nodeSelectorTerms": [{"matchExpressions": []}]}, node({"a": "1"}))
    assert node_affinity_misfit(pod(terms=[{}]), node({"a": "1"})) is not None
    assert node_affinity_misfit(pod(), node({})) is None


def test_match_fields_select_the_node_name() -> None:
    by_name = {"matchFields": [req("metadata.name", "In", "n1")]}
    assert node_selector_matches({"nodeSelectorTerms": [by_name]}, node({}, name="n1"))
    assert not node_selector_matches({"nodeSelectorTerms": [by_name]}, node({}, name="n2"))
    not_n1 = {"matchFields": [req("metadata.name", "NotIn", "n1")]}
    assert node_selector_matches({"nodeSelectorTerms": [not_n1]}, node({}, name="n2"))
    # fields AND expressions
    both = {"matchFields": [req("metadata.name", "In", "n1")], "matchExpressions": [req("a", "Exists")]}
    assert not node_selector_matches({"nodeSelectorTerms": [both]}, node({}, name="n1"))
    assert node_selector_matches({"nodeSelectorTerms": [both]}, node({"a": "x"}, name="n1"))


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),  # Equal by default, any effect
        ({"key": "k", "value": "v"}, {"key": "k", "value": "w", "effect": "NoSchedule"}, False),
        ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "anything", "effect": "NoSchedule"}, True),
        ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"key": "k", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),  # empty key + Exists: every taint
        ({"key": "k"}, {"key": "k", "effect": "NoSchedule"}, True),  # Equal, both values empty
    ],
)
def test_toleration_against_taint(toleration: dict[str, str], taint: dict[str, str], expected: bool) -> None:
    assert toleration_tolerates(toleration, taint) is expected


def test_only_noschedule_and_noexecute_taints_must_be_tolerated() -> None:
    taints = [{"key": "soft", "effect": "PreferNoSchedule"}, {"key": "a", "effect": "NoSchedule"}, {"key": "b", "value": "x", "effect": "NoExecute"}]
    target = node({}, taints=taints)
    assert untolerated_taint(pod(), target) == taints[1]
    assert untolerated_taint(pod(tolerations=[{"key": "a", "operator": "Exists"}]), target) == taints[2]
    assert untolerated_taint(pod(tolerations=[{"key": "a", "operator": "Exists"}, {"key": "b", "value": "x"}]), target) is None


_KEYS = st.sampled_from(["a", "b", "c"])
_VALUES = st.sampled_from(["1", "2", "x"])


@given(st.dictionaries(_KEYS, _VALUES), _KEYS, st.lists(_VALUES, max_size=3))
def test_notin_is_the_negation_of_in_and_doesnotexist_of_exists(labels: dict[str, str], key: str, values: list[str]) -> None:
    assert requirement_matches(req(key, "NotIn", *values), labels) is not requirement_matches(req(key, "In", *values), labels)
    assert requirement_matches(req(key, "DoesNotExist"), labels) is not requirement_matches(req(key, "Exists"), labels)


@given(st.dictionaries(_KEYS, st.integers(-5, 5).map(str)), _KEYS, st.integers(-5, 5))
def test_gt_and_lt_compare_integers(labels: dict[str, str], key: str, bound: int) -> None:
    have = int(labels[key]) if key in labels else None
    assert requirement_matches(req(key, "Gt", str(bound)), labels) is (have is not None and have > bound)
    assert requirement_matches(req(key, "Lt", str(bound)), labels) is (have is not None and have < bound)
