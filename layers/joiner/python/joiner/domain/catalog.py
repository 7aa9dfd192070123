"""The instance catalog: raw EC2 instance type facts and offerings, turned into
:class:`~joiner.domain.model.InstanceType` values as a NodeClass's kubelet settings make them.

Two kinds of entries:

* :class:`InstanceTypeInfo` — raw ``DescribeInstanceTypes`` facts (the bundled offline
  catalog, later the live EC2 API). Capacity and overhead come from the EKS formulas that
  Karpenter's AWS provider and the AL2023 ``nodeadm`` bootstrap use (see :func:`eks_capacity`
  and :func:`eks_overhead`).
* :class:`DeclaredInstanceType` — an entry of a catalog file giving capacity as the kubelet
  reports it, and optionally the overhead (then used verbatim).

Offerings (zone x capacity type x price) are held per type. Offline there are no spot
prices, so the bundled catalog has on-demand offerings only until
:meth:`Catalog.with_spot_prices` overlays real ones.

See docs/catalog.md for the data sources, the file format and the formulas.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.costs import block_device_cost_per_hour
from joiner.domain.model import INSTANCE_STORE_POLICIES, INSTANCE_STORE_RAID0, InstanceType, KubeletConfig, NodeClass, Offering
from joiner.domain.quantity import QuantityError, parse_quantity
from joiner.domain.requirements import Requirement, Requirements
from joiner.domain.resources import (
    AMD_GPU,
    CPU,
    EFA,
    EPHEMERAL_STORAGE,
    MEMORY,
    NEURON,
    NEURON_CORE,
    NVIDIA_GPU,
    POD_ENI,
    PODS,
    Resources,
)

__all__ = [
    "CatalogError",
    "InstanceTypeInfo",
    "DeclaredInstanceType",
    "Catalog",
    "load_bundled_catalog",
    "load_catalog_file",
    "parse_catalog",
    "catalog_from_bundled_document",
    "eni_limited_pods",
    "max_pods",
    "kube_reserved_cpu_milli",
    "kube_reserved_memory_mib",
    "vm_memory_capacity_mib",
    "eviction_signal_bytes",
    "eks_capacity",
    "eks_overhead",
    "NEURON_CORE",
    "VM_MEMORY_OVERHEAD_PERCENT",
    "DEFAULT_ROOT_VOLUME_BYTES",
    "DEFAULT_MAX_PODS",
    "BUNDLED_REGIONS",
    "pod_eni_limits",
    "INSTANCE_STORE_RAID0",
    "INSTANCE_STORE_POLICIES",
    "root_volume_size",
    "ephemeral_storage_bytes",
]

#: Karpenter's default ``vmMemoryOverheadPercent``: memory the hypervisor and firmware keep.
VM_MEMORY_OVERHEAD_PERCENT = 0.075
#: Graviton instances reserve 64 MiB of CMA memory the OS cannot use (Karpenter subtracts it).
GRAVITON_CMA_MIB = 64
#: The AL2023 default root volume (``/dev/xvda``, 20Gi gp3) backs ephemeral storage.
DEFAULT_ROOT_VOLUME_BYTES = 20 * 2**30
#: The AL2023 device whose volume is the root file system (Karpenter's ``EphemeralBlockDevice``).
ROOT_DEVICE = "/dev/xvda"
#: The kubelet's own default when a catalog file entry gives no ``pods`` capacity.
DEFAULT_MAX_PODS = 110
#: Default hard eviction thresholds of the EKS AL2023 kubelet configuration.
DEFAULT_EVICTION_MEMORY_BYTES = 100 * 2**20
DEFAULT_EVICTION_NODEFS_PERCENT = 10.0
#: kube-reserved ephemeral storage nodeadm always sets.
KUBE_RESERVED_EPHEMERAL_BYTES = 2**30

MEMORY_AVAILABLE = "memory.available"
NODEFS_AVAILABLE = "nodefs.available"
CAPACITY_TYPES = (wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT)
BUNDLED_REGIONS = ("us-east-1",)
_BUNDLED_FORMAT = 1
_MIB = 2**20
_INSTANCE_TYPE_SCHEME = re.compile(r"^([a-z]+)(-[0-9]+tb)?([0-9]+).*\.")
#: Attribute labels a node gets only when its type has the attribute: absent ones are
#: ``DoesNotExist`` requirements so a pod asking for, say, a GPU name never matches c5.large.
_ATTRIBUTE_KEYS = (
    wk.INSTANCE_FAMILY,
    wk.INSTANCE_CATEGORY,
    wk.INSTANCE_GENERATION,
    wk.INSTANCE_SIZE,
    wk.INSTANCE_CPU,
    wk.INSTANCE_MEMORY,
    wk.INSTANCE_GPU_COUNT,
    wk.INSTANCE_GPU_NAME,
    wk.INSTANCE_HYPERVISOR,
    wk.INSTANCE_CPU_MANUFACTURER,
    wk.INSTANCE_CPU_CLOCK,
    wk.INSTANCE_EBS_BANDWIDTH,
    wk.INSTANCE_NETWORK_BANDWIDTH,
    wk.INSTANCE_LOCAL_NVME,
    wk.INSTANCE_ENCRYPTION_IN_TRANSIT,
    wk.INSTANCE_GPU_MANUFACTURER,
    wk.INSTANCE_GPU_MEMORY,
    wk.INSTANCE_ACCELERATOR_NAME,
    wk.INSTANCE_ACCELERATOR_MANUFACTURER,
    wk.INSTANCE_ACCELERATOR_COUNT,
    wk.INSTANCE_CAPABILITY_FLEX,
    wk.INSTANCE_NITRO_ENCLAVES,
)
_TENANCIES = frozenset(wk.TENANCIES)
_MEMO_SIZE = 32


class CatalogError(ValueError):
    """A malformed catalog file, entry or kubelet setting; the message names the field."""


@dataclass(frozen=True, slots=True)
class InstanceTypeInfo:
    """Raw facts about one EC2 instance type in one region (from ``DescribeInstanceTypes``
    and ``DescribeInstanceTypeOfferings``, plus the on-demand price when known).

    ``max_enis`` counts the interfaces of the default network card only: the VPC CNI uses
    no other card, so that is what bounds ENI-limited pod density.
    """

    name: str
    vcpus: int
    memory_mib: int
    architectures: tuple[str, ...]  # Kubernetes names: amd64, arm64 (first is the node's)
    max_enis: int
    ipv4_per_eni: int
    hypervisor: str = ""  # nitro | xen | "" (bare metal)
    bare_metal: bool = False
    cpu_manufacturer: str = ""
    cpu_clock_mhz: int = 0  # sustained clock speed
    gpu_count: int = 0
    gpu_name: str = ""
    gpu_manufacturer: str = ""
    gpu_memory_mib: int = 0  # per GPU
    gpu_kinds: int = 0  # distinct GPU models (labels only describe single-model types)
    neuron_count: int = 0  # Inferentia/Trainium devices (aws.amazon.com/neuron)
    neuron_cores: int = 0  # aws.amazon.com/neuroncore
    neuron_name: str = ""
    efa_count: int = 0  # vpc.amazonaws.com/efa
    usage_classes: tuple[str, ...] = CAPACITY_TYPES
    zones: tuple[str, ...] = ()
    on_demand_price: float | None = None
    ebs_bandwidth_mbps: int = 0  # EBS-optimized maximum bandwidth
    network_bandwidth_mbps: int = 0  # baseline network bandwidth
    local_nvme_gib: int = 0  # instance-store NVMe total, in GB (EC2's TotalSizeInGB, decimal)
    encryption_in_transit: bool = False
    accelerator_name: str = ""  # single-model inference accelerators (Inferentia, Trainium, ...)
    accelerator_manufacturer: str = ""
    accelerator_count: int = 0
    nitro_enclaves: bool = False  # NitroEnclavesSupport: supported

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else ""


@dataclass(frozen=True, slots=True)
class DeclaredInstanceType:
    """An instance type a catalog file declares by its kubelet-reported capacity.

    With ``overhead`` None the EKS formulas derive it (and a NodeClass's ``maxPods`` and
    ``podsPerCore`` cap ``pods``); otherwise ``capacity - overhead`` is the allocatable
    whatever the kubelet settings.
    """

    name: str
    capacity: Resources
    overhead: Resources | None = None
    labels: tuple[tuple[str, str], ...] = ()


# ---------------------------------------------------------------------------------------
# EKS formulas (Karpenter pkg/providers/instancetype/types.go, AL2023 nodeadm)
# ---------------------------------------------------------------------------------------


def eni_limited_pods(max_enis: int, ipv4_per_eni: int, reserved_enis: int = 0) -> int:
    """VPC CNI pod density: ``ENIs x (IPv4 addresses per ENI - 1) + 2`` (eni-max-pods.txt)."""
    usable = max(max_enis - reserved_enis, 0)
    if usable == 0:
        return 0
    return usable * (ipv4_per_eni - 1) + 2


def max_pods(vcpus: int, eni_pods: int, kubelet: KubeletConfig = KubeletConfig()) -> int:
    """The kubelet ``maxPods``: the NodeClass's value, else ENI-limited; ``podsPerCore``
    (when positive) caps it at ``podsPerCore x vCPUs``."""
    count = kubelet.max_pods if kubelet.max_pods is not None else eni_pods
    if kubelet.pods_per_core:
        count = min(kubelet.pods_per_core * vcpus, count)
    return count


def kube_reserved_cpu_milli(cpu_milli: int) -> int:
    """kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of cores 3-4 and
    0.25% of the rest, each band truncated to whole millicores (as Karpenter computes it)."""
    total = 0
    for start, end, fraction in ((0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025)):
        if cpu_milli >= start:
            span = float(end - start) if cpu_milli >= end else float(cpu_milli - start)
            total += int(span * fraction)
    return total


def kube_reserved_memory_mib(pods: int) -> int:
    """kube-reserved memory: ``11 MiB x pods + 255 MiB``."""
    return 11 * pods + 255


def vm_memory_capacity_mib(memory_mib: int, architecture: str = "amd64", overhead_percent: float = VM_MEMORY_OVERHEAD_PERCENT) -> int:
    """Memory the node reports: the advertised size less Graviton's 64 MiB CMA reserve and
    the VM overhead (``ceil(MiB x percent)``, float arithmetic in Karpenter's order)."""
    size = memory_mib - (GRAVITON_CMA_MIB if architecture == "arm64" else 0)
    overhead = math.ceil(float(size * _MIB) * overhead_percent / 1024 / 1024)
    return size - overhead


def eviction_signal_bytes(capacity_bytes: int, value: str, *, where: str = "evictionHard") -> int:
    """A hard eviction threshold in bytes: a quantity, or a percentage of capacity
    (``100%`` disables the threshold, as the kubelet treats it)."""
    text = str(value).strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            raise CatalogError(f"{where}: invalid percentage {value!r}") from None
        if not 0 <= percent <= 100:
            raise CatalogError(f"{where}: percentage {value!r} is outside 0%..100%")
        if percent == 100:
            percent = 0.0
        return math.ceil(float(capacity_bytes) / 100 * percent)
    try:
        amount = parse_quantity(text)
    except QuantityError as error:
        raise CatalogError(f"{where}: {error}") from None
    if amount < 0:
        raise CatalogError(f"{where}: {value!r} must not be negative")
    return math.ceil(amount)


@lru_cache(maxsize=1)
def pod_eni_limits() -> Mapping[str, int]:
    """Branch network interfaces per instance type for security groups for pods
    (``vpc.amazonaws.com/pod-eni``): Karpenter's generated VPC limits table, trunking-compatible
    types only, shipped as ``joiner/data/ec2-pod-eni.json.gz`` (``scripts/build_pod_eni_limits.py``).
    EC2 does not describe these limits, so every region uses the table."""
    payload = importlib_resources.files("joiner").joinpath("data", "ec2-pod-eni.json.gz").read_bytes()
    table = json.loads(gzip.decompress(payload))["branchInterfaces"]
    return {str(name): int(value) for name, value in table.items()}


def _bytes(milli: int) -> int:
    return milli // 1000


def root_volume_size(node_class: NodeClass) -> int:
    """The size of the volume that backs a node's ephemeral storage (Karpenter's rule): the
    block device mapping marked ``rootVolume``, else the one on ``/dev/xvda`` (the AL2023 root
    device; for ``amiFamily: Custom`` the last mapping), when it gives ``volumeSize``; else the
    AL2023 default of 20Gi. Sizes are taken as written (``100G`` is 10^11 bytes), as Karpenter
    plans with them; EC2 gets whole GiB rounded up, so the volume is never smaller."""
    mappings = node_class.block_device_mappings
    chosen = next((m for m in mappings if m.get("rootVolume") is True), None)
    if chosen is None or _volume_size(chosen) is None:
        if node_class.ami_family == "Custom":
            chosen = mappings[-1] if mappings else None
        else:
            chosen = next((m for m in mappings if m.get("deviceName") == ROOT_DEVICE), None)
    size = _volume_size(chosen) if chosen is not None else None
    return size if size is not None and size > 0 else DEFAULT_ROOT_VOLUME_BYTES


def _volume_size(mapping: Mapping[str, object]) -> int | None:
    ebs = mapping.get("ebs")
    value = ebs.get("volumeSize") if isinstance(ebs, Mapping) else None
    if value is None or not isinstance(value, (str, int)):
        return None
    try:
        return math.ceil(parse_quantity(value))
    except QuantityError:
        return None


def ephemeral_storage_bytes(local_nvme_gb: int, instance_store_policy: str | None, root_bytes: int) -> int:
    """A node's ephemeral storage: with ``instanceStorePolicy: RAID0`` and instance-store NVMe,
    the disks' total (EC2's ``TotalSizeInGB``, decimal GB, as Karpenter counts it); else the
    root volume."""
    if instance_store_policy == INSTANCE_STORE_RAID0 and local_nvme_gb > 0:
        return local_nvme_gb * 10**9
    return root_bytes


def eks_capacity(
    info: InstanceTypeInfo,
    kubelet: KubeletConfig = KubeletConfig(),
    root_volume_bytes: int = DEFAULT_ROOT_VOLUME_BYTES,
    instance_store_policy: str | None = None,
) -> Resources:
    """Node capacity for an EKS AL2023 node of this type (milli-units)."""
    pods = max_pods(info.vcpus, eni_limited_pods(info.max_enis, info.ipv4_per_eni), kubelet)
    capacity = {
        CPU: info.vcpus * 1000,
        MEMORY: vm_memory_capacity_mib(info.memory_mib, info.architecture) * _MIB * 1000,
        EPHEMERAL_STORAGE: ephemeral_storage_bytes(info.local_nvme_gib, instance_store_policy, root_volume_bytes) * 1000,
        PODS: pods * 1000,
    }
    if info.gpu_count:
        manufacturer = info.gpu_manufacturer.upper()
        if manufacturer == "NVIDIA":
            capacity[NVIDIA_GPU] = info.gpu_count * 1000
        elif manufacturer == "AMD":
            capacity[AMD_GPU] = info.gpu_count * 1000
    if info.neuron_count:
        capacity[NEURON] = info.neuron_count * 1000
    if info.neuron_cores:
        capacity[NEURON_CORE] = info.neuron_cores * 1000
    if info.efa_count:
        capacity[EFA] = info.efa_count * 1000
    branch_enis = pod_eni_limits().get(info.name, 0)
    if branch_enis:
        capacity[POD_ENI] = branch_enis * 1000
    return Resources(capacity)


def eks_overhead(cpu_milli: int, memory_bytes: int, storage_bytes: int, reserved_pods: int, kubelet: KubeletConfig = KubeletConfig()) -> Resources:
    """kube-reserved + system-reserved + hard eviction thresholds (milli-units).

    ``reserved_pods`` sizes the kube-reserved memory. On AL2023 nodeadm computes it from the
    ENI-limited pod count before a NodeClass's ``maxPods`` is merged in, so callers pass the
    ENI-limited count, not the effective ``maxPods`` (Karpenter's ``UsesENILimitedMemoryOverhead``).
    A NodeClass's ``kubeReserved`` replaces the formula per resource; ``evictionHard``
    ``memory.available``/``nodefs.available`` replace the 100Mi / 10% defaults.
    """
    overhead: dict[str, int] = {
        CPU: kube_reserved_cpu_milli(cpu_milli),
        MEMORY: kube_reserved_memory_mib(reserved_pods) * _MIB * 1000,
        EPHEMERAL_STORAGE: KUBE_RESERVED_EPHEMERAL_BYTES * 1000,
    }
    if kubelet.kube_reserved is not None:
        overhead.update(kubelet.kube_reserved.items())
    for name, value in kubelet.system_reserved.items():
        overhead[name] = overhead.get(name, 0) + value
    eviction = kubelet.eviction_hard or {}
    memory_threshold = (
        eviction_signal_bytes(memory_bytes, eviction[MEMORY_AVAILABLE], where=f"kubelet.evictionHard.{MEMORY_AVAILABLE}")
        if MEMORY_AVAILABLE in eviction
        else DEFAULT_EVICTION_MEMORY_BYTES
    )
    storage_threshold = (
        eviction_signal_bytes(storage_bytes, eviction[NODEFS_AVAILABLE], where=f"kubelet.evictionHard.{NODEFS_AVAILABLE}")
        if NODEFS_AVAILABLE in eviction
        else math.ceil(float(storage_bytes) / 100 * DEFAULT_EVICTION_NODEFS_PERCENT)
    )
    overhead[MEMORY] = overhead.get(MEMORY, 0) + memory_threshold * 1000
    overhead[EPHEMERAL_STORAGE] = overhead.get(EPHEMERAL_STORAGE, 0) + storage_threshold * 1000
    return Resources(overhead)


# ---------------------------------------------------------------------------------------
# Labels and requirements
# ---------------------------------------------------------------------------------------


def _name_labels(name: str) -> dict[str, str]:
    """Family/size from ``<family>.<size>``; category/generation from Karpenter's scheme."""
    out: dict[str, str] = {}
    match = _INSTANCE_TYPE_SCHEME.match(name)
    if match:
        out[wk.INSTANCE_CATEGORY] = match.group(1)
        out[wk.INSTANCE_GENERATION] = match.group(3)
    parts = name.split(".")
    if len(parts) == 2:
        out[wk.INSTANCE_FAMILY] = parts[0]
        out[wk.INSTANCE_SIZE] = parts[1]
    out[wk.INSTANCE_CAPABILITY_FLEX] = "true" if "-flex" in parts[0] else "false"
    return out


def _info_labels(info: InstanceTypeInfo) -> dict[str, str]:
    out = {
        wk.INSTANCE_TYPE: info.name,
        wk.ARCH: info.architecture,
        wk.OS: "linux",
        wk.INSTANCE_CPU: str(info.vcpus),
        wk.INSTANCE_MEMORY: str(info.memory_mib),
        wk.INSTANCE_HYPERVISOR: info.hypervisor,
        wk.INSTANCE_ENCRYPTION_IN_TRANSIT: "true" if info.encryption_in_transit else "false",
        wk.INSTANCE_NITRO_ENCLAVES: "true" if info.nitro_enclaves else "false",
    }
    out.update(_name_labels(info.name))
    optional = {
        wk.INSTANCE_CPU_MANUFACTURER: info.cpu_manufacturer.lower(),
        wk.INSTANCE_CPU_CLOCK: info.cpu_clock_mhz,
        wk.INSTANCE_EBS_BANDWIDTH: info.ebs_bandwidth_mbps,
        wk.INSTANCE_NETWORK_BANDWIDTH: info.network_bandwidth_mbps,
        wk.INSTANCE_LOCAL_NVME: info.local_nvme_gib,
    }
    out.update((key, str(value)) for key, value in optional.items() if value)
    if info.gpu_count and info.gpu_kinds <= 1:
        out[wk.INSTANCE_GPU_COUNT] = str(info.gpu_count)
        out[wk.INSTANCE_GPU_NAME] = info.gpu_name.lower().replace(" ", "-")
        out[wk.INSTANCE_GPU_MANUFACTURER] = info.gpu_manufacturer.lower()
        if info.gpu_memory_mib:
            out[wk.INSTANCE_GPU_MEMORY] = str(info.gpu_memory_mib)
    if info.accelerator_count:
        out[wk.INSTANCE_ACCELERATOR_NAME] = info.accelerator_name
        out[wk.INSTANCE_ACCELERATOR_MANUFACTURER] = info.accelerator_manufacturer
        out[wk.INSTANCE_ACCELERATOR_COUNT] = str(info.accelerator_count)
    return out


def _declared_labels(declared: DeclaredInstanceType) -> dict[str, str]:
    out = {wk.INSTANCE_TYPE: declared.name, wk.ARCH: "amd64", wk.OS: "linux"}
    out.update(_name_labels(declared.name))
    cpu = declared.capacity[CPU]
    if cpu and cpu % 1000 == 0:
        out[wk.INSTANCE_CPU] = str(cpu // 1000)
    gpus = declared.capacity[NVIDIA_GPU] + declared.capacity[AMD_GPU]
    if gpus and gpus % 1000 == 0:
        out[wk.INSTANCE_GPU_COUNT] = str(gpus // 1000)
    out.update((wk.normalize_label_key(key), value) for key, value in declared.labels)
    return out


@lru_cache(maxsize=8192)
def _single(key: str, value: str) -> Requirement:
    return Requirement(key, False, frozenset((value,)))


def _requirements(labels: Mapping[str, str], offerings: tuple[Offering, ...], region: str | None, zone_ids: Mapping[str, str] | None = None) -> Requirements:
    items = [_single(key, value) for key, value in labels.items()]
    items.extend(Requirement(key, False, frozenset()) for key in _ATTRIBUTE_KEYS if key not in labels)
    if wk.INSTANCE_TENANCY not in labels:
        items.append(Requirement(wk.INSTANCE_TENANCY, False, _TENANCIES))
    available = [o for o in offerings if o.available]
    items.append(Requirement(wk.ZONE, False, frozenset(o.zone for o in available)))
    if zone_ids:
        ids = frozenset(zone_ids[o.zone] for o in available if o.zone in zone_ids)
        if ids and wk.ZONE_ID not in labels:
            items.append(Requirement(wk.ZONE_ID, False, ids))
    items.append(Requirement(wk.CAPACITY_TYPE, False, frozenset(o.capacity_type for o in available)))
    if region and wk.REGION not in labels:
        items.append(_single(wk.REGION, region))
    return Requirements(items)


# ---------------------------------------------------------------------------------------
# The catalog
# ---------------------------------------------------------------------------------------


def _kubelet_key(kubelet: KubeletConfig) -> tuple[Any, ...]:
    """A hashable canonical form (``KubeletConfig`` holds a dict, so it is not hashable)."""
    eviction = tuple(sorted((str(k), str(v)) for k, v in (kubelet.eviction_hard or {}).items()))
    return (kubelet.max_pods, kubelet.pods_per_core, kubelet.system_reserved, kubelet.kube_reserved, eviction)


def _check_price(price: object, where: str) -> float:
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0:
        raise CatalogError(f"{where}: expected a non-negative number, got {price!r}")
    return float(price)


class Catalog:
    """Instance types and their offerings for one region.

    Immutable: :meth:`with_spot_prices` returns a new catalog. :meth:`instance_types` is
    memoised per kubelet configuration, root volume size and instance-store policy, so
    NodeClasses equal in those share one tuple of :class:`InstanceType`.
    """

    def __init__(
        self,
        infos: Iterable[InstanceTypeInfo] = (),
        offerings: Mapping[str, Iterable[Offering]] | None = None,
        *,
        declared: Iterable[DeclaredInstanceType] = (),
        region: str | None = None,
        price_source: str = "",
        zone_ids: Mapping[str, str] | None = None,
    ) -> None:
        """``offerings`` maps a type name to its offerings; types it leaves out get one
        on-demand offering per zone of their info at the on-demand price (none if unpriced).
        ``price_source`` says where on-demand prices came from ("" for a file or the bundled
        catalog; see :mod:`joiner.domain.catalog_build`). ``zone_ids`` maps zone names to
        their account-independent ids (``use1-az4``), when known."""
        entries: dict[str, InstanceTypeInfo | DeclaredInstanceType] = {}
        defined: list[InstanceTypeInfo | DeclaredInstanceType] = [*infos, *declared]
        for entry in defined:
            if entry.name in entries:
                raise CatalogError(f"instance type {entry.name!r} is defined twice")
            entries[entry.name] = entry
        given = dict(offerings or {})
        unknown = sorted(set(given) - set(entries))
        if unknown:
            raise CatalogError(f"offerings given for unknown instance type(s): {', '.join(unknown)}")
        self._entries = {name: entries[name] for name in sorted(entries)}
        self._offerings: dict[str, tuple[Offering, ...]] = {}
        for name, entry in self._entries.items():
            if name in given:
                self._offerings[name] = tuple(sorted(given[name]))
            elif isinstance(entry, InstanceTypeInfo) and entry.on_demand_price is not None and wk.CAPACITY_TYPE_ON_DEMAND in entry.usage_classes:
                self._offerings[name] = tuple(Offering(zone, wk.CAPACITY_TYPE_ON_DEMAND, entry.on_demand_price) for zone in sorted(entry.zones))
            else:
                self._offerings[name] = ()
        self.region = region
        self.price_source = price_source
        self.zone_ids: Mapping[str, str] = dict(sorted((zone_ids or {}).items()))
        self._requirements: dict[str, Requirements] | None = None
        self._memo: OrderedDict[tuple[Any, ...], tuple[InstanceType, ...]] = OrderedDict()
        self._by_name: dict[tuple[Any, ...], dict[str, InstanceType]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Catalog(region={self.region!r}, instance_types={len(self._entries)})"

    @property
    def names(self) -> tuple[str, ...]:
        """Instance type names, sorted."""
        return tuple(self._entries)

    @property
    def infos(self) -> tuple[InstanceTypeInfo, ...]:
        """Raw facts of the EC2-described entries, sorted by name."""
        return tuple(e for e in self._entries.values() if isinstance(e, InstanceTypeInfo))

    @property
    def declared(self) -> tuple[DeclaredInstanceType, ...]:
        return tuple(e for e in self._entries.values() if isinstance(e, DeclaredInstanceType))

    def info(self, name: str) -> InstanceTypeInfo | None:
        entry = self._entries.get(name)
        return entry if isinstance(entry, InstanceTypeInfo) else None

    def offerings(self, name: str) -> tuple[Offering, ...]:
        """Offerings of one type sorted by (zone, capacity type); empty for unknown names."""
        return self._offerings.get(name, ())

    def _all_requirements(self) -> dict[str, Requirements]:
        if self._requirements is None:
            built = {}
            for name, entry in self._entries.items():
                labels = _info_labels(entry) if isinstance(entry, InstanceTypeInfo) else _declared_labels(entry)
                built[name] = _requirements(labels, self._offerings[name], self.region, self.zone_ids)
            self._requirements = built
        return self._requirements

    def instance_types(
        self,
        kubelet: KubeletConfig = KubeletConfig(),
        *,
        root_volume_bytes: int = DEFAULT_ROOT_VOLUME_BYTES,
        instance_store_policy: str | None = None,
        node_cost_per_hour: float = 0.0,
    ) -> tuple[InstanceType, ...]:
        """Every type as a node with these kubelet settings, root volume size and instance-store
        policy would be, sorted by name; ``node_cost_per_hour`` (what each node costs besides
        its instance: :mod:`joiner.domain.costs`) is added to every offering's price.

        Types whose allocatable CPU, memory or pods is not positive (e.g. a large
        ``systemReserved`` on a nano) can host nothing and are left out. Raises
        :class:`CatalogError` for a malformed eviction threshold.
        """
        key = (_kubelet_key(kubelet), root_volume_bytes, instance_store_policy, node_cost_per_hour)
        with self._lock:
            cached = self._memo.get(key)
            if cached is not None:
                self._memo.move_to_end(key)
                return cached
            built = self._build(kubelet, root_volume_bytes, instance_store_policy, node_cost_per_hour)
            self._memo[key] = built
            self._by_name[key] = {it.name: it for it in built}
            while len(self._memo) > _MEMO_SIZE:
                evicted, _ = self._memo.popitem(last=False)
                self._by_name.pop(evicted, None)
            return built

    def instance_type(
        self,
        name: str,
        kubelet: KubeletConfig = KubeletConfig(),
        *,
        root_volume_bytes: int = DEFAULT_ROOT_VOLUME_BYTES,
        instance_store_policy: str | None = None,
        node_cost_per_hour: float = 0.0,
    ) -> InstanceType | None:
        """One type from the memoised :meth:`instance_types` (None if unknown or unusable)."""
        self.instance_types(kubelet, root_volume_bytes=root_volume_bytes, instance_store_policy=instance_store_policy, node_cost_per_hour=node_cost_per_hour)
        with self._lock:
            by_name = self._by_name.get((_kubelet_key(kubelet), root_volume_bytes, instance_store_policy, node_cost_per_hour))
        if by_name is None:  # evicted by a concurrent caller in between: rebuild once
            return {it.name: it for it in self._build(kubelet, root_volume_bytes, instance_store_policy, node_cost_per_hour)}.get(name)
        return by_name.get(name)

    def for_node_class(self, node_class: NodeClass) -> tuple[InstanceType, ...]:
        """:meth:`instance_types` as the NodeClass makes them: its kubelet settings, root volume
        (:func:`root_volume_size`) and ``instanceStorePolicy``, offerings priced with its volumes
        (:func:`joiner.domain.costs.block_device_cost_per_hour`)."""
        return self.instance_types(
            node_class.kubelet,
            root_volume_bytes=root_volume_size(node_class),
            instance_store_policy=node_class.instance_store_policy,
            node_cost_per_hour=block_device_cost_per_hour(node_class),
        )

    def type_for_node_class(self, name: str, node_class: NodeClass) -> InstanceType | None:
        """One type of :meth:`for_node_class` (None if unknown or unusable)."""
        return self.instance_type(
            name,
            node_class.kubelet,
            root_volume_bytes=root_volume_size(node_class),
            instance_store_policy=node_class.instance_store_policy,
            node_cost_per_hour=block_device_cost_per_hour(node_class),
        )

    def _build(
        self, kubelet: KubeletConfig, root_volume_bytes: int, instance_store_policy: str | None = None, node_cost_per_hour: float = 0.0
    ) -> tuple[InstanceType, ...]:
        node_cost = _check_price(node_cost_per_hour, "node cost per hour")
        if root_volume_bytes <= 0:
            raise CatalogError(f"root volume size must be positive, got {root_volume_bytes}")
        if instance_store_policy is not None and instance_store_policy not in INSTANCE_STORE_POLICIES:
            raise CatalogError(f"instanceStorePolicy: expected one of {', '.join(INSTANCE_STORE_POLICIES)}, got {instance_store_policy!r}")
        requirements = self._all_requirements()
        result = []
        for name, entry in self._entries.items():
            if isinstance(entry, InstanceTypeInfo):
                capacity = eks_capacity(entry, kubelet, root_volume_bytes, instance_store_policy)
                overhead = eks_overhead(
                    capacity[CPU],
                    _bytes(capacity[MEMORY]),
                    _bytes(capacity[EPHEMERAL_STORAGE]),
                    eni_limited_pods(entry.max_enis, entry.ipv4_per_eni),
                    kubelet,
                )
            elif entry.overhead is not None:
                capacity, overhead = entry.capacity, entry.overhead
            else:
                storage = ephemeral_storage_bytes(_declared_local_nvme_gb(entry), instance_store_policy, root_volume_bytes)
                capacity, overhead = _declared_capacity_and_overhead(entry.capacity, kubelet, storage, name)
            allocatable = capacity - overhead
            if allocatable[CPU] <= 0 or allocatable[MEMORY] <= 0 or allocatable[PODS] <= 0:
                continue
            offerings = self._offerings[name]
            if node_cost:
                offerings = tuple(Offering(o.zone, o.capacity_type, o.price + node_cost, o.available) for o in offerings)
            result.append(InstanceType(name, capacity, overhead, requirements[name], offerings))
        return tuple(result)

    def with_spot_prices(self, prices: Mapping[tuple[str, str], float]) -> Catalog:
        """A catalog with spot offerings for the given ``(instance type, zone)`` prices.

        A given price replaces any spot offering already held for that pair; other
        offerings are kept. Pairs for unknown types, for types EC2 does not offer as spot,
        or for zones the type is not offered in are ignored (spot price history covers
        more than a catalog).
        """
        offerings = {name: list(items) for name, items in self._offerings.items()}
        for (name, zone), price in sorted(prices.items()):
            entry = self._entries.get(name)
            if entry is None:
                continue
            if isinstance(entry, InstanceTypeInfo) and (wk.CAPACITY_TYPE_SPOT not in entry.usage_classes or zone not in entry.zones):
                continue
            value = _check_price(price, f"spot price for {name} in {zone}")
            kept = [o for o in offerings[name] if not (o.capacity_type == wk.CAPACITY_TYPE_SPOT and o.zone == zone)]
            kept.append(Offering(zone, wk.CAPACITY_TYPE_SPOT, value))
            offerings[name] = kept
        return Catalog(self.infos, offerings, declared=self.declared, region=self.region, price_source=self.price_source, zone_ids=self.zone_ids)

    def with_price_source(self, price_source: str) -> Catalog:
        """The same catalog marked with where its on-demand prices came from."""
        return Catalog(self.infos, self._offerings, declared=self.declared, region=self.region, price_source=price_source, zone_ids=self.zone_ids)

    def with_zone_ids(self, zone_ids: Mapping[str, str]) -> Catalog:
        """The same catalog with these zone ids (zone name -> ``use1-az4``)."""
        return Catalog(self.infos, self._offerings, declared=self.declared, region=self.region, price_source=self.price_source, zone_ids=zone_ids)

    def missing_message(self, name: str) -> str:
        """Why ``name`` cannot be used, for a requirement that names it."""
        return f"instance type {name} is not in the {self.region or 'given'} catalog"


def _declared_local_nvme_gb(entry: DeclaredInstanceType) -> int:
    """The instance-store NVMe GB a catalog file entry states in its
    ``karpenter.k8s.aws/instance-local-nvme`` label (0 when absent or not a whole number)."""
    value = next((v for k, v in entry.labels if wk.normalize_label_key(k) == wk.INSTANCE_LOCAL_NVME), "")
    return int(value) if value.isdigit() else 0


def _declared_capacity_and_overhead(capacity: Resources, kubelet: KubeletConfig, root_volume_bytes: int, name: str) -> tuple[Resources, Resources]:
    """EKS formulas for a declared entry: its ``pods`` plays the ENI-limited count; an EC2
    type name not given ``vpc.amazonaws.com/pod-eni`` gets the type's branch interfaces."""
    values = dict(capacity.items())
    values.setdefault(EPHEMERAL_STORAGE, root_volume_bytes * 1000)
    if POD_ENI not in values and pod_eni_limits().get(name):
        values[POD_ENI] = pod_eni_limits()[name] * 1000
    base_pods = values.get(PODS, DEFAULT_MAX_PODS * 1000) // 1000
    values[PODS] = max_pods(values[CPU] // 1000, base_pods, kubelet) * 1000
    overhead = eks_overhead(values[CPU], _bytes(values[MEMORY]), _bytes(values[EPHEMERAL_STORAGE]), base_pods, kubelet)
    return Resources(values), overhead


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------

INFO_FIELDS = {
    "name": "name",
    "vcpus": "vcpus",
    "memoryMiB": "memory_mib",
    "architectures": "architectures",
    "maxENIs": "max_enis",
    "ipv4PerENI": "ipv4_per_eni",
    "hypervisor": "hypervisor",
    "bareMetal": "bare_metal",
    "cpuManufacturer": "cpu_manufacturer",
    "gpuCount": "gpu_count",
    "gpuName": "gpu_name",
    "gpuManufacturer": "gpu_manufacturer",
    "gpuMemoryMiB": "gpu_memory_mib",
    "gpuKinds": "gpu_kinds",
    "neuronCount": "neuron_count",
    "neuronCores": "neuron_cores",
    "neuronName": "neuron_name",
    "efaCount": "efa_count",
    "usageClasses": "usage_classes",
    "zones": "zones",
    "onDemandPrice": "on_demand_price",
    "cpuClockMHz": "cpu_clock_mhz",
    "ebsBandwidthMbps": "ebs_bandwidth_mbps",
    "networkBandwidthMbps": "network_bandwidth_mbps",
    "localNvmeGiB": "local_nvme_gib",
    "encryptionInTransit": "encryption_in_transit",
    "acceleratorName": "accelerator_name",
    "acceleratorManufacturer": "accelerator_manufacturer",
    "acceleratorCount": "accelerator_count",
    "nitroEnclaves": "nitro_enclaves",
}
_TUPLE_FIELDS = frozenset({"architectures", "usage_classes", "zones"})


def _info_from_bundled(raw: Mapping[str, Any]) -> InstanceTypeInfo:
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        attribute = INFO_FIELDS.get(key)
        if attribute is None:
            raise CatalogError(f"bundled catalog entry {raw.get('name')!r}: unknown field {key!r}")
        kwargs[attribute] = tuple(value) if attribute in _TUPLE_FIELDS else value
    return InstanceTypeInfo(**kwargs)


_BUNDLED: dict[str, Catalog] = {}
_BUNDLED_LOCK = threading.Lock()


def load_bundled_catalog(region: str = "us-east-1") -> Catalog:
    """The offline catalog shipped in ``joiner/data`` (on-demand offerings only).

    Cached per region for the life of the process, so a warm Lambda reuses both the
    catalog and its memoised instance types.
    """
    with _BUNDLED_LOCK:
        catalog = _BUNDLED.get(region)
        if catalog is None:
            catalog = _BUNDLED[region] = _read_bundled(region)
        return catalog


def _read_bundled(region: str) -> Catalog:
    resource = importlib_resources.files("joiner").joinpath("data", f"catalog-{region}.json.gz")
    try:
        payload = resource.read_bytes()
    except (FileNotFoundError, OSError):
        raise CatalogError(f"no bundled catalog for region {region!r} (bundled: {', '.join(BUNDLED_REGIONS)})") from None
    return catalog_from_bundled_document(json.loads(gzip.decompress(payload)))


def catalog_from_bundled_document(document: Mapping[str, Any]) -> Catalog:
    """A catalog from the bundled format ``scripts/build_catalog.py`` writes (raw facts)."""
    if document.get("format") != _BUNDLED_FORMAT:
        raise CatalogError(f"bundled catalog: unsupported format {document.get('format')!r} (expected {_BUNDLED_FORMAT})")
    infos = [_info_from_bundled(raw) for raw in document["instanceTypes"]]
    return Catalog(infos, region=document.get("region"))


def load_catalog_file(path_or_text: str | os.PathLike[str]) -> Catalog:
    """A catalog from a YAML or JSON catalog file, given as a path or as its text.

    A ``str`` is read as a path when it names an existing file and has no newline;
    otherwise it is the document itself. See docs/catalog.md for the format.
    """
    if isinstance(path_or_text, os.PathLike):
        text = _read(Path(path_or_text))
    elif isinstance(path_or_text, str):
        candidate = path_or_text.strip()
        if candidate and "\n" not in candidate and not candidate.startswith(("{", "[")) and Path(candidate).is_file():
            text = _read(Path(candidate))
        else:
            text = path_or_text
    else:
        raise CatalogError(f"expected a path or the catalog text, got {type(path_or_text).__name__}")
    return parse_catalog(_parse_text(text))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CatalogError(f"cannot read catalog file {str(path)!r}: {getattr(error, 'strerror', None) or error}") from None


def _parse_text(text: str) -> Any:
    """JSON or YAML within :data:`joiner.domain.bounded.DEFAULT_LIMITS` (YAML is imported
    only here: keep it off the Lambda cold-start path)."""
    from joiner.domain.bounded import InputError, load_json, load_yaml

    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return load_json(text)
        except InputError as error:
            raise CatalogError(str(error)) from None
    try:
        return load_yaml(text)
    except InputError as error:
        raise CatalogError(f"not valid YAML: {error}") from None


_TOP_LEVEL_KEYS = frozenset({"instanceTypes", "region", "zoneIds"})
_ENTRY_KEYS = frozenset({"name", "capacity", "overhead", "labels", "offerings"})
_OFFERING_KEYS = frozenset({"zone", "capacityType", "price", "available"})


def _unknown(mapping: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    extra = sorted(str(k) for k in mapping if k not in allowed)
    if extra:
        raise CatalogError(f"{where}: unknown field {extra[0]!r} (expected {', '.join(sorted(allowed))})")


def _resources(value: Any, where: str) -> Resources:
    if not isinstance(value, Mapping):
        raise CatalogError(f"{where}: expected a mapping of resource name to quantity")
    try:
        parsed = Resources.parse(value, where=where)
    except QuantityError as error:
        raise CatalogError(str(error)) from None
    negative = sorted(name for name, amount in parsed.items() if amount < 0)
    if negative:
        raise CatalogError(f"{where}.{negative[0]}: must not be negative")
    return parsed


def parse_catalog(document: Any) -> Catalog:
    """A catalog from an already-parsed catalog file document."""
    if not isinstance(document, Mapping):
        raise CatalogError("expected a mapping with an 'instanceTypes' list")
    _unknown(document, _TOP_LEVEL_KEYS, "catalog")
    region = document.get("region")
    if region is not None and (not isinstance(region, str) or not region):
        raise CatalogError(f"region: expected a non-empty string, got {region!r}")
    zone_ids = document.get("zoneIds") or {}
    if not isinstance(zone_ids, Mapping) or not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in zone_ids.items()):
        raise CatalogError(f"zoneIds: expected a mapping of zone name to zone id, got {zone_ids!r}")
    entries = document.get("instanceTypes")
    if not isinstance(entries, list) or not entries:
        raise CatalogError("instanceTypes: expected a non-empty list")
    declared: list[DeclaredInstanceType] = []
    offerings: dict[str, list[Offering]] = {}
    for index, raw in enumerate(entries):
        where = f"instanceTypes[{index}]"
        if not isinstance(raw, Mapping):
            raise CatalogError(f"{where}: expected a mapping")
        name = raw.get("name")
        if not isinstance(name, str) or not name.strip():
            raise CatalogError(f"{where}.name: expected a non-empty string, got {name!r}")
        where = f"{where} ({name})"
        _unknown(raw, _ENTRY_KEYS, where)
        if name in offerings:
            raise CatalogError(f"{where}.name: instance type {name!r} is defined twice")
        if "capacity" not in raw:
            raise CatalogError(f"{where}.capacity: required")
        capacity = _resources(raw["capacity"], f"{where}.capacity")
        for required in (CPU, MEMORY):
            if capacity[required] <= 0:
                raise CatalogError(f"{where}.capacity.{required}: required and must be positive")
        if PODS not in capacity:
            capacity = capacity + {PODS: DEFAULT_MAX_PODS * 1000}
        overhead = None
        if raw.get("overhead") is not None:
            overhead = _resources(raw["overhead"], f"{where}.overhead")
            bad = sorted(n for n, v in (capacity - overhead).items() if v < 0)
            if bad:
                raise CatalogError(f"{where}.overhead.{bad[0]}: exceeds capacity.{bad[0]}")
        labels = raw.get("labels") or {}
        if not isinstance(labels, Mapping):
            raise CatalogError(f"{where}.labels: expected a mapping of label key to value")
        label_pairs = []
        for key, value in labels.items():
            if not isinstance(key, str) or not key:
                raise CatalogError(f"{where}.labels: keys must be non-empty strings, got {key!r}")
            if isinstance(value, bool):
                value = "true" if value else "false"
            if not isinstance(value, (str, int)):
                raise CatalogError(f"{where}.labels.{key}: expected a string, got {value!r}")
            label_pairs.append((key, str(value)))
        offerings[name] = _parse_offerings(raw.get("offerings"), f"{where}.offerings")
        declared.append(DeclaredInstanceType(name, capacity, overhead, tuple(sorted(label_pairs))))
    return Catalog(declared=declared, offerings=offerings, region=region, zone_ids=zone_ids)


def _parse_offerings(raw: Any, where: str) -> list[Offering]:
    if not isinstance(raw, list) or not raw:
        raise CatalogError(f"{where}: expected a non-empty list of {{zone, capacityType, price}}")
    result: list[Offering] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        if not isinstance(item, Mapping):
            raise CatalogError(f"{at}: expected a mapping")
        _unknown(item, _OFFERING_KEYS, at)
        zone = item.get("zone")
        if not isinstance(zone, str) or not zone:
            raise CatalogError(f"{at}.zone: expected a non-empty string, got {zone!r}")
        capacity_type = item.get("capacityType")
        if capacity_type not in CAPACITY_TYPES:
            raise CatalogError(f"{at}.capacityType: expected one of {', '.join(CAPACITY_TYPES)}, got {capacity_type!r}")
        if "price" not in item:
            raise CatalogError(f"{at}.price: required")
        price = _check_price(item["price"], f"{at}.price")
        available = item.get("available", True)
        if not isinstance(available, bool):
            raise CatalogError(f"{at}.available: expected true or false, got {available!r}")
        if (zone, capacity_type) in seen:
            raise CatalogError(f"{at}: duplicate offering for {zone} {capacity_type}")
        seen.add((zone, capacity_type))
        result.append(Offering(zone, capacity_type, price, available))
    return result
