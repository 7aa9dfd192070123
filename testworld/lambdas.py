"""Running the Lambda functions locally as Lambda would: the handler modules loaded from
``functions/<name>/handler.py``, a Lambda context, real-shaped events (EventBridge
``Scheduled Event``, SQS batches received from a queue) and moto's SQS clock moved with a
simulated one.

Development-only (imports moto); shared by ``joiner demo`` and the tests.
"""

from __future__ import annotations

import contextvars
import functools
import importlib.util
import json
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import moto.sqs.models as moto_sqs
from moto.core.models import DEFAULT_ACCOUNT_ID

__all__ = [
    "FUNCTIONS_DIR",
    "Invocation",
    "LambdaContext",
    "SqsTime",
    "current_invocation",
    "handler_path",
    "load_handler",
    "next_visible_in",
    "queue_messages",
    "scheduled_event",
    "sqs_event",
]

#: ``functions/`` beside this package in the repository (the test world is installed editable).
FUNCTIONS_DIR = Path(__file__).resolve().parents[1] / "functions"


class _Clock(Protocol):
    def now(self) -> datetime: ...


def handler_path(name: str, functions_dir: Path | None = None) -> Path:
    """Where ``functions/<name>/handler.py`` is (it may not exist)."""
    return (functions_dir or FUNCTIONS_DIR) / name / "handler.py"


@dataclass(frozen=True)
class Invocation:
    """The function whose handler is running: ``name`` and its handler ``module`` (whose
    configured runtime holds the settings the deployment would give it)."""

    name: str
    module: ModuleType

    def settings(self) -> Any:
        """The :class:`joiner.settings.Settings` of the handler's cold-start runtime; raises
        ``LookupError`` when the handler has none yet (it builds one before any AWS call)."""
        cold_start = getattr(self.module, "cold_start", None)
        runtime = getattr(cold_start, "_runtime", None) if cold_start is not None else None
        if runtime is None:
            runtime = (getattr(self.module, "_cold", None) or {}).get("runtime")
        if runtime is None:
            raise LookupError(f"the {self.name} handler has no runtime configured")
        return runtime.settings


_INVOCATION: contextvars.ContextVar[Invocation | None] = contextvars.ContextVar("joiner_invocation", default=None)


def current_invocation() -> Invocation | None:
    """The function whose handler is running in this context (None outside handlers). The
    test suite's IAM guard attributes each AWS request to that function's role."""
    return _INVOCATION.get()


def _attributed(name: str, module: ModuleType, handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def invoke(*args: Any, **kwargs: Any) -> Any:
        token = _INVOCATION.set(Invocation(name, module))
        try:
            return handler(*args, **kwargs)
        finally:
            _INVOCATION.reset(token)

    invoke.__joiner_function__ = name  # type: ignore[attr-defined]
    return invoke


def load_handler(name: str, functions_dir: Path | None = None) -> ModuleType:
    """``functions/<name>/handler.py`` as a module named ``joiner_function_<name>`` (each function
    directory is its own code asset, so they are not importable as a package). Loaded once per
    process; callers ``configure()`` it with their runtime. While ``module.handler`` runs,
    :func:`current_invocation` names the function."""
    module_name = f"joiner_function_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = handler_path(name, functions_dir)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no Lambda handler at {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    if callable(getattr(module, "handler", None)):
        module.handler = _attributed(name, module, module.handler)  # type: ignore[attr-defined]
    return module


@dataclass
class LambdaContext:
    """The parts of the Lambda context object the handlers and powertools read."""

    aws_request_id: str = "request-1"
    function_name: str = "joiner-local"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:us-east-1:{DEFAULT_ACCOUNT_ID}:function:joiner-local"
    log_group_name: str = "/aws/lambda/joiner-local"
    log_stream_name: str = "local"
    remaining_ms: int = 60_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def scheduled_event(rule: str, when: datetime, *, region: str = "us-east-1", account: str = DEFAULT_ACCOUNT_ID) -> dict[str, Any]:
    """The EventBridge ``Scheduled Event`` a rate rule named ``rule`` delivers at ``when``."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:events:{region}:{account}:rule/{rule}"],
        "detail": {},
    }


def sqs_event(messages: Sequence[Mapping[str, Any]], queue_arn: str, *, region: str = "us-east-1") -> dict[str, Any]:
    """The Lambda SQS event for messages received with ``AttributeNames=["All"]``."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": dict(m.get("Attributes") or {}),
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for m in messages
        ]
    }


#: moto.sqs.models' globals: its messages read the time through ``unix_time`` and ``unix_time_millis`` there.
_SQS_GLOBALS: dict[str, Any] = vars(moto_sqs)


class SqsTime:
    """moto's SQS clock, moved so delays and visibility timeouts expire without waiting.

    Without ``clock``: real time plus an offset that :meth:`advance` grows (tests). With a
    ``clock``: exactly ``clock.now()`` (the simulator). Patches moto's module (in-process moto
    server) between ``__enter__`` and ``__exit__``.
    """

    def __init__(self, clock: _Clock | None = None) -> None:
        self.offset_ms = 0
        self.clock = clock
        self._originals: tuple[Callable[..., float], Callable[..., float]] = (_SQS_GLOBALS["unix_time_millis"], _SQS_GLOBALS["unix_time"])

    def __enter__(self) -> SqsTime:
        millis, seconds = self._originals
        if self.clock is not None:
            clock = self.clock
            _SQS_GLOBALS["unix_time_millis"] = lambda *a: clock.now().timestamp() * 1000
            _SQS_GLOBALS["unix_time"] = lambda *a: clock.now().timestamp()
        else:
            _SQS_GLOBALS["unix_time_millis"] = lambda *a: millis(*a) + self.offset_ms
            _SQS_GLOBALS["unix_time"] = lambda *a: seconds(*a) + self.offset_ms / 1000
        return self

    def __exit__(self, *exc: object) -> None:
        _SQS_GLOBALS["unix_time_millis"], _SQS_GLOBALS["unix_time"] = self._originals

    def advance(self, seconds: float) -> None:
        """Move the offset (ignored when following a clock)."""
        self.offset_ms += int(seconds * 1000)


def _moto_queue(url: str, region: str) -> Any:
    backend = moto_sqs.sqs_backends[DEFAULT_ACCOUNT_ID][region]
    return backend.queues[url.rsplit("/", 1)[-1]]


def queue_messages(url: str, region: str = "us-east-1") -> list[dict[str, Any]]:
    """Bodies of every message in a queue, delayed or in flight, without receiving them (moto's view)."""
    return [json.loads(m.body) for m in _moto_queue(url, region)._messages]


def next_visible_in(url: str, region: str = "us-east-1") -> float | None:
    """Seconds until the queue's next message can be received (0: now; None: the queue is empty)."""
    now: float = _SQS_GLOBALS["unix_time_millis"]()
    times: list[float] = [max(m.delayed_until, m.visible_at) for m in _moto_queue(url, region)._messages]
    if not times:
        return None
    return max(0.0, (min(times) - now) / 1000)
