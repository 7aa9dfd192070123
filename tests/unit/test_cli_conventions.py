"""CLI conventions every subcommand shares (issue 16 §3): --version and --log-level."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest

from joiner.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def test_version_prints_the_projects_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert capsys.readouterr().out.strip() == f"joiner {expected}"


def test_log_level_applies_to_joiners_logger_for_any_command(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from joiner.observability import logger

    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "INFO")
    before = logger.log_level
    try:
        assert main(["--log-level", "error", "plan", str(ROOT / "examples/snapshots/classic.yaml"), "-o", "json"]) == 0
        assert logger.log_level == logging.ERROR and logging.getLogger().level == logging.ERROR
    finally:
        logger.setLevel(before)
        logging.getLogger().setLevel(logging.WARNING)
    with pytest.raises(SystemExit) as done:
        main(["--log-level", "loud", "plan", "x"])
    assert done.value.code == 2 and "invalid choice: 'loud'" in capsys.readouterr().err
