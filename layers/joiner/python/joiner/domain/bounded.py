"""Bounded parsing of untrusted text: YAML and JSON with limits on size, nesting depth,
alias expansion and numbers.

Every input Joiner reads from a file, standard input or a queue goes through here, so a
hostile document gets one :class:`InputError` naming the problem (and, for YAML, the line
and column) instead of a hang, a ``RecursionError`` or an ``OverflowError``:

* **size**: at most :attr:`InputLimits.max_chars` characters, checked before parsing;
* **depth**: collections nest at most :attr:`InputLimits.max_depth` levels, counting what an
  alias expands to. JSON is pre-scanned (brackets outside strings) before ``json.loads``;
  YAML is checked on the parser's event stream before anything is composed, because
  composing is recursive (pure-Python composer: ``RecursionError`` near 300 levels;
  libyaml's C composer: a segmentation fault near 100,000 levels);
* **aliases**: the nodes YAML aliases add by expansion (an alias counts as the whole
  subtree its anchor names) are at most the document's own node count or
  :attr:`InputLimits.alias_node_floor`, whichever is more; a billion-laughs document fails
  after a handful of events. An alias to an enclosing node (a cycle) is rejected;
* **times**: :func:`time_in_range` is the clock-free window every time read from input must
  fall in (1970 to 2200), so adding or subtracting any duration Joiner accepts (at most Go's
  292 years, :data:`joiner.domain.durations.MAX_DURATION`) cannot overflow ``datetime``;
* **numbers**: integers fit 64 bits (as Kubernetes and JSON APIs require), a numeric token
  has at most :data:`MAX_NUMBER_CHARS` characters, a float that overflows to infinity is
  rejected (YAML's explicit ``.inf``/``.nan`` are left to the field's own check), and JSON's
  non-standard ``NaN``/``Infinity`` are refused.

The YAML checks work on the event stream of the loader class that will build the data,
so they hold unchanged for libyaml's ``CSafeLoader``, which :func:`yaml_loader_base`
prefers when PyYAML was built with it. The check costs one extra parse (about a tenth of a
``CSafeLoader`` load). Construction then runs in Python with the integer and float
constructors replaced by bounded ones. Snapshots, the largest input, are read in one pass
by :mod:`joiner.domain.snapshot_yaml`, which hands anything unusual back to this path.

No clock, no I/O; ``yaml`` is imported only when YAML is read (the Lambda handlers parse
JSON only).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "DEFAULT_LIMITS",
    "EARLIEST_TIME",
    "EVENT_LIMITS",
    "LATEST_TIME",
    "parse_aware_time",
    "MAX_INT",
    "MAX_NUMBER_CHARS",
    "InputError",
    "InputLimits",
    "bounded_yaml_loader",
    "check_yaml_events",
    "json_depth",
    "load_json",
    "load_yaml",
    "load_yaml_all",
    "time_in_range",
    "yaml_loader_base",
]

#: The largest integer accepted anywhere (int64, as Kubernetes and DynamoDB-safe figures use).
MAX_INT = 2**63 - 1
#: Longest numeric token read (sign, digits, point, exponent): 19 digits fit int64 with room
#: for floats written out in full.
MAX_NUMBER_CHARS = 40


#: The window of times accepted from any input (see the module docstring).
EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_TIME = datetime(2200, 1, 1, tzinfo=UTC)


def parse_aware_time(value: object) -> datetime | None:
    """An RFC 3339 time as the Kubernetes API writes it (``Z`` or an offset), or None when
    ``value`` is not such a string or names no zone."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def time_in_range(moment: datetime) -> bool:
    """Whether an aware time lies in ``[EARLIEST_TIME, LATEST_TIME)``. Comparing never
    overflows, unlike converting ``9999-12-31T23:59:59-01:00`` to UTC."""
    return EARLIEST_TIME <= moment < LATEST_TIME


class InputError(ValueError):
    """Untrusted text outside the limits, or not valid JSON/YAML. ``str()`` is one line:
    ``line L, column C: problem`` when the position is known."""

    def __init__(self, problem: str, *, line: int | None = None, column: int | None = None) -> None:
        self.problem = problem
        self.line = line
        self.column = column
        super().__init__(f"{self.where}: {problem}" if self.where else problem)

    @property
    def where(self) -> str:
        """``line L, column C`` (1-based) or ``""``."""
        return f"line {self.line}, column {self.column}" if self.line is not None and self.column is not None else ""


@dataclass(frozen=True, slots=True)
class InputLimits:
    """Bounds for one kind of input; see the module docstring for what each bounds."""

    max_chars: int = 64 * 1024 * 1024
    max_depth: int = 100
    alias_node_floor: int = 100_000


#: Files given to the CLI (snapshots, catalogs, Karpenter manifests, scenarios): a cluster
#: dump of tens of thousands of objects fits; Kubernetes objects nest about 20 levels deep.
DEFAULT_LIMITS = InputLimits()
#: EventBridge events on the interruption queue (an SQS message is at most 256 KiB).
EVENT_LIMITS = InputLimits(max_chars=256 * 1024, max_depth=32, alias_node_floor=0)


def _check_size(text: str, limits: InputLimits) -> None:
    if len(text) > limits.max_chars:
        raise InputError(f"input is {len(text):,} characters, more than the {limits.max_chars:,} allowed")


# ---------------------------------------------------------------- JSON

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str, stop_above: int | None = None) -> int:
    """The deepest bracket nesting of JSON text, strings skipped; counting stops at the
    first unbalanced closer (``json.loads`` fails there without descending further) and,
    with ``stop_above``, as soon as the depth exceeds it."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    depth = deepest = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        else:
            depth -= 1
            if depth < 0:
                break
    return deepest


def _too_long(token: str) -> InputError:
    return InputError(f"number {token[:12]}... has {len(token)} characters, more than the {MAX_NUMBER_CHARS} allowed")


def _json_int(token: str) -> int:
    if len(token) > MAX_NUMBER_CHARS:
        raise _too_long(token)
    value = int(token)
    if abs(value) > MAX_INT:
        raise InputError(f"integer {token} is out of range (at most {MAX_INT}, a 64-bit integer)")
    return value


def _json_float(token: str) -> float:
    if len(token) > MAX_NUMBER_CHARS:
        raise _too_long(token)
    value = float(token)
    if not math.isfinite(value):
        raise InputError(f"number {token} is out of range")
    return value


def _json_constant(token: str) -> Any:
    raise InputError(f"{token} is not valid JSON")


def load_json(text: str, limits: InputLimits = DEFAULT_LIMITS) -> Any:
    """``json.loads`` within ``limits``; raises :class:`InputError` (also for invalid JSON)."""
    if not isinstance(text, str):
        raise InputError(f"expected JSON text, got {type(text).__name__}")
    _check_size(text, limits)
    if json_depth(text, stop_above=limits.max_depth) > limits.max_depth:
        raise InputError(f"nested more than {limits.max_depth} levels deep")
    try:
        return json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant)
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON: {error.msg}", line=error.lineno, column=error.colno) from None


# ---------------------------------------------------------------- YAML


def yaml_loader_base() -> type[Any]:
    """libyaml's ``CSafeLoader`` when PyYAML has it, else the pure-Python ``SafeLoader``."""
    import yaml

    base: type[Any] = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    return base


def _marked(problem: str, mark: Any) -> InputError:
    if mark is None:
        return InputError(problem)
    return InputError(problem, line=mark.line + 1, column=mark.column + 1)


def check_yaml_events(loader: Any, limits: InputLimits) -> None:
    """Walk the parser events of ``loader`` (consuming them) and raise :class:`InputError` at
    the first event past a limit: nesting depth (an alias counts as its anchor's height),
    alias expansion, or an alias that names an enclosing node.

    Each open collection is a frame ``[anchor, nodes, height of its children]``; a closed
    anchored node records ``(nodes, height)`` so an alias costs what it expands to without
    expanding it. Anchors are per document, as in the YAML spec."""
    import yaml

    anchors: dict[str, tuple[int, int]] = {}
    stack: list[list[Any]] = []
    distinct = 0
    aliased = 0

    def add(nodes: int, height: int) -> None:
        if stack:
            frame = stack[-1]
            frame[1] += nodes
            frame[2] = max(frame[2], height)

    scalar_event, alias_event, document_end = yaml.ScalarEvent, yaml.AliasEvent, yaml.DocumentEndEvent
    sequence_start, mapping_start = yaml.SequenceStartEvent, yaml.MappingStartEvent
    sequence_end, mapping_end = yaml.SequenceEndEvent, yaml.MappingEndEvent

    while True:
        try:
            if not loader.check_event():
                break
            event = loader.get_event()
        except yaml.MarkedYAMLError as error:
            # libyaml (PyYAML >= 6.0.3's wheels) stops at 1,000 levels of flow nesting while
            # scanning ahead for a simple key, before this walk sees the 101st level: the
            # same limit, reported as ours.
            if "maximum nesting depth" in str(error.problem):
                raise _marked(f"nested more than {limits.max_depth} levels deep", error.problem_mark) from None
            raise
        kind = type(event)  # the parsers emit exactly these classes: identity beats isinstance chains
        if kind is scalar_event:  # by far the most frequent
            distinct += 1
            if event.anchor is not None:
                anchors[event.anchor] = (1, 0)
            if stack:
                stack[-1][1] += 1
        elif kind is sequence_start or kind is mapping_start:
            distinct += 1
            stack.append([event.anchor, 1, 0])
            if len(stack) > limits.max_depth:
                raise _marked(f"nested more than {limits.max_depth} levels deep", event.start_mark)
        elif kind is sequence_end or kind is mapping_end:
            anchor, nodes, child_height = stack.pop()
            if anchor is not None:
                anchors[anchor] = (nodes, child_height + 1)
            add(nodes, child_height + 1)
        elif kind is alias_event:
            if event.anchor not in anchors:
                if any(frame[0] == event.anchor for frame in stack):
                    raise _marked(f"alias *{event.anchor} refers to a node that contains it (a cycle)", event.start_mark)
                raise _marked(f"alias *{event.anchor} names no anchor defined before it", event.start_mark)
            nodes, height = anchors[event.anchor]
            if len(stack) + height > limits.max_depth:
                raise _marked(f"alias *{event.anchor} expands to more than {limits.max_depth} levels of nesting", event.start_mark)
            aliased += nodes
            if aliased > max(limits.alias_node_floor, distinct):
                raise _marked(
                    f"aliases expand to more than {max(limits.alias_node_floor, distinct):,} nodes (write the repeated values out, or use fewer aliases)",
                    event.start_mark,
                )
            add(nodes, height)
        elif kind is document_end:
            anchors.clear()


def _bounded_int(loader: Any, node: Any) -> int:
    import yaml

    if len(node.value) > MAX_NUMBER_CHARS:
        raise _marked(str(_too_long(node.value)), node.start_mark)
    value: int = yaml.SafeLoader.construct_yaml_int(loader, node)
    if abs(value) > MAX_INT:
        raise _marked(f"integer {node.value} is out of range (at most {MAX_INT}, a 64-bit integer)", node.start_mark)
    return value


def _bounded_float(loader: Any, node: Any) -> float:
    import yaml

    if len(node.value) > MAX_NUMBER_CHARS:
        raise _marked(str(_too_long(node.value)), node.start_mark)
    value: float = yaml.SafeLoader.construct_yaml_float(loader, node)
    explicit = node.value.lower().lstrip("+-") in (".inf", ".nan")
    if not math.isfinite(value) and not explicit:
        raise _marked(f"number {node.value} is out of range", node.start_mark)
    return value


def bounded_yaml_loader(base: type[Any] | None = None) -> type[Any]:
    """A subclass of ``base`` (default :func:`yaml_loader_base`) whose integers and floats are
    bounded. Subclass it further for more rules (duplicate keys, resolvers)."""
    return _bounded_loader(base or yaml_loader_base())


_LOADERS: dict[type[Any], type[Any]] = {}


def _bounded_loader(base: type[Any]) -> type[Any]:
    loader = _LOADERS.get(base)
    if loader is None:
        loader = type(f"Bounded{base.__name__}", (base,), {"__doc__": "YAML loader with bounded numbers (joiner.domain.bounded)."})
        loader.add_constructor("tag:yaml.org,2002:int", _bounded_int)
        loader.add_constructor("tag:yaml.org,2002:float", _bounded_float)
        _LOADERS[base] = loader
    return loader


def load_yaml_all(text: str, limits: InputLimits = DEFAULT_LIMITS, loader: type[Any] | None = None) -> list[Any]:
    """Every document of a YAML stream (empty documents as ``None``) within ``limits``, built
    by ``loader`` (default: :func:`bounded_yaml_loader`). Raises :class:`InputError` naming
    the line and column for invalid YAML too (its ``problem`` then is the parser's own words,
    such as ``mapping values are not allowed here``)."""
    import yaml

    if not isinstance(text, str):
        raise InputError(f"expected YAML text, got {type(text).__name__}")
    _check_size(text, limits)
    loader_class = loader or bounded_yaml_loader()
    try:
        checker = loader_class(text)
        try:
            check_yaml_events(checker, limits)
        finally:
            checker.dispose()
        builder = loader_class(text)
        try:
            documents = []
            while builder.check_data():
                documents.append(builder.get_data())
            return documents
        finally:
            builder.dispose()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise _marked(error.problem or error.context or "invalid YAML", mark) from None
    except yaml.YAMLError as error:
        raise InputError(f"invalid YAML: {' '.join(str(error).split())}") from None


def load_yaml(text: str, limits: InputLimits = DEFAULT_LIMITS, loader: type[Any] | None = None) -> Any:
    """The single document of a YAML text (``None`` when empty); more than one is an error."""
    documents = load_yaml_all(text, limits, loader)
    if len(documents) > 1:
        raise InputError(f"expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None
