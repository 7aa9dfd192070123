"""The instance catalog: EKS formulas, the bundled us-east-1 catalog, catalog files, spot overlay."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain import labels as wk
from joiner.domain.catalog import (
    Catalog,
    CatalogError,
    DeclaredInstanceType,
    InstanceTypeInfo,
    catalog_from_bundled_document,
    eks_capacity,
    eni_limited_pods,
    eviction_signal_bytes,
    kube_reserved_cpu_milli,
    kube_reserved_memory_mib,
    load_bundled_catalog,
    load_catalog_file,
    max_pods,
    vm_memory_capacity_mib,
)
from joiner.domain.model import KubeletConfig, Offering
from joiner.domain.requirements import Requirements
from joiner.domain.resources import Resources

REPO = Path(__file__).resolve().parents[2]
MI = 2**20 * 1000  # one MiB in milli-units
GI = 2**30 * 1000


@pytest.fixture(scope="module")
def bundled() -> Catalog:
    return load_bundled_catalog()


def alloc(catalog: Catalog, name: str, kubelet: KubeletConfig = KubeletConfig()) -> dict[str, str]:
    it = catalog.instance_type(name, kubelet)
    assert it is not None, name
    return it.allocatable.as_quantities()


# --- formulas against known EKS values -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "pods"),
    [("m5.large", 29), ("c5.large", 29), ("c5.2xlarge", 58), ("m5.xlarge", 58), ("t3.small", 11), ("t3.nano", 4), ("c5.4xlarge", 234), ("p5.48xlarge", 100)],
)
def test_eni_limited_max_pods_match_eks(bundled: Catalog, name: str, pods: int) -> None:
    info = bundled.info(name)
    assert info is not None
    assert eni_limited_pods(info.max_enis, info.ipv4_per_eni) == pods
    assert bundled.instance_type(name).capacity["pods"] == pods * 1000


def test_eni_limited_pods_formula_and_reserved_enis() -> None:
    assert eni_limited_pods(3, 10) == 29
    assert eni_limited_pods(3, 10, reserved_enis=1) == 20
    assert eni_limited_pods(1, 10, reserved_enis=1) == 0


@pytest.mark.parametrize(
    ("cpu_milli", "reserved"),
    [(500, 30), (1000, 60), (2000, 70), (3000, 75), (4000, 80), (8000, 90), (16000, 110), (36000, 160), (96000, 310)],
)
def test_kube_reserved_cpu_bands(cpu_milli: int, reserved: int) -> None:
    assert kube_reserved_cpu_milli(cpu_milli) == reserved


def test_kube_reserved_memory() -> None:
    assert kube_reserved_memory_mib(29) == 574
    assert kube_reserved_memory_mib(58) == 893
    assert kube_reserved_memory_mib(110) == 1465


def test_vm_memory_overhead_and_graviton_cma() -> None:
    assert vm_memory_capacity_mib(4096) == 4096 - 308  # ceil(307.2)
    assert vm_memory_capacity_mib(16384) == 16384 - 1229
    assert vm_memory_capacity_mib(4096, "arm64") == 4032 - 303  # 64 MiB CMA first, then ceil(302.4)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # Karpenter's published instance-types reference (website/content/en/docs/reference/instance-types.md)
        ("c5.large", {"cpu": "1930m", "ephemeral-storage": "17Gi", "memory": "3114Mi", "pods": "29", "vpc.amazonaws.com/pod-eni": "9"}),
        ("c5.2xlarge", {"cpu": "7910m", "ephemeral-storage": "17Gi", "memory": "14162Mi", "pods": "58", "vpc.amazonaws.com/pod-eni": "38"}),
        ("c4.8xlarge", {"cpu": "35840m", "ephemeral-storage": "17Gi", "memory": "53903Mi", "pods": "234"}),
        ("a1.large", {"cpu": "1930m", "ephemeral-storage": "17Gi", "memory": "3055Mi", "pods": "29", "vpc.amazonaws.com/pod-eni": "9"}),
        ("a1.metal", {"cpu": "15890m", "ephemeral-storage": "17Gi", "memory": "27322Mi", "pods": "234", "vpc.amazonaws.com/pod-eni": "54"}),
    ],
)
def test_allocatable_matches_karpenter_reference(bundled: Catalog, name: str, expected: dict[str, str]) -> None:
    assert alloc(bundled, name) == expected


def test_extended_resources(bundled: Catalog) -> None:
    g4dn = bundled.instance_type("g4dn.xlarge")
    assert g4dn.capacity["nvidia.com/gpu"] == 1000
    assert g4dn.allocatable["nvidia.com/gpu"] == 1000
    inf2 = bundled.instance_type("inf2.xlarge")
    assert inf2.capacity["aws.amazon.com/neuron"] == 1000
    assert inf2.capacity["aws.amazon.com/neuroncore"] == 2000
    p5 = bundled.instance_type("p5.48xlarge")
    assert p5.capacity["nvidia.com/gpu"] == 8000
    assert p5.capacity["vpc.amazonaws.com/efa"] == 32000
    c5 = bundled.instance_type("c5.large")
    assert "nvidia.com/gpu" not in c5.capacity and "vpc.amazonaws.com/efa" not in c5.capacity


# --- kubelet settings ----------------------------------------------------------------------


def test_max_pods_and_pods_per_core(bundled: Catalog) -> None:
    assert max_pods(2, 29, KubeletConfig(max_pods=110)) == 110
    assert max_pods(2, 29, KubeletConfig(pods_per_core=4)) == 8
    assert max_pods(2, 29, KubeletConfig(max_pods=110, pods_per_core=40)) == 80
    assert max_pods(2, 29, KubeletConfig(pods_per_core=0)) == 29
    it = bundled.instance_type("c5.large", KubeletConfig(max_pods=110))
    assert it.capacity["pods"] == 110_000
    # nodeadm sizes kube-reserved memory from the ENI-limited count before maxPods is merged in.
    assert it.allocatable["memory"] == 3114 * MI
    assert bundled.instance_type("c5.large", KubeletConfig(pods_per_core=5)).capacity["pods"] == 10_000


def test_kube_reserved_overrides_per_resource(bundled: Catalog) -> None:
    kubelet = KubeletConfig(kube_reserved=Resources.parse({"memory": "1Gi"}))
    it = bundled.instance_type("c5.large", kubelet)
    assert it.allocatable["memory"] == (3788 - 1024 - 100) * MI
    assert it.allocatable["cpu"] == 1930  # CPU keeps the formula
    explicit_zero = bundled.instance_type("c5.large", KubeletConfig(kube_reserved=Resources.keeping_zeros({"cpu": 0})))
    assert explicit_zero.allocatable["cpu"] == 2000 and explicit_zero.allocatable["memory"] == 3114 * MI


def test_system_reserved_adds(bundled: Catalog) -> None:
    kubelet = KubeletConfig(system_reserved=Resources.parse({"cpu": "100m", "memory": "200Mi"}))
    assert alloc(bundled, "c5.large", kubelet) == {
        "cpu": "1830m",
        "ephemeral-storage": "17Gi",
        "memory": "2914Mi",
        "pods": "29",
        "vpc.amazonaws.com/pod-eni": "9",
    }


def test_eviction_hard_absolute_and_percentages(bundled: Catalog) -> None:
    absolute = bundled.instance_type("c5.large", KubeletConfig(eviction_hard={"memory.available": "500Mi"}))
    assert absolute.allocatable["memory"] == (3788 - 574 - 500) * MI
    percent = bundled.instance_type("c5.large", KubeletConfig(eviction_hard={"memory.available": "5%", "nodefs.available": "15%"}))
    assert percent.overhead["memory"] == 574 * MI + math.ceil(3788 * 2**20 / 100 * 5) * 1000
    assert percent.allocatable["ephemeral-storage"] == 20 * GI - GI - 3 * GI
    disabled = bundled.instance_type("c5.large", KubeletConfig(eviction_hard={"memory.available": "100%"}))
    assert disabled.allocatable["memory"] == (3788 - 574) * MI


@pytest.mark.parametrize("value", ["lots", "-5%", "150%", "-1Mi", "x%"])
def test_bad_eviction_threshold_names_the_field(bundled: Catalog, value: str) -> None:
    with pytest.raises(CatalogError, match=r"kubelet\.evictionHard\.memory\.available"):
        bundled.instance_types(KubeletConfig(eviction_hard={"memory.available": value}))


def test_eviction_signal_bytes() -> None:
    assert eviction_signal_bytes(1000, "10%") == 100
    assert eviction_signal_bytes(1001, "10%") == 101
    assert eviction_signal_bytes(5, "1Ki") == 1024


def test_root_volume_size_sets_ephemeral_storage(bundled: Catalog) -> None:
    it = bundled.instance_type("c5.large", root_volume_bytes=100 * 2**30)
    assert it.capacity["ephemeral-storage"] == 100 * GI
    assert it.allocatable["ephemeral-storage"] == 89 * GI  # less 1Gi kube-reserved and 10%


def test_types_that_cannot_host_anything_are_left_out(bundled: Catalog) -> None:
    greedy = KubeletConfig(system_reserved=Resources.parse({"memory": "2Gi"}))
    names = {it.name for it in bundled.instance_types(greedy)}
    assert "t3.nano" not in names and "t3.small" not in names and "c5.large" in names
    assert bundled.instance_type("t3.nano", greedy) is None


# --- memoisation ---------------------------------------------------------------------------


def test_instance_types_memoised_per_equal_kubelet_config(bundled: Catalog) -> None:
    first = bundled.instance_types(KubeletConfig(max_pods=50, eviction_hard={"memory.available": "200Mi", "nodefs.available": "5%"}))
    again = bundled.instance_types(KubeletConfig(max_pods=50, eviction_hard={"nodefs.available": "5%", "memory.available": "200Mi"}))
    assert again is first
    other = bundled.instance_types(KubeletConfig(max_pods=51))
    assert other is not first
    assert bundled.instance_types() is bundled.instance_types(KubeletConfig())
    by_name = bundled.instance_type("c5.large", KubeletConfig(max_pods=50, eviction_hard={"memory.available": "200Mi", "nodefs.available": "5%"}))
    assert any(it is by_name for it in first)


def test_bundled_catalog_is_cached() -> None:
    assert load_bundled_catalog() is load_bundled_catalog("us-east-1")


# --- bundled catalog sanity ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "vcpus", "memory_mib", "price"),
    [("c5.large", 2, 4096, 0.085), ("c5.2xlarge", 8, 16384, 0.34), ("m5.large", 2, 8192, 0.096), ("m5.2xlarge", 8, 32768, 0.384)],
)
def test_bundled_core_types(bundled: Catalog, name: str, vcpus: int, memory_mib: int, price: float) -> None:
    info = bundled.info(name)
    assert (info.vcpus, info.memory_mib, info.on_demand_price, info.architectures) == (vcpus, memory_mib, price, ("amd64",))
    offerings = bundled.offerings(name)
    assert len(offerings) >= 3
    assert {o.zone for o in offerings} <= {f"us-east-1{letter}" for letter in "abcdef"}
    assert all(o.capacity_type == "on-demand" and o.price == price and o.available for o in offerings)


def test_bundled_catalog_shape(bundled: Catalog) -> None:
    types = bundled.instance_types()
    assert len(bundled) > 500 and len(types) > 500
    assert [it.name for it in types] == sorted(it.name for it in types)
    assert bundled.region == "us-east-1"
    for it in types:
        assert it.offerings, it.name
        assert all(o.capacity_type == "on-demand" for o in it.offerings), "offline catalog must not invent spot prices"
        assert it.requirements[wk.CAPACITY_TYPE].values == {"on-demand"}
        assert it.requirements[wk.ZONE].values == {o.zone for o in it.offerings}
        assert not it.allocatable.any_negative(), it.name
    archs = {it.requirements[wk.ARCH].single_value() for it in types}
    assert archs == {"amd64", "arm64"}


def test_unknown_bundled_region() -> None:
    with pytest.raises(CatalogError, match="eu-west-9"):
        load_bundled_catalog("eu-west-9")


def test_bundled_file_is_small() -> None:
    path = REPO / "layers/joiner/python/joiner/data/catalog-us-east-1.json.gz"
    assert path.stat().st_size < 600_000


# --- labels and requirements ---------------------------------------------------------------


def test_labels_of_c5_2xlarge(bundled: Catalog) -> None:
    labels = bundled.instance_type("c5.2xlarge").requirements.labels()
    assert labels == {
        wk.ARCH: "amd64",
        wk.OS: "linux",
        wk.INSTANCE_TYPE: "c5.2xlarge",
        wk.REGION: "us-east-1",
        wk.INSTANCE_FAMILY: "c5",
        wk.INSTANCE_CATEGORY: "c",
        wk.INSTANCE_GENERATION: "5",
        wk.INSTANCE_SIZE: "2xlarge",
        wk.INSTANCE_CPU: "8",
        wk.INSTANCE_MEMORY: "16384",
        wk.INSTANCE_HYPERVISOR: "nitro",
        wk.CAPACITY_TYPE: "on-demand",
        # Karpenter's documented values for c5.2xlarge (website instance-types reference)
        wk.INSTANCE_CPU_MANUFACTURER: "intel",
        wk.INSTANCE_CPU_CLOCK: "3400",
        wk.INSTANCE_EBS_BANDWIDTH: "4750",
        wk.INSTANCE_NETWORK_BANDWIDTH: "2500",
        wk.INSTANCE_ENCRYPTION_IN_TRANSIT: "false",
        wk.INSTANCE_CAPABILITY_FLEX: "false",
        wk.INSTANCE_NITRO_ENCLAVES: "true",
    }


def test_every_karpenter_instance_label_is_known_and_set_where_karpenter_sets_it(bundled: Catalog) -> None:
    """Values as Karpenter's own test expects for g4dn.8xlarge, and Inferentia accelerator labels."""
    karpenter = {
        "karpenter.k8s.aws/instance-encryption-in-transit-supported": "true",
        "karpenter.k8s.aws/instance-cpu-manufacturer": "intel",
        "karpenter.k8s.aws/instance-ebs-bandwidth": "9500",
        "karpenter.k8s.aws/instance-network-bandwidth": "50000",
        "karpenter.k8s.aws/instance-gpu-name": "t4",
        "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
        "karpenter.k8s.aws/instance-gpu-count": "1",
        "karpenter.k8s.aws/instance-gpu-memory": "16384",
        "karpenter.k8s.aws/instance-local-nvme": "900",
        "karpenter.k8s.aws/instance-memory": "131072",
    }
    labels = bundled.instance_type("g4dn.8xlarge").requirements.labels()
    for key, value in karpenter.items():
        assert key in wk.KARPENTER_ALIASES and wk.normalize_label_key(key) in wk.WELL_KNOWN_LABELS
        assert labels[wk.normalize_label_key(key)] == value, key
    inf = bundled.instance_type("inf2.xlarge").requirements.labels()
    assert (inf[wk.INSTANCE_ACCELERATOR_NAME], inf[wk.INSTANCE_ACCELERATOR_MANUFACTURER], inf[wk.INSTANCE_ACCELERATOR_COUNT]) == ("inferentia2", "aws", "1")
    wants_nvme = Requirements.from_node_selector_terms([{"key": "karpenter.k8s.aws/instance-local-nvme", "operator": "Gt", "values": ["100"]}])
    assert labels_requirements(bundled, "i3.large").compatible(wants_nvme) is None
    assert labels_requirements(bundled, "c5.large").compatible(wants_nvme) is not None


def labels_requirements(catalog: Catalog, name: str) -> Requirements:
    return catalog.instance_type(name).requirements


def test_gpu_metal_and_odd_name_labels(bundled: Catalog) -> None:
    g4dn = bundled.instance_type("g4dn.xlarge").requirements.labels()
    assert (g4dn[wk.INSTANCE_GPU_COUNT], g4dn[wk.INSTANCE_GPU_NAME]) == ("1", "t4")
    assert bundled.instance_type("a1.metal").requirements.labels()[wk.INSTANCE_HYPERVISOR] == ""
    assert bundled.instance_type("m6g.large").requirements.labels()[wk.ARCH] == "arm64"
    flex = bundled.instance_type("c7i-flex.large").requirements.labels()
    assert (flex[wk.INSTANCE_FAMILY], flex[wk.INSTANCE_CATEGORY], flex[wk.INSTANCE_GENERATION]) == ("c7i-flex", "c", "7")
    high_memory = bundled.instance_type("u-6tb1.56xlarge").requirements.labels()
    assert (high_memory[wk.INSTANCE_CATEGORY], high_memory[wk.INSTANCE_GENERATION]) == ("u", "1")


def test_absent_attributes_do_not_match_positive_requirements(bundled: Catalog) -> None:
    wants_t4 = Requirements.from_node_selector_terms([{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["t4"]}])
    wants_any_gpu = Requirements.from_node_selector_terms([{"key": wk.INSTANCE_GPU_COUNT, "operator": "Exists"}])
    avoids_t4 = Requirements.from_node_selector_terms([{"key": wk.INSTANCE_GPU_NAME, "operator": "NotIn", "values": ["t4"]}])
    c5 = bundled.instance_type("c5.large").requirements
    g4dn = bundled.instance_type("g4dn.xlarge").requirements
    assert c5.compatible(wants_t4) is not None and c5.compatible(wants_any_gpu) is not None
    assert g4dn.compatible(wants_t4) is None and g4dn.compatible(wants_any_gpu) is None
    assert c5.compatible(avoids_t4) is None and g4dn.compatible(avoids_t4) is not None
    numeric = Requirements.from_node_selector_terms([{"key": wk.INSTANCE_CPU, "operator": "Gt", "values": ["4"]}])
    assert c5.compatible(numeric) is not None and bundled.instance_type("c5.2xlarge").requirements.compatible(numeric) is None


# --- catalog files -------------------------------------------------------------------------

SMALL = """
region: us-east-1
instanceTypes:
  - name: c5.large
    capacity: {cpu: 2, memory: 3788Mi, pods: 29}
    offerings:
      - {zone: us-east-1a, capacityType: on-demand, price: 0.085}
      - {zone: us-east-1b, capacityType: spot, price: 0.03, available: false}
      - {zone: us-east-1a, capacityType: spot, price: 0.031}
  - name: box.fixed
    capacity: {cpu: "4", memory: 8Gi, pods: "20", example.com/widget: "3"}
    overhead: {cpu: 500m, memory: 1Gi}
    labels: {karpenter.k8s.aws/instance-hypervisor: nitro, kubernetes.io/arch: arm64, team: a}
    offerings:
      - {zone: zone-1, capacityType: on-demand, price: 1}
"""


def test_catalog_file_formula_mode_matches_bundled(bundled: Catalog) -> None:
    catalog = load_catalog_file(SMALL)
    c5 = catalog.instance_type("c5.large")
    assert c5.allocatable == bundled.instance_type("c5.large").allocatable
    assert c5.requirements[wk.ZONE].values == {"us-east-1a"}  # the unavailable offering's zone is not offered
    assert c5.requirements[wk.CAPACITY_TYPE].values == {"on-demand", "spot"}
    assert c5.requirements.labels()[wk.INSTANCE_FAMILY] == "c5"
    assert c5.cheapest_offering() == Offering("us-east-1a", "spot", 0.031)
    capped = catalog.instance_type("c5.large", KubeletConfig(max_pods=10))
    assert capped.capacity["pods"] == 10_000 and capped.allocatable["memory"] == c5.allocatable["memory"]


def test_catalog_file_verbatim_overhead_and_labels() -> None:
    catalog = load_catalog_file(SMALL)
    fixed = catalog.instance_type("box.fixed", KubeletConfig(max_pods=5, system_reserved=Resources.parse({"cpu": "1"})))
    assert fixed.allocatable.as_quantities() == {"cpu": "3500m", "example.com/widget": "3", "memory": "7Gi", "pods": "20"}
    labels = fixed.requirements.labels()
    assert labels[wk.ARCH] == "arm64" and labels[wk.INSTANCE_HYPERVISOR] == "nitro" and labels["team"] == "a"
    assert labels[wk.OS] == "linux" and labels[wk.INSTANCE_CPU] == "4" and labels[wk.REGION] == "us-east-1"
    assert fixed.requirements[wk.INSTANCE_GPU_NAME].is_empty()


def test_catalog_file_from_path_json_and_defaults(tmp_path: Path) -> None:
    document = {
        "instanceTypes": [{"name": "x.large", "capacity": {"cpu": "2", "memory": "4Gi"}, "offerings": [{"zone": "z", "capacityType": "spot", "price": 0.5}]}]
    }
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(document))
    for source in (path, str(path), json.dumps(document)):
        catalog = load_catalog_file(source)
        it = catalog.instance_type("x.large")
        assert it.capacity["pods"] == 110_000 and it.capacity["ephemeral-storage"] == 20 * GI
        assert it.requirements.labels()[wk.ARCH] == "amd64" and wk.REGION not in it.requirements
        assert catalog.offerings("x.large") == (Offering("z", "spot", 0.5, True),)


@pytest.mark.parametrize("example", sorted((REPO / "examples" / "catalogs").glob("*.*")), ids=lambda p: p.name)
def test_example_catalogs_load(example: Path, bundled: Catalog) -> None:
    catalog = load_catalog_file(example)
    assert len(catalog.instance_types()) == len(catalog) > 0
    for it in catalog.instance_types():
        if it.name in bundled and it.name != "g4dn.xlarge":  # formula-mode examples mirror the bundled facts
            assert it.allocatable == bundled.instance_type(it.name).allocatable, it.name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "expected a mapping with an 'instanceTypes' list"),
        ("instanceTypes: []", "instanceTypes: expected a non-empty list"),
        ("instanceTypes: [{name: a}]\nextra: 1", "catalog: unknown field 'extra'"),
        ("instanceTypes: [{capacity: {cpu: 1}}]", r"instanceTypes\[0\]\.name"),
        ("instanceTypes: [{name: a, offerings: [{zone: z, capacityType: spot, price: 1}]}]", r"instanceTypes\[0\] \(a\)\.capacity: required"),
        ("instanceTypes: [{name: a, capacity: {cpu: 1, memory: lots}}]", r"instanceTypes\[0\] \(a\)\.capacity\.memory: invalid quantity 'lots'"),
        ("instanceTypes: [{name: a, capacity: {cpu: 1}}]", r"\(a\)\.capacity\.memory: required and must be positive"),
        ("instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi, pods: -3}}]", r"\(a\)\.capacity\.pods: must not be negative"),
        (
            "instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, overhead: {memory: 2Gi}, offerings: [{zone: z, capacityType: spot, price: 1}]}]",
            r"\(a\)\.overhead\.memory: exceeds capacity",
        ),
        ("instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}}]", r"\(a\)\.offerings: expected a non-empty list"),
        (
            "instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{zone: z, capacityType: reserved, price: 1}]}]",
            r"\(a\)\.offerings\[0\]\.capacityType: expected one of on-demand, spot",
        ),
        (
            "instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{zone: z, capacityType: spot, price: -1}]}]",
            r"\(a\)\.offerings\[0\]\.price: expected a non-negative number",
        ),
        ("instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{zone: z, capacityType: spot, price: '0.1'}]}]", r"offerings\[0\]\.price"),
        ("instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{zone: z, capacityType: spot}]}]", r"offerings\[0\]\.price: required"),
        ("instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{capacityType: spot, price: 1}]}]", r"offerings\[0\]\.zone"),
        (
            "instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{zone: z, capacityType: spot, price: 1, available: 'no'}]}]",
            r"offerings\[0\]\.available",
        ),
        (
            "instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{zone: z, capacityType: spot, price: 1}, {zone: z, capacityType: spot, price: 2}]}]",
            r"offerings\[1\]: duplicate offering",
        ),
        (
            "instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, labels: {x: {y: z}}, offerings: [{zone: z, capacityType: spot, price: 1}]}]",
            r"\(a\)\.labels\.x: expected a string",
        ),
        ("instanceTypes: [{name: a, capacity: {cpu: 1, memory: 1Gi}, offering: []}]", r"\(a\): unknown field 'offering'"),
        (
            "instanceTypes:\n- {name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{zone: z, capacityType: spot, price: 1}]}\n- {name: a, capacity: {cpu: 1, memory: 1Gi}, offerings: [{zone: z, capacityType: spot, price: 1}]}",
            r"instanceTypes\[1\] \(a\)\.name: instance type 'a' is defined twice",
        ),
        ("instanceTypes: [unclosed", "not valid YAML"),
        ('{"instanceTypes": [}', "not valid JSON"),
    ],
)
def test_catalog_file_errors_name_entry_and_field(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        load_catalog_file(text)


def test_unreadable_catalog_path(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read catalog file"):
        load_catalog_file(tmp_path / "missing.yaml")


# --- spot overlay --------------------------------------------------------------------------


def test_with_spot_prices_overlays_real_prices(bundled: Catalog) -> None:
    spot = bundled.with_spot_prices(
        {
            ("c5.large", "us-east-1a"): 0.031,
            ("c5.large", "us-east-1e"): 0.02,  # c5.large is not offered in us-east-1e
            ("no.such", "us-east-1a"): 0.01,
        }
    )
    assert bundled.offerings("c5.large") and all(o.capacity_type == "on-demand" for o in bundled.offerings("c5.large"))
    c5 = spot.instance_type("c5.large")
    assert Offering("us-east-1a", "spot", 0.031) in c5.offerings
    assert not any(o.zone == "us-east-1e" for o in c5.offerings)
    assert c5.requirements[wk.CAPACITY_TYPE].values == {"on-demand", "spot"}
    assert c5.cheapest_offering() == Offering("us-east-1a", "spot", 0.031)
    on_demand_only = Requirements.from_labels({wk.CAPACITY_TYPE: "on-demand"})
    assert c5.cheapest_offering(on_demand_only).capacity_type == "on-demand"
    again = spot.with_spot_prices({("c5.large", "us-east-1a"): 0.05})
    assert [o for o in again.offerings("c5.large") if o.capacity_type == "spot"] == [Offering("us-east-1a", "spot", 0.05)]
    assert spot.instance_type("m5.large").requirements[wk.CAPACITY_TYPE].values == {"on-demand"}


def test_with_spot_prices_respects_usage_classes_and_validates() -> None:
    info = InstanceTypeInfo("od.only", 2, 4096, ("amd64",), 3, 10, usage_classes=("on-demand",), zones=("z1",), on_demand_price=0.1)
    catalog = Catalog([info])
    assert catalog.with_spot_prices({("od.only", "z1"): 0.01}).offerings("od.only") == (Offering("z1", "on-demand", 0.1),)
    with pytest.raises(CatalogError, match="spot price for c5.large in z1"):
        Catalog([InstanceTypeInfo("c5.large", 2, 4096, ("amd64",), 3, 10, zones=("z1",), on_demand_price=0.085)]).with_spot_prices(
            {("c5.large", "z1"): float("nan")}
        )


def test_catalog_constructor_rejects_duplicates_and_stray_offerings() -> None:
    info = InstanceTypeInfo("a.large", 2, 4096, ("amd64",), 3, 10, zones=("z1",), on_demand_price=0.1)
    with pytest.raises(CatalogError, match="defined twice"):
        Catalog([info], declared=[DeclaredInstanceType("a.large", Resources.parse({"cpu": "1", "memory": "1Gi", "pods": "5"}))])
    with pytest.raises(CatalogError, match="unknown instance type"):
        Catalog([info], {"b.large": []})
    unpriced = Catalog([InstanceTypeInfo("c.large", 2, 4096, ("amd64",), 3, 10, zones=("z1",))])
    assert unpriced.offerings("c.large") == () and unpriced.instance_type("c.large").cheapest_offering() is None


# --- the generator script ------------------------------------------------------------------


def _build_script():
    spec = importlib.util.spec_from_file_location("build_catalog", REPO / "scripts" / "build_catalog.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_script_is_deterministic_and_loadable(tmp_path: Path) -> None:
    script = _build_script()
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"prices": {"us-east-1": {"c5.large": 0.085, "p5.48xlarge": 55.04, "m6g.large": 0.077, "nope.large": 1.0}}}))
    document, skipped = script.build("us-east-1", script.moto_resources(), prices)
    assert [e["name"] for e in document["instanceTypes"]] == ["c5.large", "m6g.large", "p5.48xlarge"]
    assert skipped["no price"] > 1000
    first, second = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    script.write(document, first)
    script.write(document, second)
    assert first.read_bytes() == second.read_bytes()
    catalog = catalog_from_bundled_document(json.loads(gzip.decompress(first.read_bytes())))
    p5 = catalog.info("p5.48xlarge")
    assert (p5.max_enis, p5.gpu_count, p5.gpu_name, p5.efa_count) == (2, 8, "H100", 32)  # default network card only
    assert catalog.info("m6g.large").architectures == ("arm64",)
    assert catalog.instance_type("c5.large").allocatable == load_bundled_catalog().instance_type("c5.large").allocatable


# --- invariants ----------------------------------------------------------------------------

_NAMES = ("c5.large", "t3.nano", "m6g.large", "g4dn.xlarge", "p5.48xlarge", "c5.4xlarge")


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(_NAMES),
    max_pods_value=st.one_of(st.none(), st.integers(1, 500)),
    pods_per_core=st.one_of(st.none(), st.integers(0, 50)),
    eviction_mib=st.one_of(st.none(), st.integers(0, 1024)),
    system_cpu=st.integers(0, 500),
)
def test_capacity_and_overhead_invariants(name: str, max_pods_value: int | None, pods_per_core: int | None, eviction_mib: int | None, system_cpu: int) -> None:
    kubelet = KubeletConfig(
        max_pods=max_pods_value,
        pods_per_core=pods_per_core,
        system_reserved=Resources({"cpu": system_cpu}),
        eviction_hard={} if eviction_mib is None else {"memory.available": f"{eviction_mib}Mi"},
    )
    info = load_bundled_catalog().info(name)
    catalog = Catalog([info])  # one type: each new kubelet config builds only what is checked
    capacity = eks_capacity(info, kubelet)
    eni = eni_limited_pods(info.max_enis, info.ipv4_per_eni)
    expected_pods = max_pods_value if max_pods_value is not None else eni
    if pods_per_core:
        expected_pods = min(expected_pods, pods_per_core * info.vcpus)
    assert capacity["pods"] == expected_pods * 1000
    it = catalog.instance_type(name, kubelet)
    if it is None:
        return  # cannot host anything with this kubelet config
    assert it.allocatable.fits_in(it.capacity)
    assert it.overhead["cpu"] == kube_reserved_cpu_milli(info.vcpus * 1000) + system_cpu
    assert it.overhead["memory"] == (kube_reserved_memory_mib(eni) + (100 if eviction_mib is None else eviction_mib)) * MI


@given(st.integers(0, 512_000), st.integers(0, 512_000))
def test_kube_reserved_cpu_is_monotonic_and_bounded(a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert kube_reserved_cpu_milli(low) <= kube_reserved_cpu_milli(high)
    assert kube_reserved_cpu_milli(high) <= max(60, math.ceil(high * 0.06))
