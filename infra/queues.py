"""An SQS queue with its dead-letter queue: both encrypted (KMS, or SSE-SQS where a service
principal writes to them), TLS-only."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.deployment import MAX_RECEIVE_COUNT, VISIBILITY_MARGIN_SECONDS, visibility_seconds

__all__ = ["DEAD_LETTER_RETENTION", "MAX_RECEIVE_COUNT", "VISIBILITY_MARGIN_SECONDS", "DeadLetteredQueue", "visibility_timeout_for"]

#: Dead letters are kept as long as SQS allows, for investigation and redrive.
DEAD_LETTER_RETENTION = Duration.days(14)


def visibility_timeout_for(consumer_timeout_seconds: int, batching_window_seconds: int) -> Duration:
    """The function timeout plus the batching window plus :data:`VISIBILITY_MARGIN_SECONDS`:
    the shortest a Lambda-consumed queue allows without redelivering a message still being
    processed.

    AWS suggests six times the function timeout so that a batch whose invocation is
    throttled is not redelivered too often; Joiner chooses promptness instead: a message
    whose invocation *died* (a crash, a timeout) is seen again only after the visibility
    timeout, and a spot warning gives two minutes. Throttling is unlikely (each event source
    mapping caps its concurrency), costs a receive each time and every handler is idempotent;
    the redrive policy still bounds the retries. Failures the handlers catch come back sooner
    still, through ChangeMessageVisibility (:func:`joiner.adapters.queue.redeliver_sooner`)."""
    return Duration.seconds(visibility_seconds(consumer_timeout_seconds, batching_window_seconds))


class DeadLetteredQueue(Construct):
    """``queue`` redrives to ``dead_letter_queue`` after ``max_receive_count`` receives
    (default :data:`MAX_RECEIVE_COUNT`); both encrypted with ``key``, or with SSE-SQS when
    ``key`` is None."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.IKey | None,
        visibility_timeout: Duration,
        retention_period: Duration,
        max_receive_count: int = MAX_RECEIVE_COUNT,
    ) -> None:
        super().__init__(scope, construct_id)
        # Without a key: SSE-SQS (SQS-owned keys), which EventBridge can write to with nothing
        # but the queue policy; a customer key would need a key-policy grant EventBridge's
        # deliveries may not satisfy (docs/infra.md, encryption).
        encryption: dict[str, Any] = (
            dict(encryption=sqs.QueueEncryption.KMS, encryption_master_key=key, data_key_reuse=Duration.minutes(5))
            if key is not None
            else dict(encryption=sqs.QueueEncryption.SQS_MANAGED)
        )
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            **encryption,
            enforce_ssl=True,
            retention_period=DEAD_LETTER_RETENTION,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            **encryption,
            enforce_ssl=True,
            visibility_timeout=visibility_timeout,
            retention_period=retention_period,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=max_receive_count),
        )
