"""`joiner` command-line entry point.

Each subcommand lives in its own module under :mod:`joiner.cli` exposing
``register(subparsers)``; modules are imported lazily so ``joiner plan`` does not pay
for boto3 or the Kubernetes client.

Other installed packages add subcommands through the ``joiner.cli`` entry-point group (each
entry point names a ``register(subparsers)`` callable, found at run time): the local test world
(``testworld``, beside this package and never in the Lambda layer) adds ``demo`` and ``simulate``
so. Without it those two stop with one line saying how to install it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import EntryPoint

#: subcommand -> module under joiner.cli that implements it
COMMANDS: dict[str, str] = {
    "plan": "plan",
    "disrupt": "disrupt",
    "events": "events",
    "import-karpenter": "import_karpenter",
    "status": "status",
    "uninstall": "uninstall",
}
#: The entry-point group of subcommands other installed packages add.
EXTENSION_GROUP = "joiner.cli"
#: The test world's subcommands, named here only to say what is missing without it.
TEST_WORLD_COMMANDS = ("demo", "simulate")
TEST_WORLD_MISSING = "needs the local test world (testworld): pip install -e '.[local]' in a Joiner checkout, or make demo"

#: ``register(subparsers)``: what a subcommand module or an extension's entry point provides.
Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


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


def load_extensions(entry_points: Iterable[EntryPoint] | None = None) -> tuple[list[Register], list[str]]:
    """The ``register`` callables of the ``joiner.cli`` entry points (the installed distributions'
    unless given), each value once, and one line for each entry point that could not be loaded."""
    if entry_points is None:
        from importlib.metadata import entry_points as installed

        entry_points = installed(group=EXTENSION_GROUP)
    registers: list[Register] = []
    problems: list[str] = []
    seen: set[str] = set()
    for entry in entry_points:
        if entry.value in seen:
            continue
        seen.add(entry.value)
        try:
            registers.append(entry.load())
        except ImportError as error:
            problems.append(f"{entry.value}: {error}")
    return registers, problems


def build_parser(extensions: Sequence[Register] | None = None) -> argparse.ArgumentParser:
    """The ``joiner`` parser: its own subcommands, then those of ``extensions`` (default: the
    installed ``joiner.cli`` entry points). A test-world command no extension registered is
    listed with what to install (:func:`main` answers it with that one line)."""
    return _build_parser(extensions)[0]


def _build_parser(extensions: Sequence[Register] | None) -> tuple[argparse.ArgumentParser, dict[str, str]]:
    parser = argparse.ArgumentParser(prog="joiner", description="Serverless node autoscaler for Amazon EKS")
    parser.add_argument("--version", action="version", version=f"joiner {version()}")
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="the level of Joiner's own logs for every command (default: $POWERTOOLS_LOG_LEVEL, else info)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in sorted(set(COMMANDS.values())):
        module = importlib.import_module(f"joiner.cli.{module_name}")
        module.register(subparsers)
    problems: list[str] = []
    if extensions is None:
        extensions, problems = load_extensions()
    for register in extensions:
        register(subparsers)
    reason = TEST_WORLD_MISSING + (f" ({problems[0]})" if problems else "")
    missing = {name: reason for name in TEST_WORLD_COMMANDS if name not in subparsers.choices}
    for name in missing:
        subparsers.add_parser(name, help=f"not installed: {reason}")
    return parser, missing


def _command_word(argv: Sequence[str]) -> str | None:
    """The subcommand in ``argv`` (the first word that is neither an option nor its value)."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: list[str] | None = None, extensions: Sequence[Register] | None = None) -> int:
    """``joiner ARGV``; ``extensions`` register subcommands instead of the installed entry points."""
    parser, missing = _build_parser(extensions)
    arguments = sys.argv[1:] if argv is None else argv
    command = _command_word(arguments)
    if command in missing:
        print(f"joiner {command}: {missing[command]}", file=sys.stderr)
        return 2
    args = parser.parse_args(arguments)
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
