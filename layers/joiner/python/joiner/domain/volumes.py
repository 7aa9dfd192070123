"""Volume topology and attach limits: where a pod's persistent volumes let it run.

Karpenter's rules (``volumetopology.go``, ``volumeusage.go``), read for the facts:

* a claim **bound** to a PersistentVolume adds the volume's required node affinity to the
  pod (an EBS volume lives in one zone: the pod must get a node there). The terms are ORed;
  like Karpenter, the first is used;
* an **unbound** claim whose StorageClass binds ``WaitForFirstConsumer`` adds the class's
  ``allowedTopologies`` (first term) instead: the volume will be created where the pod lands;
* a claim that does not exist, or that is unbound under ``Immediate`` binding (the volume is
  being provisioned somewhere Joiner cannot know yet), makes the pod wait: it is reported
  with the reason and not placed;
* ``topology.ebs.csi.aws.com/zone`` (older EBS CSI driver versions) means the node's zone;
  the driver labels every node with it, so it is read as ``topology.kubernetes.io/zone``;
* an existing node's CSINode states how many volumes each driver may still attach; a pod
  whose volumes would exceed it does not go there. A new node's EBS limit is the driver's
  default for its instance type (:func:`ebs_attach_limit`; Karpenter leaves new nodes
  unlimited, and a StatefulSet's pods then pile onto a node that cannot attach their volumes).

Pure: the snapshot's objects in, pods with narrowed requirements and reasons out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.fields import Fields, checked_object, metadata_of, name_of, object_ref
from joiner.domain.model import CSINode, InstanceType, Node, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from joiner.domain.requirements import Requirement, Requirements

__all__ = [
    "EBS_CSI_DRIVER",
    "EBS_CSI_ZONE",
    "BETA_STORAGE_CLASS",
    "IN_TREE_PROVISIONERS",
    "IN_TREE_SOURCES",
    "VOLUME_KINDS",
    "VolumeTopology",
    "apply_volumes",
    "csi_driver",
    "ebs_attach_limit",
    "parse_csi_node",
    "parse_persistent_volume",
    "parse_persistent_volume_claim",
    "parse_storage_class",
    "volume_object_key",
]

EBS_CSI_ZONE = "topology.ebs.csi.aws.com/zone"
_KEY_ALIASES = {EBS_CSI_ZONE: wk.ZONE}
EBS_CSI_DRIVER = "ebs.csi.aws.com"
#: In-tree volume plugins and the CSI drivers CSI migration hands them to (k8s.io/csi-translation-lib):
#: kube-scheduler counts their volumes against the CSI driver's attach limit. EKS's default
#: ``gp2`` class names ``kubernetes.io/aws-ebs``.
IN_TREE_PROVISIONERS: Mapping[str, str] = MappingProxyType(
    {
        "kubernetes.io/aws-ebs": EBS_CSI_DRIVER,
        "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
        "kubernetes.io/azure-disk": "disk.csi.azure.com",
        "kubernetes.io/azure-file": "file.csi.azure.com",
        "kubernetes.io/cinder": "cinder.csi.openstack.org",
        "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
        "kubernetes.io/portworx-volume": "pxd.portworx.com",
        "kubernetes.io/rbd": "rbd.csi.ceph.com",
    }
)
#: A PersistentVolume's in-tree source field -> the CSI driver its volume counts against.
IN_TREE_SOURCES: Mapping[str, str] = MappingProxyType(
    {
        "awsElasticBlockStore": EBS_CSI_DRIVER,
        "gcePersistentDisk": "pd.csi.storage.gke.io",
        "azureDisk": "disk.csi.azure.com",
        "azureFile": "file.csi.azure.com",
        "cinder": "cinder.csi.openstack.org",
        "vsphereVolume": "csi.vsphere.vmware.com",
        "portworxVolume": "pxd.portworx.com",
        "rbd": "rbd.csi.ceph.com",
    }
)
#: The claim's class before ``spec.storageClassName`` existed; it still wins over the field
#: (Kubernetes' GetPersistentVolumeClaimClass).
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
#: Nitro instances share 28 attachment slots between EBS volumes, ENIs and NVMe instance
#: store; the primary ENI and the root volume take one each.
NITRO_ATTACHMENTS = 28
#: Xen instances: the Kubernetes default EBS limit.
XEN_EBS_LIMIT = 39
#: Set by the PV controller once a claim and its volume are bound both ways; kube-scheduler
#: treats a claim naming a volume without it as not bound yet.
_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"


def ebs_attach_limit(instance_type: InstanceType) -> int:
    """EBS volumes a new node of ``instance_type`` can attach, the EBS CSI driver's default:
    Xen instances 39; Nitro (and bare metal) 28 shared slots less the primary ENI and the root
    volume, and one more when it has NVMe instance store (the catalog knows its size, not its
    disk count)."""
    hypervisor = instance_type.requirements.get(wk.INSTANCE_HYPERVISOR)
    if hypervisor is not None and not hypervisor.complement and hypervisor.values == frozenset({"xen"}):
        return XEN_EBS_LIMIT
    local = instance_type.requirements.get(wk.INSTANCE_LOCAL_NVME)
    has_disks = local is not None and not local.complement and bool(local.values - {"", "0"})
    return NITRO_ATTACHMENTS - 2 - (1 if has_disks else 0)


def csi_driver(provisioner: str) -> str:
    """The CSI driver whose attach limit a volume of ``provisioner`` counts against: an
    in-tree plugin's migration target (:data:`IN_TREE_PROVISIONERS`), else itself."""
    return IN_TREE_PROVISIONERS.get(provisioner, provisioner)


def _meta(kind: str, obj: Mapping[str, Any], origin: str, *, namespaced: bool) -> tuple[Fields, Mapping[str, Any], str, str]:
    checked = checked_object(obj, kind, origin)
    fields = Fields(object_ref(kind, checked, namespaced=namespaced, origin=origin))
    metadata = metadata_of(fields, checked)
    name = name_of(fields, metadata)
    namespace = fields.string(metadata.get("namespace"), "metadata.namespace", default="default") if namespaced else ""
    return fields, checked, name, namespace


def _terms(fields: Fields, value: object, path: str, *, expressions_key: str) -> tuple[Requirements, ...]:
    """Node selector terms (``matchExpressions``) or topology terms (``matchLabelExpressions``:
    key and values, ``In``), keys aliased."""
    terms = []
    for term_path, term in fields.items(value, path):
        requirements = []
        for expr_path, expr in fields.items(term.get(expressions_key), f"{term_path}.{expressions_key}"):
            key = fields.string(expr.get("key"), f"{expr_path}.key", required=True)
            operator = (
                "In"
                if expressions_key == "matchLabelExpressions"
                else fields.string(expr.get("operator"), f"{expr_path}.operator", required=True, allowed=("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
            )
            values = fields.string_list(expr.get("values"), f"{expr_path}.values", allow_empty=True)
            try:
                requirements.append(Requirement.create(_KEY_ALIASES.get(key, key), operator, values))
            except ValueError as error:
                fields.fail(expr_path, str(error))
        terms.append(Requirements(requirements))
    return tuple(terms)


def parse_persistent_volume_claim(obj: Mapping[str, Any], *, origin: str = "") -> PersistentVolumeClaim:
    fields, checked, name, namespace = _meta("PersistentVolumeClaim", obj, origin, namespaced=True)
    spec = fields.mapping(checked.get("spec"), "spec")
    status = fields.mapping(checked.get("status"), "status")
    metadata = checked.get("metadata") or {}
    annotations = fields.string_map(metadata.get("annotations"), "metadata.annotations")
    storage_class = spec.get("storageClassName")
    class_name = fields.string(storage_class, "spec.storageClassName") if storage_class is not None else None
    if BETA_STORAGE_CLASS in annotations:
        class_name = annotations[BETA_STORAGE_CLASS]
    return PersistentVolumeClaim(
        namespace=namespace,
        name=name,
        storage_class=class_name,
        volume_name=fields.string(spec.get("volumeName"), "spec.volumeName", default="") or None,
        bind_completed=_BIND_COMPLETED in annotations,
        lost=fields.string(status.get("phase"), "status.phase", default="Pending", allowed=("Pending", "Bound", "Lost")) == "Lost",
        deleting=fields.timestamp(metadata.get("deletionTimestamp"), "metadata.deletionTimestamp") is not None,
    )


def parse_persistent_volume(obj: Mapping[str, Any], *, origin: str = "") -> PersistentVolume:
    fields, checked, name, _ = _meta("PersistentVolume", obj, origin, namespaced=False)
    spec = fields.mapping(checked.get("spec"), "spec")
    affinity = fields.mapping(spec.get("nodeAffinity"), "spec.nodeAffinity")
    required = fields.mapping(affinity.get("required"), "spec.nodeAffinity.required")
    terms = _terms(fields, required.get("nodeSelectorTerms"), "spec.nodeAffinity.required.nodeSelectorTerms", expressions_key="matchExpressions")
    csi = fields.mapping(spec.get("csi"), "spec.csi")
    driver = fields.string(csi.get("driver"), "spec.csi.driver", default="") or next(
        (name for source, name in IN_TREE_SOURCES.items() if spec.get(source) is not None), None
    )
    metadata = checked.get("metadata") or {}
    return PersistentVolume(
        name=name,
        node_affinity=terms,
        driver=driver,
        node_local=spec.get("local") is not None or spec.get("hostPath") is not None,
        deleting=fields.timestamp(metadata.get("deletionTimestamp"), "metadata.deletionTimestamp") is not None,
    )


def parse_storage_class(obj: Mapping[str, Any], *, origin: str = "") -> StorageClass:
    fields, checked, name, _ = _meta("StorageClass", obj, origin, namespaced=False)
    annotations = fields.string_map((checked.get("metadata") or {}).get("annotations"), "metadata.annotations")
    default = any(annotations.get(key) == "true" for key in ("storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"))
    return StorageClass(
        name=name,
        provisioner=fields.string(checked.get("provisioner"), "provisioner", default=""),
        volume_binding_mode=fields.string(
            checked.get("volumeBindingMode"), "volumeBindingMode", default="Immediate", allowed=("Immediate", "WaitForFirstConsumer")
        ),
        allowed_topologies=_terms(fields, checked.get("allowedTopologies"), "allowedTopologies", expressions_key="matchLabelExpressions"),
        default=default,
    )


def parse_csi_node(obj: Mapping[str, Any], *, origin: str = "") -> CSINode:
    fields, checked, name, _ = _meta("CSINode", obj, origin, namespaced=False)
    spec = fields.mapping(checked.get("spec"), "spec")
    limits: dict[str, int] = {}
    for path, driver in fields.items(spec.get("drivers"), "spec.drivers"):
        driver_name = fields.string(driver.get("name"), f"{path}.name", required=True)
        allocatable = fields.mapping(driver.get("allocatable"), f"{path}.allocatable")
        count = fields.integer(allocatable.get("count"), f"{path}.allocatable.count", minimum=0, maximum=1_000_000)
        if count is not None:
            limits[driver_name] = count
    return CSINode(name=name, attach_limits=limits)


#: The volume kinds a snapshot carries: kind -> (its parser, the :class:`joiner.domain.snapshot.Snapshot`
#: field its objects go to). The snapshot reader and the scanner's round both read through it.
VOLUME_KINDS: dict[str, tuple[Callable[..., Any], str]] = {
    "PersistentVolumeClaim": (parse_persistent_volume_claim, "volume_claims"),
    "PersistentVolume": (parse_persistent_volume, "persistent_volumes"),
    "StorageClass": (parse_storage_class, "storage_classes"),
    "CSINode": (parse_csi_node, "csi_nodes"),
}


def volume_object_key(item: PersistentVolumeClaim | PersistentVolume | StorageClass | CSINode) -> str:
    """The name a volume object is unique by within its kind (``namespace/name`` for claims)."""
    return item.key if isinstance(item, PersistentVolumeClaim) else item.name


@dataclass(frozen=True)
class VolumeTopology:
    """The pending pods as their volumes constrain them (``pods``, in input order, without the
    ``blocked`` ones), why each blocked pod waits, and per existing node how many more
    volumes each driver may attach (``free_attachments``; drivers without a stated limit are
    absent)."""

    pods: tuple[Pod, ...]
    blocked: Mapping[str, str]
    free_attachments: Mapping[str, Mapping[str, int]]


def _resolve(
    pod: Pod,
    claims: Mapping[str, PersistentVolumeClaim],
    volumes: Mapping[str, PersistentVolume],
    classes: Mapping[str, StorageClass],
    default_class: StorageClass | None,
) -> tuple[Requirements | None, Counter[str], str | None]:
    """(requirements the volumes add, volumes per driver, why the pod must wait)."""
    added: Requirements | None = None
    drivers: Counter[str] = Counter()
    for claim_name, ephemeral_class in pod.volume_claims:
        claim = claims.get(f"{pod.namespace}/{claim_name}")
        class_name = claim.storage_class if claim is not None else ephemeral_class
        if claim is None and ephemeral_class is None:
            return None, drivers, f"persistentvolumeclaim {pod.namespace}/{claim_name} not found"
        if claim is not None and claim.deleting:
            return None, drivers, f"persistentvolumeclaim {claim.key} is being deleted"
        if claim is not None and claim.lost:
            return None, drivers, f"persistentvolumeclaim {claim.key} is lost (its persistentvolume {claim.volume_name} is gone)"
        volume = volumes.get(claim.volume_name) if claim is not None and claim.volume_name else None
        if claim is not None and claim.volume_name:
            if volume is None:
                return None, drivers, f"persistentvolume {claim.volume_name} of claim {claim.key} not found"
            if volume.deleting:
                return None, drivers, f"persistentvolume {volume.name} of claim {claim.key} is being deleted"
            if not claim.bind_completed:
                return None, drivers, f"persistentvolumeclaim {claim.key} names persistentvolume {volume.name} but is not bound yet"
            terms = volume.node_affinity
            if terms and volume.node_local:
                terms = (Requirements(r for r in terms[0].values() if r.key != wk.HOSTNAME),)
            if volume.driver:
                drivers[volume.driver] += 1
        else:
            storage_class = classes.get(class_name) if class_name else default_class
            if storage_class is None:
                what = f"storageclass {class_name}" if class_name else "a default storageclass"
                return None, drivers, f"persistentvolumeclaim {pod.namespace}/{claim_name} is unbound and {what} does not exist"
            if storage_class.volume_binding_mode != "WaitForFirstConsumer":
                return (
                    None,
                    drivers,
                    (
                        f"persistentvolumeclaim {pod.namespace}/{claim_name} is unbound with Immediate binding "
                        f"(storageclass {storage_class.name}): waiting for its volume"
                    ),
                )
            terms = storage_class.allowed_topologies
            if storage_class.provisioner:
                drivers[csi_driver(storage_class.provisioner)] += 1
        if terms:
            added = terms[0] if added is None else added.intersect(terms[0])
    return added, drivers, None


def _attached(
    pod: Pod,
    claims: Mapping[str, PersistentVolumeClaim],
    volumes: Mapping[str, PersistentVolume],
    classes: Mapping[str, StorageClass],
    default_class: StorageClass | None,
) -> Counter[str]:
    """Volumes per CSI driver a pod already on a node holds, as kube-scheduler's CSI limits
    count them: every claim that exists, whatever its state (terminating, lost, not yet
    bind-completed: its volume may still be attached), by its volume's driver, or by its
    class's provisioner while the volume is not known; a claim that does not exist is skipped."""
    drivers: Counter[str] = Counter()
    for claim_name, ephemeral_class in pod.volume_claims:
        claim = claims.get(f"{pod.namespace}/{claim_name}")
        if claim is None:
            continue
        volume = volumes.get(claim.volume_name) if claim.volume_name else None
        if volume is not None:
            if volume.driver:
                drivers[volume.driver] += 1
            continue
        class_name = claim.storage_class if claim.storage_class is not None else ephemeral_class
        storage_class = classes.get(class_name) if class_name else default_class
        if storage_class is not None and storage_class.provisioner:
            drivers[csi_driver(storage_class.provisioner)] += 1
    return drivers


def apply_volumes(
    pending: Sequence[Pod],
    bound: Sequence[Pod],
    nodes: Sequence[Node],
    claims: Sequence[PersistentVolumeClaim],
    volumes: Sequence[PersistentVolume],
    storage_classes: Sequence[StorageClass],
    csi_nodes: Sequence[CSINode],
) -> VolumeTopology:
    """The pending pods with their volumes' requirements (``Pod.volume_requirements``, apart
    from their node selectors so spread constraints count domains as kube-scheduler does),
    the pods that must wait and why, and each existing node's free attachments."""
    claims_by_key = {c.key: c for c in claims}
    volumes_by_name = {v.name: v for v in volumes}
    classes = {c.name: c for c in storage_classes}
    defaults = sorted((c for c in storage_classes if c.default), key=lambda c: c.name)
    default_class = defaults[0] if defaults else None
    result: list[Pod] = []
    blocked: dict[str, str] = {}
    for pod in pending:
        if not pod.volume_claims:
            result.append(pod)
            continue
        added, drivers, wait = _resolve(pod, claims_by_key, volumes_by_name, classes, default_class)
        if wait is not None:
            blocked[pod.key] = wait
            continue
        if added is not None:
            merged = pod.node_selector.intersect(added)
            if any(merged[key].is_empty() for key in merged):
                need = "; ".join(str(added[key]) for key in sorted(added))
                blocked[pod.key] = f"its volumes need {need}, which its node selector excludes"
                continue
        result.append(replace(pod, volume_requirements=added or Requirements(), volume_attachments=tuple(sorted(drivers.items()))))

    used: dict[str, Counter[str]] = {}
    for pod in bound:
        if not pod.volume_claims or pod.node_name is None:
            continue
        used.setdefault(pod.node_name, Counter()).update(_attached(pod, claims_by_key, volumes_by_name, classes, default_class))
    node_names = {n.name for n in nodes}
    free: dict[str, dict[str, int]] = {}
    for csi in csi_nodes:
        if csi.name not in node_names or not csi.attach_limits:
            continue
        taken = used.get(csi.name, Counter())
        free[csi.name] = {driver: max(0, limit - taken.get(driver, 0)) for driver, limit in sorted(csi.attach_limits.items())}
    return VolumeTopology(tuple(result), blocked, free)
