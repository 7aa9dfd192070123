"""The offline plan of a deletion's drain (joiner.domain.drain_plan): Karpenter's drain order,
PodDisruptionBudgets, do-not-disrupt and the NodePool's terminationGracePeriod, through the
termination handler's own plan_drain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from joiner.domain.drain_plan import DeletionPlan, DeletionTargetError, plan_deletion
from joiner.domain.model import LabelSelector, Node, NodeClaim, NodePool, Pod, PodDisruptionBudget, Toleration
from joiner.domain.snapshot import Snapshot, load_snapshot_yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "snapshots" / "delete-to-drain.yaml"
NOW = datetime(2025, 1, 6, 12, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def example() -> Snapshot:
    return load_snapshot_yaml(EXAMPLE.read_text(encoding="utf-8"), strict=True, source=str(EXAMPLE))


def plan(snapshot: Snapshot, kind: str, name: str, **extra: Any) -> DeletionPlan:
    return plan_deletion(
        kind,
        name,
        nodes=snapshot.nodes,
        claims=snapshot.node_claims,
        pods=snapshot.pods,
        pdbs=snapshot.pdbs,
        pools={p.name: p for p in snapshot.node_pools},
        deleted_at=NOW,
        **extra,
    )


def fates(result: DeletionPlan) -> list[tuple[str, str, str | None, datetime | None]]:
    assert result.drain is not None
    return [(f.pod, f.outcome, f.group, f.at) for f in result.drain.pods]


def test_deleting_a_karpenter_nodeclaim_drains_its_node_in_karpenters_order() -> None:
    result = plan(example(), "NodeClaim", "general-a")
    assert (result.node_claim, result.node, result.node_pool) == ("general-a", "ip-10-0-1-20.ec2.internal", "general")
    assert result.termination_grace_period == timedelta(minutes=5) and result.deadline == at(300)
    assert fates(result) == [
        ("default/web-1", "evicted", "non-critical", at(0)),
        ("default/web-2", "evicted", "non-critical", at(0)),
        ("kube-system/logs-a", "evicted", "non-critical-daemonset", at(5)),  # once the non-critical pods are gone
        ("kube-system/coredns-1", "evicted", "critical", at(10)),
        ("kube-system/kube-proxy-a", "skipped", None, None),  # tolerates the disrupted taint
        ("kube-system/node-exporter-ip-10-0-1-20.ec2.internal", "skipped", None, None),  # static
    ]
    assert result.terminated_at == at(15)
    assert result.replacement_for == ("default/web-1", "default/web-2", "kube-system/coredns-1")
    assert result.drain_start_by == at(300 - 30 - 30)
    assert result.outcome == "drained: the node is empty and its instance terminated"


def test_deleting_a_node_holds_budget_and_do_not_disrupt_pods_until_the_grace_period() -> None:
    result = plan(example(), "Node", "ip-10-0-1-21.ec2.internal")
    assert result.node_claim == "general-b"
    assert fates(result) == [
        ("default/web-3", "evicted", "non-critical", at(0)),
        ("default/batch-0", "deleted", "non-critical", at(300 - 30 - 2)),
        ("default/guarded-0", "deleted", "non-critical", at(300 - 30 - 2)),
    ]
    assert result.drain is not None
    by_pod = {f.pod: f for f in result.drain.pods}
    assert by_pod["default/guarded-0"].blocked_by == ("PodDisruptionBudget default/guarded",)
    assert by_pod["default/batch-0"].blocked_by == ("do-not-disrupt",)
    assert by_pod["default/guarded-0"].grace_seconds == 30 and by_pod["default/guarded-0"].blocked_since == NOW
    assert result.terminated_at == at(300 - 2)  # their grace ends before the deadline
    assert result.outcome == "drained: the node is empty and its instance terminated (2 pods deleted by the deadline rule)"
    as_json = result.to_dict()
    assert as_json["deadline"] == "2025-01-06T12:05:00Z" and as_json["after"] == "+4m58s"
    assert as_json["pods"][2]["blockedBy"] == ["PodDisruptionBudget default/guarded"]


def pod(name: str, node: str = "n1", **extra: Any) -> Pod:
    fields: dict[str, Any] = {
        "namespace": "default",
        "name": name,
        "node_name": node,
        "phase": "Running",
        "labels": {"app": name},
        "owner_kind": "ReplicaSet",
        "owner_name": name,
    }
    fields.update(extra)
    return Pod(**fields)


def world(pods: list[Pod], pdbs: tuple[PodDisruptionBudget, ...] = (), grace: timedelta | None = timedelta(minutes=10), **claim: Any) -> dict[str, Any]:
    node = Node("n1", labels={"joiner.dev/nodepool": "p"}, provider_id="aws:///us-east-1a/i-1", ready=True)
    return {
        "nodes": (node,),
        "claims": (NodeClaim("c1", "joiner.dev/v1", "p", node_name="n1", **claim),),
        "pods": tuple(pods),
        "pdbs": pdbs,
        "pools": {"p": NodePool("p", termination_grace_period=grace)},
        "deleted_at": NOW,
    }


def budget(app: str, **extra: Any) -> PodDisruptionBudget:
    return PodDisruptionBudget("default", app, LabelSelector(match_labels=(("app", app),)), **extra)


def test_a_budget_allows_what_its_status_allows_and_no_more() -> None:
    pods = [pod("a-1", labels={"app": "a"}), pod("a-2", labels={"app": "a"}), pod("a-3", labels={"app": "a"})]
    result = plan_deletion("NodeClaim", "c1", **world(pods, (budget("a", disruptions_allowed=1),)))
    outcomes = {f.pod: (f.outcome, f.at) for f in result.drain.pods} if result.drain else {}
    assert outcomes == {"default/a-1": ("evicted", at(0)), "default/a-2": ("deleted", at(600 - 32)), "default/a-3": ("deleted", at(600 - 32))}


def test_a_budget_without_status_is_computed_from_its_spec_and_the_ready_pods() -> None:
    pods = [pod("a-1", labels={"app": "a"}), pod("a-2", labels={"app": "a"}), pod("a-3", labels={"app": "a"}, ready=False)]
    # maxUnavailable 1 of 3: 2 desired, 2 healthy: nothing allowed; the unready pod goes (healthy >= desired)
    result = plan_deletion("NodeClaim", "c1", **world(pods, (budget("a", max_unavailable="1"),)))
    outcomes = {f.pod: f.outcome for f in result.drain.pods} if result.drain else {}
    assert outcomes == {"default/a-1": "deleted", "default/a-2": "deleted", "default/a-3": "evicted"}


def test_a_pod_two_budgets_select_is_deleted_at_the_deadline() -> None:
    pods = [pod("a-1", labels={"app": "a", "tier": "x"})]
    both = (budget("a", disruptions_allowed=5), PodDisruptionBudget("default", "x", LabelSelector(match_labels=(("tier", "x"),)), disruptions_allowed=5))
    result = plan_deletion("NodeClaim", "c1", **world(pods, both))
    assert result.drain is not None
    (fate,) = result.drain.pods
    assert (fate.outcome, fate.at, fate.blocked_by) == ("deleted", at(600 - 32), ("PodDisruptionBudgets",))
    assert "selected by 2 PodDisruptionBudgets (default/a, default/x)" in fate.reason


def test_critical_pods_wait_for_the_non_critical_ones() -> None:
    pods = [pod("guarded", labels={"app": "g"}), pod("dns", priority_class_name="system-cluster-critical")]
    result = plan_deletion("NodeClaim", "c1", **world(pods, (budget("g", disruptions_allowed=0),), grace=timedelta(minutes=2)))
    assert fates(result) == [("default/guarded", "deleted", "non-critical", at(120 - 32)), ("default/dns", "deleted", "critical", at(120 - 32))]


def test_without_a_grace_period_a_blocked_drain_waits_without_end() -> None:
    pods = [pod("guarded", labels={"app": "g"}), pod("free")]
    result = plan_deletion("NodeClaim", "c1", **world(pods, (budget("g", disruptions_allowed=0),), grace=None))
    assert result.deadline is None and result.terminated_at is None
    assert fates(result) == [("default/free", "evicted", "non-critical", at(0)), ("default/guarded", "remains", "non-critical", None)]
    assert result.outcome.startswith(
        "waits without end: default/guarded (PodDisruptionBudget default/g allows no disruption), and no terminationGracePeriod bounds the drain"
    )


def test_a_do_not_disrupt_duration_protects_for_that_long() -> None:
    protected = pod("job", annotations={"karpenter.sh/do-not-disrupt": "10m"}, created=NOW - timedelta(minutes=4))
    result = plan_deletion("NodeClaim", "c1", **world([protected], grace=None))
    assert fates(result) == [("default/job", "evicted", "non-critical", at(360))]


def test_daemonset_pods_that_do_not_tolerate_the_taint_go_after_the_others() -> None:
    pods = [
        pod("ds", owner_kind="DaemonSet", priority_class_name="system-node-critical"),
        pod("app"),
        pod("tolerant", owner_kind="DaemonSet", tolerations=(Toleration(operator="Exists"),)),
        pod("done", phase="Succeeded"),
    ]
    result = plan_deletion("NodeClaim", "c1", **world(pods))
    assert fates(result) == [
        ("default/app", "evicted", "non-critical", at(0)),
        ("default/ds", "evicted", "critical-daemonset", at(5)),
        ("default/done", "skipped", None, None),
        ("default/tolerant", "skipped", None, None),
    ]


def test_a_claim_without_a_node_is_terminated_at_once() -> None:
    setup = world([pod("a")])
    setup["claims"] = (NodeClaim("c2", "karpenter.sh/v1", "p"),)
    result = plan_deletion("NodeClaim", "c2", **setup)
    assert (result.node, result.terminated_at, result.drain) == (None, NOW, None)
    assert "no Node" in result.outcome


def test_an_unknown_name_says_what_the_snapshot_holds() -> None:
    with pytest.raises(
        DeletionTargetError, match=r"""no NodeClaim named 'general-c' \(did you mean "general-b"\?\); the snapshot holds: general-a, general-b"""
    ):
        plan(example(), "NodeClaim", "general-c")
    with pytest.raises(DeletionTargetError, match=r"no Node named 'n9'; the snapshot holds: ip-10-0-1-20.ec2.internal, ip-10-0-1-21.ec2.internal"):
        plan(example(), "Node", "n9")
