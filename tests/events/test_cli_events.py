"""``joiner events explain FILE``: one JSON object, offline; malformed input exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joiner.cli import main as cli
from tests.events.fixtures import FIXTURE_DIR, KINDS


def test_joiner_help_lists_every_operator_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    listed = capsys.readouterr().out
    for command in ("plan", "events", "import-karpenter"):
        assert command in listed


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_fixture_is_explained(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, err = run(capsys, "events", "explain", str(FIXTURE_DIR / name))
    assert code == 0 and err == ""
    assert out.count("\n") == 1
    result = json.loads(out)
    assert result["kind"] == KINDS[name]
    if result["kind"] == "capacity-block-expiration":  # names the reservation: every Joiner instance in it
        assert result["instanceIds"] == [] and result["capacityReservationId"] == "cr-0a1b2c3d4e5f60718"
    else:
        assert result["instanceIds"] == ["i-0b662ef9931388ba0"]
    assert "instance owned by Joiner" in result["assumes"]


def test_spot_warning_explanation(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "events", "explain", str(FIXTURE_DIR / "spot_interruption.json"))
    result = json.loads(out)
    assert result["action"] == "cordon-replace-drain"
    assert result["deadline"] == "2024-05-01T12:02:00Z" and result["drainDeadline"] == "2024-05-01T12:02:00Z"
    assert result["markUnavailable"] is True and result["replace"] is True


def test_node_pool_settings_change_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "events", "explain", str(FIXTURE_DIR / "rebalance_recommendation.json"), "--rebalance", "ignore")
    assert json.loads(out)["action"] == "none"
    _, out, _ = run(capsys, "events", "explain", str(FIXTURE_DIR / "health_scheduled_change.json"), "--termination-grace-period", "30m")
    result = json.loads(out)
    assert result["deadline"] == "2024-05-01T14:00:00Z" and result["drainDeadline"] == "2024-05-01T12:30:00Z"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ('{"field1": "value1"}', "not an EventBridge event"),
        ('{"id": "1", "source": "aws.s3", "detail-type": "Object Created"}', "unknown event type"),
        (
            '{"id": "1", "source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "time": "2024-05-01T12:00:00Z", "detail": {}}',
            "detail.instance-id",
        ),
    ],
)
def test_malformed_events_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "event.json"
    path.write_text(content, encoding="utf-8")
    code, out, err = run(capsys, "events", "explain", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and fragment in err and str(path) in err


def test_missing_file_and_bad_duration(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "events", "explain", str(tmp_path / "absent.json"))
    assert code == 2 and "cannot read event file" in err
    code, _, err = run(capsys, "events", "explain", str(FIXTURE_DIR / "spot_interruption.json"), "--termination-grace-period", "soon")
    assert code == 2 and "--termination-grace-period" in err


@pytest.mark.parametrize("output", ["json", "yaml", "table", "wide"])
def test_explain_takes_the_output_formats_every_command_shares(capsys: pytest.CaptureFixture[str], output: str) -> None:
    import yaml

    code, out, err = run(capsys, "events", "explain", str(FIXTURE_DIR / "spot_interruption.json"), "-o", output)
    assert code == 0 and err == ""
    if output in ("json", "yaml"):
        result = json.loads(out) if output == "json" else yaml.safe_load(out)
        assert result["action"] == "cordon-replace-drain" and result["drainDeadline"] == "2024-05-01T12:02:00Z"
        return
    rows = dict(line.split(None, 1) for line in out.strip().splitlines()[1:])
    assert out.splitlines()[0].split() == ["FIELD", "VALUE"]
    assert rows["action"] == "cordon-replace-drain" and rows["instanceIds"] == "i-0b662ef9931388ba0"
    assert ("assumes" in rows) == (output == "wide")
