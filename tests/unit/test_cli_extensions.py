"""The test world's ``demo`` and ``simulate`` join the shipped ``joiner`` CLI through the
``joiner.cli`` entry-point group (pyproject.toml), found at run time: the shipped package never
imports ``testworld``. Without it they stop with one line saying how to install it.

The installed metadata may predate pyproject.toml (an editable install made before a change), so
these tests read the declaration from pyproject.toml and put it on ``sys.path`` as a distribution
of their own where they exercise the lookup itself."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from joiner.cli.main import EXTENSION_GROUP, TEST_WORLD_COMMANDS, build_parser, load_extensions, main

ROOT = Path(__file__).resolve().parents[2]


def declared() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    entry_points: dict[str, str] = project["entry-points"][EXTENSION_GROUP]
    return entry_points


def distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry_points: dict[str, str]) -> None:
    """A ``joiner`` distribution first on ``sys.path`` (it shadows the installed one) declaring ``entry_points``."""
    info = tmp_path / "joiner-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: joiner\nVersion: 0.0.0\n", encoding="utf-8")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{EXTENSION_GROUP}]\n{lines}", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    return captured.err.strip()


def test_pyproject_declares_the_test_worlds_register() -> None:
    from testworld.cli import register

    (value,) = declared().values()
    assert EntryPoint(name="testworld", value=value, group=EXTENSION_GROUP).load() is register


@pytest.mark.parametrize("argv", [["demo"], ["simulate", "x.yaml"], ["--log-level", "info", "demo", "--quiet"], ["demo", "--help"]])
def test_without_the_test_world_its_commands_stop_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv, extensions=[]) == 2
    line = one_line(capsys)
    command = next(word for word in argv if word in TEST_WORLD_COMMANDS)
    assert line.startswith(f"joiner {command}: needs the local test world") and "pip install -e '.[local]'" in line


def test_without_the_test_world_help_lists_its_commands_as_not_installed() -> None:
    text = build_parser([]).format_help()
    assert all(name in text for name in TEST_WORLD_COMMANDS) and "not installed" in text
    assert "not installed" not in build_parser(load_extensions([EntryPoint("world", declared()["testworld"], EXTENSION_GROUP)])[0]).format_help()


def test_the_installed_entry_points_are_looked_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    distribution(tmp_path, monkeypatch, declared())
    assert main(["simulate", str(tmp_path / "nope.yaml")]) == 2
    line = one_line(capsys)
    assert line.startswith("joiner simulate: ") and "cannot read scenario" in line and "nope.yaml" in line


def test_an_entry_point_that_cannot_be_loaded_is_named_in_the_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    distribution(tmp_path, monkeypatch, {"testworld": "testworld_missing.cli:register"})
    assert main(["demo"]) == 2
    line = one_line(capsys)
    assert "needs the local test world" in line and "testworld_missing" in line


def test_each_entry_point_value_registers_once() -> None:
    value = declared()["testworld"]
    registers, problems = load_extensions([EntryPoint("a", value, EXTENSION_GROUP), EntryPoint("b", value, EXTENSION_GROUP)])
    assert len(registers) == 1 and problems == []


def test_python_m_testworld_runs_the_cli_with_the_world(tmp_path: Path) -> None:
    env = {"PYTHONPATH": f"{ROOT / 'layers' / 'joiner' / 'python'}:{ROOT}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "testworld", "simulate", str(tmp_path / "nope.yaml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("joiner simulate: ") and "cannot read scenario" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_the_world_without_the_local_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from testworld.cli import main as world_main

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "kmock" else found(name, *rest))
    assert world_main(["demo", "--quiet"]) == 2
    line = one_line(capsys)
    assert line == "joiner demo: the local test world needs kmock: pip install -e '.[local]' (make demo does)"
