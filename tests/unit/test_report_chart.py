"""The report's chart as geometry (no browser): what it marks, where the labels go, what a
node's bar spans, and the annotation of empty nodes waiting for consolidateAfter."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.report_geometry import START, classic_result, classic_scenario, layout_problems, read_chart
from testworld.chart import ChartData, IdleSpan, Lane, Mark, MarkKind, render_chart
from testworld.report import render_html


@pytest.fixture
def page(tmp_path: Path) -> str:
    return render_html(classic_result(classic_scenario(tmp_path)))


def test_the_replacement_is_billed_from_the_warning_to_its_termination(page: str) -> None:
    chart = read_chart(page)
    lanes = chart.lanes()
    warning, ended = chart.marker_x("warning", 300), chart.marker_x("termination", 720)
    billed = lanes["i-replacement"]["billed"]
    assert billed[0] == pytest.approx(warning, abs=0.2) and billed[2] == pytest.approx(ended, abs=0.2)
    # faint while it boots, solid from its Node's registration (6:00) on
    assert lanes["i-replacement"]["ready"][0] == pytest.approx(chart.marker_x("drain", 360), abs=0.2)
    warned = lanes["i-warned"]["billed"]
    assert warned[2] == pytest.approx(chart.marker_x("termination", 365), abs=0.2)
    # the nodes line counts what is billed: it steps up at the warning (the replacement's launch),
    # not five seconds before the warned node goes
    rises = [s for s in chart.polylines["nodes"] if s[0] == s[2] and s[3] < s[1]]
    assert [round(s[0], 1) for s in rises] == [round(chart.marker_x("launch", 60), 1), round(warning, 1)]


def test_every_event_of_note_is_marked_and_listed_by_number(page: str) -> None:
    chart = read_chart(page)
    assert [(kind, at) for kind, at, *_ in chart.markers] == [
        ("scale", 30),
        ("launch", 60),
        ("warning", 300),
        ("launch", 300),
        ("drain", 360),
        ("termination", 365),
        ("scale", 600),
        ("termination", 720),
    ]
    listed = re.findall(r'<span class="badge"[^>]*>(\d+)</span> <b>(\d\d:\d\d)</b> (\w+): ([^<]*)</li>', page)
    assert [(n, when, kind) for n, when, kind, _ in listed] == [
        ("1", "00:30", "scale"),
        ("2", "01:00", "launch"),
        ("3", "05:00", "warning"),
        ("4", "05:00", "launch"),
        ("5", "06:00", "drain"),
        ("6", "06:05", "termination"),
        ("7", "10:00", "scale"),
        ("8", "12:00", "termination"),
    ]
    texts = {n: text for n, _, _, text in listed}
    assert texts["1"] == "addons to 1, inflate to 20" and texts["7"] == "inflate to 0"
    assert texts["2"] == "m5.large (on-demand), 3 x c5.2xlarge (spot)" and texts["4"] == "c5.2xlarge (spot)"
    assert "spot interruption warning for i-warned" in texts["3"] and "EC2 reclaims it at 07:00" in texts["3"]
    assert texts["5"] == "termination evicted 7 pods from ip-10-0-0-5.ec2.internal"
    assert texts["8"].startswith("by Joiner: i-second") and "i-replacement" in texts["8"]
    # the numbers drawn on the markers are the list's
    assert [label.text for label in chart.labels if label.cls == "mark-number"] == [str(n) for n in range(1, 9)]


def test_no_label_crosses_a_line_the_plot_or_another_label(page: str) -> None:
    chart = read_chart(page)
    assert layout_problems(chart) == []
    # markers at the same instant (the warning and the replacement's launch) or 5 s apart (the
    # drain and the termination) are stacked, not drawn over each other
    rows = {(kind, at): cy for kind, at, _, cy, _ in chart.markers}
    assert rows[("warning", 300)] != rows[("launch", 300)] and rows[("drain", 360)] != rows[("termination", 365)]
    assert all(cy + r < chart.plot[1] for _, _, _, cy, r in chart.markers)


def test_empty_nodes_waiting_for_consolidate_after_are_annotated_from_the_data(tmp_path: Path) -> None:
    chart = read_chart(render_html(classic_result(classic_scenario(tmp_path))))
    assert chart.idle() == [(600.0, 720.0, "3 nodes empty 2m, waiting for consolidateAfter 30s (disruption runs every 1m)")]
    hatched = {instance for instance, rects in chart.lanes().items() if "idle-part" in rects}
    assert hatched == {"i-second", "i-third", "i-replacement"}  # not the add-on node (busy), not the drained one
    page = render_html(classic_result(classic_scenario(tmp_path, "5m"), idle_until=900 - 60))
    [(start, end, label)] = read_chart(page).idle()
    assert (start, end) == (600.0, 840.0) and "empty 4m" in label and "consolidateAfter 5m" in label
    assert "10:00-14:00: 3 nodes of NodePool spot had no pods left" in page and "consolidateAfter (5m)" in page


def test_nodes_kept_by_consolidate_after_never_are_annotated_until_the_end(tmp_path: Path) -> None:
    page = render_html(classic_result(classic_scenario(tmp_path, "Never"), idle_until=None))
    [(start, end, label)] = read_chart(page).idle()
    assert (start, end) == (600.0, 840.0) and label == "3 nodes empty 4m, consolidateAfter Never: kept"
    assert "billed until the end of the run" in page


def test_without_the_disruption_function_the_annotation_says_so(tmp_path: Path) -> None:
    result = classic_result(classic_scenario(tmp_path), idle_until=None)
    result.handlers = ["interruption", "scanner", "termination"]
    [(_, _, label)] = read_chart(render_html(result)).idle()
    assert label.endswith("; no disruption function")


def test_no_annotation_when_no_node_is_left_empty(tmp_path: Path) -> None:
    result = classic_result(classic_scenario(tmp_path), idle_until=None)
    for pod in result.pods:
        if pod.gone == START + timedelta(seconds=600):
            pod.gone = None
    page = render_html(result)
    assert read_chart(page).idle() == [] and 'class="idle-band"' not in page and "consolidateAfter" not in page


def test_a_drained_node_is_not_idle_even_without_a_warning(tmp_path: Path) -> None:
    """Pods Joiner evicted (a consolidation, a drain) leave the node on purpose: the seconds
    until its termination are the drain's, not a wait for consolidateAfter."""
    result = classic_result(classic_scenario(tmp_path))
    result.interruptions = []
    lanes = read_chart(render_html(result)).lanes()
    assert "idle-part" not in lanes["i-warned"]


def test_the_report_is_self_contained(page: str) -> None:
    assert "<script" not in page and "<link" not in page and "@import" not in page and "src=" not in page
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"]  # the SVG namespace, never fetched
    assert set(re.findall(r"url\(([^)]*)\)", page)) == {"#idle-hatch"} and 'id="idle-hatch"' in page
    assert re.findall(r"href=", page) == []


_TIMES = st.floats(min_value=-10, max_value=30_000, allow_nan=False)


@st.composite
def _chart_data(draw: st.DrawFn) -> ChartData:
    total = draw(st.floats(min_value=1, max_value=21_600))
    marks = sorted(
        draw(
            st.lists(st.builds(Mark, _TIMES.map(lambda t: min(max(t, 0.0), total)), st.sampled_from(MarkKind), st.text(min_size=1, max_size=20)), max_size=150)
        ),
        key=lambda m: m.at,
    )
    lanes = []
    for index in range(draw(st.integers(0, 50))):
        a, b = sorted(draw(st.tuples(st.floats(0, total), st.floats(0, total))))
        lanes.append(
            Lane(
                f"i-{index}",
                f"n{index}",
                draw(st.sampled_from(["c5.large", "u-24tb1.112xlarge", "x" * 40])),
                draw(st.sampled_from(["spot", "on-demand"])),
                "pool",
                draw(st.floats(0, 1e6)),
                a,
                b,
                draw(st.booleans()),
                draw(st.one_of(st.none(), st.floats(a, b))),
                draw(st.one_of(st.none(), st.floats(a, b))),
            )
        )
    idle = []
    for _ in range(draw(st.integers(0, 8))):
        a, b = sorted(draw(st.tuples(st.floats(0, total), st.floats(0, total))))
        idle.append(
            IdleSpan(
                a,
                b,
                tuple(f"n{i}" for i in range(draw(st.integers(1, 300)))),
                "pool",
                draw(st.sampled_from(["0s", "30s", "Never", "2562047h47m16.854775807s"])),
                draw(st.booleans()),
                draw(st.one_of(st.none(), st.floats(1, 86_400))),
            )
        )
    samples = sorted(draw(st.lists(st.tuples(st.floats(0, total), st.integers(0, 2**31), st.floats(0, 1e7)), min_size=1, max_size=40)))
    return ChartData(total, tuple(samples), tuple(marks), tuple(lanes), tuple(idle))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_chart_data())
def test_any_chart_keeps_its_labels_apart_and_numbers_every_mark(data: ChartData) -> None:
    svg, numbered = render_chart(data)
    chart = read_chart(svg)
    assert layout_problems(chart) == []
    assert sorted(id(m) for _, m in numbered) == sorted(id(m) for m in data.marks)  # every mark listed once
    numbers = [n for n, _ in numbered]
    assert numbers == sorted(numbers) and set(numbers) == set(range(1, len(chart.markers) + 1))
    assert len(chart.idle()) == len(data.idle)
