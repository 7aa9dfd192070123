"""Well-known label keys, Joiner's own keys and the Karpenter aliases we accept."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "ARCH",
    "OS",
    "INSTANCE_TYPE",
    "ZONE",
    "REGION",
    "HOSTNAME",
    "CAPACITY_TYPE",
    "NODEPOOL",
    "NODECLAIM",
    "INSTANCE_FAMILY",
    "INSTANCE_CATEGORY",
    "INSTANCE_GENERATION",
    "INSTANCE_SIZE",
    "INSTANCE_CPU",
    "INSTANCE_MEMORY",
    "INSTANCE_GPU_COUNT",
    "INSTANCE_GPU_NAME",
    "INSTANCE_HYPERVISOR",
    "INSTANCE_CPU_MANUFACTURER",
    "INSTANCE_CPU_CLOCK",
    "INSTANCE_EBS_BANDWIDTH",
    "INSTANCE_NETWORK_BANDWIDTH",
    "INSTANCE_LOCAL_NVME",
    "INSTANCE_ENCRYPTION_IN_TRANSIT",
    "INSTANCE_GPU_MANUFACTURER",
    "INSTANCE_GPU_MEMORY",
    "INSTANCE_ACCELERATOR_NAME",
    "INSTANCE_ACCELERATOR_MANUFACTURER",
    "INSTANCE_ACCELERATOR_COUNT",
    "INSTANCE_TENANCY",
    "INSTANCE_CAPABILITY_FLEX",
    "INSTANCE_NITRO_ENCLAVES",
    "ZONE_ID",
    "TENANCY_DEFAULT",
    "TENANCY_DEDICATED",
    "TENANCIES",
    "EBS_CSI_ZONE",
    "INSTANCE_ATTRIBUTE_LABELS",
    "CAPACITY_TYPE_SPOT",
    "CAPACITY_TYPE_ON_DEMAND",
    "CAPACITY_TYPE_RESERVED",
    "CAPACITY_RESERVATION_ID",
    "WELL_KNOWN_LABELS",
    "KARPENTER_ALIASES",
    "DO_NOT_DISRUPT",
    "KARPENTER_DO_NOT_DISRUPT",
    "MIRROR_POD_ANNOTATION",
    "DISRUPTED_TAINT_KEY",
    "INITIALIZED",
    "REGISTERED",
    "MANAGED_BY_TAG",
    "normalize_label_key",
    "normalize_labels",
    "with_alias_labels",
]

ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
HOSTNAME = "kubernetes.io/hostname"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
CAPACITY_TYPE = "joiner.dev/capacity-type"
NODEPOOL = "joiner.dev/nodepool"
NODECLAIM = "joiner.dev/nodeclaim"
REGISTERED = "joiner.dev/registered"
INITIALIZED = "joiner.dev/initialized"
INSTANCE_FAMILY = "joiner.dev/instance-family"
INSTANCE_CATEGORY = "joiner.dev/instance-category"
INSTANCE_GENERATION = "joiner.dev/instance-generation"
INSTANCE_SIZE = "joiner.dev/instance-size"
INSTANCE_CPU = "joiner.dev/instance-cpu"
INSTANCE_MEMORY = "joiner.dev/instance-memory"
INSTANCE_GPU_COUNT = "joiner.dev/instance-gpu-count"
INSTANCE_GPU_NAME = "joiner.dev/instance-gpu-name"
INSTANCE_HYPERVISOR = "joiner.dev/instance-hypervisor"
INSTANCE_CPU_MANUFACTURER = "joiner.dev/instance-cpu-manufacturer"
INSTANCE_CPU_CLOCK = "joiner.dev/instance-cpu-sustained-clock-speed-mhz"
INSTANCE_EBS_BANDWIDTH = "joiner.dev/instance-ebs-bandwidth"
INSTANCE_NETWORK_BANDWIDTH = "joiner.dev/instance-network-bandwidth"
INSTANCE_LOCAL_NVME = "joiner.dev/instance-local-nvme"
INSTANCE_ENCRYPTION_IN_TRANSIT = "joiner.dev/instance-encryption-in-transit-supported"
INSTANCE_GPU_MANUFACTURER = "joiner.dev/instance-gpu-manufacturer"
INSTANCE_GPU_MEMORY = "joiner.dev/instance-gpu-memory"
INSTANCE_ACCELERATOR_NAME = "joiner.dev/instance-accelerator-name"
INSTANCE_ACCELERATOR_MANUFACTURER = "joiner.dev/instance-accelerator-manufacturer"
INSTANCE_ACCELERATOR_COUNT = "joiner.dev/instance-accelerator-count"
#: ``default`` or ``dedicated``: every type can launch either way, the requirements choose
#: (``dedicated`` only when they exclude ``default``: Karpenter's rule).
INSTANCE_TENANCY = "joiner.dev/instance-tenancy"
TENANCY_DEFAULT = "default"
TENANCY_DEDICATED = "dedicated"
TENANCIES = (TENANCY_DEFAULT, TENANCY_DEDICATED)
#: ``true`` for the flex types (``c7i-flex``, ``m7i-flex``, ...), else ``false``.
INSTANCE_CAPABILITY_FLEX = "joiner.dev/instance-capability-flex"
#: ``true`` where EC2 says ``NitroEnclavesSupport: supported``, else ``false``.
INSTANCE_NITRO_ENCLAVES = "joiner.dev/instance-nitro-enclaves-supported"
#: The account-independent zone id (``use1-az4``) of the node's zone.
ZONE_ID = "topology.k8s.aws/zone-id"
#: The EBS CSI driver's zone key; Karpenter reads it as the zone label.
EBS_CSI_ZONE = "topology.ebs.csi.aws.com/zone"
#: Instance attribute labels added for every Karpenter ``instance-*`` label (see KARPENTER_ALIASES).
INSTANCE_ATTRIBUTE_LABELS = (
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_CLOCK,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_LOCAL_NVME,
    INSTANCE_ENCRYPTION_IN_TRANSIT,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_TENANCY,
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_NITRO_ENCLAVES,
)

CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
#: Launched into an on-demand capacity reservation the NodeClass selects (Karpenter's
#: ``reserved`` capacity type).
CAPACITY_TYPE_RESERVED = "reserved"
#: The capacity reservation a ``reserved`` node runs in.
CAPACITY_RESERVATION_ID = "joiner.dev/capacity-reservation-id"

DO_NOT_DISRUPT = "joiner.dev/do-not-disrupt"
KARPENTER_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
#: A static pod's mirror in the API server carries this annotation.
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
DISRUPTED_TAINT_KEY = "joiner.dev/disrupted"
MANAGED_BY_TAG = "joiner.dev/managed-by"

#: Legacy or Karpenter keys accepted in pod and NodePool requirements, mapped to ours.
KARPENTER_ALIASES: dict[str, str] = {
    "karpenter.sh/capacity-type": CAPACITY_TYPE,
    "karpenter.k8s.aws/capacity-reservation-id": CAPACITY_RESERVATION_ID,
    "karpenter.sh/nodepool": NODEPOOL,
    "karpenter.k8s.aws/instance-family": INSTANCE_FAMILY,
    "karpenter.k8s.aws/instance-category": INSTANCE_CATEGORY,
    "karpenter.k8s.aws/instance-generation": INSTANCE_GENERATION,
    "karpenter.k8s.aws/instance-size": INSTANCE_SIZE,
    "karpenter.k8s.aws/instance-cpu": INSTANCE_CPU,
    "karpenter.k8s.aws/instance-memory": INSTANCE_MEMORY,
    "karpenter.k8s.aws/instance-gpu-count": INSTANCE_GPU_COUNT,
    "karpenter.k8s.aws/instance-gpu-name": INSTANCE_GPU_NAME,
    "karpenter.k8s.aws/instance-hypervisor": INSTANCE_HYPERVISOR,
    **{key.replace("joiner.dev/", "karpenter.k8s.aws/"): key for key in INSTANCE_ATTRIBUTE_LABELS},
    # Karpenter renamed its instance-nitro-enclaves-supported label nitro-sandbox: both are read.
    "karpenter.k8s.aws/nitro-sandbox": INSTANCE_NITRO_ENCLAVES,
    EBS_CSI_ZONE: ZONE,
    "beta.kubernetes.io/arch": ARCH,
    "beta.kubernetes.io/os": OS,
    "beta.kubernetes.io/instance-type": INSTANCE_TYPE,
    "failure-domain.beta.kubernetes.io/zone": ZONE,
    "failure-domain.beta.kubernetes.io/region": REGION,
}

#: Labels every launched node gets from its instance type and offering. Pod requirements
#: on these keys are allowed even when a NodePool does not mention them.
WELL_KNOWN_LABELS: frozenset[str] = frozenset(
    {
        ARCH,
        OS,
        INSTANCE_TYPE,
        ZONE,
        REGION,
        HOSTNAME,
        CAPACITY_TYPE,
        NODEPOOL,
        CAPACITY_RESERVATION_ID,
        INSTANCE_FAMILY,
        INSTANCE_CATEGORY,
        INSTANCE_GENERATION,
        INSTANCE_SIZE,
        INSTANCE_CPU,
        INSTANCE_MEMORY,
        INSTANCE_GPU_COUNT,
        INSTANCE_GPU_NAME,
        INSTANCE_HYPERVISOR,
        *INSTANCE_ATTRIBUTE_LABELS,
        ZONE_ID,
    }
)


def normalize_label_key(key: str) -> str:
    """Map a Karpenter or deprecated key to Joiner's; other keys pass through."""
    return KARPENTER_ALIASES.get(key, key)


def normalize_labels(labels: dict[str, str]) -> dict[str, str]:
    """Add Joiner keys for any aliased keys present (existing Joiner keys win)."""
    result = dict(labels)
    for key, value in labels.items():
        alias = KARPENTER_ALIASES.get(key)
        if alias is not None and alias not in result:
            result[alias] = value
    return result


def with_alias_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` plus, for every alias key the planner accepts (:data:`KARPENTER_ALIASES`),
    the alias with its Joiner key's value when that key is present.

    kube-scheduler matches node selectors and node affinity literally: a migrated pod
    selecting ``karpenter.sh/capacity-type: spot`` binds only to a Node that carries that
    very key, so every Node Joiner launches carries both spellings. An alias already
    present keeps its value (whoever set it, the kubelet or the user, knew better).
    """
    result = dict(labels)
    for alias, key in sorted(KARPENTER_ALIASES.items()):
        if key in labels and alias not in result:
            result[alias] = labels[key]
    return result
