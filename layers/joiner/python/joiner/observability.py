"""One place for logging, tracing and metrics (powertools), and the decorators every
Lambda handler wears: ``@handler_entry``.

Metrics are EMF in the ``Joiner`` namespace; one business metric per decision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

__all__ = ["logger", "tracer", "metrics", "MetricUnit", "handler_entry", "count"]

NAMESPACE = "Joiner"

logger = Logger(service="joiner")
tracer = Tracer(service="joiner")
metrics = Metrics(namespace=NAMESPACE, service="joiner")

F = TypeVar("F", bound=Callable[..., Any])


def handler_entry(function: F) -> F:
    """Logger context (cleared per invocation), X-Ray capture and EMF flush with a cold-start metric."""
    wrapped = metrics.log_metrics(capture_cold_start_metric=True)(function)
    wrapped = tracer.capture_lambda_handler(wrapped)
    wrapped = logger.inject_lambda_context(clear_state=True)(wrapped)
    return wrapped  # type: ignore[return-value]


def count(name: str, value: float = 1, unit: str = MetricUnit.Count, **dimensions: str) -> None:
    """Emit one business metric; dimensions, when given, go into their own EMF blob so they
    do not leak onto the invocation's other metrics."""
    if not dimensions:
        metrics.add_metric(name=name, unit=unit, value=value)
        return
    with single_metric(name=name, unit=unit, value=value, namespace=NAMESPACE) as metric:
        for key, dim in sorted(dimensions.items()):
            metric.add_dimension(name=key, value=str(dim))
