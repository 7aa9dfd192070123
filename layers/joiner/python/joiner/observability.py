"""One place for logging, tracing and metrics (powertools), and the decorators every
Lambda handler wears: ``@handler_entry``.

Metrics are EMF in the ``Joiner`` namespace; one business metric per decision. Every metric
carries the dimensions ``service=joiner`` and ``cluster=<EKS cluster name>`` (set on each
invocation from the function's settings), so two clusters in one account and region never
share a metric or an alarm; breakdowns (``kind``, ``reason``...) add to those two.

Tracing is lazy: the X-Ray SDK (about a third of a cold start's imports) is imported only
when tracing is on, that is in Lambda (``LAMBDA_TASK_ROOT`` set) unless
``POWERTOOLS_TRACE_DISABLED`` is true, powertools' own rule. It is imported on the first
invocation, and only the clients Joiner calls through are patched: botocore (AWS) and
``http.client`` (the Kubernetes API over urllib3), not every library X-Ray supports
(which would import aiohttp, requests and sqlite3 for nothing).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric

__all__ = [
    "CLUSTER_DIMENSION",
    "TRACED_MODULES",
    "MetricUnit",
    "count",
    "handler_entry",
    "logger",
    "metrics",
    "set_cluster",
    "set_trace_entity",
    "trace_entity",
    "tracer",
    "tracing_enabled",
]

NAMESPACE = "Joiner"
SERVICE = "joiner"
#: The dimension naming the EKS cluster on every Joiner metric (infra.monitoring alarms on it).
CLUSTER_DIMENSION = "cluster"
#: What the tracer patches (X-Ray SDK names).
TRACED_MODULES: tuple[str, ...] = ("botocore", "httplib")

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
_cluster_dimensions: dict[str, str] = {}

F = TypeVar("F", bound=Callable[..., Any])

_tracer: Any = None
_tracer_lock = threading.Lock()


def tracing_enabled() -> bool:
    """Powertools' rule: in Lambda (``LAMBDA_TASK_ROOT``), not SAM/Chalice local, unless
    ``POWERTOOLS_TRACE_DISABLED`` is true."""
    if os.environ.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower() in ("1", "true", "yes", "on", "y", "t"):
        return False
    if os.environ.get("AWS_SAM_LOCAL") or os.environ.get("AWS_CHALICE_CLI_MODE"):
        return False
    return bool(os.environ.get("LAMBDA_TASK_ROOT"))


def tracer() -> Any:
    """The powertools ``Tracer`` (created, and the X-Ray SDK imported and its patches applied,
    on first use), or None when tracing is off."""
    global _tracer
    if not tracing_enabled():
        return None
    if _tracer is None:
        with _tracer_lock:
            if _tracer is None:
                from aws_lambda_powertools import Tracer

                created = Tracer(service="joiner", auto_patch=False)
                created.patch(list(TRACED_MODULES))
                _tracer = created
    return _tracer


def set_cluster(name: str) -> None:
    """Put ``cluster=name`` on every metric this execution environment emits from now on."""
    if _cluster_dimensions.get(CLUSTER_DIMENSION) != name:
        _cluster_dimensions[CLUSTER_DIMENSION] = name
        metrics.set_default_dimensions(**{CLUSTER_DIMENSION: name})


def _tag_cluster() -> None:
    from joiner.settings import SettingsError, get_settings

    try:
        set_cluster(get_settings().cluster_name)
    except SettingsError:
        return  # the handler reports the missing setting itself


def handler_entry(function: F) -> F:
    """Logger context (cleared per invocation), the cluster dimension on every metric, X-Ray
    capture when tracing is on (decided and set up on the first invocation) and EMF flush
    with a cold-start metric."""
    measured = metrics.log_metrics(capture_cold_start_metric=True)(function)
    chosen: list[Callable[..., Any]] = []

    @functools.wraps(function)
    def traced(event: Any, context: Any) -> Any:
        _tag_cluster()
        if not chosen:
            active = tracer()
            chosen.append(active.capture_lambda_handler(measured) if active is not None else measured)
        return chosen[0](event, context)

    wrapped = logger.inject_lambda_context(clear_state=True)(traced)
    return cast(F, wrapped)


def trace_entity() -> Any:
    """The current X-Ray segment or subsegment (to carry into worker threads), or None."""
    if tracer() is None:
        return None
    try:
        from aws_xray_sdk.core import xray_recorder

        return xray_recorder.get_trace_entity()
    except Exception:  # noqa: BLE001 - tracing is optional and must never fail an event
        return None


def set_trace_entity(entity: Any) -> None:
    """Make ``entity`` (from :func:`trace_entity`) current in this thread; None does nothing."""
    if entity is None:
        return
    with contextlib.suppress(Exception):  # tracing is optional and must never fail an event
        from aws_xray_sdk.core import xray_recorder

        xray_recorder.set_trace_entity(entity)


def count(name: str, value: float = 1, unit: str = MetricUnit.Count.value, **dimensions: str) -> None:
    """Emit one business metric; dimensions, when given, go into their own EMF blob (with
    ``service`` and ``cluster``) so they do not leak onto the invocation's other metrics."""
    if not dimensions:
        metrics.add_metric(name=name, unit=unit, value=value)
        return
    defaults = {"service": SERVICE, **_cluster_dimensions}
    with single_metric(name=name, unit=MetricUnit(unit), value=value, namespace=NAMESPACE, default_dimensions=defaults) as metric:
        for key, dim in sorted(dimensions.items()):
            metric.add_dimension(name=key, value=str(dim))
