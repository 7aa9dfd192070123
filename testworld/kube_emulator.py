"""A local Kubernetes API server for tests and ``joiner demo``, built on kmock.

:class:`KubeEmulator` runs :class:`KubernetesApiEmulator` (a subclass of kmock's
``KubernetesEmulator``) on ``127.0.0.1`` at a random port in a background thread, so the
official synchronous ``kubernetes`` client talks to it over real HTTP::

    with KubeEmulator() as emulator:
        emulator.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        ...  # point a client at emulator.url

What kmock provides and we keep: the aiohttp server plumbing, request recording, the
object store with per-object history (``emulator.handler.objects``), watch streams. What this module adds, because the
Joiner adapters depend on it behaving like a real API server:

* label selectors (``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!key``) and field
  selectors (per-kind field labels such as ``spec.nodeName`` and ``status.phase``; others
  are rejected with 400 like the real server does);
* pagination (``limit`` + ``continue``; continuation resumes after the last returned key
  on current state, it is not a snapshot);
* ``resourceVersion`` from one global counter, bumped on every write, on objects and
  lists; optimistic concurrency: PUT/PATCH with a stale ``metadata.resourceVersion``
  gets 409 Conflict; custom resources require it on PUT, as on a real server;
* PUT, JSON merge patch, strategic merge patch (built-in kinds only, 415 for custom
  resources, as on a real server; list merge keys for the fields Kubernetes declares
  them on, ``$patch``/``$deleteFromPrimitiveList`` directives) and JSON patch;
* status subresources: writes to the main resource keep the stored status, writes to
  ``/status`` change only the status;
* DELETE with ``gracePeriodSeconds`` (recorded in :attr:`KubernetesApiEmulator.deletions`,
  removal is immediate unless the object has finalizers), preconditions;
* ``pods/eviction`` (policy/v1) honouring PodDisruptionBudgets, ``pods/binding``;
* PodDisruptionBudget status computed on read, as the disruption controller would;
* CustomResourceDefinitions: creating one registers its resource; ``joiner.dev/v1``
  NodePools and NodeClasses are registered from the start with the repository's CRDs
  (``manifests/crds``): custom resources are admitted as the API server admits them, through
  their schema (types, enums, patterns, bounds, required fields, defaults, pruning) and
  ``x-kubernetes-validations`` CEL rules (:mod:`testworld.admission`);
* light validation (names, label values, node taints) answering 422 like the real server;
* fault injection: the next N requests matching (method, path regex) fail with a status,
  are delayed, or have their connection dropped;
* optional bearer-token authentication (401 otherwise).

* watches (``?watch=true``) served from a bounded log of recent writes: resume from a
  ``resourceVersion`` (all later events are replayed), or from none/``0`` (synthetic ``ADDED``
  for the current objects first); label and field selectors filter them as the watch cache
  does (an object that stops matching arrives as ``DELETED``, one that starts as ``ADDED``);
  ``timeoutSeconds`` ends the stream; a version older than the log (or than a :meth:`compact`)
  answers an ``ERROR`` event with a 410 ``Expired`` status, as the real server's watch cache does
  for a version before its history; a watch list (``sendInitialEvents=true``) sends the current
  objects, then a ``BOOKMARK`` annotated ``k8s.io/initial-events-end``; with
  ``allowWatchBookmarks=true`` a plain watch gets a ``BOOKMARK`` every minute and 2 s before its
  deadline when its resource changed past what the watch has delivered.

* what kubectl needs, as the real server answers it: discovery, Table responses, ``/openapi/v3``,
  ``fieldValidation=Strict`` (400 naming every unknown field) and ``dryRun=All`` (nothing stored).
  tests/realkube/test_emulator_contract.py holds all of this to the real kube-apiserver.

Not emulated: admission webhooks, defaulting of built-in kinds beyond pod phase, server-side apply, field managers,
deletecollection, the namespaces resource, scale subresources.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import collections
import concurrent.futures
import copy
import functools
import hashlib
import importlib
import json
import math
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.test_utils
import aiohttp.web
import attrs
import kmock

import joiner
from testworld.admission import CrdSchema, schemas_of

__all__ = [
    "ApiError",
    "DeletionRecord",
    "EXPECTED_PODS_ANNOTATION",
    "Fault",
    "KubeEmulator",
    "KubernetesApiEmulator",
    "ResourceType",
    "SelectorError",
    "field_selector_matches",
    "json_merge_patch",
    "json_patch",
    "label_selector_matches",
    "parse_field_selector",
    "parse_label_selector",
    "pdb_status",
    "pod_is_ready",
    "selector_object_matches",
    "strategic_merge_patch",
]

JsonDict = dict[str, Any]
_T = TypeVar("_T")

#: How many past versions of each object the store keeps (kmock keeps all by default).
HISTORY_LIMIT = 32


# ---------------------------------------------------------------- resource types


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource: where it lives, what it is called, what it supports."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()
    field_labels: frozenset[str] = frozenset()
    custom: bool = False  # CRD-backed: no strategic merge patch, resourceVersion required on PUT
    generation: bool = False  # metadata.generation tracks spec changes
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    #: a CRD version's additionalPrinterColumns (Table responses)
    printer_columns: tuple[Mapping[str, Any], ...] = field(default=(), hash=False, compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> kmock.resource:
        return kmock.resource(self.group, self.version, self.plural)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def describe(self, name: str) -> str:
        """How the real server names an object in messages: ``pods "web-1"``."""
        qualified = f"{self.plural}.{self.group}" if self.group else self.plural
        return f'{qualified} "{name}"'


_META = frozenset({"metadata.name", "metadata.namespace"})

BUILTIN_RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        subresources=frozenset({"status", "eviction", "binding"}),
        field_labels=_META
        | {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        },
    ),
    ResourceType("", "v1", "nodes", "Node", False, subresources=frozenset({"status"}), field_labels=_META | {"spec.unschedulable"}),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        True,
        field_labels=_META
        | {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        },
    ),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, subresources=frozenset({"status"}), field_labels=_META, generation=True),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, subresources=frozenset({"status"}), field_labels=_META, generation=True),
    ResourceType("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False, field_labels=_META),
    ResourceType("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, subresources=frozenset({"status"}), field_labels=_META),
    ResourceType("", "v1", "persistentvolumes", "PersistentVolume", False, subresources=frozenset({"status"}), field_labels=_META),
    ResourceType("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, field_labels=_META),
    ResourceType("storage.k8s.io", "v1", "csinodes", "CSINode", False, field_labels=_META),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        subresources=frozenset({"status"}),
        field_labels=_META,
        generation=True,
    ),
    ResourceType("joiner.dev", "v1", "nodepools", "NodePool", False, subresources=frozenset({"status"}), field_labels=_META, custom=True, generation=True),
    ResourceType("joiner.dev", "v1", "nodeclasses", "NodeClass", False, subresources=frozenset({"status"}), field_labels=_META, custom=True, generation=True),
)

#: Short names and categories the real API server announces for the built-in kinds.
_BUILTIN_DISCOVERY: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pods": (("po",), ("all",)),
    "nodes": (("no",), ()),
    "events": (("ev",), ()),
    "daemonsets": (("ds",), ("all",)),
    "poddisruptionbudgets": (("pdb",), ()),
    "persistentvolumeclaims": (("pvc",), ()),
    "persistentvolumes": (("pv",), ()),
    "storageclasses": (("sc",), ()),
    "customresourcedefinitions": (("crd", "crds"), ("api-extensions",)),
}
BUILTIN_RESOURCES = tuple(
    replace(r, short_names=_BUILTIN_DISCOVERY[r.plural][0], categories=_BUILTIN_DISCOVERY[r.plural][1]) if r.plural in _BUILTIN_DISCOVERY else r
    for r in BUILTIN_RESOURCES
)

#: Field labels whose value lives somewhere other than the dotted path.
_FIELD_ALIASES = {"source": "source.component"}

HTTP_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    502: "BadGateway",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# ---------------------------------------------------------------- errors


class ApiError(Exception):
    """An answer in the API server's ``Status`` format."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: JsonDict | None = None,
        headers: Mapping[str, str] | None = None,
        metadata: JsonDict | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or HTTP_REASONS.get(code, "Unknown")
        self.details = details
        self.headers = dict(headers or {})
        self.metadata = dict(metadata or {})

    def status(self) -> JsonDict:
        body: JsonDict = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata),
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


#: etcd's answer to a list continued from a compacted revision (apiserver storage/etcd3/errors.go).
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the "
    "continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing "
    "with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the "
    "time the first chunk was returned and now may show up in the list."
)

#: How often a plain watch that asked for bookmarks gets one (kube-apiserver's cacher: a minute).
BOOKMARK_EVERY_SECONDS = 60.0

#: The annotation on the BOOKMARK that ends a watch list's initial events.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


def _details(rtype: ResourceType, name: str, kind: str | None = None, **more: Any) -> JsonDict:
    """A Status's details as the real server writes them (no ``group`` for the core group)."""
    details: JsonDict = {"name": name}
    if rtype.group:
        details["group"] = rtype.group
    details["kind"] = kind or rtype.plural
    details.update(more)
    return details


def _not_found(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(404, f"{rtype.describe(name)} not found", details=_details(rtype, name))


def _conflict(rtype: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        f"Operation cannot be fulfilled on {rtype.describe(name)}: the object has been modified; please apply your changes to the latest version and try again",
        details=_details(rtype, name),
    )


def _invalid(rtype: ResourceType, name: str, causes: Sequence[tuple[str, str]]) -> ApiError:
    text = ", ".join(f"{path}: {message}" for path, message in causes)
    if len(causes) > 1:
        text = f"[{text}]"
    return ApiError(
        422,
        f'{rtype.kind} "{name}" is invalid: {text}',
        details=_details(rtype, name, rtype.kind, causes=[{"reason": _cause_reason(m), "message": m, "field": p} for p, m in causes]),
    )


#: Kubernetes' field.ErrorType of a cause, by how its message starts.
_CAUSE_REASONS = (
    ("Unsupported value", "FieldValueNotSupported"),
    ("Required value", "FieldValueRequired"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Too many", "FieldValueTooMany"),
    ("Too long", "FieldValueTooLong"),
    ("Forbidden", "FieldValueForbidden"),
)


def _cause_reason(message: str) -> str:
    return next((reason for prefix, reason in _CAUSE_REASONS if message.startswith(prefix)), "FieldValueInvalid")


# ---------------------------------------------------------------- selectors


class SelectorError(ValueError):
    """A label or field selector that does not parse."""


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case "exists":
                return present
            case _:
                return not present


_LABEL_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_TERM = re.compile(rf"^\s*(?P<key>{_LABEL_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQ_TERM = re.compile(rf"^\s*(?P<key>{_LABEL_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>[-A-Za-z0-9_.]*)\s*$")
_EXISTS_TERM = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_LABEL_KEY})\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced parentheses in selector {text!r}")
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise SelectorError(f"unbalanced parentheses in selector {text!r}")
    terms.append("".join(current))
    return terms


def parse_label_selector(text: str | None) -> tuple[LabelRequirement, ...]:
    """Parse the ``labelSelector`` query syntax; empty selects everything."""
    if not text or not text.strip():
        return ()
    requirements = []
    for term in _split_terms(text):
        if match := _SET_TERM.match(term):
            values = tuple(v.strip() for v in match["values"].split(",") if v.strip())
            requirements.append(LabelRequirement(match["key"], match["op"], values))
        elif match := _EQ_TERM.match(term):
            operator = "!=" if match["op"] == "!=" else "="
            requirements.append(LabelRequirement(match["key"], operator, (match["value"],)))
        elif match := _EXISTS_TERM.match(term):
            requirements.append(LabelRequirement(match["key"], "!" if match["neg"] else "exists"))
        else:
            raise SelectorError(f"unable to parse requirement {term.strip()!r} in label selector {text!r}")
    return tuple(requirements)


def label_selector_matches(selector: str | Sequence[LabelRequirement] | None, labels: Mapping[str, str] | None) -> bool:
    requirements = parse_label_selector(selector) if isinstance(selector, str) or selector is None else selector
    labels = labels or {}
    return all(requirement.matches(labels) for requirement in requirements)


def selector_object_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Match a ``metav1.LabelSelector`` object (matchLabels + matchExpressions); ``None`` matches nothing,
    ``{}`` matches everything (callers decide when to special-case those)."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        match operator:
            case "In":
                ok = key in labels and labels[key] in values
            case "NotIn":
                ok = key not in labels or labels[key] not in values
            case "Exists":
                ok = key in labels
            case "DoesNotExist":
                ok = key not in labels
            case _:
                return False
        if not ok:
            return False
    return True


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    field: str
    value: str
    negated: bool = False


def parse_field_selector(text: str | None) -> tuple[FieldRequirement, ...]:
    """Parse the ``fieldSelector`` query syntax (``a=b``, ``a==b``, ``a!=b``, comma-joined)."""
    if not text or not text.strip():
        return ()
    requirements = []
    for term in _split_terms(text):
        if "!=" in term:
            name, value = term.split("!=", 1)
            requirements.append(FieldRequirement(name.strip(), value.strip(), negated=True))
        elif "==" in term:
            name, value = term.split("==", 1)
            requirements.append(FieldRequirement(name.strip(), value.strip()))
        elif "=" in term:
            name, value = term.split("=", 1)
            requirements.append(FieldRequirement(name.strip(), value.strip()))
        else:
            raise SelectorError(f"invalid selector: {text!r}; can't understand {term.strip()!r}")
    return tuple(requirements)


def _field_value(obj: Mapping[str, Any], label: str) -> str:
    value: Any = obj
    for part in _FIELD_ALIASES.get(label, label).split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_selector_matches(requirements: Iterable[FieldRequirement], obj: Mapping[str, Any]) -> bool:
    return all((_field_value(obj, r.field) == r.value) != r.negated for r in requirements)


# ---------------------------------------------------------------- patches


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


#: Lists Kubernetes declares ``patchStrategy: merge`` on, by field name, with their merge key.
STRATEGIC_MERGE_KEYS: Mapping[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "conditions": "type",
    "addresses": "type",
    "ports": "containerPort",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}
#: Primitive lists merged as sets under strategic merge patch.
STRATEGIC_SET_LISTS = frozenset({"finalizers"})


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """The subset of strategic merge patch Kubernetes clients send for the objects Joiner touches:
    maps merge like JSON merge patch, lists with a declared merge key merge item by item
    (``$patch: delete`` removes one), ``finalizers`` merge as a set, ``$patch: replace`` and
    ``$deleteFromPrimitiveList/<field>`` are honoured, ``$setElementOrder`` and ``$retainKeys``
    are accepted and ignored; every other list (taints, tolerations, ...) is replaced whole."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    deletions: list[tuple[str, list[Any]]] = []
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions.append((key.split("/", 1)[1], list(value or [])))
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = strategic_merge_patch(result.get(key), value)
        elif isinstance(value, list) and key in STRATEGIC_MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_keyed_list(result[key], value, STRATEGIC_MERGE_KEYS[key])
        elif isinstance(value, list) and key in STRATEGIC_SET_LISTS:
            existing = list(result.get(key) or [])
            added = [item for i, item in enumerate(value) if item not in value[:i]]
            result[key] = added + [item for item in existing if item not in added]
        elif isinstance(value, list):
            result[key] = [_strip_directives(item) for item in value if not (isinstance(item, Mapping) and item.get("$patch") == "delete")]
        else:
            result[key] = copy.deepcopy(value)
    for key, values in deletions:
        if isinstance(result.get(key), list):
            result[key] = [item for item in result[key] if item not in values]
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    return copy.deepcopy(value)


def _merge_keyed_list(existing: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    result = [copy.deepcopy(item) for item in existing]
    for item in patch:
        if not isinstance(item, Mapping) or merge_key not in item:
            result.append(_strip_directives(item))
            continue
        index = next((i for i, old in enumerate(result) if isinstance(old, Mapping) and old.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_strip_directives(item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _resolve(document: Any, parts: list[str]) -> tuple[Any, str]:
    parent = document
    for part in parts[:-1]:
        if isinstance(parent, list):
            parent = parent[int(part)]
        elif isinstance(parent, dict):
            parent = parent[part]
        else:
            raise KeyError(part)
    return parent, parts[-1]


def json_patch(document: Any, operations: Sequence[Mapping[str, Any]]) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test); raises ``ValueError`` on a failed op."""
    document = copy.deepcopy(document)

    def get(path: str) -> Any:
        parts = _pointer(path)
        if not parts:
            return document
        parent, last = _resolve(document, parts)
        return parent[int(last)] if isinstance(parent, list) else parent[last]

    def remove(path: str) -> Any:
        parent, last = _resolve(document, _pointer(path))
        return parent.pop(int(last)) if isinstance(parent, list) else parent.pop(last)

    def add(path: str, value: Any) -> None:
        nonlocal document
        parts = _pointer(path)
        if not parts:
            document = value
            return
        parent, last = _resolve(document, parts)
        if isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), value)
        else:
            parent[last] = value

    for number, operation in enumerate(operations):
        op, path = operation.get("op"), operation.get("path", "")
        try:
            match op:
                case "add":
                    add(path, copy.deepcopy(operation["value"]))
                case "remove":
                    remove(path)
                case "replace":
                    remove(path)
                    add(path, copy.deepcopy(operation["value"]))
                case "move":
                    add(path, remove(operation["from"]))
                case "copy":
                    add(path, copy.deepcopy(get(operation["from"])))
                case "test":
                    if get(path) != operation.get("value"):
                        raise ValueError(f"test failed at {path}")
                case _:
                    raise ValueError(f"unknown op {op!r}")
        except (KeyError, IndexError, TypeError) as error:
            raise ValueError(f"operation {number} ({op} {path}) failed: {error!r}") from None
    return document


# ---------------------------------------------------------------- object helpers


_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


def _meta(obj: Mapping[str, Any]) -> JsonDict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _conditions(obj: Mapping[str, Any]) -> dict[Any, Mapping[str, Any]]:
    status = obj.get("status") or {}
    return {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    """Running and Ready=True; a Running pod without a Ready condition counts as ready
    (the emulator has no kubelet to set one)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    ready = _conditions(pod).get("Ready")
    return ready is None or ready.get("status") == "True"


def _pod_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _scaled(value: Any, total: int, *, what: str) -> int:
    """An IntOrString budget value against ``total`` (percentages round up, as Kubernetes does)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer or a percentage")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(int(value[:-1]) * total / 100)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise ValueError(f"{what} {value!r} must be an integer or a percentage")


#: PDB annotation standing in for the owning controller's replica count (the emulator runs no
#: controllers); without it the expected count is the number of matching non-terminal pods.
EXPECTED_PODS_ANNOTATION = "kube-emulator.joiner.dev/expected-pods"


def pdb_status(pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> JsonDict:
    """What the disruption controller would write into a PodDisruptionBudget's status."""
    spec = pdb.get("spec") or {}
    selector = spec.get("selector")
    matching = [p for p in pods if not _pod_terminal(p) and selector_object_matches(selector, _meta(p).get("labels"))]
    expected = len(matching)
    declared = (_meta(pdb).get("annotations") or {}).get(EXPECTED_PODS_ANNOTATION)
    if declared is not None:
        if not str(declared).isdigit():
            raise ValueError(f"annotation {EXPECTED_PODS_ANNOTATION} must be a whole number, got {declared!r}")
        expected = max(expected, int(declared))
    healthy = sum(1 for p in matching if pod_is_ready(p) and not _meta(p).get("deletionTimestamp"))
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, what="maxUnavailable"))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, what="minAvailable")
    else:
        desired = 0
    allowed = max(0, healthy - desired)
    return {
        "observedGeneration": _meta(pdb).get("generation", 1),
        "expectedPods": expected,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": allowed,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed > 0 else "False",
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "",
                "observedGeneration": _meta(pdb).get("generation", 1),
            }
        ],
    }


def _validate(rtype: ResourceType, obj: Mapping[str, Any]) -> None:
    meta = _meta(obj)
    name = str(meta.get("name") or "")
    causes: list[tuple[str, str]] = []
    if not _NAME.match(name) or len(name) > 253:
        causes.append(
            (
                "metadata.name",
                (
                    f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of '
                    "lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'example.com', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                ),
            )
        )
    for section in ("labels", "annotations"):
        values = meta.get(section)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            causes.append((f"metadata.{section}", "must be a map of strings"))
            continue
        for key, value in values.items():
            if not isinstance(value, str):
                causes.append((f"metadata.{section}[{key}]", f"Invalid value: {value!r}: must be a string"))
            elif section == "labels" and len(value) > 63:
                causes.append((f"metadata.labels[{key}]", "must be no more than 63 characters"))
    if rtype.kind == "Node":
        spec = obj.get("spec") or {}
        if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
            causes.append(("spec.unschedulable", f"Invalid value: {spec['unschedulable']!r}: must be a boolean"))
        seen: set[tuple[Any, Any]] = set()
        for index, taint in enumerate(spec.get("taints") or []):
            where = f"metadata.taints[{index}]"  # sic: the real server reports Node taints under metadata
            if not isinstance(taint, Mapping) or not taint.get("key"):
                causes.append((f"{where}.key", "Required value"))
                continue
            if taint.get("effect") not in _TAINT_EFFECTS:
                causes.append(
                    (f"{where}.effect", (f'Unsupported value: "{taint.get("effect")}": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'))
                )
            if (taint["key"], taint.get("effect")) in seen:
                causes.append((where, "Duplicate value: taints must be unique by key and effect pair"))
            seen.add((taint["key"], taint.get("effect")))
    if causes:
        raise _invalid(rtype, name, causes)


def _delete_options(request: kmock.Request) -> JsonDict:
    options = dict(request.data) if isinstance(request.data, Mapping) else {}
    for param in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents"):
        if param in request.params and param not in options:
            options[param] = request.params[param]
    if options.get("gracePeriodSeconds") is not None:
        try:
            options["gracePeriodSeconds"] = int(options["gracePeriodSeconds"])
        except (TypeError, ValueError):
            raise ApiError(400, f"gracePeriodSeconds must be an integer, got {options['gracePeriodSeconds']!r}") from None
    return options


# ---------------------------------------------------------------- strict fields, discovery, Tables


#: Built-in kinds whose model in the ``kubernetes`` client package is not ``V1<Kind>``.
_BUILTIN_MODELS = {"Event": "CoreV1Event"}
_SCALAR_MODELS = frozenset({"str", "int", "float", "bool", "date", "datetime", "object", "bytearray"})


def _strict_error(unknown: Sequence[str]) -> str:
    return "strict decoding error: " + ", ".join(f'unknown field "{path}"' for path in unknown)


def _model_unknown_fields(model: str, value: Any, path: str, found: list[str]) -> None:
    """The fields of ``value`` the built-in type ``model`` does not declare, in document order
    (the type tree is the official client's generated models: ``openapi_types`` and
    ``attribute_map``, generated from the API server's OpenAPI)."""
    if model in _SCALAR_MODELS or value is None:
        return
    generic = model[:5].lower()
    if generic == "list[" and isinstance(value, list):
        for index, item in enumerate(value):
            _model_unknown_fields(model[5:-1], item, f"{path}[{index}]", found)
        return
    if generic in ("dict(", "dict[") and isinstance(value, Mapping):
        inner = model[5:-1].split(", ", 1)[1]
        for key, item in value.items():
            _model_unknown_fields(inner, item, f"{path}[{key}]", found)
        return
    if not isinstance(value, Mapping):
        return
    cls = getattr(_client_models(), model, None)
    if cls is None:
        return
    attributes = {json_name: attribute for attribute, json_name in cls.attribute_map.items()}
    for key, item in value.items():
        child = f"{path}.{key}" if path else str(key)
        if key not in attributes:
            found.append(child)
        else:
            _model_unknown_fields(cls.openapi_types[attributes[key]], item, child, found)


@functools.cache
def _client_models() -> Any:
    return importlib.import_module("kubernetes.client.models")


class _NotServed:
    """A discovery path the server does not serve (a plain-text 404, as the real server answers)."""


_NOT_SERVED = _NotServed()
_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version order: GA before beta before alpha, higher numbers first (sort ascending)."""
    match = _VERSION.match(version)
    if match is None:
        return (3, 0, 0)
    stage = {None: 0, "beta": 1, "alpha": 2}[match[2]]
    return (stage, -int(match[1]), -int(match[3] or 0))


def _age(timestamp: Any, now: datetime) -> str | None:
    """Kubernetes' ``HumanDuration`` of the time since ``timestamp`` (what ``AGE`` shows)."""
    if not isinstance(timestamp, str):
        return "<unknown>"
    try:
        then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<invalid>"
    seconds = int((now - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    minutes, hours = seconds // 60, seconds // 3600
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m" if seconds % 60 == 0 else f"{minutes}m{seconds % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _json_path(obj: Any, path: str) -> Any:
    """The subset of kubectl's JSONPath the CRDs' printer columns use: ``.a.b`` and
    ``.a[?(@.k=="v")].b``; None when absent."""
    value = obj
    for part in re.findall(r'\.([A-Za-z0-9_-]+)|\[\?\(@\.([A-Za-z0-9_]+)=="([^"]*)"\)\]', path):
        key, filter_key, filter_value = part
        if key:
            value = value.get(key) if isinstance(value, Mapping) else None
        else:
            value = (
                next((item for item in value if isinstance(item, Mapping) and item.get(filter_key) == filter_value), None) if isinstance(value, list) else None
            )
        if value is None:
            return None
    return value


_NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}


def _column(name: str, priority: int = 0, kind: str = "string", description: str = "") -> JsonDict:
    return {"name": name, "type": kind, "format": "", "description": description, "priority": priority}


_NODE_COLUMNS = (
    _NAME_COLUMN,
    _column("Status"),
    _column("Roles"),
    _column("Age"),
    _column("Version"),
    _column("Internal-IP", 1),
    _column("External-IP", 1),
    _column("OS-Image", 1),
    _column("Kernel-Version", 1),
    _column("Container-Runtime", 1),
)
_POD_COLUMNS = (
    _NAME_COLUMN,
    _column("Ready"),
    _column("Status"),
    _column("Restarts", kind="string"),
    _column("Age"),
    _column("IP", 1),
    _column("Node", 1),
    _column("Nominated Node", 1),
    _column("Readiness Gates", 1),
)
_EVENT_COLUMNS = (
    _column("Last Seen"),
    _column("Type"),
    _column("Reason"),
    _column("Object"),
    _column("Subobject", 1),
    _column("Source", 1),
    _column("Message"),
    _column("First Seen", 1),
    _column("Count", 1),
    dict(_NAME_COLUMN, priority=1),
)
_DEFAULT_COLUMNS = (_NAME_COLUMN, _column("Age"))


def _node_cells(node: Mapping[str, Any], now: datetime) -> list[Any]:
    meta, spec, status = _meta(node), node.get("spec") or {}, node.get("status") or {}
    ready = _conditions(node).get("Ready")
    state = "Unknown" if ready is None else "Ready" if ready.get("status") == "True" else "NotReady"
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = meta.get("labels") or {}
    roles = sorted(
        {key.split("/", 1)[1] for key in labels if key.startswith("node-role.kubernetes.io/") and "/" in key}
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )
    addresses = status.get("addresses") or []

    def address(kind: str) -> str:
        return next((a.get("address") for a in addresses if a.get("type") == kind and a.get("address")), "<none>")

    info = status.get("nodeInfo") or {}
    return [
        meta.get("name"),
        state,
        ",".join(r for r in roles if r) or "<none>",
        _age(meta.get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _pod_cells(pod: Mapping[str, Any], now: datetime) -> list[Any]:
    meta, spec, status = _meta(pod), pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = status.get("reason") or status.get("phase") or ""
    if meta.get("deletionTimestamp"):
        reason = "Terminating"
    gates = spec.get("readinessGates") or []
    return [
        meta.get("name"),
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        str(restarts),
        _age(meta.get("creationTimestamp"), now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _event_cells(event: Mapping[str, Any], now: datetime) -> list[Any]:
    meta, involved, source = _meta(event), event.get("involvedObject") or {}, event.get("source") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp")
    return [
        _age(last, now),
        event.get("type", ""),
        event.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        ", ".join(v for v in (source.get("component"), source.get("host")) if v),
        event.get("message", ""),
        _age(event.get("firstTimestamp") or last, now),
        int(event.get("count") or 1),
        meta.get("name"),
    ]


# ---------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class DeletionRecord:
    """One accepted deletion: ``via`` is ``delete`` or ``eviction``."""

    kind: str
    namespace: str | None
    name: str
    grace_period_seconds: int | None
    via: str = "delete"
    propagation_policy: str | None = None


@dataclass(slots=True)
class Fault:
    """Injected misbehaviour for the next ``remaining`` requests matching ``method``, ``path`` (a
    regex searched in the URL path) and ``query`` (a regex searched in the decoded query string,
    when given). ``status`` answers with that code (a ``Status`` body,
    ``Retry-After`` if given); ``delay`` sleeps first (a delay alone then serves normally);
    ``disconnect`` drops the connection without an answer."""

    method: str | None
    path: re.Pattern[str]
    remaining: int
    status: int | None = None
    delay: float = 0.0
    disconnect: bool = False
    retry_after: float | None = None
    message: str = "injected fault"
    query: re.Pattern[str] | None = None
    hits: int = 0

    def matches(self, method: str, path: str, query: str = "") -> bool:
        return (
            self.remaining > 0
            and (self.method is None or self.method == method)
            and self.path.search(path) is not None
            and (self.query is None or self.query.search(query) is not None)
        )


# ---------------------------------------------------------------- the API handler


#: The CRDs shipped in Joiner's package (``manifests/crds`` links to them); their schemas and CEL
#: rules admit every NodePool and NodeClass the emulator stores.
CRD_DIR = Path(joiner.__file__).resolve().parent / "data" / "crds"


@functools.cache
def joiner_crds() -> tuple[JsonDict, ...]:
    """Joiner's CustomResourceDefinitions from :data:`CRD_DIR`."""
    import yaml

    return tuple(yaml.safe_load(path.read_text(encoding="utf-8")) for path in sorted(CRD_DIR.glob("*.yaml")))


@dataclass(frozen=True, slots=True)
class _Change:
    """One write as the watch log keeps it: the object before (None: created) and after."""

    revision: int
    resource: kmock.resource
    old: JsonDict | None
    new: JsonDict
    deleted: bool


@attrs.define(kw_only=True)
class KubernetesApiEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the API semantics listed in the module docstring.

    Requests for registered resources are served by this class; everything else (discovery,
    user-declared kmock reactions, watch streams) goes through kmock. All object state lives
    in kmock's ``objects`` store and is mutated on the event loop only, under kmock's lock.
    """

    token: str | Callable[[str | None], bool] | None = None  # required bearer token, or a predicate on it
    request_log_limit: int = 20_000  # recorded requests kept (the oldest half is dropped beyond it)
    clock: Callable[[], datetime] = attrs.field(default=lambda: datetime.now(UTC))

    _types: dict[tuple[str, str, str], ResourceType] = attrs.field(factory=dict, init=False)
    _revision: int = attrs.field(default=1, init=False)  # an empty etcd's revision: a list's version is never "0" ("any")
    _names: int = attrs.field(default=0, init=False)
    _faults: list[Fault] = attrs.field(factory=list, init=False)
    _faults_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _pending_events: list[tuple[kmock.resource, JsonDict]] = attrs.field(factory=list, init=False)
    watch_history: int = 2_000  # writes kept for watches to resume from; older versions answer 410
    _watch_log: collections.deque[_Change] = attrs.field(factory=collections.deque, init=False)
    _watch_floor: int = attrs.field(default=0, init=False)  # the newest revision no longer in the log
    _compacted: int = attrs.field(default=0, init=False)  # the revision of the last compaction (see compact)
    _newest: dict[kmock.resource, int] = attrs.field(factory=dict, init=False)  # each resource's newest change
    _watch_changed: asyncio.Condition | None = attrs.field(default=None, init=False)
    _schemas: dict[tuple[str, str, str], CrdSchema] = attrs.field(factory=dict, init=False)
    deletions: list[DeletionRecord] = attrs.field(factory=list, init=False)
    _dry_run: bool = attrs.field(default=False, init=False)  # the request being served has dryRun=All

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for rtype in BUILTIN_RESOURCES:
            self.register(rtype)
        for crd in joiner_crds():
            self._register_crd(crd)

    # ------------------------------------------------ registry

    def register(self, rtype: ResourceType) -> None:
        """Serve ``rtype`` (and announce it in discovery)."""
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype
        verbs = {"get", "list", "watch", "create", "update", "patch", "delete"}
        self.resources[rtype.key] = kmock.ResourceInfo(
            kind=rtype.kind,
            singular=rtype.singular,
            namespaced=rtype.namespaced,
            verbs=verbs,
            subresources=set(rtype.subresources),
        )

    def resource_type(self, kind: str, api_version: str | None = None) -> ResourceType:
        """Look a type up by kind (``Pod``), plural (``pods``) or ``plural.group`` (any case)."""
        wanted = kind.lower()
        for rtype in self._types.values():
            if api_version is not None and rtype.api_version != api_version:
                continue
            names = {rtype.kind.lower(), rtype.plural, f"{rtype.plural}.{rtype.group}".rstrip(".")}
            if wanted in names:
                return rtype
        raise KeyError(f"unknown kind {kind!r}" + (f" in {api_version}" if api_version else ""))

    def _type_of(self, request: kmock.Request) -> ResourceType | None:
        resource = request.resource
        if resource is None or not resource.plural:
            return None
        return self._types.get((resource.group or "", resource.version or "", resource.plural))

    # ------------------------------------------------ faults

    def add_fault(self, fault: Fault) -> Fault:
        with self._faults_lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._faults_lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str, query: str) -> Fault | None:
        with self._faults_lock:
            for fault in self._faults:
                if fault.matches(method, path, query):
                    fault.remaining -= 1
                    fault.hits += 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    # ------------------------------------------------ HTTP entry

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if len(self._requests) > self.request_log_limit:
            del self._requests[: len(self._requests) // 2]
        method = request.method.value.upper()
        path = request.url.path
        fault = self._take_fault(method, path, request.url.query_string)
        if fault is not None:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.disconnect:
                transport = request._raw_request.transport if request._raw_request is not None else None
                if transport is not None:
                    transport.abort()
                return aiohttp.web.Response(status=500)
            if fault.status is not None:
                headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                return self._error_response(ApiError(fault.status, fault.message, headers=headers))
        if self.token is not None:
            header = request.headers.get("Authorization", "")
            presented = header[len("Bearer ") :] if header.startswith("Bearer ") else None
            accepted = self.token(presented) if callable(self.token) else presented == self.token
            if not accepted:
                return self._error_response(ApiError(401, "Unauthorized"))

        if method == "GET":
            found = self._discovery(path) if not path.startswith("/openapi/") else self._openapi(path)
            if found is not None:
                if found is _NOT_SERVED:
                    return aiohttp.web.Response(status=404, text="404 page not found\n")
                return aiohttp.web.json_response(found)
        rtype = self._type_of(request)
        if rtype is None:
            if request.resource is not None and request.resource.plural:
                return self._error_response(ApiError(404, "the server could not find the requested resource"))
            return await super(kmock.KubernetesEmulator, self)._handle(request)  # discovery, user reactions
        if request.action == kmock.action.WATCH:
            try:
                return await self._watch(rtype, request)
            except ApiError as error:
                return self._error_response(error)

        try:
            async with self._lock:
                status, body = self._serve(rtype, method, request)
        except ApiError as error:
            return self._error_response(error)
        finally:
            await self._flush_events()
        return aiohttp.web.json_response(body, status=status)

    @staticmethod
    def _error_response(error: ApiError) -> aiohttp.web.Response:
        return aiohttp.web.json_response(error.status(), status=error.code, headers=error.headers)

    async def _flush_events(self) -> None:
        events, self._pending_events = self._pending_events, []
        for resource, event in events:
            await self._buses[resource].put(event)
        if events and self._watch_changed is not None:
            async with self._watch_changed:
                self._watch_changed.notify_all()

    def compact(self) -> int:
        """Forget every version before now, as etcd compacted at its current revision under an
        API server whose watch cache was built after it: a watch resumed from an older version
        answers 410, and so does a list continued from an older page. Returns the revision."""
        self._watch_log.clear()
        self._watch_floor = self._compacted = self._revision
        return self._revision

    def _log_change(self, rtype: ResourceType, old: JsonDict | None, new: JsonDict, deleted: bool) -> None:
        self._watch_log.append(_Change(self._revision, rtype.key, copy.deepcopy(old), copy.deepcopy(new), deleted))
        self._newest[rtype.key] = self._revision
        while len(self._watch_log) > self.watch_history:
            self._watch_floor = self._watch_log.popleft().revision

    async def _watch(self, rtype: ResourceType, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """A watch stream (see the module docstring): one JSON event per line."""
        params = request.params or {}
        try:
            labels = parse_label_selector(params.get("labelSelector"))
            fields = parse_field_selector(params.get("fieldSelector"))
        except SelectorError as error:
            raise ApiError(400, str(error)) from None
        for requirement in fields:
            if requirement.field not in rtype.field_labels:
                raise ApiError(400, f"field label not supported: {requirement.field}")
        try:
            timeout = min(int(params.get("timeoutSeconds") or 1800), 3600)
            since = params.get("resourceVersion") or ""
            cursor = int(since) if since not in ("", "0") else None
        except ValueError:
            raise ApiError(400, "timeoutSeconds and resourceVersion must be integers") from None
        # A watch list (sendInitialEvents=true): the current objects, then with bookmarks allowed
        # a BOOKMARK at the version they are at, annotated as the end of the initial events.
        initial_events = params.get("sendInitialEvents") == "true"
        if params.get("sendInitialEvents") is not None and params.get("resourceVersionMatch") != "NotOlderThan":
            raise ApiError(
                422,
                'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                reason="Invalid",
            )
        bookmarks = params.get("allowWatchBookmarks") == "true"
        namespace = request.namespace

        def matches(obj: JsonDict | None) -> bool:
            if obj is None:
                return False
            meta = _meta(obj)
            if namespace is not None and meta.get("namespace") != namespace:
                return False
            return label_selector_matches(labels, meta.get("labels")) and field_selector_matches(fields, obj)

        def typed(obj: JsonDict) -> JsonDict:
            item = copy.deepcopy(obj)
            item.setdefault("apiVersion", rtype.api_version)
            item.setdefault("kind", rtype.kind)
            return item

        if self._watch_changed is None:
            self._watch_changed = asyncio.Condition()
        lines: list[JsonDict] = []
        expired = False
        async with self._lock:
            started_at = self._revision  # changes up to here are the backlog the watch starts with
            if cursor is None or initial_events:
                lines = [{"type": "ADDED", "object": typed(obj)} for obj in self._items(rtype, namespace) if matches(obj)]
                cursor = max(cursor or 0, self._revision)
                if initial_events and bookmarks:
                    lines.append(
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": rtype.kind,
                                "apiVersion": rtype.api_version,
                                "metadata": {"resourceVersion": str(cursor), "annotations": {INITIAL_EVENTS_END: "true"}},
                            },
                        }
                    )
            elif cursor < self._watch_floor:
                expired = True
        raw = request._raw_request
        assert raw is not None  # a served request always has one
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        try:
            if expired:
                status = ApiError(410, f"too old resource version: {since} ({self._watch_floor})").status()
                await response.write(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                await response.write_eof()
                return response
            # Bookmarks on a plain watch, as the watch cache sends them: every minute and 2 s
            # before the deadline, at the resource's newest change, when that is newer than the
            # watch's version and the backlog it started with (an idle watch gets none). The real
            # server may send one more at its first bookmark tick (within about a second of the
            # start), which is left out here: the emulator's streams stay deterministic.
            clock = asyncio.get_running_loop().time
            deadline = clock() + timeout
            delivered = cursor
            next_bookmark: float | None = min(clock() + BOOKMARK_EVERY_SECONDS, deadline - 2) if bookmarks and timeout > 2 else None
            while True:
                for line in lines:
                    await response.write(json.dumps(line).encode() + b"\n")
                lines = []
                remaining = deadline - clock()
                if remaining <= 0:
                    break
                if next_bookmark is not None and next_bookmark <= clock():
                    newest = self._newest.get(rtype.key, 0)
                    if newest > delivered:
                        lines.append(
                            {"type": "BOOKMARK", "object": {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": {"resourceVersion": str(newest)}}}
                        )
                    following = clock() + BOOKMARK_EVERY_SECONDS
                    next_bookmark = following if following < deadline - 2 else deadline - 2 if deadline - 2 > clock() else None
                    continue
                wait = remaining if next_bookmark is None else min(remaining, next_bookmark - clock())
                async with self._watch_changed:
                    if not any(change.revision > cursor for change in self._watch_log):
                        try:
                            await asyncio.wait_for(self._watch_changed.wait(), max(wait, 0))
                        except TimeoutError:
                            continue
                async with self._lock:
                    for change in self._watch_log:
                        if change.revision <= cursor or change.resource != rtype.key:
                            continue
                        was, now = matches(change.old), not change.deleted and matches(change.new)
                        if change.deleted and was:
                            lines.append({"type": "DELETED", "object": typed(change.new)})
                        elif now:
                            lines.append({"type": "MODIFIED" if was else "ADDED", "object": typed(change.new)})
                        elif was:
                            lines.append({"type": "DELETED", "object": typed(change.new)})
                        else:
                            continue
                        if change.revision <= started_at:
                            delivered = max(delivered, change.revision)
                    cursor = self._revision
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away
        return response

    def _serve(self, rtype: ResourceType, method: str, request: kmock.Request) -> tuple[int, JsonDict]:
        dry_run = request.params.get("dryRun")
        if dry_run not in (None, "", "All"):
            raise ApiError(400, f"Invalid dry run value: {dry_run!r}: valid values are 'All'")
        self._dry_run = dry_run == "All"
        try:
            status, body = self._serve_request(rtype, method, request)
        finally:
            self._dry_run = False
        if method == "GET" and "as=Table" in request.headers.get("Accept", "") and body.get("kind") != "Status":
            body = self._table(rtype, body)
        return status, body

    def _strict(self, rtype: ResourceType, request: kmock.Request, obj: Any) -> None:
        """``fieldValidation=Strict``: a body naming fields its kind does not have is refused (400)."""
        if request.params.get("fieldValidation") != "Strict" or not isinstance(obj, Mapping):
            return
        unknown = self._unknown_fields(rtype, obj)
        if unknown:
            raise ApiError(400, f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: {_strict_error(unknown)}')

    def _unknown_fields(self, rtype: ResourceType, obj: Mapping[str, Any]) -> list[str]:
        if rtype.custom:
            schema = self._schemas.get((rtype.group, rtype.version, rtype.plural))
            return schema.unknown_fields(obj) if schema is not None else []
        found: list[str] = []
        _model_unknown_fields(_BUILTIN_MODELS.get(rtype.kind, f"V1{rtype.kind}"), obj, "", found)
        return found

    def _serve_request(self, rtype: ResourceType, method: str, request: kmock.Request) -> tuple[int, JsonDict]:
        name, sub = request.name, request.subresource
        if sub is not None and sub not in rtype.subresources:
            raise ApiError(404, "the server could not find the requested resource")
        if not rtype.namespaced and request.namespace is not None:
            raise ApiError(404, "the server could not find the requested resource")
        if rtype.namespaced and name is not None and request.namespace is None:
            raise ApiError(404, "the server could not find the requested resource")
        namespace = request.namespace if rtype.namespaced else None
        if name is None:
            if method == "GET":
                return 200, self.list_objects(
                    rtype,
                    namespace,
                    label_selector=request.params.get("labelSelector"),
                    field_selector=request.params.get("fieldSelector"),
                    limit=request.params.get("limit"),
                    continue_token=request.params.get("continue"),
                )
            if method == "POST":
                if rtype.namespaced and namespace is None:
                    raise ApiError(405, f"the server does not allow this method on the requested resource ({rtype.plural} at cluster scope)")
                self._strict(rtype, request, request.data)
                return 201, self.create(rtype, namespace, self._body(request))
            raise ApiError(405, f"the server does not allow this method on the requested resource ({method} collection)")
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return 201, self.evict(namespace or "", name, self._body(request))
        if sub == "binding":
            if method != "POST":
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return 201, self.bind(namespace or "", name, self._body(request))
        status_only = sub == "status"
        match method:
            case "GET":
                return 200, self.read(rtype, namespace, name)
            case "PUT":
                self._strict(rtype, request, request.data)
                return 200, self.replace(rtype, namespace, name, self._body(request), status_only=status_only)
            case "PATCH":
                content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
                return 200, self.patch(
                    rtype, namespace, name, request.data, content_type, status_only=status_only, strict=request.params.get("fieldValidation") == "Strict"
                )
            case "DELETE":
                return 200, self.delete(rtype, namespace, name, _delete_options(request))
        raise ApiError(405, f"the server does not allow this method on the requested resource ({method})")

    @staticmethod
    def _body(request: kmock.Request) -> JsonDict:
        if not isinstance(request.data, Mapping):
            raise ApiError(400, "the request body must be a JSON object")
        return copy.deepcopy(dict(request.data))

    # ------------------------------------------------ store primitives (loop thread, under the lock)

    def _now(self) -> str:
        return self.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _next_revision(self) -> str:
        self._revision += 1
        return str(self._revision)

    def _stored(self, rtype: ResourceType, namespace: str | None, name: str) -> kmock.Object | None:
        key = (rtype.key, namespace, name)
        if key not in self.objects:
            return None
        stored = self.objects[key]
        return None if stored.deleted else stored

    def _current(self, rtype: ResourceType, namespace: str | None, name: str) -> JsonDict | None:
        stored = self._stored(rtype, namespace, name)
        return None if stored is None else stored.raw

    def _items(self, rtype: ResourceType, namespace: str | None = None) -> list[JsonDict]:
        """Live objects of a type, in (namespace, name) order like etcd keys."""
        keyed = [
            ((ns or "", name), stored.raw)
            for (resource, ns, name), stored in self.objects.items()
            if resource == rtype.key and not stored.deleted and (namespace is None or ns == namespace)
        ]
        keyed.sort(key=lambda pair: pair[0])
        return [obj for _, obj in keyed]

    def _store(self, rtype: ResourceType, obj: JsonDict, event: str) -> JsonDict:
        meta = obj["metadata"]
        if self._dry_run:  # validated and admitted, not stored: the version it would replace, none for a new object
            answer = copy.deepcopy(obj)
            current = self._current(rtype, meta.get("namespace"), meta["name"])
            if current is None:
                answer["metadata"].pop("resourceVersion", None)
            else:
                answer["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            return answer
        meta["resourceVersion"] = self._next_revision()
        key = (rtype.key, meta.get("namespace"), meta["name"])
        self._log_change(rtype, self._current(rtype, meta.get("namespace"), meta["name"]), obj, deleted=False)
        if key in self.objects:
            stored = self.objects[key]
            stored.history.append(copy.deepcopy(obj))
            if len(stored.history) > HISTORY_LIMIT:
                del stored.history[:-HISTORY_LIMIT]
        else:
            self.objects[key] = copy.deepcopy(obj)
        self._pending_events.append((rtype.key, {"type": event, "object": copy.deepcopy(obj)}))
        return copy.deepcopy(obj)

    def _remove(self, rtype: ResourceType, namespace: str | None, name: str) -> JsonDict:
        stored = self.objects[(rtype.key, namespace, name)]
        if self._dry_run:
            return copy.deepcopy(stored.raw)
        last = copy.deepcopy(stored.raw)
        last["metadata"]["resourceVersion"] = self._next_revision()
        self._log_change(rtype, stored.raw, last, deleted=True)
        stored.delete()
        self._pending_events.append((rtype.key, {"type": "DELETED", "object": copy.deepcopy(last)}))
        return last

    # ------------------------------------------------ operations (loop thread, under the lock)

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: str | int | None = None,
        continue_token: str | None = None,
        type_meta: bool = False,
    ) -> JsonDict:
        try:
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector)
        except SelectorError as error:
            raise ApiError(400, str(error)) from None
        for requirement in fields:
            if requirement.field not in rtype.field_labels:
                raise ApiError(400, f"field label not supported: {requirement.field}")
        start_after: tuple[str, str] | None = None
        if continue_token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(continue_token.encode() + b"==="))
                start_after = (decoded["namespace"], decoded["name"])
                token_version = int(decoded.get("rv", 0))
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion") from None
            if 0 < token_version < self._compacted:
                # As etcd answers a continuation from a compacted revision: 410, with a token that
                # continues at the latest version (rv -1) from the same key.
                fresh = json.dumps({"namespace": start_after[0], "name": start_after[1], "rv": -1})
                raise ApiError(410, CONTINUE_EXPIRED, metadata={"continue": base64.urlsafe_b64encode(fresh.encode()).decode().rstrip("=")})
        try:
            page_size = int(limit) if limit not in (None, "", "0", 0) else None
        except ValueError:
            raise ApiError(400, f"limit must be an integer, got {limit!r}") from None

        if rtype.kind == "PodDisruptionBudget":
            self._refresh_pdbs(namespace)
        selected = []
        for obj in self._items(rtype, namespace):
            meta = _meta(obj)
            key = (meta.get("namespace") or "", meta["name"])
            if start_after is not None and key <= start_after:
                continue
            if label_selector_matches(labels, meta.get("labels")) and field_selector_matches(fields, obj):
                selected.append((key, obj))
        metadata: JsonDict = {"resourceVersion": str(self._revision)}
        if page_size is not None and len(selected) > page_size:
            last_key = selected[page_size - 1][0]
            token = json.dumps({"namespace": last_key[0], "name": last_key[1], "rv": self._revision})
            metadata["continue"] = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
            metadata["remainingItemCount"] = len(selected) - page_size
            selected = selected[:page_size]
        items = []
        for _, obj in selected:
            item = copy.deepcopy(obj)
            if not (type_meta or rtype.custom):  # typed lists omit it on a real server, unstructured ones keep it
                item.pop("apiVersion", None)
                item.pop("kind", None)
            items.append(item)
        return {"apiVersion": rtype.api_version, "kind": f"{rtype.kind}List", "metadata": metadata, "items": items}

    def read(self, rtype: ResourceType, namespace: str | None, name: str) -> JsonDict:
        if rtype.kind == "PodDisruptionBudget":
            self._refresh_pdbs(namespace)
        current = self._current(rtype, namespace, name)
        if current is None:
            raise _not_found(rtype, name)
        return copy.deepcopy(current)

    def create(self, rtype: ResourceType, namespace: str | None, obj: JsonDict) -> JsonDict:
        if obj.get("kind") not in (None, rtype.kind) or obj.get("apiVersion") not in (None, rtype.api_version):
            raise ApiError(
                400,
                f"the API version in the data ({obj.get('apiVersion')}) and kind ({obj.get('kind')}) "
                f"do not match the endpoint ({rtype.api_version} {rtype.kind})",
            )
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if rtype.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            self._names += 1
            meta["name"] = f"{meta['generateName']}{hashlib.sha256(str(self._names).encode()).hexdigest()[:5]}"
        if not meta.get("name"):
            raise _invalid(rtype, "", [("metadata.name", "Required value: name or generateName is required")])
        if self._current(rtype, meta.get("namespace"), meta["name"]) is not None:
            raise ApiError(409, f"{rtype.describe(meta['name'])} already exists", reason="AlreadyExists", details=_details(rtype, meta["name"]))
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        _validate(rtype, obj)
        self._admit(rtype, obj, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._now()
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(transient, None)
        if rtype.generation:
            meta["generation"] = 1
        if rtype.kind == "Pod":
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        if rtype.kind == "CustomResourceDefinition" and not self._dry_run:
            self._register_crd(obj)
        return self._store(rtype, obj, "ADDED")

    def replace(
        self, rtype: ResourceType, namespace: str | None, name: str, obj: JsonDict, *, status_only: bool = False, check_version: bool = True
    ) -> JsonDict:
        current = self._current(rtype, namespace, name)
        if current is None:
            raise _not_found(rtype, name)
        given = obj.get("metadata")
        meta = given if isinstance(given, dict) else {}
        if meta.get("name") not in (None, name):
            raise ApiError(400, f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
        if check_version:
            sent = meta.get("resourceVersion")
            if sent is None and rtype.custom:
                raise _invalid(rtype, name, [("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")])
            if sent is not None and str(sent) != current["metadata"]["resourceVersion"]:
                raise _conflict(rtype, name)
        return self._update(rtype, current, obj, status_only=status_only)

    # patch/delete replace kmock's HTTP-client shortcuts of the same names, which kmock itself never calls.
    def patch(  # type: ignore[override]
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str,
        *,
        status_only: bool = False,
        strict: bool = False,
    ) -> JsonDict:
        current = self._current(rtype, namespace, name)
        if current is None:
            raise _not_found(rtype, name)
        try:
            match content_type:
                case "application/merge-patch+json":
                    patched = json_merge_patch(current, self._mapping(patch))
                case "application/strategic-merge-patch+json":
                    if rtype.custom:
                        raise ApiError(
                            415,
                            "the body of the request was in an unknown format - accepted media types include: "
                            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                        )
                    patched = strategic_merge_patch(current, self._mapping(patch))
                case "application/json-patch+json":
                    if not isinstance(patch, list):
                        raise ApiError(400, "a JSON patch must be a list of operations")
                    patched = json_patch(current, patch)
                case _:
                    raise ApiError(415, f"unsupported patch content type {content_type!r}")
        except ValueError as error:
            raise ApiError(422, f"the patch could not be applied: {error}") from None
        if not isinstance(patched, dict):
            raise ApiError(422, "the patched document is not an object")
        unknown = self._unknown_fields(rtype, patched) if strict else []
        if unknown:
            shown = json.dumps(patched, separators=(",", ":")).replace('"', '\\"')
            raise ApiError(
                422,
                f' "" is invalid: patch: Invalid value: "{shown}": {_strict_error(unknown)}',
                details={"causes": [{"reason": "FieldValueInvalid", "field": "patch", "message": f"Invalid value: {_strict_error(unknown)}"}]},
            )
        sent = _meta(patched).get("resourceVersion")
        if sent is not None and str(sent) != current["metadata"]["resourceVersion"]:
            raise _conflict(rtype, name)
        return self._update(rtype, current, patched, status_only=status_only)

    @staticmethod
    def _mapping(patch: Any) -> Mapping[str, Any]:
        if not isinstance(patch, Mapping):
            raise ApiError(400, "a merge patch must be a JSON object")
        return patch

    def _update(self, rtype: ResourceType, current: JsonDict, new: JsonDict, *, status_only: bool, whole: bool = False) -> JsonDict:
        """Write ``new`` over ``current``: only its status (``status_only``), everything but the
        status (the main resource of a type with a status subresource), or all of it (``whole``,
        the harness)."""
        old_meta = current["metadata"]
        uid = (new.get("metadata") or {}).get("uid")
        if not whole and uid and old_meta.get("uid") and uid != old_meta["uid"]:
            raise _invalid(rtype, str(old_meta.get("name", "")), [("metadata.uid", f'Invalid value: "{uid}": field is immutable')])
        if whole:
            result = copy.deepcopy(new)
        elif status_only:
            result = copy.deepcopy(current)
            if "status" in new:
                result["status"] = copy.deepcopy(new["status"])
            else:
                result.pop("status", None)
        else:
            result = copy.deepcopy(new)
            if "status" in rtype.subresources:
                if "status" in current:
                    result["status"] = copy.deepcopy(current["status"])
                else:
                    result.pop("status", None)
        meta = result.setdefault("metadata", {})
        for immutable in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if immutable in old_meta:
                meta[immutable] = old_meta[immutable]
            else:
                meta.pop(immutable, None)
        result["apiVersion"], result["kind"] = rtype.api_version, rtype.kind
        if rtype.generation:
            changed = {k: v for k, v in result.items() if k not in ("metadata", "status")} != {
                k: v for k, v in current.items() if k not in ("metadata", "status")
            }
            meta["generation"] = old_meta.get("generation", 1) + (1 if changed else 0)
        _validate(rtype, result)
        self._admit(rtype, result, current)
        if rtype.kind == "CustomResourceDefinition" and not self._dry_run:
            self._register_crd(result)
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._store(rtype, result, "MODIFIED")
            return self._remove(rtype, meta.get("namespace"), meta["name"])
        return self._store(rtype, result, "MODIFIED")

    def delete(  # type: ignore[override]  # see patch
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        via: str = "delete",
    ) -> JsonDict:
        options = options or {}
        current = self._current(rtype, namespace, name)
        if current is None:
            raise _not_found(rtype, name)
        preconditions = options.get("preconditions") or {}
        for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted, actual = preconditions.get(field_name), current["metadata"].get(field_name)
            if wanted is not None and wanted != actual:
                why = "deleted and then recreated" if field_name == "uid" else "modified"
                raise ApiError(
                    409,
                    f'Operation cannot be fulfilled on {rtype.kind} "{name}": the {label} in the precondition '
                    f"({wanted}) does not match the {label} in record ({actual}). The object might have been {why}",
                    reason="Conflict",
                    details=_details(rtype, name),
                )
        grace = options.get("gracePeriodSeconds")
        if not self._dry_run:
            self.deletions.append(DeletionRecord(rtype.kind, namespace, name, grace, via, options.get("propagationPolicy")))
        if current["metadata"].get("finalizers"):
            if current["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(current)
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = self._now()
            marked["metadata"]["deletionGracePeriodSeconds"] = grace if grace is not None else 0
            return self._store(rtype, marked, "MODIFIED")
        if rtype.kind == "Pod":
            if (current.get("spec") or {}).get("nodeName") and not _pod_terminal(current) and not current["metadata"].get("deletionTimestamp"):
                # A bound pod's deletion is graceful: marked first (the emulator's kubelet has always finished at once).
                marked = copy.deepcopy(current)
                marked["metadata"]["deletionTimestamp"] = self._now()
                default_grace = (current.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                marked["metadata"]["deletionGracePeriodSeconds"] = grace if grace is not None else default_grace
                self._store(rtype, marked, "MODIFIED")
            return self._remove(rtype, namespace, name)  # pods answer with the pod
        removed = self._remove(rtype, namespace, name)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": _details(rtype, name, uid=removed["metadata"].get("uid"))}

    def evict(self, namespace: str, name: str, eviction: JsonDict) -> JsonDict:
        pods = self.resource_type("Pod")
        if _meta(eviction).get("name") not in (None, name):
            raise ApiError(400, "name in URL does not match name in Eviction object")
        pod = self._current(pods, namespace, name)
        if pod is None:
            raise _not_found(pods, name)
        options = dict(eviction.get("deleteOptions") or {})
        phase = (pod.get("status") or {}).get("phase")
        ignore_budgets = phase in ("Succeeded", "Failed", "Pending") or bool(_meta(pod).get("deletionTimestamp"))
        if not ignore_budgets:
            budgets = self.resource_type("PodDisruptionBudget")
            applicable = [
                pdb
                for pdb in self._items(budgets, namespace)
                if (pdb.get("spec") or {}).get("selector") and selector_object_matches(pdb["spec"]["selector"], _meta(pod).get("labels"))
            ]
            if len(applicable) > 1:
                raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
            if applicable:
                pdb = applicable[0]
                status = self._pdb_status(pdb)
                unready_allowed = not pod_is_ready(pod) and status["currentHealthy"] >= status["desiredHealthy"] > 0
                if not unready_allowed and status["disruptionsAllowed"] <= 0:
                    raise ApiError(
                        429,
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        details={
                            "causes": [
                                {
                                    "reason": "DisruptionBudget",
                                    "message": f"The disruption budget {_meta(pdb)['name']} needs {status['desiredHealthy']} "
                                    f"healthy pods and has {status['currentHealthy']} currently",
                                }
                            ]
                        },
                    )
        self.delete(pods, namespace, name, options, via="eviction")
        self._refresh_pdbs(namespace)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def bind(self, namespace: str, name: str, binding: JsonDict) -> JsonDict:
        pods = self.resource_type("Pod")
        pod = self._current(pods, namespace, name)
        if pod is None:
            raise _not_found(pods, name)
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise _invalid(pods, name, [("target.name", "Required value")])
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            raise ApiError(409, f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned to node "{bound_to}"')
        bound = copy.deepcopy(pod)
        bound.setdefault("spec", {})["nodeName"] = target
        status = bound.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": self._now()})
        status["conditions"] = conditions
        self._store(pods, bound, "MODIFIED")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _pdb_status(self, pdb: JsonDict) -> JsonDict:
        pods = self._items(self.resource_type("Pod"), _meta(pdb).get("namespace"))
        try:
            return pdb_status(pdb, pods)
        except ValueError as error:
            raise ApiError(500, f"PodDisruptionBudget {_meta(pdb).get('name')}: {error}") from None

    def _refresh_pdbs(self, namespace: str | None) -> None:
        """Emulate the disruption controller: bring stored PDB statuses up to date."""
        budgets = self.resource_type("PodDisruptionBudget")
        for pdb in self._items(budgets, namespace):
            try:
                status = self._pdb_status(pdb)
            except ApiError:
                continue
            if pdb.get("status") != status:
                updated = copy.deepcopy(pdb)
                updated["status"] = status
                self._store(budgets, updated, "MODIFIED")

    def _admit(self, rtype: ResourceType, obj: JsonDict, old: JsonDict | None) -> None:
        """A custom resource through its CRD's schema and CEL rules (:mod:`testworld.admission`):
        defaults applied and unknown fields pruned in place, or 422 Invalid naming every cause."""
        schema = self._schemas.get((rtype.group, rtype.version, rtype.plural)) if rtype.custom else None
        if schema is None:
            return
        admitted, causes = schema.admit(obj, old)
        if causes:
            raise _invalid(rtype, str(_meta(obj).get("name") or ""), causes)
        admitted["metadata"] = obj.get("metadata")  # the caller goes on filling in this very dict
        obj.clear()
        obj.update(admitted)

    def _register_crd(self, crd: JsonDict) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        schemas = schemas_of(crd)
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            if version.get("name") in schemas:
                self._schemas[(spec.get("group", ""), str(version.get("name")), names.get("plural", ""))] = schemas[str(version.get("name"))]
            self.register(
                ResourceType(
                    group=spec.get("group", ""),
                    version=version.get("name", "v1"),
                    plural=names.get("plural", ""),
                    kind=names.get("kind", ""),
                    namespaced=spec.get("scope") == "Namespaced",
                    subresources=frozenset({"status"}) if "status" in (version.get("subresources") or {}) else frozenset(),
                    field_labels=_META,
                    custom=True,
                    generation=True,
                    short_names=tuple(names.get("shortNames") or ()),
                    categories=tuple(names.get("categories") or ()),
                    printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                )
            )

    # ------------------------------------------------ discovery and Tables

    def _discovery(self, path: str) -> JsonDict | _NotServed | None:
        """The discovery documents (``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>[/<version>]``)
        as the real server writes them; None for any other path."""
        parts = [part for part in path.split("/") if part]
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"]}
        if parts == ["api", "v1"]:
            return self._resource_list("", "v1")
        groups: dict[str, list[str]] = {}
        for rtype in self._types.values():
            if rtype.group and rtype.version not in groups.setdefault(rtype.group, []):
                groups[rtype.group].append(rtype.version)

        def group(name: str) -> JsonDict:
            versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in sorted(groups[name], key=_version_priority)]
            return {"name": name, "versions": versions, "preferredVersion": versions[0]}

        if parts == ["apis"]:
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group(name) for name in groups]}
        if len(parts) == 2 and parts[0] == "apis":
            return dict(group(parts[1]), kind="APIGroup", apiVersion="v1") if parts[1] in groups else _NOT_SERVED
        if len(parts) == 3 and parts[0] == "apis":
            return self._resource_list(parts[1], parts[2]) if parts[2] in groups.get(parts[1], []) else _NOT_SERVED
        return None

    def _served_versions(self) -> dict[str, list[ResourceType]]:
        """OpenAPI v3's group-version paths (``api/v1``, ``apis/<group>/<version>``) -> their types."""
        served: dict[str, list[ResourceType]] = {}
        for rtype in self._types.values():
            served.setdefault(f"apis/{rtype.group}/{rtype.version}" if rtype.group else "api/v1", []).append(rtype)
        return served

    def _openapi(self, path: str) -> JsonDict | _NotServed | None:
        """``/openapi/v3`` and its group-version documents: for each type, the operations with
        their ``x-kubernetes-group-version-kind`` and the ``fieldValidation`` and ``dryRun``
        parameters (kubectl checks them before it asks for strict validation), and for custom
        resources their CRD's schema (what ``kubectl explain`` reads)."""
        served = self._served_versions()
        if path.rstrip("/") == "/openapi/v3":
            return {
                "paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={hashlib.sha256(gv.encode()).hexdigest()[:16].upper()}"} for gv in sorted(served)}
            }
        if not path.startswith("/openapi/v3/"):
            return _NOT_SERVED
        types = served.get(path[len("/openapi/v3/") :].strip("/"))
        if types is None:
            return _NOT_SERVED
        parameters = [
            {"name": name, "in": "query", "description": "", "schema": {"type": "string", "uniqueItems": True}}
            for name in ("dryRun", "fieldManager", "fieldValidation")
        ]
        paths: JsonDict = {}
        schemas: JsonDict = {}
        for rtype in types:
            gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
            prefix = f"/apis/{rtype.group}/{rtype.version}" if rtype.group else "/api/v1"
            collection = f"{prefix}/namespaces/{{namespace}}/{rtype.plural}" if rtype.namespaced else f"{prefix}/{rtype.plural}"
            name = f"{'.'.join(reversed(rtype.group.split('.'))) if rtype.group else 'io.k8s.api.core'}.{rtype.version}.{rtype.kind}"
            ref = {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}
            operation = {"x-kubernetes-group-version-kind": gvk, "parameters": parameters, "responses": {"200": dict(ref, description="OK")}}
            paths[collection] = {"post": dict(operation, operationId=f"create{rtype.kind}"), "get": dict(operation, operationId=f"list{rtype.kind}")}
            paths[f"{collection}/{{name}}"] = {verb: dict(operation, operationId=f"{verb}{rtype.kind}") for verb in ("get", "put", "patch", "delete")}
            crd_schema = self._schemas.get((rtype.group, rtype.version, rtype.plural))
            schema: JsonDict = copy.deepcopy(dict(crd_schema.schema)) if crd_schema is not None else {"type": "object"}
            schema["x-kubernetes-group-version-kind"] = [gvk]
            schemas[name] = schema
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.37.2"}, "paths": paths, "components": {"schemas": schemas}}

    def _resource_list(self, group: str, version: str) -> JsonDict:
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        resources: list[JsonDict] = []
        for rtype in sorted(self._types.values(), key=lambda r: r.plural):
            if (rtype.group, rtype.version) != (group, version):
                continue
            entry: JsonDict = {"name": rtype.plural, "singularName": rtype.singular, "namespaced": rtype.namespaced, "kind": rtype.kind, "verbs": verbs}
            if rtype.short_names:
                entry["shortNames"] = list(rtype.short_names)
            if rtype.categories:
                entry["categories"] = list(rtype.categories)
            resources.append(entry)
            for sub in sorted(rtype.subresources):
                sub_entry: JsonDict = {
                    "name": f"{rtype.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    "kind": rtype.kind,
                    "verbs": ["get", "patch", "update"],
                }
                if sub == "eviction":
                    sub_entry.update(group="policy", version="v1", kind="Eviction", verbs=["create"])
                elif sub == "binding":
                    sub_entry.update(kind="Binding", verbs=["create"])
                resources.append(sub_entry)
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version, "resources": resources}

    def _table(self, rtype: ResourceType, answer: JsonDict) -> JsonDict:
        """A list or an object as a ``meta.k8s.io/v1`` Table: the columns the real server prints
        for Nodes, Pods and Events, a CRD's additionalPrinterColumns, else Name and Age."""
        now = self.clock()
        objects = answer.get("items", [answer])
        cells: Callable[[Mapping[str, Any], datetime], list[Any]]
        if rtype.kind == "Node":
            columns, cells = list(_NODE_COLUMNS), _node_cells
        elif rtype.kind == "Pod":
            columns, cells = list(_POD_COLUMNS), _pod_cells
        elif rtype.kind == "Event":
            columns, cells = list(_EVENT_COLUMNS), _event_cells
        elif rtype.printer_columns:
            printed = rtype.printer_columns
            columns = [_NAME_COLUMN] + [
                _column(
                    c["name"],
                    int(c.get("priority", 0)),
                    str(c.get("type", "string")),
                    str(c.get("description") or f"Custom resource definition column (in JSONPath format): {c['jsonPath']}"),
                )
                for c in printed
            ]

            def cells(obj: Mapping[str, Any], now: datetime) -> list[Any]:
                row: list[Any] = [_meta(obj).get("name")]
                for column in printed:
                    value = _json_path(obj, str(column["jsonPath"]))
                    row.append(_age(value, now) if column.get("type") == "date" and value is not None else value)
                return row
        else:
            columns = list(_DEFAULT_COLUMNS)

            def cells(obj: Mapping[str, Any], now: datetime) -> list[Any]:
                return [_meta(obj).get("name"), _age(_meta(obj).get("creationTimestamp"), now)]

        rows = [
            {"cells": cells(obj, now), "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": copy.deepcopy(_meta(obj))}}
            for obj in objects
        ]
        metadata = (
            {k: v for k, v in (answer.get("metadata") or {}).items() if k in ("resourceVersion", "continue", "remainingItemCount")}
            if "items" in answer
            else {"resourceVersion": _meta(answer).get("resourceVersion")}
        )
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": columns, "rows": rows}

    # ------------------------------------------------ harness API (loop thread)

    async def harness(self, operation: Callable[[], _T]) -> _T:
        """Run a store operation under the lock (used by :class:`KubeEmulator`)."""
        try:
            async with self._lock:
                return operation()
        finally:
            await self._flush_events()

    def apply_object(self, obj: Mapping[str, Any]) -> JsonDict:
        """Create, or replace keeping identity; status is taken as given (the harness plays kubelet)."""
        stored: JsonDict = copy.deepcopy(dict(obj))
        rtype = self.resource_type(stored.get("kind", ""), stored.get("apiVersion"))
        meta = stored.setdefault("metadata", {})
        namespace = (meta.get("namespace") or "default") if rtype.namespaced else None
        current = self._current(rtype, namespace, meta.get("name", ""))
        if current is None:
            return self.create(rtype, namespace, stored)
        return self._update(rtype, current, stored, status_only=False, whole=True)


# ---------------------------------------------------------------- the threaded server


class _Server(kmock.Server):
    """kmock's server without its aiohttp client and its process-wide DNS interceptor (which
    must be exited in LIFO order and so does not suit several emulators in one process)."""

    async def __aenter__(self) -> _Server:
        server = aiohttp.test_utils.RawTestServer(self.handler, host=self._host, port=self._port)
        await server.start_server()
        self._managed_server = server
        self.handler.servers.append(self)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self.handler.servers.remove(self)
        assert self._managed_server is not None
        await self._managed_server.close()
        self._managed_server = None


class KubeEmulator:
    """The emulator served on ``127.0.0.1`` from a background thread, with a synchronous
    harness API for tests and the demo's simulated kubelet and scheduler.

    Kinds are named by kind (``"Pod"``), plural (``"pods"``) or ``plural.group``. Objects
    returned are copies; mutate them and :meth:`apply` to write back.
    """

    def __init__(
        self, *, host: str = "127.0.0.1", port: int = 0, token: str | Callable[[str | None], bool] | None = None, clock: Callable[[], datetime] | None = None
    ) -> None:
        options: dict[str, Any] = {"token": token}
        if clock is not None:
            options["clock"] = clock
        self.handler = KubernetesApiEmulator(**options)
        self._host, self._port = host, port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._bound_port: int | None = None

    # ------------------------------------------------ lifecycle

    def start(self) -> KubeEmulator:
        if self._thread is not None:
            return self
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve(started))
            except BaseException as error:  # noqa: BLE001 - surfaced through `started` when startup fails
                if not started.done():
                    started.set_exception(error)
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="kube-emulator", daemon=True)
        self._thread.start()
        started.result(timeout=30)
        return self

    async def _serve(self, started: concurrent.futures.Future[None]) -> None:
        self._stop = asyncio.Event()
        async with self.handler, _Server(self.handler, host=self._host, port=self._port or None) as server:
            self._bound_port = server.port
            started.set_result(None)
            await self._stop.wait()

    def close(self) -> None:
        """Stop serving and join the thread (idempotent)."""
        if self._thread is None or self._loop is None:
            return
        if self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        self._thread = None

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def url(self) -> str:
        if self._bound_port is None or self._thread is None:
            raise RuntimeError("the emulator is not running; call start()")
        return f"http://{self._host}:{self._bound_port}"

    def _call(self, operation: Callable[[], _T]) -> _T:
        if self._loop is None or self._thread is None:
            raise RuntimeError("the emulator is not running; call start()")
        future = asyncio.run_coroutine_threadsafe(self.handler.harness(operation), self._loop)
        return future.result(timeout=30)

    # ------------------------------------------------ harness API

    def apply(self, obj: Mapping[str, Any]) -> JsonDict:
        """Create ``obj`` or replace the stored one (identity kept, status as given); returns the stored copy."""
        return self._call(lambda: self.handler.apply_object(obj))

    def get(self, kind: str, name: str, namespace: str | None = None) -> JsonDict | None:
        rtype = self.handler.resource_type(kind)
        ns = (namespace or "default") if rtype.namespaced else None
        return self._call(lambda: copy.deepcopy(self.handler._current(rtype, ns, name)))

    def list(self, kind: str, namespace: str | None = None, *, label_selector: str | None = None, field_selector: str | None = None) -> list[JsonDict]:
        rtype = self.handler.resource_type(kind)
        result = self._call(
            lambda: self.handler.list_objects(
                rtype, namespace if rtype.namespaced else None, label_selector=label_selector, field_selector=field_selector, type_meta=True
            )
        )
        items: list[JsonDict] = result["items"]
        return items

    def patch(self, kind: str, name: str, patch: Mapping[str, Any], namespace: str | None = None) -> JsonDict:
        """JSON merge patch, status included (no subresource rules); KeyError when missing."""
        rtype = self.handler.resource_type(kind)
        ns = (namespace or "default") if rtype.namespaced else None

        def operation() -> JsonDict:
            current = self.handler._current(rtype, ns, name)
            if current is None:
                raise KeyError(f"{rtype.kind} {ns + '/' if ns else ''}{name} not found")
            return self.handler._update(rtype, current, json_merge_patch(current, patch), status_only=False, whole=True)

        return self._call(operation)

    def delete(self, kind: str, name: str, namespace: str | None = None, *, grace_period_seconds: int | None = None) -> bool:
        """Delete (finalizers honoured); False when it did not exist."""
        rtype = self.handler.resource_type(kind)
        ns = (namespace or "default") if rtype.namespaced else None

        def operation() -> bool:
            if self.handler._current(rtype, ns, name) is None:
                return False
            self.handler.delete(rtype, ns, name, {"gracePeriodSeconds": grace_period_seconds})
            return True

        return self._call(operation)

    @property
    def deletions(self) -> builtins.list[DeletionRecord]:
        return list(self.handler.deletions)

    @property
    def resource_version(self) -> int:
        return self.handler._revision

    def compact(self) -> int:
        """See :meth:`KubernetesApiEmulator.compact`."""
        return self._call(self.handler.compact)

    # ------------------------------------------------ faults and request log

    def fail_next(
        self,
        method: str | None,
        path: str,
        *,
        status: int = 500,
        times: int = 1,
        retry_after: float | None = None,
        message: str = "injected fault",
        query: str | None = None,
    ) -> Fault:
        """Answer the next ``times`` requests matching (``method``, ``path`` regex, ``query`` regex)
        with ``status``; ``method`` None matches any."""
        return self.handler.add_fault(
            Fault(_method(method), re.compile(path), times, status=status, retry_after=retry_after, message=message, query=_regex(query))
        )

    def delay_next(self, method: str | None, path: str, seconds: float, *, times: int = 1, query: str | None = None) -> Fault:
        """Delay the next ``times`` matching requests by ``seconds`` (then serve them normally)."""
        return self.handler.add_fault(Fault(_method(method), re.compile(path), times, delay=seconds, query=_regex(query)))

    def disconnect_next(self, method: str | None, path: str, *, times: int = 1, query: str | None = None) -> Fault:
        """Drop the connection of the next ``times`` matching requests without answering."""
        return self.handler.add_fault(Fault(_method(method), re.compile(path), times, disconnect=True, query=_regex(query)))

    def clear_faults(self) -> None:
        self.handler.clear_faults()

    def requests(self, method: str | None = None, path: str | None = None) -> builtins.list[kmock.Request]:
        """Recorded requests (kmock ``Request`` objects), optionally filtered by method and path regex."""
        wanted = _method(method)
        pattern = re.compile(path) if path is not None else None
        return [
            request
            for request in list(self.handler._requests)
            if (wanted is None or request.method.value.upper() == wanted) and (pattern is None or pattern.search(request.url.path))
        ]


def _method(method: str | None) -> str | None:
    return method.upper() if method else None


def _regex(pattern: str | None) -> re.Pattern[str] | None:
    return re.compile(pattern) if pattern is not None else None
