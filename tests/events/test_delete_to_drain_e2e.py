"""Delete to drain end to end: claims in DynamoDB and instances on moto over HTTP, Nodes, pods
and NodeClaim mirrors on the Kubernetes emulator (PDB-aware eviction) through the real adapter,
the termination continuing on the work queue."""

from __future__ import annotations

from datetime import timedelta

import pytest

from joiner.domain import labels as wk
from joiner.domain.nodeclaims import TERMINATION_FINALIZER
from joiner.ports import ClaimRecord
from joiner.services.deletion import DELETED_REASON, handle_deletions
from joiner.services.nodeclaims import sync_node_claims
from tests.events.world import T0, World

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


def launched_before_registration(world: World, *, labelled: bool) -> str:
    """An instance whose kubelet registered its Node (Ready, a pod bound) before any scanner round
    recorded it: the claim is ``launched`` with its instance id and no node name. ``labelled``:
    the Node carries the claim's ``joiner.dev/nodeclaim`` label (else only its providerID says
    whose it is)."""
    instance = world.launch_node("n1", claim=False)
    world.runtime.state.put_claim(
        ClaimRecord(
            claim_id="default-n1",
            node_pool="default",
            state="launched",
            created_at=T0 - timedelta(minutes=2),
            instance_id=instance,
            instance_type="c5.xlarge",
            zone="us-east-1a",
            capacity_type="spot",
            price=0.07,
        )
    )
    if not labelled:
        node = world.node("n1")
        assert node is not None
        del node["metadata"]["labels"][wk.NODECLAIM]
        world.emulator.apply(node)
    world.add_pod("app", "n1")
    return instance


@pytest.mark.parametrize("labelled", [True, False], ids=["nodeclaim-label", "provider-id"])
def test_deleting_the_mirror_of_a_claim_whose_node_just_registered_drains_it(world: World, labelled: bool) -> None:
    instance = launched_before_registration(world, labelled=labelled)
    sync_node_claims(world.runtime)
    handle_deletions(world.runtime, world.clock.now())
    assert world.node("n1")["metadata"]["finalizers"] == [TERMINATION_FINALIZER]  # the Node is the claim's
    (mirror,) = world.emulator.list("NodeClaim")
    world.emulator.delete("NodeClaim", mirror["metadata"]["name"])  # kubectl delete nodeclaim: held by the finalizer

    result = handle_deletions(world.runtime, world.clock.now())
    assert result.terminations == ["n1"]
    assert world.instance_state(instance) == "running"  # not terminated under its pods
    assert world.evictions() == []  # replaced first
    assert world.runtime.state.get_item("TERMINATION", "n1")["reason"] == DELETED_REASON
    assert world.ready_replacements() != []
    world.run_work_queue()
    assert world.evictions() == ["default/app"]  # drained through the Eviction API
    assert world.instance_state(instance) in ("shutting-down", "terminated")
    assert world.node("n1") is None
    claim = world.runtime.state.get_claim("default-n1")
    assert claim is not None and claim.state == "closed" and claim.reason == DELETED_REASON
