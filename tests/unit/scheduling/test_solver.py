"""Behaviour of ``solve``: Karpenter's well-known scheduling cases and Joiner's cost goal."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.model import InFlightClaim, OfferingKey, Taint, Toleration
from joiner.domain.requirements import Requirements
from joiner.domain.resources import Resources
from joiner.domain.scheduling import SchedulingProblem, ffd_cost, ffd_plan, solve
from joiner.domain.scheduling.solver import solve_with_baseline
from joiner.domain.snapshot import effective_requests

from .builders import ZONES, daemonset, instance_type, node, node_pool, pod, req, reqs, res, spread, term
from .checks import check_plan

C5 = (instance_type("c5.large", 2, 4, 0.085), instance_type("c5.2xlarge", 8, 16, 0.34))
SIZES = (
    instance_type("m5.large", 2, 8, 0.096),
    instance_type("m5.xlarge", 4, 16, 0.192),
    instance_type("m5.2xlarge", 8, 32, 0.384),
    instance_type("m5.4xlarge", 16, 64, 0.768),
)


def problem(pods, *, pools=None, types=SIZES, **kwargs) -> SchedulingProblem:  # type: ignore[no-untyped-def]
    pools = pools or (node_pool(),)
    instance_types = kwargs.pop("instance_types", None) or {p.name: types for p in pools}
    return SchedulingProblem(pending=tuple(pods), node_pools=tuple(pools), instance_types=instance_types, **kwargs)


def solved(pr: SchedulingProblem):  # type: ignore[no-untyped-def]
    plan = solve(pr)
    check_plan(pr, plan)
    return plan


def claim_of(plan, key):  # type: ignore[no-untyped-def]
    return next(c for c in plan.node_claims if key in c.pods)


# ----------------------------------------------------------------- cost


def test_classic_twenty_one_cpu_pods_pack_into_the_cheapest_types():
    pr = problem([pod(f"p{i:02d}", "1", "1Gi") for i in range(20)], types=C5)
    plan = solved(pr)
    assert plan.cost_per_hour == pytest.approx(0.85)
    # At equal price, fewer nodes: two full 2xlarge and two large.
    assert sorted(c.instance_types[0] for c in plan.node_claims) == ["c5.2xlarge", "c5.2xlarge", "c5.large", "c5.large"]
    assert ffd_cost(pr) == pytest.approx(1.02)  # FFD: two full 2xlarge plus a third for 4 pods
    assert plan.cost_per_hour < ffd_cost(pr)


def test_bin_packing_uses_fewest_cheapest_nodes_and_lists_every_fitting_type():
    pr = problem([pod(f"p{i}", "1500m", "6Gi") for i in range(4)])
    plan = solved(pr)
    # 4 x (1.5 CPU, 6 GiB) = 6 CPU, 24 GiB: one m5.2xlarge (0.384) beats any mix of smaller ones.
    assert plan.cost_per_hour == pytest.approx(0.384)
    (claim,) = plan.node_claims
    assert claim.instance_types == ("m5.2xlarge", "m5.4xlarge")
    assert claim.requests == res(cpu="6", memory="24Gi", pods="4")
    assert claim.zones == ZONES and claim.capacity_types == ("on-demand",)
    assert claim.requirements[wk.INSTANCE_TYPE].values == {"m5.2xlarge", "m5.4xlarge"}


def test_init_container_requests_are_what_gets_packed():
    requests = effective_requests([res(cpu="500m", memory="1Gi")], [(res(cpu="3", memory="1Gi"), False)])
    big = pod("init-heavy")
    big = type(big)(**{**{f: getattr(big, f) for f in big.__dataclass_fields__}, "requests": requests})
    plan = solved(problem([big]))
    assert plan.node_claims[0].instance_types[0] == "m5.xlarge"  # 3 CPU of init does not fit m5.large


def test_plan_is_deterministic_under_input_permutation():
    pods = [pod(f"p{i}", ["250m", "1", "2"][i % 3], ["512Mi", "2Gi", "5Gi"][i % 3], labels={"app": f"a{i % 4}"}) for i in range(30)]
    first = solve(problem(pods))
    second = solve(problem(list(reversed(pods)), types=tuple(reversed(SIZES))))
    assert first == second


def test_no_nodepools_or_nothing_pending():
    assert solve(SchedulingProblem(pending=())).node_claims == ()
    plan = solve(SchedulingProblem(pending=(pod("a"),)))
    assert plan.unschedulable[0].reason == "no nodepools"


# ----------------------------------------------------------------- daemonsets


def test_daemonset_overhead_counts_only_daemonsets_that_would_run_there():
    arm_only = daemonset("arm-agent", "1", "1Gi", node_selector={wk.ARCH: "arm64"})
    everywhere = daemonset("logger", "500m", "512Mi", tolerations=(Toleration(operator="Exists"),))
    untolerating = daemonset("picky", "1", "1Gi")
    tainted = node_pool("tainted", taints=(Taint("dedicated", "x"),))
    pr = problem(
        [pod("a", "1500m", "1Gi", tolerations=(Toleration("dedicated", "Equal", "x"),))], pools=(tainted,), daemonsets=(arm_only, everywhere, untolerating)
    )
    plan = solved(pr)
    (claim,) = plan.node_claims
    # 1.5 CPU + 0.5 CPU logger = 2 CPU fits m5.large exactly; neither the arm64 nor the
    # untolerating DaemonSet would run on this amd64, tainted pool.
    assert claim.instance_types[0] == "m5.large"
    assert claim.requests == res(cpu="2", memory="1536Mi", pods="2")


def test_daemonset_overhead_can_push_to_a_bigger_type():
    pr = problem([pod("a", "1500m", "1Gi")], daemonsets=(daemonset("agent", "600m", "128Mi"),))
    assert solved(pr).node_claims[0].instance_types[0] == "m5.xlarge"


# ----------------------------------------------------------------- existing capacity


def test_pods_go_to_existing_nodes_before_new_claims():
    existing = node("n1", cpu=4, memory_gib=16, pool="default")
    bound = pod("running", "2", "4Gi", node_name="n1")
    pr = problem([pod("a", "1", "2Gi"), pod("b", "1", "2Gi"), pod("c", "1", "2Gi")], nodes=(existing,), bound_pods=(bound,))
    plan = solved(pr)
    (placement,) = plan.existing_nodes
    assert placement.name == "n1" and len(placement.pods) == 2  # 2 CPU left on n1
    assert len(plan.node_claims) == 1 and len(plan.node_claims[0].pods) == 1


def test_in_flight_claims_take_pods_and_count_against_limits():
    flight = InFlightClaim(
        "claim-1",
        "default",
        "m5.xlarge",
        "us-east-1a",
        "on-demand",
        allocatable=res(cpu="4", memory="16Gi", pods="110"),
        capacity=res(cpu="4", memory="16Gi", pods="110"),
        requirements=Requirements.from_labels({wk.NODEPOOL: "default"}),
        pods=("default/b",),
    )
    limited = node_pool(limits=res(cpu="10"))
    pods = [pod("a", "3", "1Gi"), pod("b", "1", "1Gi"), pod("c", "3", "1Gi"), pod("d", "3", "1Gi")]
    plan = solved(problem(pods, pools=(limited,), in_flight=(flight,)))
    (placement,) = plan.existing_nodes
    assert placement.name == "claim-1" and "default/b" in placement.pods and len(placement.pods) == 2
    # 4 CPU in flight leaves 6 CPU of limit: new claims may list types up to 6 CPU in total.
    total_largest = sum(max(t.capacity["cpu"] for t in SIZES if t.name in c.instance_types) for c in plan.node_claims)
    assert total_largest <= 6000
    assert any("limit reached" in u.reason for u in plan.unschedulable) or not plan.unschedulable


def test_limits_are_never_exceeded_counting_existing_nodes():
    limited = node_pool(limits=res(cpu="12"))
    existing = node("n1", cpu=4, memory_gib=16, pool="default")
    full = pod("full", "4", "1Gi", node_name="n1")
    pr = problem([pod(f"p{i}", "1", "1Gi") for i in range(20)], pools=(limited,), nodes=(existing,), bound_pods=(full,))
    plan = solved(pr)
    listed_cpu = sum(max(t.capacity["cpu"] for t in SIZES if t.name in c.instance_types) for c in plan.node_claims)
    assert 4000 + listed_cpu <= 12000
    assert sum(len(c.pods) for c in plan.node_claims) == 8
    assert len(plan.unschedulable) == 12
    assert all("limit reached" in u.reason for u in plan.unschedulable)


def test_nodes_limit_caps_the_number_of_claims():
    pr = problem([pod(f"p{i}", "3", "1Gi", host_ports=(80,)) for i in range(5)], pools=(node_pool(limits=Resources({"nodes": 2000})),))
    plan = solved(pr)
    assert len(plan.node_claims) == 2 and len(plan.unschedulable) == 3


# ----------------------------------------------------------------- node selection


def test_required_node_affinity_narrows_zones():
    pr = problem([pod("a", required=[reqs(req(wk.ZONE, "In", "us-east-1b"))])])
    (claim,) = solved(pr).node_claims
    assert claim.zones == ("us-east-1b",)


def test_second_required_term_is_used_when_the_first_cannot_be_met():
    impossible = reqs(req(wk.ZONE, "In", "eu-west-1a"))
    possible = reqs(req(wk.ZONE, "In", "us-east-1c"))
    (claim,) = solved(problem([pod("a", required=[impossible, possible])])).node_claims
    assert claim.zones == ("us-east-1c",)


def test_preferred_node_affinity_is_honoured_then_relaxed():
    preferred = solved(problem([pod("a", preferred=[(10, reqs(req(wk.ZONE, "In", "us-east-1a"))), (50, reqs(req(wk.ZONE, "In", "us-east-1c")))])]))
    assert preferred.node_claims[0].zones == ("us-east-1c",)  # heaviest preference first
    relaxed = solved(problem([pod("a", preferred=[(10, reqs(req(wk.ZONE, "In", "mars-1a")))])]))
    assert len(relaxed.node_claims) == 1 and not relaxed.unschedulable


def test_node_selector_on_unknown_label_is_unschedulable_with_reason():
    plan = solved(problem([pod("a", node_selector={"team": "x"})]))
    assert "does not have known values" in plan.unschedulable[0].reason
    labelled = solved(problem([pod("a", node_selector={"team": "x"})], pools=(node_pool(labels={"team": "x"}),)))
    assert labelled.node_claims[0].requirements["team"].values == {"x"}


def test_incompatible_requirements_reason_names_the_key():
    pools = (node_pool(requirements=[req(wk.ARCH, "In", "amd64")]),)
    plan = solved(problem([pod("a", node_selector={wk.ARCH: "arm64"})], pools=pools))
    assert plan.unschedulable[0].reason.startswith('nodepool "default": incompatible requirements, key kubernetes.io/arch')


def test_no_type_fits_reason_lists_requests():
    plan = solved(problem([pod("huge", "64", "8Gi")]))
    assert plan.unschedulable[0].reason == 'nodepool "default": no instance type fits requests cpu=64, memory=8Gi, pods=1'


def test_pool_weights_pick_higher_weight_pools_first():
    cheap = node_pool("cheap", weight=1)
    preferred = node_pool("preferred", weight=50)
    pricey = tuple(instance_type(t.name, t.capacity["cpu"] / 1000, t.capacity["memory"] / 2**30 / 1000, 10.0) for t in SIZES)
    pr = problem([pod("a")], pools=(cheap, preferred), instance_types={"cheap": SIZES, "preferred": pricey})
    assert solved(pr).node_claims[0].node_pool == "preferred"


def test_taints_and_tolerations_select_pools_and_explain_failures():
    gpu = node_pool("gpu", taints=(Taint("gpu", "true"),), weight=10)
    pools = (gpu, node_pool("default"))
    tolerant = pod("t", tolerations=(Toleration("gpu", "Equal", "true", "NoSchedule"),))
    plain = pod("p")
    assert solved(problem([tolerant], pools=pools)).node_claims[0].node_pool == "gpu"
    assert solved(problem([plain], pools=pools)).node_claims[0].node_pool == "default"
    # Together, one node holds both (the tolerant pod may use the default pool too).
    together = solved(problem([tolerant, plain], pools=pools))
    assert len(together.node_claims) == 1 and together.node_claims[0].node_pool == "default"
    assert solve_with_baseline(problem([tolerant, plain], pools=pools))[1] is not None
    only_gpu = solved(problem([pod("x", "64", "1Gi")], pools=pools))
    assert only_gpu.unschedulable[0].reason == (
        'nodepool "gpu": taint gpu=true:NoSchedule not tolerated; nodepool "default": no instance type fits requests cpu=64, memory=1Gi, pods=1'
    )


def test_prefer_no_schedule_taint_is_avoided_then_tolerated():
    soft = node_pool("soft", taints=(Taint("spot-only", "", "PreferNoSchedule"),), weight=10)
    plan = solved(problem([pod("a")], pools=(soft, node_pool("default"))))
    assert plan.node_claims[0].node_pool == "default"
    alone = solved(problem([pod("a")], pools=(soft,)))
    assert alone.node_claims[0].node_pool == "soft"


def test_unavailable_offerings_are_never_chosen():
    types = (instance_type("m5.large", 2, 8, 0.096, zones=("us-east-1a",)), instance_type("m5.xlarge", 4, 16, 0.192))
    unavailable = frozenset({OfferingKey("m5.large", "us-east-1a", "on-demand")})
    (claim,) = solved(problem([pod("a")], types=types, unavailable=unavailable)).node_claims
    assert claim.instance_types == ("m5.xlarge",)


def test_spot_is_chosen_when_cheaper_and_allowed():
    types = (instance_type("m5.large", 2, 8, 0.096, capacity_types=("on-demand", "spot"), spot_price=0.03),)
    (claim,) = solved(problem([pod("a")], types=types)).node_claims
    assert claim.price == pytest.approx(0.03) and "spot" in claim.capacity_types
    on_demand_pool = node_pool(requirements=[req(wk.CAPACITY_TYPE, "In", "on-demand")])
    (claim,) = solved(problem([pod("a")], pools=(on_demand_pool,), types=types)).node_claims
    assert claim.price == pytest.approx(0.096) and claim.capacity_types == ("on-demand",)


def test_min_values_keeps_enough_instance_types_or_refuses():
    pool = node_pool(requirements=[req(wk.INSTANCE_TYPE, "Exists", min_values=3)])
    plan = solved(problem([pod("a", "3", "4Gi")], pools=(pool,)))
    assert len(plan.node_claims[0].instance_types) >= 3
    too_big = solved(problem([pod("a", "10", "4Gi")], pools=(pool,)))  # only m5.4xlarge fits
    assert "minValues" in too_big.unschedulable[0].reason


def test_min_values_limits_how_full_a_claim_gets():
    pool = node_pool(requirements=[req(wk.INSTANCE_TYPE, "Exists", min_values=2)])
    plan = solved(problem([pod(f"p{i}", "3", "1Gi", labels={"app": "x"}, anti_affinity=[term("x", app="none")]) for i in range(8)], pools=(pool,)))
    for claim in plan.node_claims:
        assert len(claim.instance_types) >= 2


def test_host_ports_conflict_per_node():
    plan = solved(problem([pod("a", "250m", host_ports=(8080,)), pod("b", "250m", host_ports=(8080,)), pod("c", "250m", host_ports=(9090,))]))
    assert len(plan.node_claims) == 2
    existing = node("n1", pool="default")
    taken = pod("web", "100m", node_name="n1", host_ports=(8080,))
    plan = solved(problem([pod("a", "250m", host_ports=(8080,))], nodes=(existing,), bound_pods=(taken,)))
    assert not plan.existing_nodes and len(plan.node_claims) == 1


# ----------------------------------------------------------------- pod affinity


def test_hostname_anti_affinity_gives_one_pod_per_node():
    pods = [pod(f"p{i}", "100m", labels={"app": "db"}, anti_affinity=[term(wk.HOSTNAME, app="db")]) for i in range(5)]
    plan = solved(problem(pods))
    assert len(plan.node_claims) == 5 and all(len(c.pods) == 1 for c in plan.node_claims)


def test_existing_pods_anti_affinity_repels_incoming_pods():
    existing = node("n1", pool="default")
    guard = pod("guard", "100m", node_name="n1", labels={"app": "guard"}, anti_affinity=[term(wk.HOSTNAME, app="web")])
    incoming = pod("web", "100m", labels={"app": "web"})
    plan = solved(problem([incoming], nodes=(existing,), bound_pods=(guard,)))
    assert not plan.existing_nodes and len(plan.node_claims) == 1
    other = pod("other", "100m", labels={"app": "other"})
    plan = solved(problem([other], nodes=(existing,), bound_pods=(guard,)))
    assert plan.existing_nodes[0].pods == ("default/other",)


def test_pending_pods_anti_affinity_applies_in_both_directions():
    guard = pod("guard", "100m", labels={"app": "guard"}, anti_affinity=[term(wk.ZONE, app="web")], required=[reqs(req(wk.ZONE, "In", "us-east-1a"))])
    web = pod("web", "100m", labels={"app": "web"})
    plan = solved(problem([guard, web]))
    assert claim_of(plan, "default/guard").zones == ("us-east-1a",)
    assert "us-east-1a" not in claim_of(plan, "default/web").zones


def test_zonal_anti_affinity_takes_one_zone_each():
    pods = [pod(f"p{i}", "100m", labels={"app": "x"}, anti_affinity=[term(wk.ZONE, app="x")]) for i in range(4)]
    plan = solved(problem(pods))
    zones = [c.zones for c in plan.node_claims]
    assert sorted(z for zs in zones for z in zs) == sorted(ZONES)
    assert len(plan.unschedulable) == 1
    assert "pod anti-affinity" in plan.unschedulable[0].reason


def test_pod_affinity_co_locates_with_existing_pod():
    existing = node("n1", zone="us-east-1b", pool="default")
    db = pod("db", "100m", node_name="n1", labels={"app": "db"})
    near = pod("cache", "100m", affinity=[term(wk.ZONE, app="db")])
    same_host = pod("sidecar", "100m", affinity=[term(wk.HOSTNAME, app="db")])
    pr = problem([near, same_host], nodes=(existing,), bound_pods=(db,), types=SIZES)
    plan = solved(pr)
    assert sorted(plan.existing_nodes[0].pods) == ["default/cache", "default/sidecar"]
    full = node("n1", cpu=0.2, memory_gib=1, zone="us-east-1b", pool="default")
    plan = solved(problem([near, same_host], nodes=(full,), bound_pods=(db,)))
    assert claim_of(plan, "default/cache").zones == ("us-east-1b",)
    assert "pod affinity" in next(u.reason for u in plan.unschedulable if u.pod == "default/sidecar")


def test_self_affinity_bootstraps_one_zone():
    pods = [pod(f"p{i}", "2", "2Gi", labels={"app": "x"}, affinity=[term(wk.ZONE, app="x")]) for i in range(6)]
    plan = solved(problem(pods))
    assert {c.zones for c in plan.node_claims} == {("us-east-1a",)}


def test_preferred_anti_affinity_is_relaxed_when_it_cannot_hold():
    pools = (node_pool(requirements=[req(wk.ZONE, "In", "us-east-1a")]),)
    pods = [pod(f"p{i}", "100m", labels={"app": "x"}, anti_affinity=[term(wk.ZONE, weight=10, app="x")]) for i in range(3)]
    plan = solved(problem(pods, pools=pools))
    assert not plan.unschedulable


def test_namespace_scoping_of_affinity_terms():
    guard = pod("guard", "100m", namespace="a", labels={"app": "x"}, anti_affinity=[term(wk.HOSTNAME, app="x")])
    other_ns = pod("other", "100m", namespace="b", labels={"app": "x"})
    plan = solved(problem([guard, other_ns]))
    assert len(plan.node_claims) == 1  # the term only selects pods in namespace a
    listed = pod("guard", "100m", namespace="a", labels={"app": "x"}, anti_affinity=[term(wk.HOSTNAME, namespaces=("b",), app="x")])
    assert len(solved(problem([listed, other_ns])).node_claims) == 2


# ----------------------------------------------------------------- topology spread


def zone_counts(plan) -> Counter:  # type: ignore[no-untyped-def]
    counts: Counter = Counter()
    for claim in plan.node_claims:
        assert len(claim.zones) == 1
        counts[claim.zones[0]] += len(claim.pods)
    return counts


def test_zone_spread_balances_within_max_skew():
    pods = [pod(f"p{i}", "500m", labels={"app": "x"}, spread=[spread(wk.ZONE, app="x")]) for i in range(7)]
    counts = zone_counts(solved(problem(pods)))
    assert sorted(counts.values()) == [2, 2, 3]


def test_zone_spread_counts_existing_pods():
    existing = node("n1", zone="us-east-1a", pool="default", cpu=0.1)
    running = [pod(f"r{i}", "0", "0", node_name="n1", labels={"app": "x"}) for i in range(2)]
    pods = [pod(f"p{i}", "500m", labels={"app": "x"}, spread=[spread(wk.ZONE, app="x")]) for i in range(4)]
    counts = zone_counts(solved(problem(pods, nodes=(existing,), bound_pods=tuple(running))))
    assert counts["us-east-1b"] == 2 and counts["us-east-1c"] == 2 and counts["us-east-1a"] == 0


def test_zone_spread_min_domains_limits_pods_when_too_few_zones():
    pools = (node_pool(requirements=[req(wk.ZONE, "In", "us-east-1a", "us-east-1b")]),)
    pods = [pod(f"p{i}", "500m", labels={"app": "x"}, spread=[spread(wk.ZONE, min_domains=3, app="x")]) for i in range(5)]
    plan = solved(problem(pods, pools=pools))
    assert sum(len(c.pods) for c in plan.node_claims) == 2
    assert len(plan.unschedulable) == 3 and "topology spread" in plan.unschedulable[0].reason


def test_hostname_spread_max_skew_two():
    pods = [pod(f"p{i}", "100m", labels={"app": "x"}, spread=[spread(wk.HOSTNAME, max_skew=2, app="x")]) for i in range(6)]
    plan = solved(problem(pods))
    assert sorted(len(c.pods) for c in plan.node_claims) == [2, 2, 2]


def test_schedule_anyway_spread_is_relaxed():
    pools = (node_pool(requirements=[req(wk.ZONE, "In", "us-east-1a")]),)
    existing = node("n1", zone="us-east-1b", pool="other", cpu=0.1)
    others = [pod(f"r{i}", "0", "0", node_name="n1", labels={"app": "x"}) for i in range(0)]
    pods = [pod(f"p{i}", "500m", labels={"app": "x"}, spread=[spread(wk.ZONE, when="ScheduleAnyway", app="x")]) for i in range(4)]
    plan = solved(problem(pods, pools=pools, nodes=(existing,), bound_pods=tuple(others)))
    assert not plan.unschedulable


def test_capacity_type_spread():
    types = (instance_type("m5.large", 2, 8, 0.096, capacity_types=("on-demand", "spot"), spot_price=0.04),)
    pods = [pod(f"p{i}", "1500m", labels={"app": "x"}, spread=[spread(wk.CAPACITY_TYPE, app="x")]) for i in range(4)]
    plan = solved(problem(pods, types=types))
    counts = Counter(c.capacity_types[0] for c in plan.node_claims for _ in c.pods)
    assert all(len(c.capacity_types) == 1 for c in plan.node_claims)
    assert counts == Counter({"on-demand": 2, "spot": 2})


# ----------------------------------------------------------------- baseline


def test_ffd_baseline_matches_karpenter_first_fit():
    pods = [pod(f"p{i}", "1", "1Gi") for i in range(3)]
    plan = ffd_plan(problem(pods))
    (claim,) = plan.node_claims
    assert claim.instance_types[0] == "m5.xlarge" and len(claim.pods) == 3


def test_constrained_and_free_pods_together_are_feasible_and_cheaper_than_ffd():
    pods = [pod(f"s{i}", "500m", labels={"app": "s"}, spread=[spread(wk.ZONE, app="s")]) for i in range(6)]
    pods += [pod(f"f{i}", ["250m", "1", "3"][i % 3], ["1Gi", "3Gi", "10Gi"][i % 3]) for i in range(30)]
    pr = problem(pods)
    plan = solved(pr)
    assert not plan.unschedulable
    assert plan.cost_per_hour <= ffd_cost(pr) + 1e-9


@pytest.mark.parametrize("key", ["karpenter.sh/capacity-type", wk.CAPACITY_TYPE])
def test_a_karpenter_alias_as_topology_key_names_the_same_domains(key: str) -> None:
    """Issue 12 item 1: a spread or anti-affinity keyed on karpenter.sh/capacity-type found no
    domains and left even unconstrained pods unschedulable. The alias and Joiner's key now
    plan alike, and a node Karpenter launched (only karpenter.sh labels) counts in its domain."""
    types = (instance_type("c5.large", 2, 4, 0.085, capacity_types=("on-demand", "spot"), spot_price=0.035),)
    pool = node_pool("general")
    spread_pods = tuple(pod(f"s{i}", "500m", "512Mi", labels={"app": "s"}, spread=[spread(key, app="s")]) for i in range(4))
    anti_pods = tuple(pod(f"a{i}", "500m", "512Mi", labels={"app": "a"}, anti_affinity=[term(key, app="a")]) for i in range(2))
    problem = SchedulingProblem(pending=spread_pods + anti_pods, node_pools=(pool,), instance_types={"general": types})
    plan = solve(problem)
    check_plan(problem, plan)
    assert not plan.unschedulable
    by_type = Counter(c.capacity_types for c in plan.node_claims for p in c.pods if p.startswith("default/s"))
    assert by_type == Counter({("on-demand",): 2, ("spot",): 2})
    assert sorted(c.capacity_types for c in plan.node_claims if any(p.startswith("default/a") for p in c.pods)) == [("on-demand",), ("spot",)]

    karpenter_node = node("k1", pool="general", labels={"karpenter.sh/capacity-type": "spot"})
    karpenter_node = type(karpenter_node)(
        **{
            **{f: getattr(karpenter_node, f) for f in karpenter_node.__dataclass_fields__},
            "labels": {k: v for k, v in karpenter_node.labels.items() if k != wk.CAPACITY_TYPE},
        }
    )
    bound = (pod("b0", "500m", "512Mi", labels={"app": "a"}, node_name="k1"),)
    problem = SchedulingProblem(pending=anti_pods[:1], nodes=(karpenter_node,), bound_pods=bound, node_pools=(pool,), instance_types={"general": types})
    (claim,) = solve(problem).node_claims
    assert claim.capacity_types == ("on-demand",)  # the spot domain is taken by the Karpenter node's pod


def test_daemonset_overhead_counts_every_resource_the_daemonsets_request() -> None:
    """Issue 12 item 2: a CPU-only pod ignored a DaemonSet's memory, so a type too small for
    the DaemonSet was chosen (c5.large: 4 GiB, the DaemonSet 6 GiB)."""
    types = (instance_type("c5.large", 2, 4, 0.085), instance_type("m5.large", 2, 8, 0.096))
    pool = node_pool("general")
    cpu_only = pod("c", "500m", "0")
    problem = SchedulingProblem(pending=(cpu_only,), daemonsets=(daemonset("agent", "100m", "6Gi"),), node_pools=(pool,), instance_types={"general": types})
    (claim,) = solve(problem).node_claims
    assert claim.instance_types == ("m5.large",)


def test_a_daemonset_runs_on_a_pool_whose_prefer_no_schedule_taint_it_does_not_tolerate() -> None:
    """Issue 12 item 4: PreferNoSchedule keeps no DaemonSet pod off a node, so its overhead counts."""
    types = (instance_type("c5.large", 2, 4, 0.085), instance_type("c5.xlarge", 4, 8, 0.17))
    pool = node_pool("soft", taints=[Taint("spot", "true", "PreferNoSchedule")])
    problem = SchedulingProblem(
        pending=(pod("p", "1500m", "1Gi"),), daemonsets=(daemonset("agent", "1", "256Mi"),), node_pools=(pool,), instance_types={"soft": types}
    )
    (claim,) = solve(problem).node_claims
    assert claim.instance_types[0] == "c5.xlarge"  # 1.5 + 1 CPU do not fit a c5.large's 2


def test_daemonset_host_ports_are_taken_on_every_new_node() -> None:
    """Issue 12 item 3: a node-exporter DaemonSet holds port 9100 on every node, so a pending pod
    asking for 9100 cannot run on a new node of that pool; another port is free."""
    types = (instance_type("c5.large", 2, 4, 0.085),)
    pool = node_pool("general")
    ds = daemonset("node-exporter", "100m", "128Mi", host_ports=(9100,))
    problem = SchedulingProblem(
        pending=(pod("clash", "100m", "128Mi", host_ports=(9100,)), pod("free", "100m", "128Mi", host_ports=(8080,))),
        daemonsets=(ds,),
        node_pools=(pool,),
        instance_types={"general": types},
    )
    plan = solve(problem)
    assert [c.pods for c in plan.node_claims] == [("default/free",)]
    (stuck,) = plan.unschedulable
    assert stuck.pod == "default/clash" and "host port 9100" in stuck.reason


def test_daemonset_overhead_comes_from_its_running_pods_when_there_are_any() -> None:
    """Issue 12 item 5: a LimitRange gave the DaemonSet's pods 1 GiB more than its template
    asks; the overhead must use what the running pods request."""
    types = (instance_type("c5.large", 2, 4, 0.085), instance_type("m5.large", 2, 8, 0.096))
    ds = daemonset("agent", "100m", "512Mi")
    existing = node("n0", cpu=2, memory_gib=4, pool="general")
    running = pod("agent-x", "100m", "3Gi", node_name="n0", owner=("DaemonSet", "agent"), namespace="kube-system")
    problem = SchedulingProblem(
        pending=(pod("p", "500m", "1536Mi"),),
        nodes=(existing,),
        bound_pods=(running,),
        daemonsets=(ds,),
        node_pools=(node_pool("general"),),
        instance_types={"general": types},
    )
    (claim,) = solve(problem).node_claims
    assert claim.instance_types == ("m5.large",)  # 3 GiB + 1 GiB do not fit a c5.large's allocatable


# ----------------------------------------------------------------- spread domains (issue 12 items 6 and 7)


def test_honored_node_affinity_limits_spread_domains_to_pools_the_pod_can_use() -> None:
    """Issue 12 item 6: arm64-only pods spread by zone. Only the arm64 NodePool (zones a and b)
    can host them; the amd64 pool's zone c is no domain of theirs (nodeAffinityPolicy Honor),
    else its zero count would hold every pod past the first two."""
    arm = instance_type("m6g.large", 2, 8, 0.077, arch="arm64")
    x86 = instance_type("m5.large", 2, 8, 0.096)
    pools = (
        node_pool("arm", requirements=[req(wk.ARCH, "In", "arm64"), req(wk.ZONE, "In", "us-east-1a", "us-east-1b")]),
        node_pool("x86", requirements=[req(wk.ARCH, "In", "amd64")]),
    )
    pods = tuple(pod(f"p{i}", "1500m", labels={"app": "a"}, node_selector={wk.ARCH: "arm64"}, spread=[spread(wk.ZONE, app="a")]) for i in range(4))
    problem = SchedulingProblem(pending=pods, node_pools=pools, instance_types={"arm": (arm,), "x86": (x86,)})
    plan = solve(problem)
    check_plan(problem, plan)
    assert not plan.unschedulable
    zones = Counter(c.zones[0] for c in plan.node_claims for _ in c.pods)
    assert zones == Counter({"us-east-1a": 2, "us-east-1b": 2})


def test_a_preferred_zone_tried_as_required_does_not_narrow_the_spread() -> None:
    """Issue 12 item 7: a preferred node affinity for zone a, tried as required, must not make
    zone a the spread's only domain: three replicas still land one per zone (kube-scheduler
    would leave a second pod in zone a pending on the skew)."""
    pods = tuple(
        pod(f"p{i}", "1500m", labels={"app": "a"}, preferred=[(50, reqs(req(wk.ZONE, "In", "us-east-1a")))], spread=[spread(wk.ZONE, app="a")])
        for i in range(3)
    )
    problem = SchedulingProblem(pending=pods, node_pools=(node_pool("general"),), instance_types={"general": (instance_type("m5.large", 2, 8, 0.096),)})
    plan = solve(problem)
    check_plan(problem, plan)
    assert not plan.unschedulable
    zones = Counter(c.zones[0] for c in plan.node_claims for _ in c.pods if len(c.zones) == 1)
    assert zones == Counter(dict.fromkeys(ZONES, 1))


def test_architecture_free_pods_fill_the_slack_of_both_kinds_of_node() -> None:
    """Issue 14: 60 arm64-only and 60 amd64-only 1.5-CPU pods leave half a CPU on each of
    their 120 two-CPU nodes; 120 architecture-free 500m pods fit exactly in that slack, so the
    plan buys no node for them."""
    arm = instance_type("a.large", 2, 8, 0.080, arch="arm64")
    x86 = instance_type("x.large", 2, 8, 0.100)
    pods = tuple(pod(f"arm{i}", "1500m", "1Gi", node_selector={wk.ARCH: "arm64"}) for i in range(60))
    pods += tuple(pod(f"amd{i}", "1500m", "1Gi", node_selector={wk.ARCH: "amd64"}) for i in range(60))
    pods += tuple(pod(f"free{i}", "500m", "1Gi") for i in range(120))
    problem = SchedulingProblem(pending=pods, node_pools=(node_pool("p"),), instance_types={"p": (arm, x86)})
    plan = solve(problem)
    check_plan(problem, plan)
    assert not plan.unschedulable
    assert len(plan.node_claims) == 120 and plan.cost_per_hour == pytest.approx(60 * 0.080 + 60 * 0.100)


def test_architecture_free_pods_are_packed_together_with_the_architecture_they_are_cheapest_on() -> None:
    """Issue 14: CPU-heavy arm64-only pods (2 CPU / 2 GiB) and memory-heavy free pods
    (1 CPU / 6 GiB). Packed apart, the arm64 pods fill compute nodes and the free pods
    memory nodes (20 x 0.13 + 10 x 0.20 = 4.60 $/h); packed together on Graviton (where the
    free pods are cheapest), one arm64 pod and two free pods fill a general-purpose node
    (20 x 0.15 + 10 x 0.13 = 4.30 $/h)."""
    graviton = [("c", 8, 0.13), ("m", 16, 0.15), ("r", 32, 0.20)]
    types = [instance_type(f"{family}g.xlarge", 4, memory, price, arch="arm64") for family, memory, price in graviton]
    types += [instance_type(f"{family}i.xlarge", 4, memory, price * 1.25) for family, memory, price in graviton]
    pods = tuple(pod(f"arm{i}", "2", "2Gi", node_selector={wk.ARCH: "arm64"}) for i in range(40))
    pods += tuple(pod(f"free{i}", "1", "6Gi") for i in range(40))
    problem = SchedulingProblem(pending=pods, node_pools=(node_pool("p"),), instance_types={"p": tuple(types)})
    plan = solve(problem)
    check_plan(problem, plan)
    assert not plan.unschedulable
    assert plan.cost_per_hour == pytest.approx(4.30)
    mixed = [claim for claim in plan.node_claims if any("/free" in key for key in claim.pods) and any("/arm" in key for key in claim.pods)]
    assert len(mixed) == 20 and all(claim.instance_types[0] == "mg.xlarge" for claim in mixed)


# ----------------------------------------------------------------- DaemonSet overhead and host ports as Karpenter reads them


def _daemonset_world(ds_pods: list[dict[str, object]]) -> object:
    """A NodePool labelled foo=bar limited to c5 types; a DaemonSet whose template asks for 3
    CPUs on foo=bar nodes; its pods ``ds_pods``; one pending 1-CPU pod for foo=bar."""
    from tests.support.fakes import daemonset_json, node_class_json, node_pool_json, pod_json

    pool = node_pool_json(
        "default", labels={"foo": "bar"}, requirements=[{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "c5.xlarge", "c5.2xlarge"]}]
    )
    ds = daemonset_json("agent", cpu="3", memory="512Mi")
    ds["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}]
            }
        }
    }
    pending = pod_json("web", cpu="1", memory="1Gi", node_selector={"foo": "bar"})
    from joiner.domain.snapshot import parse_objects

    return parse_objects([pool, node_class_json("default"), ds, pending, *ds_pods])


def _daemonset_pod(name: str, cpu: str, *, created: object, node_name: str | None = None) -> dict[str, object]:
    """A pod of DaemonSet agent as its controller makes it: pinned to one node by a
    ``metadata.name`` matchFields term that replaces the template's node affinity."""
    from tests.support.fakes import pod_json

    obj = pod_json(
        name,
        namespace="kube-system",
        cpu=cpu,
        memory="512Mi",
        node_name=node_name,
        created=created,  # type: ignore[arg-type]
        extra_spec={
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-x"]}]}]
                    }
                }
            }
        },
    )
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "uid-agent", "controller": True}]  # type: ignore[index]
    return obj


def test_daemonset_overhead_comes_from_an_unbound_daemonset_pod_and_ignores_its_node_pinning() -> None:
    """Karpenter's "should remove daemonset node hostname affinity when considering daemonset
    schedulability": the DaemonSet's only pod is not bound yet; a LimitRange gave it 500m
    instead of the template's 3 CPUs. Its requests are the overhead, its node pinning (the
    controller's metadata.name term) is not read: the template's foo=bar affinity decides
    where it runs. 500m + 1 CPU fit a c5.large; 3 + 1 CPUs would need a c5.2xlarge."""
    from datetime import UTC, datetime

    from joiner.domain.planning import plan_snapshot
    from tests.support.fakes import small_catalog

    snapshot = _daemonset_world([_daemonset_pod("agent-abcde", "500m", created=datetime(2025, 1, 1, tzinfo=UTC))])
    (claim,) = plan_snapshot(snapshot, small_catalog()).node_claims  # type: ignore[arg-type]
    assert claim.instance_types[0] == "c5.large", claim.instance_types


def test_daemonset_overhead_comes_from_its_newest_pod_bound_or_not() -> None:
    """Karpenter keeps the newest pod the DaemonSet controls (by creation time) as its
    representative, whatever its node or phase: after a rollout to 500m, the new unbound pod
    counts, not the larger old one still running."""
    from datetime import UTC, datetime

    from joiner.domain.planning import plan_snapshot
    from tests.support.fakes import node_json, small_catalog

    old = _daemonset_pod("agent-old", "3", created=datetime(2025, 1, 1, tzinfo=UTC), node_name="n0")
    new = _daemonset_pod("agent-new", "500m", created=datetime(2025, 1, 2, tzinfo=UTC))
    node = node_json("n0", instance_id="i-000000000001", instance_type="c5.xlarge", cpu="4", memory="8Gi")
    for pods, first in (([old, new], "c5.large"), ([old], "c5.2xlarge")):
        snapshot = _daemonset_world([*pods, node])
        (claim,) = plan_snapshot(snapshot, small_catalog()).node_claims  # type: ignore[arg-type]
        assert claim.instance_types[0] == first, (len(pods), claim.instance_types)


def test_a_daemonset_host_port_is_taken_only_on_the_types_the_daemonset_runs_on() -> None:
    """Karpenter groups a NodePool's types by the DaemonSets that run on them, each group with
    its own host ports: an arm64-only exporter on port 9100 leaves 9100 free on amd64 types,
    so a pod asking for it gets an amd64 node (not refused everywhere); on arm64 it cannot run."""
    types = (instance_type("c5.large", 2, 4, 0.085), instance_type("m6g.large", 2, 8, 0.077, arch="arm64"))
    ds = daemonset("exporter", "100m", "128Mi", node_selector={wk.ARCH: "arm64"}, host_ports=(9100,))
    problem = SchedulingProblem(
        pending=(pod("clash", "100m", "128Mi", host_ports=(9100,)), pod("arm-clash", "100m", "128Mi", host_ports=(9100,), node_selector={wk.ARCH: "arm64"})),
        daemonsets=(ds,),
        node_pools=(node_pool("general"),),
        instance_types={"general": types},
    )
    plan = solve(problem)
    placed = {key: claim.instance_types for claim in plan.node_claims for key in claim.pods}
    assert placed["default/clash"] == ("c5.large",), plan
    (stuck,) = plan.unschedulable
    assert stuck.pod == "default/arm-clash" and "host port 9100" in stuck.reason, stuck


_ARCH_TYPES = (instance_type("c5.large", 2, 4, 0.085), instance_type("m5.large", 2, 8, 0.096), instance_type("m6g.large", 2, 8, 0.077, arch="arm64"))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([None, "amd64", "arm64"]), st.sampled_from([9100, 9101])), max_size=4),
    st.sampled_from([9100, 9101, 8080]),
    st.sampled_from([None, "amd64", "arm64"]),
)
def test_a_pod_gets_exactly_the_types_where_no_daemonset_holds_its_port(daemons: list[tuple[str | None, int]], port: int, wants: str | None) -> None:
    """Whatever DaemonSets hold which ports on which architectures: the pod's claim offers only
    types its requirements allow where no DaemonSet holding its port runs, all of them, and
    the pod is unschedulable exactly when there is none."""
    arch_of = {t.name: t.requirements.get(wk.ARCH).single_value() for t in _ARCH_TYPES}  # type: ignore[union-attr]
    dss = tuple(daemonset(f"ds{i}", "100m", "128Mi", node_selector={wk.ARCH: arch} if arch else None, host_ports=(p,)) for i, (arch, p) in enumerate(daemons))
    problem = SchedulingProblem(
        pending=(pod("p", "100m", "128Mi", host_ports=(port,), node_selector={wk.ARCH: wants} if wants else None),),
        daemonsets=dss,
        node_pools=(node_pool("general"),),
        instance_types={"general": _ARCH_TYPES},
    )
    expected = {
        name for name, arch in arch_of.items() if (wants is None or arch == wants) and not any(p == port and (a is None or a == arch) for a, p in daemons)
    }
    plan = solve(problem)
    if not expected:
        assert [u.pod for u in plan.unschedulable] == ["default/p"]
        return
    (claim,) = plan.node_claims
    assert set(claim.instance_types) == expected, (daemons, port, wants, claim.instance_types)
