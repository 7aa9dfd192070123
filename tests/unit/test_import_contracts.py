"""The import contracts that keep the layers apart, checked on the source (no import needed):

* ``joiner.domain`` imports only the standard library, ``joiner.domain``, the value types of
  ``joiner.ports`` and PyYAML (a pure parser): no boto3, botocore, kubernetes, urllib3,
  powertools, SciPy, adapters or services; and it reads no clock;
* ``joiner.adapters`` never import services, the CLI or the test world;
* ``joiner.services`` never import the CLI or the test world;
* no shipped module imports another module's private names (``from x import _y``) or reaches
  into an imported Joiner module's private attributes (``module._y``): a missing public name is
  a seam (the test world, ``joiner.local``, is not held to it);
* nothing shipped imports the test world (``joiner.local``), except the CLI's ``demo`` and
  ``simulate`` commands, which run it;
* one clock: no shipped module but ``joiner.clock`` defines a clock class (the test world's
  simulated clock aside);
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

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "joiner" / "python" / "joiner"
STDLIB = sys.stdlib_module_names
#: the CLI modules that run the local test world on purpose
RUNS_THE_TEST_WORLD = {"joiner.cli.demo", "joiner.cli.main"}
#: Third-party packages the domain may import.
DOMAIN_MAY_IMPORT = {"yaml"}
CLOCK_READS = {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today"), ("time", "time"),
               ("time", "monotonic"), ("time", "perf_counter")}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
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
LOG_RECORD_ATTRIBUTES = set(vars(logging.LogRecord("n", logging.INFO, "p", 1, "m", None, None))) | {"message", "asctime"}


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(isinstance(base, ast.Name) and base.id == "Protocol" for base in node.bases)


def _violations(rule: str) -> list[str]:
    found: list[str] = []
    for module, tree in MODULES.items():
        layer = module.split(".")[1] if "." in module else ""
        for imported, names, line in _imports(tree, module):
            top = imported.split(".")[0]
            where = f"{module}:{line} imports {imported}"
            if rule == "domain" and layer == "domain":
                if not (top in STDLIB or top == "__future__" or top in DOMAIN_MAY_IMPORT or imported.startswith("joiner.domain")
                        or imported == "joiner.ports"):
                    found.append(where)
            elif rule == "adapters" and layer == "adapters":
                if imported.startswith(("joiner.services", "joiner.cli", "joiner.local")):
                    found.append(where)
            elif rule == "services" and layer == "services":
                if imported.startswith(("joiner.cli", "joiner.local")):
                    found.append(where)
            elif rule == "private" and imported.startswith("joiner") and layer != "local":
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                if private and imported != module:
                    found.append(f"{where} private {private}")
            elif rule == "test-world" and layer != "local" and imported.startswith("joiner.local") and module not in RUNS_THE_TEST_WORLD:
                found.append(where)
        if rule == "private" and layer != "local":
            aliases = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                       for alias in node.names if (getattr(node, "module", None) or alias.name).startswith("joiner")}
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                        and node.attr.startswith("_") and not node.attr.startswith("__")):
                    found.append(f"{module}:{node.lineno} reaches into {node.value.id}.{node.attr}")
        if rule == "one-clock" and layer != "local" and module != "joiner.clock":
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name.lower().endswith("clock") and not _is_protocol(node):
                    found.append(f"{module}:{node.lineno} defines clock class {node.name} (use joiner.clock)")
        if rule == "one-logger" and layer in ("services", "adapters"):
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and node.attr == "getLogger" and isinstance(node.value, ast.Name)
                        and node.value.id == "logging"):
                    found.append(f"{module}:{node.lineno} uses logging.getLogger (use joiner.observability.logger)")
        if rule == "log-keys" and layer != "local":
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
        "services": ("joiner.services.sample", "from joiner.local.simulator import Simulation\n"),
        "private": ("joiner.services.sample", "from joiner.services.termination import _Lease\n"),
        "test-world": ("joiner.services.sample", "import joiner.local.soak\n"),
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
