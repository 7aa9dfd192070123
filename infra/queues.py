"""An SQS queue with its dead-letter queue: both KMS-encrypted, TLS-only."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

__all__ = ["DeadLetteredQueue", "MAX_RECEIVE_COUNT", "DEAD_LETTER_RETENTION", "visibility_timeout_for"]

#: A message that failed this many receives goes to the dead-letter queue.
MAX_RECEIVE_COUNT = 5
#: Dead letters are kept as long as SQS allows, for investigation and redrive.
DEAD_LETTER_RETENTION = Duration.days(14)


def visibility_timeout_for(consumer_timeout_seconds: int, batching_window_seconds: int) -> Duration:
    """AWS's guidance for Lambda-consumed queues: at least six times the function timeout
    plus the batching window, so retries of a throttled or slow batch do not redeliver
    messages still being processed."""
    return Duration.seconds(6 * consumer_timeout_seconds + batching_window_seconds)


class DeadLetteredQueue(Construct):
    """``queue`` redrives to ``dead_letter_queue`` after :data:`MAX_RECEIVE_COUNT` receives."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.IKey,
        visibility_timeout: Duration,
        retention_period: Duration,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            data_key_reuse=Duration.minutes(5),
            enforce_ssl=True,
            retention_period=DEAD_LETTER_RETENTION,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            data_key_reuse=Duration.minutes(5),
            enforce_ssl=True,
            visibility_timeout=visibility_timeout,
            retention_period=retention_period,
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT),
        )
