"""kubectl (built by tools/kube at the pinned version) against the emulator and the real API
server: what a new user tries first works on both, with the same output shape."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realkube.conftest import RealKube
from tests.realkube.test_emulator_contract import Backend
from testworld.real_kube import ADMIN, ROOT

pytestmark = pytest.mark.real_kube


class Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path, home: Path) -> None:
        self.binary, self.kubeconfig, self.home = binary, kubeconfig, home

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,  # noqa: S603
            timeout=60,
            env=dict(os.environ, HOME=str(self.home)),
            cwd=ROOT,
            check=False,
        )
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
            assert "error" not in done.stderr.lower(), done.stderr
        return done


@pytest.fixture(params=["emulator", "apiserver"])
def target(request: pytest.FixtureRequest, real_kube: RealKube, tmp_path: Path) -> tuple[Backend, Kubectl]:
    token = real_kube.cluster.identities[ADMIN].token
    cluster: dict[str, Any]
    user: dict[str, Any]
    if request.param == "emulator":
        emulator = request.getfixturevalue("kube_emulator_server")
        backend = Backend("emulator", emulator.url, token, None, real_kube, emulator)
        cluster, user = {"server": emulator.url}, {"token": "local"}  # as `joiner demo --hold` writes it
    else:
        backend = Backend("real", real_kube.url, token, real_kube.cluster.ca_file, real_kube)
        cluster, user = {"server": real_kube.url, "certificate-authority": real_kube.cluster.ca_file}, {"token": token}
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [{"name": "test", "cluster": cluster}],
                "users": [{"name": "test", "user": user}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            }
        )
    )
    binary = real_kube.cluster.bin_dir / "kubectl"
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: tools/kube/build.sh builds it", pytrace=False)
    return backend, Kubectl(binary, config, tmp_path)


def _table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_kubectl_get(target: tuple[Backend, Kubectl]) -> None:
    backend, kubectl = target
    node = backend.node()["metadata"]["name"]
    namespace = backend.namespace()
    pod = backend.pod(namespace, node="node-a")["metadata"]["name"]
    pool = backend.node_pool()["metadata"]["name"]

    nodes = _table(kubectl("get", "nodes", "-l", f"contract={backend.label}").stdout)
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert nodes[1][:3] == [node, "Unknown", "<none>"]
    pods = _table(kubectl("get", "pods", "-A").stdout)
    assert pods[0] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [namespace, pod, "0/1", "Pending", "0"] in [row[:5] for row in pods[1:]]
    wide = _table(kubectl("get", "nodepools", "-o", "wide", "-l", f"contract={backend.label}").stdout)
    assert wide[0] == ["NAME", "NODECLASS", "NODES", "CPU", "MEMORY", "READY", "AGE", "WEIGHT"]
    assert wide[1][:2] == [pool, "default"]
    assert _table(kubectl("get", "jnp", "-l", f"contract={backend.label}").stdout)[1][0] == pool  # short name
    assert kubectl("get", "events", "-A").returncode == 0
    # what `joiner demo --hold` prints to try
    assert _table(kubectl("get", "nodes,nodeclaims.joiner.dev,nodepools.joiner.dev,nodeclasses.joiner.dev").stdout)[0][0] == "NAME"


def test_kubectl_apply_explain_and_strict_validation(target: tuple[Backend, Kubectl], tmp_path: Path) -> None:
    _, kubectl = target
    applied = kubectl("apply", "-f", "manifests/crds/")  # validation on (kubectl's default: strict, on the server)
    for name in ("nodeclaims", "nodeclasses", "nodeoverlays", "nodepools"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}.joiner.dev" in applied.stdout
    explained = kubectl("explain", "nodepool.spec").stdout
    assert "KIND:       NodePool" in explained and "VERSION:    v1" in explained
    assert "template\t<Object> -required-" in explained

    misspelt = tmp_path / "pool.yaml"
    misspelt.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "joiner.dev/v1",
                "kind": "NodePool",
                "metadata": {"name": "misspelt"},
                "spec": {"weigth": 3, "template": {"spec": {"nodeClassRef": {"name": "default"}}}},
            }
        )
    )
    refused = kubectl("apply", "-f", str(misspelt), ok=False)
    assert refused.returncode != 0 and 'unknown field "spec.weigth"' in refused.stderr, refused.stderr
    good = tmp_path / "good.yaml"
    good.write_text(misspelt.read_text().replace("weigth", "weight").replace("misspelt", "dry-run-only"))
    assert "created (server dry run)" in kubectl("create", "-f", str(good), "--dry-run=server").stdout
    gone = kubectl("get", "nodepool", "dry-run-only", ok=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
