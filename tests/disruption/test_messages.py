"""What ``joiner disrupt`` and ``joiner events explain`` say reads as a Kubernetes user expects:
durations in Kubernetes' notation, budget wording, the ownership rule, the command's name."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from joiner.cli.main import main
from tests.disruption.builders import DAY, T0, managed_node, pool, run, running_pod
from tests.support.fakes import node_class_json

ROOT = Path(__file__).resolve().parents[2]


def test_an_expired_node_says_its_expire_after_in_kubernetes_notation() -> None:
    decision = run(pool(expire_after="720h"), managed_node("old", created=T0 - 31 * DAY), running_pod("p", "old"))
    text = json.dumps(decision.to_dict())
    assert "older than expireAfter 720h" in text
    assert "days" not in text and "0:00:00" not in text


def test_an_exhausted_budget_names_the_pool_and_the_reason() -> None:
    decision = run(pool(budgets=[{"nodes": "0"}]), managed_node("empty"))
    (blocked,) = decision.blocked
    assert blocked.reason == "the disruption budget of nodepool default allows no more Empty nodes to be disrupted now"


def test_events_explain_states_the_ownership_rule_not_labels(capsys: pytest.CaptureFixture[str]) -> None:
    event = ROOT / "tests" / "events" / "spot_interruption.json"
    assert main(["events", "explain", str(event), "-o", "json"]) == 0
    assumes = json.loads(capsys.readouterr().out)["assumes"]
    assert "label" not in assumes.replace("Node labels prove nothing", "")
    assert "joiner.dev/cluster" in assumes and "claim" in assumes


def test_an_error_names_the_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "explain", str(tmp_path / "missing.json")]) == 2
    assert capsys.readouterr().err.startswith("joiner events explain: cannot read event file")


def test_disrupt_prints_expire_after_in_kubernetes_notation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    objects = [pool(expire_after="720h"), managed_node("old", created=T0 - 31 * DAY), running_pod("p", "old")]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump_all([node_class_json(), *objects]), encoding="utf-8")
    code = main(["disrupt", str(path), "--now", (T0 + timedelta(seconds=1)).isoformat().replace("+00:00", "Z")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "720h" in out.out and "days" not in out.out


def test_identical_unschedulable_reasons_are_grouped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from tests.support.fakes import pod_json

    pods = [pod_json(f"web-{i:02d}", cpu="1", memory="1Gi") for i in range(20)]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump_all(pods), encoding="utf-8")
    assert main(["plan", str(path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("unschedulable")]
    assert lines == ["unschedulable 20 pods (default/web-00, default/web-01, default/web-02, ...): no nodepools"]
    assert main(["plan", str(path), "-o", "wide"]) == 0
    (wide,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("unschedulable")]
    assert wide.startswith("unschedulable 20 pods (default/web-00, ") and "default/web-19): no nodepools" in wide
