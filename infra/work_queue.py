"""The work queue: delayed continuations (drains that outlive one invocation)."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_kms as kms
from constructs import Construct

from infra.deployment import WORK_MAX_RECEIVE_COUNT
from infra.queues import DeadLetteredQueue, visibility_timeout_for

__all__ = ["WorkQueue", "WORK_MAX_RECEIVE_COUNT", "WORK_QUEUE_RETENTION"]

#: A continuation is re-sent (delay <= 900 s) at each step, so one message only waits for
#: its own delay plus retries; a day covers an outage of the consumer with room to spare.
WORK_QUEUE_RETENTION = Duration.days(1)


class WorkQueue(Construct):
    """``queue`` (consumed by the termination function) and its ``dead_letter_queue``.

    Messages carry their own ``DelaySeconds`` (0-900); the queue itself adds none.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.IKey,
        consumer_timeout_seconds: int,
        batching_window_seconds: int,
    ) -> None:
        super().__init__(scope, construct_id)
        pair = DeadLetteredQueue(
            self,
            "Work",
            key=key,
            visibility_timeout=visibility_timeout_for(consumer_timeout_seconds, batching_window_seconds),
            retention_period=WORK_QUEUE_RETENTION,
            max_receive_count=WORK_MAX_RECEIVE_COUNT,
        )
        self.queue = pair.queue
        self.dead_letter_queue = pair.dead_letter_queue
