"""Go-style durations (``30s``, ``5m``, ``720h``, ``1h30m``, ``1.5h``, ``300ms``) and ``Never``.

NodePool fields such as ``expireAfter`` and ``consolidateAfter`` use Go's
``time.ParseDuration`` syntax, as Karpenter's do. We accept the same units (``ns``,
``us``/``µs``, ``ms``, ``s``, ``m``, ``h``), decimal fractions and concatenated parts,
but no sign: configuration durations are never negative. ``Never`` means "no
duration" and parses to ``None``. As in Go, a duration is at most
:data:`MAX_DURATION` (2562047h47m16.854775807s, about 292 years), and the text is at most
:data:`MAX_DURATION_CHARS` characters. Values are exact down to the microsecond (the
resolution of :class:`datetime.timedelta`); finer parts round to the nearest
microsecond.

Durations a Kubernetes object gives in whole seconds (``terminationGracePeriodSeconds``,
``tolerationSeconds``: any int64 to the API server) are clamped by :func:`clamp_seconds` to
``[0, MAX_SECONDS]`` where they are read, and Go durations in objects the API server
admitted (``expireAfter: 99999999999999h`` matches the CRD's pattern) are read with
``parse_duration(..., clamp=True)``: both are longer than any time Joiner reasons about, so
nothing changes except that adding them to a time (at most
:data:`joiner.domain.bounded.LATEST_TIME`) cannot overflow.
"""

from __future__ import annotations

import re
from datetime import timedelta
from fractions import Fraction

__all__ = [
    "DurationError",
    "parse_duration",
    "format_duration",
    "go_duration_nanoseconds",
    "clamp_seconds",
    "NEVER",
    "MAX_DURATION",
    "MAX_DURATION_CHARS",
    "MAX_SECONDS",
]

NEVER = "Never"

_UNIT_MICROSECONDS: dict[str, Fraction] = {
    "ns": Fraction(1, 1000),
    "us": Fraction(1),
    "µs": Fraction(1),  # U+00B5 micro sign
    "μs": Fraction(1),  # U+03BC Greek mu
    "ms": Fraction(1000),
    "s": Fraction(10**6),
    "m": Fraction(60 * 10**6),
    "h": Fraction(3600 * 10**6),
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
#: Go's largest ``time.Duration`` (2**63 - 1 ns), truncated to microseconds: what Karpenter
#: accepts, and small enough to add to any time Joiner accepts (joiner.domain.bounded).
MAX_DURATION = timedelta(microseconds=(2**63 - 1) // 1000)
#: :data:`MAX_DURATION` in whole seconds (9,223,372,036: about 292 years).
MAX_SECONDS = MAX_DURATION // timedelta(seconds=1)
#: Longest duration text read (``2562047h47m16.854775807s`` is 24).
MAX_DURATION_CHARS = 64


class DurationError(ValueError):
    """A duration string that is not a non-negative Go duration or ``Never``."""


def parse_duration(value: object, *, clamp: bool = False) -> timedelta | None:
    """Parse a Go-style duration; ``"Never"`` gives ``None``.

    ``0`` (integer or string) is accepted, as Go accepts ``"0"``; any other number
    needs a unit. Raises :class:`DurationError` naming the value and what was expected.
    A duration longer than :data:`MAX_DURATION` is an error, as in Go, unless ``clamp``:
    then it reads as :data:`MAX_DURATION` (for objects the API server admitted, whose
    pattern allows any number of hours, where it means "longer than anything").
    """
    if isinstance(value, bool):
        raise DurationError(f"invalid duration {value!r}: expected a string such as 30s, 5m, 720h or Never")
    if isinstance(value, int):
        if value == 0:
            return timedelta(0)
        raise DurationError(f"invalid duration {value!r}: missing unit (write {value}s, {value}m or {value}h)")
    if not isinstance(value, str):
        raise DurationError(f"invalid duration {value!r}: expected a string such as 30s, 5m, 720h or Never")
    text = value.strip()
    if text == NEVER:
        return None
    if text == "0":
        return timedelta(0)
    if not text:
        raise DurationError("invalid duration '': expected a string such as 30s, 5m, 720h or Never")
    if len(text) > MAX_DURATION_CHARS:
        raise DurationError(f"invalid duration {text[:16]!r}...: longer than {MAX_DURATION_CHARS} characters")
    if text[0] in "+-":
        raise DurationError(f"invalid duration {value!r}: durations must not be signed")
    total = Fraction(0)
    position = 0
    while position < len(text):
        match = _PART.match(text, position)
        if match is None:
            raise DurationError(_explain(value, text[position:]))
        total += Fraction(match.group(1)) * _UNIT_MICROSECONDS[match.group(2)]
        position = match.end()
    microseconds = round(total)
    if microseconds > MAX_DURATION // timedelta(microseconds=1):
        if clamp:
            return MAX_DURATION
        raise DurationError(f"invalid duration {value!r}: too large (at most {format_duration(MAX_DURATION)}, as in Go)")
    return timedelta(microseconds=microseconds)


def clamp_seconds(value: int) -> int:
    """A whole-seconds duration from a user's object, clamped to ``[0, MAX_SECONDS]``: a
    negative one means none (as Kubernetes reads a negative ``tolerationSeconds``), and one
    longer than :data:`MAX_DURATION` outlasts any deadline or time Joiner accepts, so it
    behaves the same clamped while adding it to any such time never overflows."""
    return 0 if value < 0 else min(value, MAX_SECONDS)


_GO_UNIT_NANOSECONDS: dict[str, int] = {
    "ns": 1,
    "us": 1000,
    "µs": 1000,
    "μs": 1000,
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_GO_LIMIT = 1 << 63


def go_duration_nanoseconds(value: str) -> int:
    """Go's ``time.ParseDuration`` exactly, in nanoseconds: an optional sign, then ``0`` or
    ``<number><unit>`` parts; no spaces, no ``Never``; a fraction's nanoseconds truncated as Go
    truncates them; anything outside a signed 64-bit count of nanoseconds is an error.

    For values read the way Karpenter reads them (the ``do-not-disrupt`` annotation), where
    whatever Go refuses must be refused too; configuration fields use :func:`parse_duration`.
    """
    shown = value if len(value) <= 40 else value[:40] + "..."
    text = value
    negative = False
    if text[:1] in ("-", "+"):
        negative = text[0] == "-"
        text = text[1:]
    if text == "0":
        return 0
    if not text:
        raise DurationError(f"invalid duration {shown!r}")
    total = 0
    position = 0
    while position < len(text):
        integer, fraction, scale, position = _go_number(shown, text, position)
        end = position
        while end < len(text) and not (text[end] == "." or "0" <= text[end] <= "9"):
            end += 1
        unit = _GO_UNIT_NANOSECONDS.get(text[position:end])
        if unit is None:
            raise DurationError(f"invalid duration {shown!r}: unknown or missing unit {text[position:end]!r}")
        position = end
        if integer > _GO_LIMIT // unit:
            raise DurationError(f"invalid duration {shown!r}: too large")
        part = integer * unit
        if fraction:
            part += int(float(fraction) * (float(unit) / scale))  # Go computes this part in float64
        total += part
        if part > _GO_LIMIT or total > _GO_LIMIT:
            raise DurationError(f"invalid duration {shown!r}: too large")
    if negative:
        return -total
    if total > _GO_LIMIT - 1:
        raise DurationError(f"invalid duration {shown!r}: too large")
    return total


def _go_number(shown: str, text: str, position: int) -> tuple[int, int, float, int]:
    r"""One part's ``[0-9]*(\.[0-9]*)?`` as Go's leadingInt and leadingFraction read it."""
    start = position
    integer = 0
    while position < len(text) and "0" <= text[position] <= "9":
        integer = integer * 10 + ord(text[position]) - ord("0")
        if integer > _GO_LIMIT:
            raise DurationError(f"invalid duration {shown!r}: too large")
        position += 1
    digits_before = position > start
    fraction, scale, digits_after = 0, 1.0, False
    if position < len(text) and text[position] == ".":
        position += 1
        overflow = False
        while position < len(text) and "0" <= text[position] <= "9":
            digits_after = True
            digit = ord(text[position]) - ord("0")
            position += 1
            if overflow or fraction > (_GO_LIMIT - 1) // 10 or fraction * 10 + digit > _GO_LIMIT:
                overflow = True  # Go ignores the digits it cannot hold
                continue
            fraction = fraction * 10 + digit
            scale *= 10
    if not (digits_before or digits_after):
        raise DurationError(f"invalid duration {shown!r}: expected a number at {text[start : start + 8]!r}")
    return integer, fraction, scale, position


def _explain(value: str, rest: str) -> str:
    hint = "expected <number><unit> parts with units ns, us, ms, s, m, h (e.g. 1h30m) or Never"
    if re.fullmatch(r"\d+(?:\.\d+)?", rest):
        hint = "missing unit after the last number (units: ns, us, ms, s, m, h)"
    elif re.match(r"\d+(?:\.\d+)?d", rest):
        hint = "Go durations have no day unit; write hours (30 days = 720h)"
    elif rest.lower() == "never":
        hint = "write Never with a capital N"
    return f"invalid duration {value!r}: {hint}"


def format_duration(duration: timedelta | None) -> str:
    """Render as a compact Go-style duration that :func:`parse_duration` reads back.

    ``None`` is ``Never``; zero is ``0s``; otherwise hours, minutes and seconds with zero
    parts dropped (``1h30m``, ``720h``, ``1m0.5s``, ``300ms``, ``250us``).
    """
    if duration is None:
        return NEVER
    if duration < timedelta(0):
        return "-" + format_duration(-duration)
    total = duration // timedelta(microseconds=1)
    if total == 0:
        return "0s"
    hours, rest = divmod(total, 3600 * 10**6)
    minutes, rest = divmod(rest, 60 * 10**6)
    seconds, micro = divmod(rest, 10**6)
    out = ""
    if hours:
        out += f"{hours}h"
    if minutes:
        out += f"{minutes}m"
    if micro == 0:
        if seconds:
            out += f"{seconds}s"
    elif seconds or out:
        out += f"{seconds}.{micro:06d}".rstrip("0") + "s"
    elif micro % 1000 == 0:
        out += f"{micro // 1000}ms"
    else:
        out += f"{micro}us"
    return out
