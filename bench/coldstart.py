"""Cold-start benchmark: ``python -m bench.coldstart`` prints one JSON object per function.

What Lambda does on a cold start, in a fresh interpreter per measurement:

* the layer is built by :class:`infra.layer.LayerBundler` (the bundler ``make synth`` runs:
  the same pinned requirements, package copy, pruning and bytecode compilation), then
  copied to a temporary ``opt/python`` that is made read-only (and the interpreter runs
  with ``-B``), so nothing is cached between runs, as on Lambda's read-only ``/opt``;
* the interpreter is the runtime's Python (:func:`infra.layer.find_layer_python`), started
  isolated (``-I -S``) with ``sys.path`` = the function's code directory, the layer, the
  standard library, as Lambda's bootstrap arranges it;
* the environment is the functions' (``JOINER_*`` and powertools variables, Lambda's
  variables, an X-Ray trace header, so the tracer is enabled as with ``Tracing: Active``)
  pointed at a moto server holding the stack's resources and at the Kubernetes API emulator
  (an empty cluster): no call leaves the machine;
* ``import_s``: importing ``handler.py``; ``first_call_s``: its first invocation with a
  cheap, realistic event (a scheduled event for scanner, disruption and gc; an SQS batch of
  one message for interruption, about an instance Joiner does not manage, and termination,
  a continuation for a node that is gone). The first call includes what it lazily imports
  and its API round trips to the local servers (a few milliseconds each).

Reported per function: median, min and max of ``repeats`` fresh processes of ``import_s``,
``first_call_s`` and ``total_s`` (their sum, wall clock; the target is <= 1.0 s), and
``cpu_s``, the process's CPU time over the same span: on a shared machine the wall clock
includes waiting for a core, the CPU time does not.

The layer's compiled extensions (pydantic-core, PyYAML's) are built for Lambda's arm64;
on another machine the bench builds the layer for the host's architecture (same versions,
same pipeline; reported as ``platform``), since arm64 extensions cannot load here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = ("scanner", "interruption", "termination", "disruption", "gc")
CLUSTER = "bench"
#: A sampled trace header, as Lambda sets it with active tracing (segments go to a local UDP port nobody reads).
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"

#: Runs in the fresh interpreter: argv = [code dir, layer dir, event JSON, function name].
CHILD = r"""
import sys, time
started, started_cpu = time.perf_counter(), time.process_time()
code, layer, event_json, name = sys.argv[1:5]
sys.path[:0] = [code, layer]
import handler
imported, imported_cpu = time.perf_counter(), time.process_time()
import json

class Context:
    aws_request_id = "bench-request-1"
    function_name = "joiner-" + name
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:joiner-" + name
    log_group_name = "/aws/lambda/joiner-" + name
    log_stream_name = "bench"
    def get_remaining_time_in_millis(self):
        return 60000

result = handler.handler(json.loads(event_json), Context())
called, called_cpu = time.perf_counter(), time.process_time()
print("BENCH_RESULT " + json.dumps({"import_s": imported - started, "first_call_s": called - imported,
                                    "cpu_s": called_cpu - started_cpu, "result": result}, default=str))
"""


def host_platforms() -> tuple[str, ...]:
    """The layer's wheel platforms, for this machine's architecture (Lambda's when it is arm64)."""
    from infra.layer import LAYER_PLATFORMS

    machine = platform.machine().lower()
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)
    return tuple(tag.replace("aarch64", arch) for tag in LAYER_PLATFORMS)


def build_layer(destination: Path, platforms: Sequence[str]) -> Path:
    """The layer as ``make synth`` bundles it (for ``platforms``); returns its ``python/`` dir."""
    from infra.layer import LayerBundler

    LayerBundler(platforms=platforms).try_bundle(str(destination))
    return destination / "python"


def read_only_copy(source: Path, destination: Path) -> Path:
    """Copy ``source`` to ``destination`` and remove every write permission (Lambda's /opt)."""
    shutil.copytree(source, destination, symlinks=True)
    for path in sorted(destination.rglob("*"), key=lambda p: -len(p.parts)):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    destination.chmod(destination.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return destination


def make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def tree_listing(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*")}


@contextlib.contextmanager
def local_world() -> Iterator[dict[str, str]]:
    """A moto server with the stack's resources and an empty Kubernetes API emulator; yields
    the functions' environment pointed at them."""
    from testworld.aws import REGION, SerialMotoServer, fake_credentials
    from testworld.kube_emulator import KubeEmulator
    from testworld.stack import LocalStack

    with fake_credentials(REGION):
        server = SerialMotoServer()
        server.start()
        try:
            with KubeEmulator() as emulator:
                stack = LocalStack(server.endpoint, CLUSTER, REGION).create()
                settings = stack.settings(emulator.url, scanner_mode="economy")
                yield {
                    "AWS_REGION": REGION,
                    "AWS_DEFAULT_REGION": REGION,
                    "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_SESSION_TOKEN": "testing",
                    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
                    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
                    "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
                    "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
                    "_X_AMZN_TRACE_ID": TRACE_HEADER,
                    "JOINER_CLUSTER_NAME": settings.cluster_name,
                    "JOINER_STATE_TABLE": settings.state_table,
                    "JOINER_IDEMPOTENCY_TABLE": settings.idempotency_table,
                    "JOINER_INTERRUPTION_QUEUE_URL": settings.interruption_queue_url,
                    "JOINER_WORK_QUEUE_URL": settings.work_queue_url,
                    "JOINER_SCANNER_MODE": settings.scanner_mode,
                    "JOINER_KUBERNETES_HOST": settings.kubernetes_host,
                    "JOINER_AWS_ENDPOINT_URL": settings.aws_endpoint_url,
                    "POWERTOOLS_SERVICE_NAME": "joiner",
                    "POWERTOOLS_METRICS_NAMESPACE": "Joiner",
                }
        finally:
            server.stop()


def first_event(name: str) -> dict[str, Any]:
    """A cheap, realistic first invocation for ``name``."""
    if name == "interruption":
        body = {
            "version": "0",
            "id": "bench-spot-1",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "source": "aws.ec2",
            "account": "123456789012",
            "time": "2026-01-01T00:00:00Z",
            "region": "us-east-1",
            "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"],
            "detail": {"instance-id": "i-0123456789abcdef0", "instance-action": "terminate"},
        }
        return sqs_batch(json.dumps(body))
    if name == "termination":
        return sqs_batch(json.dumps({"kind": "termination", "node": "ip-10-0-0-1.ec2.internal", "generation": 1}))
    return {
        "version": "0",
        "id": "bench-schedule-1",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-east-1",
        "resources": [f"arn:aws:events:us-east-1:123456789012:rule/joiner-{name}"],
        "detail": {},
    }


def sqs_batch(body: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": "bench-message-1",
                "receiptHandle": "bench-receipt-1",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1767225600000",
                    "SenderId": "bench",
                    "ApproximateFirstReceiveTimestamp": "1767225600000",
                },
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{CLUSTER}-queue",
                "awsRegion": "us-east-1",
            }
        ]
    }


def measure(
    python: str, layer: Path, name: str, environment: Mapping[str, str], *, tracing: bool = True, functions_dir: Path = ROOT / "functions"
) -> dict[str, Any]:
    """One fresh interpreter: import the handler and invoke it once."""
    code = functions_dir / name
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        **environment,
        "AWS_LAMBDA_FUNCTION_NAME": f"joiner-{name}",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/joiner-{name}",
        "LAMBDA_TASK_ROOT": str(code),
        **({} if tracing else {"POWERTOOLS_TRACE_DISABLED": "true"}),
    }
    command = [python, "-I", "-S", "-B", "-c", CHILD, str(code), str(layer), json.dumps(first_event(name)), name]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=300)
    for line in completed.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            return dict(json.loads(line.removeprefix("BENCH_RESULT ")))
    raise RuntimeError(
        f"{name}: the handler did not complete (exit {completed.returncode}):\n" + "\n".join((completed.stderr or completed.stdout).strip().splitlines()[-20:])
    )


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.coldstart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per function (default 5)")
    parser.add_argument("--layer", type=Path, help="a built layer's python/ directory (default: build one now)")
    parser.add_argument("--python", help="the runtime interpreter (default: infra.layer.find_layer_python())")
    parser.add_argument(
        "--functions-dir", type=Path, default=ROOT / "functions", help="where the handlers are (default: functions/; to measure another tree with --layer)"
    )
    parser.add_argument("--function", action="append", choices=FUNCTIONS, help="only these functions")
    parser.add_argument("--no-tracing", action="store_true", help="POWERTOOLS_TRACE_DISABLED=true (default: X-Ray on, as deployed)")
    args = parser.parse_args(argv)

    from infra.layer import LAYER_PYTHON_VERSION, find_layer_python

    python = args.python or find_layer_python()
    platforms = host_platforms()
    with tempfile.TemporaryDirectory(prefix="joiner-coldstart-") as scratch:
        source = args.layer or build_layer(Path(scratch) / "asset", platforms)
        layer = read_only_copy(source, Path(scratch) / "opt" / "python")
        before = tree_listing(layer)
        try:
            with local_world() as environment:
                for name in args.function or FUNCTIONS:
                    runs = [
                        measure(python, layer, name, environment, tracing=not args.no_tracing, functions_dir=args.functions_dir) for _ in range(args.repeats)
                    ]
                    imports = [run["import_s"] for run in runs]
                    calls = [run["first_call_s"] for run in runs]
                    totals = [run["import_s"] + run["first_call_s"] for run in runs]
                    cpu = [run["cpu_s"] for run in runs]
                    print(
                        json.dumps(
                            {
                                "benchmark": "coldstart",
                                "function": name,
                                "python": LAYER_PYTHON_VERSION,
                                "platform": platforms[0],
                                "repeats": args.repeats,
                                "tracing": not args.no_tracing,
                                "import_s": summary(imports),
                                "first_call_s": summary(calls),
                                "total_s": summary(totals),
                                "cpu_s": summary(cpu),
                                "target_s": 1.0,
                                "within_target": statistics.median(totals) <= 1.0,
                                "result": runs[-1]["result"],
                            },
                            sort_keys=True,
                        ),
                        flush=True,
                    )
            if tree_listing(layer) != before:
                raise RuntimeError("the layer copy changed during the runs: it was not read-only")
        finally:
            make_writable(Path(scratch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
