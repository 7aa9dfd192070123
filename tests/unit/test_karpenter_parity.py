"""Parity with Karpenter's AWS provider: labels, pod ENIs, instance-store RAID0 and the
per-node cost, each checked through the same planning path ``joiner plan`` uses."""

from __future__ import annotations

from typing import Any

import pytest

from joiner.domain import labels as wk
from joiner.domain.catalog import Catalog, load_bundled_catalog, load_catalog_file
from joiner.domain.model import Plan
from joiner.domain.planning import plan_snapshot
from joiner.domain.snapshot import parse_objects


@pytest.fixture(scope="module")
def bundled() -> Catalog:
    return load_bundled_catalog()


def pod(
    name: str, *, requests: dict[str, str] | None = None, selector: dict[str, str] | None = None, affinity: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    resources = {"requests": requests if requests is not None else {"cpu": "100m", "memory": "128Mi"}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": resources}]}
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": affinity}]}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"}, "spec": spec}


def pool(requirements: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": "default"}}
    if requirements:
        spec["requirements"] = requirements
    return {"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": "general"}, "spec": {"template": {"spec": spec}}}


def node_class(**extra: Any) -> dict[str, Any]:
    spec = {"subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}], "role": "r", **extra}
    return {"apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": "default"}, "spec": spec}


def plan(catalog: Catalog, *objects: dict[str, Any], requirements: list[dict[str, Any]] | None = None, **class_fields: Any) -> Plan:
    return plan_snapshot(parse_objects([pool(requirements), node_class(**class_fields), *objects]), catalog)


def only_types(result: Plan) -> set[str]:
    assert not result.unschedulable, result.unschedulable
    return {claim.instance_types[0] for claim in result.node_claims}


# --- security groups for pods ------------------------------------------------------------


def test_pod_eni_capacity_as_karpenter_computes_it(bundled: Catalog) -> None:
    """Karpenter's instance-type reference: a1.medium 10, c5.large 9; types that cannot trunk 0."""
    assert bundled.instance_type("a1.medium").allocatable["vpc.amazonaws.com/pod-eni"] == 10_000
    assert bundled.instance_type("c5.large").allocatable["vpc.amazonaws.com/pod-eni"] == 9_000
    assert bundled.instance_type("t3.nano").capacity["vpc.amazonaws.com/pod-eni"] == 0


def test_a_pod_requesting_a_pod_eni_gets_a_type_that_offers_one(bundled: Catalog) -> None:
    families = [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["t3", "m5"]}]
    assert only_types(plan(bundled, pod("plain"), requirements=families)) <= {t for t in bundled.names if t.startswith("t3.")}
    wants = pod("sg", requests={"cpu": "100m", "memory": "128Mi", "vpc.amazonaws.com/pod-eni": "1"})
    chosen = only_types(plan(bundled, wants, requirements=families))
    assert chosen and all(name.startswith("m5.") for name in chosen)


# --- every label Karpenter's AWS provider sets -----------------------------------------------


def test_capability_flex_nitro_enclaves_and_tenancy_labels(bundled: Catalog) -> None:
    flex = bundled.instance_type("c7i-flex.large").requirements
    m5 = bundled.instance_type("m5.xlarge").requirements
    assert flex.labels()[wk.INSTANCE_CAPABILITY_FLEX] == "true" and m5.labels()[wk.INSTANCE_CAPABILITY_FLEX] == "false"
    assert m5.labels()[wk.INSTANCE_NITRO_ENCLAVES] == "true"  # EC2: NitroEnclavesSupport supported
    assert bundled.instance_type("t3.nano").requirements.labels()[wk.INSTANCE_NITRO_ENCLAVES] == "false"
    assert m5[wk.INSTANCE_TENANCY].values == {"default", "dedicated"}
    for key in (
        "karpenter.k8s.aws/instance-capability-flex",
        "karpenter.k8s.aws/instance-nitro-enclaves-supported",
        "karpenter.k8s.aws/nitro-sandbox",
        "karpenter.k8s.aws/instance-tenancy",
        "topology.k8s.aws/zone-id",
    ):
        assert wk.normalize_label_key(key) in wk.WELL_KNOWN_LABELS, key


def test_a_pool_requiring_flex_types_gets_flex_types(bundled: Catalog) -> None:
    flex = [{"key": "karpenter.k8s.aws/instance-capability-flex", "operator": "In", "values": ["true"]}]
    chosen = only_types(plan(bundled, pod("a", requests={"cpu": "3", "memory": "1Gi"}), requirements=flex))
    assert chosen and all("-flex." in name for name in chosen)
    enclaves = [{"key": "karpenter.k8s.aws/nitro-sandbox", "operator": "In", "values": ["true"]}]
    chosen = only_types(plan(bundled, pod("b"), requirements=enclaves))
    assert chosen and all(bundled.instance_type(n).requirements.labels()[wk.INSTANCE_NITRO_ENCLAVES] == "true" for n in chosen)


def test_dedicated_tenancy_is_schedulable_and_launches_dedicated(bundled: Catalog) -> None:
    from joiner.domain.launch import tenancy_of

    wants = pod("d", affinity=[{"key": "karpenter.k8s.aws/instance-tenancy", "operator": "In", "values": ["dedicated"]}])
    result = plan(bundled, wants)
    assert not result.unschedulable and len(result.node_claims) == 1
    assert tenancy_of(result.node_claims[0].requirements) == "dedicated"
    either = plan(bundled, pod("e", affinity=[{"key": "karpenter.k8s.aws/instance-tenancy", "operator": "In", "values": ["dedicated", "default"]}]))
    assert tenancy_of(either.node_claims[0].requirements) == "default"  # both allowed: default (Karpenter's rule)
    bad = plan(bundled, pod("f", selector={"karpenter.k8s.aws/instance-tenancy": "host"}))
    assert bad.unschedulable and "instance-tenancy" in bad.unschedulable[0].reason


ZONED = """
region: us-east-1
zoneIds: {us-east-1a: use1-az4, us-east-1b: use1-az6, us-east-1c: use1-az1}
instanceTypes:
  - name: m5.large
    capacity: {cpu: 2, memory: 7Gi, pods: 29}
    offerings:
      - {zone: us-east-1a, capacityType: on-demand, price: 0.09}
      - {zone: us-east-1b, capacityType: on-demand, price: 0.096}
      - {zone: us-east-1c, capacityType: on-demand, price: 0.097}
"""


def test_zone_id_requirements_choose_the_zone_with_that_id() -> None:
    catalog = load_catalog_file(ZONED)
    m5 = catalog.instance_type("m5.large").requirements
    assert m5[wk.ZONE_ID].values == {"use1-az4", "use1-az6", "use1-az1"}
    result = plan(catalog, pod("z", selector={"topology.k8s.aws/zone-id": "use1-az6"}))
    assert [claim.zones for claim in result.node_claims] == [("us-east-1b",)]
    pooled = plan(catalog, pod("y"), requirements=[{"key": "topology.k8s.aws/zone-id", "operator": "NotIn", "values": ["use1-az4", "use1-az6"]}])
    assert [claim.zones for claim in pooled.node_claims] == [("us-east-1c",)]
    unknown = plan(load_bundled_catalog(), pod("x", selector={"topology.k8s.aws/zone-id": "use1-az6"}))
    assert unknown.unschedulable  # offline the account's zone ids are not known: never a wrong zone


def test_the_ebs_csi_zone_key_is_the_zone() -> None:
    catalog = load_catalog_file(ZONED)
    result = plan(catalog, pod("v", selector={"topology.ebs.csi.aws.com/zone": "us-east-1c"}))
    assert [claim.zones for claim in result.node_claims] == [("us-east-1c",)]
