"""Kubernetes quantities and resource vectors."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joiner.domain.quantity import QuantityError, format_milli, parse_milli, parse_quantity, to_milli
from joiner.domain.resources import EMPTY, Resources

GI = 2**30


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("0", 0),
        ("1", 1000),
        ("100m", 100),
        ("1.5", 1500),
        (".5", 500),
        ("1.", 1000),
        ("+2", 2000),
        ("1Ki", 1024 * 1000),
        ("1Mi", 2**20 * 1000),
        ("2Gi", 2 * GI * 1000),
        ("1Ti", 2**40 * 1000),
        ("1Pi", 2**50 * 1000),
        ("1Ei", 2**60 * 1000),
        ("1.5Gi", 3 * 2**29 * 1000),
        ("1k", 10**6),
        ("1M", 10**9),
        ("1G", 10**12),
        ("1T", 10**15),
        ("1P", 10**18),
        ("1E", 10**21),
        ("250u", 1),  # 0.25 milli rounds up, as the API server rounds requests
        ("1500u", 2),
        ("500n", 1),
        ("1000000n", 1),
        ("1e3", 10**6),
        ("1E-2", 10),
        ("12e+1", 120_000),
        ("2.5e-3", 3),  # 2.5 milli rounds up
        ("  1Gi ", GI * 1000),
    ],
)
def test_parses_every_suffix_to_milli_units(text: str, milli: int) -> None:
    assert parse_milli(text) == milli


def test_negative_quantities_keep_their_sign() -> None:
    assert parse_quantity("-1") == -1
    assert parse_milli("-100m") == -100
    assert parse_milli("-1Ki") == -1024 * 1000


def test_numbers_from_yaml_are_exact() -> None:
    assert parse_quantity(2) == 2
    assert parse_quantity(0.1) == Fraction(1, 10)  # not 0.1000000000000000055...
    assert parse_milli(0.5) == 500
    assert to_milli(Fraction(1, 3)) == 334


@pytest.mark.parametrize("bad", ["1.2.3", "abc", "1Gb", "", "  ", "1 Gi", "Gi", "1e", "e3", "1ki", "1KI", "--1", "1e31", "0x10", "1m1"])
def test_malformed_strings_are_rejected_with_the_text(bad: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(bad)
    assert repr(bad) in str(raised.value)


@pytest.mark.parametrize("bad", [None, True, False, float("nan"), float("inf"), [1], {"cpu": 1}])
def test_non_quantities_are_rejected(bad: object) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(bad)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=10**15))
def test_format_milli_round_trips_cpu(milli: int) -> None:
    assert parse_milli(format_milli(milli, "cpu")) == milli


def test_format_milli_for_humans() -> None:
    assert format_milli(1500, "cpu") == "1500m"
    assert format_milli(2000, "cpu") == "2"
    assert format_milli(GI * 1000, "memory") == "1Gi"
    assert format_milli(1536 * 2**20 * 1000, "memory") == "1536Mi"
    assert format_milli(3 * 2**10 * 1000, "ephemeral-storage") == "3Ki"
    assert format_milli(1000, "nvidia.com/gpu") == "1"


class TestResources:
    def test_missing_names_read_zero_and_zero_entries_are_dropped(self) -> None:
        vector = Resources({"cpu": 100, "memory": 0})
        assert vector["memory"] == 0
        assert "memory" not in vector
        assert vector == Resources.of(cpu=100)
        assert hash(vector) == hash(Resources.of(cpu=100))
        assert Resources() == EMPTY and not EMPTY

    def test_arithmetic(self) -> None:
        a = Resources.of(cpu=1000, memory=2000)
        b = Resources.of(cpu=250, pods=1000)
        assert a + b == Resources.of(cpu=1250, memory=2000, pods=1000)
        assert a - b == Resources.of(cpu=750, memory=2000, pods=-1000)
        assert (a - b).any_negative()
        assert not (a + b).any_negative()
        assert a - a == EMPTY
        assert a.maximum(Resources.of(cpu=500, memory=3000, pods=1)) == Resources.of(cpu=1000, memory=3000, pods=1)

    def test_operations_do_not_mutate(self) -> None:
        a = Resources.of(cpu=1)
        _ = a + Resources.of(cpu=5)
        assert a == Resources.of(cpu=1)

    def test_fits_in_and_exceeding(self) -> None:
        request = Resources({"cpu": 500, "nvidia.com/gpu": 1000})
        assert request.fits_in({"cpu": 500, "nvidia.com/gpu": 1000, "memory": 1})
        assert not request.fits_in({"cpu": 4000})  # absent capacity is zero
        assert request.exceeding({"cpu": 400}) == ["cpu", "nvidia.com/gpu"]
        assert Resources({"cpu": -5}).fits_in({})  # negative (freed) amounts never exceed

    def test_parse_names_the_field_on_a_bad_value(self) -> None:
        assert Resources.parse({"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 1}) == Resources({"cpu": 500, "memory": GI * 1000, "nvidia.com/gpu": 1000})
        assert Resources.parse(None) is EMPTY
        with pytest.raises(QuantityError, match=r"^spec\.limits\.memory: invalid quantity '1Gb'"):
            Resources.parse({"memory": "1Gb"}, where="spec.limits")
        with pytest.raises(QuantityError, match="expected a mapping"):
            Resources.parse(["cpu"], where="x")  # type: ignore[arg-type]

    def test_as_quantities_is_sorted_and_readable(self) -> None:
        vector = Resources({"pods": 3000, "cpu": 1500, "memory": 2 * GI * 1000})
        assert list(vector.as_quantities().items()) == [("cpu", "1500m"), ("memory", "2Gi"), ("pods", "3")]

    def test_keeping_zeros_preserves_an_explicit_zero_limit(self) -> None:
        limits = Resources.keeping_zeros({"cpu": 0, "memory": 5})
        assert "cpu" in limits and limits["cpu"] == 0
        assert dict(limits.items()) == {"cpu": 0, "memory": 5}
        assert limits != Resources.of(memory=5)  # a zero limit is not the same as no limit
        assert Resources.of(cpu=1).exceeding(limits) == ["cpu"]
        assert EMPTY.keeping_zeros({}) == EMPTY and Resources() == EMPTY  # the shared empty vector is untouched
