"""Go-style durations."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.durations import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("720h", timedelta(days=30)),
        ("1h30m", timedelta(minutes=90)),
        ("1.5h", timedelta(minutes=90)),
        ("0s", timedelta(0)),
        ("0", timedelta(0)),
        (0, timedelta(0)),
        ("300ms", timedelta(milliseconds=300)),
        ("2us", timedelta(microseconds=2)),
        ("2µs", timedelta(microseconds=2)),
        ("1500ns", timedelta(microseconds=2)),  # 1.5 us rounds to even
        ("1h0m0s", timedelta(hours=1)),
        ("1m30.5s", timedelta(seconds=90.5)),
        (".5s", timedelta(milliseconds=500)),
        ("2h45m10s", timedelta(hours=2, minutes=45, seconds=10)),
        ("Never", None),
        (" 8h ", timedelta(hours=8)),
    ],
)
def test_parses_go_durations(text: object, expected: timedelta | None) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("bad", "hint"),
    [
        ("30d", "no day unit"),
        ("10", "missing unit"),
        (10, "missing unit"),
        ("-1h", "must not be signed"),
        ("+1h", "must not be signed"),
        ("never", "capital N"),
        ("", "expected a string"),
        ("1h 30m", "units ns, us, ms, s, m, h"),
        ("h", "units"),
        ("1.2.3s", "units"),
        ("1H", "units"),
        (None, "expected a string"),
        (True, "expected a string"),
        (1.5, "expected a string"),
        ("99999999999999h", "too large"),
    ],
)
def test_rejects_with_a_clear_message(bad: object, hint: str) -> None:
    with pytest.raises(DurationError) as raised:
        parse_duration(bad)
    message = str(raised.value)
    assert message.startswith(f"invalid duration {bad!r}")
    assert hint in message
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("duration", "text"),
    [
        (None, "Never"),
        (timedelta(0), "0s"),
        (timedelta(hours=720), "720h"),
        (timedelta(minutes=90), "1h30m"),
        (timedelta(hours=1, seconds=5), "1h5s"),
        (timedelta(milliseconds=300), "300ms"),
        (timedelta(microseconds=250), "250us"),
        (timedelta(seconds=60.5), "1m0.5s"),
        (timedelta(seconds=-30), "-30s"),
    ],
)
def test_formats_compactly(duration: timedelta | None, text: str) -> None:
    assert format_duration(duration) == text


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=10_000)))
def test_format_then_parse_round_trips(duration: timedelta) -> None:
    assert parse_duration(format_duration(duration)) == duration
