"""Resource vectors (cpu, memory, pods, extended resources) in integer milli-units."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from joiner.domain.quantity import QuantityError, format_milli, parse_milli

__all__ = ["Resources", "CPU", "MEMORY", "PODS", "EPHEMERAL_STORAGE", "NVIDIA_GPU", "AMD_GPU", "NEURON", "NEURON_CORE", "HABANA_GAUDI", "EFA", "POD_ENI"]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
EPHEMERAL_STORAGE = "ephemeral-storage"
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
NEURON = "aws.amazon.com/neuron"
NEURON_CORE = "aws.amazon.com/neuroncore"
HABANA_GAUDI = "habana.ai/gaudi"
EFA = "vpc.amazonaws.com/efa"
#: Branch network interfaces for security groups for pods (the VPC resource controller's).
POD_ENI = "vpc.amazonaws.com/pod-eni"


class Resources(Mapping[str, int]):
    """An immutable mapping from resource name to integer milli-units.

    Missing names read as zero. Zero entries are dropped so equal vectors compare and
    hash equal regardless of how they were built.
    """

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        source = items.items() if isinstance(items, Mapping) else items
        self._items: dict[str, int] = {name: int(value) for name, value in source if value}
        self._hash: int | None = None

    @classmethod
    def parse(cls, quantities: Mapping[str, Any] | None, *, where: str = "resources") -> Resources:
        """Build from Kubernetes quantity strings, e.g. ``{"cpu": "500m", "memory": "1Gi"}``.

        Raises :class:`QuantityError` naming ``where`` and the resource on a bad value.
        """
        if not quantities:
            return EMPTY
        if not isinstance(quantities, Mapping):
            raise QuantityError(f"{where}: expected a mapping of resource name to quantity")
        parsed: dict[str, int] = {}
        for name, value in quantities.items():
            try:
                parsed[str(name)] = parse_milli(value)
            except QuantityError as error:
                raise QuantityError(f"{where}.{name}: {error}") from None
        return cls(parsed)

    @classmethod
    def keeping_zeros(cls, items: Mapping[str, int]) -> Resources:
        """A vector that keeps explicit zero entries.

        For NodePool limits, where ``cpu: 0`` (launch nothing with CPU) differs from an
        absent limit (unlimited). Such a vector is not equal to one without the zeros;
        arithmetic on it returns ordinary (zero-dropping) vectors.
        """
        made = cls()
        made._items = {str(name): int(value) for name, value in items.items()}
        return made

    @classmethod
    def total(cls, vectors: Iterable[Mapping[str, int]]) -> Resources:
        """The sum of ``vectors``, built once (adding them one by one copies every step)."""
        merged: dict[str, int] = {}
        get = merged.get
        for vector in vectors:
            for name, value in vector.items():
                merged[name] = get(name, 0) + value
        return cls(merged)

    @classmethod
    def of(cls, **milli: int) -> Resources:
        """Convenience constructor in milli-units; ``ephemeral_storage`` style names map dashes."""
        return cls({name.replace("_", "-"): value for name, value in milli.items()})

    def __getitem__(self, name: str) -> int:
        return self._items.get(name, 0)

    def get(self, name: str, default: int = 0) -> int:  # type: ignore[override]
        return self._items.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._items == other._items
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __add__(self, other: Mapping[str, int]) -> Resources:
        merged = dict(self._items)
        for name, value in other.items():
            merged[name] = merged.get(name, 0) + value
        return Resources(merged)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        merged = dict(self._items)
        for name, value in other.items():
            merged[name] = merged.get(name, 0) - value
        return Resources(merged)

    def maximum(self, other: Mapping[str, int]) -> Resources:
        """Per-resource maximum."""
        merged = dict(self._items)
        for name, value in other.items():
            if value > merged.get(name, 0):
                merged[name] = value
        return Resources(merged)

    def fits_in(self, capacity: Mapping[str, int]) -> bool:
        """True when every requested resource is within ``capacity`` (absent capacity is zero)."""
        return all(value <= capacity.get(name, 0) for name, value in self._items.items() if value > 0)

    def exceeding(self, capacity: Mapping[str, int]) -> list[str]:
        """Names of resources that do not fit in ``capacity``, sorted."""
        return sorted(name for name, value in self._items.items() if value > 0 and value > capacity.get(name, 0))

    def any_negative(self) -> bool:
        return any(value < 0 for value in self._items.values())

    def as_quantities(self) -> dict[str, str]:
        """Render as Kubernetes quantity strings (sorted by name)."""
        return {name: format_milli(self._items[name], name) for name in sorted(self._items)}

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={value}" for name, value in sorted(self._items.items()))
        return f"Resources({inner})"


EMPTY = Resources()
