"""The demo's summary says which scanner mode ran (the README promises it)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from testworld.report import summary_lines
from testworld.simulator import SimulationResult


@pytest.mark.parametrize(("mode", "fragment"), [("economy", "once a minute"), ("responsive", "the watcher wakes the scanner")])
def test_the_summary_names_the_scanner_mode(mode: str, fragment: str) -> None:
    result = SimulationResult(scenario=SimpleNamespace(name="s", description=""), start=datetime(2025, 1, 1, tzinfo=UTC), scanner_mode=mode)
    (line,) = [line for line in summary_lines(result) if line.startswith("scanner mode")]
    assert line.split()[2] == mode and fragment in line
