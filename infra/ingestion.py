"""Interruption ingestion: EventBridge rules for EC2 and AWS Health events -> one SQS queue.

The queue body is the raw event JSON (EventBridge's default target input); the
interruption function consumes it with partial batch responses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jsii
from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.deployment import INTERRUPTION_RULES, InterruptionRule
from infra.queues import DeadLetteredQueue, visibility_timeout_for

if TYPE_CHECKING:
    from aws_cdk.interfaces.aws_events import IRuleRef

__all__ = ["InterruptionIngestion", "InterruptionRule", "INTERRUPTION_RULES", "INTERRUPTION_QUEUE_RETENTION"]

#: Karpenter keeps its interruption queue for 5 minutes because a spot warning is useless
#: after the instance is gone. Joiner's queue also carries AWS Health scheduled changes
#: (announced days ahead) and state changes that close claims; a day lets a consumer that
#: was broken or throttled catch up on those after it recovers. Stale spot warnings cost
#: nothing: the handler sees the instance already terminated and only records it.
INTERRUPTION_QUEUE_RETENTION = Duration.days(1)


#: How long EventBridge keeps retrying delivery to the queue before using the DLQ.
DELIVERY_MAX_EVENT_AGE = Duration.hours(1)
DELIVERY_MAX_RETRIES = 20


@jsii.implements(events.IRuleTarget)
class _QueueTarget:
    """An SQS target that grants nothing itself: :class:`InterruptionIngestion` writes one
    queue-policy statement (and one for the DLQ) naming all its rules, where
    ``aws_events_targets.SqsQueue`` would add one per rule."""

    def __init__(self, queue: sqs.IQueue, dead_letter_queue: sqs.IQueue) -> None:
        self.queue = queue
        self.dead_letter_queue = dead_letter_queue

    def bind(self, rule: IRuleRef, id: str | None = None) -> events.RuleTargetConfig:  # noqa: A002 (jsii name)
        return events.RuleTargetConfig(
            arn=self.queue.queue_arn,
            target_resource=self.queue,
            dead_letter_config=events.CfnRule.DeadLetterConfigProperty(arn=self.dead_letter_queue.queue_arn),
            retry_policy=events.CfnRule.RetryPolicyProperty(
                maximum_event_age_in_seconds=int(DELIVERY_MAX_EVENT_AGE.to_seconds()),
                maximum_retry_attempts=DELIVERY_MAX_RETRIES,
            ),
        )


class InterruptionIngestion(Construct):
    """The rules in :data:`INTERRUPTION_RULES`, the ``queue`` they feed and its
    ``dead_letter_queue`` (redrive after 5 receives; also the rules' delivery DLQ).

    Both queues use SSE-SQS, as Karpenter's interruption queue does: EventBridge then needs
    only the queue policy. With a customer-managed key it would also need a key-policy grant,
    and AWS documents no condition key EventBridge's deliveries are known to carry, so a
    grant fenced by ``aws:SourceAccount`` could drop every event, and the DLQ's too, silently.
    The queue policies admit ``events.amazonaws.com`` only with ``aws:SourceArn`` equal to
    one of these rules and deny non-TLS requests.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        consumer_timeout_seconds: int,
        batching_window_seconds: int,
    ) -> None:
        super().__init__(scope, construct_id)
        pair = DeadLetteredQueue(
            self,
            "Interruption",
            key=None,
            visibility_timeout=visibility_timeout_for(consumer_timeout_seconds, batching_window_seconds),
            retention_period=INTERRUPTION_QUEUE_RETENTION,
        )
        self.queue = pair.queue
        self.dead_letter_queue = pair.dead_letter_queue
        self.rules: list[events.Rule] = []
        for spec in INTERRUPTION_RULES:
            rule = events.Rule(
                self,
                spec.construct_id,
                description=f"Joiner: {spec.description}",
                event_pattern=events.EventPattern(source=[spec.source], detail_type=spec.detail_types, detail=spec.detail),
            )
            rule.add_target(_QueueTarget(self.queue, self.dead_letter_queue))
            self.rules.append(rule)
        events_principal = iam.ServicePrincipal("events.amazonaws.com")
        rule_arns = [rule.rule_arn for rule in self.rules]
        for queue in (self.queue, self.dead_letter_queue):
            queue.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="AllowOnlyThisStacksInterruptionRules",
                    principals=[events_principal],
                    actions=["sqs:SendMessage"],
                    resources=[queue.queue_arn],
                    conditions={"ArnEquals": {"aws:SourceArn": rule_arns}},
                )
            )
