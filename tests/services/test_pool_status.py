"""joiner.services.pool_status against the Kubernetes emulator over HTTP: what a NodePool's
status shows after a round (``kubectl get nodepool``), and that an unchanged status is not
written again. EC2, state and the clock are the in-memory fakes."""

from __future__ import annotations

from joiner.adapters.kubernetes import KubernetesClient
from joiner.services.provisioning import provision
from tests.support.fakes import fake_world, node_class_json, node_pool_json
from testworld.kube_emulator import KubeEmulator

STATUS_WRITES = "/nodepools/default/status$"


def test_an_emptied_pool_shows_no_cpu_or_memory_and_is_not_rewritten(kube_emulator: KubeEmulator, kube_client: KubernetesClient) -> None:
    """The pool's last Nodes are gone: the keys that went to zero are removed from its status
    (a merge patch leaves a key it does not name as it was), and the next round, with nothing
    changed, writes nothing."""
    world = fake_world()
    kube_emulator.apply(node_class_json(discovery=world.cluster))
    kube_emulator.apply(node_pool_json())
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2025-01-06T08:00:00Z"}
    # what a round wrote while the pool had its Nodes
    kube_client.patch_node_pool_status("default", {"resources": {"cpu": "24", "memory": "45465Mi", "nodes": "2"}, "nodes": 2, "conditions": [ready]})
    runtime = world.runtime(kube_port=kube_client)

    provision(runtime, world.clock.now())
    status = kube_emulator.get("NodePool", "default")["status"]
    assert status["resources"] == {"nodes": "0"} and status["nodes"] == 0
    assert status["conditions"] == [ready]  # unchanged: its transition time kept
    writes = len(kube_emulator.requests("PATCH", STATUS_WRITES))

    world.clock.advance(30)
    provision(runtime, world.clock.now())
    assert len(kube_emulator.requests("PATCH", STATUS_WRITES)) == writes
