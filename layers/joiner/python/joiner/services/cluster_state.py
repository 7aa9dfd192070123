"""The cluster's pods and Nodes as Joiner keeps them between invocations (Karpenter's
``state.Cluster``, without a process that lives forever).

A warm Lambda container keeps one :class:`ClusterCache` on its runtime. The first read lists
pods and Nodes (and, for the functions that keep them, Joiner's NodeClaim mirrors) a page at a time and keeps only their compact, interned form; every later read
applies the changes the API server has ready after the version it last saw (a watch resumed
from that ``resourceVersion`` and closed as soon as the stream is idle), so a minute's read
costs what changed in that minute, not the cluster. It lists again from scratch when the
server no longer has that version (410), when RuntimeClasses change (pods' overhead), when a
change cannot be read, and at least every :data:`RESYNC_AFTER` (a full list proves the model
right). Memory holds the compact model plus one page.

A cold container need not list either: :meth:`ClusterCache.export` gives the model as it
stands (or only what changed since the last complete export), and a cache given an
``image_loader`` restores the latest such image on its first read and catches up from its
versions (:mod:`joiner.services.cluster_image` persists them).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from joiner.domain.interning import PodInterner
from joiner.domain.model import Node, Pod
from joiner.domain.resources import Resources
from joiner.domain.snapshot import PodSpecMemo, SnapshotError, parse_node
from joiner.observability import logger
from joiner.ports import JsonDict, KubernetesError, KubernetesPort, WatchEvent, WatchExpired

__all__ = [
    "RESYNC_AFTER_SECONDS",
    "CacheImage",
    "StoreImage",
    "PodEntry",
    "ClusterCache",
    "ClusterRead",
    "collector_paused",
    "object_reference",
    "marked_unschedulable",
    "parse_cached_node",
]

#: A full list at least this often (seconds of the container's monotonic clock).
RESYNC_AFTER_SECONDS = 60 * 60.0
#: An image loaded at a container's first read restores the stores first read within this
#: many seconds (later ones are listed: the image's versions would be past the watch history).
IMAGE_USABLE_FOR = 120.0

#: The pods' interner is rebuilt from the live pods once it holds more than twice their
#: number plus this many values: a value of a pod that is gone (a Job's ``controller-uid``
#: label) is then dropped, so what is kept follows the live pods, not every pod ever seen.
INTERNER_SLACK = 1024

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


T = TypeVar("T")


@dataclass(frozen=True)
class StoreImage:
    """One resource's model as exported: every object (``complete``) or only those changed
    since the last complete export (a removed one maps to None), current at ``version``.
    ``load`` gives the objects (an image read back decodes them only when called, and raises
    ``ValueError`` when they cannot be)."""

    resource: str
    version: str
    #: the cache clock's reading when the resource was last listed in full
    listed_at: float
    complete: bool
    load: Callable[[], Mapping[str, object]]

    @classmethod
    def of(cls, resource: str, version: str, listed_at: float, complete: bool, items: Mapping[str, object]) -> StoreImage:
        return cls(resource, version, listed_at, complete, lambda: items)


def _merged(base: StoreImage, delta: StoreImage) -> Callable[[], Mapping[str, object]]:
    def load() -> Mapping[str, object]:
        items = dict(base.load())
        for key, item in delta.load().items():
            if item is None:
                items.pop(key, None)
            else:
                items[key] = item
        return items

    return load


@dataclass(frozen=True)
class CacheImage:
    """What :meth:`ClusterCache.export` gives and its ``image_loader`` returns: the
    stores that were ever read, the RuntimeClasses the pods were parsed with, and ``sequence``
    (the cache's change counter at export, for :meth:`ClusterCache.exported`)."""

    runtime_classes: Mapping[str, Resources]
    stores: tuple[StoreImage, ...]
    sequence: int = 0

    @property
    def complete(self) -> bool:
        return all(store.complete for store in self.stores)

    def store(self, resource: str) -> StoreImage | None:
        return next((store for store in self.stores if store.resource == resource), None)

    def with_changes(self, changes: CacheImage) -> CacheImage:
        """This complete image with ``changes`` (a later changes-only export) applied (the
        objects merged when loaded)."""
        stores = []
        for store in self.stores:
            delta = changes.store(store.resource)
            if delta is None or delta.complete:
                stores.append(delta or store)
            else:
                stores.append(StoreImage(store.resource, delta.version, delta.listed_at, True, _merged(store, delta)))
        stores.extend(store for store in changes.stores if self.store(store.resource) is None and store.complete)
        return CacheImage(changes.runtime_classes, tuple(stores), changes.sequence)


@dataclass
class _Store(Generic[T]):
    """One resource's kept objects by key, and the version they are current at."""

    resource: str
    items: dict[str, T] = field(default_factory=dict)
    #: the ``resourceVersion`` to resume from ("" until a list returned one)
    version: str = ""
    #: the container clock's reading when it was last listed in full
    listed_at: float = float("-inf")
    #: key -> the cache's change counter when it last changed, since the last complete export
    changed: dict[str, int] = field(default_factory=dict)
    #: the change counter when it was listed in full (or restored) after the last confirmed
    #: complete export, None if it was not: a changes-only export cannot say so
    relisted: int | None = 0
    #: restored from an image and not read since: even a read "as last read" catches up first
    restored: bool = False

    def clear(self) -> None:
        """Drop the objects and the version: the next read lists again."""
        self.items, self.version, self.listed_at = {}, "", float("-inf")
        self.changed, self.relisted = {}, 0

    def forget(self) -> None:
        """Drop everything kept for this resource."""
        self.clear()


@dataclass
class _PodStore(_Store[PodEntry]):
    """Pods, with the interner their values share and the memo their specs are parsed with."""

    interner: PodInterner = field(default_factory=PodInterner)
    memo: PodSpecMemo = field(default_factory=PodSpecMemo)

    def forget(self) -> None:
        self.clear()
        self.interner = PodInterner()
        self.memo = PodSpecMemo()

    def compact(self, slack: int = INTERNER_SLACK) -> bool:
        """Rebuild the interner from the kept pods when it holds values of pods long gone
        (see :data:`INTERNER_SLACK`); True when it did. Each kept pod stays equal to itself."""
        if len(self.interner) <= 2 * len(self.items) + slack:
            return False
        interner = PodInterner()
        self.items = {key: replace(entry, pod=interner.pod(entry.pod)) for key, entry in self.items.items()}
        self.interner = interner
        return True


def _never_reused(_kept: object, _obj: JsonDict) -> bool:
    return False


def _as_is(obj: JsonDict) -> JsonDict:
    return obj


def _same_pod(kept: PodEntry, obj: JsonDict) -> bool:
    """A pod kept at the object's ``resourceVersion`` (and uid) is reused as it is."""
    meta = obj.get("metadata") or {}
    return bool(kept.resource_version) and kept.resource_version == meta.get("resourceVersion") and kept.pod.uid == (meta.get("uid") or "")


def parse_cached_node(obj: JsonDict) -> Node | None:
    """The Node the cluster state keeps, as every pass parses it (None when it is invalid: the
    planning passes report those); the parser to give :meth:`ClusterCache.nodes`."""
    try:
        return parse_node(obj)
    except SnapshotError:
        return None


@dataclass
class ClusterCache:
    """Pods and Nodes of one warm container (see the module docstring). Thread-safe."""

    clock: Callable[[], float] = time.monotonic
    resync_after: float = RESYNC_AFTER_SECONDS
    interner_slack: int = INTERNER_SLACK
    _pods: _PodStore = field(default_factory=lambda: _PodStore("pods"))
    _nodes: _Store[Node] = field(default_factory=lambda: _Store[Node]("nodes"))
    _node_claims: _Store[JsonDict] = field(default_factory=lambda: _Store[JsonDict]("nodeclaims"))
    #: gives the latest persisted image (None when there is none usable); asked once, at the
    #: first read of a container that has read nothing yet
    image_loader: Callable[[], CacheImage | None] | None = None
    _runtime_classes: dict[str, Resources] | None = None
    _image_asked: bool = False
    _image: CacheImage | None = None
    _image_loaded_at: float = 0.0
    _restored: list[tuple[str, float]] = field(default_factory=list)
    _sequence: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def read(self, kube: KubernetesPort, runtime_classes: Mapping[str, Resources], parse_pod: PodParser, parse_node: NodeParser) -> ClusterRead:
        """Bring pods and Nodes up to date and return them. Raises :class:`KubernetesError`
        when the cluster cannot be listed (the model is then listed again next time)."""
        with self._lock:
            self._restore(self._pods, runtime_classes)
            self._restore(self._nodes)
            if self._runtime_classes != dict(runtime_classes):
                self._pods.forget()
                self._runtime_classes = dict(runtime_classes)
            how = {
                "pods": self._refresh(self._pods, kube, lambda obj: self._pod_entry(obj, parse_pod), _same_pod),
                "nodes": self._refresh(self._nodes, kube, parse_node, _never_reused),
            }
            if self._pods.compact(self.interner_slack):
                logger.info("cluster state: pod interner rebuilt from the live pods", extra={"pods": len(self._pods.items)})
            pods = tuple(self._pods.items[key] for key in sorted(self._pods.items))
            nodes = tuple(self._nodes.items[name] for name in sorted(self._nodes.items))
        return ClusterRead(pods, nodes, how)

    def interned_values(self) -> int:
        """How many distinct pod values and label maps the pods' interner holds (memory that
        must follow the live pods)."""
        with self._lock:
            return len(self._pods.interner)

    def nodes(self, kube: KubernetesPort, parse_node: NodeParser, *, refresh: bool = True) -> tuple[Node, ...]:
        """Only the Nodes, brought up to date (in name order); ``refresh=False``: as the last
        read left them, when that read was moments ago in the same invocation (listed if never
        read). ``parse_node`` must make the same Node of an object as the parser :meth:`read`
        is given in this container. Raises :class:`KubernetesError` when the Nodes cannot be
        listed."""
        with self._lock:
            self._restore(self._nodes)
            if refresh or not self._nodes.version or self._nodes.restored:
                self._refresh(self._nodes, kube, parse_node, _never_reused)
            return tuple(self._nodes.items[name] for name in sorted(self._nodes.items))

    def known(self) -> tuple[tuple[Node, ...], dict[str, JsonDict]]:
        """The Nodes and NodeClaim mirrors as this container last read them, without reading
        (empty where it never did; in no particular order). The mirrors are shared with the
        cache: do not modify them."""
        with self._lock:
            return tuple(self._nodes.items.values()), dict(self._node_claims.items)

    def node_claims(self, kube: KubernetesPort, *, refresh: bool = True) -> dict[str, JsonDict]:
        """Joiner's NodeClaim mirrors by name, brought up to date the same way (listed once,
        then the changes since; ``refresh=False`` as for :meth:`nodes`); empty when the
        NodeClaim CRD is not installed (404: asked again next time). The objects are shared
        with the cache: do not modify them. Raises :class:`KubernetesError` when they cannot be
        listed."""
        with self._lock:
            self._restore(self._node_claims)
            if not refresh and self._node_claims.version and not self._node_claims.restored:
                return dict(self._node_claims.items)
            try:
                self._refresh(self._node_claims, kube, _as_is, _never_reused)
            except KubernetesError as error:
                if error.status != 404:
                    raise
                self._node_claims.forget()
                return {}
            return dict(self._node_claims.items)

    def export(self, *, complete: bool) -> CacheImage | None:
        """The model as it stands (``complete``), or only what changed since the last complete
        export that :meth:`exported` confirmed; None when nothing was read yet. A changes-only
        export is complete for a resource listed again since then. The objects are shared
        with the cache: do not modify them."""
        with self._lock:
            stores = []
            for store in self._stores():
                if not store.version:
                    continue
                whole = complete or store.relisted is not None
                items: Mapping[str, object] = dict(store.items) if whole else {key: store.items.get(key) for key in store.changed}
                stores.append(StoreImage.of(store.resource, store.version, store.listed_at, whole, items))
            if not stores:
                return None
            return CacheImage(dict(self._runtime_classes or {}), tuple(stores), self._sequence)

    def exported(self, image: CacheImage) -> None:
        """``image``, a complete export, is persisted: later changes-only exports hold only what
        changed after it."""
        if not image.complete:
            return
        with self._lock:
            exported = {store.resource for store in image.stores}
            for store in self._stores():
                if store.resource in exported:
                    store.changed = {key: seen for key, seen in store.changed.items() if seen > image.sequence}
                    if store.relisted is not None and store.relisted <= image.sequence:
                        store.relisted = None

    def changed_since_export(self) -> tuple[int, int]:
        """(objects changed since the last confirmed complete export, objects kept)."""
        with self._lock:
            return sum(len(s.changed) for s in self._stores()), sum(len(s.items) for s in self._stores())

    def _take(self, store: _Store[T], image: CacheImage | None, runtime_classes: Mapping[str, Resources] | None = None) -> bool:
        """Restore ``store`` from a complete ``image`` when it has not been read yet (its next
        read catches up from the image's version); the pods only when they were parsed with
        ``runtime_classes`` (given) or the cache's."""
        exported = image.store(store.resource) if image is not None and image.complete else None
        if exported is None or store.version or not exported.version:
            return False
        if store is self._pods:
            wanted = dict(runtime_classes) if runtime_classes is not None else self._runtime_classes
            if wanted is not None and wanted != dict(image.runtime_classes):  # type: ignore[union-attr]
                return False
        began = time.perf_counter()
        try:
            items = dict(exported.load())
        except ValueError as error:
            logger.warning("cluster state: its image could not be restored, listing instead", extra={"resource": store.resource, "error": str(error)})
            return False
        if store is self._pods:
            self._runtime_classes = dict(image.runtime_classes)  # type: ignore[union-attr]
        store.items = items  # type: ignore[assignment]
        store.version, store.listed_at = exported.version, exported.listed_at
        self._sequence += 1
        store.changed, store.relisted, store.restored = {}, self._sequence, True
        seconds = time.perf_counter() - began
        self._restored.append((store.resource, seconds))
        logger.info("cluster state: restored from its image", extra={"resource": store.resource, "objects": len(items), "seconds": round(seconds, 3)})
        return True

    def restored(self) -> tuple[tuple[str, float], ...]:
        """(resource, seconds its objects took to decode) of each store restored from an image."""
        with self._lock:
            return tuple(self._restored)

    def _restore(self, store: _Store[T], runtime_classes: Mapping[str, Resources] | None = None) -> None:
        """Before ``store`` is first read: restore it from the image, loaded (not decoded) at
        the first such read of this container and used for :data:`IMAGE_USABLE_FOR` seconds."""
        if store.version or self.image_loader is None:
            return
        if not self._image_asked:
            self._image_asked = True
            self._image = self.image_loader()
            self._image_loaded_at = self.clock()
        if self._image is None:
            return
        if self.clock() - self._image_loaded_at > IMAGE_USABLE_FOR:
            self._image = None
            return
        self._take(store, self._image, runtime_classes)

    def _stores(self) -> tuple[_Store[PodEntry], _Store[Node], _Store[JsonDict]]:
        return (self._pods, self._nodes, self._node_claims)

    def _note_change(self, store: _Store[T], key: str) -> None:
        self._sequence += 1
        store.changed[key] = self._sequence

    def _refresh(self, store: _Store[T], kube: KubernetesPort, parse: Callable[[JsonDict], T | None], reusable: Callable[[T, JsonDict], bool]) -> str:
        store.restored = False
        version = store.version
        fresh = version and self.clock() - store.listed_at < self.resync_after
        if fresh:
            try:
                self._apply(store, kube.changes_since(store.resource, version), parse)
                return "changes"
            except WatchExpired:
                logger.info("cluster state: resume refused, listing again", extra={"resource": store.resource, "version": version})
            except KubernetesError as error:
                logger.warning("cluster state: changes could not be read, listing again", extra={"resource": store.resource, "error": str(error)})
        with collector_paused():
            self._list(store, kube, parse, reusable)
        return "list"

    def _list(self, store: _Store[T], kube: KubernetesPort, parse: Callable[[JsonDict], T | None], reusable: Callable[[T, JsonDict], bool]) -> None:
        """List ``store``'s resource again. An object ``reusable`` accepts is kept as it is (a
        pod at the same ``resourceVersion``: a resync parses only what changed since)."""
        previous = store.items
        store.clear()
        found: dict[str, T] = {}
        version = ""
        try:
            for items, page_version in kube.list_pages(store.resource):
                version = version or page_version
                for obj in items:
                    kept = previous.get(_key(obj))
                    parsed = kept if kept is not None and reusable(kept, obj) else parse(obj)
                    if parsed is not None:
                        found[_key(obj)] = parsed
        except BaseException:
            store.forget()
            raise
        store.items = found
        self._sequence += 1
        store.relisted = self._sequence
        if version:
            store.version = version
            store.listed_at = self.clock()

    def _apply(self, store: _Store[T], events: Iterator[WatchEvent], parse: Callable[[JsonDict], T | None]) -> None:
        """Apply ``events`` in order; the version moves with each one, so a stream that
        breaks half-way leaves a consistent prefix to resume from."""
        for event in events:
            if event.type != "BOOKMARK":
                key = _key(event.object)
                parsed = None if event.type == "DELETED" else parse(event.object)
                if parsed is None:
                    store.items.pop(key, None)  # deleted, or now invalid (its parser reported it)
                else:
                    store.items[key] = parsed
                self._note_change(store, key)
            if event.resource_version:
                store.version = event.resource_version

    def _pod_entry(self, obj: JsonDict, parse_pod: PodParser) -> PodEntry | None:
        pod = parse_pod(obj, self._pods.memo)
        if pod is None:
            return None
        pod = self._pods.interner.pod(pod)
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
