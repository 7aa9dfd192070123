"""The bounded JSON and YAML readers (joiner.domain.bounded): limits hold for the pure-Python
loader and for libyaml's, and inside the limits the data is what PyYAML/json would give."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.domain.bounded import (
    MAX_INT,
    InputError,
    InputLimits,
    bounded_yaml_loader,
    json_depth,
    load_json,
    load_yaml,
    load_yaml_all,
)
from joiner.domain.durations import MAX_DURATION, DurationError, parse_duration
from joiner.domain.quantity import QuantityError, parse_quantity

LOADERS = [yaml.SafeLoader] + ([yaml.CSafeLoader] if getattr(yaml, "CSafeLoader", None) else [])
SMALL = InputLimits(max_chars=10_000, max_depth=5, alias_node_floor=50)


@pytest.fixture(params=LOADERS, ids=lambda base: base.__name__)
def loader(request: pytest.FixtureRequest) -> type:
    return bounded_yaml_loader(request.param)


def problem(text: str, loader: type, limits: InputLimits = SMALL) -> InputError:
    with pytest.raises(InputError) as raised:
        load_yaml_all(text, limits, loader)
    return raised.value


def test_depth_counts_collections(loader: type) -> None:
    assert load_yaml("a: [[[[1]]]]\n", SMALL, loader) == {"a": [[[[1]]]]}
    error = problem("a: [[[[[1]]]]]\n", loader)
    assert (error.line, error.column) == (1, 8) and error.problem == "nested more than 5 levels deep"


def test_block_nesting_on_one_line_is_counted(loader: type) -> None:
    error = problem("- - - - - - 1\n", loader)
    assert "nested more than 5 levels deep" in str(error)


def test_an_alias_counts_as_deep_as_its_anchor(loader: type) -> None:
    assert load_yaml("a: &x [[1]]\nb: [[*x]]\n", SMALL, loader) == {"a": [[1]], "b": [[[[1]]]]}
    error = problem("a: &x [[1]]\nb: [[[*x]]]\n", loader)
    assert (error.line, error.column) == (2, 7) and "alias *x expands to more than 5 levels" in error.problem


def test_alias_expansion_is_bounded_by_the_document_size(loader: type) -> None:
    ten = "[" + ",".join(["x"] * 10) + "]"
    fine = f"a: &a {ten}\nb: [*a, *a, *a]\n"  # 33 nodes aliased: under the floor of 50
    assert load_yaml(fine, SMALL, loader)["b"][2] == ["x"] * 10
    bomb = f"a: &a {ten}\nb: &b [*a, *a, *a]\nc: [*b, *b]\n"  # 33 aliased, then 2 x 34 more
    error = problem(bomb, loader)
    assert error.line == 3 and "aliases expand to more than 50 nodes" in error.problem


def test_a_recursive_alias_is_refused(loader: type) -> None:
    error = problem("a: &a [1, *a]\n", loader)
    assert "refers to a node that contains it" in error.problem


def test_anchors_do_not_cross_documents(loader: type) -> None:
    error = problem("a: &a 1\n---\nb: *a\n", loader)
    assert (error.line, error.column) == (3, 4)


def test_size_is_checked_before_parsing(loader: type) -> None:
    error = problem("a: " + "x" * 10_000 + "\n", loader)
    assert "more than the 10,000 allowed" in error.problem and error.line is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: " + "9" * 41, "41 characters"),
        (f"a: {MAX_INT + 1}", "out of range"),
        (f"a: -{MAX_INT + 1}", "out of range"),
        ("a: 0x" + "f" * 17, "out of range"),
        ("a: 1:2:3:4:5:6:7:8:9:10:11:12:13", "out of range"),
        ("a: 1.0e+999", "out of range"),
    ],
)
def test_numbers_are_bounded(loader: type, text: str, fragment: str) -> None:
    error = problem(text + "\n", loader)
    assert fragment in error.problem and (error.line, error.column) == (1, 4)


def test_numbers_inside_the_bounds(loader: type) -> None:
    assert load_yaml(f"a: {MAX_INT}\nb: -{MAX_INT}\nc: 1.5e+10\nd: .inf\ne: 0x1f\n", SMALL, loader) == {
        "a": MAX_INT,
        "b": -MAX_INT,
        "c": 1.5e10,
        "d": float("inf"),
        "e": 31,
    }


def test_syntax_errors_keep_the_parser_words(loader: type) -> None:
    error = problem("a: [1\n", loader)
    assert error.line is not None and error.problem


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-MAX_INT, MAX_INT) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=15,
)


@settings(max_examples=100, deadline=None)
@given(data=_PLAIN)
def test_inside_the_limits_yaml_is_what_pyyaml_gives(data: object) -> None:
    text = yaml.safe_dump(data)
    for base in LOADERS:
        assert load_yaml(text, loader=bounded_yaml_loader(base)) == yaml.safe_load(text)


@settings(max_examples=200, deadline=None)
@given(data=_PLAIN)
def test_json_depth_is_the_nesting_depth(data: object) -> None:
    def depth(value: object) -> int:
        if isinstance(value, list):
            return 1 + max((depth(v) for v in value), default=0)
        if isinstance(value, dict):
            return 1 + max((depth(v) for v in value.values()), default=0)
        return 0

    text = json.dumps(data)
    assert json_depth(text) == depth(data)
    assert load_json(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[" * 101 + "]" * 101, "nested more than 100 levels deep"),
        ('["[[[[' + "[" * 200 + '"]', None),
        (str(MAX_INT + 1), "out of range"),
        ("1" * 41, "41 characters"),
        ("1e400", "out of range"),
        ("-Infinity", "-Infinity is not valid JSON"),
        ('{"a": }', "line 1, column 7: not valid JSON"),
    ],
)
def test_json_bounds(text: str, fragment: str | None) -> None:
    if fragment is None:
        assert load_json(text) == [text[2:-2]]
        return
    with pytest.raises(InputError, match=fragment):
        load_json(text)


def test_durations_stop_at_gos_maximum() -> None:
    assert parse_duration("2562047h") == timedelta(hours=2562047)
    assert timedelta(hours=2562047, minutes=47, seconds=16, microseconds=854775) == MAX_DURATION
    with pytest.raises(DurationError, match="too large"):
        parse_duration("2562048h")
    with pytest.raises(DurationError, match="too large"):
        parse_duration("100000000h")
    with pytest.raises(DurationError, match="longer than 64 characters"):
        parse_duration("1" * 5000 + "s")


def test_quantities_stop_at_int64() -> None:
    assert parse_quantity("7Ei") == 7 * 2**60
    for bad in ("8Ei", "1e30", 2**63, "9" * 65):
        with pytest.raises(QuantityError, match="out of range|longer than"):
            parse_quantity(bad)


@pytest.mark.parametrize("field", ["weight", "perHour"])
def test_objects_from_the_api_with_huge_numbers_name_the_field(field: str) -> None:
    """The same bounds when objects arrive as dicts (parse_objects, the Lambda path), not YAML."""
    from joiner.domain.snapshot import SnapshotError, parse_node_pool

    spec: dict[str, object] = {"template": {"spec": {"nodeClassRef": {"name": "d"}}}}
    if field == "weight":
        spec["weight"] = 10**400
    else:
        spec["disruption"] = {"minSavings": {"perHour": 10**400}}
    with pytest.raises(SnapshotError, match="an integer of 1329 bits is out of range"):
        parse_node_pool({"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": "x"}, "spec": spec})
