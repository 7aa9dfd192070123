"""The layer's local bundler, without the network: command construction, copying and pruning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infra.functions import ARCHITECTURE, RUNTIME
from infra.layer import (
    LAYER_PLATFORMS, LAYER_PYTHON_VERSION, LAYER_REQUIREMENTS, PACKAGE_SOURCE, LayerBuildError, LayerBundler, copy_package,
    pip_install_command, prune_layer,
)


def test_pip_command_targets_the_functions_platform(tmp_path):
    command = pip_install_command(tmp_path / "python")
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    assert "--only-binary=:all:" in command and "--no-compile" in command
    platforms = [command[i + 1] for i, arg in enumerate(command) if arg == "--platform"]
    assert platforms == list(LAYER_PLATFORMS) and all(p.endswith("_aarch64") for p in platforms)
    assert command[command.index("--python-version") + 1] == LAYER_PYTHON_VERSION
    assert command[command.index("--implementation") + 1] == "cp"
    assert command[command.index("--target") + 1] == str(tmp_path / "python")
    assert command[-len(LAYER_REQUIREMENTS):] == list(LAYER_REQUIREMENTS)


def test_layer_matches_the_functions_runtime_and_architecture():
    assert RUNTIME.name == f"python{LAYER_PYTHON_VERSION}"
    assert ARCHITECTURE.name == "arm64" and "manylinux_2_28_aarch64" in LAYER_PLATFORMS


def test_requirements_are_pinned_and_cover_the_runtime_dependencies():
    names = {requirement.split("==")[0].split("[")[0].lower() for requirement in LAYER_REQUIREMENTS}
    assert names == {"aws-lambda-powertools", "boto3", "kubernetes", "pyyaml"}
    assert all("==" in requirement for requirement in LAYER_REQUIREMENTS)
    assert "aws-lambda-powertools[parser,tracer]==" in " ".join(LAYER_REQUIREMENTS)


def make_site(root: Path) -> Path:
    """A fake ``pip --target`` result with everything the pruner should and should not touch."""
    files = [
        "kubernetes/__init__.py", "kubernetes/client/api_client.py", "kubernetes/aio/__init__.py", "kubernetes/aio/client/api.py",
        "kubernetes/__pycache__/x.cpython-311.pyc", "websocket/tests/test_ws.py", "websocket/_core.py",
        "certifi/tests/__init__.py", "yaml/__init__.py", "yaml/__pycache__/y.cpython-311.pyc", "bin/normalizer",
        "pydantic_core-2.0.dist-info/RECORD", "pydantic_core-2.0.dist-info/tests/keep.txt", "stray.pyc",
        "joiner/__init__.py", "joiner/tests/keep_me.py", "joiner/__pycache__/z.pyc",
        "joiner/local/simulator.py", "joiner/scenarios/classic.yaml", "joiner/localized.py",
    ]
    for relative in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    return root


def test_prune_removes_caches_tests_scripts_and_the_async_client(tmp_path):
    site = make_site(tmp_path / "python")
    removed = prune_layer(site)
    assert removed == sorted([
        "bin", "certifi/tests", "joiner/__pycache__", "joiner/local", "joiner/scenarios", "kubernetes/__pycache__", "kubernetes/aio",
        "stray.pyc", "websocket/tests", "yaml/__pycache__",
    ])
    remaining = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert remaining == sorted([
        "kubernetes/__init__.py", "kubernetes/client/api_client.py", "websocket/_core.py", "yaml/__init__.py",
        "pydantic_core-2.0.dist-info/RECORD", "pydantic_core-2.0.dist-info/tests/keep.txt",
        "joiner/__init__.py", "joiner/tests/keep_me.py", "joiner/localized.py",
    ])
    assert prune_layer(site) == []  # idempotent


def test_copy_package_skips_bytecode(tmp_path):
    source = tmp_path / "src" / "joiner"
    (source / "__pycache__").mkdir(parents=True)
    (source / "__init__.py").write_text("")
    (source / "__pycache__" / "m.cpython-311.pyc").write_text("")
    (source / "domain").mkdir()
    (source / "domain" / "model.py").write_text("X = 1\n")
    copy_package(source, tmp_path / "out" / "joiner")
    copied = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert copied == ["joiner/__init__.py", "joiner/domain/model.py"]
    with pytest.raises(LayerBuildError, match="no __init__.py"):
        copy_package(tmp_path / "nowhere", tmp_path / "out2")


class FakePip:
    """Stands in for subprocess.run: records the command and 'installs' a fake site."""

    def __init__(self, returncode: int = 0, stderr: str = "") -> None:
        self.commands: list[list[str]] = []
        self.returncode = returncode
        self.stderr = stderr

    def __call__(self, command, **kwargs):
        self.commands.append(command)
        assert kwargs == {"capture_output": True, "text": True, "check": False}
        if self.returncode == 0:
            make_site(Path(command[command.index("--target") + 1]))
        return subprocess.CompletedProcess(command, self.returncode, "", self.stderr)


def test_try_bundle_installs_copies_the_package_and_prunes(tmp_path):
    pip = FakePip()
    bundler = LayerBundler(runner=pip)
    assert bundler.try_bundle(str(tmp_path), None) is True
    (command,) = pip.commands
    assert command[command.index("--target") + 1] == str(tmp_path / "python")
    site = tmp_path / "python"
    assert (site / "joiner" / "settings.py").read_text() == (PACKAGE_SOURCE / "settings.py").read_text()
    assert not (site / "kubernetes" / "aio").exists() and not list(site.rglob("__pycache__"))


def test_try_bundle_raises_with_pips_last_lines_on_failure(tmp_path):
    pip = FakePip(returncode=1, stderr="Collecting x\nERROR: No matching distribution found for pydantic-core\n")
    with pytest.raises(LayerBuildError, match=r"(?s)exit 1\):\n.*No matching distribution found for pydantic-core"):
        LayerBundler(runner=pip).try_bundle(str(tmp_path))
