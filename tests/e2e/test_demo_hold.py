"""``joiner simulate --hold`` keeps the local world up at the end and prints how to reach it:
the printed ``joiner status`` command works against it (docs/demo.md)."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest
import yaml

from testworld.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_hold_prints_a_working_status_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = yaml.safe_load((ROOT / "examples" / "scenarios" / "classic.yaml").read_text(encoding="utf-8"))
    scenario["duration"] = "2m30s"
    scenario["events"] = [{"at": "30s", "scale": {"workload": "inflate", "replicas": 2}}]
    scenario.pop("expect", None)
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    seen: dict[str, object] = {}

    class Stdin(io.StringIO):
        def read(self, *_: object) -> str:
            out = capsys.readouterr().out
            (line,) = [line.strip() for line in out.splitlines() if "joiner status" in line]
            words = shlex.split(line)
            env = dict(word.split("=", 1) for word in words if "=" in word and not word.startswith("-"))
            argv = words[words.index("joiner") + 1 :]
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            seen["kubectl"] = [line for line in out.splitlines() if "kubectl --kubeconfig" in line]
            seen["code"] = main([*argv, "-o", "json"])
            seen["status"] = json.loads(capsys.readouterr().out)
            for key in env:
                monkeypatch.delenv(key)
            return ""

    monkeypatch.setattr("sys.stdin", Stdin())
    report = tmp_path / "report.html"
    code = main(["simulate", str(path), "--hold", "--quiet", "--report", str(report)])
    assert code == 0
    assert seen["code"] == 0 and seen["kubectl"]
    status = seen["status"]
    assert isinstance(status, dict)
    assert {p["name"] for p in status["nodePools"]} >= {"spot"}
    assert any(p["nodes"] >= 1 for p in status["nodePools"])
    assert (tmp_path / "report.kubeconfig").exists()
