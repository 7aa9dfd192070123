"""Benchmarks: each ``python -m bench.<name>`` prints JSON lines; ``--help`` says what it takes."""

from __future__ import annotations

import argparse


def parse_counts(prog: str, doc: str | None, argv: list[str] | None, default: list[str], *, what: str = "POD_COUNTS") -> list[str]:
    """The positional arguments of a benchmark taking a list of sizes, with ``--help`` from its docstring."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", metavar=what, help=f"default: {' '.join(default)}")
    return list(parser.parse_args(argv).sizes) or default


def parse_none(prog: str, doc: str | None, argv: list[str] | None) -> None:
    """``--help`` for a benchmark taking no arguments; anything else is an error."""
    argparse.ArgumentParser(prog=f"python -m {prog}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
