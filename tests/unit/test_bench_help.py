"""Every benchmark answers ``--help`` with its usage instead of running or crashing."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import bench

#: bench.cost reads its own flags (``--pattern-seconds=``) and is reworked separately.
SKIP = {"cost", "kube_standin", "scale_world", "workloads"}
MODULES = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name not in SKIP)


@pytest.mark.parametrize("name", MODULES)
def test_help_prints_usage_and_exits_zero(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"bench.{name}")
    main = getattr(module, "main", None)
    if main is None:
        pytest.skip(f"bench.{name} has no main")
    assert "argv" in inspect.signature(main).parameters, f"bench.{name}.main takes no argv"
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert f"python -m bench.{name}" in out
