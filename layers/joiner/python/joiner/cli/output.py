"""Output formats every command that prints objects shares: ``-o table|wide|json|yaml``.

``json`` is one object: indented on a terminal, one line otherwise (for pipes and ``jq``);
``yaml`` is the same object as YAML; ``table`` and ``wide`` are kubectl-like columns, ``wide``
with more of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["OUTPUT_FORMATS", "add_output_argument", "columns", "emit"]

OUTPUT_FORMATS = ("table", "wide", "json", "yaml")


def add_output_argument(parser: argparse.ArgumentParser, default: str = "table") -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUT_FORMATS,
        default=default,
        help="table (default), wide (more columns), json (one object; indented on a terminal) or yaml",
    )


def emit(output: str, data: dict[str, Any], table: Callable[[bool], str]) -> None:
    """Print ``data`` as ``output`` asks; ``table(wide)`` renders the human formats."""
    if output == "json":
        if sys.stdout.isatty():
            json.dump(data, sys.stdout, indent=2)
        else:
            json.dump(data, sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
    elif output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
    else:
        sys.stdout.write(table(output == "wide"))


def columns(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset()) -> list[str]:
    """Rows aligned under ``header`` (numeric columns right-aligned), two spaces apart."""
    table = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return ["  ".join(cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]
