"""Properties of plans for many distinct pod shapes and an architecture mix (issue 14):
the packer's shape-scaling shortcuts and the narrow-class-first packing of architecture
classes must keep every plan feasible and never above first-fit-decreasing."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.scheduling import SchedulingProblem, ffd_cost, solve

from .builders import daemonset, instance_type, node_pool, pod, req
from .checks import check_plan

TYPES = (
    instance_type("c6g.large", 2, 4, 0.068, arch="arm64"),
    instance_type("c6g.2xlarge", 8, 16, 0.272, arch="arm64"),
    instance_type("m6g.xlarge", 4, 16, 0.154, arch="arm64"),
    instance_type("m6g.4xlarge", 16, 64, 0.616, arch="arm64"),
    instance_type("r6g.2xlarge", 8, 64, 0.403, arch="arm64"),
    instance_type("c6i.large", 2, 4, 0.085),
    instance_type("c6i.4xlarge", 16, 32, 0.68),
    instance_type("m6i.2xlarge", 8, 32, 0.384),
    instance_type("r6i.xlarge", 4, 32, 0.252),
    instance_type("r6i.4xlarge", 16, 128, 1.008),
)

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def problems(draw: st.DrawFn) -> SchedulingProblem:
    """Up to 120 pods of up to 60 distinct (CPU, memory) shapes, each arm64-only,
    amd64-only or free to run on either, on a pool of both architectures."""
    shape_count = draw(st.integers(1, 60))
    shapes = [(draw(st.integers(1, 80)) * 50, draw(st.integers(1, 160)) * 64) for _ in range(shape_count)]
    pods = []
    for index in range(draw(st.integers(1, 120))):
        cpu, memory = draw(st.sampled_from(shapes))
        arch = draw(st.sampled_from(("arm64", "amd64", "", "")))
        options: dict = {"labels": {"app": f"a{cpu}-{memory}"}}
        if arch:
            options["node_selector"] = {wk.ARCH: arch}
        pods.append(pod(f"p{index:03d}", f"{cpu}m", f"{memory}Mi", **options))
    pools = (node_pool(requirements=[req(wk.ARCH, "In", "amd64", "arm64")]),)
    daemonsets = (daemonset("logs", "100m", "128Mi"),) if draw(st.booleans()) else ()
    return SchedulingProblem(pending=tuple(pods), daemonsets=daemonsets, node_pools=pools, instance_types={"default": TYPES})


@SETTINGS
@given(problems())
def test_every_pod_lands_on_a_claim_that_fits_it_and_allows_its_architecture(problem: SchedulingProblem) -> None:
    plan = solve(problem)
    check_plan(problem, plan)
    assert not plan.unschedulable
    arch_of = {t.name: t.requirements.get_or_exists(wk.ARCH) for t in TYPES}
    for claim in plan.node_claims:
        for key in claim.pods:
            wanted = next(p for p in problem.pending if p.key == key).node_selector.get_or_exists(wk.ARCH)
            if not wanted.complement:
                assert all(arch_of[name].values <= wanted.values for name in claim.instance_types), (key, claim.instance_types)


@SETTINGS
@given(problems())
def test_the_plan_never_costs_more_than_first_fit_decreasing(problem: SchedulingProblem) -> None:
    assert solve(problem).cost_per_hour <= ffd_cost(problem) + 1e-9


@st.composite
def many_shapes(draw: st.DrawFn) -> SchedulingProblem:
    """Over 100 distinct shapes in one class: the packer's many-groups path (fewer
    candidate types per bin, no blended greedy)."""
    shapes = draw(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 120)), min_size=110, max_size=160, unique=True))
    extra = draw(st.lists(st.sampled_from(shapes), max_size=80))
    pods = [pod(f"p{index:03d}", f"{cpu * 50}m", f"{memory * 64}Mi", labels={"app": f"a{cpu}-{memory}"}) for index, (cpu, memory) in enumerate(shapes + extra)]
    pools = (node_pool(requirements=[req(wk.ARCH, "In", "amd64", "arm64")]),)
    return SchedulingProblem(pending=tuple(pods), node_pools=pools, instance_types={"default": TYPES})


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(many_shapes())
def test_many_shapes_plans_are_feasible_and_never_above_first_fit_decreasing(problem: SchedulingProblem) -> None:
    plan = solve(problem)
    check_plan(problem, plan)
    assert not plan.unschedulable
    assert plan.cost_per_hour <= ffd_cost(problem) + 1e-9
