"""The one-pass snapshot YAML reader (joiner.domain.snapshot_yaml) against its reference,
``load_yaml_all(text, limits, snapshot_loader())``: the same documents (values, types and
key order) and the same errors, on generated and hand-picked YAML; the fast path is really
taken for ordinary snapshots and really left for what it does not reproduce."""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.plan_mix import snapshot_yaml
from joiner.domain import snapshot_yaml as sy
from joiner.domain.bounded import DEFAULT_LIMITS, InputError, InputLimits, load_yaml_all
from joiner.domain.resources import EMPTY, PODS, Resources
from joiner.domain.snapshot import SnapshotError, effective_requests, load_snapshot_yaml

needs_libyaml = pytest.mark.skipif(not sy.fast_path_available(), reason="PyYAML without libyaml")

TRICKY = [
    "0x1F",
    "0x_1F",
    "1_000",
    "1__0",
    "0b101",
    "0b_",
    "012",
    "09",
    "0o17",
    "+1",
    "-1",
    "+0",
    "-0",
    "0",
    "190:20:30",
    ".inf",
    "-.inf",
    "+.INF",
    ".Inf",
    ".nan",
    ".NaN",
    "-.5",
    "+.5",
    "1.",
    "1.5e+3",
    "1.5e3",
    "1e3",
    "6.8523015e+5",
    "685.230_15e+03",
    "1_2.3",
    "1e999",
    "1.0e+999",
    "-1.0e+999",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "123456789012345678901234567890123456789012345",
    "yes",
    "Yes",
    "YES",
    "No",
    "no",
    "on",
    "Off",
    "y",
    "n",
    "true",
    "True",
    "TRUE",
    "false",
    "tRUE",
    "~",
    "null",
    "Null",
    "NULL",
    "nUll",
    "",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "2001-12-14 21:59:43.10 -5",
    "<<",
    "=",
    "a",
    "p1",
    "500m",
    "1Gi",
    "Pending",
    "default",
    "kind",
    "List",
    "x y",
    "café",
    "-",
    "--",
    "...x",
]


def typed(value: Any) -> Any:
    """A value with every type spelled out, so ``1 == 1.0 == True`` cannot pass for equal;
    NaN compares equal to itself here."""
    if isinstance(value, dict):
        return ("dict", [(typed(key), typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [typed(item) for item in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def outcome(load: Any, text: str, limits: InputLimits = DEFAULT_LIMITS) -> Any:
    try:
        return ("ok", typed(load(text, limits)))
    except Exception as error:  # the same exception, whatever it is, is the property
        return ("error", type(error).__name__, str(error), getattr(error, "line", None), getattr(error, "column", None))


def reference(text: str, limits: InputLimits = DEFAULT_LIMITS) -> list[Any]:
    return load_yaml_all(text, limits, sy.snapshot_loader())


def fast_only(text: str, limits: InputLimits = DEFAULT_LIMITS) -> list[Any]:
    return sy._load_fast(text, limits, sy.snapshot_loader())


def assert_same(text: str, limits: InputLimits = DEFAULT_LIMITS) -> Any:
    expected = outcome(reference, text, limits)
    assert outcome(sy.load_snapshot_documents, text, limits) == expected, text
    return expected


# ---------------------------------------------------------------- generated documents


def _quoted(text: str, style: str) -> str:
    if style == "'":
        return "'" + text.replace("'", "''") + "'"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


scalars = st.one_of(st.sampled_from(TRICKY), st.text(st.sampled_from("ab0:1#-. _'\"xé\t"), max_size=6))
styles = st.sampled_from(["plain", "plain", "plain", "'", '"'])
keys = st.sampled_from(["a", "b", "kind", "1", "true", "~", "1.0", "0x1", "yes", "<<", "items", "apiVersion"])


@st.composite
def nodes(draw: st.DrawFn, depth: int = 0) -> Any:
    """A YAML node as a small tree: ``("scalar", text, style)``, ``("map", [(key, node)])``,
    ``("seq", [node])``, ``("block", text)``, ``("flow", text)`` or an anchor/alias/tag form."""
    choice = draw(st.integers(0, 9)) if depth < 4 else 0
    if choice <= 3:
        return ("scalar", draw(scalars), draw(styles))
    if choice <= 5:
        return ("map", draw(st.lists(st.tuples(st.one_of(keys, scalars), nodes(depth + 1)), max_size=4)))
    if choice <= 7:
        return ("seq", draw(st.lists(nodes(depth + 1), max_size=4)))
    if choice == 8:
        return ("block", draw(st.sampled_from(["|", ">", "|-", ">+"])), draw(st.lists(scalars, min_size=1, max_size=3)))
    return ("special", draw(st.sampled_from(["&x a", "*x", "!!str 12", "!!int '7'", "!custom a", "[a, {b: 1}, [2]]", "{a: 1, a: 2}", "{[a]: 1}", "? a\n: 1"])))


def render(node: Any, indent: int = 0) -> Iterator[str]:
    """Lines of block YAML for ``node`` placed after ``key:`` or ``-`` (the first line is the
    rest of that line). Plain scalars are written as they are, so some documents are invalid."""
    pad = " " * indent
    kind = node[0]
    if kind == "scalar":
        _, text, style = node
        yield " " + (text if style == "plain" else _quoted(text, style))
    elif kind == "block":
        _, indicator, lines = node
        yield " " + indicator
        for line in lines:
            yield f"{pad}  {line}"
    elif kind == "special":
        yield " " + node[1].replace("\n", "\n" + pad)
    elif kind == "map":
        if not node[1]:
            yield " {}"
            return
        yield ""
        for key, value in node[1]:
            lines = list(render(value, indent + 2))
            yield f"{pad}{key}:{lines[0]}"
            yield from lines[1:]
    else:
        if not node[1]:
            yield " []"
            return
        yield ""
        for item in node[1]:
            lines = list(render(item, indent + 2))
            yield f"{pad}-{lines[0]}"
            yield from lines[1:]


@st.composite
def streams(draw: st.DrawFn) -> str:
    documents = []
    for _ in range(draw(st.integers(0, 3))):
        node = draw(nodes())
        lines = list(render(node))
        body = "\n".join([lines[0].lstrip(), *lines[1:]]) if lines[0].strip() else "\n".join(lines[1:])
        documents.append(body)
    separator = draw(st.sampled_from(["\n---\n", "\n--- \n", "\n...\n---\n"]))
    return separator.join(documents) + draw(st.sampled_from(["", "\n", "\n---\n", "\n# end\n"]))


@needs_libyaml
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=streams())
def test_generated_streams_load_as_the_reference_loads_them(text: str) -> None:
    expected = assert_same(text)
    try:
        fast = ("ok", typed(fast_only(text)))
    except sy._Fallback:
        return
    assert fast == expected, text  # when the fast path answers, it answers alone and right


@needs_libyaml
@settings(max_examples=300, deadline=None)
@given(
    data=st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=8)),
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=5), children, max_size=4)),
        max_leaves=20,
    ),
    flow=st.booleans(),
)
def test_dumped_data_loads_as_the_reference_loads_it(data: Any, flow: bool) -> None:
    """Whatever PyYAML writes (quoting strings that would resolve otherwise, ``!!python``-free
    safe output) reads back alike: big integers and infinities included."""
    assert_same(yaml.safe_dump_all([data, {"kind": "List", "items": [data]}], default_flow_style=flow))


# ---------------------------------------------------------------- hand-picked scalars


@needs_libyaml
@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("style", ["plain", "'", '"'])
def test_each_tricky_scalar_resolves_as_safe_loader_does(text: str, style: str) -> None:
    written = text if style == "plain" else _quoted(text, style)
    for document in (f"v: {written}\n", f"- {written}\n", f"{written}: 1\n", f"[{written}]\n", f"{written}\n"):
        assert_same(document)


@needs_libyaml
def test_yaml_1_1_resolution_spot_checks() -> None:
    documents = fast_only(
        "a: 0x1F\nb: 1_000\nc: .inf\nd: yes\ne: No\nf: ~\ng: 2001-12-14\nh: 1e3\ni: 0o17\nj: 012\nk: +1\nl: -.5\n"
        "m: '12'\nn: |\n  two\n  lines\no: plain\n  folded\np:\nq: 190:20:30\n"
    )
    assert typed(documents[0]) == typed(
        {
            "a": 31,
            "b": 1000,
            "c": math.inf,
            "d": True,
            "e": False,
            "f": None,
            "g": "2001-12-14",
            "h": "1e3",
            "i": "0o17",
            "j": 10,
            "k": 1,
            "l": "-.5",
            "m": "12",
            "n": "two\nlines\n",
            "o": "plain folded",
            "p": None,
            "q": 685230,
        }
    )


@needs_libyaml
@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n", "---\n---\n", "--- ~\n", "...\n", "---\n...\n---\na: 1\n"])
def test_empty_documents(text: str) -> None:
    expected = assert_same(text)
    if expected[0] == "error":  # libyaml refuses a lone ``...``
        with pytest.raises(sy._Fallback):
            fast_only(text)
    else:
        assert ("ok", typed(fast_only(text))) == expected


@needs_libyaml
def test_a_list_document_keeps_its_items_in_order() -> None:
    text = "kind: List\napiVersion: v1\nitems:\n- {kind: Pod, metadata: {name: a}}\n- kind: Pod\n  metadata:\n    name: b\n"
    assert fast_only(text) == [
        {"kind": "List", "apiVersion": "v1", "items": [{"kind": "Pod", "metadata": {"name": "a"}}, {"kind": "Pod", "metadata": {"name": "b"}}]}
    ]
    assert_same(text)


@needs_libyaml
@pytest.mark.parametrize(
    "text",
    [
        "\ufeffa: 1\n",
        "a: 1\r\nb: [x,\r\n y]\r\n",
        "a:\tb\n",
        'a: "\\ud800"\n',
        'a: "\\x85\\u00e9\\U0001F600"\n',
        "a: b\x85c\n",
        "a: !!binary aGVsbG8=\n",
        "- ? a\n",
        "{a: 1, b}\n",
        "[a: 1, b]\n",
        "a: 'multi\n  line'\n",
        "a: >-\n  x\n\n  y\n",
        "a: |2\n   x\n",
        "---\n--- |\n  lit\n",
        "a: 0b1_0\n",
        "a: -0x_ff\n",
        "a: 1:30\n",
        "a: -1:30.5\n",
        "a: .5e+3\n",
        "a: 1.e-2\n",
        "\x00",
        "a: \x07\n",
        "x" * 70_000,
        "a: -" + "9" * 39 + "\n",
        "a: 1 # comment\n# more\nb: x#not-a-comment\n",
    ],
)
def test_odd_texts_load_as_the_reference_loads_them(text: str) -> None:
    assert_same(text)


# ---------------------------------------------------------------- errors and bounds


def fallbacks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Texts the fast path handed to the reference during the test."""
    seen: list[str] = []
    real = load_yaml_all

    def spy(text: str, limits: InputLimits = DEFAULT_LIMITS, loader: Any = None) -> list[Any]:
        seen.append(text)
        return real(text, limits, loader)

    monkeypatch.setattr(sy, "load_yaml_all", spy)
    return seen


def error_of(text: str, limits: InputLimits = DEFAULT_LIMITS) -> InputError:
    with pytest.raises(InputError) as raised:
        sy.load_snapshot_documents(text, limits)
    assert outcome(reference, text, limits) == outcome(sy.load_snapshot_documents, text, limits)
    return raised.value


@needs_libyaml
@pytest.mark.parametrize(
    ("text", "line", "column", "problem"),
    [
        ("a: 1\nb: 2\na: 3\n", 3, 1, "duplicate key 'a'"),
        ("a:\n  1: x\n  1.0: y\n", 3, 3, "duplicate key 1.0"),
        ("a: 1\ntrue: 2\n1: 3\n", 3, 1, "duplicate key 1"),
        ("n: 9223372036854775808\n", 1, 4, "integer 9223372036854775808 is out of range (at most 9223372036854775807, a 64-bit integer)"),
        ("n: 1.0e+999\n", 1, 4, "number 1.0e+999 is out of range"),
        ("n: " + "1" * 41 + "\n", 1, 4, "number 111111111111... has 41 characters, more than the 40 allowed"),
        ("a: b: c\n", 1, 5, "mapping values are not allowed in this context"),
        ("a: [1, 2\n", 2, 1, "did not find expected ',' or ']'"),
    ],
)
def test_errors_are_the_reference_errors_with_their_place(text: str, line: int, column: int, problem: str) -> None:
    error = error_of(text)
    assert (error.line, error.column, error.problem) == (line, column, problem)
    with pytest.raises(SnapshotError, match=f"line {line}, column {column}"):
        load_snapshot_yaml(text)


@needs_libyaml
def test_a_syntax_error_late_wins_over_a_duplicate_key_early() -> None:
    """The reference walks the whole stream before building, so the syntax error is reported."""
    text = "a: 1\na: 2\n---\n" + "b: 1\n" * 50 + "c: [\n"
    error = error_of(text)
    assert error.line == 55 and "duplicate" not in error.problem


@needs_libyaml
@pytest.mark.parametrize("depth", [99, 100, 101, 150])
@pytest.mark.parametrize("flow", [True, False])
def test_nesting_is_bounded_at_the_same_depth(depth: int, flow: bool) -> None:
    text = "[" * depth + "1" + "]" * depth + "\n" if flow else "".join("  " * level + "- \n" for level in range(depth - 1)) + "  " * (depth - 1) + "- 1\n"
    result = assert_same(text)
    if depth <= 100:
        assert result[0] == "ok"
    else:
        assert result[0] == "error" and "nested more than 100 levels deep" in result[2] and result[3] is not None


@needs_libyaml
def test_small_limits_hold_on_the_fast_path() -> None:
    small = InputLimits(max_chars=100, max_depth=3, alias_node_floor=5)
    assert error_of("a: [[[1]]]\n", small).problem == "nested more than 3 levels deep"
    assert "more than the 100 allowed" in str(error_of("a: " + "x" * 200 + "\n", small))
    assert sy.load_snapshot_documents("a: [[1]]\n", small) == [{"a": [[1]]}]


@needs_libyaml
def test_very_deep_flow_nesting_is_an_input_error() -> None:
    error = error_of("[" * 5000 + "]" * 5000)
    assert error.problem == "nested more than 100 levels deep" and error.line == 1


@needs_libyaml
def test_not_text_is_an_input_error() -> None:
    with pytest.raises(InputError, match="expected YAML text, got bytes"):
        sy.load_snapshot_documents(b"a: 1")  # type: ignore[arg-type]


# ---------------------------------------------------------------- what the fast path leaves to the reference


@needs_libyaml
@pytest.mark.parametrize(
    "text",
    [
        "a: &x 1\nb: *x\n",
        "base: &b {cpu: 1, mem: 2}\nmerged:\n  <<: *b\n  cpu: 3\n",
        "a: &x [1, 2]\n",
        "a: !!str 12\n",
        "a: !!int '12'\n",
        "a: !!set {x}\n",
        "a: !custom 1\n",
        "? [a, b]\n: 1\n",
        "? {a: 1}\n: 1\n",
        "%YAML 1.1\n---\na: 1\n",
        "%TAG !e! tag:example.com,2000:\n---\na: 1\n",
        "a: =\n",
        "<<: {a: 1}\n",
        "a: 1\na: 2\n",
        "a: *nowhere\n",
        "a: &x [*x]\n",
    ],
)
def test_what_the_fast_path_does_not_reproduce_goes_to_the_reference(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(sy._Fallback):
        fast_only(text)
    seen = fallbacks(monkeypatch)
    assert outcome(sy.load_snapshot_documents, text) == outcome(reference, text)
    assert seen == [text]


@needs_libyaml
def test_billion_laughs_is_still_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    assert "aliases expand to more than" in error_of("\n".join(lines) + "\n").problem


@needs_libyaml
def test_an_ordinary_snapshot_never_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    text = snapshot_yaml(50, "arch-mix")
    seen = fallbacks(monkeypatch)
    documents = sy.load_snapshot_documents(text)
    assert seen == []
    assert typed(documents) == typed(reference(text))
    assert len(load_snapshot_yaml(text).pods) == 50


def test_without_libyaml_the_pure_python_reference_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert not sy.fast_path_available()
    assert issubclass(sy.snapshot_loader(), yaml.SafeLoader)
    seen = fallbacks(monkeypatch)
    text = "a: 0x1F\nb: 2001-12-14\n---\nc: [yes, ~]\n"
    assert sy.load_snapshot_documents(text) == [{"a": 31, "b": "2001-12-14"}, {"c": [True, None]}]
    assert seen == [text]
    with pytest.raises(InputError, match="duplicate key 'a'"):
        sy.load_snapshot_documents("a: 1\na: 2\n")
    with pytest.raises(SnapshotError, match=r"line 1, column \d+: nested more than 100 levels deep"):
        load_snapshot_yaml("a: " + "[" * 101 + "]" * 101)


# ---------------------------------------------------------------- effective_requests on plain dicts


def _reference_effective_requests(
    containers: list[Resources],
    init_containers: list[tuple[Resources, bool]],
    overhead: Resources,
    pod_level: Resources | None,
) -> Resources:
    """The Resources-arithmetic version effective_requests replaced."""
    total = EMPTY
    for requests in containers:
        total = total + requests
    sidecars = EMPTY
    largest_step = EMPTY
    for requests, restartable in init_containers:
        if restartable:
            sidecars = sidecars + requests
            total = total + requests
            largest_step = largest_step.maximum(sidecars)
        else:
            largest_step = largest_step.maximum(requests + sidecars)
    result = total.maximum(largest_step)
    if pod_level:
        merged = dict(result)
        merged.update(pod_level)
        result = Resources(merged)
    return result + overhead + Resources({PODS: 1000})


_vectors = st.builds(
    lambda items, keep: Resources.keeping_zeros(items) if keep else Resources(items),
    st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "gpu", "hugepages-2Mi"]), st.integers(-3, 5), max_size=4),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(
    containers=st.lists(_vectors, max_size=3),
    init_containers=st.lists(st.tuples(_vectors, st.booleans()), max_size=3),
    overhead=_vectors,
    pod_level=st.none() | _vectors,
)
def test_effective_requests_matches_resources_arithmetic(
    containers: list[Resources],
    init_containers: list[tuple[Resources, bool]],
    overhead: Resources,
    pod_level: Resources | None,
) -> None:
    got = effective_requests(containers, init_containers, overhead, pod_level)
    want = _reference_effective_requests(containers, init_containers, overhead, pod_level)
    assert list(got.items()) == list(want.items())  # the order of names too


def test_gc_paused_leaves_collection_as_it_found_it() -> None:
    assert gc.isenabled()
    with pytest.raises(SnapshotError):
        load_snapshot_yaml("a: 1\na: 2\n")
    assert gc.isenabled()
    with sy.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with sy.gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
