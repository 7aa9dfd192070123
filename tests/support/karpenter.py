"""Karpenter's own objects for the tests of ``JOINER_KARPENTER_CRDS``: builders, and the minimal
structural CRDs (tests/data/karpenter-crds) installed into the emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from testworld.kube_emulator import KubeEmulator

KARPENTER_CRDS = Path(__file__).resolve().parents[1] / "data" / "karpenter-crds"
#: The emulator's names for Karpenter's kinds (``NodePool`` alone is Joiner's).
POOLS = "nodepools.karpenter.sh"
CLASSES = "ec2nodeclasses.karpenter.k8s.aws"


def install_karpenter_crds(emulator: KubeEmulator) -> None:
    for path in sorted(KARPENTER_CRDS.glob("*.yaml")):
        emulator.apply(yaml.safe_load(path.read_text(encoding="utf-8")))


def ec2_node_class(name: str = "default", **spec: Any) -> dict[str, Any]:
    """A ``karpenter.k8s.aws/v1`` EC2NodeClass as the API server returns it (uid, version, generation)."""
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7", "generation": 2},
        "spec": {
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
            **spec,
        },
    }


def karpenter_pool(name: str = "default", node_class: str = "default", **spec: Any) -> dict[str, Any]:
    """A ``karpenter.sh/v1`` NodePool as the API server returns it, with Karpenter's Ready condition."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "9", "generation": 3},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": node_class},
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}],
                }
            },
            **spec,
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """As a user applies it: no uid, version or status (the API server sets those)."""
    meta = {k: v for k, v in obj["metadata"].items() if k == "name"}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta, "spec": obj["spec"]}
