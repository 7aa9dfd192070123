"""The node requirements algebra (Karpenter's scheduling.Requirement semantics)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.requirements import Requirement, RequirementError, Requirements

R = Requirement.create


def allowed(requirement: Requirement, universe: list[str]) -> set[str]:
    return {value for value in universe if requirement.has(value)}


UNIVERSE = [str(n) for n in range(-2, 13)] + ["a", "b", "c", "x"]


class TestCreate:
    def test_operators(self) -> None:
        assert allowed(R("k", "In", ["a", "b"]), UNIVERSE) == {"a", "b"}
        assert allowed(R("k", "NotIn", ["a"]), UNIVERSE) == set(UNIVERSE) - {"a"}
        assert allowed(R("k", "Exists"), UNIVERSE) == set(UNIVERSE)
        assert allowed(R("k", "DoesNotExist"), UNIVERSE) == set()
        assert allowed(R("k", "Gt", ["9"]), UNIVERSE) == {"10", "11", "12"}
        assert allowed(R("k", "Gte", ["10"]), UNIVERSE) == {"10", "11", "12"}
        assert allowed(R("k", "Lt", ["0"]), UNIVERSE) == {"-2", "-1"}
        assert allowed(R("k", "Lte", ["0"]), UNIVERSE) == {"-2", "-1", "0"}

    def test_operator_names_read_back(self) -> None:
        assert R("k", "In", ["a"]).operator() == "In"
        assert R("k", "NotIn", ["a"]).operator() == "NotIn"
        assert R("k", "Exists").operator() == "Exists"
        assert R("k", "DoesNotExist").operator() == "DoesNotExist"
        assert R("k", "Gt", ["1"]).operator() == "Gt"
        assert R("k", "Lte", ["1"]).operator() == "Lt"

    @pytest.mark.parametrize(
        ("operator", "values", "message"),
        [
            ("In", [], "needs at least one value"),
            ("NotIn", [], "needs at least one value"),
            ("Exists", ["a"], "takes no values"),
            ("DoesNotExist", ["a"], "takes no values"),
            ("Gt", ["a"], "exactly one integer"),
            ("Lt", ["1", "2"], "exactly one integer"),
            ("Gte", [], "exactly one integer"),
            ("Matches", ["a"], "unknown operator 'Matches'"),
        ],
    )
    def test_malformed(self, operator: str, values: list[str], message: str) -> None:
        with pytest.raises(RequirementError, match=message):
            R("team", operator, values)

    @pytest.mark.parametrize("bad", [0, -1, True, "2"])
    def test_min_values_must_be_a_positive_integer(self, bad: object) -> None:
        with pytest.raises(RequirementError, match="minValues"):
            R("k", "In", ["a"], bad)  # type: ignore[arg-type]

    def test_karpenter_keys_are_aliases(self) -> None:
        karpenter = R("karpenter.sh/capacity-type", "In", ["spot"])
        assert karpenter == R(wk.CAPACITY_TYPE, "In", ["spot"])
        assert karpenter.key == "joiner.dev/capacity-type"
        assert R("karpenter.k8s.aws/instance-family", "In", ["c5"]).key == wk.INSTANCE_FAMILY
        assert R("failure-domain.beta.kubernetes.io/zone", "Exists").key == wk.ZONE

    def test_to_node_selector_round_trips(self) -> None:
        for requirement in [
            R("k", "In", ["b", "a"], 2),
            R("k", "NotIn", ["a"]),
            R("k", "Exists"),
            R("k", "DoesNotExist"),
            R("k", "Gt", ["3"]).intersection(R("k", "Lt", ["9"])).intersection(R("k", "NotIn", ["5"])),
        ]:
            rebuilt = Requirements.from_node_selector_terms(requirement.to_node_selector())
            assert allowed(rebuilt["k"], UNIVERSE) == allowed(requirement, UNIVERSE)
            assert rebuilt["k"].min_values == requirement.min_values


class TestIntersection:
    @pytest.mark.parametrize(
        ("left", "right", "expected"),
        [
            (R("k", "In", ["a", "b"]), R("k", "In", ["b", "c"]), {"b"}),
            (R("k", "In", ["a", "b"]), R("k", "NotIn", ["b"]), {"a"}),
            (R("k", "NotIn", ["a"]), R("k", "NotIn", ["b"]), set(UNIVERSE) - {"a", "b"}),
            (R("k", "In", ["a"]), R("k", "Exists"), {"a"}),
            (R("k", "In", ["a"]), R("k", "DoesNotExist"), set()),
            (R("k", "In", ["3", "7", "x"]), R("k", "Gt", ["5"]), {"7"}),
            (R("k", "Gt", ["3"]), R("k", "Lt", ["6"]), {"4", "5"}),
            (R("k", "Gte", ["3"]), R("k", "Lte", ["3"]), {"3"}),
            (R("k", "Gt", ["5"]), R("k", "Lt", ["6"]), set()),
            (R("k", "Gt", ["2"]), R("k", "NotIn", ["4", "a"]), {str(n) for n in range(3, 13)} - {"4"}),
        ],
    )
    def test_allowed_values(self, left: Requirement, right: Requirement, expected: set[str]) -> None:
        assert allowed(left.intersection(right), UNIVERSE) == expected
        assert allowed(right.intersection(left), UNIVERSE) == expected

    def test_empty_bounds_collapse_to_does_not_exist(self) -> None:
        merged = R("k", "Gt", ["5"]).intersection(R("k", "Lt", ["6"]))
        assert merged.is_empty()
        assert merged.operator() == "DoesNotExist"

    def test_min_values_kept_as_the_larger(self) -> None:
        merged = R("k", "In", ["a", "b", "c"], 2).intersection(R("k", "Exists", min_values=3))
        assert merged.min_values == 3
        assert R("k", "In", ["a"]).intersection(R("k", "In", ["a"], 1)).min_values == 1

    def test_requirements_intersect_per_key(self) -> None:
        pool = Requirements([R(wk.CAPACITY_TYPE, "In", ["spot", "on-demand"]), R(wk.ARCH, "In", ["amd64"])])
        pod = Requirements([R("karpenter.sh/capacity-type", "In", ["spot"])])
        merged = pool.intersect(pod)
        assert merged[wk.CAPACITY_TYPE].single_value() == "spot"
        assert merged[wk.ARCH].single_value() == "amd64"
        assert Requirements([R("k", "In", ["a", "b"]), R("k", "NotIn", ["a"])])["k"].single_value() == "b"


small_values = st.sampled_from(["1", "2", "3", "5", "8", "a", "b"])


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    operator = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]))
    if operator in ("In", "NotIn"):
        values = draw(st.lists(small_values, min_size=1, max_size=4))
    elif operator in ("Gt", "Lt", "Gte", "Lte"):
        values = [str(draw(st.integers(min_value=-1, max_value=10)))]
    else:
        values = []
    min_values = draw(st.none() | st.integers(min_value=1, max_value=3))
    return R("k", operator, values, min_values)


PROBES = ["-1", "0", "1", "2", "3", "4", "5", "6", "8", "9", "10", "11", "a", "b", "zz"]


@settings(max_examples=300, deadline=None)
@given(requirements(), requirements(), requirements())
def test_intersection_is_set_intersection(a: Requirement, b: Requirement, c: Requirement) -> None:
    ab = a.intersection(b)
    assert allowed(ab, PROBES) == allowed(b.intersection(a), PROBES)
    for value in PROBES:
        assert ab.has(value) == (a.has(value) and b.has(value))
        assert ab.intersection(c).has(value) == a.intersection(b.intersection(c)).has(value)
    expected_min = max([m for m in (a.min_values, b.min_values) if m is not None], default=None)
    assert ab.min_values == expected_min


class TestCompatible:
    pool = Requirements(
        [
            R(wk.CAPACITY_TYPE, "In", ["spot", "on-demand"]),
            R(wk.INSTANCE_CATEGORY, "In", ["c", "m"]),
            R("team", "In", ["a"]),
            R("tier", "NotIn", ["gold"]),
        ]
    )

    def test_compatible_pod(self) -> None:
        pod = Requirements([R("karpenter.sh/capacity-type", "In", ["spot"]), R("team", "In", ["a", "b"])])
        assert self.pool.compatible(pod) is None

    def test_well_known_labels_need_not_be_defined(self) -> None:
        assert self.pool.compatible(Requirements([R(wk.ZONE, "In", ["us-east-1a"])])) is None

    def test_undefined_custom_label_is_refused(self) -> None:
        reason = self.pool.compatible(Requirements([R("gpu-kind", "In", ["a100"])]))
        assert reason == "label 'gpu-kind' does not have known values"
        assert self.pool.compatible(Requirements([R("gpu-kind", "Exists")])) is not None

    def test_undefined_custom_label_may_be_forbidden(self) -> None:
        assert self.pool.compatible(Requirements([R("gpu-kind", "NotIn", ["a100"])])) is None
        assert self.pool.compatible(Requirements([R("gpu-kind", "DoesNotExist")])) is None

    def test_conflicting_values(self) -> None:
        reason = self.pool.compatible(Requirements([R(wk.INSTANCE_CATEGORY, "In", ["g"])]))
        assert reason is not None and "joiner.dev/instance-category" in reason

    def test_in_against_not_in_conflicts(self) -> None:
        assert self.pool.compatible(Requirements([R("tier", "In", ["gold"])])) is not None
        assert self.pool.compatible(Requirements([R("tier", "In", ["silver"])])) is None

    def test_not_in_on_both_sides_is_fine_even_when_empty(self) -> None:
        # The pool forbids the label entirely, the pod forbids one value: an absent label satisfies both.
        pool = Requirements([R("tier", "DoesNotExist")])
        assert pool.compatible(Requirements([R("tier", "NotIn", ["gold"])])) is None
        assert pool.conflicts(Requirements([R("tier", "NotIn", ["gold"])])) == []
        assert pool.compatible(Requirements([R("tier", "In", ["gold"])])) is not None

    def test_custom_allow_undefined(self) -> None:
        pod = Requirements([R("gpu-kind", "In", ["a100"])])
        assert self.pool.compatible(pod, allow_undefined=frozenset({"gpu-kind"})) is None


class TestMatchesLabels:
    def test_each_operator(self) -> None:
        labels = {"zone": "a", "cpu": "8"}
        cases = [
            (R("zone", "In", ["a", "b"]), True),
            (R("zone", "In", ["b"]), False),
            (R("zone", "NotIn", ["a"]), False),
            (R("missing", "NotIn", ["a"]), True),
            (R("zone", "Exists"), True),
            (R("missing", "Exists"), False),
            (R("missing", "DoesNotExist"), True),
            (R("zone", "DoesNotExist"), False),
            (R("cpu", "Gt", ["4"]), True),
            (R("cpu", "Lt", ["8"]), False),
            (R("missing", "Gt", ["4"]), False),
            (R("missing", "In", ["a"]), False),
            (R("zone", "Gt", ["4"]), False),
        ]
        for requirement, expected in cases:
            assert Requirements([requirement]).matches_labels(labels) is expected, requirement

    def test_aliases_match_joiner_labels(self) -> None:
        requirements = Requirements([R("karpenter.sh/capacity-type", "In", ["spot"])])
        assert requirements.matches_labels({wk.CAPACITY_TYPE: "spot"})
        assert not requirements.matches_labels({wk.CAPACITY_TYPE: "on-demand"})

    def test_labels_of_single_values(self) -> None:
        requirements = Requirements([R("a", "In", ["1"]), R("b", "In", ["1", "2"]), R("c", "Exists")])
        assert requirements.labels() == {"a": "1"}
        assert Requirements.from_labels({"karpenter.sh/nodepool": "x"}).labels() == {wk.NODEPOOL: "x"}
