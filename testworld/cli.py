"""``joiner demo`` and ``joiner simulate SCENARIO``: Joiner's real handlers on a local cluster.

``joiner demo`` is ``joiner simulate`` on the bundled classic scenario. Both start moto (HTTP,
127.0.0.1) and the Kubernetes API emulator, create what the stack would, run the scenario in
simulated time, print the timeline as it happens and a summary, and write a self-contained
HTML report. Exit status: 0 when every expectation held, 1 when one failed (or a handler
raised), 2 for a malformed scenario (one line naming the field). No network, no AWS account.

``--kube real`` runs the same against etcd, kube-apiserver and kube-scheduler built by ``make kube``
(a fresh control plane for the run, the shipped CRDs and RBAC, each function as its own identity,
kube-scheduler binding the pods: docs/kubernetes.md); without the binaries it stops with one line.

:func:`register` adds both to the ``joiner`` CLI (the ``joiner.cli`` entry point in pyproject.toml);
:func:`main` is that CLI with them registered directly (``python -m testworld``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from joiner.cli.main import UsageError
from joiner.cli.main import main as joiner_main

if TYPE_CHECKING:
    from testworld.simulator import Simulation

DEFAULT_REPORT = "out/joiner-demo.html"
#: What the ``local`` extra installs and the world imports when it runs: moto, kmock, cel-python.
LOCAL_EXTRA_MODULES = ("moto", "kmock", "celpy")


def main(argv: list[str] | None = None) -> int:
    """``joiner ARGV`` with ``demo`` and ``simulate`` registered by this module, whatever the
    installed entry points say."""
    return joiner_main(argv, extensions=[register])


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser("demo", help="watch Joiner work on a local simulated cluster (the classic scenario)")
    _options(demo)
    demo.set_defaults(handler=run, scenario=None)
    simulate = subparsers.add_parser("simulate", help="run a simulation scenario (YAML) against Joiner's real handlers")
    simulate.add_argument("scenario", help="scenario file (see examples/scenarios/ and docs/demo.md)")
    _options(simulate)
    simulate.set_defaults(handler=run)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--report", default=DEFAULT_REPORT, help=f"HTML report path (default: {DEFAULT_REPORT})")
    parser.add_argument("--functions", type=Path, default=None, help="directory holding <name>/handler.py (default: this checkout's functions/)")
    parser.add_argument(
        "--mode",
        choices=("economy", "responsive"),
        default="economy",
        help="scanner mode: economy (one round a minute) or responsive (the watcher wakes the scanner)",
    )
    parser.add_argument(
        "--kube",
        choices=("emulator", "real"),
        default="emulator",
        help="Kubernetes: the in-process API emulator (default, fast) or real etcd, kube-apiserver and kube-scheduler built by `make kube`",
    )
    parser.add_argument("--verbose", action="store_true", help="let Joiner's JSON logs through to stdout")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    parser.add_argument(
        "--hold",
        action="store_true",
        help="at the end keep the local AWS and Kubernetes API up, print how to reach them (kubectl, joiner status) and wait for Ctrl-D or Ctrl-C",
    )


class _Progress:
    """A one-line progress display on a terminal (stderr), erased before each timeline row."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = False

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False

    def update(self, at: timedelta, total: timedelta) -> None:
        if not self.enabled:
            return
        fraction = min(1.0, at / total if total else 1.0)
        width = 30
        bar = "#" * int(fraction * width)
        seconds = int(at.total_seconds())
        sys.stderr.write(f"\r[{bar:<{width}}] {seconds // 60:02d}:{seconds % 60:02d} of {int(total.total_seconds()) // 60} min simulated")
        sys.stderr.flush()
        self.shown = True


def run(args: argparse.Namespace) -> int:
    missing = [name for name in LOCAL_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"the local test world needs {', '.join(missing)}: pip install -e '.[local]' (make demo does)")
    from testworld.scenario import ScenarioError, bundled_scenario, load_scenario

    path = Path(args.scenario) if args.scenario else bundled_scenario()
    try:
        scenario = load_scenario(path)
    except ScenarioError as error:
        raise UsageError(f"{path}: {error}" if not str(error).startswith(str(path)) else str(error)) from None
    if args.functions is not None and not args.functions.is_dir():
        raise UsageError(f"--functions {str(args.functions)!r} is not a directory")

    if args.kube == "real":
        from testworld.real_kube import installed_bin_dir

        try:
            installed_bin_dir()
        except FileNotFoundError as missing:
            raise UsageError(f"--kube real: {missing}") from None

    from testworld.report import TIMELINE_HEADER, check_lines, format_entry, render_html, summary_lines
    from testworld.simulator import Simulation

    progress = _Progress(sys.stderr.isatty() and not args.quiet)

    def on_entry(entry: object) -> None:
        if args.quiet:
            return
        progress.clear()
        print(format_entry(entry), flush=True)  # type: ignore[arg-type]

    print(f"joiner: simulating {scenario.name} ({int(scenario.duration.total_seconds()) // 60} min) from {path}", flush=True)
    if not args.quiet:
        print(TIMELINE_HEADER, flush=True)
    simulation = Simulation(
        scenario,
        functions_dir=args.functions,
        on_entry=on_entry,
        on_progress=progress.update,
        verbose=args.verbose,
        scanner_mode=args.mode,
        kube=args.kube,
        on_end=(lambda sim: hold(sim, Path(args.report).with_suffix(".kubeconfig"))) if args.hold else None,
    )
    try:
        result = simulation.run()
    finally:
        progress.clear()
    print()
    for line in summary_lines(result):
        print(line)
    checks = check_lines(result)
    if checks:
        print()
        print("expectations")
        for line in checks:
            print(f"  {line}")
    report = Path(args.report)
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(render_html(result), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write the report {str(report)!r}: {error.strerror or error}") from None
    print(f"\nreport: {report}")
    if not result.passed:
        failed = [c.description for c in result.checks if c.passed is False]
        reasons = (["expectations failed: " + "; ".join(failed)] if failed else []) + result.handler_errors[:3]
        print(f"joiner {args.command}: " + " | ".join(reasons), file=sys.stderr)
        return 1
    return 0


def hold(simulation: Simulation, kubeconfig: Path) -> None:
    """Write a kubeconfig for the API emulator, print how to look at the world, wait for EOF or Ctrl-C."""
    import json

    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "joiner-demo",
                "clusters": [{"name": "joiner-demo", "cluster": {"server": simulation.emulator.url}}],
                "users": [{"name": "joiner-demo", "user": {"token": "local"}}],
                "contexts": [{"name": "joiner-demo", "context": {"cluster": "joiner-demo", "user": "joiner-demo"}}],
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    at = simulation.clock.now().isoformat().replace("+00:00", "Z")
    aws = f"AWS_ENDPOINT_URL={simulation.moto.endpoint} AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing"
    print(f"\njoiner: holding the local world at {at} (simulated); in another shell:", flush=True)
    print(f"  kubectl --kubeconfig {kubeconfig} get nodes,nodeclaims.joiner.dev,nodepools.joiner.dev,nodeclasses.joiner.dev", flush=True)
    print(f"  {aws} joiner status --table {simulation.stack.state_table} --region {simulation.region} --kubeconfig {kubeconfig} --at {at}", flush=True)
    print("Ctrl-D or Ctrl-C ends it.", flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
