"""`joiner` command-line entry point.

Each subcommand lives in its own module under :mod:`joiner.cli` exposing
``register(subparsers)``; modules are imported lazily so ``joiner plan`` does not pay
for boto3 or the Kubernetes client.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

#: subcommand -> module under joiner.cli that implements it
COMMANDS: dict[str, str] = {
    "plan": "plan",
    "disrupt": "disrupt",
    "events": "events",
    "import-karpenter": "import_karpenter",
    "status": "status",
    "uninstall": "uninstall",
    "demo": "demo",
    "simulate": "demo",
}


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


LOG_LEVELS = ("debug", "info", "warning", "error")


def version() -> str:
    """The installed distribution's version (``pyproject.toml``), or ``unknown`` from a bare checkout."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version("joiner")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="joiner", description="Serverless node autoscaler for Amazon EKS")
    parser.add_argument("--version", action="version", version=f"joiner {version()}")
    parser.add_argument("--log-level", choices=LOG_LEVELS,
                        help="the level of Joiner's own logs for every command (default: $POWERTOOLS_LOG_LEVEL, else info)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in sorted(set(COMMANDS.values())):
        module = importlib.import_module(f"joiner.cli.{module_name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_level:
        _set_log_level(args.log_level)
    try:
        return int(args.handler(args) or 0)
    except UsageError as error:
        print(f"{command_name(args)}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


def command_name(args: argparse.Namespace) -> str:
    """``joiner events explain``: the command and its subcommand, as typed."""
    words = ["joiner", args.command]
    for key in sorted(vars(args)):
        if key.endswith("_command") and isinstance(getattr(args, key), str):
            words.append(getattr(args, key))
    return " ".join(words)


def _set_log_level(level: str) -> None:
    """Joiner's logger (powertools, created on first import of :mod:`joiner.observability`)
    and the standard library's, for every subcommand."""
    os.environ["POWERTOOLS_LOG_LEVEL"] = level.upper()
    logging.getLogger().setLevel(level.upper())
    if "joiner.observability" in sys.modules:
        sys.modules["joiner.observability"].logger.setLevel(level.upper())


if __name__ == "__main__":
    # ``python -m joiner.cli.main``: run the imported module's main, whose UsageError is the
    # one the subcommands raise (this file, run as __main__, defines a second class).
    from joiner.cli.main import main as imported_main

    sys.exit(imported_main())
