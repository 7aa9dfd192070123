"""Go-style durations."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.durations import DurationError, format_duration, go_duration_nanoseconds, parse_duration


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


# Each expected value is what Go 1.26's time.ParseDuration returns (None: an error); checked
# against Go on 20,000 random strings over these characters when go_duration_nanoseconds was written.
@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("0", 0),
        ("-0", 0),
        ("+0", 0),
        ("0s", 0),
        ("1ns", 1),
        ("+30m", 30 * 60 * 10**9),
        ("-30m", -30 * 60 * 10**9),
        ("5.h", 5 * 3600 * 10**9),
        (".5h", 1800 * 10**9),
        ("1µs", 1000),
        ("1μs", 1000),
        ("0.9ns", 0),
        ("1.0000000001s", 10**9),
        ("3m3.3333333333333333333333333s", 183333333333),
        ("2562047h47m16.854775807s", 2**63 - 1),
        ("-2562047h47m16.854775808s", -(2**63)),
        ("9223372036854775807ns", 2**63 - 1),
        ("", None),
        ("+", None),
        (".", None),
        (".s", None),
        (" 30m", None),
        ("30m ", None),
        ("30 m", None),
        ("1d", None),
        ("Never", None),
        ("true", None),
        ("1e3s", None),
        ("30", None),
        ("--1s", None),
        ("2562047h47m16.854775808s", None),
        ("9223372036854775808ns", None),
        ("99999999999999999999h", None),
    ],
)
def test_go_duration_nanoseconds_is_go_parse_duration(text: str, nanoseconds: int | None) -> None:
    if nanoseconds is None:
        with pytest.raises(DurationError):
            go_duration_nanoseconds(text)
    else:
        assert go_duration_nanoseconds(text) == nanoseconds


@given(st.integers(min_value=0, max_value=2**63 - 1), st.sampled_from(["", "+", "-"]))
def test_go_duration_nanoseconds_reads_every_int64_count_of_nanoseconds(count: int, sign: str) -> None:
    assert go_duration_nanoseconds(f"{sign}{count}ns") == (-count if sign == "-" else count)


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=10_000)))
def test_go_duration_nanoseconds_agrees_with_parse_duration_on_what_both_accept(duration: timedelta) -> None:
    assert go_duration_nanoseconds(format_duration(duration)) == duration // timedelta(microseconds=1) * 1000
