"""Field names the README and docs give in backticks (``spec.disruption.minSavings``,
``interruption.rebalance``) exist: in Joiner's CRDs, or in the Kubernetes kind they name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from joiner.domain.known_fields import kind_tree

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: ``spec.…``/``status.…`` paths, and NodePool paths written without ``spec.``.
FULL = re.compile(r"`((?:spec|status)(?:\.[A-Za-z][A-Za-z0-9]*)+)")
SHORT = re.compile(r"`((?:disruption|interruption|template)(?:\.[A-Za-z][A-Za-z0-9]*)+)")
JOINER_KINDS = [("joiner.dev/v1", "NodePool"), ("joiner.dev/v1", "NodeClass"), ("joiner.dev/v1alpha1", "NodeOverlay")]
KUBE_KINDS = [
    ("v1", "Pod"),
    ("v1", "Node"),
    ("apps/v1", "DaemonSet"),
    ("policy/v1", "PodDisruptionBudget"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "PersistentVolume"),
    ("storage.k8s.io/v1", "StorageClass"),
    ("storage.k8s.io/v1", "CSINode"),
    ("joiner.dev/v1", "NodeClaim"),
    ("karpenter.sh/v1", "NodeClaim"),
]


def exists(tree: Any, path: list[str]) -> bool:
    for part in path:
        if tree == 0:
            return True
        if not isinstance(tree, dict):
            return False
        tree = tree.get(part, tree.get("*"))
        if tree is None:
            return False
    return True


def mentions() -> list[tuple[str, str, bool]]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        found += [(doc.name, m, False) for m in FULL.findall(text)]
        found += [(doc.name, "spec." + m, True) for m in SHORT.findall(text)]
    return sorted(set(found))


@pytest.mark.parametrize(("doc", "path", "joiner_only"), mentions())
def test_a_documented_field_exists(doc: str, path: str, joiner_only: bool) -> None:
    kinds = JOINER_KINDS if joiner_only else JOINER_KINDS + KUBE_KINDS
    parts = path.split(".")
    assert any(exists(kind_tree(*kind), parts) for kind in kinds), f"{doc}: `{path}` is in no CRD or Kubernetes kind"


def test_the_readme_names_joiner_only_fields_with_their_paths() -> None:
    paths = [path for doc, path, _ in mentions() if doc == "README.md"]
    assert "spec.disruption.minSavings" in paths and "spec.interruption.rebalance" in paths
