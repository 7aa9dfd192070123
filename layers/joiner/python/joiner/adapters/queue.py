"""SQS work queue for delayed continuations (drains that outlive one invocation).

Implements :class:`joiner.ports.QueuePort`. The work queue is a standard queue, not FIFO: FIFO
queues reject per-message ``DelaySeconds``, which continuations need. Standard queues deliver at
least once, so consumers must be idempotent anyway; ``dedup_id`` travels as the ``dedupId``
message attribute for the consumer's idempotency check (powertools Idempotency keyed on it).
"""

from __future__ import annotations

import json
import math
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from joiner.ports import JsonDict

__all__ = ["SqsQueue", "QueueError", "MAX_DELAY_SECONDS", "DEDUP_ATTRIBUTE", "clamp_delay"]

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
