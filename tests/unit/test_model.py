"""Behaviour on the domain model dataclasses."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.bounded import LATEST_TIME
from joiner.domain.model import (
    HostPort,
    InstanceType,
    LabelSelector,
    Node,
    NodeClaimPlan,
    NodePool,
    Offering,
    OfferingKey,
    Plan,
    Pod,
    PodDisruptionBudget,
    Taint,
    Toleration,
    UnschedulablePod,
    tolerates_all,
)
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.resources import Resources


class TestTolerations:
    taint = Taint("dedicated", "gpu", "NoSchedule")

    @pytest.mark.parametrize(
        ("toleration", "expected"),
        [
            (Toleration("dedicated", "Equal", "gpu", "NoSchedule"), True),
            (Toleration("dedicated", "Equal", "gpu"), True),  # empty effect tolerates every effect
            (Toleration("dedicated", "Equal", "cpu", "NoSchedule"), False),
            (Toleration("dedicated", "Exists"), True),
            (Toleration("dedicated", "Exists", effect="NoExecute"), False),
            (Toleration("other", "Exists"), False),
            (Toleration("", "Exists"), True),  # tolerate everything
            (Toleration("", "Equal"), False),
        ],
    )
    def test_matching(self, toleration: Toleration, expected: bool) -> None:
        assert toleration.tolerates(self.taint) is expected

    def test_tolerates_all_returns_the_first_untolerated(self) -> None:
        taints = (Taint("a", effect="PreferNoSchedule"), Taint("b"), Taint("c", effect="NoExecute"))
        assert tolerates_all((), taints) == Taint("b")
        assert tolerates_all((Toleration("b", "Exists"),), taints) == Taint("c", effect="NoExecute")
        assert tolerates_all((Toleration("b", "Exists"), Toleration("c", "Exists")), taints) is None
        assert tolerates_all((Toleration("b", "Exists"), Toleration("c", "Exists")), taints, ignore_prefer=False) == taints[0]

    def test_taint_to_dict_omits_empty_value(self) -> None:
        assert Taint("k").to_dict() == {"key": "k", "effect": "NoSchedule"}
        assert Taint("k", "v", "NoExecute").to_dict() == {"key": "k", "value": "v", "effect": "NoExecute"}


def test_label_selector_matches() -> None:
    selector = LabelSelector(
        match_labels=(("app", "web"),),
        match_expressions=(("tier", "In", ("a", "b")), ("canary", "DoesNotExist", ()), ("zone", "NotIn", ("x",)), ("team", "Exists", ())),
    )
    assert selector.matches({"app": "web", "tier": "a", "team": "t"})
    assert not selector.matches({"app": "web", "tier": "c", "team": "t"})
    assert not selector.matches({"app": "web", "tier": "a", "team": "t", "canary": "1"})
    assert not selector.matches({"app": "web", "tier": "a", "team": "t", "zone": "x"})
    assert not selector.matches({"app": "web", "tier": "a"})
    assert LabelSelector().matches({}) and LabelSelector().is_empty()
    assert not LabelSelector(match_expressions=(("k", "Bogus", ()),)).matches({"k": "v"})


def test_host_port_conflicts() -> None:
    wildcard = HostPort(80)
    assert wildcard.conflicts(HostPort(80, "TCP", "10.0.0.1"))
    assert not wildcard.conflicts(HostPort(80, "UDP"))
    assert not wildcard.conflicts(HostPort(81))
    assert not HostPort(80, "TCP", "10.0.0.1").conflicts(HostPort(80, "TCP", "10.0.0.2"))
    assert HostPort(80, "TCP", "10.0.0.1").conflicts(HostPort(80, "TCP", "10.0.0.1"))


class TestPod:
    def test_pending_rules(self) -> None:
        pod = Pod("default", "web")
        assert pod.is_pending and pod.key == "default/web"
        assert not dataclasses.replace(pod, node_name="n1").is_pending
        assert not dataclasses.replace(pod, phase="Succeeded").is_pending
        assert not dataclasses.replace(pod, owner_kind="DaemonSet").is_pending
        assert not dataclasses.replace(pod, deleting=True).is_pending
        assert not dataclasses.replace(pod, scheduling_gated=True).is_pending

    def test_flags_from_annotations_and_priority_class(self) -> None:
        assert Pod("d", "p", annotations={wk.KARPENTER_DO_NOT_DISRUPT: "true"}).do_not_disrupt
        assert Pod("d", "p", annotations={wk.DO_NOT_DISRUPT: "true"}).do_not_disrupt
        assert not Pod("d", "p", annotations={wk.DO_NOT_DISRUPT: "false"}).do_not_disrupt
        assert Pod("d", "p", annotations={wk.DO_NOT_DISRUPT: "30m"}).do_not_disrupt
        for ignored in ("True", "yes", "Never", "0s", "-5m", "5m ", ""):  # Karpenter: as if absent
            assert not Pod("d", "p", annotations={wk.KARPENTER_DO_NOT_DISRUPT: ignored}).do_not_disrupt, ignored
        assert Pod("d", "p", annotations={"kubernetes.io/config.mirror": "x"}).is_mirror
        assert Pod("d", "p", priority_class_name="system-node-critical").is_critical
        assert Pod("d", "p", annotations={"controller.kubernetes.io/pod-deletion-cost": "-5"}).deletion_cost == -5
        assert Pod("d", "p", annotations={"controller.kubernetes.io/pod-deletion-cost": "x"}).deletion_cost == 0

    def test_frozen(self) -> None:
        with pytest.raises(dataclasses.FrozenInstanceError):
            Pod("d", "p").name = "q"  # type: ignore[misc]


def test_node_instance_id_and_pool() -> None:
    node = Node("ip-10-0-0-1", labels={wk.NODEPOOL: "default"}, provider_id="aws:///us-east-1a/i-0123456789abcdef0")
    assert node.instance_id == "i-0123456789abcdef0"
    assert node.node_pool == "default"
    assert Node("n", provider_id="kind://docker/kind/n").instance_id is None
    assert Node("n", provider_id="aws:///us-east-1a/fargate-ip").instance_id is None
    assert Node("n").node_pool is None


def test_pdb_selects_pods_in_its_namespace() -> None:
    pdb = PodDisruptionBudget("web", "pdb", LabelSelector(match_labels=(("app", "web"),)))
    assert pdb.selects(Pod("web", "p", labels={"app": "web"}))
    assert not pdb.selects(Pod("other", "p", labels={"app": "web"}))
    assert not pdb.selects(Pod("web", "p", labels={"app": "api"}))


def test_node_pool_template_requirements_carry_labels_and_pool_name() -> None:
    pool = NodePool("gpu", requirements=Requirements([Requirement.create(wk.ARCH, "In", ["amd64", "arm64"])]), labels={"team": "ml"})
    merged = pool.template_requirements()
    assert merged[wk.NODEPOOL].single_value() == "gpu"
    assert merged["team"].single_value() == "ml"
    assert merged[wk.ARCH].values == frozenset({"amd64", "arm64"})


class TestInstanceType:
    instance_type = InstanceType(
        name="c5.large",
        capacity=Resources.of(cpu=2000, memory=4000),
        overhead=Resources.of(cpu=100, memory=500),
        requirements=Requirements(),
        offerings=(
            Offering("us-east-1a", "on-demand", 0.085),
            Offering("us-east-1b", "spot", 0.03),
            Offering("us-east-1a", "spot", 0.03),
            Offering("us-east-1c", "spot", 0.01, available=False),
        ),
    )

    def test_allocatable(self) -> None:
        assert self.instance_type.allocatable == Resources.of(cpu=1900, memory=3500)

    def test_cheapest_offering_is_deterministic_and_respects_requirements(self) -> None:
        assert self.instance_type.cheapest_offering() == Offering("us-east-1a", "spot", 0.03)  # tie broken on zone
        on_demand = Requirements([Requirement.create(wk.CAPACITY_TYPE, "In", ["on-demand"])])
        assert self.instance_type.cheapest_offering(on_demand) == Offering("us-east-1a", "on-demand", 0.085)
        zone_b = Requirements([Requirement.create(wk.ZONE, "In", ["us-east-1b"])])
        assert self.instance_type.cheapest_offering(zone_b) == Offering("us-east-1b", "spot", 0.03)
        unavailable = frozenset({OfferingKey("c5.large", "us-east-1a", "spot")})
        assert self.instance_type.cheapest_offering(unavailable=unavailable) == Offering("us-east-1b", "spot", 0.03)
        zone_c = Requirements([Requirement.create(wk.ZONE, "In", ["us-east-1c"])])
        assert self.instance_type.cheapest_offering(zone_c) is None


def test_plan_to_dict() -> None:
    claim = NodeClaimPlan("default", ("c5.large", "m5.large"), ("us-east-1a",), ("spot",), ("d/a", "d/b"), 0.0312345678, Requirements(), Resources())
    plan = Plan((claim, claim), (), (UnschedulablePod("d/c", "no NodePool tolerates taint x"),))
    out = plan.to_dict()
    assert out["costPerHour"] == round(2 * 0.0312345678, 6)
    assert out["nodeClaims"][0] == {  # type: ignore[index]
        "nodePool": "default",
        "instanceTypes": ["c5.large", "m5.large"],
        "zones": ["us-east-1a"],
        "capacityTypes": ["spot"],
        "pods": ["d/a", "d/b"],
        "price": 0.031235,
    }
    assert out["unschedulable"] == [{"pod": "d/c", "reason": "no NodePool tolerates taint x"}]


_CREATED = datetime(2024, 1, 1, tzinfo=UTC)


@given(st.integers(min_value=1, max_value=2**63 - 1), st.integers(min_value=0, max_value=(LATEST_TIME - _CREATED) // timedelta(microseconds=1)))
def test_a_duration_do_not_disrupt_protects_exactly_that_long(nanoseconds: int, age_microseconds: int) -> None:
    """Karpenter: active while the pod's age is below the duration (compared at the microsecond,
    Joiner's clock resolution), never after; always while the age is unknown."""
    pod = Pod("d", "p", annotations={wk.KARPENTER_DO_NOT_DISRUPT: f"{nanoseconds}ns"}, created=_CREATED)
    now = _CREATED + timedelta(microseconds=age_microseconds)
    assert pod.protected_at(now) is (age_microseconds * 1000 < nanoseconds)
    assert dataclasses.replace(pod, created=None).protected_at(now)
