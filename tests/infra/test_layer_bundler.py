"""The layer's local bundler, without the network: command construction, copying and pruning."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from infra.functions import ARCHITECTURE, RUNTIME
from infra.layer import (
    LAYER_PLATFORMS,
    LAYER_PYTHON_ENV,
    LAYER_PYTHON_VERSION,
    LAYER_REQUIREMENTS,
    PACKAGE_SOURCE,
    LayerBuildError,
    LayerBundler,
    compile_bytecode,
    copy_package,
    find_layer_python,
    pip_install_command,
    prune_layer,
)


@pytest.fixture(scope="module")
def layer_python() -> str:
    """The runtime's Python, as the bundler finds it (the layer cannot be built without one)."""
    try:
        return find_layer_python()
    except LayerBuildError as missing:
        pytest.skip(str(missing))


def test_pip_command_targets_the_functions_platform(tmp_path):
    command = pip_install_command(tmp_path / "python")
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    assert "--only-binary=:all:" in command and "--no-compile" in command
    platforms = [command[i + 1] for i, arg in enumerate(command) if arg == "--platform"]
    assert platforms == list(LAYER_PLATFORMS) and all(p.endswith("_aarch64") for p in platforms)
    assert command[command.index("--python-version") + 1] == LAYER_PYTHON_VERSION
    assert command[command.index("--implementation") + 1] == "cp"
    assert command[command.index("--target") + 1] == str(tmp_path / "python")
    assert command[-len(LAYER_REQUIREMENTS) :] == list(LAYER_REQUIREMENTS)


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
        "kubernetes/__init__.py",
        "kubernetes/client/api_client.py",
        "kubernetes/aio/__init__.py",
        "kubernetes/aio/client/api.py",
        "kubernetes/__pycache__/x.cpython-311.pyc",
        "websocket/tests/test_ws.py",
        "websocket/_core.py",
        "certifi/tests/__init__.py",
        "yaml/__init__.py",
        "yaml/__pycache__/y.cpython-311.pyc",
        "bin/normalizer",
        "pydantic_core-2.0.dist-info/RECORD",
        "pydantic_core-2.0.dist-info/tests/keep.txt",
        "stray.pyc",
        "joiner/__init__.py",
        "joiner/tests/keep_me.py",
        "joiner/__pycache__/z.pyc",
        "joiner/localized.py",
    ]
    for relative in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    return root


def test_prune_removes_caches_tests_scripts_and_the_async_client(tmp_path):
    site = make_site(tmp_path / "python")
    removed = prune_layer(site)
    assert removed == sorted(
        [
            "bin",
            "certifi/tests",
            "joiner/__pycache__",
            "kubernetes/__pycache__",
            "kubernetes/aio",
            "stray.pyc",
            "websocket/tests",
            "yaml/__pycache__",
        ]
    )
    remaining = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert remaining == sorted(
        [
            "kubernetes/__init__.py",
            "kubernetes/client/api_client.py",
            "websocket/_core.py",
            "yaml/__init__.py",
            "pydantic_core-2.0.dist-info/RECORD",
            "pydantic_core-2.0.dist-info/tests/keep.txt",
            "joiner/__init__.py",
            "joiner/tests/keep_me.py",
            "joiner/localized.py",
        ]
    )
    assert prune_layer(site) == []  # idempotent


def test_the_layers_package_holds_none_of_the_test_world(tmp_path):
    """The test world (emulator, simulator, soak, scenarios) lives beside the package, so the
    copy the layer ships has none of it, with nothing left to prune."""
    copy_package(PACKAGE_SOURCE, tmp_path / "joiner")
    shipped = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}
    world = Path(__file__).resolve().parents[2] / "testworld"
    world_modules = {p.name for p in world.glob("*.py")} - {"__init__.py", "__main__.py", "aws.py"}
    assert {"kube_emulator.py", "simulator.py", "soak.py"} <= world_modules
    assert not {Path(p).name for p in shipped} & (world_modules | {"testworld", "local", "scenarios", "classic.yaml"})
    imported = {
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for p in tmp_path.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert "joiner.cli.main" in imported and not [name for name in imported if name.split(".")[0] == "testworld"]


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


def test_try_bundle_installs_copies_the_package_and_prunes(tmp_path, layer_python):
    pip = FakePip()
    bundler = LayerBundler(runner=pip, bytecode_python=layer_python)
    assert bundler.try_bundle(str(tmp_path), None) is True
    (command,) = pip.commands
    assert command[command.index("--target") + 1] == str(tmp_path / "python")
    site = tmp_path / "python"
    assert (site / "joiner" / "settings.py").read_text() == (PACKAGE_SOURCE / "settings.py").read_text()
    assert not (site / "kubernetes" / "aio").exists()
    compiled = {p.relative_to(site).as_posix() for p in site.rglob("*.pyc")}
    tag = f"cpython-{LAYER_PYTHON_VERSION.replace('.', '')}"
    assert compiled == {
        f"{p.parent.relative_to(site).as_posix()}/__pycache__/{p.stem}.{tag}.pyc" for p in site.rglob("*.py")
    }  # every module, for the runtime's Python only: the stale 3.11 caches pip's target held are gone


def test_try_bundle_raises_with_pips_last_lines_on_failure(tmp_path, layer_python):
    pip = FakePip(returncode=1, stderr="Collecting x\nERROR: No matching distribution found for pydantic-core\n")
    with pytest.raises(LayerBuildError, match=r"(?s)exit 1\):\n.*No matching distribution found for pydantic-core"):
        LayerBundler(runner=pip, bytecode_python=layer_python).try_bundle(str(tmp_path))


def test_the_bytecode_interpreter_is_the_runtimes_python(layer_python):
    version = subprocess.run(
        [layer_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version == LAYER_PYTHON_VERSION == RUNTIME.name.removeprefix("python")


def test_an_interpreter_of_another_version_is_refused(monkeypatch):
    monkeypatch.setenv(LAYER_PYTHON_ENV, sys.executable)
    if sys.version_info[:2] == tuple(int(part) for part in LAYER_PYTHON_VERSION.split(".")):
        pytest.skip("the test interpreter is the runtime's version")
    with pytest.raises(LayerBuildError, match=rf"{LAYER_PYTHON_ENV}=.* is Python 3\.\d+, the functions run {LAYER_PYTHON_VERSION}"):
        find_layer_python()


def _compiled_site(root: Path, layer_python: str) -> Path:
    site = root / "python"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg" / "mod.py").write_text("NAMES = frozenset({'alpha', 'beta', 'gamma', 'delta'})\nVALUE = 'compiled'\n")
    compile_bytecode(site, layer_python)
    return site


def test_bytecode_is_used_from_a_read_only_layer_without_looking_at_the_sources(tmp_path, layer_python):
    site = _compiled_site(tmp_path, layer_python)
    cached = site / "pkg" / "__pycache__" / f"mod.cpython-{LAYER_PYTHON_VERSION.replace('.', '')}.pyc"
    header = cached.read_bytes()[:16]
    assert int.from_bytes(header[4:8], "little") == 0b01  # hash-based, source not checked (unchecked-hash)
    # Changing the source after the build changes nothing: the interpreter trusts the .pyc
    # (a timestamp .pyc would be recompiled, which a read-only /opt cannot store).
    (site / "pkg" / "mod.py").write_text("VALUE = 'source'\n")
    loaded = subprocess.run(
        [layer_python, "-I", "-S", "-B", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); import pkg.mod; print(pkg.mod.VALUE, pkg.mod.__spec__.cached)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert loaded == ["compiled", str(cached)]


def test_bytecode_is_reproducible_and_names_the_lambda_mount(tmp_path, layer_python):
    first = _compiled_site(tmp_path / "a", layer_python)
    second = _compiled_site(tmp_path / "b", layer_python)
    name = f"mod.cpython-{LAYER_PYTHON_VERSION.replace('.', '')}.pyc"
    one, two = (site / "pkg" / "__pycache__" / name for site in (first, second))
    assert one.read_bytes() == two.read_bytes()  # same asset hash on every build, wherever it is built
    assert b"/opt/python/pkg/mod.py" in one.read_bytes() and str(tmp_path).encode() not in one.read_bytes()
