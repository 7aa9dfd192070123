"""``joiner disrupt``: the JSON contract and exit status 2 on malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joiner.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "snapshots" / "disrupt-consolidation.yaml"


def test_example_prints_one_json_object_with_the_contract(capsys):
    assert main(["disrupt", str(EXAMPLE), "--now", "2025-01-06T12:00:00Z", "-o", "json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    result = json.loads(out)
    assert set(result) == {"commands", "blocked"}
    (command,) = result["commands"]
    assert set(command) == {"method", "nodes", "replacements", "savingsPerHour", "reason"}
    assert command["method"] == "consolidation"
    assert command["nodes"] == ["ip-10-0-1-10.ec2.internal", "ip-10-0-1-11.ec2.internal"]
    assert command["replacements"] == []
    assert command["savingsPerHour"] == pytest.approx(0.34 + 2 * 20 * 0.08 / 730, abs=1e-6)  # two nodes and their 20Gi gp3 root volumes
    assert result["blocked"] == [{"node": "ip-10-0-1-13.ec2.internal", "reason": "pod default/batch-0 has the do-not-disrupt annotation"}]


def test_scheduled_budget_window_stops_consolidation(capsys):
    assert main(["disrupt", str(EXAMPLE), "--now", "2025-01-06T09:30:00Z", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["commands"] == []


@pytest.mark.parametrize(("now", "in_window"), [("2025-01-06T10:30:00+01:00", True), ("2025-01-06T09:30:00-02:00", False)])
def test_a_time_with_an_offset_is_the_same_instant_for_budget_schedules(capsys, now, in_window):
    """Issue 13 item 7: schedules are UTC crontabs; 10:30+01:00 is 09:30Z (inside the window),
    09:30-02:00 is 11:30Z (outside)."""
    assert main(["disrupt", str(EXAMPLE), "--now", now, "-o", "json"]) == 0
    assert (json.loads(capsys.readouterr().out)["commands"] == []) is in_window


def test_table_output(capsys):
    assert main(["disrupt", str(EXAMPLE), "--now", "2025-01-06T12:00:00Z"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["METHOD", "NODES", "SAVES/H", "REPLACEMENTS", "REASON"]
    method, nodes, saves, replacements, *reason = lines[1].split()
    assert (method, nodes, saves, replacements) == (
        "consolidation",
        "ip-10-0-1-10.ec2.internal,ip-10-0-1-11.ec2.internal",
        "0.3444",
        "-",
    )  # with two root volumes
    assert lines[1].endswith("...") and len(lines[1]) < 200  # the reason is cut in the table ...
    blocked = lines.index("") + 1
    assert lines[blocked].split() == ["NOT", "DISRUPTED", "REASON"]
    assert lines[blocked + 1].startswith("ip-10-0-1-13.ec2.internal") and "do-not-disrupt" in lines[blocked + 1]


def test_wide_and_yaml_output(capsys):
    import yaml

    assert main(["disrupt", str(EXAMPLE), "--now", "2025-01-06T12:00:00Z", "-o", "wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert not wide[1].endswith("...")  # ... and whole in wide
    assert main(["disrupt", str(EXAMPLE), "--now", "2025-01-06T12:00:00Z", "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["disrupt", str(EXAMPLE), "--now", "2025-01-06T12:00:00Z", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


def test_replacement_in_json(tmp_path, capsys):
    # c5.2xlarge nodes (0.34/h) running 3 CPUs each: one pod moves to the guarded node, one
    # c5.xlarge (0.17/h) takes the other
    text = EXAMPLE.read_text().replace("instance-type: c5.xlarge", "instance-type: c5.2xlarge").replace("cpu: 500m", "cpu: 3000m")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["disrupt", str(path), "--now", "2025-01-06T12:00:00Z", "-o", "json"]) == 0
    (command,) = json.loads(capsys.readouterr().out)["commands"]
    (replacement,) = command["replacements"]
    assert set(replacement) == {"instanceTypes", "price"}
    assert command["nodes"] == ["ip-10-0-1-10.ec2.internal", "ip-10-0-1-11.ec2.internal"]
    assert command["savingsPerHour"] == pytest.approx(0.68 - 0.17 + 20 * 0.08 / 730, abs=1e-6)  # one root volume fewer
    assert replacement["instanceTypes"][0] == "c5.xlarge" and "c5.2xlarge" not in replacement["instanceTypes"]
    assert replacement["price"] == pytest.approx(0.17 + 20 * 0.08 / 730, abs=1e-6)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "apiVersion: joiner.dev/v1\nkind: NodePool\nmetadata: {name: p}\nspec:\n  disruption:\n    budgets:\n    - nodes: lots\n",
            "spec.disruption.budgets[0].nodes",
        ),
        ("kind: [\n", "line"),
    ],
)
def test_malformed_snapshot_exits_2_with_one_line(tmp_path, capsys, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["disrupt", str(path), "-o", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("joiner disrupt: ") and needle in captured.err


def test_bad_now_and_missing_file_exit_2(tmp_path, capsys):
    assert main(["disrupt", str(EXAMPLE), "--now", "yesterday"]) == 2
    assert "--now" in capsys.readouterr().err
    assert main(["disrupt", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read snapshot" in capsys.readouterr().err
