"""Node requirements algebra on label keys.

Follows Karpenter's ``scheduling.Requirement``: a requirement on one key is a set of
allowed values, stored either as an explicit set (``In``; empty means ``DoesNotExist``)
or as a complement (``NotIn``; empty complement means ``Exists``), optionally bounded by
integer ``Gt``/``Lt`` limits. ``Gte n`` and ``Lte n`` are stored as ``Gt n-1`` and
``Lt n+1``. ``minValues`` asks that a launch keep at least that many distinct values of
the key among its candidate instance types.

:class:`Requirements` is a conjunction keyed by label key (Karpenter aliases normalised).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from joiner.domain.labels import WELL_KNOWN_LABELS, normalize_label_key

__all__ = ["RequirementError", "Requirement", "Requirements", "OPERATORS"]

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")


class RequirementError(ValueError):
    """A malformed requirement (unknown operator, non-integer bound, missing values)."""


def _as_int(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """Allowed values for one label key."""

    key: str
    complement: bool
    values: frozenset[str]
    greater_than: int | None = None
    less_than: int | None = None
    min_values: int | None = None

    @classmethod
    def create(cls, key: str, operator: str, values: Iterable[str] = (), min_values: int | None = None) -> Requirement:
        """Build from a Kubernetes ``NodeSelectorRequirement``-style operator and values."""
        key = normalize_label_key(key)
        values = tuple(str(v) for v in values)
        if min_values is not None and (not isinstance(min_values, int) or isinstance(min_values, bool) or min_values < 1):
            raise RequirementError(f"requirement {key}: minValues must be a positive integer, got {min_values!r}")
        if operator == "In":
            if not values:
                raise RequirementError(f"requirement {key}: operator In needs at least one value")
            return cls(key, False, frozenset(values), None, None, min_values)
        if operator == "NotIn":
            if not values:
                # Kubernetes rejects it; read as a complement it would silently mean Exists.
                raise RequirementError(f"requirement {key}: operator NotIn needs at least one value")
            return cls(key, True, frozenset(values), None, None, min_values)
        if operator == "Exists":
            if values:
                raise RequirementError(f"requirement {key}: operator Exists takes no values")
            return cls(key, True, frozenset(), None, None, min_values)
        if operator == "DoesNotExist":
            if values:
                raise RequirementError(f"requirement {key}: operator DoesNotExist takes no values")
            return cls(key, False, frozenset(), None, None, min_values)
        if operator in ("Gt", "Lt", "Gte", "Lte"):
            if len(values) != 1 or _as_int(values[0]) is None:
                raise RequirementError(f"requirement {key}: operator {operator} needs exactly one integer value, got {list(values)}")
            bound = int(values[0])
            if operator == "Gt":
                return cls(key, True, frozenset(), bound, None, min_values)
            if operator == "Gte":
                return cls(key, True, frozenset(), bound - 1, None, min_values)
            if operator == "Lt":
                return cls(key, True, frozenset(), None, bound, min_values)
            return cls(key, True, frozenset(), None, bound + 1, min_values)
        raise RequirementError(f"requirement {key}: unknown operator {operator!r} (expected one of {', '.join(OPERATORS)})")

    @classmethod
    def exists(cls, key: str) -> Requirement:
        return cls(normalize_label_key(key), True, frozenset())

    @classmethod
    def in_values(cls, key: str, *values: str) -> Requirement:
        return cls.create(key, "In", values)

    def _within_bounds(self, value: str) -> bool:
        if self.greater_than is None and self.less_than is None:
            return True
        number = _as_int(value)
        if number is None:
            return False
        if self.greater_than is not None and number <= self.greater_than:
            return False
        if self.less_than is not None and number >= self.less_than:
            return False
        return True

    def has(self, value: str) -> bool:
        """True when ``value`` is allowed."""
        if self.complement:
            return value not in self.values and self._within_bounds(value)
        return value in self.values and self._within_bounds(value)

    def intersection(self, other: Requirement) -> Requirement:
        """The values allowed by both (``min_values`` is the larger of the two)."""
        complement = self.complement and other.complement
        greater_than = _max_opt(self.greater_than, other.greater_than)
        less_than = _min_opt(self.less_than, other.less_than)
        min_values = _max_opt(self.min_values, other.min_values)
        if greater_than is not None and less_than is not None and greater_than + 1 >= less_than:
            return Requirement(self.key, False, frozenset(), None, None, min_values)
        if self.complement and other.complement:
            values = self.values | other.values
        elif self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        if greater_than is not None or less_than is not None:
            bounded = Requirement(self.key, True, frozenset(), greater_than, less_than)
            values = frozenset(v for v in values if bounded._within_bounds(v))
        if not complement:
            greater_than = less_than = None
        return Requirement(self.key, complement, frozenset(values), greater_than, less_than, min_values)

    def is_empty(self) -> bool:
        """True when no value at all is allowed (the key must be absent)."""
        return not self.complement and not self.values

    def operator(self) -> str:
        """The Kubernetes operator this requirement reads as (bounds read as Exists-like Gt/Lt)."""
        if self.complement:
            if self.values:
                return "NotIn"
            if self.greater_than is not None:
                return "Gt"
            if self.less_than is not None:
                return "Lt"
            return "Exists"
        return "In" if self.values else "DoesNotExist"

    def single_value(self) -> str | None:
        """The one allowed value when exactly one is allowed, else None."""
        if not self.complement and len(self.values) == 1:
            return next(iter(self.values))
        return None

    def any_value(self) -> str | None:
        """A deterministic allowed value for concrete sets (smallest), None for complements."""
        if not self.complement and self.values:
            return min(self.values)
        return None

    def to_node_selector(self) -> list[dict[str, object]]:
        """Kubernetes ``NodeSelectorRequirement`` dicts equivalent to this requirement."""
        out: list[dict[str, object]] = []
        if not self.complement:
            if self.values:
                item: dict[str, object] = {"key": self.key, "operator": "In", "values": sorted(self.values)}
            else:
                item = {"key": self.key, "operator": "DoesNotExist"}
            if self.min_values is not None:
                item["minValues"] = self.min_values
            return [item]
        if self.values:
            out.append({"key": self.key, "operator": "NotIn", "values": sorted(self.values)})
        if self.greater_than is not None:
            out.append({"key": self.key, "operator": "Gt", "values": [str(self.greater_than)]})
        if self.less_than is not None:
            out.append({"key": self.key, "operator": "Lt", "values": [str(self.less_than)]})
        if not out:
            out.append({"key": self.key, "operator": "Exists"})
        if self.min_values is not None:
            out[0]["minValues"] = self.min_values
        return out

    def __str__(self) -> str:
        op = self.operator()
        if op in ("In", "NotIn"):
            return f"{self.key} {op} [{', '.join(sorted(self.values))}]"
        if op == "Gt":
            return f"{self.key} Gt {self.greater_than}" + (f" Lt {self.less_than}" if self.less_than is not None else "")
        if op == "Lt":
            return f"{self.key} Lt {self.less_than}"
        return f"{self.key} {op}"


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


_NEGATIVE_OPERATORS = frozenset({"NotIn", "DoesNotExist"})


class Requirements(Mapping[str, Requirement]):
    """An immutable conjunction of requirements, one per (normalised) key.

    Adding a requirement for a key already present intersects the two.
    """

    __slots__ = ("_by_key", "_hash")

    def __init__(self, requirements: Iterable[Requirement] = ()) -> None:
        by_key: dict[str, Requirement] = {}
        for requirement in requirements:
            existing = by_key.get(requirement.key)
            by_key[requirement.key] = requirement if existing is None else existing.intersection(requirement)
        self._by_key = by_key
        self._hash: int | None = None

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Requirements:
        """Requirements that pin every label to its value (``In [value]``)."""
        return cls(Requirement(normalize_label_key(k), False, frozenset((str(v),))) for k, v in labels.items())

    @classmethod
    def from_node_selector_terms(cls, items: Iterable[Mapping[str, object]]) -> Requirements:
        """From ``[{"key", "operator", "values", "minValues"}]`` dicts."""
        reqs = []
        for item in items:
            values = item.get("values") or []
            if not isinstance(values, list):
                raise RequirementError(f"requirement {item.get('key')}: values must be a list")
            key = item.get("key")
            if not isinstance(key, str) or not key:
                raise RequirementError("requirement: key must be a non-empty string")
            reqs.append(Requirement.create(key, str(item.get("operator")), [str(v) for v in values], item.get("minValues")))  # type: ignore[arg-type]
        return cls(reqs)

    def __getitem__(self, key: str) -> Requirement:
        return self._by_key[key]

    def get_or_exists(self, key: str) -> Requirement:
        """The requirement on ``key``, or ``Exists`` when unconstrained (Karpenter's ``Get``)."""
        found = self._by_key.get(key)
        return found if found is not None else Requirement(key, True, frozenset())

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Requirements):
            return self._by_key == other._by_key
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._by_key.items()))
        return self._hash

    def add(self, *requirements: Requirement) -> Requirements:
        return Requirements([*self._by_key.values(), *requirements])

    def intersect(self, other: Requirements) -> Requirements:
        """Conjunction of both."""
        if not other:
            return self
        if not self:
            return other
        return Requirements([*self._by_key.values(), *other._by_key.values()])

    def conflicts(self, other: Requirements) -> list[str]:
        """Keys on which the two cannot both hold (Karpenter's ``Intersects``), sorted.

        An empty intersection is still fine when both sides only forbid values
        (``NotIn``/``DoesNotExist``): an absent label satisfies both.
        """
        bad = []
        for key in self._by_key.keys() & other._by_key.keys():
            mine, theirs = self._by_key[key], other._by_key[key]
            merged = mine.intersection(theirs)
            if merged.complement or merged.values:
                continue
            if theirs.operator() in _NEGATIVE_OPERATORS and mine.operator() in _NEGATIVE_OPERATORS:
                continue
            bad.append(key)
        return sorted(bad)

    def compatible(self, other: Requirements, allow_undefined: frozenset[str] = WELL_KNOWN_LABELS) -> str | None:
        """Why ``other`` (e.g. a pod's) cannot be met by ``self`` (e.g. a NodePool's), or None.

        Keys ``other`` constrains must be defined by ``self`` unless they are in
        ``allow_undefined`` or ``other`` only forbids values on them; keys both define
        must intersect.
        """
        for key in sorted(other._by_key):
            if key in self._by_key or key in allow_undefined:
                continue
            if other._by_key[key].operator() in _NEGATIVE_OPERATORS:
                continue
            return f"label {key!r} does not have known values"
        conflicts = self.conflicts(other)
        if conflicts:
            key = conflicts[0]
            return f"incompatible requirements, key {key}, {other._by_key[key]} not in {self._by_key[key]}"
        return None

    def matches_labels(self, labels: Mapping[str, str]) -> bool:
        """True when a node with ``labels`` satisfies every requirement."""
        for key, requirement in self._by_key.items():
            value = labels.get(key)
            if value is None:
                if requirement.complement and not requirement.values and requirement.greater_than is None and requirement.less_than is None:
                    return False  # Exists
                if requirement.complement:
                    if requirement.greater_than is not None or requirement.less_than is not None:
                        return False
                    continue  # NotIn with absent label is satisfied
                if requirement.values:
                    return False
                continue  # DoesNotExist
            if not requirement.has(value):
                return False
        return True

    def labels(self) -> dict[str, str]:
        """Labels implied by single-valued ``In`` requirements (what a node launched for them carries)."""
        out = {}
        for key, requirement in self._by_key.items():
            value = requirement.single_value()
            if value is not None:
                out[key] = value
        return out

    def to_node_selector(self) -> list[dict[str, object]]:
        return [item for key in sorted(self._by_key) for item in self._by_key[key].to_node_selector()]

    def __repr__(self) -> str:
        return "Requirements(" + "; ".join(str(self._by_key[k]) for k in sorted(self._by_key)) + ")"


EMPTY_REQUIREMENTS = Requirements()
