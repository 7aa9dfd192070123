"""Termination function: SQS batches from the work queue, each a delayed continuation
``{"kind": "termination", "node": ..., "generation": n}`` of a drain that outlives one
invocation (see :mod:`joiner.services.termination`).

Partial batch responses: a step whose Kubernetes or EC2 calls fail after their retries
schedules its own retry within seconds and is acknowledged; a message that finds the
node's lease held by another invocation, or whose state cannot be read or saved
(DynamoDB, SQS errors), is reported in ``batchItemFailures`` and SQS redelivers it; the
termination state is durable, so a crash or timeout mid-step is resumed by that
redelivery. On receipt every message of the batch is made visible again 20 s later on its
first two receives, then 40 s, 80 s and 120 s on later ones
(:func:`joiner.services.termination.received_visibility` of its ``ApproximateReceiveCount``,
one ``ChangeMessageVisibilityBatch``): a death before a step's safety continuation is sent
costs seconds, not the queue's visibility timeout, and a record that keeps failing on an
outage of DynamoDB (or the Kubernetes API, or EC2) is retried for over 40 minutes (24
receives) before it is dead-lettered; its last failure is logged naming the node
(``WorkMessageDeadLettered``), and gc's stalled-termination sweep resumes the drain. Malformed or unknown messages (including bodies over the bounds of
:func:`joiner.domain.bounded.load_json`: 256 KiB, 32 levels, 64-bit integers) are logged,
counted (``WorkMessageInvalid``) and acknowledged.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from joiner.observability import handler_entry, logger

processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

_cold: dict[str, Any] = {}


def configure(runtime: Any = None) -> Any:
    """Set the cold-start runtime (default: from the environment's settings); tests pass their own."""
    if runtime is None:
        from joiner.services.context import build_runtime
        from joiner.settings import get_settings

        runtime = build_runtime(get_settings())
    _cold["runtime"] = runtime
    return runtime


def _runtime() -> Any:
    return _cold["runtime"] if _cold else configure()


def reset() -> None:
    """Forget the cold-start runtime (tests)."""
    _cold.clear()


def record_handler(record: SQSRecord) -> dict[str, Any]:
    from joiner.domain.bounded import EVENT_LIMITS, InputError, load_json
    from joiner.services.termination import InvalidWorkMessage, continue_termination, parse_continuation

    runtime = _runtime()
    try:
        node, generation = parse_continuation(load_json(str(record.raw_event.get("body") or ""), EVENT_LIMITS))
    except (InputError, InvalidWorkMessage) as error:
        runtime.count("WorkMessageInvalid")
        logger.warning("invalid work message acknowledged", extra={"message_id": record.message_id, "error": str(error)})
        return {"messageId": record.message_id, "status": "invalid"}
    try:
        result = continue_termination(runtime, node, runtime.clock.now(), generation=generation)
    except Exception as error:
        _note_failure(runtime, record, node, generation, error)
        raise
    logger.info("termination step", extra=result.to_dict())
    return result.to_dict()


def _note_failure(runtime: Any, record: SQSRecord, node: str, generation: int | None, error: Exception) -> None:
    """A continuation failed (redelivered after :func:`received_visibility` of its receive
    count). On its last receive before the dead-letter queue, name the node: the alarm on
    that queue's depth cannot, and gc's stalled-termination sweep resumes the drain."""
    from joiner.services.termination import STALL_AFTER, WORK_MAX_RECEIVES

    try:
        receives = int(str(record.raw_event.get("attributes", {}).get("ApproximateReceiveCount", "1")))
    except ValueError:
        receives = 1
    extra = {"node": node, "generation": generation, "receives": receives, "message_id": record.message_id, "error": f"{type(error).__name__}: {error}"}
    if receives >= WORK_MAX_RECEIVES:
        runtime.count("WorkMessageDeadLettered")
        logger.error(
            "termination continuation dead-lettered; gc resumes the drain once it has stalled",
            extra={**extra, "resumed_within_minutes": int(STALL_AFTER.total_seconds() // 60)},
        )
    else:
        logger.warning("termination continuation failed; redelivered", extra=extra)


def _shorten_visibility(runtime: Any, event: dict[str, Any]) -> None:
    from joiner.adapters.queue import shorten_visibility
    from joiner.services.termination import received_visibility

    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list) or not runtime.settings.work_queue_url:
        return
    received = [record for record in records if isinstance(record, dict)]
    handles = [str(record.get("receiptHandle") or "") for record in received]
    seconds = [received_visibility((record.get("attributes") or {}).get("ApproximateReceiveCount")) for record in received]
    if handles:
        shorten_visibility(runtime.aws_client("sqs"), runtime.settings.work_queue_url, handles, seconds)


@handler_entry
def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    runtime = _runtime()
    runtime.invocation_id = getattr(context, "aws_request_id", runtime.invocation_id)
    _shorten_visibility(runtime, event)
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
