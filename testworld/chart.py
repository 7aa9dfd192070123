"""The report's chart: one inline SVG, no script, no external resource.

From top to bottom: a lane of numbered event markers (warnings, launches, drains, terminations,
scale changes; the numbers refer to the list under the chart), the plot (nodes billed, pending
pods, cost per hour on the right axis; spans where empty nodes wait for ``consolidateAfter``
shaded), the time axis, the annotations of those spans, and one bar per node from its launch to
its termination (what it is billed for: faint while it boots, solid once Ready, hatched while
empty). Every label sits outside the plot, in a row of its own, so none crosses a line of the
plot or another label; :func:`text_box` is the box the layout reserves for a label.
"""

from __future__ import annotations

import enum
import html
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from joiner.domain.durations import format_duration

__all__ = [
    "ASCENT",
    "DESCENT",
    "ChartData",
    "IdleSpan",
    "Lane",
    "Mark",
    "MarkKind",
    "chart_data",
    "nice_axis_top",
    "render_chart",
    "text_box",
    "text_width",
]

#: Advance widths of the printable ASCII characters, in thousandths of an em, from DejaVu Sans
#: (the widest of the fonts named in :data:`FONT` bar Verdana, which :data:`_WIDTH_MARGIN` covers).
_ADVANCE = dict(
    zip(
        " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~",
        (
            318,
            401,
            460,
            838,
            636,
            950,
            780,
            275,
            390,
            390,
            500,
            838,
            318,
            361,
            318,
            337,
            *([636] * 10),
            337,
            337,
            838,
            838,
            838,
            531,
            1000,
            684,
            686,
            698,
            770,
            632,
            575,
            775,
            752,
            295,
            295,
            656,
            557,
            863,
            748,
            787,
            603,
            787,
            695,
            635,
            611,
            732,
            684,
            989,
            685,
            611,
            685,
            390,
            337,
            390,
            838,
            500,
            500,
            613,
            635,
            550,
            635,
            615,
            352,
            635,
            634,
            278,
            278,
            579,
            278,
            974,
            634,
            612,
            635,
            635,
            411,
            521,
            392,
            634,
            592,
            818,
            592,
            592,
            525,
            636,
            337,
            636,
            838,
        ),
        strict=True,
    )
)
#: How far a line of text reaches above and below its baseline, in ems (a browser's text box:
#: the font's full ascent and descent, 0.93 and 0.24 in DejaVu Sans).
ASCENT, DESCENT = 0.95, 0.3
#: Room the layout adds to the table's widths (other fonts, hinting); a character outside the
#: table counts as a full em.
_WIDTH_MARGIN = 1.1
#: What the chart's text is set in.
FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
#: At most this many node bars (a note says how many more there were).
MAX_LANES = 40
#: At most this many rows of markers; a marker with no room left joins the nearest one.
MAX_MARK_ROWS = 4


class MarkKind(enum.Enum):
    """What a marker stands for (its colour and the word in the key)."""

    WARNING = "warning"
    LAUNCH = "launch"
    DRAIN = "drain"
    TERMINATION = "termination"
    SCALE = "scale"

    @property
    def color(self) -> str:
        return _KIND_COLORS[self]


_KIND_COLORS = {
    MarkKind.WARNING: "#cf222e",
    MarkKind.LAUNCH: "#1a7f37",
    MarkKind.DRAIN: "#bf3989",
    MarkKind.TERMINATION: "#57606a",
    MarkKind.SCALE: "#0969da",
}
_KIND_ORDER = {kind: index for index, kind in enumerate(MarkKind)}


@dataclass(frozen=True)
class Mark:
    """An event of note at ``at`` seconds since the start."""

    at: float
    kind: MarkKind
    text: str


@dataclass(frozen=True)
class Lane:
    """A managed instance's billed life, in seconds since the start: ``launched`` to ``ended``
    (its termination, or the end of the run when ``terminated`` is False); ``ready`` when its
    Node registered (None: never); ``idle_from`` when it was left empty for good (None: never)."""

    instance_id: str
    node: str
    instance_type: str
    capacity_type: str
    node_pool: str
    price: float
    launched: float
    ended: float
    terminated: bool
    ready: float | None = None
    idle_from: float | None = None

    @property
    def label(self) -> str:
        return f"{self.instance_type} {self.capacity_type} ${self.price:.4f}/h"


@dataclass(frozen=True)
class IdleSpan:
    """Nodes of ``node_pool`` left empty from ``start`` and billed until ``end`` (their
    termination, or the end of the run when ``until_end``), waiting for ``consolidate_after``."""

    start: float
    end: float
    nodes: tuple[str, ...]
    node_pool: str
    consolidate_after: str
    until_end: bool
    #: how often the disruption function runs (seconds; None: it is not deployed)
    disruption_every: float | None

    @property
    def label(self) -> str:
        count = len(self.nodes)
        who = f"{count} node{'s' if count != 1 else ''} empty {_span(self.end - self.start)}"
        if self.consolidate_after == "Never":
            return f"{who}, consolidateAfter Never: kept"
        if self.disruption_every is None:
            return f"{who}, consolidateAfter {self.consolidate_after}; no disruption function"
        return f"{who}, waiting for consolidateAfter {self.consolidate_after} (disruption runs every {_span(self.disruption_every)})"

    @property
    def explanation(self) -> str:
        """The sentence under the chart."""
        count = len(self.nodes)
        subject = f"{count} node{'s' if count != 1 else ''} of NodePool {self.node_pool}"
        until = "until the end of the run" if self.until_end else f"until their termination at {_clock(self.end)}"
        head = f"{_clock(self.start)}-{_clock(self.end)}: {subject} had no pods left and were billed {until}"
        if self.consolidate_after == "Never":
            return f"{head}: the NodePool's consolidateAfter is Never, so no empty node is removed."
        if self.disruption_every is None:
            return f"{head}: no disruption function is deployed to remove empty nodes (consolidateAfter {self.consolidate_after})."
        return (
            f"{head}: the disruption function, which runs every {_span(self.disruption_every)}, removes an empty node once "
            f"it has seen it empty for the NodePool's consolidateAfter ({self.consolidate_after})."
        )


@dataclass(frozen=True)
class ChartData:
    """Everything the chart draws; ``samples`` are (seconds, pending pods, cost per hour)."""

    total: float
    samples: tuple[tuple[float, int, float], ...]
    marks: tuple[Mark, ...] = ()
    lanes: tuple[Lane, ...] = ()
    idle: tuple[IdleSpan, ...] = ()


# ---------------------------------------------------------------- from a simulation


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60:02d}:{whole % 60:02d}"


def _span(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def chart_data(result: Any, *, disruption_every: float | None = None) -> ChartData:
    """The chart of a :class:`~testworld.simulator.SimulationResult`.
    ``disruption_every``: the disruption function's schedule in seconds (None: not deployed)."""
    start: datetime = result.start
    total = float(result.simulated_seconds)

    def since(when: datetime) -> float:
        return (when - start).total_seconds()

    samples = tuple((s.at.total_seconds(), int(s.pending), float(s.cost)) for s in result.samples)
    lanes = _lanes(result, since, total)
    return ChartData(total, samples, tuple(_marks(result, since)), lanes, tuple(_idle_spans(result, lanes, disruption_every)))


def _marks(result: Any, since: Any) -> list[Mark]:
    found: dict[tuple[int, MarkKind], list[str]] = defaultdict(list)

    def add(at: float, kind: MarkKind, text: str) -> None:
        found[(int(at), kind)].append(text)

    scales: dict[int, list[str]] = defaultdict(list)
    for event in getattr(result.scenario, "events", ()):
        at = event.at.total_seconds()
        if event.kind == "scale":
            scales[int(at)].append(f"{event.workload} to {event.replicas}")
        elif event.kind == "capacityError":
            add(at, MarkKind.WARNING, f"no capacity: {event.describe_offerings()}")
        elif event.kind == "delete":
            add(at, MarkKind.WARNING, f"kubectl delete {event.object_kind.lower()} {event.name}")
    for at, changes in scales.items():
        add(at, MarkKind.SCALE, ", ".join(changes))
    for record in result.interruptions:
        add(
            since(record.warned),
            MarkKind.WARNING,
            f"spot interruption warning for {record.instance_id} (node {record.node}, {_plural(record.pods_at_warning, 'pod')}); "
            f"EC2 reclaims it at {_clock(since(record.deadline))}",
        )
    for record in result.rebalances:
        add(
            since(record.warned),
            MarkKind.WARNING,
            f"rebalance recommendation for {record.instance_id} (node {record.node}, {_plural(record.pods_at_warning, 'pod')}; rebalance: {record.policy})",
        )
    managed = sorted((i for i in result.instances if i.managed), key=lambda i: (i.launched, i.instance_id))
    launched: dict[int, list[Any]] = defaultdict(list)
    for instance in managed:
        launched[int(since(instance.launched))].append(instance)
    for at, instances in launched.items():
        kinds: dict[str, int] = defaultdict(int)
        for instance in instances:
            kinds[f"{instance.instance_type} ({instance.capacity_type})"] += 1
        add(at, MarkKind.LAUNCH, ", ".join(f"{n} x {what}" if n > 1 else what for what, n in kinds.items()))
    drains: dict[tuple[int, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for deletion in result.pod_deletions:
        drains[(int(since(deletion.at)), deletion.function, deletion.via)][deletion.node or "?"] += 1
    for (at, function, via), nodes in sorted(drains.items()):
        verb = "evicted" if via == "eviction" else "deleted"
        add(at, MarkKind.DRAIN, f"{function} {verb} " + ", ".join(f"{_plural(count, 'pod')} from {node}" for node, count in sorted(nodes.items())))
    ended: dict[tuple[int, str], list[str]] = defaultdict(list)
    for instance in managed:
        if instance.terminated is not None:
            by = "Joiner" if instance.terminated_by == "joiner" else (instance.terminated_by or "?").upper()
            ended[(int(since(instance.terminated)), by)].append(f"{instance.instance_id} ({instance.instance_type}, {instance.private_dns})")
    for (at, by), names in ended.items():
        add(at, MarkKind.TERMINATION, f"by {by}: " + ", ".join(names))
    return sorted((Mark(float(at), kind, "; ".join(texts)) for (at, kind), texts in found.items()), key=lambda m: (m.at, _KIND_ORDER[m.kind]))


def _lanes(result: Any, since: Any, total: float) -> tuple[Lane, ...]:
    pods_by_node: dict[str, list[Any]] = defaultdict(list)
    for pod in result.pods:
        if pod.node:
            pods_by_node[pod.node].append(pod)
    removed_by_joiner = {(d.pod, d.node) for d in result.pod_deletions}
    lanes = []
    for instance in sorted((i for i in result.instances if i.managed), key=lambda i: (i.launched, i.instance_id)):
        ended = min(total, since(instance.terminated)) if instance.terminated is not None else total
        registered = result.registered_at.get(instance.instance_id)
        ready = since(registered) if registered is not None else None
        idle_from = None
        pods = pods_by_node.get(instance.private_dns, [])
        if ready is not None:
            if not pods:
                idle_from = ready
            elif all(p.gone is not None for p in pods):
                last = max(pods, key=lambda p: p.gone)
                # pods Joiner moved away were a drain, not the workload leaving
                if (last.key, instance.private_dns) not in removed_by_joiner:
                    idle_from = max(ready, since(last.gone))
            if idle_from is not None and idle_from >= ended:
                idle_from = None
        lanes.append(
            Lane(
                instance.instance_id,
                instance.private_dns,
                instance.instance_type,
                instance.capacity_type,
                instance.node_pool,
                float(instance.price),
                since(instance.launched),
                ended,
                instance.terminated is not None and since(instance.terminated) <= total,
                ready,
                idle_from,
            )
        )
    return tuple(lanes)


def _consolidate_after(scenario: Any) -> Mapping[str, str]:
    out = {}
    for obj in getattr(scenario, "objects", ()):
        if obj.get("kind") == "NodePool":
            disruption = (obj.get("spec") or {}).get("disruption") or {}
            out[str((obj.get("metadata") or {}).get("name"))] = str(disruption.get("consolidateAfter", "0s"))
    return out


def _idle_spans(result: Any, lanes: Sequence[Lane], disruption_every: float | None) -> list[IdleSpan]:
    after = _consolidate_after(result.scenario)
    groups: dict[tuple[int, int, str, bool], list[str]] = defaultdict(list)
    for lane in lanes:
        if lane.idle_from is not None:
            groups[(int(lane.idle_from), math.ceil(lane.ended), lane.node_pool, not lane.terminated)].append(lane.node)
    return [
        IdleSpan(float(start), float(end), tuple(nodes), pool, after.get(pool, "0s"), until_end, disruption_every)
        for (start, end, pool, until_end), nodes in sorted(groups.items())
    ]


# ---------------------------------------------------------------- geometry


def text_width(text: str, size: float) -> float:
    """The width the layout reserves for ``text`` set at ``size`` px: never less than it takes."""
    return sum(_ADVANCE.get(char, 1000) for char in text) / 1000 * size * _WIDTH_MARGIN


def text_box(x: float, y: float, text: str, size: float, anchor: str = "start") -> tuple[float, float, float, float]:
    """The box (x0, y0, x1, y1) a label of ``size`` px at baseline (x, y) is given."""
    width = text_width(text, size)
    x0 = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return (x0, y - ASCENT * size, x0 + width, y + DESCENT * size)


def nice_axis_top(value: float) -> float:
    """The smallest top of an axis, at least ``value``, whose four gridline steps are round
    (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten): $0.60 for $0.572, $1.20 for $1.04."""
    if value <= 0:
        return 1.0
    quarter = value / 4
    power: float = 10.0 ** math.floor(math.log10(quarter))
    for factor in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if factor * power >= quarter - 1e-12:
            return round(4 * factor * power, 10)
    return 4 * 10 * power


def _money(value: float) -> str:
    """Dollars with as many decimals as a round axis value needs (at least two)."""
    text = f"{value:.4f}".rstrip("0")
    whole, _, decimals = text.partition(".")
    return f"{whole}.{decimals.ljust(2, '0')}"


def _place_marks(marks: Sequence[Mark], x: Any, radius: float) -> list[tuple[float, int, list[Mark]]]:
    """(x, row, marks) per marker: markers closer than a diameter go to the next row; with no row
    left a mark joins the marker nearest before it."""
    gap = 2 * radius + 3
    rows: list[float] = []
    placed: list[tuple[float, int, list[Mark]]] = []
    for mark in marks:
        at = x(mark.at)
        row = next((r for r, last in enumerate(rows) if at - last >= gap), None)
        if row is None and len(rows) < MAX_MARK_ROWS:
            rows.append(-math.inf)
            row = len(rows) - 1
        if row is None:
            nearest = max(range(len(placed)), key=lambda i: (placed[i][0], -placed[i][1]))
            placed[nearest][2].append(mark)
            continue
        rows[row] = at
        placed.append((at, row, [mark]))
    return placed


@dataclass
class _Svg:
    parts: list[str]

    def text(self, x: float, y: float, text: str, size: float = 11, anchor: str = "start", fill: str = "#222", cls: str = "label", extra: str = "") -> None:
        size = math.floor(size * 100) / 100
        self.parts.append(
            f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" text-anchor="{anchor}" fill="{fill}"{extra}>{html.escape(text)}</text>'
        )


def render_chart(data: ChartData) -> tuple[str, list[tuple[int, Mark]]]:
    """The SVG, and the numbered marks for the list under it (number, mark)."""
    total = max(data.total, 1.0)
    counts = _node_counts(data.lanes, total)
    y_max = 4 * max(1, -(-max([c for _, c in counts] + [p for _, p, _ in data.samples] + [0]) // 4))
    cost_max = nice_axis_top(max([c for _, _, c in data.samples] + [0.01]))
    # the gutters hold the axes' values and their titles, turned a quarter
    count_w = max(text_width(f"{y_max * i / 4:.0f}", 11) for i in range(5))
    cost_w = max(text_width(f"${_money(cost_max * i / 4)}", 11) for i in range(5))
    width, left = 1040, 200
    right = max(70, math.ceil(6 + cost_w + 4 + (DESCENT + ASCENT) * 11 + 4))
    plot_w = width - left - right
    count_title_x = left - 6 - count_w - 4 - DESCENT * 11
    cost_title_x = left + plot_w + 6 + cost_w + 4 + DESCENT * 11

    def x(seconds: float) -> float:
        return left + plot_w * min(max(seconds, 0.0), total) / total

    radius = 8.0 if len(data.marks) < 100 else 10.0
    placed = _place_marks(data.marks, x, radius)
    mark_rows = max((row for _, row, _ in placed), default=-1) + 1
    lane_top_pad = 8
    row_h = 2 * radius + 4
    top = lane_top_pad + max(mark_rows, 1) * row_h + 8
    plot_h = 230
    bottom = top + plot_h

    def y(value: float, top_value: float) -> float:
        return top + plot_h * (1 - value / top_value)

    svg = _Svg([])
    p = svg.parts
    p.append(
        '<defs><pattern id="idle-hatch" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">'
        '<rect width="3" height="6" fill="#b35c00" fill-opacity="0.55"/></pattern></defs>'
    )
    # the marker lane
    svg.text(left - 12, lane_top_pad + row_h / 2 + 4, "events (listed below)", 11, "end", "#555")
    numbered: list[tuple[int, Mark]] = []
    guides: list[str] = []
    for number, (at, row, group) in enumerate(placed, start=1):
        kind = group[0].kind
        cy = lane_top_pad + row * row_h + row_h / 2
        p.append(f'<g class="mark" data-kind="{kind.value}" data-at="{group[0].at:g}"><circle cx="{at:.1f}" cy="{cy:.1f}" r="{radius:g}" fill="{kind.color}"/>')
        svg.text(at, cy + 3.5, str(number), 9 if number < 100 else 8, "middle", "#fff", cls="mark-number")
        p.append("</g>")
        guides.append(
            f'<line class="guide" x1="{at:.1f}" x2="{at:.1f}" y1="{cy + radius:.1f}" y2="{{bottom}}" stroke="{kind.color}" '
            'stroke-opacity="0.45" stroke-dasharray="3 3"/>'
        )
        for mark in group:
            numbered.append((number, mark))
    # the plot
    p.append(f'<rect class="plot" x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>')
    for span in data.idle:
        p.append(
            f'<rect class="idle-band" x="{x(span.start):.1f}" y="{top}" width="{x(span.end) - x(span.start):.1f}" height="{plot_h}" '
            'fill="#b35c00" fill-opacity="0.08"/>'
        )
    for i in range(5):
        value = y_max * i / 4
        p.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value, y_max):.1f}" y2="{y(value, y_max):.1f}" stroke="#eee"/>')
        svg.text(left - 6, y(value, y_max) + 4, f"{value:.0f}", 11, "end")
        svg.text(left + plot_w + 6, y(cost_max * i / 4, cost_max) + 4, f"${_money(cost_max * i / 4)}", 11, fill="#b35c00")
    p.extend(g.replace("{bottom}", f"{bottom:.1f}") for g in guides)
    p.append(f'<polyline class="nodes" fill="none" stroke="#1f6feb" stroke-width="2" points="{_steps(counts, x, lambda v: y(v, y_max), total)}"/>')
    pending = [(at, float(n)) for at, n, _ in data.samples]
    p.append(f'<polyline class="pending" fill="none" stroke="#8250df" stroke-width="2" points="{_steps(pending, x, lambda v: y(v, y_max), total)}"/>')
    cost = [(at, c) for at, _, c in data.samples]
    p.append(
        f'<polyline class="cost" fill="none" stroke="#b35c00" stroke-width="2" stroke-dasharray="6 3" '
        f'points="{_steps(cost, x, lambda v: y(v, cost_max), total)}"/>'
    )
    middle = top + plot_h / 2
    p.append(
        f'<text class="axis-title" x="{count_title_x:.1f}" y="{middle:.1f}" transform="rotate(-90 {count_title_x:.1f} {middle:.1f})" '
        'text-anchor="middle" font-size="11" fill="#555">nodes, pending pods</text>'
    )
    p.append(
        f'<text class="axis-title" x="{cost_title_x:.1f}" y="{middle:.1f}" transform="rotate(90 {cost_title_x:.1f} {middle:.1f})" '
        'text-anchor="middle" font-size="11" fill="#b35c00">cost per hour ($)</text>'
    )
    # the time axis
    minutes = int(total // 60)
    step = max(1, minutes // 12)
    for minute in range(0, minutes + 1, step):
        svg.text(x(minute * 60), bottom + 20, f"{minute}m", 11, "middle")
    svg.text(left - 30, bottom + 20, "simulated time", 11, "end", "#555")
    # the idle annotations, each in the first row where it fits
    row_top = bottom + 30
    rows: list[list[tuple[float, float]]] = []
    placed_idle: list[tuple[IdleSpan, int, float, str]] = []
    for span in data.idle:
        x0, x1 = x(span.start), x(span.end)
        w = text_width(span.label, 11)
        tx = min(max((x0 + x1 - w) / 2, 4.0), width - 4 - w)
        extent = (min(x0, tx) - 6, max(x1, tx + w) + 6)
        free = next((r for r, used in enumerate(rows) if all(extent[1] <= a or extent[0] >= b for a, b in used)), None)
        if free is None:
            rows.append([])
        row = len(rows) - 1 if free is None else free
        rows[row].append(extent)
        placed_idle.append((span, row, tx, span.label))
    for span, row, tx, label in placed_idle:
        ry = row_top + row * 30
        x0, x1 = x(span.start), x(span.end)
        p.append(
            f'<g class="idle" data-from="{span.start:g}" data-to="{span.end:g}" data-nodes="{len(span.nodes)}">'
            f'<path d="M{x0:.1f},{ry + 6:.1f} V{ry:.1f} H{x1:.1f} V{ry + 6:.1f}" fill="none" stroke="#b35c00" stroke-width="1.5"/>'
        )
        svg.text(tx, ry + 20, label, 11, fill="#8a4600", cls="label idle-label")
        p.append("</g>")
    lanes_top = row_top + len(rows) * 30 + (6 if rows else 0)
    # one bar per node
    svg.text(left, lanes_top + 11, "nodes, billed from launch to termination", 11, fill="#555")
    lane_h = 16
    shown = data.lanes[:MAX_LANES]
    first = lanes_top + 18
    for index, lane in enumerate(shown):
        ly = first + index * lane_h
        color = "#1f6feb" if lane.capacity_type == "on-demand" else "#0a7d8c"
        x0, x1 = x(lane.launched), x(lane.ended)
        p.append(
            f'<g class="lane" data-instance="{html.escape(lane.instance_id)}" data-from="{lane.launched:g}" data-to="{lane.ended:g}">'
            f"<title>{html.escape(f'{lane.node} {lane.instance_id}')}</title>"
        )
        svg.text(left - 12, ly + 10, lane.label, min(10.0, 10 * (left - 16) / text_width(lane.label, 10)), "end", "#333")
        p.append(f'<rect class="billed" x="{x0:.1f}" y="{ly + 2}" width="{max(x1 - x0, 1.0):.1f}" height="10" fill="{color}" fill-opacity="0.3"/>')
        if lane.ready is not None and lane.ready < lane.ended:
            p.append(
                f'<rect class="ready" x="{x(lane.ready):.1f}" y="{ly + 2}" width="{max(x1 - x(lane.ready), 1.0):.1f}" height="10" '
                f'fill="{color}" fill-opacity="0.85"/>'
            )
        if lane.idle_from is not None:
            p.append(
                f'<rect class="idle-part" x="{x(lane.idle_from):.1f}" y="{ly + 2}" width="{max(x1 - x(lane.idle_from), 1.0):.1f}" '
                'height="10" fill="#fff" fill-opacity="0.6"/>'
            )
            p.append(f'<rect x="{x(lane.idle_from):.1f}" y="{ly + 2}" width="{max(x1 - x(lane.idle_from), 1.0):.1f}" height="10" fill="url(#idle-hatch)"/>')
        p.append("</g>")
    lanes_bottom = first + len(shown) * lane_h
    if len(data.lanes) > len(shown):
        svg.text(left - 12, lanes_bottom + 10, f"and {len(data.lanes) - len(shown)} more nodes", 10, "end", "#555")
        lanes_bottom += lane_h
    if not shown:
        svg.text(left, first + 10, "no node launched", 10, fill="#555")
        lanes_bottom += lane_h
    for at, _row, group in placed:
        p.append(
            f'<line class="guide" x1="{at:.1f}" x2="{at:.1f}" y1="{first:.1f}" y2="{lanes_bottom:.1f}" stroke="{group[0].kind.color}" '
            'stroke-opacity="0.45" stroke-dasharray="3 3"/>'
        )
    # the key
    key_top = lanes_bottom + 20
    entries: list[tuple[str, str]] = [
        ("line:#1f6feb", "nodes billed (launched, not yet terminated)"),
        ("line:#8250df", "pending pods"),
        ("dash:#b35c00", "cost per hour (right axis)"),
        ("bar:#0a7d8c", "spot node (faint: booting)"),
        ("bar:#1f6feb", "on-demand node"),
        ("hatch:", "empty, still billed"),
    ] + [(f"dot:{kind.color}", kind.value) for kind in MarkKind]
    kx, ky = float(left), key_top
    for swatch, label in entries:
        w = 16 + text_width(label, 12)
        if kx + w > width - 4:
            kx, ky = float(left), ky + 18
        shape, _, color = swatch.partition(":")
        if shape == "line":
            p.append(f'<rect x="{kx:.1f}" y="{ky - 5:.1f}" width="12" height="3" fill="{color}"/>')
        elif shape == "dash":
            p.append(f'<line x1="{kx:.1f}" x2="{kx + 12:.1f}" y1="{ky - 4:.1f}" y2="{ky - 4:.1f}" stroke="{color}" stroke-width="2" stroke-dasharray="4 2"/>')
        elif shape == "bar":
            p.append(f'<rect x="{kx:.1f}" y="{ky - 9:.1f}" width="12" height="10" fill="{color}" fill-opacity="0.85"/>')
        elif shape == "hatch":
            p.append(f'<rect x="{kx:.1f}" y="{ky - 9:.1f}" width="12" height="10" fill="url(#idle-hatch)"/>')
        else:
            p.append(f'<circle cx="{kx + 6:.1f}" cy="{ky - 4:.1f}" r="5" fill="{color}"/>')
        svg.text(kx + 16, ky, label, 12, cls="label key")
        kx += w + 14
    height = ky + 10
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height:.0f}" width="{width}" height="{height:.0f}" '
        f'font-family="{FONT}" role="img" aria-label="events, nodes, pending pods and cost per hour over simulated time">'
    )
    return head + "".join(p) + "</svg>", numbered


def _node_counts(lanes: Sequence[Lane], total: float) -> list[tuple[float, float]]:
    """(seconds, nodes billed) at every launch and termination."""
    changes: dict[float, int] = defaultdict(int)
    changes[0.0] += 0
    for lane in lanes:
        changes[lane.launched] += 1
        if lane.terminated:
            changes[lane.ended] -= 1
    out, running = [], 0
    for at in sorted(changes):
        running += changes[at]
        out.append((min(at, total), float(running)))
    return out


def _steps(values: Sequence[tuple[float, float]], x: Any, y: Any, total: float) -> str:
    points: list[str] = []
    previous = None
    for seconds, value in values:
        if previous is not None:
            points.append(f"{x(seconds):.1f},{y(previous):.1f}")
        points.append(f"{x(seconds):.1f},{y(value):.1f}")
        previous = value
    if previous is not None:
        points.append(f"{x(total):.1f},{y(previous):.1f}")
    return " ".join(points)
