"""What a cold start imports (bench/coldstart.py measures how long it takes): each check
runs in a fresh interpreter, as Lambda starts one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "joiner" / "python"
#: Modules a cold start must not pay for: the X-Ray SDK while tracing is off, pydantic in
#: the scheduled functions, the Kubernetes client's generated models anywhere.
HEAVY = ("aws_xray_sdk", "pydantic", "kubernetes", "aiohttp", "requests")


def loaded_after(code: str, *, handler: str | None = None, **environment: str) -> dict[str, bool]:
    """Run ``code`` in a fresh interpreter (with ``functions/<handler>`` importable as ``handler``)
    and report which of :data:`HEAVY` it imported."""
    path = [str(ROOT / "functions" / handler)] if handler else []
    script = f"import sys, json; sys.path[:0] = {path + [str(LAYER)]!r}\n{code}\nprint(json.dumps({{name: name in sys.modules for name in {HEAVY!r}}}))"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("LAMBDA_", "POWERTOOLS_", "_X_AMZN"))}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env={**env, "AWS_REGION": "us-east-1", **environment}, timeout=120
    )
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("function", ["scanner", "disruption", "gc", "interruption", "termination", "watcher"])
def test_importing_a_handler_imports_no_tracing_parser_or_kubernetes_client(function: str) -> None:
    assert not any(loaded_after("import handler", handler=function).values())


def test_a_scheduled_event_is_checked_without_pydantic() -> None:
    code = (
        "from joiner.events.scheduled import manual_run_fields\n"
        "assert manual_run_fields({'version': '0', 'id': 'e', 'detail-type': 'Scheduled Event', 'source': 'aws.events',"
        " 'account': '1', 'time': '2025-01-06T09:00:00Z', 'region': 'us-east-1', 'resources': [], 'detail': {}}, 'f') == {}"
    )
    assert loaded_after(code)["pydantic"] is False


def test_the_kubernetes_adapter_talks_http_without_the_official_client(kube_emulator) -> None:  # type: ignore[no-untyped-def]
    code = f"from joiner.adapters.kubernetes import KubernetesClient\nassert KubernetesClient({kube_emulator.url!r}).list_nodes() == []"
    assert loaded_after(code)["kubernetes"] is False


def test_the_tracer_is_set_up_on_the_first_invocation_only_where_tracing_is_on() -> None:
    code = (
        "from joiner.observability import handler_entry, tracer\n"
        "class Context:\n"
        "    function_name, memory_limit_in_mb, invoked_function_arn, aws_request_id = 'f', 128, 'arn:aws:lambda:us-east-1:1:function:f', 'r'\n"
        "answer = handler_entry(lambda event, context: {'ok': event})\n"
        "assert 'aws_xray_sdk' not in sys.modules\n"
        "assert answer(1, Context()) == {'ok': 1}\n"
        "assert (tracer() is not None) == ('aws_xray_sdk' in sys.modules)\n"
    )
    lambda_environment = {
        "LAMBDA_TASK_ROOT": "/var/task",
        "AWS_LAMBDA_FUNCTION_NAME": "f",
        "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
        "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
        "POWERTOOLS_METRICS_NAMESPACE": "Test",
    }
    traced = loaded_after(code, **lambda_environment)
    # Only botocore and http.client are patched: X-Ray's patch_all would import aiohttp and requests.
    assert traced == {"aws_xray_sdk": True, "pydantic": False, "kubernetes": False, "aiohttp": False, "requests": False}
    assert not any(loaded_after(code, **lambda_environment, POWERTOOLS_TRACE_DISABLED="true").values())
    assert not any(loaded_after(code, POWERTOOLS_METRICS_NAMESPACE="Test").values())
