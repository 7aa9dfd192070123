"""Rendering a simulation: timeline rows, the summary, and a self-contained HTML report (the
inline SVG chart of :mod:`testworld.chart`, the list of its numbered events, the summary and
the timeline; no script, no external resource)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import timedelta

from testworld.chart import Mark, chart_data, nice_axis_top, render_chart
from testworld.simulator import SCHEDULED, Entry, Sample, SimulationResult, percentile

__all__ = ["format_entry", "nice_axis_top", "render_html", "summary_lines", "TIMELINE_HEADER"]

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
        f"scenario          {result.scenario.name}: {result.scenario.description}"
        if result.scenario.description
        else f"scenario          {result.scenario.name}",
        f"time              {result.simulated_seconds / 60:.1f} min simulated in {result.wall_seconds:.1f} s real ({result.speedup:.0f}x)",
        f"scanner mode      {result.scanner_mode}"
        + (
            " (the scanner runs once a minute; `--mode responsive` adds the watcher)"
            if result.scanner_mode == "economy"
            else f" (the watcher wakes the scanner: {result.watcher_windows} windows, {result.wake_ups} wake-ups)"
        ),
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
            lines.append(
                f"                  {r.instance_id} ({r.pods_at_warning} pods): {drained}, {term}, {repl} (deadline +120s), {caused:.0f} pod-seconds pending"
            )
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
        lines.append(
            f"rebalance         {r.instance_id} ({r.pods_at_warning} pods, rebalance: replace): {repl}, {drain}, {term}, "
            f"{result.pending_caused_by(r.node, r.warned):.0f} pod-seconds pending"
        )
    for deletion in result.deletions:
        since = deletion.at
        what = f"{deletion.kind.lower()}/{deletion.name} at {_clock(since - result.start)} ({deletion.pods_at_deletion} pods on {deletion.node or '-'})"
        if not deletion.held:
            lines.append(f"deletion          {what}: deleted at once, nothing held it")
            continue
        drained = f"drained +{(deletion.drained - since).total_seconds():.0f}s" if deletion.drained else "not drained"
        term = (
            f"terminated by {deletion.terminated_by} +{(deletion.terminated - since).total_seconds():.0f}s" if deletion.terminated else "instance still running"
        )
        gone = f"released +{(deletion.gone - since).total_seconds():.0f}s" if deletion.gone else "still held"
        lines.append(f"deletion          {what}: {drained}, {term}, {gone}")
    if result.capacity_failures:
        offerings = sorted({f"{f.instance_type} {f.capacity_type} {f.zone}" for f in result.capacity_failures})
        first, last = result.capacity_failures[0].at - result.start, result.capacity_failures[-1].at - result.start
        lines.append(
            f"capacity errors   {len(result.capacity_failures)} override(s) refused {_clock(first)}-{_clock(last)}: "
            + ", ".join(offerings[:6])
            + (" ..." if len(offerings) > 6 else "")
        )
        for mark in result.unavailable_marks[:6]:
            lines.append(
                f"                  {mark.instance_type} {mark.capacity_type} {mark.zone} marked unavailable at {_clock(mark.seen - result.start)} "
                f"until {_clock(mark.expires - result.start)}"
            )
    if result.pod_deletions:
        evictions = [d for d in result.pod_deletions if d.via == "eviction"]
        deletions = [d for d in result.pod_deletions if d.via != "eviction"]
        when = ", ".join(_clock(d.at - result.start) for d in evictions[:12]) + (" ..." if len(evictions) > 12 else "")
        lines.append(
            f"pods moved        {len(evictions)} evicted"
            + (f" (at {when})" if evictions else "")
            + (f", {len(deletions)} deleted (at {', '.join(sorted({_clock(d.at - result.start) for d in deletions}))})" if deletions else "")
        )
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


def _mark_list(numbered: Sequence[tuple[int, Mark]]) -> str:
    items = []
    for number, mark in numbered:
        items.append(
            f'<li><span class="badge" style="background:{mark.kind.color}">{number}</span> '
            f"<b>{_clock(timedelta(seconds=mark.at))}</b> {html.escape(mark.kind.value)}: {html.escape(mark.text)}</li>"
        )
    return '<ol class="marks">' + "".join(items) + "</ol>" if items else ""


def render_html(result: SimulationResult) -> str:
    """The self-contained HTML report."""
    esc = html.escape
    data = chart_data(result, disruption_every=float(SCHEDULED["disruption"]) if "disruption" in result.handlers else None)
    chart, numbered = render_chart(data)
    idle = "".join(f'<p class="idle">{esc(span.explanation)}</p>' for span in data.idle)
    rows = "\n".join(f"<tr><td>{_clock(e.at)}</td><td>{esc(e.source)}</td><td>{esc(e.event)}</td><td>{esc(e.action)}</td></tr>" for e in result.entries)
    summary = "\n".join(esc(line) for line in summary_lines(result))
    checks = "\n".join(esc(line) for line in check_lines(result)) or "no expectations declared"
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
ol.marks {{ list-style: none; padding-left: 0; font-size: 13px; max-width: 75em; }}
ol.marks li {{ margin: 2px 0; }}
.badge {{ display: inline-block; min-width: 1.5em; border-radius: 0.75em; color: #fff; text-align: center; font-size: 11px; }}
p.idle {{ font-size: 13px; color: #8a4600; }}
.verdict {{ font-weight: bold; color: {"#1a7f37" if result.passed else "#cf222e"}; }}
</style></head><body>
<h1>Joiner simulation: {esc(result.scenario.name)}</h1>
<p>{esc(result.scenario.description)}</p>
<p>Started {result.start.isoformat()} (simulated clock). {result.simulated_seconds / 60:.1f} minutes simulated in
{result.wall_seconds:.1f} seconds of real time. Expectations: <span class="verdict">{verdict}</span>.</p>
{chart}
{_mark_list(numbered)}
{idle}
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
