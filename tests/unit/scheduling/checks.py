"""Independent checks that a plan respects the problem (written from the rules, not from
the solver's code)."""

from __future__ import annotations

from collections import Counter

from joiner.domain import labels as wk
from joiner.domain.model import Plan, Pod
from joiner.domain.requirements import Requirements
from joiner.domain.resources import Resources
from joiner.domain.scheduling import SchedulingProblem


def pod_requirement_options(pod: Pod) -> list[Requirements]:
    if pod.required_node_affinity:
        return [pod.node_selector.intersect(term) for term in pod.required_node_affinity]
    return [pod.node_selector]


def tolerates(pod: Pod, taints) -> bool:  # type: ignore[no-untyped-def]
    return all(any(t.tolerates(taint) for t in pod.tolerations) for taint in taints if taint.effect in ("NoSchedule", "NoExecute"))


def daemon_overhead(problem: SchedulingProblem, pool_name: str, type_name: str) -> Resources:
    pool = next(p for p in problem.node_pools if p.name == pool_name)
    it = next(t for t in problem.instance_types[pool_name] if t.name == type_name)
    total = Resources()
    for ds in problem.daemonsets:
        if any(not any(t.tolerates(taint) for t in ds.pod.tolerations) for taint in pool.taints):
            continue
        options = pod_requirement_options(ds.pod)
        if not any(
            pool.template_requirements().compatible(o) is None
            and not it.requirements.conflicts(Requirements(r for k, r in o.items() if k not in (wk.ZONE, wk.CAPACITY_TYPE)))
            for o in options
        ):
            continue
        total = total + ds.pod.requests
    return total


def check_plan(problem: SchedulingProblem, plan: Plan) -> None:
    pods = {p.key: p for p in problem.pending}
    seen: Counter[str] = Counter()
    for claim in plan.node_claims:
        seen.update(claim.pods)
    for existing in plan.existing_nodes:
        seen.update(existing.pods)
    seen.update(u.pod for u in plan.unschedulable)
    assert set(seen) == set(pods), "every pending pod is placed or reported exactly once"
    assert all(n == 1 for n in seen.values()), [k for k, n in seen.items() if n > 1]
    pools = {p.name: p for p in problem.node_pools}
    unavailable = problem.unavailable
    usage: dict[str, Resources] = {}
    for claim in plan.node_claims:
        pool = pools[claim.node_pool]
        types = {t.name: t for t in problem.instance_types[claim.node_pool]}
        assert claim.instance_types, "a claim lists at least one instance type"
        requests = Resources()
        for key in claim.pods:
            requests = requests + pods[key].requests
        prices = []
        for name in claim.instance_types:
            it = types[name]
            need = requests + daemon_overhead(problem, claim.node_pool, name)
            assert need.fits_in(it.allocatable), f"{name} cannot hold {claim.pods}: {need} > {it.allocatable}"
            type_reqs = Requirements(r for k, r in it.requirements.items() if k not in (wk.ZONE, wk.CAPACITY_TYPE))
            assert not claim.requirements.conflicts(type_reqs), (name, claim.requirements)
            offers = [
                o.price
                for o in it.offerings
                if o.available
                and (name, o.zone, o.capacity_type) not in {(u.instance_type, u.zone, u.capacity_type) for u in unavailable}
                and o.zone in claim.zones
                and o.capacity_type in claim.capacity_types
                and claim.requirements.get_or_exists(wk.ZONE).has(o.zone)
                and claim.requirements.get_or_exists(wk.CAPACITY_TYPE).has(o.capacity_type)
            ]
            assert offers, f"{name} has an available offering the claim allows"
            prices.append(min(offers))
        assert abs(claim.price - prices[0]) < 1e-9
        assert [(p, n) for p, n in zip(prices, claim.instance_types)] == sorted(zip(prices, claim.instance_types)), "cheapest first"
        assert claim.requirements.get_or_exists(wk.NODEPOOL).has(pool.name)
        for key, value in pool.labels.items():
            assert claim.requirements.get_or_exists(key).has(value)
        ports: Counter[object] = Counter()
        for key in claim.pods:
            pod = pods[key]
            assert tolerates(pod, pool.taints), (key, pool.taints)
            assert any(claim.requirements.compatible(option) is None for option in pod_requirement_options(pod)), (key, claim.requirements)
            ports.update(pod.host_ports)
        assert all(n == 1 for n in ports.values()), "host ports are unique per node"
        if pool.limits:
            largest = {r: max(types[n].capacity.get(r, 0) if r != "nodes" else 1000 for n in claim.instance_types) for r in pool.limits}
            usage[pool.name] = usage.get(pool.name, Resources()) + Resources(largest)
    for name, used in usage.items():
        pool = pools[name]
        base = problem.pool_usage.get(name) if problem.pool_usage else None
        if base is None:
            base = Resources()
            for node in problem.nodes:
                if node.labels.get(wk.NODEPOOL) == name:
                    base = base + node.capacity + Resources({"nodes": 1000})
            for flight in problem.in_flight:
                if flight.node_pool == name:
                    base = base + flight.capacity + Resources({"nodes": 1000})
        total = base + used
        for resource, limit in pool.limits.items():  # type: ignore[union-attr]
            if used.get(resource, 0):
                assert total.get(resource, 0) <= limit, f"limit {resource} of {name}: {total.get(resource, 0)} > {limit}"
    nodes = {n.name: n for n in problem.nodes}
    for placement in plan.existing_nodes:
        node = nodes.get(placement.name)
        if node is None:
            continue  # an in-flight claim
        used = Resources()
        for pod in problem.bound_pods:
            if pod.node_name == node.name and not pod.is_terminal:
                used = used + pod.requests
        for key in placement.pods:
            pod = pods[key]
            used = used + pod.requests
            assert tolerates(pod, node.taints)
            labels = wk.normalize_labels(dict(node.labels))
            assert any(option.matches_labels(labels) for option in pod_requirement_options(pod))
        assert used.fits_in(node.allocatable), (node.name, used)
