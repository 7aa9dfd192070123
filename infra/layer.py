"""The shared Lambda layer: Joiner's package and its runtime dependencies, built without Docker.

:class:`LayerBundler` is a CDK local bundler: ``pip install`` downloads wheels for the
functions' platform (Linux arm64, CPython 3.13) into ``<out>/python``, copies the
``joiner`` package beside them and prunes what Lambda never loads. The Docker image CDK
asks for is a placeholder: local bundling always succeeds or raises.

boto3 is shipped in the layer although the runtime has one: ``aws-xray-sdk`` (the
tracer extra) depends on botocore, so pip installs a botocore anyway, and a layer
botocore that shadows the runtime's while the runtime's boto3 stays is a version mix
nobody tested. Shipping a pinned boto3/botocore/s3transfer set makes the functions run
the SDK the test suite ran, whatever the runtime's bundled SDK is that month.

Bytecode: Lambda mounts the layer read-only at ``/opt``, so an interpreter that finds no
``.pyc`` compiles every module it imports again on every cold start (about half of a
cold start's import time). :func:`compile_bytecode` therefore ships ``__pycache__/*.cpython-313.pyc``
compiled by a CPython of the runtime's version (:func:`find_layer_python`; bytecode is
version-specific, not platform-specific), at optimization level 0 (Lambda runs
``python`` without ``-O``, which would look for ``.opt-1.pyc``) and with unchecked-hash
invalidation: the runtime uses them without comparing source timestamps (the asset zip
does not keep them) or hashing sources.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

__all__ = [
    "LAYER_BUNDLING_CONTEXT",
    "LAYER_MOUNT",
    "LAYER_PLATFORMS",
    "LAYER_PYTHON_ENV",
    "LAYER_PYTHON_VERSION",
    "LAYER_REQUIREMENTS",
    "LAYER_SOURCE",
    "PACKAGE_SOURCE",
    "JoinerLayer",
    "LayerBuildError",
    "LayerBundler",
    "compile_bytecode",
    "copy_package",
    "find_layer_python",
    "pip_install_command",
    "prune_layer",
]

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
#: The asset directory: its ``python/`` folder is what Lambda mounts at ``/opt/python``.
LAYER_SOURCE = REPOSITORY_ROOT / "layers" / "joiner"
PACKAGE_SOURCE = LAYER_SOURCE / "python" / "joiner"

#: Must match the functions' runtime and architecture (infra/functions.py).
LAYER_PYTHON_VERSION = "3.13"
#: Names the interpreter that compiles the layer's bytecode (a CPython ``LAYER_PYTHON_VERSION``).
LAYER_PYTHON_ENV = "JOINER_LAYER_PYTHON"
#: Context key: ``false`` ships the layer's source directory unbundled (offline synth).
LAYER_BUNDLING_CONTEXT = "layerBundling"
#: Where Lambda mounts the layer's ``python/`` directory (the file names compiled into the bytecode).
LAYER_MOUNT = "/opt/python"
#: Amazon Linux 2023 (the python3.12+ runtimes) has glibc 2.34, so manylinux_2_28 and older
#: wheels run. pip matches ``--platform`` tags exactly (a manylinux_2_28 platform does not
#: admit manylinux_2_17 wheels such as pydantic-core's), so every accepted tag is listed.
LAYER_PLATFORMS: tuple[str, ...] = ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64")
#: Pinned runtime dependencies (within pyproject.toml's ranges): the layer is reproducible.
LAYER_REQUIREMENTS: tuple[str, ...] = (
    "aws-lambda-powertools[parser,tracer]==3.37.0",
    "boto3==1.44.5",
    "kubernetes==37.0.1",
    "PyYAML==6.0.3",
)

#: Directory names removed anywhere in the layer before it is compiled: bytecode caches
#: built for another interpreter and test suites shipped inside wheels.
PRUNED_DIRECTORY_NAMES = frozenset({"__pycache__", "tests", "test"})
#: Paths (relative to ``python/``) Lambda never imports: console scripts and the kubernetes
#: client's asyncio copy (about half the client's size; Joiner is synchronous).
PRUNED_PATHS: tuple[str, ...] = ("bin", "kubernetes/aio")
PRUNED_SUFFIXES: tuple[str, ...] = (".pyc", ".pyo")


class LayerBuildError(RuntimeError):
    """pip or compileall failed, the package source is missing or no interpreter of the
    runtime's Python version was found; the message says which and how to fix it."""


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        result = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    major, _, minor = result.stdout.strip().partition(".")
    if result.returncode != 0 or not (major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def find_layer_python(version: str = LAYER_PYTHON_VERSION) -> str:
    """A CPython ``version`` interpreter to compile the layer's bytecode: ``$JOINER_LAYER_PYTHON``
    when set (it must be that version), else the running interpreter when it is, else
    ``python<version>`` on ``PATH``, else a pyenv-installed one. Raises :class:`LayerBuildError`.
    """
    wanted = tuple(int(part) for part in version.split("."))
    explicit = os.environ.get(LAYER_PYTHON_ENV, "").strip()
    if explicit:
        found = _python_version(explicit)
        if found != wanted:
            raise LayerBuildError(
                f"layer: {LAYER_PYTHON_ENV}={explicit} is Python {'.'.join(map(str, found)) if found else '(not runnable)'}, the functions run {version}"
            )
        return explicit
    if sys.version_info[:2] == wanted:
        return sys.executable
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [
        shutil.which(f"python{version}") or "",
        *(str(path) for path in sorted(pyenv_root.glob(f"versions/{version}*/bin/python{version}"), reverse=True)),
    ]
    for candidate in candidates:
        if candidate and _python_version(candidate) == wanted:
            return candidate
    raise LayerBuildError(
        f"layer: no Python {version} found to compile the layer's bytecode for the python{version} runtime "
        f"(bytecode is specific to the Python version); install one or set {LAYER_PYTHON_ENV}=/path/to/python{version}"
    )


def compile_bytecode(site: Path, python: str) -> None:
    """Compile every module under ``site`` with ``python`` (see the module docstring): level 0,
    unchecked-hash, file names as mounted (``/opt/python/...``), a fixed hash seed so the
    marshalled set constants, hence the asset hash, are the same on every build."""
    command = [python, "-m", "compileall", "-q", "-j", "0", "-o", "0", "--invalidation-mode", "unchecked-hash", "-s", str(site), "-p", LAYER_MOUNT, str(site)]
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise LayerBuildError(f"layer: compileall failed (exit {result.returncode}):\n{tail}")


def pip_install_command(
    target: Path,
    *,
    python: str = sys.executable,
    requirements: Sequence[str] = LAYER_REQUIREMENTS,
    python_version: str = LAYER_PYTHON_VERSION,
    platforms: Sequence[str] = LAYER_PLATFORMS,
) -> list[str]:
    """The pip command that installs ``requirements`` as wheels for the Lambda platform into ``target``."""
    return [
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-input",
        "--no-compile",  # pip would compile for the bundling interpreter; compile_bytecode() compiles for the runtime
        "--only-binary=:all:",
        *(argument for platform in platforms for argument in ("--platform", platform)),
        "--implementation",
        "cp",
        "--python-version",
        python_version,
        "--target",
        str(target),
        *requirements,
    ]


def copy_package(source: Path, destination: Path) -> None:
    """Copy the ``joiner`` package without caches or compiled files."""
    if not (source / "__init__.py").is_file():
        raise LayerBuildError(f"layer: package source {source} has no __init__.py")
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"), dirs_exist_ok=True)


def prune_layer(site: Path) -> list[str]:
    """Remove what Lambda never loads from ``site`` (the layer's ``python/`` directory).

    Returns the removed paths, relative to ``site`` and sorted. Only entries inside ``site``
    are touched; the ``joiner`` package itself is never pruned of test-named folders.
    """
    removed: list[str] = []
    for pruned in PRUNED_PATHS:
        path = site / pruned
        if path.is_dir():
            shutil.rmtree(path)
            removed.append(pruned)
        elif path.exists():
            path.unlink()
            removed.append(pruned)
    for path in sorted(site.rglob("*"), key=lambda p: (len(p.parts), str(p))):
        if not path.exists() and not path.is_symlink():
            continue  # inside a directory removed earlier in this walk
        relative = path.relative_to(site)
        if relative.parts[0] == "joiner":
            if path.is_dir() and path.name == "__pycache__":
                shutil.rmtree(path)
                removed.append(relative.as_posix())
            continue
        if path.is_dir() and not path.is_symlink() and path.name in PRUNED_DIRECTORY_NAMES:
            if any(part.endswith(".dist-info") for part in relative.parts):
                continue
            shutil.rmtree(path)
            removed.append(relative.as_posix())
        elif path.is_file() and path.suffix in PRUNED_SUFFIXES:
            path.unlink()
            removed.append(relative.as_posix())
    return sorted(removed)


Runner = Callable[..., Any]


@jsii.implements(ILocalBundling)
class LayerBundler:
    """CDK local bundling for the layer asset (see the module docstring)."""

    def __init__(
        self,
        *,
        package_source: Path = PACKAGE_SOURCE,
        requirements: Sequence[str] = LAYER_REQUIREMENTS,
        python: str = sys.executable,
        platforms: Sequence[str] = LAYER_PLATFORMS,
        bytecode_python: str | None = None,
        runner: Runner = subprocess.run,
    ) -> None:
        self.package_source = package_source
        self.requirements = tuple(requirements)
        self.python = python
        self.platforms = tuple(platforms)
        self.bytecode_python = bytecode_python
        self.runner = runner

    def try_bundle(self, output_dir: str, options: Any = None, **_ignored: Any) -> bool:
        """Build the layer into ``output_dir``; raises :class:`LayerBuildError` on failure
        (returning False would make CDK fall back to the placeholder Docker image)."""
        bytecode_python = self.bytecode_python or find_layer_python()
        site = Path(output_dir) / "python"
        site.mkdir(parents=True, exist_ok=True)
        command = pip_install_command(site, python=self.python, requirements=self.requirements, platforms=self.platforms)
        result = self.runner(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stderr or result.stdout or "").strip().splitlines()[-15:])
            raise LayerBuildError(f"layer: pip install failed (exit {result.returncode}):\n{tail}")
        copy_package(self.package_source, site / "joiner")
        prune_layer(site)
        compile_bytecode(site, bytecode_python)
        return True


class JoinerLayer(Construct):
    """``layer``: the shared :class:`aws_lambda.LayerVersion` for every Joiner function.

    Skip bundling (offline synth, tests) with the context ``aws:cdk:bundling-stacks=[]``
    (``python -m infra.synth --no-bundling``) or, through the CDK CLI, which reserves
    ``aws:`` keys, ``-c layerBundling=false``: the asset is then the source directory as it is.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: lambda_.Runtime,
        architecture: lambda_.Architecture,
        bundler: LayerBundler | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        bundling = str(self.node.try_get_context(LAYER_BUNDLING_CONTEXT)).strip().lower() not in ("false", "0", "no")
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            description="Joiner package, AWS Lambda Powertools, Kubernetes client, PyYAML, boto3",
            compatible_runtimes=[runtime],
            compatible_architectures=[architecture],
            code=lambda_.Code.from_asset(
                str(LAYER_SOURCE),
                exclude=["**/__pycache__", "**/*.pyc", "*.egg-info", "**/*.egg-info"],
                bundling=BundlingOptions(
                    image=DockerImage.from_registry("local-only"),
                    local=bundler or LayerBundler(),
                )
                if bundling
                else None,
            ),
        )
