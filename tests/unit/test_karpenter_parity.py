"""Parity with Karpenter's AWS provider: labels, pod ENIs, instance-store RAID0 and the
per-node cost, each checked through the same planning path ``joiner plan`` uses."""

from __future__ import annotations

from typing import Any

import pytest

from joiner.domain.catalog import Catalog, load_bundled_catalog
from joiner.domain.model import Plan
from joiner.domain.planning import plan_snapshot
from joiner.domain.snapshot import parse_objects


@pytest.fixture(scope="module")
def bundled() -> Catalog:
    return load_bundled_catalog()


def pod(name: str, *, requests: dict[str, str] | None = None, selector: dict[str, str] | None = None,
        affinity: list[dict[str, Any]] | None = None) -> dict[str, Any]:
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
