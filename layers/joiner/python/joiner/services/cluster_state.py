"""The cluster's pods and Nodes as Joiner keeps them between invocations (Karpenter's
``state.Cluster``, without a process that lives forever).

A warm Lambda container keeps one :class:`ClusterCache` on its runtime. The first read lists
pods and Nodes a page at a time and keeps only their compact, interned form; every later read
applies the changes the API server has ready after the version it last saw (a watch resumed
from that ``resourceVersion`` and closed as soon as the stream is idle), so a minute's read
costs what changed in that minute, not the cluster. It lists again from scratch when the
server no longer has that version (410), when RuntimeClasses change (pods' overhead), when a
change cannot be read, and at least every :data:`RESYNC_AFTER` (a full list proves the model
right). Memory holds the compact model plus one page.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from joiner.domain.interning import PodInterner
from joiner.domain.model import Node, Pod
from joiner.domain.resources import Resources
from joiner.domain.snapshot import PodSpecMemo
from joiner.observability import logger
from joiner.ports import JsonDict, KubernetesError, KubernetesPort, WatchEvent, WatchExpired

__all__ = ["RESYNC_AFTER_SECONDS", "PodEntry", "ClusterCache", "ClusterRead", "collector_paused", "object_reference", "marked_unschedulable"]

#: A full list at least this often (seconds of the container's monotonic clock).
RESYNC_AFTER_SECONDS = 30 * 60.0

#: Parses one raw object; None when it is invalid (the parser reports it). A pod's parser is
#: given the cache's :class:`~joiner.domain.snapshot.PodSpecMemo` to pass to ``parse_pod``.
PodParser = Callable[[JsonDict, PodSpecMemo], Pod | None]
NodeParser = Callable[[JsonDict], Node | None]


@dataclass(frozen=True, slots=True)
class PodEntry:
    """A pod as kept: parsed, with what events and the scanner need of its raw form."""

    pod: Pod
    #: the pod's ``metadata.resourceVersion`` when it was parsed
    resource_version: str = ""
    #: a reference to write events on; unbound pods only (the only ones a round writes to)
    reference: JsonDict | None = None
    #: kube-scheduler marked it unschedulable (``PodScheduled=False``, ``Unschedulable``)
    marked_unschedulable: bool = False


@dataclass(frozen=True)
class ClusterRead:
    """What one read found: pods in key order, Nodes in name order, and how it was read."""

    pods: tuple[PodEntry, ...]
    nodes: tuple[Node, ...]
    #: resource -> "list" (listed again) or "changes" (caught up from a resumed watch)
    how: Mapping[str, str]


@dataclass
class ClusterCache:
    """Pods and Nodes of one warm container (see the module docstring). Thread-safe."""

    clock: Callable[[], float] = time.monotonic
    resync_after: float = RESYNC_AFTER_SECONDS
    _pods: dict[str, PodEntry] = field(default_factory=dict)
    _nodes: dict[str, Node] = field(default_factory=dict)
    _versions: dict[str, str] = field(default_factory=dict)
    _listed_at: dict[str, float] = field(default_factory=dict)
    _runtime_classes: dict[str, Resources] | None = None
    _interner: PodInterner = field(default_factory=PodInterner)
    _memo: PodSpecMemo = field(default_factory=PodSpecMemo)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def read(self, kube: KubernetesPort, runtime_classes: Mapping[str, Resources], parse_pod: PodParser, parse_node: NodeParser) -> ClusterRead:
        """Bring pods and Nodes up to date and return them. Raises :class:`KubernetesError`
        when the cluster cannot be listed (the model is then listed again next time)."""
        with self._lock:
            if self._runtime_classes != dict(runtime_classes):
                self._forget("pods")
                self._runtime_classes = dict(runtime_classes)
            how = {
                "pods": self._refresh("pods", kube, lambda obj: self._pod_entry(obj, parse_pod)),
                "nodes": self._refresh("nodes", kube, parse_node),
            }
            pods = tuple(self._pods[key] for key in sorted(self._pods))
            nodes = tuple(self._nodes[name] for name in sorted(self._nodes))
        return ClusterRead(pods, nodes, how)

    def _forget(self, resource: str) -> None:
        self._versions.pop(resource, None)
        self._listed_at.pop(resource, None)
        if resource == "pods":
            self._pods = {}
            self._interner = PodInterner()
        else:
            self._nodes = {}

    def _store(self, resource: str) -> dict[str, object]:
        return self._pods if resource == "pods" else self._nodes  # type: ignore[return-value]

    def _refresh(self, resource: str, kube: KubernetesPort, parse: Callable[[JsonDict], object | None]) -> str:
        version = self._versions.get(resource)
        fresh = version and self.clock() - self._listed_at.get(resource, float("-inf")) < self.resync_after
        if fresh:
            assert version is not None
            try:
                self._apply(resource, kube.changes_since(resource, version), parse)
                return "changes"
            except WatchExpired:
                logger.info("cluster state: resume refused, listing again", extra={"resource": resource, "version": version})
            except KubernetesError as error:
                logger.warning("cluster state: changes could not be read, listing again", extra={"resource": resource, "error": str(error)})
        with collector_paused():
            self._list(resource, kube, parse)
        return "list"

    def _list(self, resource: str, kube: KubernetesPort, parse: Callable[[JsonDict], object | None]) -> None:
        """List ``resource`` again. A pod kept at the same ``resourceVersion`` is reused as it
        is (a resync parses only what changed since)."""
        previous = self._pods if resource == "pods" else {}
        interner = self._interner
        self._forget(resource)
        if resource == "pods":
            self._interner = interner  # the reused pods share its values
        store: dict[str, object] = {}
        version = ""
        try:
            for items, page_version in kube.list_pages(resource):
                version = version or page_version
                for obj in items:
                    kept = previous.get(_key(obj))
                    meta = obj.get("metadata") or {}
                    same = kept is not None and kept.resource_version and kept.resource_version == meta.get("resourceVersion") and kept.pod.uid == (meta.get("uid") or "")
                    parsed = kept if same else parse(obj)
                    if parsed is not None:
                        store[_key(obj)] = parsed
        except BaseException:
            self._forget(resource)
            raise
        if resource == "pods":
            self._pods = store  # type: ignore[assignment]
        else:
            self._nodes = store  # type: ignore[assignment]
        if version:
            self._versions[resource] = version
            self._listed_at[resource] = self.clock()

    def _apply(self, resource: str, events: Iterator[WatchEvent], parse: Callable[[JsonDict], object | None]) -> None:
        """Apply ``events`` in order; the version moves with each one, so a stream that
        breaks half-way leaves a consistent prefix to resume from."""
        store = self._store(resource)
        for event in events:
            if event.type != "BOOKMARK":
                key = _key(event.object)
                parsed = None if event.type == "DELETED" else parse(event.object)
                if parsed is None:
                    store.pop(key, None)  # deleted, or now invalid (its parser reported it)
                else:
                    store[key] = parsed
            if event.resource_version:
                self._versions[resource] = event.resource_version

    def _pod_entry(self, obj: JsonDict, parse_pod: PodParser) -> PodEntry | None:
        pod = parse_pod(obj, self._memo)
        if pod is None:
            return None
        pod = self._interner.pod(pod)
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if pod.node_name:
            return PodEntry(pod, version)
        return PodEntry(pod, version, object_reference(obj), marked_unschedulable(obj))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off for a bulk read: decoding a page allocates hundreds of
    thousands of acyclic objects, and each allocation burst would otherwise start collections
    that walk the whole model kept so far (a listing's time would grow with its square).
    Reference counting still frees every page once read."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _key(obj: JsonDict) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def object_reference(obj: JsonDict) -> JsonDict:
    """What an Event needs of ``obj`` (kind, name, namespace, uid, resourceVersion): kept
    instead of the whole object, which may be many kilobytes."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion") if meta.get(key)},
    }


def marked_unschedulable(obj: JsonDict | None) -> bool:
    """kube-scheduler has tried and failed (``PodScheduled=False``, reason ``Unschedulable``):
    only such pods are provisioned for, so Joiner never races the scheduler for pods that
    fit existing nodes."""
    if not obj:
        return False
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    return False
