"""NodeClaims in a snapshot: Joiner's ``joiner.dev/v1`` mirrors and Karpenter's ``karpenter.sh/v1``
NodeClaims are read (strictly, as kubectl validates), any other version is refused in one line."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from joiner.domain.known_fields import strict_problem
from joiner.domain.snapshot import SnapshotError, load_snapshot_yaml, parse_node_claim


def karpenter_claim(name: str = "general-a", **status: Any) -> dict[str, Any]:
    """A NodeClaim as Karpenter v1 writes it, every field its CRD defines set."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "creationTimestamp": "2025-01-06T08:00:00Z",
            "finalizers": ["karpenter.sh/termination"],
            "labels": {"karpenter.sh/nodepool": "general", "node.kubernetes.io/instance-type": "c5.xlarge", "topology.kubernetes.io/zone": "us-east-1a"},
            "annotations": {"karpenter.sh/nodepool-hash": "123"},
            "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "general", "uid": "u1"}],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.xlarge", "c5.2xlarge"], "minValues": 1},
            ],
            "resources": {"requests": {"cpu": "1500m", "pods": "3"}},
            "taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute", "timeAdded": "2025-01-06T08:00:00Z"}],
            "expireAfter": "720h",
            "terminationGracePeriod": "48h",
        },
        "status": {
            "nodeName": "ip-10-0-1-20.ec2.internal",
            "providerID": "aws:///us-east-1a/i-0000000000000020",
            "imageID": "ami-1",
            "capacity": {"cpu": "4", "memory": "7949400Ki"},
            "allocatable": {"cpu": "3920m"},
            "lastPodEventTime": "2025-01-06T09:00:00Z",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2025-01-06T08:01:00Z", "observedGeneration": 1}
            ],
            **status,
        },
    }


def joiner_claim(name: str = "general-b") -> dict[str, Any]:
    """A mirror as Joiner writes it (joiner.domain.nodeclaims.node_claim_object)."""
    return {
        "apiVersion": "joiner.dev/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {"joiner.dev/nodepool": "general", "joiner.dev/nodeclaim": name},
            "annotations": {"joiner.dev/source-of-truth": "dynamodb"},
            "finalizers": ["joiner.dev/termination"],
        },
        "spec": {"nodePool": "general", "nodeClass": "default", "pods": ["default/web-1"]},
        "status": {
            "state": "initialized",
            "instanceID": "i-0000000000000021",
            "instanceType": "c5.xlarge",
            "zone": "us-east-1b",
            "capacityType": "on-demand",
            "price": "0.1700",
            "nodeName": "ip-10-0-1-21.ec2.internal",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2025-01-06T08:01:00Z"}],
        },
    }


def test_both_api_groups_are_read_into_the_snapshot() -> None:
    text = yaml.safe_dump_all([karpenter_claim(), joiner_claim()])
    snapshot = load_snapshot_yaml(text, strict=True)
    a, b = snapshot.node_claims
    assert (a.name, a.api_version, a.node_pool, a.node_name, a.instance_id) == (
        "general-a",
        "karpenter.sh/v1",
        "general",
        "ip-10-0-1-20.ec2.internal",
        "i-0000000000000020",
    )
    # Karpenter's: labels first, then single-valued requirements
    assert (a.instance_type, a.zone, a.capacity_type, a.node_class) == ("c5.xlarge", "us-east-1a", "spot", "default")
    assert a.termination_grace_period == timedelta(hours=48) and a.finalizers == ("karpenter.sh/termination",)
    assert a.created == datetime(2025, 1, 6, 8, tzinfo=UTC) and not a.deleting
    # Joiner's mirror: the instance in its status, the providerID built from zone and instance
    assert (b.name, b.api_version, b.node_pool, b.node_name, b.provider_id) == (
        "general-b",
        "joiner.dev/v1",
        "general",
        "ip-10-0-1-21.ec2.internal",
        "aws:///us-east-1b/i-0000000000000021",
    )
    assert (b.instance_type, b.zone, b.capacity_type, b.termination_grace_period) == ("c5.xlarge", "us-east-1b", "on-demand", None)
    assert {"karpenter.sh/v1/NodeClaim", "joiner.dev/v1/NodeClaim"} <= snapshot.kinds_read


def test_a_deleted_claim_carries_its_deletion_time() -> None:
    claim = karpenter_claim()
    claim["metadata"]["deletionTimestamp"] = "2025-01-06T12:00:00Z"
    parsed = parse_node_claim(claim)
    assert parsed.deleting and parsed.deletion_time == datetime(2025, 1, 6, 12, tzinfo=UTC)


def test_every_field_of_karpenters_crd_is_known_and_a_misspelt_one_is_refused() -> None:
    assert strict_problem(karpenter_claim()) is None
    assert strict_problem(joiner_claim()) is None
    wrong = karpenter_claim()
    wrong["spec"]["terminationGracePeriode"] = wrong["spec"].pop("terminationGracePeriod")
    assert strict_problem(wrong) == (
        "spec.terminationGracePeriode",
        ('unknown field "terminationGracePeriode" (did you mean "terminationGracePeriod"?) (strict field validation, as kubectl applies)'),
    )
    mirror = joiner_claim()
    mirror["status"]["nodeNmae"] = mirror["status"].pop("nodeName")
    path, problem = strict_problem(mirror) or ("", "")
    assert path == "status.nodeNmae" and 'did you mean "nodeName"' in problem


def test_strict_loading_names_the_object_and_the_field() -> None:
    wrong = karpenter_claim()
    wrong["spec"]["nodeClasRef"] = wrong["spec"].pop("nodeClassRef")
    with pytest.raises(SnapshotError) as raised:
        load_snapshot_yaml(yaml.safe_dump(wrong), strict=True)
    assert str(raised.value).startswith('NodeClaim general-a: spec.nodeClasRef: unknown field "nodeClasRef" (did you mean "nodeClassRef"?)')


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c.update(apiVersion="karpenter.sh/v1beta1"),
            "NodeClaim general-a: apiVersion: 'karpenter.sh/v1beta1' is not supported (expected joiner.dev/v1 or karpenter.sh/v1)",
        ),
        (
            lambda c: c["metadata"]["labels"].pop("karpenter.sh/nodepool"),
            "NodeClaim general-a: metadata.labels: needs karpenter.sh/nodepool: the NodePool the claim belongs to (Karpenter sets it)",
        ),
        (lambda c: c["spec"].pop("nodeClassRef"), "NodeClaim general-a: spec.nodeClassRef: required"),
        (lambda c: c["spec"].pop("requirements"), "NodeClaim general-a: spec.requirements: required"),
        (
            lambda c: c["spec"]["nodeClassRef"].update(kind="NodeClass"),
            "NodeClaim general-a: spec.nodeClassRef: must reference joiner.dev/NodeClass or karpenter.k8s.aws/EC2NodeClass, got karpenter.k8s.aws/NodeClass",
        ),
        (lambda c: c["spec"].update(terminationGracePeriod="soon"), "NodeClaim general-a: spec.terminationGracePeriod:"),
        (lambda c: c["status"].update(providerID="gce://x"), "NodeClaim general-a: status.providerID: expected aws:///<zone>/<instance-id>"),
        (lambda c: c["status"]["conditions"][0].update(status="Yes"), "NodeClaim general-a: status.conditions[0].status: 'Yes' is not one of"),
    ],
)
def test_a_malformed_karpenter_claim_is_one_line(change: Any, message: str) -> None:
    claim = copy.deepcopy(karpenter_claim())
    change(claim)
    with pytest.raises(SnapshotError) as raised:
        load_snapshot_yaml(yaml.safe_dump(claim))
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["spec"].pop("nodePool"), "NodeClaim general-b: spec.nodePool: required"),
        (lambda c: c["status"].update(state="running"), "NodeClaim general-b: status.state: 'running' is not one of"),
        (lambda c: c["status"].update(price=0.17), "NodeClaim general-b: status.price: expected a string"),
        (lambda c: c["status"].update(price="cheap"), "NodeClaim general-b: status.price: expected US dollars per hour"),
        (lambda c: c.update(spec=None), "NodeClaim general-b: spec: required"),
    ],
)
def test_a_malformed_mirror_is_one_line(change: Any, message: str) -> None:
    claim = copy.deepcopy(joiner_claim())
    change(claim)
    with pytest.raises(SnapshotError) as raised:
        load_snapshot_yaml(yaml.safe_dump(claim))
    assert str(raised.value).startswith(message)


def test_a_name_or_a_node_claimed_twice_is_refused() -> None:
    twice = karpenter_claim("general-b")
    with pytest.raises(SnapshotError, match=r"NodeClaim general-b \(.*\): metadata.name: appears twice"):
        load_snapshot_yaml(yaml.safe_dump_all([joiner_claim(), twice]))
    other = karpenter_claim("general-c", nodeName="ip-10-0-1-21.ec2.internal")
    with pytest.raises(SnapshotError, match=r"status.nodeName: node ip-10-0-1-21.ec2.internal is already NodeClaim general-b \(joiner.dev/v1\)'s"):
        load_snapshot_yaml(yaml.safe_dump_all([joiner_claim(), other]))
