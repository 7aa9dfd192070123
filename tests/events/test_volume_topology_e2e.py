"""Volume topology end to end (issue 12 item 9): the scanner reads PersistentVolumeClaims,
PersistentVolumes, StorageClasses and CSINodes over HTTP from the Kubernetes emulator and
launches where the pod's volume is; claims on moto."""

from __future__ import annotations

import pytest

from tests.events.world import World

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


def test_a_statefulset_pod_on_a_zonal_volume_gets_its_node_in_the_volume_zone(world: World) -> None:
    """Issue 12 item 9 end to end: the scanner lists PVCs, PVs, StorageClasses and CSINodes
    over HTTP from the emulator and launches in the volume's zone (us-east-1b), not the
    cheapest or first one."""
    from joiner.services.provisioning import run_scanner

    world.emulator.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "gp3"},
                          "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"})
    world.emulator.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-db-0"}, "spec": {
        "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
        "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1b"]}]}]}}}})
    world.emulator.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data-db-0", "namespace": "default"},
                          "spec": {"storageClassName": "gp3", "volumeName": "pv-db-0", "accessModes": ["ReadWriteOnce"],
                                   "resources": {"requests": {"storage": "10Gi"}}}})
    world.emulator.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0", "namespace": "default", "uid": "uid-db-0"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    })
    assert run_scanner(world.runtime, "economy").rounds == 1
    (claim,) = [c for c in world.runtime.state.open_claims() if "default/db-0" in c.pods]
    assert claim.zone == "us-east-1b"
    assert world.emulator.requests("GET", r"/api/v1/persistentvolumeclaims")
