"""The report in a real browser: headless Chromium takes a screenshot of it (a picture, not a
blank page, showing the chart's colours) and measures its labels (the boxes the layout reserved
hold them, and none crosses a line, the plot or another label). Skipped, saying why, when no
Chromium is installed."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.report_geometry import classic_result, classic_scenario, layout_problems, read_chart
from testworld.report import render_html

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless_shell")
BROWSER = next((found for name in BROWSERS if (found := shutil.which(name))), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason=f"no headless Chromium on PATH (looked for {', '.join(BROWSERS)})")


def _browser(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    return subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", f"--user-data-dir={tmp / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit truecolour PNG, without a library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, idat, header = 8, b"", b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG format: depth {depth}, colour type {color}"
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for index in range(height):
        kind = raw[index * (stride + 1)]
        line = bytearray(raw[index * (stride + 1) + 1 : (index + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, rows


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    path = tmp / "report.html"
    path.write_text(render_html(classic_result(classic_scenario(tmp))), encoding="utf-8")
    return path


@needs_browser
def test_a_screenshot_of_the_report_shows_the_chart(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    done = _browser(tmp_path, f"--screenshot={shot}", "--window-size=1400,1000", report.as_uri())
    assert shot.exists(), f"no screenshot: {done.stderr[-2000:]}"
    data = shot.read_bytes()
    assert len(data) > 20_000, f"a {len(data)}-byte screenshot is too small to hold the report"
    width, height, rows = read_png(data)
    assert (width, height) == (1400, 1000)
    channels = len(rows[0]) // width
    pixels = Counter(bytes(row[i : i + 3]) for row in rows[::4] for i in range(0, len(row), channels * 4))
    white = pixels[b"\xff\xff\xff"] / sum(pixels.values())
    assert 0.3 < white < 0.97, f"{white:.0%} of the page is white: blank or unstyled"
    assert len(pixels) > 40, "too few colours for a chart"

    def near(color: tuple[int, int, int]) -> int:
        return sum(n for pixel, n in pixels.items() if all(abs(a - b) <= 40 for a, b in zip(pixel, color, strict=True)))

    # the cost line's orange, the warning marker's red, the launch marker's green, a node's teal bar
    for name, color in (("cost", (0xB3, 0x5C, 0x00)), ("warning", (0xCF, 0x22, 0x2E)), ("launch", (0x1A, 0x7F, 0x37)), ("spot bar", (0x0A, 0x7D, 0x8C))):
        assert near(color) > 0, f"no {name} colour in the screenshot"


MEASURE = """<script>
const svg = document.querySelector('svg').getBoundingClientRect();
const boxes = [...document.querySelectorAll('svg text')].map(t => {
  const r = t.getBoundingClientRect();
  return [r.left - svg.left, r.top - svg.top, r.right - svg.left, r.bottom - svg.top];
});
const out = document.createElement('pre'); out.id = 'measured'; out.textContent = JSON.stringify(boxes);
document.body.appendChild(out);
</script>"""


@needs_browser
def test_the_browser_draws_every_label_inside_its_reserved_box(report: Path, tmp_path: Path) -> None:
    """The layout reserves boxes from a count of characters; Chromium, with the fonts of this
    machine, must draw each label no wider than that, and so apart from the others."""
    page = report.read_text(encoding="utf-8")
    harness = tmp_path / "measure.html"
    harness.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    done = _browser(tmp_path, "--dump-dom", harness.as_uri())
    start = done.stdout.find('<pre id="measured">')
    assert start >= 0, f"the measuring page did not run: {done.stderr[-2000:]}"
    measured = json.loads(done.stdout[start + len('<pre id="measured">') : done.stdout.index("</pre>", start)])
    chart = read_chart(page)
    assert len(measured) == len(chart.labels)
    for label, box in zip(chart.labels, measured, strict=True):
        along = 1 if label.turned else 0  # the direction the text runs in
        drawn, reserved = box[along + 2] - box[along], label.box[along + 2] - label.box[along]
        assert drawn <= reserved + 0.5, f"{label.text!r} drawn {drawn:.1f} px long, reserved {reserved:.1f}"
        for axis in (0, 1):
            assert label.box[axis] - 0.5 <= box[axis] and box[axis + 2] <= label.box[axis + 2] + 0.5, f"{label.text!r} drawn at {box}, reserved {label.box}"
    # and, as drawn (the font's full height included), apart from each other and the lines
    as_drawn = replace(chart, labels=[replace(label, box=(b[0], b[1], b[2], b[3])) for label, b in zip(chart.labels, measured, strict=True)])
    assert layout_problems(as_drawn) == []
