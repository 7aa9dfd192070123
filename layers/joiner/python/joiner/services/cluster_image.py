"""The cluster state's persisted image: a cold container restores the model another container
keeps instead of listing every pod and Node again.

The scanner (it reads the cluster every minute in both modes) writes, after its round, the
model its :class:`~joiner.services.cluster_state.ClusterCache` holds: a complete image
(``cluster-state/base``) when it has written none yet, when a resource was listed again, every
:data:`BASE_EVERY_SECONDS` or once more than :data:`BASE_WHEN_CHANGED` of the objects changed;
otherwise only what changed since its complete image (``cluster-state/changes``, a small
object naming the complete image it applies to). A cold container reads both (two requests), checks them, restores the model and
catches up from the image's ``resourceVersion``\\ s like a warm one; when the API server no
longer has that version (410) it lists as before. A missing, foreign, damaged or outdated
image is never an error: the container lists.

The format: one JSON header line (format, the model's fingerprint, which image, its base, its
size and SHA-256), then the zlib-compressed pickle of the
:class:`~joiner.services.cluster_state.CacheImage`. Pickle keeps the model's shared values
shared and loads fast; it is read with an unpickler that builds only the domain's own value
classes (:data:`ALLOWED_MODULES`), so an object that is not such an image fails to load
instead of running anything. The bucket is private to Joiner's functions and encrypted with
its key; only the scanner may write it.
"""

from __future__ import annotations

import copyreg
import dataclasses
import functools
import hashlib
import json
import operator
import pickle
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from joiner import __version__
from joiner.observability import logger
from joiner.ports import BlobError, BlobPort
from joiner.services.cluster_state import CacheImage, ClusterCache, StoreImage, collector_paused

__all__ = [
    "ALLOWED_MODULES",
    "BASE_EVERY_SECONDS",
    "BASE_KEY",
    "BASE_WHEN_CHANGED",
    "FORMAT",
    "MAX_IMAGE_BYTES",
    "ImageError",
    "ImageWrite",
    "ImageWriter",
    "CHANGES_KEY",
    "decode",
    "encode",
    "fingerprint",
    "load_image",
]

FORMAT = 1
BASE_KEY = "cluster-state/base"
#: What changed since the complete image its header names (another writer's complete image
#: makes it stale: a reader then uses the complete image alone).
CHANGES_KEY = "cluster-state/changes"
#: A complete image at least this often (seconds), so the changes object stays small.
BASE_EVERY_SECONDS = 15 * 60.0
#: A complete image as soon as more than this fraction of the kept objects changed.
BASE_WHEN_CHANGED = 0.25
#: At most this often (seconds) a changes object is written.
CHANGES_EVERY_SECONDS = 30.0
#: An image that would decompress to more than this is refused (a bound, not a limit the
#: model reaches: 1,000,000 pods take about 300 MB).
MAX_IMAGE_BYTES = 4 * 1024**3
_MAX_HEADER = 4096

#: The modules whose classes an image may hold (besides built-in containers and datetime).
ALLOWED_MODULES = frozenset(
    {
        "joiner.domain.model",
        "joiner.domain.resources",
        "joiner.domain.requirements",
        "joiner.services.cluster_state",
    }
)
_ALLOWED_BUILTINS = frozenset({("builtins", "frozenset"), ("builtins", "set"), ("datetime", "datetime"), ("datetime", "timedelta"), ("datetime", "timezone")})


class ImageError(ValueError):
    """An object that is not a usable image (damaged, foreign, another model's)."""


def fingerprint() -> str:
    """The model's shape: Joiner's version and every allowed class's fields. An image of
    another shape is not loaded (a class whose fields moved would load wrong values)."""
    parts = [__version__, str(FORMAT)]
    for module_name in sorted(ALLOWED_MODULES):
        module = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
        for name in sorted(vars(module)):
            value = getattr(module, name)
            if isinstance(value, type) and value.__module__ == module_name:
                fields = [f.name for f in dataclasses.fields(value)] if dataclasses.is_dataclass(value) else list(getattr(value, "__slots__", ()))
                parts.append(f"{name}:{','.join(fields)}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _reducers() -> dict[type, Any]:
    """How each value class is pickled: its constructor and arguments (a dataclass's fields,
    a mapping's items), so loading runs no per-object ``__setstate__`` and a cached hash (string
    hashes are salted per process) is never carried into another process."""
    from joiner.domain.requirements import Requirements
    from joiner.domain.resources import Resources

    table: dict[type, Any] = {
        Resources: lambda value: (Resources, (dict(value.items()),)),
        Requirements: lambda value: (Requirements, (tuple(value.values()),)),
    }
    for module_name in sorted(ALLOWED_MODULES):
        module = sys.modules[module_name]
        for name in sorted(vars(module)):
            value = getattr(module, name)
            if isinstance(value, type) and value.__module__ == module_name and dataclasses.is_dataclass(value):
                names = [f.name for f in dataclasses.fields(value)]
                getter = operator.attrgetter(*names) if len(names) > 1 else None

                def reduce(obj: Any, cls: type = value, getter: Any = getter, names: list[str] = names) -> Any:
                    return (cls, getter(obj) if getter is not None else tuple(getattr(obj, n) for n in names))

                table[value] = reduce
    return table


class _Pickler(pickle.Pickler):
    def __init__(self, out: Any) -> None:
        super().__init__(out, protocol=5)
        self.dispatch_table = {**copyreg.dispatch_table, **_reducers()}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_BUILTINS or (module in ALLOWED_MODULES and "." not in name and not name.startswith("_")):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise ImageError(f"the image holds {module}.{name}, which no image may hold")


class _Deflating:
    """A file the pickler writes to, compressed as it goes (no whole pickle in memory)."""

    def __init__(self) -> None:
        self._deflater = zlib.compressobj(1)
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(self._deflater.compress(data))
        return len(data)

    def close(self) -> bytes:
        self._chunks.append(self._deflater.flush())
        return b"".join(self._chunks)


class _Inflating:
    """A file the unpickler reads from, decompressed as it goes and bounded by
    :data:`MAX_IMAGE_BYTES`."""

    _CHUNK = 1 << 20

    def __init__(self, payload: memoryview) -> None:
        self._inflater = zlib.decompressobj()
        self._payload, self._at = payload, 0
        self._buffer = bytearray()
        self._out = 0

    def _fill(self, wanted: int) -> None:
        while len(self._buffer) < wanted:
            source: bytes | memoryview
            if self._inflater.unconsumed_tail:
                source = self._inflater.unconsumed_tail
            elif self._at < len(self._payload):
                source, self._at = self._payload[self._at : self._at + self._CHUNK], self._at + self._CHUNK
            else:
                self._buffer += self._inflater.flush()
                return
            produced = self._inflater.decompress(source, self._CHUNK)
            self._out += len(produced)
            if self._out > MAX_IMAGE_BYTES:
                raise ImageError(f"the image decompresses to more than {MAX_IMAGE_BYTES} bytes")
            self._buffer += produced

    def read(self, size: int = -1) -> bytes:
        self._fill(size if size >= 0 else MAX_IMAGE_BYTES + 1)
        taken = bytes(self._buffer[:size] if size >= 0 else self._buffer)
        del self._buffer[: len(taken)]
        return taken

    def readinto(self, target: Any) -> int:
        data = self.read(len(target))
        target[: len(data)] = data
        return len(data)

    def readline(self) -> bytes:
        while b"\n" not in self._buffer:
            before = len(self._buffer)
            self._fill(before + self._CHUNK)
            if len(self._buffer) == before:
                break
        end = self._buffer.find(b"\n")
        return self.read(end + 1 if end >= 0 else -1)


def _pickled(value: Any) -> bytes:
    out = _Deflating()
    with collector_paused():
        _Pickler(out).dump(value)
    return out.close()


def _unpickled(payload: memoryview, expected: type | tuple[type, ...]) -> Any:
    try:
        with collector_paused():
            value = _Unpickler(_Inflating(payload)).load()
    except ImageError:
        raise
    except Exception as error:  # noqa: BLE001 - zlib, pickle and the classes raise many kinds
        raise ImageError(f"the image cannot be loaded: {type(error).__name__}: {error}") from None
    if not isinstance(value, expected):
        raise ImageError(f"the image holds a {type(value).__name__} where it should hold a {getattr(expected, '__name__', expected)}")
    return value


def encode(image: CacheImage, *, kind: str, image_id: str, base_id: str) -> bytes:
    """The bytes of ``image`` (``kind`` "base" or "changes"): a header, then each resource's
    objects compressed apart (a reader decodes only the resources it reads)."""
    parts = [_pickled(dict(image.runtime_classes))]
    sections: list[dict[str, Any]] = [{"name": "runtimeClasses"}]
    for store in image.stores:
        parts.append(_pickled(dict(store.load())))
        sections.append({"name": store.resource, "version": store.version, "listedAt": store.listed_at, "complete": store.complete})
    offset = 0
    for section, part in zip(sections, parts, strict=True):
        section.update(offset=offset, bytes=len(part), sha256=hashlib.sha256(part).hexdigest())
        offset += len(part)
    header = {"format": FORMAT, "fingerprint": fingerprint(), "kind": kind, "id": image_id, "base": base_id, "sequence": image.sequence, "sections": sections}
    return json.dumps(header, sort_keys=True).encode() + b"\n" + b"".join(parts)


def decode(data: bytes, *, kind: str) -> tuple[dict[str, Any], CacheImage]:
    """The header and image of ``data``: the header and the RuntimeClasses are checked and
    read now, each resource's objects when its ``load`` is called (checked then); raises
    :class:`ImageError` for anything that is not such an image."""
    end = data.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        raise ImageError("no image header")
    try:
        header = json.loads(data[:end])
    except ValueError as error:
        raise ImageError(f"unreadable image header: {error}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT or header.get("kind") != kind:
        raise ImageError(f"not a format {FORMAT} {kind} image")
    if header.get("fingerprint") != fingerprint():
        raise ImageError("the image was written by another version of Joiner's model")
    payload = memoryview(data)[end + 1 :]
    sections = header.get("sections")
    if not isinstance(sections, list) or not sections or not all(isinstance(section, dict) for section in sections):
        raise ImageError("the image header lists no sections")
    total = 0
    for section in sections:
        if not isinstance(section.get("offset"), int) or not isinstance(section.get("bytes"), int) or section["offset"] != total:
            raise ImageError("the image header's sections do not follow each other")
        total += section["bytes"]
    if total != len(payload):
        raise ImageError("the image is damaged (its size does not match its header)")

    def section_bytes(section: dict[str, Any]) -> memoryview:
        part = payload[section["offset"] : section["offset"] + section["bytes"]]
        if hashlib.sha256(part).hexdigest() != section.get("sha256"):
            raise ImageError(f"the image is damaged ({section.get('name')}: its checksum does not match)")
        return part

    if sections[0].get("name") != "runtimeClasses":
        raise ImageError("the image header does not begin with the RuntimeClasses")
    runtime_classes = _unpickled(section_bytes(sections[0]), dict)
    stores = []
    for section in sections[1:]:
        if not isinstance(section.get("name"), str) or not isinstance(section.get("version"), str) or not isinstance(section.get("complete"), bool):
            raise ImageError("the image header names a resource without its version")
        stores.append(
            StoreImage(
                section["name"],
                section["version"],
                float(section.get("listedAt") or 0.0),
                section["complete"],
                functools.partial(_section_items, section_bytes, section),
            )
        )
    sequence = header.get("sequence")
    return header, CacheImage(runtime_classes, tuple(stores), sequence if isinstance(sequence, int) else 0)


def _section_items(section_bytes: Callable[[dict[str, Any]], memoryview], section: dict[str, Any]) -> Mapping[str, object]:
    items: Mapping[str, object] = _unpickled(section_bytes(section), dict)
    return items


def load_image(blobs: BlobPort, on_unusable: Callable[[str], None] | None = None) -> tuple[CacheImage, dict[str, Any]] | None:
    """The latest image (the complete one with its changes applied; each resource decoded
    only when restored) and what was read (``base_id``, ``bytes``, ``load_s``, ``changes``);
    None when there is none, or none usable (logged and given to ``on_unusable``: the container
    lists instead)."""
    started = time.perf_counter()
    try:
        data = blobs.get(BASE_KEY)
        if data is None:
            return None
        header, image = decode(data, kind="base")
        read = len(data)
        changes = blobs.get(CHANGES_KEY)
        applied = False
        if changes is not None:
            changes_header, delta = decode(changes, kind="changes")
            if changes_header.get("base") == header["id"]:
                image, applied, read = image.with_changes(delta), True, read + len(changes)
    except (BlobError, ImageError) as error:
        logger.warning("cluster state: its image is not usable, listing instead", extra={"error": str(error)})
        if on_unusable is not None:
            on_unusable(str(error))
        return None
    return image, {"base_id": header["id"], "bytes": read, "changes": applied, "load_s": round(time.perf_counter() - started, 3)}


@dataclass(frozen=True)
class ImageWrite:
    """What one :meth:`ImageWriter.write` did: ``kind`` ("base", "changes", or "" when not due
    or failed), its size and the objects it holds."""

    kind: str = ""
    bytes: int = 0
    objects: int = 0
    error: str = ""


@dataclass
class ImageWriter:
    """Writes one container's cache as images (see the module docstring). Not thread-safe:
    one per container, called after a round."""

    base_id: str = ""
    base_written_at: float = float("-inf")
    changes_written_at: float = float("-inf")

    def write(self, cache: ClusterCache, blobs: BlobPort, now: float) -> ImageWrite:
        """Write what is due at ``now`` (seconds). Never raises: a failed write is logged and
        returned (the next round writes a complete image)."""
        changed, kept = cache.changed_since_export()
        complete = not self.base_id or now - self.base_written_at >= BASE_EVERY_SECONDS or changed > BASE_WHEN_CHANGED * max(kept, 1)
        if not complete and now - self.changes_written_at < CHANGES_EVERY_SECONDS:
            return ImageWrite()
        image = cache.export(complete=complete)
        if image is None:
            return ImageWrite()
        complete = image.complete
        image_id = uuid.uuid4().hex
        base_id = image_id if complete else self.base_id
        try:
            data = encode(image, kind="base" if complete else "changes", image_id=image_id, base_id=base_id)
            blobs.put(BASE_KEY if complete else CHANGES_KEY, data)
        except (BlobError, pickle.PicklingError, MemoryError) as error:
            self.base_id = ""
            logger.warning("cluster state: its image could not be written", extra={"error": str(error)})
            return ImageWrite(error=str(error))
        objects = sum(len(store.load()) for store in image.stores)
        if complete:
            cache.exported(image)
            self.base_id, self.base_written_at = image_id, now
        self.changes_written_at = now
        return ImageWrite("base" if complete else "changes", len(data), objects)
