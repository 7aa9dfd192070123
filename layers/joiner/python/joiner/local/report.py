"""Rendering a simulation: timeline rows, the summary, and a self-contained HTML report (inline
SVG chart of nodes, pending pods and cost per hour over simulated time; no external JS or CSS)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import timedelta

from joiner.local.simulator import Entry, Sample, SimulationResult, percentile

__all__ = ["format_entry", "render_html", "summary_lines", "TIMELINE_HEADER"]

TIMELINE_HEADER = f"{'TIME':>6}  {'SOURCE':<20} {'EVENT':<52} ACTION"


def _clock(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


def format_entry(entry: Entry) -> str:
    """One timeline row: ``  01:00  joiner/scanner  scheduled tick  launched ...``."""
    return f"{_clock(entry.at):>6}  {entry.source:<20} {entry.event:<52} {entry.action}".rstrip()


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} x {k}" for k, n in sorted(counts.items())) or "none"


def _cost_line(samples: Sequence[Sample]) -> str:
    changes: list[str] = []
    last = None
    for sample in samples:
        if sample.cost != last:
            changes.append(f"{_clock(sample.at)} ${sample.cost:.4f}")
            last = sample.cost
    return " -> ".join(changes)


def _spent(samples: Sequence[Sample]) -> float:
    total = 0.0
    for before, after in zip(samples, samples[1:], strict=False):
        total += before.cost * (after.at - before.at).total_seconds() / 3600
    return total


def summary_lines(result: SimulationResult) -> list[str]:
    """The summary as printed after the timeline."""
    pending = result.pending_seconds()
    lines = [
        f"scenario          {result.scenario.name}: {result.scenario.description}" if result.scenario.description else f"scenario          {result.scenario.name}",
        f"time              {result.simulated_seconds / 60:.1f} min simulated in {result.wall_seconds:.1f} s real ({result.speedup:.0f}x)",
        f"scanner mode      {result.scanner_mode}"
        + (" (the scanner runs once a minute; `--mode responsive` adds the watcher)" if result.scanner_mode == "economy"
           else f" (the watcher wakes the scanner: {result.watcher_windows} windows, {result.wake_ups} wake-ups)"),
        f"functions         {', '.join(f'{n} x{result.invocations[n]}' for n in result.handlers)}"
        + (f"; not present: {', '.join(result.missing_handlers)}" if result.missing_handlers else ""),
        f"nodes launched    {sum(result.launched.values())}: {_counts(dict(result.launched))}",
        f"nodes terminated  {sum(result.terminated.values())}: {_counts(dict(result.terminated))}",
        f"pod pending time  p50 {percentile(pending, 50):.0f}s, p99 {percentile(pending, 99):.0f}s, max {max(pending, default=0):.0f}s over {len(pending)} pods (simulated time)",
        f"pods lost         {result.pods_lost}",
        f"cost per hour     {_cost_line(result.samples)} (spent ${_spent(result.samples):.4f})",
    ]
    if result.interruptions:
        ok = sum(1 for r in result.interruptions if r.within_deadline)
        lines.append(f"interruptions     {ok}/{len(result.interruptions)} handled within deadline")
        for r, caused in zip(result.interruptions, result.interruption_pending(), strict=True):
            start = r.warned
            drained = f"drained +{(r.drained - start).total_seconds():.0f}s" if r.drained else "not drained"
            term = f"terminated by {r.terminated_by} +{(r.terminated - start).total_seconds():.0f}s" if r.terminated else "still running"
            repl = f"replacement Ready +{(r.replacement_ready - start).total_seconds():.0f}s" if r.replacement_ready else "no replacement Node"
            lines.append(f"                  {r.instance_id} ({r.pods_at_warning} pods): {drained}, {term}, {repl} (deadline +120s), "
                         f"{caused:.0f} pod-seconds pending")
    else:
        lines.append("interruptions     none")
    for r in result.rebalances:
        start = r.warned
        if r.policy == "ignore":
            verdict = "left alone" if r.handled else "NOT left alone"
            lines.append(f"rebalance         {r.instance_id} ({r.pods_at_warning} pods, rebalance: ignore): {verdict}")
            continue
        repl = f"replacement Ready +{(r.replacement_ready - start).total_seconds():.0f}s" if r.replacement_ready else "no replacement Node"
        drain = f"drain began +{(r.drain_started - start).total_seconds():.0f}s" if r.drain_started else "no drain"
        term = f"terminated by {r.terminated_by} +{(r.terminated - start).total_seconds():.0f}s" if r.terminated else "still running"
        lines.append(f"rebalance         {r.instance_id} ({r.pods_at_warning} pods, rebalance: replace): {repl}, {drain}, {term}, "
                     f"{result.pending_caused_by(r.node, r.warned):.0f} pod-seconds pending")
    if result.capacity_failures:
        offerings = sorted({f"{f.instance_type} {f.capacity_type} {f.zone}" for f in result.capacity_failures})
        first, last = result.capacity_failures[0].at - result.start, result.capacity_failures[-1].at - result.start
        lines.append(f"capacity errors   {len(result.capacity_failures)} override(s) refused {_clock(first)}-{_clock(last)}: " + ", ".join(offerings[:6])
                     + (" ..." if len(offerings) > 6 else ""))
        for mark in result.unavailable_marks[:6]:
            lines.append(f"                  {mark.instance_type} {mark.capacity_type} {mark.zone} marked unavailable at {_clock(mark.seen - result.start)} "
                         f"until {_clock(mark.expires - result.start)}")
    if result.pod_deletions:
        evictions = [d for d in result.pod_deletions if d.via == "eviction"]
        deletions = [d for d in result.pod_deletions if d.via != "eviction"]
        when = ", ".join(_clock(d.at - result.start) for d in evictions[:12]) + (" ..." if len(evictions) > 12 else "")
        lines.append(f"pods moved        {len(evictions)} evicted" + (f" (at {when})" if evictions else "")
                     + (f", {len(deletions)} deleted (at {', '.join(sorted({_clock(d.at - result.start) for d in deletions}))})" if deletions else ""))
    if result.handler_errors:
        lines.append(f"errors            {len(result.handler_errors)}: " + "; ".join(result.handler_errors[:3]))
    if result.warnings:
        lines.append(f"joiner warnings   {len(result.warnings)} (run with --verbose to see Joiner's logs)")
    return lines


def check_lines(result: SimulationResult) -> list[str]:
    """One line per expectation: PASS / FAIL / SKIP."""
    out = []
    for check in result.checks:
        mark = "SKIP" if check.passed is None else ("PASS" if check.passed else "FAIL")
        out.append(f"{mark}  {check.description}: {check.detail}")
    return out


# ---------------------------------------------------------------- HTML


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


def _chart(samples: Sequence[Sample], total: float, marks: Sequence[tuple[float, str]]) -> str:
    width, height, left, right, top, bottom = 900, 345, 50, 60, 20, 65
    plot_w, plot_h = width - left - right, height - top - bottom
    total = max(total, 1.0)
    counts = [max(sum(s.nodes.values()), s.pending) for s in samples] or [0]
    y_max = 4 * max(1, -(-max(counts) // 4))  # whole-number gridlines: four equal integer steps
    cost_max = nice_axis_top(max([s.cost for s in samples] + [0.01]))

    def x(seconds: float) -> float:
        return left + plot_w * seconds / total

    def y(value: float, top_value: float) -> float:
        return top + plot_h * (1 - value / top_value)

    def steps(values: list[tuple[float, float]], top_value: float) -> str:
        points: list[str] = []
        previous = None
        for seconds, value in values:
            if previous is not None:
                points.append(f"{x(seconds):.1f},{y(previous, top_value):.1f}")
            points.append(f"{x(seconds):.1f},{y(value, top_value):.1f}")
            previous = value
        if previous is not None:
            points.append(f"{x(total):.1f},{y(previous, top_value):.1f}")
        return " ".join(points)

    nodes = [(s.at.total_seconds(), float(sum(s.nodes.values()))) for s in samples]
    pending = [(s.at.total_seconds(), float(s.pending)) for s in samples]
    cost = [(s.at.total_seconds(), s.cost) for s in samples]
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             'aria-label="nodes, pending pods and cost per hour over simulated time">')]
    parts.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>')
    for i in range(5):
        value = y_max * i / 4
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(value, y_max):.1f}" y2="{y(value, y_max):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 6}" y="{y(value, y_max) + 4:.1f}" text-anchor="end" font-size="11">{value:.0f}</text>')
        parts.append(f'<text x="{left + plot_w + 6}" y="{y(cost_max * i / 4, cost_max) + 4:.1f}" font-size="11" fill="#b35c00">${_money(cost_max * i / 4)}</text>')
    minutes = int(total // 60)
    step = max(1, minutes // 10)
    for minute in range(0, minutes + 1, step):
        parts.append(f'<text x="{x(minute * 60):.1f}" y="{top + plot_h + 16}" text-anchor="middle" font-size="11">{minute}m</text>')
    for seconds, label in marks:
        parts.append(f'<line x1="{x(seconds):.1f}" x2="{x(seconds):.1f}" y1="{top}" y2="{top + plot_h}" stroke="#c00" stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{x(seconds) + 3:.1f}" y="{top + 12}" font-size="11" fill="#c00">{html.escape(label)}</text>')
    parts.append(f'<polyline fill="none" stroke="#1f6feb" stroke-width="2" points="{steps(nodes, y_max)}"/>')
    parts.append(f'<polyline fill="none" stroke="#8250df" stroke-width="2" points="{steps(pending, y_max)}"/>')
    parts.append(f'<polyline fill="none" stroke="#b35c00" stroke-width="2" stroke-dasharray="6 3" points="{steps(cost, cost_max)}"/>')
    legend = [("#1f6feb", "managed nodes"), ("#8250df", "pending pods"), ("#b35c00", "cost per hour (right axis)")]
    for index, (color, label) in enumerate(legend):
        lx = left + index * 200
        parts.append(f'<rect x="{lx}" y="{height - 14}" width="12" height="4" fill="{color}"/>')
        parts.append(f'<text x="{lx + 16}" y="{height - 9}" font-size="12">{label}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 30}" text-anchor="middle" font-size="11" fill="#555">simulated time</text>')
    middle = top + plot_h / 2
    parts.append(f'<text x="12" y="{middle:.1f}" transform="rotate(-90 12 {middle:.1f})" text-anchor="middle" font-size="11" fill="#555">'
                 'nodes, pending pods</text>')
    parts.append(f'<text x="{width - 8}" y="{middle:.1f}" transform="rotate(90 {width - 8} {middle:.1f})" text-anchor="middle" font-size="11" '
                 'fill="#b35c00">cost per hour ($)</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(result: SimulationResult) -> str:
    """The self-contained HTML report."""
    from joiner.local.report import check_lines as _checks

    esc = html.escape
    marks = []
    for record in result.interruptions:
        marks.append(((record.warned - result.start).total_seconds(), "spot warning"))
    for rebalance in result.rebalances:
        marks.append(((rebalance.warned - result.start).total_seconds(), "rebalance"))
    chart = _chart(result.samples, result.simulated_seconds, marks)
    rows = "\n".join(
        f"<tr><td>{_clock(e.at)}</td><td>{esc(e.source)}</td><td>{esc(e.event)}</td><td>{esc(e.action)}</td></tr>" for e in result.entries
    )
    summary = "\n".join(esc(line) for line in summary_lines(result))
    checks = "\n".join(esc(line) for line in _checks(result)) or "no expectations declared"
    verdict = "PASSED" if result.passed else "FAILED"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Joiner simulation: {esc(result.scenario.name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
pre {{ background: #f6f8fa; padding: 1em; white-space: pre-wrap; overflow-wrap: anywhere; }}
p {{ max-width: 60em; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border-bottom: 1px solid #eee; padding: 3px 8px; text-align: left; vertical-align: top; }}
th {{ background: #f6f8fa; }}
.verdict {{ font-weight: bold; color: {'#1a7f37' if result.passed else '#cf222e'}; }}
</style></head><body>
<h1>Joiner simulation: {esc(result.scenario.name)}</h1>
<p>{esc(result.scenario.description)}</p>
<p>Started {result.start.isoformat()} (simulated clock). {result.simulated_seconds / 60:.1f} minutes simulated in
{result.wall_seconds:.1f} seconds of real time. Expectations: <span class="verdict">{verdict}</span>.</p>
{chart}
<h2>Summary</h2>
<pre>{summary}</pre>
<h2>Expectations</h2>
<pre>{checks}</pre>
<h2>Timeline</h2>
<table><tr><th>time</th><th>source</th><th>event</th><th>action</th></tr>
{rows}
</table>
</body></html>
"""
