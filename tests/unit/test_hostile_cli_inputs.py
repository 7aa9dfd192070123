"""Hostile input to every CLI path (issue 10, defect 8): each exits with status 2 and one
line on stderr, never a traceback or a hang.

Inputs that hung the old code (alias bombs) run in a child process with a memory cap and
a timeout, so a regression fails the test instead of the machine.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from joiner.cli.main import main
from tests.events.fixtures import FIXTURE_DIR

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "joiner" / "python"
CONSOLIDATION = ROOT / "examples" / "snapshots" / "disrupt-consolidation.yaml"

#: Billion laughs: eight levels of ten aliases over ten strings, 10**9 strings once expanded.
BILLION_LAUGHS = (
    "\n".join(
        ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        + [f"{name}: &{name} [{','.join([f'*{previous}'] * 10)}]" for previous, name in zip("abcdefgh", "bcdefghi", strict=True)]
    )
    + "\n"
)
DEEP_YAML = "[" * 5000 + "]" * 5000 + "\n"
DEEP_JSON = "[" * 5000 + "]" * 5000


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_exit_2(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2, (code, err[-500:])
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err, err[-500:]
    for fragment in fragments:
        assert fragment in err, err


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def run_isolated(*argv: str) -> tuple[int, str, str]:
    """``joiner ARGV`` in a child process: 1 GiB of address space, 60 s (the old code hung)."""
    env = {**os.environ, "PYTHONPATH": f"{PACKAGE}{os.pathsep}{ROOT}"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "joiner.cli.main", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            preexec_fn=_limit_memory,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"joiner {' '.join(argv)} did not finish")
    return done.returncode, done.stdout, done.stderr


def bomb_snapshot(tmp_path: Path) -> Path:
    """The consolidation example with the bomb under an unknown key of the NodeClass's block
    device mapping, and a node whose NodeClass hash makes drift hash the NodeClass."""
    text = CONSOLIDATION.read_text(encoding="utf-8")
    bomb = "\n".join("      " + line for line in BILLION_LAUGHS.splitlines())
    text = text.replace("  role: JoinerNodeRole-demo\n", f"  role: JoinerNodeRole-demo\n  blockDeviceMappings:\n  - deviceName: /dev/xvda\n    x:\n{bomb}\n", 1)
    text = text.replace(
        "    name: ip-10-0-1-10.ec2.internal\n", '    name: ip-10-0-1-10.ec2.internal\n    annotations: {joiner.dev/nodeclass-hash: "0000"}\n', 1
    )
    path = tmp_path / "bomb-snapshot.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_import_karpenter_refuses_an_alias_bomb(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BILLION_LAUGHS, encoding="utf-8")
    code, out, err = run_isolated("import-karpenter", str(path))
    assert_one_line_exit_2(code, out, err, str(path), "line 5, column", "aliases expand to more than")


@pytest.mark.parametrize("command", ["plan", "disrupt"])
def test_snapshot_alias_bomb_under_an_unknown_block_device_key(tmp_path: Path, command: str) -> None:
    path = bomb_snapshot(tmp_path)
    code, out, err = run_isolated(command, str(path), "-o", "json")
    assert_one_line_exit_2(code, out, err, "aliases expand to more than")


def test_the_bomb_snapshot_without_the_bomb_is_refused_for_its_unknown_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same shape with the values written out is refused for the unknown key, as kubectl's
    strict field validation refuses it, naming the object and the field."""
    text = bomb_snapshot(tmp_path).read_text(encoding="utf-8")
    lines = [
        line
        for line in text.splitlines()
        if not line.startswith(("      b:", "      c:", "      d:", "      e:", "      f:", "      g:", "      h:", "      i:"))
    ]
    plain = tmp_path / "plain.yaml"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run(capsys, "disrupt", str(plain), "-o", "json", "--now", "2025-01-06T12:00:00Z")
    assert code == 2 and out == ""
    assert 'NodeClass default: spec.blockDeviceMappings[0].x: unknown field "x"' in err


@pytest.mark.parametrize("command", ["plan", "disrupt"])
def test_api_version_given_as_a_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    path = tmp_path / "snapshot.yaml"
    path.write_text("apiVersion: {group: joiner.dev}\nkind: NodePool\nmetadata: {name: x}\n", encoding="utf-8")
    code, out, err = run(capsys, command, str(path))
    assert_one_line_exit_2(code, out, err, "NodePool x", "apiVersion", "expected a string")


@pytest.mark.parametrize("command", ["plan", "disrupt"])
def test_a_401_digit_min_savings(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    text = CONSOLIDATION.read_text(encoding="utf-8").replace("      perHour: 0.01\n", f"      perHour: {'9' * 401}\n", 1)
    assert "9" * 401 in text
    path = tmp_path / "snapshot.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, err = run(capsys, command, str(path))
    assert_one_line_exit_2(code, out, err, "line 47, column 16", "401 characters")


@pytest.mark.parametrize("command", ["plan", "disrupt", "import-karpenter"])
def test_5000_deep_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(DEEP_YAML, encoding="utf-8")
    code, out, err = run(capsys, command, str(path))
    # At the 101st level, or where libyaml's scanner stops looking ahead (its own 1,000-level limit).
    assert_one_line_exit_2(code, out, err, "nested more than 100 levels deep")
    assert re.search(r"line 1, column (101|1001):", err), err


def test_5000_deep_json_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.json"
    path.write_text(DEEP_JSON, encoding="utf-8")
    code, out, err = run(capsys, "events", "explain", str(path))
    assert_one_line_exit_2(code, out, err, str(path), "nested more than")


def test_5000_deep_json_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "catalog.json"
    path.write_text('{"instanceTypes": ' + DEEP_JSON + "}", encoding="utf-8")
    code, out, err = run(capsys, "plan", str(CONSOLIDATION), "--catalog", str(path))
    assert_one_line_exit_2(code, out, err, "catalog", "nested more than")


@pytest.mark.parametrize(
    ("fixture", "edit"),
    [
        ("spot_interruption.json", lambda event: event.update(time="9999-12-31T23:59:59Z")),
        ("health_scheduled_change.json", lambda event: event["detail"].update(startTime="9999-12-31T23:59:59-01:00")),
        ("capacity_reservation_interruption.json", lambda event: event["detail"].update({"instance-termination-time": "9999-12-31T23:59:59Z"})),
    ],
)
def test_year_9999_event_times(tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture: str, edit) -> None:  # type: ignore[no-untyped-def]
    event = json.loads((FIXTURE_DIR / fixture).read_text(encoding="utf-8"))
    edit(event)
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    code, out, err = run(capsys, "events", "explain", str(path))
    assert_one_line_exit_2(code, out, err, str(path), "9999-12-31T23:59:59")


@pytest.mark.parametrize("fixture", ["spot_interruption.json", "health_scheduled_change.json"])
def test_an_enormous_termination_grace_period(capsys: pytest.CaptureFixture[str], fixture: str) -> None:
    code, out, err = run(capsys, "events", "explain", str(FIXTURE_DIR / fixture), "--termination-grace-period", "100000000h")
    assert_one_line_exit_2(code, out, err, "--termination-grace-period", "too large")


def test_snapshot_timestamps_in_year_9999(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = CONSOLIDATION.read_text(encoding="utf-8").replace('creationTimestamp: "2025-01-05T08:00:00Z"', 'creationTimestamp: "9999-12-31T23:59:59-01:00"', 1)
    path = tmp_path / "snapshot.yaml"
    path.write_text(text, encoding="utf-8")
    code, out, err = run(capsys, "disrupt", str(path), "--now", "2025-01-06T12:00:00Z")
    assert_one_line_exit_2(code, out, err, "metadata.creationTimestamp", "9999-12-31T23:59:59-01:00")


def test_disrupt_now_in_year_9999(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "disrupt", str(CONSOLIDATION), "--now", "9999-12-31T23:59:59-01:00")
    assert_one_line_exit_2(code, out, err, "--now")
