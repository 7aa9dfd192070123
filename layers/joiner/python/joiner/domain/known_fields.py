"""Strict field validation for files given to the CLI, as ``kubectl`` applies it (``--validate=strict``).

A field the API server does not know is an error naming the object and the field path, so a
misspelt ``request:`` or ``nodeClasRef:`` cannot pass silently. What is known:

* Joiner's own kinds (``joiner.dev/v1`` NodePool and NodeClass): the ``openAPIV3Schema`` of
  the CRDs shipped in the package (``joiner/data/crds/``, the files ``manifests/crds/`` links
  to), so the CLI and the API server agree on which fields exist;
* Kubernetes' built-in kinds: ``joiner/data/kube-fields.json``, the field names of the API
  the layer's Kubernetes client was generated from (``scripts/build_kube_fields.py``): every
  field Kubernetes knows passes, read by Joiner or not (``livenessProbe``), and only
  unknown ones fail;
* Karpenter's ``karpenter.sh/v1`` NodePool and ``karpenter.k8s.aws/v1`` EC2NodeClass: Joiner's
  schemas plus the Karpenter fields Joiner does not model; the parts of Karpenter's schema
  Joiner does not copy (``kubelet``, ``blockDeviceMappings``, ``amiSelectorTerms``,
  ``status``) are not checked;
* Karpenter's ``karpenter.sh/v1`` NodeClaim: every field of Karpenter v1's CRD (spec and
  status), written out here.

A tree maps each known field to its own tree; ``0`` accepts anything below; ``{"*": tree}``
is a map with arbitrary keys; list items follow their field's tree.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
from collections.abc import Iterator, Mapping
from importlib import resources as importlib_resources
from typing import Any

import yaml

__all__ = ["Tree", "crd_schema", "kind_tree", "unknown_fields", "describe_unknown", "strict_problem"]

Tree = Any  # dict[str, Tree] | int

_CRD_FILES = {
    ("joiner.dev/v1", "NodePool"): "nodepools.joiner.dev.yaml",
    ("joiner.dev/v1", "NodeClass"): "nodeclasses.joiner.dev.yaml",
    ("joiner.dev/v1alpha1", "NodeOverlay"): "nodeoverlays.joiner.dev.yaml",
    ("joiner.dev/v1", "NodeClaim"): "nodeclaims.joiner.dev.yaml",
}

#: Karpenter's taints are core/v1 Taints.
_CORE_TAINT: Tree = {"key": 0, "value": 0, "effect": 0, "timeAdded": 0}
#: Karpenter fields Joiner does not read, by path; ``0`` where Karpenter's schema differs
#: from Joiner's and is not checked.
_KARPENTER_EXTRAS: dict[tuple[str, str], dict[tuple[str, ...], Tree]] = {
    ("karpenter.sh/v1", "NodePool"): {
        ("spec", "replicas"): 0,
        ("status",): 0,
        ("spec", "template", "spec", "taints"): _CORE_TAINT,
        ("spec", "template", "spec", "startupTaints"): _CORE_TAINT,
    },
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): {
        ("spec", "associatePublicIPAddress"): 0,
        ("spec", "detailedMonitoring"): 0,
        ("spec", "instanceStorePolicy"): 0,
        ("spec", "context"): 0,
        ("spec", "kubelet"): 0,
        ("spec", "blockDeviceMappings"): 0,
        ("spec", "amiSelectorTerms"): 0,
        ("status",): 0,
    },
}
#: Karpenter's ``karpenter.sh/v1`` NodeClaim, every field its CRD defines (Karpenter v1's
#: ``karpenter.sh_nodeclaims.yaml``); Joiner has no schema of that shape to start from.
_KARPENTER_REQUIREMENT: Tree = {"key": 0, "operator": 0, "values": 0, "minValues": 0}
_KARPENTER_NODECLAIM: Tree = {
    "apiVersion": 0,
    "kind": 0,
    "spec": {
        "expireAfter": 0,
        "nodeClassRef": {"group": 0, "kind": 0, "name": 0},
        "requirements": _KARPENTER_REQUIREMENT,
        "resources": {"requests": 0},
        "startupTaints": _CORE_TAINT,
        "taints": _CORE_TAINT,
        "terminationGracePeriod": 0,
    },
    "status": {
        "allocatable": 0,
        "capacity": 0,
        "imageID": 0,
        "lastPodEventTime": 0,
        "nodeName": 0,
        "providerID": 0,
        "conditions": {"type": 0, "status": 0, "reason": 0, "message": 0, "lastTransitionTime": 0, "observedGeneration": 0},
    },
}
_KARPENTER_OWN = {("karpenter.sh/v1", "NodeClaim"): _KARPENTER_NODECLAIM}
_KARPENTER_BASE = {("karpenter.sh/v1", "NodePool"): ("joiner.dev/v1", "NodePool"), ("karpenter.k8s.aws/v1", "EC2NodeClass"): ("joiner.dev/v1", "NodeClass")}


@functools.cache
def _kube_fields() -> Mapping[str, Tree]:
    payload = importlib_resources.files("joiner").joinpath("data", "kube-fields.json").read_text(encoding="utf-8")
    kinds: Mapping[str, Tree] = json.loads(payload)["kinds"]
    return kinds


@functools.cache
def crd_schema(api_version: str, kind: str) -> Mapping[str, Any]:
    """The ``openAPIV3Schema`` of a Joiner kind's CRD, as shipped in the package."""
    name = _CRD_FILES[(api_version, kind)]
    crd = yaml.safe_load(importlib_resources.files("joiner").joinpath("data", "crds", name).read_text(encoding="utf-8"))
    version = api_version.rpartition("/")[2]
    schema: Mapping[str, Any] = next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == version)
    return schema


def _schema_tree(schema: Mapping[str, Any]) -> Tree:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return 0
    if "items" in schema:
        return _schema_tree(schema["items"])
    properties = schema.get("properties")
    if properties:
        return {name: _schema_tree(sub) for name, sub in properties.items()}
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        inner = _schema_tree(additional)
        return {"*": inner} if inner != 0 else 0
    return 0


@functools.cache
def kind_tree(api_version: str, kind: str) -> Tree | None:
    """The known fields of a kind (``None``: a kind Joiner does not check)."""
    key = (api_version, kind)
    tree: Tree
    if key in _CRD_FILES:
        tree = _schema_tree(crd_schema(api_version, kind))
        tree["metadata"] = _kube_fields()["meta/v1/ObjectMeta"]
        return tree
    node: Tree
    if key in _KARPENTER_OWN:
        tree = copy.deepcopy(_KARPENTER_OWN[key])
        tree["metadata"] = _kube_fields()["meta/v1/ObjectMeta"]
        return tree
    if key in _KARPENTER_BASE:
        tree = copy.deepcopy(kind_tree(*_KARPENTER_BASE[key]))
        for path, sub in _KARPENTER_EXTRAS[key].items():
            node = tree
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = sub
        return tree
    return _kube_fields().get(f"{api_version}/{kind}")


def unknown_fields(value: object, tree: Tree, path: str = "") -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """``(path, field, known siblings)`` of every field ``tree`` does not know, depth first."""
    if tree == 0:
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            yield from unknown_fields(item, tree, f"{path}[{index}]")
        return
    if not isinstance(value, Mapping):
        return  # a type error: the parser names it
    wildcard = tree.get("*")
    for key, item in value.items():
        field_path = f"{path}.{key}" if path else str(key)
        sub = tree.get(key) if isinstance(key, str) else None
        if sub is None:
            sub = wildcard
        if sub is None:
            yield field_path, str(key), tuple(k for k in tree if k != "*")
        else:
            yield from unknown_fields(item, sub, field_path)


def describe_unknown(field: str, known: tuple[str, ...]) -> str:
    """``unknown field "request" (did you mean "requests"?)``."""
    close = difflib.get_close_matches(field, known, n=1, cutoff=0.75)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    return f'unknown field "{field}"{hint}'


def strict_problem(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(field path, problem)`` of an object's first unknown field (with the count of the
    others), or ``None`` when every field is known or the kind is not checked."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    tree = kind_tree(api_version, kind)
    if tree is None:
        return None
    unknown = list(unknown_fields(obj, tree))
    if not unknown:
        return None
    path, name, known = unknown[0]
    more = f"; {len(unknown) - 1} more unknown field(s)" if len(unknown) > 1 else ""
    return path, f"{describe_unknown(name, known)}{more} (strict field validation, as kubectl applies)"
