"""Volume topology (issue 12 item 9) and capacity reservations (item 12) end to end: the scanner reads PersistentVolumeClaims,
PersistentVolumes, StorageClasses and CSINodes over HTTP from the Kubernetes emulator and
launches where the pod's volume is; claims on moto."""

from __future__ import annotations

from typing import Any

import pytest

from tests.events.world import World

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


def pending_pod_with_claim(name: str, claim: str) -> dict[str, Any]:
    """A pending, Unschedulable pod of one CPU mounting the persistent volume claim ``claim``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }


def test_a_statefulset_pod_on_a_zonal_volume_gets_its_node_in_the_volume_zone(world: World) -> None:
    """Issue 12 item 9 end to end: the scanner lists PVCs, PVs, StorageClasses and CSINodes
    over HTTP from the emulator and launches in the volume's zone (us-east-1b), not the
    cheapest or first one."""
    from joiner.services.provisioning import run_scanner

    world.emulator.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "gp3"},
            "provisioner": "ebs.csi.aws.com",
            "volumeBindingMode": "WaitForFirstConsumer",
        }
    )
    world.emulator.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "pv-db-0"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "gp3",
                "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-0123"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": ["us-east-1b"]}]}]
                    }
                },
            },
        }
    )
    world.emulator.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data-db-0", "namespace": "default", "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
            "spec": {"storageClassName": "gp3", "volumeName": "pv-db-0", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
        }
    )
    world.emulator.apply(pending_pod_with_claim("db-0", "data-db-0"))
    assert run_scanner(world.runtime, "economy").rounds == 1
    (claim,) = [c for c in world.runtime.state.open_claims() if "default/db-0" in c.pods]
    assert claim.zone == "us-east-1b"
    assert world.emulator.requests("GET", r"/api/v1/persistentvolumeclaims")


def test_a_pod_launches_into_the_capacity_reservation_its_node_class_selects(world: World) -> None:
    """Issue 12 item 12 end to end: the scanner resolves the NodeClass's reservations
    (DescribeCapacityReservations, answered by tests/support/aws.CapacityReservationApi since
    moto lacks it, and evaluated by the IAM guard under the scanner's role), launches on moto
    with a launch template targeting the reservation, and records a ``reserved`` claim."""
    from joiner.services.provisioning import run_scanner
    from tests.support.aws import CapacityReservationApi, FakeReservation

    node_class = world.emulator.get("NodeClass", "default")
    node_class["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"team": "ml"}}]
    world.emulator.apply(node_class)
    world.node_pool(capacity_types=("reserved", "on-demand"))
    api = CapacityReservationApi([FakeReservation("cr-0aaa1111", "c5.large", "us-east-1c", 3, tags=(("team", "ml"),))]).register(world.ec2)
    world.emulator.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "train-0", "namespace": "default", "uid": "uid-train-0"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }
    )
    try:
        assert run_scanner(world.runtime, "economy").rounds == 1
    finally:
        world.ec2.meta.events.unregister("before-call.ec2.DescribeCapacityReservations", api)
    (claim,) = [c for c in world.runtime.state.open_claims() if "default/train-0" in c.pods]
    assert (claim.capacity_type, claim.instance_type, claim.zone) == ("reserved", "c5.large", "us-east-1c")
    assert api.requests, "the reservations were never described"
    status = world.emulator.get("NodeClass", "default")["status"]
    assert [(r["id"], r["instanceType"], r["availabilityZone"]) for r in status["capacityReservations"]] == [("cr-0aaa1111", "c5.large", "us-east-1c")]
    templates = world.ec2.describe_launch_templates()["LaunchTemplates"]
    data = [
        world.ec2.describe_launch_template_versions(LaunchTemplateId=t["LaunchTemplateId"])["LaunchTemplateVersions"][0]["LaunchTemplateData"]
        for t in templates
    ]
    targeted = [d for d in data if "CapacityReservationSpecification" in d]
    assert [d["CapacityReservationSpecification"]["CapacityReservationTarget"]["CapacityReservationId"] for d in targeted] == ["cr-0aaa1111"]


def test_without_access_to_volume_objects_pods_are_still_planned_and_the_gap_counted(world: World) -> None:
    """A deployment whose RBAC predates volume topology: listing PVCs answers 403. The round
    does not fail: it plans the pod as before volume topology, logs why and counts
    ``VolumeTopologyUnavailable``; consolidation would move no pod with a volume (domain test)."""
    from joiner.services.provisioning import run_scanner

    world.emulator.fail_next("GET", r"/api/v1/persistentvolumeclaims", status=403, times=10)
    world.emulator.apply(pending_pod_with_claim("db-0", "data-db-0"))
    assert run_scanner(world.runtime, "economy").rounds == 1
    assert [c for c in world.runtime.state.open_claims() if "default/db-0" in c.pods]
    assert world.metrics.total("VolumeTopologyUnavailable") == 1
    world.emulator.clear_faults()
