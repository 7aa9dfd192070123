"""Run ``python -m bench.scale`` in a subprocess and return its one JSON line (tests that
compare what a function reads on clusters of different sizes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def scale_line(*args: str, timeout: float = 900) -> dict[str, Any]:
    """The single function or steady line ``bench.scale`` prints for ``args`` (besides the
    image it writes first); fails the test on an ``error``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "joiner" / "python"), str(ROOT)])}
    answer = subprocess.run([sys.executable, "-m", "bench.scale", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=True)
    lines = [json.loads(line) for line in answer.stdout.splitlines() if line.startswith("{")]
    lines = [line for line in lines if line.get("function") != "image_write"]
    assert len(lines) == 1, answer.stdout + answer.stderr
    assert "error" not in lines[0], lines[0]
    return lines[0]
