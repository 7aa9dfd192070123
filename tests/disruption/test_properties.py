"""Properties every decision keeps, on random small clusters."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.disruption import CONSOLIDATION, EMPTINESS, decide
from joiner.domain.scheduling import SchedulingProblem, solve
from tests.disruption.builders import CATALOG, T0, disruption_input, managed_node, pool, running_pod, snapshot

TYPES = ("c5.large", "c5.xlarge", "c5.2xlarge", "m5.large")
PRICE = {"c5.large": 0.085, "c5.xlarge": 0.17, "c5.2xlarge": 0.34, "m5.large": 0.096}
#: What every node pays besides its instance: the default 20Gi gp3 root volume.
ROOT_VOLUME = 20 * 0.08 / 730

clusters = st.lists(
    st.tuples(st.sampled_from(TYPES), st.sampled_from(("us-east-1a", "us-east-1b")), st.lists(st.sampled_from((0, 250, 500, 1000, 1500)), max_size=4)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters, budget=st.sampled_from(("0%", "30%", "50%", "100%", "1")))
def test_commands_never_strand_a_pod_never_exceed_budgets_and_always_save(cluster, budget):
    objects = [pool(budgets=[{"nodes": budget}])]
    for i, (instance_type, zone, pods) in enumerate(cluster):
        objects.append(managed_node(f"n{i}", instance_type, zone=zone))
        objects += [running_pod(f"p{i}-{j}", f"n{i}", cpu=f"{cpu}m", memory="256Mi") for j, cpu in enumerate(pods) if cpu]
    snap = snapshot(*objects)
    inp = disruption_input(snap)
    decision = decide(inp)

    taken = [n for c in decision.commands for n in c.nodes]
    assert len(taken) == len(set(taken))
    allowed = math.ceil(len(cluster) * int(budget[:-1]) / 100) if budget.endswith("%") else int(budget)
    assert len(taken) <= allowed
    types = {n.name: n.labels[wk.INSTANCE_TYPE] for n in snap.nodes}
    for command in decision.commands:
        assert command.method in (EMPTINESS, CONSOLIDATION)  # nothing expired or drifted here
        current = sum(PRICE[types[n]] + ROOT_VOLUME for n in command.nodes)
        if command.method == EMPTINESS:
            assert not [p for p in snap.pods if p.node_name in command.nodes]
            continue
        assert len(command.replacements) <= 1
        if command.replacements:
            replacement = command.replacements[0]
            assert not set(replacement.instance_types) & {types[n] for n in command.nodes}
            assert replacement.price <= current * 0.9 + 1e-9
        # independent check: the pods fit on what is left plus at most the one replacement
        moved = [replace(p, node_name=None, phase="Pending") for p in snap.pods if p.node_name in command.nodes]
        instance_types = dict(inp.instance_types)
        if command.replacements:
            allowed_types = set(command.replacements[0].instance_types)
            instance_types = {k: tuple(t for t in v if t.name in allowed_types) for k, v in instance_types.items()}
        plan = solve(
            SchedulingProblem(
                pending=tuple(moved),
                nodes=tuple(n for n in snap.nodes if n.name not in command.nodes),
                bound_pods=tuple(p for p in snap.bound_pods if p.node_name not in command.nodes),
                node_pools=snap.node_pools,
                instance_types=instance_types if command.replacements else dict.fromkeys(instance_types, ()),
            )
        )
        assert plan.unschedulable == ()
        assert len(plan.node_claims) == len(command.replacements)


def test_catalog_prices_match_the_property_table():
    by_name = {t.name: t for t in CATALOG.instance_types()}
    for name, price in PRICE.items():
        assert min(o.price for o in by_name[name].offerings if o.capacity_type == "on-demand") == price
    assert T0.tzinfo is not None
