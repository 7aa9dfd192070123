"""The report's chart as geometry: a simulation result shaped like the classic demo's (built
by hand, no simulation run), and a reader of the SVG that turns labels, markers, lines and bars
into boxes and segments the tests compare."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from testworld.chart import text_box
from testworld.cloud import Instance, Interruption
from testworld.cluster import PodRecord
from testworld.scenario import Scenario, load_scenario
from testworld.simulator import PodDeletion, Sample, SimulationResult

ROOT = Path(__file__).resolve().parents[2]
NS = "{http://www.w3.org/2000/svg}"
START = datetime(2026, 1, 1, tzinfo=UTC)

Box = tuple[float, float, float, float]
Segment = tuple[float, float, float, float]


def classic_scenario(tmp: Path, consolidate_after: str = "30s") -> Scenario:
    """The classic scenario, its NodePools' consolidateAfter set to ``consolidate_after``."""
    text = (ROOT / "examples" / "scenarios" / "classic.yaml").read_text(encoding="utf-8")
    path = tmp / "classic.yaml"
    path.write_text(text.replace("consolidateAfter: 30s", f"consolidateAfter: {consolidate_after}"), encoding="utf-8")
    return load_scenario(path)


def classic_result(scenario: Scenario, *, idle_until: float | None = 720.0) -> SimulationResult:
    """What the classic demo produces: an m5.large and three c5.2xlarge launched at 1:00 (Ready
    at 2:00); a spot warning for the first c5.2xlarge at 5:00, its replacement launched at once
    (Ready at 6:00), the warned node drained at 6:00 and terminated at 6:05; the workload deleted
    at 10:00; the three empty c5.2xlarge terminated at ``idle_until`` seconds (None: still running
    at the end, 14:00)."""

    def at(seconds: float) -> datetime:
        return START + timedelta(seconds=seconds)

    def node(n: int) -> str:
        return f"ip-10-0-0-{n}.ec2.internal"

    end = 840.0 if idle_until is None else idle_until
    gone: tuple[str, datetime | None] = ("running", None) if idle_until is None else ("terminated", at(end))
    instances = [
        Instance("i-addons", "m5.large", "us-east-1a", "on-demand", "addons", node(4), 0.096, at(60), True),
        Instance("i-warned", "c5.2xlarge", "us-east-1a", "spot", "spot", node(5), 0.119, at(60), True, "terminated", at(365), "joiner"),
        Instance("i-second", "c5.2xlarge", "us-east-1a", "spot", "spot", node(6), 0.119, at(60), True, gone[0], gone[1], "joiner" if gone[1] else None),
        Instance("i-third", "c5.2xlarge", "us-east-1a", "spot", "spot", node(7), 0.119, at(60), True, gone[0], gone[1], "joiner" if gone[1] else None),
        Instance("i-replacement", "c5.2xlarge", "us-east-1b", "spot", "spot", node(8), 0.119, at(300), True, gone[0], gone[1], "joiner" if gone[1] else None),
    ]
    pods = [PodRecord("kube-system/addons-0", "addons", at(30), at(120), node(4))]
    for index in range(20):
        host = node(5 + index % 3)
        left = at(360) if host == node(5) else at(600)
        pods.append(PodRecord(f"default/inflate-{index}", "inflate", at(30), at(120), host, left))
    moved = [p for p in pods if p.node == node(5)]
    for index, _ in enumerate(moved):
        pods.append(PodRecord(f"default/inflate-r{index}", "inflate", at(360), at(360), node(8), at(600)))
    deletions = [PodDeletion(at(360), p.key, node(5), "eviction", None, "termination") for p in moved]
    samples = [
        Sample(timedelta(seconds=0), {}, 0, 0.0, {}, 0),
        Sample(timedelta(seconds=30), {}, 21, 0.0, {}, 0),
        Sample(timedelta(seconds=60), {}, 21, 0.453, {"m5.large": 1, "c5.2xlarge": 3}, 0),
        Sample(timedelta(seconds=120), {"m5.large": 1, "c5.2xlarge": 3}, 0, 0.453, {"m5.large": 1, "c5.2xlarge": 3}, 0),
        Sample(timedelta(seconds=300), {"m5.large": 1, "c5.2xlarge": 3}, 0, 0.572, {"m5.large": 1, "c5.2xlarge": 4}, 0),
        Sample(timedelta(seconds=360), {"m5.large": 1, "c5.2xlarge": 4}, 0, 0.572, {"m5.large": 1, "c5.2xlarge": 4}, 0),
        Sample(timedelta(seconds=365), {"m5.large": 1, "c5.2xlarge": 3}, 0, 0.453, {"m5.large": 1, "c5.2xlarge": 4}, 0),
        Sample(timedelta(seconds=600), {"m5.large": 1, "c5.2xlarge": 3}, 0, 0.453, {"m5.large": 1, "c5.2xlarge": 4}, 0),
    ]
    if idle_until is not None:
        samples.append(Sample(timedelta(seconds=end), {"m5.large": 1}, 0, 0.096, {"m5.large": 1, "c5.2xlarge": 4}, 0))
    samples.append(
        Sample(
            timedelta(seconds=840),
            {"m5.large": 1} if idle_until is not None else {"m5.large": 1, "c5.2xlarge": 3},
            0,
            0.096 if idle_until is not None else 0.453,
            {"m5.large": 1, "c5.2xlarge": 4},
            0,
        )
    )
    result = SimulationResult(scenario=scenario, start=START, simulated_seconds=840.0, wall_seconds=50.0)
    result.instances = instances
    result.interruptions = [Interruption("i-warned", node(5), at(300), at(420), 7, at(360), at(365), "joiner", at(360))]
    result.pods = pods
    result.pod_deletions = deletions
    result.samples = samples
    result.registered_at = {"i-addons": at(120), "i-warned": at(120), "i-second": at(120), "i-third": at(120), "i-replacement": at(360)}
    result.handlers = ["disruption", "gc", "interruption", "scanner", "termination"]
    return result


# ---------------------------------------------------------------- reading the SVG


@dataclass(frozen=True)
class Label:
    text: str
    cls: str
    box: Box
    turned: bool = False  # set a quarter turn: its box is taller than wide


@dataclass(frozen=True)
class Chart:
    root: ET.Element
    width: float
    height: float
    labels: list[Label]
    markers: list[tuple[str, float, float, float, float]]  # kind, at, cx, cy, r
    polylines: dict[str, list[Segment]]
    plot: Box

    def lanes(self) -> dict[str, dict[str, Box]]:
        """instance id -> rect class -> box."""
        out: dict[str, dict[str, Box]] = {}
        for group in self.root.iter(f"{NS}g"):
            if group.get("class") == "lane":
                rects = {}
                for rect in group.iter(f"{NS}rect"):
                    if rect.get("class"):
                        rects[str(rect.get("class"))] = _rect(rect)
                out[str(group.get("data-instance"))] = rects
        return out

    def idle(self) -> list[tuple[float, float, str]]:
        """(from, to, label text) of every empty-nodes annotation."""
        out = []
        for group in self.root.iter(f"{NS}g"):
            if group.get("class") == "idle":
                text = "".join(t.text or "" for t in group.iter(f"{NS}text"))
                out.append((float(group.get("data-from", "nan")), float(group.get("data-to", "nan")), text))
        return out

    def marker_x(self, kind: str, at: float) -> float:
        [x] = [cx for k, a, cx, _, _ in self.markers if k == kind and a == at]
        return x


def _rect(rect: ET.Element) -> Box:
    x, y = float(rect.get("x", 0)), float(rect.get("y", 0))
    return (x, y, x + float(rect.get("width", 0)), y + float(rect.get("height", 0)))


def _label_box(text: ET.Element) -> Box:
    x, y = float(text.get("x", 0)), float(text.get("y", 0))
    box = text_box(x, y, text.text or "", float(text.get("font-size", 16)), text.get("text-anchor", "start"))
    rotate = re.fullmatch(r"rotate\(([-0-9.]+) ([-0-9.]+) ([-0-9.]+)\)", text.get("transform", ""))
    if rotate is None:
        return box
    angle, cx, cy = (float(v) for v in rotate.groups())
    cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    corners = [(bx, by) for bx in (box[0], box[2]) for by in (box[1], box[3])]
    turned = [(cx + (px - cx) * cos - (py - cy) * sin, cy + (px - cx) * sin + (py - cy) * cos) for px, py in corners]
    return (min(p[0] for p in turned), min(p[1] for p in turned), max(p[0] for p in turned), max(p[1] for p in turned))


def read_chart(page: str) -> Chart:
    """The chart of a report (or a bare SVG)."""
    svg = page[page.index("<svg") : page.index("</svg>") + len("</svg>")]
    root = ET.fromstring(svg)
    labels = [Label(t.text or "", t.get("class", ""), _label_box(t), "rotate(" in t.get("transform", "")) for t in root.iter(f"{NS}text")]
    markers = []
    for group in root.iter(f"{NS}g"):
        if group.get("class") == "mark":
            circle = group.find(f"{NS}circle")
            assert circle is not None
            markers.append(
                (
                    str(group.get("data-kind")),
                    float(group.get("data-at", "nan")),
                    float(circle.get("cx", 0)),
                    float(circle.get("cy", 0)),
                    float(circle.get("r", 0)),
                )
            )
    polylines: dict[str, list[Segment]] = {}
    for line in root.iter(f"{NS}polyline"):
        points = [tuple(float(v) for v in p.split(",")) for p in (line.get("points") or "").split()]
        polylines[str(line.get("class"))] = [(a[0], a[1], b[0], b[1]) for a, b in zip(points, points[1:], strict=False)]
    [plot] = [_rect(r) for r in root.iter(f"{NS}rect") if r.get("class") == "plot"]
    return Chart(root, float(root.get("width", 0)), float(root.get("height", 0)), labels, markers, polylines, plot)


def overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def segment_crosses(segment: Segment, box: Box, pad: float = 1.0) -> bool:
    """Whether the segment (drawn with a stroke of 2 px: ``pad`` either side) touches the box."""
    x0, y0, x1, y1 = box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad
    ax, ay, bx, by = segment
    low, high = 0.0, 1.0
    for delta, lower, upper, start in ((bx - ax, x0, x1, ax), (by - ay, y0, y1, ay)):
        if delta == 0:
            if not lower <= start <= upper:
                return False
            continue
        t0, t1 = (lower - start) / delta, (upper - start) / delta
        low, high = max(low, min(t0, t1)), min(high, max(t0, t1))
        if low > high:
            return False
    return True


def layout_problems(chart: Chart) -> list[str]:
    """Every label or marker that crosses a polyline, the plot, another label or marker, or
    leaves the picture; every marker number wider than its marker."""
    problems = []
    boxes = [(f"label {label.text!r}", label.box) for label in chart.labels if label.cls != "mark-number"]
    boxes += [(f"marker {kind}@{at:g}", (cx - r, cy - r, cx + r, cy + r)) for kind, at, cx, cy, r in chart.markers]
    for name, box in boxes:
        if box[0] < 0 or box[1] < 0 or box[2] > chart.width or box[3] > chart.height:
            problems.append(f"{name} leaves the picture: {box}")
        if overlaps(box, chart.plot):
            problems.append(f"{name} is inside the plot: {box}")
        for line, segments in chart.polylines.items():
            if any(segment_crosses(s, box) for s in segments):
                problems.append(f"{name} crosses the {line} line")
    for index, (name, box) in enumerate(boxes):
        for other, other_box in boxes[index + 1 :]:
            if overlaps(box, other_box):
                problems.append(f"{name} overlaps {other}")
    numbers = [label for label in chart.labels if label.cls == "mark-number"]
    for label, (_, _, cx, cy, r) in zip(numbers, chart.markers, strict=True):
        if label.box[2] - label.box[0] > 2 * r:
            problems.append(f"marker number {label.text} is wider than its marker")
        if not (cx - r <= (label.box[0] + label.box[2]) / 2 <= cx + r and cy - r <= label.box[3] and label.box[1] <= cy + r):
            problems.append(f"marker number {label.text} is not on its marker")
    return problems
