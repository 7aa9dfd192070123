"""The import contracts that keep the layers apart, checked on the source (no import needed):

* ``joiner.domain`` imports only the standard library, ``joiner.domain``, the value types of
  ``joiner.ports`` and PyYAML (a pure parser): no boto3, botocore, kubernetes, urllib3,
  powertools, SciPy, adapters or services; and it reads no clock;
* ``joiner.adapters`` never import services, the CLI or the test world;
* ``joiner.services`` never import the CLI or the test world;
* no shipped module imports another module's private names (``from x import _y``) or reaches
  into an imported Joiner module's private attributes (``module._y``): a missing public name is
  a seam;
* nothing under layers/, functions/ or infra/ imports the test world (``testworld``, beside the
  shipped package), nor names it to import it at run time: its ``demo`` and ``simulate`` join
  the CLI through the ``joiner.cli`` entry-point group;
* one clock: no shipped module but ``joiner.clock`` defines a clock class;
* one logging style: services and adapters log through powertools' structured logger
  (``joiner.observability.logger``, keys in ``extra``), not stdlib ``logging.getLogger``, and
  no ``extra`` key of a shipped module overwrites a ``LogRecord`` attribute (``created``,
  ``name``...: logging raises ``KeyError`` on those).
"""

from __future__ import annotations

import ast
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "joiner" / "python" / "joiner"
#: Besides the package: the rest of what is deployed, which may not import the test world either.
DEPLOYED_DIRECTORIES = (ROOT / "layers", ROOT / "functions", ROOT / "infra")
TEST_WORLD = "testworld"
STDLIB = sys.stdlib_module_names
#: Third-party packages the domain may import.
DOMAIN_MAY_IMPORT = {"yaml"}
CLOCK_READS = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("time", "time"),
    ("time", "monotonic"),
    ("time", "perf_counter"),
}


def _modules(directory: Path = PACKAGE, root: Path = PACKAGE.parent) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(directory.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"), str(path))


def _imports(tree: ast.Module, module: str) -> Iterator[tuple[str, list[str], int]]:
    """(imported module, names imported from it, line) for every import, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")[: -node.level] if not module.endswith("__init__") else module.split(".")
                base = ".".join([*package, base] if base else package)
            yield base, [alias.name for alias in node.names], node.lineno


MODULES = dict(_modules())
#: The deployed modules outside the package (functions/<name>/handler.py, infra/...).
DEPLOYED = {
    name: tree for directory in DEPLOYED_DIRECTORIES for name, tree in _modules(directory, ROOT) if not ROOT.joinpath(*name.split(".")).is_relative_to(PACKAGE)
}
LOG_RECORD_ATTRIBUTES = set(vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None))) | {"message", "asctime"}


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(isinstance(base, ast.Name) and base.id == "Protocol" for base in node.bases)


def _is_test_world(name: object) -> bool:
    return isinstance(name, str) and (name == TEST_WORLD or name.startswith(TEST_WORLD + "."))


def _violations(rule: str) -> list[str]:
    found: list[str] = []
    for module, tree in ({**MODULES, **DEPLOYED} if rule == "test-world" else MODULES).items():
        layer = module.split(".")[1] if "." in module else ""
        for imported, names, line in _imports(tree, module):
            top = imported.split(".")[0]
            where = f"{module}:{line} imports {imported}"
            if rule == "domain" and layer == "domain":
                if not (top in STDLIB or top == "__future__" or top in DOMAIN_MAY_IMPORT or imported.startswith("joiner.domain") or imported == "joiner.ports"):
                    found.append(where)
            elif rule == "adapters" and layer == "adapters":
                if imported.startswith(("joiner.services", "joiner.cli")) or _is_test_world(imported):
                    found.append(where)
            elif rule == "services" and layer == "services":
                if imported.startswith("joiner.cli") or _is_test_world(imported):
                    found.append(where)
            elif rule == "private" and imported.startswith("joiner"):
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                if private and imported != module:
                    found.append(f"{where} private {private}")
            elif rule == "test-world" and _is_test_world(imported):
                found.append(where)
        if rule == "test-world":
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and _is_test_world(node.value):
                    found.append(f"{module}:{node.lineno} names {node.value!r} (an import by name)")
        if rule == "private":
            aliases = {
                alias.asname or alias.name
                for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in node.names
                if (getattr(node, "module", None) or alias.name).startswith("joiner")
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in aliases
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                ):
                    found.append(f"{module}:{node.lineno} reaches into {node.value.id}.{node.attr}")
        if rule == "one-clock" and module != "joiner.clock":
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name.lower().endswith("clock") and not _is_protocol(node):
                    found.append(f"{module}:{node.lineno} defines clock class {node.name} (use joiner.clock)")
        if rule == "one-logger" and layer in ("services", "adapters"):
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr == "getLogger" and isinstance(node.value, ast.Name) and node.value.id == "logging":
                    found.append(f"{module}:{node.lineno} uses logging.getLogger (use joiner.observability.logger)")
        if rule == "log-keys":
            for node in ast.walk(tree):
                if isinstance(node, ast.keyword) and node.arg == "extra" and isinstance(node.value, ast.Dict):
                    for key in node.value.keys:
                        if isinstance(key, ast.Constant) and key.value in LOG_RECORD_ATTRIBUTES:
                            found.append(f"{module}:{key.lineno} logs extra key {key.value!r}, a LogRecord attribute")
        if rule == "clock" and layer == "domain":
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                    if (node.func.value.id, node.func.attr) in CLOCK_READS:
                        found.append(f"{module}:{node.lineno} reads the clock ({node.func.value.id}.{node.func.attr})")
    return found


@pytest.mark.parametrize("rule", ["domain", "adapters", "services", "private", "test-world", "clock", "one-clock", "one-logger", "log-keys"])
def test_import_contract(rule: str) -> None:
    assert _violations(rule) == []


def test_the_contracts_catch_what_they_forbid(tmp_path: Path) -> None:
    """Each rule fails on a module that breaks it (the checks are not vacuous)."""
    samples = {
        "domain": ("joiner.domain.sample", "import boto3\n"),
        "adapters": ("joiner.adapters.sample", "from joiner.services.planning_round import PlanningRound\n"),
        "services": ("joiner.services.sample", "from testworld.simulator import Simulation\n"),
        "private": ("joiner.services.sample", "from joiner.services.termination import _Lease\n"),
        "test-world": ("joiner.services.sample", "import testworld.soak\n"),
        "clock": ("joiner.domain.sample", "from datetime import datetime\nx = datetime.now()\n"),
        "one-clock": ("joiner.adapters.sample", "class _SystemClock:\n    pass\n"),
        "one-logger": ("joiner.services.sample", "import logging\nlog = logging.getLogger(__name__)\n"),
        "log-keys": ("joiner.services.sample", "logger.info('synced', extra={'created': 3})\n"),
    }
    for rule, (module, source) in samples.items():
        MODULES[module] = ast.parse(source)
        try:
            assert _violations(rule), rule
        finally:
            del MODULES[module]
    MODULES["joiner.services.sample"] = ast.parse("from joiner.services import provisioning as prov\nprov._launch_all()\n")
    try:
        assert _violations("private")
    finally:
        del MODULES["joiner.services.sample"]
    for module, source in [
        ("infra.sample", "from testworld.stack import LocalStack\n"),
        ("functions.scanner.sample", "import importlib\nimportlib.import_module('testworld.cli')\n"),
    ]:
        DEPLOYED[module] = ast.parse(source)
        try:
            assert _violations("test-world"), module
        finally:
            del DEPLOYED[module]


def test_the_test_world_contract_reads_the_deployed_code() -> None:
    """The functions, the CDK app and the whole package are read (not an empty set)."""
    assert {"functions.scanner.handler", "infra.layer", "infra.deployment"} <= set(DEPLOYED)
    assert {"joiner.cli.main", "joiner.services.provisioning"} <= set(MODULES)
    assert not any(name.startswith(("layers.", TEST_WORLD)) for name in DEPLOYED)
