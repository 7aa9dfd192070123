"""``make deploy``'s CDK CLI: pinned in package.json/package-lock.json, installed by the
Makefile (``npm ci``), started and made to synthesize the app offline, as a deploy would
run it (the only network use is the npm registry, for the install)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CDK = ROOT / "node_modules" / ".bin" / "cdk"
PINNED = json.loads((ROOT / "package.json").read_text(encoding="utf-8"))["devDependencies"]["aws-cdk"]


def offline_environment(home: Path) -> dict[str, str]:
    """This environment without AWS credentials or configuration (and a fresh HOME for the
    CLI's caches), so nothing could reach an account."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "CDK_"))}
    return {
        **environment,
        "HOME": str(home),
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
        "CDK_DISABLE_VERSION_CHECK": "true",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    }


def make(*arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", *arguments], cwd=ROOT, capture_output=True, text=True, check=check, timeout=600)


def test_the_cli_is_pinned_exactly_in_the_lock_file() -> None:
    lock = json.loads((ROOT / "package-lock.json").read_text(encoding="utf-8"))
    assert PINNED.count(".") == 2 and PINNED[0].isdigit()  # an exact version, not a range
    assert lock["packages"][""]["devDependencies"]["aws-cdk"] == PINNED
    assert lock["packages"]["node_modules/aws-cdk"]["version"] == PINNED
    assert lock["packages"]["node_modules/aws-cdk"]["integrity"].startswith("sha512-")


def test_deploy_runs_the_local_cli_with_the_venv_python_for_the_cluster_and_region() -> None:
    planned = make("--dry-run", "--always-make", "deploy", "CLUSTER=prod", "REGION=eu-west-1").stdout
    [line] = [line for line in planned.splitlines() if f"{CDK} deploy " in line]
    assert f'--app "{ROOT}/.venv/bin/python {ROOT}/app.py"' in line
    assert "-c clusterName=prod -c region=eu-west-1" in line and "AWS_REGION=eu-west-1" in line
    assert "npm ci" in planned  # the Makefile installs the CLI it runs


def test_deploy_without_a_cluster_says_how_to_call_it() -> None:
    refused = make("deploy", check=False)
    assert refused.returncode != 0
    assert "usage: make deploy CLUSTER=<eks-cluster-name> [REGION=<aws-region>]" in refused.stderr


@pytest.mark.slow
def test_the_cli_starts_and_synthesizes_the_app_offline(tmp_path: Path) -> None:
    if shutil.which("npm") is None:
        pytest.fail("npm is required (Node.js is a prerequisite of make deploy)")
    make("cdk-cli")
    environment = offline_environment(tmp_path)
    version = subprocess.run([str(CDK), "--version"], capture_output=True, text=True, check=True, env=environment, timeout=120).stdout
    assert version.split()[0] == PINNED

    out = tmp_path / "cdk.out"
    synth = subprocess.run(
        [
            str(CDK),
            "synth",
            "--app",
            f"{sys.executable} {ROOT / 'app.py'}",
            "--no-notices",
            "--quiet",
            "-c",
            "clusterName=ci",
            "-c",
            "region=eu-west-1",
            "-c",
            "layerBundling=false",
            "-o",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=900,
    )
    assert synth.returncode == 0, synth.stderr[-3000:]
    template = json.loads((out / "Joiner-ci.template.json").read_text(encoding="utf-8"))
    types = [resource["Type"] for resource in template["Resources"].values()]
    assert types.count("AWS::Lambda::Function") >= 5 and types.count("AWS::Lambda::LayerVersion") == 1
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["artifacts"]["Joiner-ci"]["environment"].endswith("/eu-west-1")
