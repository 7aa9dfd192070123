"""A stand-in Kubernetes API server for ``bench.scale``: the cluster of :mod:`bench.scale_world`
over HTTP on 127.0.0.1, in its own process, counting what clients read.

``python -m bench.kube_standin --nodes N [--seed S] [--history H] [--token T]`` prints one JSON
line ``{"url": ...}`` and serves until stdin closes or it is terminated; :class:`StandIn` starts
and stops it from Python.

What it serves (JSON only):

* ``GET`` lists of pods, nodes, events, DaemonSets, PodDisruptionBudgets, PVCs, PVs,
  StorageClasses, CSINodes, RuntimeClasses and Joiner's NodePools, NodeClasses and NodeClaims,
  cluster-wide or per namespace, with ``limit``/``continue`` pagination (a continuation whose
  snapshot is older than the event history: ``410 Expired``), ``fieldSelector``
  (``metadata.name``, ``metadata.namespace``, ``spec.nodeName``, ``status.phase``; ``=``, ``==``,
  ``!=``; pods by node and unbound pods are indexed), ``labelSelector`` (``=``, ``==``, ``!=``,
  ``key``, ``!key``), ``resourceVersion`` (``0``: served "from the watch cache", counted apart;
  with ``resourceVersionMatch=Exact`` an RV older than the history is ``410``); ``limit`` is
  honoured in every case, as API servers that paginate from the watch cache do;
* ``GET`` single objects; ``watch=1`` from a ``resourceVersion``: the events after it from a
  bounded history (``--history``), then new ones until ``timeoutSeconds``; an RV older than the
  history gets an ``ERROR`` event with a ``410`` Status, as kube-apiserver sends it; with a field
  or label selector an object leaving the selection arrives as ``DELETED``; ``RV=0`` starts with
  the current objects as ``ADDED``; ``allowWatchBookmarks``: a ``BOOKMARK`` every
  ``--bookmark-seconds`` and when the watch ends;
* ``PATCH`` (merge, strategic merge treated as merge, JSON patch; ``/status`` changes the status
  only, the main resource everything else; a ``metadata.resourceVersion`` in the patch must
  match: ``409``), ``POST`` (create: ``409`` when it exists; ``pods/<name>/eviction`` deletes the
  pod), ``DELETE`` (``preconditions.uid``: ``409`` on another uid).

Objects are generated from templates until first changed (:mod:`bench.scale_world`): a
150,000-pod cluster costs the server the changed objects and a few arrays.

Admin endpoints (no token): ``GET /_stats`` (counters: requests by verb and resource, bytes sent,
full unfiltered pod lists, watch-cache reads, watch events, 410s), ``POST /_reset`` (zero them),
``POST /_mutate`` ``{"ops": [{"op": "add_pending"|"add_running"|"delete_pods"|"bind_pending"|
"touch_pods"|"touch_nodes", "count": n} | {"op": "compact"} | {"op": "reset_world"} | {"op": "drop_nodeclaims"}]}``, ``GET
/_info``.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import copy
import json
import random
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from bench.scale_world import CSINODE_TEMPLATE, NODE_TEMPLATE, POD_TEMPLATES, WorldSpec

__all__ = ["StandIn", "World", "serve"]

#: Events kept for watches and continuations (older ones are compacted away).
DEFAULT_HISTORY = 20_000
MAX_WATCH_SECONDS = 3600

# (path prefix, group/version, plural, kind, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "pods": ("v1", "Pod", True),
    "nodes": ("v1", "Node", False),
    "events": ("v1", "Event", True),
    "persistentvolumeclaims": ("v1", "PersistentVolumeClaim", True),
    "persistentvolumes": ("v1", "PersistentVolume", False),
    "daemonsets": ("apps/v1", "DaemonSet", True),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget", True),
    "storageclasses": ("storage.k8s.io/v1", "StorageClass", False),
    "csinodes": ("storage.k8s.io/v1", "CSINode", False),
    "runtimeclasses": ("node.k8s.io/v1", "RuntimeClass", False),
    "nodepools": ("joiner.dev/v1", "NodePool", False),
    "nodeclasses": ("joiner.dev/v1", "NodeClass", False),
    "nodeclaims": ("joiner.dev/v1", "NodeClaim", False),
}
FIELD_PATHS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code}


@dataclass(frozen=True, slots=True)
class Fields:
    """What selectors look at."""

    namespace: str
    name: str
    node: str
    phase: str
    labels: dict[str, str]

    def get(self, path: str) -> str:
        return {"metadata.name": self.name, "metadata.namespace": self.namespace, "spec.nodeName": self.node, "status.phase": self.phase}[path]


def _fields_of(obj: dict[str, Any]) -> Fields:
    meta = obj.get("metadata") or {}
    return Fields(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str((obj.get("spec") or {}).get("nodeName") or ""),
        str((obj.get("status") or {}).get("phase") or ""),
        dict(meta.get("labels") or {}),
    )


@dataclass
class Selector:
    fields: list[tuple[str, bool, str]] = field(default_factory=list)  # (path, equal?, value)
    labels: list[tuple[str, str, str]] = field(default_factory=list)  # (key, "=", "!=", "exists", "!exists", value)

    @classmethod
    def parse(cls, field_selector: str, label_selector: str, resource: str) -> Selector:
        selector = cls()
        for term in filter(None, (t.strip() for t in field_selector.split(","))):
            equal = "!=" not in term
            path, _, value = term.partition("!=" if not equal else "==" if "==" in term else "=")
            if path not in FIELD_PATHS or (resource != "pods" and path not in ("metadata.name", "metadata.namespace")):
                raise ApiError(400, "BadRequest", f"field label not supported: {path}")
            selector.fields.append((path, equal, value))
        for term in filter(None, (t.strip() for t in label_selector.split(","))):
            if "!=" in term:
                key, _, value = term.partition("!=")
                selector.labels.append((key.strip(), "!=", value.strip()))
            elif "=" in term:
                key, _, value = term.partition("==" if "==" in term else "=")
                selector.labels.append((key.strip(), "=", value.strip()))
            elif term.startswith("!"):
                selector.labels.append((term[1:], "!exists", ""))
            else:
                selector.labels.append((term, "exists", ""))
        return selector

    def __bool__(self) -> bool:
        return bool(self.fields or self.labels)

    def matches(self, fields: Fields) -> bool:
        for path, equal, value in self.fields:
            if (fields.get(path) == value) != equal:
                return False
        for key, op, value in self.labels:
            have = fields.labels.get(key)
            if (op == "=" and have != value) or (op == "!=" and have == value) or (op == "exists" and have is None) or (op == "!exists" and have is not None):
                return False
        return True


class Store:
    """One resource's objects: indices ``< base`` are generated (``fill``/``base_fields``) until
    changed; changed and created ones are kept as (dict, JSON bytes); ``None`` is a deletion."""

    def __init__(
        self,
        resource: str,
        base: int = 0,
        fill: Callable[[int, int], str] | None = None,
        base_fields: Callable[[int, bool], Fields] | None = None,
        base_rv: int = 0,
    ) -> None:
        self.resource = resource
        self.api_version, self.kind, self.namespaced = RESOURCES[resource]
        self.base = base
        self.count = base
        self.fill = fill
        self.base_fields = base_fields
        self.base_rv = base_rv
        self.changed: dict[int, tuple[dict[str, Any], bytes, Fields] | None] = {}
        self.names: dict[tuple[str, str], int] = {}
        #: pods only: changed pods by their node ("" unbound)
        self.changed_on_node: dict[str, set[int]] = {}
        self.base_on_node: Callable[[str], range | None] | None = None
        self._sorted_keys: list[tuple[str, str]] | None = None

    def sorted_keys(self) -> list[tuple[str, str]]:
        """Every (namespace, name) in key order: a real API server lists in that order (etcd's
        and its watch cache's), so the pods of one ReplicaSet arrive together."""
        if self._sorted_keys is None:
            self._sorted_keys = sorted(self.names)
        return self._sorted_keys

    def register_base_names(self, name_of: Callable[[int], tuple[str, str]]) -> None:
        for index in range(self.base):
            self.names[name_of(index)] = index

    def exists(self, index: int) -> bool:
        if index in self.changed:
            return self.changed[index] is not None
        return index < self.base

    def fields(self, index: int, labels: bool = True) -> Fields | None:
        if index in self.changed:
            entry = self.changed[index]
            return None if entry is None else entry[2]
        assert self.base_fields is not None
        return self.base_fields(index, labels)

    def body(self, index: int) -> bytes:
        entry = self.changed.get(index)
        if entry is not None:
            return entry[1]
        assert self.fill is not None
        return self.fill(index, self.base_rv + index).encode()

    def obj(self, index: int) -> dict[str, Any]:
        entry = self.changed.get(index)
        if entry is not None:
            return copy.deepcopy(entry[0])
        loaded: dict[str, Any] = json.loads(self.body(index))
        return loaded

    def rv(self, index: int) -> int:
        entry = self.changed.get(index)
        if entry is not None:
            return int(entry[0]["metadata"]["resourceVersion"])
        return self.base_rv + index

    def set(self, index: int, obj: dict[str, Any] | None) -> None:
        old = self.fields(index) if self.exists(index) else None
        if obj is None:
            self.changed[index] = None
            if old is not None:
                self.names.pop((old.namespace, old.name), None)
                self._sorted_keys = None
        else:
            fields = _fields_of(obj)
            self.changed[index] = (obj, json.dumps(obj, separators=(",", ":")).encode(), fields)
            if (fields.namespace, fields.name) not in self.names:
                self._sorted_keys = None
            self.names[(fields.namespace, fields.name)] = index
        if self.resource == "pods":
            if old is not None:
                self.changed_on_node.get(old.node, set()).discard(index)
            if obj is not None:
                self.changed_on_node.setdefault(_fields_of(obj).node, set()).add(index)

    def candidates(self, selector: Selector) -> list[int] | None:
        """Indices that may match (sorted), when an index answers the selector; None: all."""
        for path, equal, value in selector.fields:
            if path == "spec.nodeName" and equal and self.base_on_node is not None:
                base = self.base_on_node(value) or range(0)
                return sorted({i for i in base if i not in self.changed} | self.changed_on_node.get(value, set()))
            if path == "metadata.name" and equal:
                return sorted(i for (ns, name), i in self.names.items() if name == value)
        return None


class World:
    """The cluster and its history; one lock for all."""

    def __init__(self, spec: WorldSpec, history: int = DEFAULT_HISTORY, start_rv: int = 0, seed: int = 1) -> None:
        self.spec = spec
        self.history_limit = history
        self.lock = threading.Condition(threading.RLock())
        self.rng = random.Random(seed)
        self.stores: dict[str, Store] = {}
        rv = start_rv + 1
        pods = Store("pods", spec.pods, lambda p, r: POD_TEMPLATES[spec.pod_kind(p)].fill(spec.pod_values(p, r)), self._pod_fields, rv)
        pods.register_base_names(spec.pod_name)
        pods.base_on_node = self._pods_on_node
        rv += spec.pods
        nodes = Store("nodes", spec.nodes, lambda i, r: NODE_TEMPLATE.fill(spec.node_values(i, r)), lambda i, _: Fields("", spec.node_name(i), "", "", {}), rv)
        nodes.register_base_names(lambda i: ("", spec.node_name(i)))
        rv += spec.nodes
        csinodes = Store(
            "csinodes", spec.nodes, lambda i, r: CSINODE_TEMPLATE.fill(spec.node_values(i, r)), lambda i, _: Fields("", spec.node_name(i), "", "", {}), rv
        )
        csinodes.register_base_names(lambda i: ("", spec.node_name(i)))
        rv += spec.nodes
        for store in (pods, nodes, csinodes):
            self.stores[store.resource] = store
        for resource in RESOURCES:
            self.stores.setdefault(resource, Store(resource))
        self.rv = rv
        small = [
            ("nodepools", spec.node_pool()),
            ("nodeclasses", spec.node_class()),
            *(("daemonsets", d) for d in spec.daemonsets()),
            *(("poddisruptionbudgets", p) for p in spec.pdbs()),
            *(("storageclasses", s) for s in spec.storage_classes()),
            *(("nodeclaims", c) for c in spec.node_claims()),
        ]
        for resource, obj in small:
            self.rv += 1
            obj["metadata"].update(resourceVersion=str(self.rv), creationTimestamp=obj["metadata"].get("creationTimestamp") or "2025-01-04T12:00:00Z")
            obj["metadata"].setdefault("uid", f"00000000-0000-4000-8000-{self.rv:012x}")
            store = self.stores[resource]
            store.set(store.count, obj)
            store.count += 1
        #: every event is (rv, resource, type, old fields, new fields, object JSON)
        self.history: list[tuple[int, str, str, Fields | None, Fields | None, bytes]] = []
        self.history_rvs: list[int] = []
        #: watches and continuations from before this RV cannot be served
        self.compacted_rv = self.rv
        self.uids = 0

    def _pod_fields(self, p: int, labels: bool) -> Fields:
        spec = self.spec
        namespace, name = spec.pod_name(p)
        node = spec.pod_node(p)
        return Fields(
            namespace, name, "" if node is None else spec.node_name(node), "Pending" if node is None else "Running", spec.pod_labels(p) if labels else {}
        )

    def _pods_on_node(self, node_name: str) -> range | None:
        spec = self.spec
        if node_name == "":
            return range(spec.bound, spec.pods)
        index = spec.node_index(node_name)
        return None if index is None else range(index, spec.bound, spec.nodes)

    # -- changes (callers hold the lock)

    def record(self, store: Store, index: int, obj: dict[str, Any] | None, kind: str) -> None:
        """Store ``obj`` at ``index`` (None: delete) with a new RV, and append the event."""
        old = store.fields(index) if store.exists(index) else None
        self.rv += 1
        if obj is None:
            gone = store.obj(index)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            body = json.dumps(gone, separators=(",", ":")).encode()
            store.set(index, None)
            new = None
        else:
            obj.setdefault("apiVersion", store.api_version)
            obj.setdefault("kind", store.kind)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            store.set(index, obj)
            body = store.body(index)
            new = store.fields(index)
        self.history.append((self.rv, store.resource, kind, old, new, body))
        self.history_rvs.append(self.rv)
        if len(self.history) > self.history_limit:
            self.compact(len(self.history) - self.history_limit)
        self.lock.notify_all()

    def compact(self, drop: int | None = None) -> None:
        drop = len(self.history) if drop is None else drop
        if drop:
            self.compacted_rv = self.history_rvs[drop - 1]
            del self.history[:drop]
            del self.history_rvs[:drop]
        else:
            self.compacted_rv = self.rv

    def create(self, store: Store, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["name"] = f"{meta['generateName']}{self.rng.randrange(36**5):05x}"
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        key = (str(meta.get("namespace") or ""), str(name))
        if key in store.names:
            raise ApiError(409, "AlreadyExists", f'{store.resource} "{name}" already exists')
        self.uids += 1
        meta.setdefault("uid", f"10000000-0000-4000-8000-{self.uids:012x}")
        meta.setdefault("creationTimestamp", "2025-01-06T12:00:00Z")
        index = store.count
        store.count += 1
        self.record(store, index, obj, "ADDED")
        return obj


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _json_patch(obj: Any, ops: list[dict[str, Any]]) -> Any:
    obj = copy.deepcopy(obj)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op.get("path", "")).split("/")[1:]]
        parent = obj
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1] if parts else ""
        kind = op.get("op")
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, "Invalid", f"test failed at {op.get('path')}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op.get("value"))
                elif kind == "add":
                    parent.insert(int(last), op.get("value"))
                else:
                    parent[int(last)] = op.get("value")
            else:
                parent[last] = op.get("value")
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                parent.pop(last, None)
        else:
            raise ApiError(422, "Invalid", f"unsupported json patch op {kind!r}")
    return obj


def _peer_closed(connection: socket.socket) -> bool:
    """Whether the client closed its end (the socket reads as at end of file): kernel buffers
    would otherwise take a departed watcher's events for a while, counted as sent."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def request_shape(verb: str, resource: str, namespace: str | None, name: str | None, subresource: str | None, query: dict[str, str]) -> str:
    """What kind of request this is, for the traffic breakdown: verb, path kind, selectors and
    whether it names a resourceVersion (paging and timeouts left out)."""
    path = resource + ("/" + subresource if subresource else "") + (" (namespaced)" if namespace else "") + (" (named)" if name else "")
    details = [f"{key}={query[key]}" for key in ("fieldSelector", "labelSelector") if query.get(key)]
    if "resourceVersion" in query:
        details.append("rv=0" if query["resourceVersion"] == "0" else "rv")
    return " ".join([verb, path, *details])


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    counters: dict[str, Any] = field(default_factory=dict)
    current: threading.local = field(default_factory=threading.local)

    def reset(self) -> None:
        with self.lock:
            self.counters = {
                "requests": 0,
                "bytes_sent": 0,
                "by_verb": {},
                "by_resource": {},
                "full_pod_lists": 0,
                "full_pod_list_pages": 0,
                "cache_reads": 0,
                "watches": 0,
                "watch_events": 0,
                "watch_bytes": 0,
                "gone_410": 0,
                "list_items": 0,
                "by_shape": {},
            }

    def request(self, verb: str, resource: str, shape: str = "") -> None:
        """Count one request; ``shape`` (verb, path kind and the query's selectors) also gets
        the bytes this thread sends until its next request."""
        self.current.shape = shape or f"{verb} {resource}"
        with self.lock:
            c = self.counters
            c["by_shape"].setdefault(self.current.shape, {"requests": 0, "bytes": 0})["requests"] += 1
            c["requests"] += 1
            c["by_verb"][verb] = c["by_verb"].get(verb, 0) + 1
            entry = c["by_resource"].setdefault(resource, {"requests": 0, "bytes": 0})
            entry["requests"] += 1

    def sent(self, resource: str, count: int, **extra: int) -> None:
        with self.lock:
            c = self.counters
            c["bytes_sent"] += count
            c["by_resource"].setdefault(resource, {"requests": 0, "bytes": 0})["bytes"] += count
            shape = getattr(self.current, "shape", None)
            if shape is not None:
                c["by_shape"].setdefault(shape, {"requests": 0, "bytes": 0})["bytes"] += count
            for key, value in extra.items():
                c[key] = c.get(key, 0) + value

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.counters)


class Api:
    """The request handling, independent of HTTP plumbing."""

    def __init__(self, world: World, token: str | None, bookmark_seconds: float) -> None:
        self.world = world
        self.token = token
        self.bookmark_seconds = bookmark_seconds
        self.stats = Stats()
        self.stats.reset()

    @staticmethod
    def route(path: str) -> tuple[str, str | None, str | None, str | None]:
        """(resource, namespace, name, subresource) of an API path; ApiError 404 otherwise."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            rest = parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            rest = parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in RESOURCES or len(rest) > 3:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        resource = rest[0]
        group_version = "v1" if parts[0] == "api" else f"{parts[1]}/{parts[2]}"
        if RESOURCES[resource][0] != group_version:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return resource, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None

    def lookup(self, store: Store, namespace: str | None, name: str) -> int:
        index = store.names.get((namespace or "", name))
        if index is None or not store.exists(index):
            raise ApiError(404, "NotFound", f'{store.resource} "{name}" not found')
        return index

    # -- reads

    def list_page(self, resource: str, namespace: str | None, query: dict[str, str]) -> bytes:
        world, store = self.world, self.world.stores[resource]
        selector = Selector.parse(query.get("fieldSelector", ""), query.get("labelSelector", ""), resource)
        if namespace is not None:
            selector.fields.append(("metadata.namespace", True, namespace))
        limit = int(query.get("limit") or 0)
        token = query.get("continue") or ""
        requested = query.get("resourceVersion")
        with world.lock:
            start, list_rv, after = 0, world.rv, None
            if token:
                try:
                    decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                    start, list_rv = int(decoded.get("start", 0)), int(decoded["rv"])
                    after = tuple(decoded["after"]) if "after" in decoded else None
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "BadRequest", "invalid continue token") from None
                if list_rv < world.compacted_rv:
                    self.stats.sent(resource, 0, gone_410=1)
                    raise ApiError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. "
                        "You can start a new list without the continue parameter.",
                    )
            elif requested and requested != "0" and query.get("resourceVersionMatch") == "Exact" and int(requested) < world.compacted_rv:
                self.stats.sent(resource, 0, gone_410=1)
                raise ApiError(410, "Expired", f"too old resource version: {requested} ({world.compacted_rv})")
            candidates = store.candidates(selector)
            keys: list[tuple[str, str]] = []
            if candidates is not None:  # a selector an index answers (small): index order
                indices: Iterator[int] = iter(candidates[bisect.bisect_left(candidates, start) :])
            else:  # key order, resumed after the last key sent
                keys = store.sorted_keys()
                first = bisect.bisect_right(keys, after) if after is not None else 0
                indices = (store.names[key] for key in keys[first:])
            items: list[bytes] = []
            next_token: dict[str, Any] | None = None
            last_key: tuple[str, str] | None = None
            want_labels = bool(selector.labels)
            for index in indices:
                fields = store.fields(index, want_labels) if store.exists(index) else None
                if fields is None or (selector and not selector.matches(fields)):
                    continue
                if limit and len(items) >= limit:
                    next_token = {"rv": list_rv, "start": index} if candidates is not None else {"rv": list_rv, "after": list(last_key or ("", ""))}
                    break
                items.append(store.body(index))
                last_key = (fields.namespace, fields.name)
            meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
            if next_token is not None:
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(next_token).encode()).decode()
        head = json.dumps({"kind": f"{store.kind}List", "apiVersion": store.api_version, "metadata": meta}, separators=(",", ":"))
        body = head[:-1].encode() + b',"items":[' + b",".join(items) + b"]}"
        extra = {"list_items": len(items)}
        if requested == "0":
            extra["cache_reads"] = 1
        if resource == "pods" and namespace is None and not query.get("fieldSelector") and not query.get("labelSelector"):
            extra["full_pod_list_pages"] = 1
            if not token:
                extra["full_pod_lists"] = 1
        self.stats.sent(resource, len(body), **extra)
        return body

    def get(self, resource: str, namespace: str | None, name: str) -> bytes:
        store = self.world.stores[resource]
        with self.world.lock:
            body = store.body(self.lookup(store, namespace, name))
        self.stats.sent(resource, len(body))
        return body

    def watch(self, resource: str, namespace: str | None, query: dict[str, str], write: Callable[[bytes], None]) -> None:
        world, store = self.world, self.world.stores[resource]
        selector = Selector.parse(query.get("fieldSelector", ""), query.get("labelSelector", ""), resource)
        if namespace is not None:
            selector.fields.append(("metadata.namespace", True, namespace))
        timeout = min(float(query.get("timeoutSeconds") or MAX_WATCH_SECONDS), MAX_WATCH_SECONDS)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        requested = query.get("resourceVersion") or "0"
        ends = time.monotonic() + timeout
        sent = events = 0

        def emit(kind: str, body: bytes) -> None:
            nonlocal sent, events
            line = b'{"type":"' + kind.encode() + b'","object":' + body + b"}\n"
            write(line)
            sent += len(line)
            events += 1

        def bookmark(rv: int) -> None:
            emit(
                "BOOKMARK",
                json.dumps({"kind": store.kind, "apiVersion": store.api_version, "metadata": {"resourceVersion": str(rv)}}, separators=(",", ":")).encode(),
            )

        try:
            with world.lock:
                if requested == "0":
                    position = world.rv
                    initial = [
                        store.body(i)
                        for i in range(store.count)
                        if store.exists(i) and (not selector or selector.matches(store.fields(i) or Fields("", "", "", "", {})))
                    ]
                else:
                    position = int(requested)
                    initial = []
                    if position < world.compacted_rv:
                        gone = {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "metadata": {},
                            "status": "Failure",
                            "reason": "Expired",
                            "code": 410,
                            "message": f"too old resource version: {position} ({world.compacted_rv})",
                        }
                        self.stats.sent(resource, 0, gone_410=1)
                        emit("ERROR", json.dumps(gone, separators=(",", ":")).encode())
                        return
            for body in initial:
                emit("ADDED", body)
            last_bookmark = time.monotonic()
            while True:
                with world.lock:
                    start = bisect.bisect_right(world.history_rvs, position)
                    if position < world.compacted_rv:
                        return  # fell behind the history while streaming: the client relists after the stream ends
                    pending = world.history[start:]
                    if not pending:
                        left = ends - time.monotonic()
                        if left <= 0:
                            break
                        world.lock.wait(min(left, self.bookmark_seconds) if bookmarks else left)
                        pending = world.history[bisect.bisect_right(world.history_rvs, position) :]
                    current = world.rv
                for rv, kind_resource, kind, old, new, body in pending:
                    position = rv
                    if kind_resource != resource:
                        continue
                    was = old is not None and (not selector or selector.matches(old))
                    now = new is not None and (not selector or selector.matches(new))
                    if was and now:
                        emit("MODIFIED" if kind != "DELETED" else "DELETED", body)
                    elif now:
                        emit("ADDED", body)
                    elif was:
                        emit("DELETED", body)
                if not pending:
                    position = max(position, current)
                if bookmarks and time.monotonic() - last_bookmark >= self.bookmark_seconds:
                    bookmark(position)
                    last_bookmark = time.monotonic()
                if time.monotonic() >= ends:
                    break
            if bookmarks:
                bookmark(position)
        finally:
            self.stats.sent(resource, sent, watch_events=events, watch_bytes=sent)

    # -- writes

    def patch(self, resource: str, namespace: str | None, name: str, subresource: str | None, content_type: str, patch: Any) -> bytes:
        world, store = self.world, self.world.stores[resource]
        with world.lock:
            index = self.lookup(store, namespace, name)
            current = store.obj(index)
            if "json-patch" in content_type:
                if not isinstance(patch, list):
                    raise ApiError(400, "BadRequest", "a JSON patch is a list of operations")
                updated = _json_patch(current, patch)
            elif "merge-patch" in content_type:
                if not isinstance(patch, dict):
                    raise ApiError(400, "BadRequest", "a merge patch is an object")
                wanted = (patch.get("metadata") or {}).get("resourceVersion")
                if wanted is not None and str(wanted) != str(store.rv(index)):
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified')
                if subresource == "status":
                    patch = {"status": patch.get("status")} if "status" in patch else {}
                else:
                    patch = {k: v for k, v in patch.items() if k != "status" or resource in ("events",)}
                updated = _merge(current, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}")
            updated["metadata"]["name"], updated["metadata"]["uid"] = current["metadata"]["name"], current["metadata"].get("uid")
            world.record(store, index, updated, "MODIFIED")
            body = store.body(index)
        self.stats.sent(resource, len(body))
        return body

    def post(self, resource: str, namespace: str | None, name: str | None, subresource: str | None, obj: Any) -> tuple[int, bytes]:
        world, store = self.world, self.world.stores[resource]
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", "the body is not an object")
        with world.lock:
            if resource == "pods" and name and subresource == "eviction":
                index = self.lookup(store, namespace, name)
                world.record(store, index, None, "DELETED")
                body = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}).encode()
                self.stats.sent(resource, len(body))
                return 201, body
            if name:
                raise ApiError(405, "MethodNotAllowed", "POST to an object")
            if store.namespaced:
                obj.setdefault("metadata", {})["namespace"] = namespace or obj.get("metadata", {}).get("namespace") or "default"
            created = world.create(store, obj)
            body = store.body(store.names[(str(created["metadata"].get("namespace") or ""), created["metadata"]["name"])])
        self.stats.sent(resource, len(body))
        return 201, body

    def delete(self, resource: str, namespace: str | None, name: str, options: Any) -> bytes:
        world, store = self.world, self.world.stores[resource]
        with world.lock:
            index = self.lookup(store, namespace, name)
            uid = ((options or {}).get("preconditions") or {}).get("uid") if isinstance(options, dict) else None
            if uid and (store.obj(index).get("metadata") or {}).get("uid") != uid:
                raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, UID in object meta: another")
            world.record(store, index, None, "DELETED")
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {"name": name, "kind": resource}}).encode()
        self.stats.sent(resource, len(body))
        return body

    # -- the world's churn (admin)

    def mutate(self, ops: list[dict[str, Any]]) -> dict[str, Any]:
        world = self.world
        done: dict[str, int] = {}
        with world.lock:
            pods = world.stores["pods"]
            for op in ops:
                kind, count = op.get("op"), int(op.get("count") or 0)
                if kind == "reset_world":
                    fresh = World(world.spec, world.history_limit, start_rv=world.rv + 1)
                    world.stores, world.rv, world.history, world.history_rvs = fresh.stores, fresh.rv, [], []
                    world.compacted_rv = fresh.compacted_rv
                    world.lock.notify_all()
                elif kind == "compact":
                    world.compact()
                elif kind == "drop_nodeclaims":
                    claims = world.stores["nodeclaims"]
                    for index in range(claims.count):
                        if claims.exists(index):
                            world.record(claims, index, None, "DELETED")
                elif kind in ("add_pending", "add_running"):
                    for _ in range(count):
                        template = self.rng_pod(pods, pending=kind == "add_pending")
                        world.create(pods, template)
                elif kind in ("delete_pods", "touch_pods", "bind_pending"):
                    chosen = self.pick(pods, pending=kind == "bind_pending", count=count)
                    for index in chosen:
                        if kind == "delete_pods":
                            world.record(pods, index, None, "DELETED")
                            continue
                        obj = pods.obj(index)
                        if kind == "bind_pending":
                            node = world.rng.randrange(world.spec.nodes)
                            obj["spec"]["nodeName"] = world.spec.node_name(node)
                            obj["status"] = {
                                "phase": "Running",
                                "hostIP": world.spec.host_ip(node),
                                "startTime": "2025-01-06T12:00:00Z",
                                "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                            }
                        else:
                            statuses = obj["status"].get("containerStatuses") or [{}]
                            statuses[0]["restartCount"] = int(statuses[0].get("restartCount") or 0) + 1
                            obj["status"]["containerStatuses"] = statuses
                        world.record(pods, index, obj, "MODIFIED")
                elif kind == "touch_nodes":
                    nodes = world.stores["nodes"]
                    for index in world.rng.sample(range(nodes.count), min(count, nodes.count)):
                        if nodes.exists(index):
                            obj = nodes.obj(index)
                            obj["metadata"].setdefault("annotations", {})["bench/heartbeat"] = str(world.rv)
                            world.record(nodes, index, obj, "MODIFIED")
                else:
                    raise ApiError(400, "BadRequest", f"unknown mutation {kind!r}")
                done[str(kind)] = done.get(str(kind), 0) + (count or 1)
            return {"done": done, "resourceVersion": world.rv}

    def rng_pod(self, pods: Store, pending: bool) -> dict[str, Any]:
        spec, rng = self.world.spec, self.world.rng
        base = spec.bound + rng.randrange(spec.pending) if pending else len(spec.daemonsets()) * spec.nodes + rng.randrange(spec.bound - 3 * spec.nodes)
        obj = json.loads(POD_TEMPLATES[spec.pod_kind(base)].fill(spec.pod_values(base, 0)))
        meta = obj["metadata"]
        meta["name"] = f"{meta['generateName']}n{rng.randrange(36**6):06x}"
        meta.pop("uid", None)
        if not pending:
            node = rng.randrange(spec.nodes)
            obj["spec"]["nodeName"] = spec.node_name(node)
        return dict(obj)

    def pick(self, pods: Store, pending: bool, count: int) -> list[int]:
        rng, tries = self.world.rng, 0
        chosen: list[int] = []
        if pending:
            unbound = [i for i in pods.candidates(Selector(fields=[("spec.nodeName", True, "")])) or [] if pods.exists(i)]
            return rng.sample(unbound, min(count, len(unbound)))
        while len(chosen) < count and tries < count * 50:
            tries += 1
            index = rng.randrange(pods.count)
            fields = pods.fields(index, False) if pods.exists(index) else None
            if fields is None or index in chosen or (fields.node == "") != pending:
                continue
            if not pending and fields.namespace == "kube-system":
                continue
            chosen.append(index)
        return chosen

    def info(self) -> dict[str, Any]:
        spec = self.world.spec
        return {
            "nodes": spec.nodes,
            "pods": spec.pods,
            "pending": spec.pending,
            "resourceVersion": self.world.rv,
            "compactedResourceVersion": self.world.compacted_rv,
            "history": len(self.world.history),
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: Api
    _raw: bytes = b""

    def setup(self) -> None:
        super().setup()
        # As Go's net/http (kube-apiserver): no Nagle. Otherwise a body written after its
        # headers waits for the client's delayed ACK, 40 ms a request on Linux.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> Any:
        raw = self._raw
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(400, "BadRequest", "the body is not JSON") from None

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._raw = self.rfile.read(length) if length else b""
        split = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(split.query, keep_blank_values=True).items()}
        try:
            if split.path.startswith("/_"):
                self._admin(method, split.path)
                return
            if self.api.token and self.headers.get("Authorization") != f"Bearer {self.api.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            resource, namespace, name, subresource = Api.route(split.path)
            verb = {"GET": "get" if name else "list", "PATCH": "patch", "POST": "create", "DELETE": "delete"}[method]
            if verb == "list" and query.get("watch") in ("1", "true"):
                verb = "watch"
            if subresource == "eviction":
                verb = "evict"
            self.api.stats.request(verb, resource, request_shape(verb, resource, namespace, name, subresource, query))
            if verb == "watch":
                self.api.stats.sent(resource, 0, watches=1)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def write(chunk: bytes) -> None:
                    if _peer_closed(self.connection):  # a client that left: send (and count) nothing more
                        raise BrokenPipeError("the watch's client closed the connection")
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()

                try:
                    self.api.watch(resource, namespace, query, write)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                return
            if verb == "list":
                self._send(200, self.api.list_page(resource, namespace, query))
            elif verb == "get":
                assert name is not None
                self._send(200, self.api.get(resource, namespace, name))
            elif verb == "patch":
                assert name is not None
                self._send(200, self.api.patch(resource, namespace, name, subresource, self.headers.get("Content-Type") or "", self._body()))
            elif verb in ("create", "evict"):
                self._send(*self.api.post(resource, namespace, name, subresource, self._body()))
            elif verb == "delete":
                assert name is not None
                self._send(200, self.api.delete(resource, namespace, name, self._body()))
        except ApiError as error:
            body = json.dumps(error.status()).encode()
            self.api.stats.sent("errors", len(body))
            self._send(error.code, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # a stand-in bug: answer 500 and say what, the client's retries do the rest
            import traceback

            traceback.print_exc()
            self._send(500, json.dumps(ApiError(500, "InternalError", f"{type(error).__name__}: {error}").status()).encode())

    def _admin(self, method: str, path: str) -> None:
        if path == "/_stats" and method == "GET":
            answer: Any = self.api.stats.snapshot()
        elif path == "/_reset" and method == "POST":
            self.api.stats.reset()
            answer = {"reset": True}
        elif path == "/_mutate" and method == "POST":
            body = self._body() or {}
            answer = self.api.mutate(list(body.get("ops") or []))
        elif path == "/_info" and method == "GET":
            answer = self.api.info()
        else:
            raise ApiError(404, "NotFound", path)
        self._send(200, json.dumps(answer).encode())

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


def serve(
    nodes: int, *, seed: int = 1, history: int = DEFAULT_HISTORY, token: str | None = "bench", bookmark_seconds: float = 1.0, port: int = 0
) -> tuple[ThreadingHTTPServer, Api]:
    """A started server (its own threads) on 127.0.0.1."""
    api = Api(World(WorldSpec(nodes, seed), history, seed=seed), token, bookmark_seconds)
    handler = type("Handler", (_Handler,), {"api": api})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="kube-standin").start()
    return server, api


class StandIn:
    """The stand-in server in a child process: ``url``, ``stats()``, ``reset()``, ``mutate(ops)``."""

    def __init__(self, nodes: int, *, seed: int = 1, history: int = DEFAULT_HISTORY, token: str = "bench", bookmark_seconds: float = 1.0) -> None:
        self.token = token
        args = [
            sys.executable,
            "-m",
            "bench.kube_standin",
            "--nodes",
            str(nodes),
            "--seed",
            str(seed),
            "--history",
            str(history),
            "--token",
            token,
            "--bookmark-seconds",
            str(bookmark_seconds),
        ]
        self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(10)
            raise RuntimeError(f"the stand-in API server did not start (exit {self.process.returncode})")
        self.url: str = json.loads(line)["url"]

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("GET", "/_stats")
        return answer

    def info(self) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("GET", "/_info")
        return answer

    def reset(self) -> None:
        self._call("POST", "/_reset", {})

    def mutate(self, *ops: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("POST", "/_mutate", {"ops": list(ops)})
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kube_standin", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--history", type=int, default=DEFAULT_HISTORY)
    parser.add_argument("--token", default="bench")
    parser.add_argument("--bookmark-seconds", type=float, default=1.0)
    args = parser.parse_args(argv)
    server, _ = serve(args.nodes, seed=args.seed, history=args.history, token=args.token or None, bookmark_seconds=args.bookmark_seconds)
    host, port = server.server_address[:2]
    sys.stdout.write(json.dumps({"url": f"http://{host!s}:{port}"}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the parent closes stdin (or dies)
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
