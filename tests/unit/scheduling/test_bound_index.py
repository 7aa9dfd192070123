"""A shared :class:`BoundIndex` changes how fast a simulation is built, never what it plans.

Each example is a small cluster (nodes across zones, bound pods of a few workloads, some
with required anti-affinity or host ports, DaemonSet pods, some terminal or deleting) and a
sequence of simulations, each excluding other nodes: planned with the whole cluster's bound
pods and one index shared by every simulation, each plan must equal the plan of the same
problem built as before (the excluded nodes' pods filtered out, no index).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.model import Pod
from joiner.domain.scheduling import SchedulingProblem, solve
from joiner.domain.scheduling.bound import BoundIndex

from .builders import ZONES, daemonset, instance_type, node, node_pool, pod, spread, term

TYPES = (
    instance_type("c5.large", 2, 4, 0.085),
    instance_type("m5.large", 2, 8, 0.096),
    instance_type("m5.xlarge", 4, 16, 0.192),
    instance_type("m5.2xlarge", 8, 32, 0.384),
)
APPS = ("web", "api", "db", "batch")
KINDS = ("plain", "zone-spread", "host-spread", "host-anti", "zone-affinity", "ports")


def _constraints(kind: str, app: str) -> dict[str, object]:
    if kind == "zone-spread":
        return {"spread": [spread(wk.ZONE, app=app)]}
    if kind == "host-spread":
        return {"spread": [spread(wk.HOSTNAME, max_skew=2, app=app)]}
    if kind == "host-anti":
        return {"anti_affinity": [term(wk.HOSTNAME, app=app)]}
    if kind == "zone-affinity":
        return {"affinity": [term(wk.ZONE, app=app)]}
    if kind == "ports":
        return {"host_ports": [8080]}
    return {}


@st.composite
def clusters(draw: st.DrawFn) -> tuple[SchedulingProblem, list[frozenset[str]], list[tuple[Pod, ...]]]:
    """A problem with every node and bound pod (no pending pods), the exclusions of a few
    simulations, and for each the pods that move."""
    count = draw(st.integers(2, 6))
    nodes = tuple(node(f"n{i}", cpu=8, memory_gib=32, zone=ZONES[draw(st.integers(0, 2))], pool="general") for i in range(count))
    bound: list[Pod] = []
    for index in range(draw(st.integers(0, 24))):
        app = draw(st.sampled_from(APPS))
        kind = draw(st.sampled_from(KINDS))
        where = nodes[draw(st.integers(0, count - 1))].name
        made = pod(f"b{index:02d}", draw(st.sampled_from(("250m", "500m", "1"))), "1Gi", labels={"app": app}, node_name=where, **_constraints(kind, app))  # type: ignore[arg-type]
        state = draw(st.sampled_from(("running", "running", "running", "succeeded", "deleting")))
        if state == "succeeded":
            made = replace(made, phase="Succeeded")
        elif state == "deleting":
            made = replace(made, deleting=True)
        bound.append(made)
    for n in nodes:
        if draw(st.booleans()):
            bound.append(pod(f"logs-{n.name}", "200m", "256Mi", namespace="kube-system", node_name=n.name, owner=("DaemonSet", "logs")))
    problem = SchedulingProblem(
        pending=(),
        nodes=nodes,
        bound_pods=tuple(bound),
        daemonsets=(daemonset("logs", "100m", "128Mi"),),
        # as a snapshot gives them: every DaemonSet pod, wherever it runs
        daemon_pods=tuple(p for p in bound if p.owner_kind == "DaemonSet"),
        node_pools=(node_pool("general"),),
        instance_types={"general": TYPES},
    )
    exclusions = []
    moving = []
    for _ in range(draw(st.integers(1, 4))):
        excluded = frozenset(n.name for n in nodes if draw(st.integers(0, 2)) == 0)
        exclusions.append(excluded)
        moved = tuple(p for p in bound if p.node_name in excluded and not p.is_terminal and not p.deleting and p.owner_kind != "DaemonSet")
        pending = tuple(replace(p, node_name=None, phase="Pending") for p in moved)
        moving.append(pending)
    return problem, exclusions, moving


@given(clusters())
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_simulations_sharing_an_index_plan_as_simulations_that_filter_the_bound_pods(case) -> None:  # type: ignore[no-untyped-def]
    problem, exclusions, moving = case
    index = BoundIndex(problem.bound_pods)
    for excluded, pending in zip(exclusions, moving, strict=True):
        nodes = tuple(n for n in problem.nodes if n.name not in excluded)
        filtered = replace(problem, pending=pending, nodes=nodes, bound_pods=tuple(p for p in problem.bound_pods if p.node_name not in excluded))
        shared = replace(problem, pending=pending, nodes=nodes, bound_index=index)
        assert solve(shared) == solve(filtered)


def test_an_index_of_other_pods_is_ignored() -> None:
    nodes = (node("n0", cpu=4, memory_gib=16, pool="general"),)
    full = tuple(pod(f"b{i}", "1", "1Gi", labels={"app": "web"}, node_name="n0") for i in range(3))
    problem = SchedulingProblem(
        pending=(pod("new", "2", "1Gi"),), nodes=nodes, bound_pods=full[:1], node_pools=(node_pool("general"),), instance_types={"general": TYPES}
    )
    stale = BoundIndex(full)
    assert replace(problem, bound_index=stale).shared_index() is None
    # the plan counts the one pod the problem holds: the new pod fits beside it
    assert solve(replace(problem, bound_index=stale)) == solve(problem)
    assert solve(problem).existing_nodes and not solve(problem).node_claims


def test_an_index_counts_a_nodes_pods_once_however_many_simulations_read_it() -> None:
    pods = (
        pod("a", "1", "1Gi", labels={"app": "web"}, node_name="n0", host_ports=[80]),
        pod("b", "500m", "1Gi", labels={"app": "web"}, node_name="n0"),
        replace(pod("c", "2", "1Gi", labels={"app": "web"}, node_name="n0"), phase="Succeeded"),
        pod("d", "1", "1Gi", labels={"app": "api"}, node_name="n1"),
    )
    index = BoundIndex(pods)
    first = index.usage("n0")
    assert index.usage("n0") is first
    assert first.used.get("cpu") == 1500 and [p.port for p in first.ports] == [80]
    groups = {(g.namespace, dict(g.labels)["app"]): g.per_node for g in index.label_groups()}
    assert groups == {("default", "web"): (("n0", 2),), ("default", "api"): (("n1", 1),)}
