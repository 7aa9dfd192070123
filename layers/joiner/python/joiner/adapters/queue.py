"""SQS work queue for delayed continuations (drains that outlive one invocation).

Implements :class:`joiner.ports.QueuePort`. The work queue is a standard queue, not FIFO: FIFO
queues reject per-message ``DelaySeconds``, which continuations need. Standard queues deliver at
least once, so consumers must be idempotent anyway; ``dedup_id`` travels as the ``dedupId``
message attribute for the consumer's idempotency check (powertools Idempotency keyed on it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from joiner.ports import JsonDict

__all__ = [
    "DEDUP_ATTRIBUTE",
    "MAX_DELAY_SECONDS",
    "QueueError",
    "SqsQueue",
    "clamp_delay",
    "redeliver_sooner",
    "redelivery_delay",
    "shorten_visibility",
]

MAX_DELAY_SECONDS = 900
DEDUP_ATTRIBUTE = "dedupId"
_MAX_BODY_BYTES = 256 * 1024


class QueueError(Exception):
    """A message could not be sent (after botocore's retries) or is invalid."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def clamp_delay(delay_seconds: float) -> int:
    """SQS accepts whole seconds in [0, 900]: round up, then clamp."""
    if delay_seconds != delay_seconds:  # NaN
        return 0
    if delay_seconds <= 0:
        return 0
    if delay_seconds >= MAX_DELAY_SECONDS:
        return MAX_DELAY_SECONDS
    return min(MAX_DELAY_SECONDS, math.ceil(delay_seconds))


class SqsQueue:
    """:class:`joiner.ports.QueuePort` over a boto3 SQS client and one queue URL."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self._sqs = sqs
        self.queue_url = queue_url

    def send(self, body: JsonDict, delay_seconds: float = 0, dedup_id: str | None = None) -> None:
        """Send ``body`` as compact JSON (keys sorted), delivered after ``delay_seconds``
        (clamped to 0-900)."""
        if not self.queue_url:
            raise QueueError("work queue URL is not configured (JOINER_WORK_QUEUE_URL)", code="NoQueueUrl")
        try:
            text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as error:
            raise QueueError(f"message body is not JSON-serialisable: {error}", code="InvalidBody") from None
        if len(text.encode("utf-8")) > _MAX_BODY_BYTES:
            raise QueueError(f"message body is over SQS's {_MAX_BODY_BYTES} bytes", code="BodyTooLarge")
        kwargs: dict[str, Any] = {"QueueUrl": self.queue_url, "MessageBody": text, "DelaySeconds": clamp_delay(delay_seconds)}
        if dedup_id:
            kwargs["MessageAttributes"] = {DEDUP_ATTRIBUTE: {"DataType": "String", "StringValue": dedup_id}}
        try:
            self._sqs.send_message(**kwargs)
        except ClientError as error:
            info = error.response.get("Error", {})
            code = str(info.get("Code", "Unknown"))
            raise QueueError(f"SQS SendMessage failed: {code}: {info.get('Message', '')}", code=code) from error
        except BotoCoreError as error:
            raise QueueError(f"SQS SendMessage failed: {error}", code=type(error).__name__) from error


#: A failed message of a Lambda-consumed queue comes back after 5, 10, 20, 40, ... seconds (capped).
REDELIVERY_BASE_SECONDS = 5
REDELIVERY_CAP_SECONDS = 120


def redelivery_delay(receive_count: int) -> int:
    """Seconds until a message that failed on its ``receive_count``-th receive is delivered again."""
    count = max(1, min(receive_count, 16))
    delay: int = REDELIVERY_BASE_SECONDS << (count - 1)
    return min(REDELIVERY_CAP_SECONDS, delay)


def redeliver_sooner(sqs: Any, queue_url: str, receipt_handle: str, receive_count: int) -> int | None:
    """Make a message whose processing failed visible again after :func:`redelivery_delay`
    instead of the queue's visibility timeout (the consumer's timeout plus a margin);
    SQS's receive count and the redrive policy still bound the retries. Returns the delay,
    or None when the change failed (the visibility timeout then applies; logged by the caller)."""
    if not queue_url or not receipt_handle:
        return None
    delay = redelivery_delay(receive_count)
    try:
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=delay)
    except (ClientError, BotoCoreError):
        return None
    return delay


def shorten_visibility(sqs: Any, queue_url: str, receipt_handles: Sequence[str], seconds: int | Sequence[int]) -> int:
    """Make the received messages visible again ``seconds`` from now (one figure for all, or
    one per handle) unless they are deleted first: an invocation that dies (timeout, crash)
    then leaves its batch to another one within seconds instead of the queue's visibility
    timeout. One ``ChangeMessageVisibilityBatch`` per 10 messages; returns how many were
    changed (a failure leaves the visibility timeout in force, which is only slower)."""
    each = [seconds] * len(receipt_handles) if isinstance(seconds, int) else list(seconds)
    if len(each) != len(receipt_handles):
        raise ValueError("shorten_visibility: one visibility per receipt handle")
    pairs = [(handle, delay) for handle, delay in zip(receipt_handles, each, strict=True) if handle]
    changed = 0
    for start in range(0, len(pairs), 10):
        entries = [{"Id": str(index), "ReceiptHandle": handle, "VisibilityTimeout": delay} for index, (handle, delay) in enumerate(pairs[start : start + 10])]
        try:
            answer = sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
        except (ClientError, BotoCoreError):
            continue
        changed += len(answer.get("Successful", []))
    return changed
