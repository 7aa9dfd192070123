"""Reading the fields of Kubernetes objects (raw API JSON or YAML) with errors that name the
object and the field path: the readers :mod:`joiner.domain.snapshot` and
:mod:`joiner.domain.volumes` parse with.

A malformed field raises :class:`SnapshotError` (``Pod default/web-1:
spec.containers[0].resources.requests.cpu: invalid quantity 'abc': ...``), never a bare
``KeyError`` or ``TypeError``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from joiner.domain import labels as wk
from joiner.domain.bounded import EARLIEST_TIME, LATEST_TIME, MAX_INT, time_in_range
from joiner.domain.durations import DurationError, clamp_seconds, parse_duration
from joiner.domain.model import LabelSelector, Taint, Toleration
from joiner.domain.quantity import QuantityError, parse_milli
from joiner.domain.requirements import Requirement, RequirementError, Requirements
from joiner.domain.resources import EMPTY, Resources

__all__ = [
    "SnapshotError",
    "Fields",
    "describe",
    "magnitude",
    "selector_of",
    "metadata_of",
    "object_ref",
    "name_of",
    "checked_object",
    "TAINT_EFFECTS",
    "SELECTOR_OPERATORS",
    "RESTRICTED_POOL_LABELS",
]

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
#: Labels a NodePool may not set or require: Joiner sets them per node.
RESTRICTED_POOL_LABELS = frozenset({wk.NODEPOOL, wk.NODECLAIM, wk.HOSTNAME, wk.REGISTERED, wk.INITIALIZED})


class SnapshotError(ValueError):
    """A Kubernetes object Joiner cannot use, naming the object and the field.

    ``str(error)`` reads ``Pod default/web-1: spec.containers[0].resources.requests.cpu:
    invalid quantity 'abc': ...``; the parts are also available as attributes.
    """

    def __init__(self, object_ref: str, field: str, problem: str) -> None:
        self.object_ref = object_ref
        self.field = field
        self.problem = problem
        super().__init__(f"{object_ref}: {field}: {problem}" if field else f"{object_ref}: {problem}")


def describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def magnitude(value: float) -> str:
    """A huge number for a message (an int too large for a float, or for ``str``, by its size)."""
    if isinstance(value, int):
        return str(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"
    return f"{value:.3g}"


class Fields:
    """Reads one object's fields; every failure names the object and the field path."""

    __slots__ = ("ref",)

    def __init__(self, ref: str) -> None:
        self.ref = ref

    def fail(self, path: str, problem: str) -> NoReturn:
        raise SnapshotError(self.ref, path, problem)

    def mapping(self, value: object, path: str, *, required: bool = False) -> Mapping[str, Any]:
        if value is None:
            if required:
                self.fail(path, "required")
            return {}
        if type(value) is not dict and not isinstance(value, Mapping):  # the exact type first: ABC checks are slow
            self.fail(path, f"expected a mapping, got {describe(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"keys must be strings, got {describe(key)}")
        return value

    def sequence(self, value: object, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            self.fail(path, f"expected a list, got {describe(value)}")
        return list(value)

    def items(self, value: object, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """``(path[i], mapping)`` for each element of a list of mappings."""
        if value is None:  # most optional lists are absent: no generator for them
            return iter(())
        return self._items(value, path)

    def _items(self, value: object, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        for index, item in enumerate(self.sequence(value, path)):
            item_path = f"{path}[{index}]"
            yield item_path, self.mapping(item, item_path, required=True)

    def string(self, value: object, path: str, *, default: str | None = None, required: bool = False, allowed: Iterable[str] = ()) -> Any:
        if value is None:
            if required:
                self.fail(path, "required")
            return default
        if not isinstance(value, str):
            hint = " (quote it)" if isinstance(value, (bool, int, float)) else ""
            self.fail(path, f"expected a string, got {describe(value)}{hint}")
        if required and not value:
            self.fail(path, "must not be empty")
        allowed = tuple(allowed)
        if allowed and value not in allowed:
            self.fail(path, f"{value!r} is not one of {', '.join(allowed)}")
        return value

    def integer(self, value: object, path: str, *, default: int | None = None, minimum: int | None = None, maximum: int | None = None) -> Any:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {describe(value)}")
        if abs(value) > MAX_INT:
            self.fail(path, f"{magnitude(value)} is out of range (at most {MAX_INT}, a 64-bit integer)")
        if minimum is not None and value < minimum:
            self.fail(path, f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            self.fail(path, f"must be at most {maximum}, got {value}")
        return value

    def seconds(self, value: object, path: str, *, default: int | None = None, minimum: int | None = None) -> Any:
        """A whole-seconds duration (an int64, as the API server takes it), clamped by
        :func:`joiner.domain.durations.clamp_seconds` so adding it to a time never overflows."""
        seconds = self.integer(value, path, default=default, minimum=minimum)
        return seconds if seconds is None else clamp_seconds(seconds)

    def number(self, value: object, path: str, *, default: float, minimum: float, maximum: float | None = None) -> float:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
            self.fail(path, f"expected a number, got {describe(value)}")
        if abs(value) > MAX_INT:  # also keeps float(value) below from overflowing on a huge int
            self.fail(path, f"{magnitude(value)} is out of range (at most {MAX_INT})")
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f"between {minimum:g} and {maximum:g}" if maximum is not None else f"at least {minimum:g}"
            self.fail(path, f"must be {bounds}, got {value:g}")
        return float(value)

    def boolean(self, value: object, path: str, *, default: bool = False) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {describe(value)}")
        return value

    def string_map(self, value: object, path: str) -> dict[str, str]:
        mapping = self.mapping(value, path)
        return {key: self.string(item, f"{path}.{key}", default="") for key, item in mapping.items()}

    def string_list(self, value: object, path: str, *, allow_empty: bool = False) -> list[str]:
        """Strings; ``allow_empty`` for label values, where "" is a value (``NotIn [""]``)."""
        return [
            self.string(item, f"{path}[{i}]", required=not allow_empty, default="")
            if allow_empty and item is not None
            else self.string(item, f"{path}[{i}]", required=True)
            for i, item in enumerate(self.sequence(value, path))
        ]

    def resources(self, value: object, path: str, *, keep_zeros: bool = False, crd: bool = False) -> Resources:
        """Non-negative quantities in milli-units (``Resources.parse`` rules, with our paths).
        ``crd``: a field of Joiner's CRDs, whose quantity pattern admits no ``-`` sign (not even
        ``-0``) and no surrounding whitespace (built-in kinds' quantities are trimmed)."""
        mapping = self.mapping(value, path)
        parsed: dict[str, int] = {}
        for name, quantity in mapping.items():
            if crd and isinstance(quantity, str) and quantity.startswith("-"):
                self.fail(f"{path}.{name}", f"must not be negative, got {quantity!r}")
            if crd and isinstance(quantity, str) and quantity != quantity.strip():
                self.fail(f"{path}.{name}", f"invalid quantity {quantity!r}: surrounding whitespace")
            try:
                milli = parse_milli(quantity)
            except QuantityError as error:
                self.fail(f"{path}.{name}", str(error))
            if milli < 0:
                self.fail(f"{path}.{name}", f"must not be negative, got {quantity!r}")
            parsed[name] = milli
        if keep_zeros:
            return Resources.keeping_zeros(parsed)
        return Resources(parsed) if parsed else EMPTY

    def timestamp(self, value: object, path: str) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            moment = value
        elif isinstance(value, str):
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                self.fail(path, f"invalid timestamp {value!r}: expected RFC 3339 such as 2024-05-01T12:00:00Z")
        else:
            self.fail(path, f"expected an RFC 3339 timestamp string, got {describe(value)}")
        moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        if not time_in_range(moment):
            self.fail(path, f"timestamp {describe(value)} is out of range (expected a time between {EARLIEST_TIME.year} and {LATEST_TIME.year})")
        return moment

    def duration(self, value: object, path: str, *, default: timedelta | None, allow_never: bool = True) -> timedelta | None:
        if value is None:
            return default
        try:
            parsed = parse_duration(value, clamp=True)
        except DurationError as error:
            self.fail(path, str(error))
        if parsed is None and not allow_never:
            self.fail(path, "Never is not allowed here")
        return parsed

    def requirements(self, value: object, path: str, *, node_pool: bool = False) -> Requirements:
        """``NodeSelectorRequirement`` lists; ``minValues`` is read only for NodePools."""
        parsed: list[Requirement] = []
        for item_path, item in self.items(value, path):
            key = self.string(item.get("key"), f"{item_path}.key", required=True)
            operator = self.string(item.get("operator"), f"{item_path}.operator", required=True)
            values = self.string_list(item.get("values"), f"{item_path}.values", allow_empty=True)
            min_values = item.get("minValues") if node_pool else None
            if min_values is not None:
                self.integer(min_values, f"{item_path}.minValues", minimum=1, maximum=50)
                if operator == "In" and len(values) < min_values:
                    self.fail(f"{item_path}.minValues", f"{min_values} is more than the {len(values)} values listed")
            try:
                requirement = Requirement.create(key, operator, values, min_values)
            except RequirementError as error:
                self.fail(item_path, str(error))
            if node_pool and operator in ("Gt", "Lt", "Gte", "Lte") and values and values[0].startswith("-"):
                self.fail(f"{item_path}.values", f"operator {operator} needs a single non-negative integer value (as the CRD and Karpenter require)")
            if node_pool and requirement.key in RESTRICTED_POOL_LABELS:
                self.fail(f"{item_path}.key", f"{key} is set by Joiner on each node and cannot be required by a NodePool")
            parsed.append(requirement)
        return Requirements(parsed)

    def label_selector(self, value: object, path: str) -> LabelSelector | None:
        """A ``metav1.LabelSelector``; ``None`` for a null selector (its meaning depends on the field)."""
        if value is None:
            return None
        mapping = self.mapping(value, path)
        match_labels = self.string_map(mapping.get("matchLabels"), f"{path}.matchLabels")
        expressions = []
        for item_path, item in self.items(mapping.get("matchExpressions"), f"{path}.matchExpressions"):
            key = self.string(item.get("key"), f"{item_path}.key", required=True)
            operator = self.string(item.get("operator"), f"{item_path}.operator", required=True, allowed=SELECTOR_OPERATORS)
            values = self.string_list(item.get("values"), f"{item_path}.values")
            if operator in ("In", "NotIn") and not values:
                self.fail(f"{item_path}.values", f"operator {operator} needs at least one value")
            if operator in ("Exists", "DoesNotExist") and values:
                self.fail(f"{item_path}.values", f"operator {operator} takes no values")
            expressions.append((key, operator, tuple(sorted(set(values)))))
        return selector_of(match_labels.items(), expressions)

    def taints(self, value: object, path: str) -> tuple[Taint, ...]:
        taints = []
        for item_path, item in self.items(value, path):
            taints.append(
                Taint(
                    key=self.string(item.get("key"), f"{item_path}.key", required=True),
                    value=self.string(item.get("value"), f"{item_path}.value", default=""),
                    effect=self.string(item.get("effect"), f"{item_path}.effect", required=True, allowed=TAINT_EFFECTS),
                )
            )
        return tuple(taints)

    def tolerations(self, value: object, path: str) -> tuple[Toleration, ...]:
        tolerations = []
        for item_path, item in self.items(value, path):
            key = self.string(item.get("key"), f"{item_path}.key", default="")
            operator = self.string(item.get("operator"), f"{item_path}.operator", default="Equal", allowed=("Equal", "Exists"))
            value_ = self.string(item.get("value"), f"{item_path}.value", default="")
            if not key and operator != "Exists":
                self.fail(f"{item_path}.operator", "must be Exists when key is empty")
            if operator == "Exists" and value_:
                self.fail(f"{item_path}.value", "must be empty when operator is Exists")
            effect = self.string(item.get("effect"), f"{item_path}.effect", default="")
            if effect and effect not in TAINT_EFFECTS:
                self.fail(f"{item_path}.effect", f"{effect!r} is not one of {', '.join(TAINT_EFFECTS)} (or empty for all)")
            seconds = self.seconds(item.get("tolerationSeconds"), f"{item_path}.tolerationSeconds")
            tolerations.append(Toleration(key, operator, value_, effect, seconds))
        return tuple(tolerations)


def selector_of(match_labels: Iterable[tuple[str, str]], expressions: Iterable[tuple[str, str, tuple[str, ...]]]) -> LabelSelector:
    return LabelSelector(tuple(sorted(set(match_labels))), tuple(sorted(set(expressions))))


def metadata_of(fields: Fields, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return fields.mapping(obj.get("metadata"), "metadata", required=True)


def object_ref(kind: str, obj: object, *, namespaced: bool, origin: str = "") -> str:
    """``Kind namespace/name`` for messages, falling back to the origin when unnamed."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        return f"{kind} ({origin})" if origin else f"{kind} (unnamed)"
    if namespaced:
        namespace = metadata.get("namespace")  # type: ignore[union-attr]
        return f"{kind} {namespace if isinstance(namespace, str) and namespace else 'default'}/{name}"
    return f"{kind} {name}"


def name_of(fields: Fields, metadata: Mapping[str, Any]) -> str:
    name: str = fields.string(metadata.get("name"), "metadata.name", required=True)
    return name


def checked_object(obj: object, kind: str, origin: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise SnapshotError(f"{kind} ({origin})" if origin else kind, "", f"expected a mapping, got {describe(obj)}")
    return obj
