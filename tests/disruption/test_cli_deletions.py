"""``joiner disrupt --delete``: what deleting a NodeClaim (Joiner's or Karpenter's) or a Node
would do, offline: the drain plan in the table and in the JSON contract's ``deletions``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from joiner.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "snapshots" / "delete-to-drain.yaml"
NOW = ["--now", "2025-01-06T12:00:00Z"]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["disrupt", *args, *NOW, "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_snapshot_with_both_kinds_of_nodeclaim_is_read_and_the_contract_kept(capsys):
    result = run_json(capsys, str(EXAMPLE))
    assert set(result) == {"commands", "blocked"}  # nothing deleted: the contract as it was
    assert "karpenter.sh" not in capsys.readouterr().err  # no import-karpenter hint for NodeClaims


def test_deleting_the_karpenter_nodeclaim_shows_karpenters_drain_order(capsys):
    result = run_json(capsys, str(EXAMPLE), "--delete", "nodeclaim/general-a")
    (plan,) = result["deletions"]
    assert (plan["kind"], plan["name"], plan["node"], plan["nodePool"]) == ("NodeClaim", "general-a", "ip-10-0-1-20.ec2.internal", "general")
    assert (plan["terminationGracePeriod"], plan["deadline"]) == ("5m", "2025-01-06T12:05:00Z")
    assert [(p["pod"], p["outcome"], p["group"], p["after"]) for p in plan["pods"]] == [
        ("default/web-1", "evicted", "non-critical", "+0s"),
        ("default/web-2", "evicted", "non-critical", "+0s"),
        ("kube-system/logs-a", "evicted", "non-critical-daemonset", "+5s"),
        ("kube-system/coredns-1", "evicted", "critical", "+10s"),
        ("kube-system/kube-proxy-a", "skipped", None, None),
        ("kube-system/node-exporter-ip-10-0-1-20.ec2.internal", "skipped", None, None),
    ]
    assert plan["instanceTerminatedAt"] == "2025-01-06T12:00:15Z"
    # the node being deleted is no disruption candidate
    assert {"node": "ip-10-0-1-20.ec2.internal", "reason": "already terminating"} in result["blocked"]


def test_deleting_the_node_of_a_joiner_claim_holds_budget_and_do_not_disrupt_pods_to_the_grace_period(capsys):
    result = run_json(capsys, str(EXAMPLE), "--delete", "node/ip-10-0-1-21.ec2.internal")
    (plan,) = result["deletions"]
    assert plan["nodeClaim"] == "general-b"
    pods = {p["pod"]: p for p in plan["pods"]}
    assert (pods["default/web-3"]["outcome"], pods["default/web-3"]["after"]) == ("evicted", "+0s")
    for name, holder in (("default/guarded-0", "PodDisruptionBudget default/guarded"), ("default/batch-0", "do-not-disrupt")):
        assert (pods[name]["outcome"], pods[name]["at"], pods[name]["graceSeconds"], pods[name]["blockedBy"]) == (
            "deleted",
            "2025-01-06T12:04:28Z",
            30,
            [holder],
        )
    assert plan["instanceTerminatedAt"] == "2025-01-06T12:04:58Z"


def test_the_table_lists_each_pod_in_the_order_it_leaves(capsys):
    assert main(["disrupt", str(EXAMPLE), *NOW, "--delete", "node/ip-10-0-1-21.ec2.internal"]) == 0
    out = capsys.readouterr().out
    assert "DELETE node/ip-10-0-1-21.ec2.internal at 2025-01-06T12:00:00Z: node ip-10-0-1-21.ec2.internal, NodePool general" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("  +")]
    assert [(row[0], row[1], row[3]) for row in rows] == [
        ("+0s", "default/web-3", "evicted"),
        ("+4m28s", "default/batch-0", "deleted"),
        ("+4m28s", "default/guarded-0", "deleted"),
    ]
    assert "instance terminated at +4m58s" in out


def test_a_nodeclaim_the_snapshot_shows_deleted_is_planned_from_its_deletion(tmp_path, capsys):
    documents = list(yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8")))
    for document in documents:
        if document.get("kind") == "NodeClaim" and document["metadata"]["name"] == "general-b":
            document["metadata"]["deletionTimestamp"] = "2025-01-06T11:58:00Z"
    snapshot = tmp_path / "deleting.yaml"
    snapshot.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    (plan,) = run_json(capsys, str(snapshot))["deletions"]
    assert (plan["name"], plan["deletedAt"], plan["deadline"]) == ("general-b", "2025-01-06T11:58:00Z", "2025-01-06T12:03:00Z")


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        (
            "nodeclaim/general-c",
            (
                "joiner disrupt: --delete nodeclaim/general-c: no NodeClaim named 'general-c' (did you mean \"general-b\"?); "
                "the snapshot holds: general-a, general-b"
            ),
        ),
        ("node/nope", "joiner disrupt: --delete node/nope: no Node named 'nope'; the snapshot holds: ip-10-0-1-20.ec2.internal, ip-10-0-1-21.ec2.internal"),
        ("pod/web-1", "joiner disrupt: --delete: expected nodeclaim/NAME or node/NAME, got 'pod/web-1'"),
        ("nodeclaim/", "joiner disrupt: --delete: expected nodeclaim/NAME or node/NAME, got 'nodeclaim/'"),
    ],
)
def test_a_bad_deletion_is_one_line(capsys, argument, message):
    assert main(["disrupt", str(EXAMPLE), *NOW, "--delete", argument]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == message and captured.out == ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("apiVersion: karpenter.sh/v1\nkind: NodeClaim", "apiVersion: karpenter.sh/v1beta1\nkind: NodeClaim"),
        ("  terminationGracePeriod: 5m\nstatus:\n  nodeName", "  terminationGracePeriode: 5m\nstatus:\n  nodeName"),
    ],
)
def test_a_malformed_nodeclaim_in_the_snapshot_is_one_line(tmp_path, capsys, change, message):
    snapshot = tmp_path / "bad.yaml"
    text = EXAMPLE.read_text(encoding="utf-8")
    assert change in text
    snapshot.write_text(text.replace(change, message), encoding="utf-8")
    assert main(["disrupt", str(snapshot), *NOW]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NodeClaim general-a" in err
    assert (
        "'karpenter.sh/v1beta1' is not supported (expected joiner.dev/v1 or karpenter.sh/v1)" in err
        or 'unknown field "terminationGracePeriode" (did you mean "terminationGracePeriod"?)' in err
    )
