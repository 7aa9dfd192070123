"""Replacement launches of interruption rounds: one launch per pod set (issue 10, defect 1) and
the NodePool limit held against scanner rounds running at the same time (defect 3)."""

from __future__ import annotations

import pytest

from joiner.domain import labels as wk
from tests.events.world import World

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

#: vCPU of the instance types the test NodePool allows
VCPU = {"c5.large": 2, "c5.xlarge": 4, "c5.2xlarge": 8, "m5.large": 2, "m5.xlarge": 4}


def test_a_burst_of_spot_warnings_launches_capacity_once_per_pod_set(world: World) -> None:
    """Three spot warnings for three nodes with three 500m pods each, in one batch: every pod
    is promised to exactly one replacement claim, and no more capacity is bought than one
    plan for the nine pods needs (before the fix: three launches, 8 vCPU for 4.5)."""
    instances = {}
    for index in range(3):
        node = f"n{index}"
        instances[node] = world.launch_node(node, zone=("us-east-1a", "us-east-1b", "us-east-1c")[index])
        for pod in range(3):
            world.add_pod(f"{node}-web-{pod}", node, app=f"web-{index}", cpu="500m")
    for instance in instances.values():
        world.publish("spot_interruption.json", instance)
    response, messages = world.deliver_interruptions()
    assert len(messages) == 3 and response == {"batchItemFailures": []}

    burst_claims = {f"default-{node}" for node in instances}
    replacements = [c for c in world.runtime.state.open_claims() if c.claim_id not in burst_claims]
    assert replacements and all(c.state == "launched" for c in replacements)
    promised: dict[str, list[str]] = {}
    for claim in replacements:
        for key in claim.pods:
            promised.setdefault(key, []).append(claim.claim_id)
    assert {p: c for p, c in promised.items() if len(c) > 1} == {}  # no pod promised to two claims
    assert set(promised) == {f"default/n{i}-web-{p}" for i in range(3) for p in range(3)}
    launched = [i for i in world.fleet_instances() if i["tags"].get(wk.NODECLAIM) not in burst_claims]
    assert len(launched) == len(replacements)  # one instance per claim
    # 9 x 500m = 4.5 vCPU of requests: one plan never needs more than 4 + 2 vCPU for them
    assert sum(VCPU[i["type"]] for i in launched) <= 6, [(i["type"], i["tags"][wk.NODECLAIM]) for i in launched]


def test_a_replacement_never_takes_a_nodepool_past_its_limit(world: World) -> None:
    """Issue 10, defect 3: replacement rounds take no lease, so they must pass the same
    reservation as scanner rounds, against a figure that still holds the interrupted node
    (it runs until the reclaim). Two c5.xlarge under an 8-CPU limit: a replacement would make
    12 CPU run at once; it is refused, and the drain goes ahead (the scanner provisions once
    the node is gone). Before the fix the replacement launched."""
    world.node_pool(limits={"cpu": "8"})
    instances = {}
    for node in ("n0", "n1"):
        instances[node] = world.launch_node(node)
        world.add_pod(f"{node}-web", node, app=f"web-{node}", cpu="3")
    world.publish("spot_interruption.json", instances["n0"])
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}

    running = [i for i in world.fleet_instances() if i["state"] in ("pending", "running")]
    assert sum(VCPU[i["type"]] for i in running) <= 8, [(i["type"], i["tags"][wk.NODECLAIM]) for i in running]
    stored = world.runtime.state.get_item("TERMINATION", "n0")
    assert stored is not None and not stored.get("replacementClaims")
    assert world.evictions() == ["default/n0-web"]  # the drain goes ahead
