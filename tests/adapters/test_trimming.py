"""Decoding without the unread arrays: the cut removes exactly those arrays, never anything
else, and what the domain parses of a realistic pod or Node is unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.adapters.trimming import UNREAD_ARRAYS, decode_trimmed, trim_unread
from joiner.domain.snapshot import parse_node, parse_pod

DEPTH = 4  # the nesting the pattern accepts

# Strings full of what could confuse a cut: quotes, brackets, backslashes, the keys themselves.
tricky_text = st.lists(st.sampled_from([*'ab"\\[]{},:', "managedFields", "images", ',"images":[', "\u005d", "\n", "é"]), max_size=8).map("".join)
keys = st.one_of(st.sampled_from(UNREAD_ARRAYS), tricky_text)
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63), tricky_text)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=30)


def depth(value: Any) -> int:
    """How deep arrays nest in ``value`` (an array of scalars is 1)."""
    if isinstance(value, list):
        return 1 + max((depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return max((depth(item) for item in value.values()), default=0)
    return 0


def expected(value: Any) -> Any:
    """The oracle: an unread key's array goes when it is not its object's first key and nests
    at most DEPTH deep; everything else stays."""
    if isinstance(value, list):
        return [expected(item) for item in value]
    if isinstance(value, dict):
        return {
            key: expected(item)
            for position, (key, item) in enumerate(value.items())
            if not (position > 0 and key in UNREAD_ARRAYS and isinstance(item, list) and depth(item) <= DEPTH)
        }
    return value


@settings(max_examples=400, deadline=None)
@given(values, st.booleans())
def test_only_unread_arrays_are_cut_whatever_the_strings_hold(value: Any, ascii_only: bool) -> None:
    raw = json.dumps(value, separators=(",", ":"), ensure_ascii=ascii_only).encode()
    assert decode_trimmed(raw) == expected(value)


def test_arrays_nested_deeper_than_the_pattern_are_left_whole() -> None:
    deep = {"a": 1, "images": [[[[["x"]]]]], "managedFields": [{"fieldsV1": {"f:spec": {}}}], "containerStatuses": [[[["ok"]]]]}
    assert decode_trimmed(json.dumps(deep, separators=(",", ":")).encode()) == {"a": 1, "images": [[[[["x"]]]]]}


def test_invalid_json_still_fails_as_json_does() -> None:
    with pytest.raises(ValueError):
        decode_trimmed(b'{"a":1,"managedFields":[}')


def test_a_long_unmatched_array_is_cut_in_linear_time() -> None:
    # A run that cannot match (it never closes) must not backtrack: seconds here would mean
    # exponential matching; the assertion is on the result, the size keeps the test honest.
    raw = b'{"a":1,"images":[' + b'"x",' * 200_000 + b'"y"'
    assert trim_unread(raw) == raw


@pytest.fixture(scope="module")
def realistic() -> tuple[bytes, bytes]:
    from bench.scale_world import NODE_TEMPLATE, POD_TEMPLATES, WorldSpec

    spec = WorldSpec(30)
    pod = POD_TEMPLATES["running"].fill(spec.pod_values(200, 7)).encode()
    node = NODE_TEMPLATE.fill(spec.node_values(3, 9)).encode()
    return pod, node


def test_a_realistic_pod_and_node_parse_the_same_trimmed(realistic: tuple[bytes, bytes]) -> None:
    pod, node = realistic
    assert b'"managedFields":[' in pod and b'"containerStatuses":[' in pod and b'"images":[' in node
    trimmed_pod, trimmed_node = decode_trimmed(pod), decode_trimmed(node)
    assert "managedFields" not in trimmed_pod["metadata"] and "containerStatuses" not in trimmed_pod["status"]
    assert "images" not in trimmed_node["status"] and len(trim_unread(pod)) < len(pod) * 0.7
    assert parse_pod(trimmed_pod) == parse_pod(json.loads(pod))
    assert parse_node(trimmed_node) == parse_node(json.loads(node))
