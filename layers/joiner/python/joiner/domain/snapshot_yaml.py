"""Snapshot YAML to plain Python objects, in one pass over libyaml's events.

:func:`snapshot_loader` is the reference: a :mod:`joiner.domain.bounded` loader reading YAML
as kubectl does (timestamps stay strings, duplicate keys are errors, merge keys ``<<``
allowed, numbers bounded). Through :func:`joiner.domain.bounded.load_yaml_all` it parses
the text twice (a bounds walk over the events, then PyYAML's composer and constructor), and
its Python-level construction is most of the time ``joiner plan`` spends reading a cluster.

:func:`load_snapshot_documents` gives the same documents faster. With libyaml it walks the
parser's events once and builds dicts, lists and scalars in a flat loop (an explicit stack,
so no recursion). It handles only what it can reproduce exactly and hands everything else
to the reference, which then parses the text from the start:

* an anchor, alias or explicit tag, a collection used as a mapping key, a merge key, a
  ``%TAG`` or ``%YAML`` directive;
* any error: a syntax error, a duplicate key, a number out of range, nesting deeper than
  the limit. The reference reports it, so messages, lines and columns are its own, and the
  reference's precedence holds (its bounds walk reads the whole stream before building,
  so a syntax error late in the text wins over a duplicate key early in it).

Plain scalars are resolved by the reference loader's own implicit resolvers and built by
its own constructors (bounded int and float included), once per distinct text; quoted and
block scalars are strings, as the composer resolves them. The walk reads every event to the
end of the stream before returning, so the document is checked in full either way. Without
libyaml the reference (pure-Python ``SafeLoader``) is used directly.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from joiner.domain.bounded import DEFAULT_LIMITS, InputLimits, bounded_yaml_loader, load_yaml_all

__all__ = ["fast_path_available", "gc_paused", "load_snapshot_documents", "snapshot_loader"]

_STR = "tag:yaml.org,2002:str"
#: Tags a plain scalar may resolve to that the fast path builds with the reference's
#: constructors; any other (``merge``, ``value``) goes to the reference.
_SCALAR_TAGS = frozenset({_STR, "tag:yaml.org,2002:null", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})

_LOADERS: dict[type[Any], type[Any]] = {}


def snapshot_loader() -> type[Any]:
    """Safe YAML as kubectl reads it: timestamps stay strings, duplicate keys are errors;
    numbers bounded (:mod:`joiner.domain.bounded`), libyaml when available."""
    base = bounded_yaml_loader()
    loader = _LOADERS.get(base)
    if loader is not None:
        return loader

    def construct_mapping(self: Any, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # ``<<: *anchor`` merges; explicit keys may override merged ones
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        mapping: dict[Any, Any] = base.construct_mapping(self, node, deep=deep)
        return mapping

    loader = type("SnapshotLoader", (base,), {"construct_mapping": construct_mapping, "__doc__": snapshot_loader.__doc__})
    loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"] for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    _LOADERS[base] = loader
    return loader


def fast_path_available() -> bool:
    """Whether :func:`load_snapshot_documents` can walk libyaml's events (PyYAML built with
    libyaml, and the reference loader built on it)."""
    c_loader = getattr(yaml, "CSafeLoader", None)
    return c_loader is not None and issubclass(snapshot_loader(), c_loader)


def load_snapshot_documents(text: str, limits: InputLimits = DEFAULT_LIMITS) -> list[Any]:
    """Every document of a snapshot YAML stream (empty documents as ``None``), exactly as
    ``load_yaml_all(text, limits, snapshot_loader())`` returns them, and with its errors
    (:class:`joiner.domain.bounded.InputError`)."""
    if isinstance(text, str) and len(text) <= limits.max_chars and fast_path_available():
        try:
            return _load_fast(text, limits, snapshot_loader())
        except _Fallback:
            pass
    return load_yaml_all(text, limits, snapshot_loader())


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (when it was on, it is back on after).

    Reading a snapshot allocates hundreds of thousands of dicts, lists and objects that all
    survive, so each automatic collection scans ever more live objects and frees nothing:
    about a tenth of the time of :func:`joiner.domain.snapshot.load_snapshot_yaml`. The
    input is bounded (:data:`joiner.domain.bounded.DEFAULT_LIMITS`), so the cycles it may
    leave (tracebacks of handled errors) wait at most until the block ends. Concurrent
    blocks in other threads only ever leave collection on or as they found it."""
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Fallback(Exception):
    """The fast path met something it does not reproduce exactly."""


_NO_KEY: Any = object()


def _load_fast(text: str, limits: InputLimits, loader_class: type[Any]) -> list[Any]:
    loader = loader_class(text)
    try:
        return _walk(loader, limits.max_depth)
    except (yaml.YAMLError, ValueError, OverflowError) as error:  # InputError is a ValueError
        raise _Fallback from error
    finally:
        loader.dispose()


def _walk(loader: Any, max_depth: int) -> list[Any]:
    """Documents built from ``loader``'s events; raises :class:`_Fallback` (see the module
    docstring). ``container`` is the open list or dict (a one-element list holds a
    document's root); ``key`` is the pending key of an open dict, ``_NO_KEY`` while a key is
    expected."""
    scalar_event, sequence_start, mapping_start = yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent
    sequence_end, mapping_end = yaml.SequenceEndEvent, yaml.MappingEndEvent
    document_start, document_end = yaml.DocumentStartEvent, yaml.DocumentEndEvent
    stream_start, stream_end = yaml.StreamStartEvent, yaml.StreamEndEvent
    get_event = loader.get_event
    plain: dict[str, Any] = {}
    documents: list[Any] = []
    stack: list[Any] = []
    container: Any = None
    key: Any = _NO_KEY
    while True:
        event = get_event()
        kind = type(event)
        if kind is scalar_event:
            if event.anchor is not None or event.tag is not None:
                raise _Fallback
            value = event.value
            if event.implicit[0]:
                try:
                    value = plain[value]
                except KeyError:
                    value = plain[value] = _plain_scalar(loader, value)
            if type(container) is list:
                container.append(value)
            elif key is _NO_KEY:
                if value in container:
                    raise _Fallback  # duplicate key: the reference names it
                key = value
            else:
                container[key] = value
                key = _NO_KEY
        elif kind is mapping_end or kind is sequence_end:
            container = stack.pop()
            key = _NO_KEY
        elif kind is mapping_start or kind is sequence_start:
            if event.anchor is not None or event.tag is not None:
                raise _Fallback
            new: Any = {} if kind is mapping_start else []
            if type(container) is list:
                container.append(new)
            elif key is _NO_KEY:
                raise _Fallback  # a collection as a key
            else:
                container[key] = new
            stack.append(container)
            if len(stack) > max_depth:
                raise _Fallback
            container = new
            key = _NO_KEY
        elif kind is document_start:
            if event.version is not None or event.tags is not None:
                raise _Fallback
            container = []
        elif kind is document_end:
            if len(container) != 1:
                raise _Fallback
            documents.append(container[0])
            container = None
        elif kind is stream_end:
            return documents
        elif kind is not stream_start:
            raise _Fallback  # an alias


def _plain_scalar(loader: Any, text: str) -> Any:
    """A plain scalar as the reference builds it: its implicit resolvers pick the tag, its
    constructor for that tag (bounded numbers) builds the value."""
    tag = loader.resolve(yaml.ScalarNode, text, (True, False))
    if tag == _STR:
        return text
    if tag not in _SCALAR_TAGS:
        raise _Fallback
    return loader.yaml_constructors[tag](loader, yaml.ScalarNode(tag, text))
