"""Volume topology and attach limits (issue 12 item 9): a pod's persistent volumes decide
its zone, make it wait, or keep it off a node whose CSI driver has no attachment left.
The rules are Karpenter's (volumetopology.go, volumeusage.go)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.planning import plan_snapshot
from joiner.domain.snapshot import SnapshotError, parse_objects
from tests.support.fakes import node_class_json, node_json, node_pool_json, pod_json, small_catalog

EBS = "ebs.csi.aws.com"


def claim_pod(name: str, *claims: str, node_name: str | None = None, ephemeral: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    for volume, storage_class in (ephemeral or {}).items():
        volumes.append({"name": volume, "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": storage_class}}}})
    return pod_json(name, node_name=node_name, extra_spec={"volumes": volumes}, **extra)


def pvc(
    name: str, *, storage_class: str | None = "gp3", volume: str | None = None, bind_completed: bool = True, phase: str | None = None, deleting: bool = False
) -> dict[str, Any]:
    """A claim; one naming a volume carries the PV controller's bind-completed annotation (as
    every bound claim does) unless ``bind_completed`` is False."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"]}
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
        if bind_completed:
            metadata["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def pv(name: str, zone: str, *, key: str = wk.ZONE) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "csi": {"driver": EBS, "volumeHandle": f"vol-{name}"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [zone]}]}]}},
        },
    }


def storage_class(name: str = "gp3", *, mode: str = "WaitForFirstConsumer", zones: tuple[str, ...] = (), default: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name}, "provisioner": EBS, "volumeBindingMode": mode}
    if default:
        obj["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if zones:
        obj["allowedTopologies"] = [{"matchLabelExpressions": [{"key": wk.ZONE, "values": list(zones)}]}]
    return obj


def plan(*objects: dict[str, Any]) -> Any:
    snapshot = parse_objects([node_class_json(), node_pool_json(), *objects])
    return plan_snapshot(snapshot, small_catalog())


def zones_of(result: Any) -> dict[str, tuple[str, ...]]:
    return {pod: claim.zones for claim in result.node_claims for pod in claim.pods}


@pytest.mark.parametrize("key", [wk.ZONE, "topology.ebs.csi.aws.com/zone"])
def test_a_pod_whose_claim_is_bound_to_a_zonal_volume_gets_a_node_in_that_zone(key: str) -> None:
    result = plan(claim_pod("db-0", "data-db-0"), pvc("data-db-0", volume="pv-1"), pv("pv-1", "us-east-1b", key=key), storage_class())
    assert not result.unschedulable
    assert zones_of(result) == {"default/db-0": ("us-east-1b",)}


def test_wait_for_first_consumer_allowed_topologies_restrict_the_zone() -> None:
    result = plan(claim_pod("db-0", "data-db-0"), pvc("data-db-0"), storage_class(zones=("us-east-1c",)))
    assert not result.unschedulable and zones_of(result) == {"default/db-0": ("us-east-1c",)}
    free = plan(claim_pod("db-0", "data-db-0"), pvc("data-db-0"), storage_class())
    assert not free.unschedulable and len(zones_of(free)["default/db-0"]) > 1  # no restriction: any zone


def test_a_generic_ephemeral_volume_follows_its_template_class() -> None:
    result = plan(claim_pod("cache-0", ephemeral={"scratch": "zonal"}), storage_class("zonal", zones=("us-east-1a",)))
    assert not result.unschedulable and zones_of(result) == {"default/cache-0": ("us-east-1a",)}


@pytest.mark.parametrize(
    ("objects", "reason"),
    [
        ((), "persistentvolumeclaim default/data-db-0 not found"),
        ((pvc("data-db-0", storage_class="gp2"), storage_class("gp2", mode="Immediate")), "unbound with Immediate binding"),
        ((pvc("data-db-0", storage_class="missing"),), "storageclass missing does not exist"),
        ((pvc("data-db-0", volume="pv-gone"), storage_class()), "persistentvolume pv-gone of claim default/data-db-0 not found"),
        (
            (pvc("data-db-0", volume="pv-a", bind_completed=False), pv("pv-a", "us-east-1a"), storage_class()),
            "names persistentvolume pv-a but is not bound yet",
        ),
        ((pvc("data-db-0", volume="pv-a", phase="Lost"), storage_class()), "persistentvolumeclaim default/data-db-0 is lost"),
        (
            (pvc("data-db-0", volume="pv-a", deleting=True), pv("pv-a", "us-east-1a"), storage_class()),
            "persistentvolumeclaim default/data-db-0 is being deleted",
        ),
        (
            (
                pvc("data-db-0", volume="pv-a"),
                {**pv("pv-a", "us-east-1a"), "metadata": {"name": "pv-a", "deletionTimestamp": "2026-01-01T00:00:00Z"}},
                storage_class(),
            ),
            "persistentvolume pv-a of claim default/data-db-0 is being deleted",
        ),
    ],
)
def test_pods_whose_volumes_cannot_be_placed_yet_are_reported_not_placed(objects: tuple[dict[str, Any], ...], reason: str) -> None:
    result = plan(claim_pod("db-0", "data-db-0"), *objects)
    assert result.node_claims == ()
    (unschedulable,) = result.unschedulable
    assert unschedulable.pod == "default/db-0" and reason in unschedulable.reason


def test_a_volume_zone_the_node_selector_excludes_is_reported() -> None:
    pod = claim_pod("db-0", "data-db-0", node_selector={wk.ZONE: "us-east-1a"})
    result = plan(pod, pvc("data-db-0", volume="pv-1"), pv("pv-1", "us-east-1b"), storage_class())
    (unschedulable,) = result.unschedulable
    assert "which its node selector excludes" in unschedulable.reason and result.node_claims == ()


def test_the_default_storage_class_serves_claims_without_a_class() -> None:
    result = plan(claim_pod("db-0", "data-db-0"), pvc("data-db-0", storage_class=None), storage_class("standard", zones=("us-east-1b",), default=True))
    assert zones_of(result) == {"default/db-0": ("us-east-1b",)}


def csi_node(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": [{"name": EBS, "nodeID": "i-1", "allocatable": {"count": count}}]},
    }


def test_an_existing_node_takes_no_more_volumes_than_its_csi_driver_allows() -> None:
    """n1 (zone a, room for the pods' CPU) may attach 2 EBS volumes and holds one: of two
    pending pods with a volume in zone a, one goes to n1 and the other needs a new node."""
    common = [
        node_json("n1", instance_id="i-0000000000000001a", cpu="8", memory="32Gi"),
        csi_node("n1", 2),
        claim_pod("old", "data-old", node_name="n1", cpu="100m"),
        pvc("data-old", volume="pv-old"),
        pv("pv-old", "us-east-1a"),
        claim_pod("new-0", "data-0", cpu="100m"),
        pvc("data-0", volume="pv-0"),
        pv("pv-0", "us-east-1a"),
        claim_pod("new-1", "data-1", cpu="100m"),
        pvc("data-1", volume="pv-1"),
        pv("pv-1", "us-east-1a"),
        storage_class(),
    ]
    result = plan(*common)
    assert not result.unschedulable
    on_n1 = [pod for existing in result.existing_nodes for pod in existing.pods if existing.name == "n1"]
    assert len(on_n1) == 1
    assert [claim.zones for claim in result.node_claims] == [("us-east-1a",)]
    roomy = plan(*[o for o in common if o.get("kind") != "CSINode"], csi_node("n1", 3))
    assert sorted(pod for existing in roomy.existing_nodes for pod in existing.pods) == ["default/new-0", "default/new-1"] and not roomy.node_claims


def test_malformed_volume_objects_get_one_clear_error() -> None:
    with pytest.raises(SnapshotError, match=r"StorageClass gp3: volumeBindingMode"):
        parse_objects([storage_class(mode="Sometimes")])
    with pytest.raises(SnapshotError, match=r"CSINode n1: spec.drivers\[0\].allocatable.count"):
        parse_objects([csi_node("n1", -1)])
    with pytest.raises(SnapshotError, match=r"Pod default/db-0: spec.volumes\[0\].persistentVolumeClaim.claimName"):
        parse_objects([pod_json("db-0", extra_spec={"volumes": [{"name": "v", "persistentVolumeClaim": {}}]})])


def test_consolidation_moves_no_pod_whose_volumes_are_unknown() -> None:
    """With the volume objects unreadable, a simulation that would move a pod with a volume
    reports it unschedulable (its zone is unknown) instead of placing it anywhere."""
    import dataclasses
    from datetime import UTC, datetime

    from joiner.domain.disruption import DisruptionInput, _Pass
    from joiner.domain.planning import instance_types_by_pool

    snapshot = parse_objects([node_class_json(), node_pool_json(), claim_pod("db-0", "data-db-0"), pod_json("web-0")])
    snapshot = dataclasses.replace(snapshot, volumes_known=False)
    types = instance_types_by_pool(snapshot.node_pools, snapshot.node_classes, small_catalog())
    work = _Pass(DisruptionInput(snapshot=snapshot, instance_types=types, now=datetime(2025, 1, 1, tzinfo=UTC)))
    plan = work._solve(tuple(p for p in snapshot.pods), frozenset())
    assert [u.pod for u in plan.unschedulable] == ["default/db-0"] and "could not be read" in plan.unschedulable[0].reason
    assert [p for c in plan.node_claims for p in c.pods] == ["default/web-0"]


def test_a_volume_zone_does_not_narrow_the_domains_a_zone_spread_counts() -> None:
    """kube-scheduler's spread counts every zone the pod's own node affinity allows; the
    volume's zone is a separate filter (Karpenter keeps it out of the pod's affinity for this
    reason). Zone a holds 2 matching pods, b 1, c none: a pod whose volume is in zone a would
    make the skew 3, so it is unschedulable, not given a node in a."""
    spread = {
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": wk.ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "db"}}}
        ]
    }
    running = [
        node_json("na", instance_id="i-0000000000000000a", zone="us-east-1a"),
        node_json("nb", instance_id="i-0000000000000000b", zone="us-east-1b"),
        node_json("nc", instance_id="i-0000000000000000c", zone="us-east-1c"),
        pod_json("r-0", node_name="na", labels={"app": "db"}, cpu="10m"),
        pod_json("r-1", node_name="na", labels={"app": "db"}, cpu="10m"),
        pod_json("r-2", node_name="nb", labels={"app": "db"}, cpu="10m"),
    ]
    pending = pod_json(
        "db-0", labels={"app": "db"}, cpu="1500m", extra_spec={"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}], **spread}
    )
    result = plan(*running, pending, pvc("data", volume="pv-a"), pv("pv-a", "us-east-1a"), storage_class())
    assert [u.pod for u in result.unschedulable] == ["default/db-0"] and not result.node_claims
    free = plan(*running, pending, pvc("data", volume="pv-c"), pv("pv-c", "us-east-1c"), storage_class())
    assert [(e.name, e.pods) for e in free.existing_nodes] == [("nc", ("default/db-0",))] and not free.unschedulable


def test_a_local_volume_hostname_term_does_not_follow_the_pod() -> None:
    """A ``local`` PV names its node and zone; the node is gone with the pod's old node, so only
    the zone constrains where it goes (Karpenter drops the hostname for local and hostPath)."""
    local = pv("pv-local", "us-east-1c")
    local["spec"]["local"] = {"path": "/mnt/disk"}
    local["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"].append(
        {"key": wk.HOSTNAME, "operator": "In", "values": ["ip-10-0-9-9"]}
    )
    result = plan(claim_pod("db-0", "data-db-0"), pvc("data-db-0", volume="pv-local"), local, storage_class())
    assert not result.unschedulable and zones_of(result) == {"default/db-0": ("us-east-1c",)}


ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


@st.composite
def zonal_clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, str | None], dict[str, int]]:
    """Pods with 0-2 claims each, bound to volumes in random zones (sometimes missing);
    existing nodes in some zones, each with a small CSINode limit."""
    objects: list[dict[str, Any]] = [storage_class()]
    zone_of: dict[str, str | None] = {}
    for index in range(draw(st.integers(1, 10))):
        claims, wanted, missing = [], set(), False
        for v in range(draw(st.integers(0, 2))):
            claim = f"c{index}-{v}"
            claims.append(claim)
            if draw(st.integers(0, 4)) == 0:
                missing = True
                continue
            zone = draw(st.sampled_from(ZONES))
            wanted.add(zone)
            objects += [pvc(claim, volume=f"pv-{claim}"), pv(f"pv-{claim}", zone, key=draw(st.sampled_from([wk.ZONE, "topology.ebs.csi.aws.com/zone"])))]
        objects.append(claim_pod(f"p{index}", *claims, cpu=draw(st.sampled_from(["100m", "500m", "1"])), memory="256Mi"))
        zone_of[f"default/p{index}"] = None if missing or len(wanted) > 1 else (min(wanted) if wanted else "")
    limits = {}
    for zone in ZONES:
        if draw(st.booleans()):
            name = f"n-{zone}"
            limits[name] = draw(st.integers(0, 3))
            objects += [node_json(name, instance_id=f"i-{abs(hash(name)) % 10**17:017d}", zone=zone, cpu="8", memory="32Gi"), csi_node(name, limits[name])]
    return objects, zone_of, limits


@given(zonal_clusters())
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_property_placed_pods_are_in_their_volumes_zone_and_within_attach_limits(
    case: tuple[list[dict[str, Any]], dict[str, str | None], dict[str, int]],
) -> None:
    objects, zone_of, limits = case
    result = plan(*objects)
    reported = {u.pod for u in result.unschedulable}
    assert {pod for pod, zone in zone_of.items() if zone is None} <= reported, "missing claims and conflicting zones are never placed"
    placed = [pod for claim in result.node_claims for pod in claim.pods] + [pod for e in result.existing_nodes for pod in e.pods]
    assert sorted(placed + sorted(reported)) == sorted(zone_of), "every pod placed or reported once"
    for claim in result.node_claims:
        for pod in claim.pods:
            if zone_of[pod]:
                assert claim.zones == (zone_of[pod],), (pod, claim.zones)
    volumes_of = {f"default/{o['metadata']['name']}": len(o["spec"].get("volumes", [])) for o in objects if o["kind"] == "Pod"}
    for existing in result.existing_nodes:
        zone = existing.name.removeprefix("n-")
        assert all(zone_of[pod] in ("", zone) for pod in existing.pods), existing
        assert sum(volumes_of[pod] for pod in existing.pods) <= limits[existing.name], existing
    for claim in result.node_claims:
        assert sum(volumes_of[pod] for pod in claim.pods) <= 26, claim  # the Nitro EBS default


def test_a_new_node_takes_no_more_ebs_volumes_than_the_driver_attaches_to_its_type() -> None:
    """The EBS CSI driver's default on Nitro types: 28 shared slots less the primary ENI and
    the root volume. 30 tiny pods with one EBS volume each need two new nodes, not one."""
    objects: list[dict[str, Any]] = [storage_class()]
    for index in range(30):
        objects += [
            claim_pod(f"db-{index}", f"data-{index}", cpu="10m", memory="16Mi"),
            pvc(f"data-{index}", volume=f"pv-{index}"),
            pv(f"pv-{index}", "us-east-1a"),
        ]
    result = plan(*objects)
    assert not result.unschedulable
    assert sorted(len(claim.pods) for claim in result.node_claims) == [4, 26]
    assert all(claim.zones == ("us-east-1a",) for claim in result.node_claims)


def test_ebs_attach_limit_by_hypervisor_and_instance_store() -> None:
    from joiner.domain.model import InstanceType
    from joiner.domain.requirements import Requirements
    from joiner.domain.resources import Resources
    from joiner.domain.volumes import ebs_attach_limit

    def instance(**labels: str) -> InstanceType:
        return InstanceType("x", Resources(), Resources(), Requirements.from_labels(labels), ())

    assert ebs_attach_limit(instance(**{wk.INSTANCE_HYPERVISOR: "nitro"})) == 26
    assert ebs_attach_limit(instance(**{wk.INSTANCE_HYPERVISOR: "nitro", wk.INSTANCE_LOCAL_NVME: "75"})) == 25
    assert ebs_attach_limit(instance(**{wk.INSTANCE_HYPERVISOR: "xen"})) == 39
    assert ebs_attach_limit(instance()) == 26


# ---------------------------------------------------------------- in-tree plugins, beta class annotation, counting


def gp2(name: str = "gp2", *, default: bool = True, mode: str = "WaitForFirstConsumer") -> dict[str, Any]:
    """EKS's default class: the in-tree EBS provisioner."""
    obj = storage_class(name, mode=mode, default=default)
    obj["provisioner"] = "kubernetes.io/aws-ebs"
    return obj


def in_tree_pv(name: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "awsElasticBlockStore": {"volumeID": f"vol-{name}", "fsType": "ext4"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": wk.ZONE, "operator": "In", "values": [zone]}]}]}},
        },
    }


@pytest.mark.parametrize("bound", [False, True])
def test_in_tree_ebs_claims_count_against_the_ebs_csi_limit(bound: bool) -> None:
    """30 pods with a gp2 claim each (unbound under WaitForFirstConsumer, or bound to in-tree
    awsElasticBlockStore volumes): with CSI migration kube-scheduler counts them against
    ebs.csi.aws.com's 26 attachments on a Nitro node, so they need two nodes, not one."""
    objects: list[dict[str, Any]] = [gp2()]
    for index in range(30):
        objects.append(claim_pod(f"db-{index}", f"data-{index}", cpu="10m", memory="16Mi"))
        if bound:
            objects += [pvc(f"data-{index}", storage_class="gp2", volume=f"pv-{index}"), in_tree_pv(f"pv-{index}", "us-east-1a")]
        else:
            objects.append(pvc(f"data-{index}", storage_class=None))
    result = plan(*objects)
    assert not result.unschedulable
    assert sorted(len(claim.pods) for claim in result.node_claims) == [4, 26]


@pytest.mark.parametrize(
    ("provisioner", "driver"),
    [
        ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
        ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
        ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
        ("kubernetes.io/azure-file", "file.csi.azure.com"),
        ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
        ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
        ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
        ("kubernetes.io/rbd", "rbd.csi.ceph.com"),
        ("ebs.csi.aws.com", "ebs.csi.aws.com"),
        ("example.com/other", "example.com/other"),
    ],
)
def test_in_tree_provisioners_and_sources_translate_as_csi_migration_does(provisioner: str, driver: str) -> None:
    from joiner.domain.volumes import IN_TREE_SOURCES, csi_driver, parse_persistent_volume, parse_storage_class

    obj = storage_class()
    obj["provisioner"] = provisioner
    assert csi_driver(parse_storage_class(obj).provisioner) == driver
    sources = [source for source, name in IN_TREE_SOURCES.items() if name == driver]
    for source in sources:
        volume = parse_persistent_volume({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "p"}, "spec": {source: {"x": "y"}}})
        assert volume.driver == driver


def test_the_beta_storage_class_annotation_wins_over_the_spec() -> None:
    """GetPersistentVolumeClaimClass: volume.beta.kubernetes.io/storage-class first. A claim
    naming an Immediate class only there waits for its volume; it is not planned as if it
    were the default WaitForFirstConsumer class."""
    claim = pvc("data-db-0", storage_class=None)
    claim["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "io2-now"}
    result = plan(
        claim_pod("db-0", "data-db-0"), claim, storage_class("standard", zones=("us-east-1b",), default=True), storage_class("io2-now", mode="Immediate")
    )
    (waiting,) = result.unschedulable
    assert waiting.pod == "default/db-0" and "Immediate binding (storageclass io2-now)" in waiting.reason
    both = pvc("data-db-1", storage_class="io2-now")
    both["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "standard"}
    result = plan(
        claim_pod("db-1", "data-db-1"), both, storage_class("standard", zones=("us-east-1b",), default=True), storage_class("io2-now", mode="Immediate")
    )
    assert zones_of(result) == {"default/db-1": ("us-east-1b",)}


@pytest.mark.parametrize("state", ["deleting", "lost", "not-bind-completed", "missing"])
def test_a_running_pods_volumes_all_count_whatever_state_its_first_claim_is_in(state: str) -> None:
    """n1 may attach 3 EBS volumes; a running pod holds 3 (its first claim terminating, lost,
    not yet bind-completed, or gone): every one counts, so the pending pod needs a new node.
    Counting used to stop at the first such claim, and n1 looked free."""
    first: dict[str, Any]
    if state == "deleting":
        first = pvc("data-a", volume="pv-a", deleting=True)
    elif state == "lost":
        first = pvc("data-a", volume="pv-a", phase="Lost")
    elif state == "not-bind-completed":
        first = pvc("data-a", volume="pv-a", bind_completed=False)
    else:
        first = pvc("data-x", volume="pv-x")  # the pod's first claim, data-a, does not exist
    objects = [
        node_json("n1", instance_id="i-0000000000000001a", cpu="8", memory="32Gi"),
        csi_node("n1", 3),
        claim_pod("old", "data-a", "data-b", "data-c", node_name="n1", cpu="100m"),
        first,
        pvc("data-b", volume="pv-b"),
        pvc("data-c", volume="pv-c"),
        pv("pv-a", "us-east-1a"),
        pv("pv-b", "us-east-1a"),
        pv("pv-c", "us-east-1a"),
        claim_pod("new", "data-new", cpu="100m"),
        pvc("data-new", volume="pv-new"),
        pv("pv-new", "us-east-1a"),
        storage_class(),
    ]
    result = plan(*objects)
    on_n1 = [pod for existing in result.existing_nodes for pod in existing.pods if existing.name == "n1"]
    full = state != "missing"  # a claim that does not exist attaches nothing (kube-scheduler skips it)
    assert on_n1 == ([] if full else ["default/new"])
    assert [claim.pods for claim in result.node_claims] == ([("default/new",)] if full else [])
