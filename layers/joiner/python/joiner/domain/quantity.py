"""Kubernetes resource quantities, parsed exactly.

A quantity is ``<signed number><suffix>`` where the suffix is a binary SI suffix
(Ki, Mi, Gi, Ti, Pi, Ei), a decimal SI suffix (n, u, m, "", k, M, G, T, P, E) or a
decimal exponent (``e3``, ``E-2``). We parse to :class:`fractions.Fraction` so that
``0.1 + 0.2`` style errors never creep into packing decisions, then store resources as
integer *milli-units* (``"100m"`` CPU is 100, ``"1Gi"`` memory is 1024**3 * 1000), which
is how Kubernetes itself compares CPU. Values finer than a milli-unit round up, the same
direction the API server rounds requests.

Like the API server, we bound quantities: the text is at most :data:`MAX_QUANTITY_CHARS`
characters and the value at most :data:`MAX_QUANTITY` base units in magnitude (2**63 - 1,
the int64 ``Value()`` of a Kubernetes quantity), so no later arithmetic or conversion to
float can overflow.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["QuantityError", "parse_quantity", "to_milli", "format_milli", "parse_milli", "MAX_QUANTITY", "MAX_QUANTITY_CHARS"]

#: Largest magnitude in base units (int64, as Kubernetes' ``Quantity.Value()``).
MAX_QUANTITY = 2**63 - 1
#: Longest quantity text read.
MAX_QUANTITY_CHARS = 64


class QuantityError(ValueError):
    """A resource quantity string that Kubernetes would reject."""


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity into an exact fraction of base units.

    Integers and floats (as YAML produces for ``cpu: 2`` or ``cpu: 0.5``) are accepted.
    Raises :class:`QuantityError` with the offending text on anything else.
    """
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}: expected a number or a quantity string")
    if isinstance(value, int):
        return _bounded(Fraction(value), value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"invalid quantity {value!r}: not a finite number")
        return _bounded(Fraction(str(value)), value)
    if not isinstance(value, str):
        raise QuantityError(f"invalid quantity {value!r}: expected a number or a quantity string")
    text = value.strip()
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(f"invalid quantity {text[:16]!r}...: longer than {MAX_QUANTITY_CHARS} characters")
    match = _PATTERN.match(text)
    if match is None:
        raise QuantityError(f"invalid quantity {value!r}: expected <number><suffix> such as 100m, 1.5, 2Gi, 1e3")
    number = Fraction(match.group("number"))
    if match.group("exp"):
        exponent = int(match.group("exp")[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"invalid quantity {value!r}: exponent out of range")
        number *= Fraction(10) ** exponent
    else:
        suffix = match.group("suffix") or ""
        number *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return _bounded(-number if match.group("sign") == "-" else number, value)


def _bounded(quantity: Fraction, value: object) -> Fraction:
    if abs(quantity) > MAX_QUANTITY:
        raise QuantityError(f"invalid quantity {value!r}: out of range (at most {MAX_QUANTITY} base units, as Kubernetes)")
    return quantity


def to_milli(quantity: Fraction) -> int:
    """Convert base units to integer milli-units, rounding up (as the API server does)."""
    return math.ceil(quantity * 1000)


def parse_milli(value: str | int | float) -> int:
    """Parse a quantity straight to integer milli-units."""
    if type(value) is str:
        return _milli_of_text(value)
    return to_milli(parse_quantity(value))


@lru_cache(maxsize=4096)
def _milli_of_text(text: str) -> int:
    """:func:`parse_milli` of a string, memoised: a cluster repeats a few hundred request
    strings across thousands of pods, and exact ``Fraction`` arithmetic is the dearest part
    of reading a pod. Errors are not cached (``lru_cache`` stores only returned values)."""
    return to_milli(parse_quantity(text))


def format_milli(milli: int, resource: str = "") -> str:
    """Render milli-units for humans: CPU as cores or millicores, memory in Gi/Mi, others plainly."""
    if resource == "memory" or resource.endswith("storage"):
        value = Fraction(milli, 1000)
        for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= factor and value % factor == 0:
                return f"{value // factor}{suffix}"
        if value >= 2**30:
            return f"{float(value / 2**30):.2f}Gi"
        if value >= 2**20:
            return f"{float(value / 2**20):.1f}Mi"
        return str(math.ceil(value))
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"
