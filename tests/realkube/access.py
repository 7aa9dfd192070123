"""Joiner's Kubernetes identities as EKS gives them, and what manifests/rbac.yaml grants them.

Each function's IAM role reaches the cluster through an EKS access entry (infra/access.py)
whose ``kubernetesGroups`` are :data:`infra.access.KUBERNETES_GROUP_BY_FUNCTION` (the
watcher) or :data:`infra.access.KUBERNETES_GROUP`; the real tier gives each function a bearer
token for the user ``joiner:<function>`` in exactly those groups. :func:`grants` expands
manifests/rbac.yaml's ClusterRoleBindings into the (API group, resource, verb) triples each
group may use, so a session's requests can be compared with what is granted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from infra.access import CAPABILITIES, KUBERNETES_GROUP, KUBERNETES_GROUP_BY_FUNCTION

ROOT = Path(__file__).resolve().parents[2]
RBAC = ROOT / "manifests" / "rbac.yaml"

Grant = tuple[str, str, str]  # (API group, resource[/subresource], verb)


def function_groups() -> dict[str, tuple[str, ...]]:
    """``joiner:<function>`` -> the Kubernetes groups of that function's access entry."""
    return {f"joiner:{name}": (KUBERNETES_GROUP_BY_FUNCTION.get(name, KUBERNETES_GROUP),) for name in CAPABILITIES}


def grants(documents: Iterable[Mapping[str, Any]]) -> dict[str, set[Grant]]:
    """Group name -> every (API group, resource, verb) its ClusterRoleBindings grant."""
    docs = list(documents)
    rules = {d["metadata"]["name"]: d.get("rules") or [] for d in docs if d.get("kind") == "ClusterRole"}
    granted: dict[str, set[Grant]] = {}
    for binding in (d for d in docs if d.get("kind") == "ClusterRoleBinding"):
        role = binding["roleRef"]["name"]
        for subject in binding.get("subjects") or []:
            if subject.get("kind") != "Group":
                continue
            into = granted.setdefault(subject["name"], set())
            for rule in rules.get(role, []):
                for group in rule.get("apiGroups") or [""]:
                    for resource in rule.get("resources") or []:
                        for verb in rule.get("verbs") or []:
                            into.add((group, resource, verb))
    return granted


def shipped_grants() -> dict[str, set[Grant]]:
    return grants(d for d in yaml.safe_load_all(RBAC.read_text()) if d)


def allowed(groups: Iterable[str], by_group: Mapping[str, set[Grant]]) -> set[Grant]:
    found: set[Grant] = set()
    for group in groups:
        found |= by_group.get(group, set())
    return found
