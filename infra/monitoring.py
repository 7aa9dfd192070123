"""Alarms, the alarm topic and the dashboard.

Business metrics come from the functions as powertools EMF in the ``Joiner`` namespace
with the ``service=joiner`` dimension (``joiner.observability.count(name, value)``). The
alarms read exactly that dimension set, so an alarmed metric must be emitted without
extra dimensions (per-NodePool or per-reason breakdowns can be emitted in addition); the
dashboard sums dimensioned metrics with SEARCH.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.encryption import alarm_source_conditions

__all__ = [
    "CAPACITY_ERRORS",
    "CAPACITY_ERROR_THRESHOLD",
    "INTERRUPTIONS",
    "LIMIT_REACHED",
    "MANAGED_COST_PER_HOUR",
    "METRICS_NAMESPACE",
    "METRIC_DIMENSIONS",
    "NODES_LAUNCHED",
    "NODES_TERMINATED",
    "PENDING_PODS",
    "PENDING_POD_AGE",
    "PENDING_POD_AGE_THRESHOLD_SECONDS",
    "SCAN_COMPLETED",
    "Monitoring",
    "joiner_metric",
    "summed_over_dimensions",
]

METRICS_NAMESPACE = "Joiner"
METRIC_DIMENSIONS: Mapping[str, str] = {"service": "joiner"}

# The metrics the functions emit (joiner.services.*) that this module reads.
PENDING_PODS = "PodsPending"  # gauge, per scan: pods waiting for a node
PENDING_POD_AGE = "PendingPodAgeSeconds"  # gauge, per scan: age of the oldest pending pod
NODES_LAUNCHED = "ClaimsLaunched"  # count: node claims launched
NODES_TERMINATED = "NodesTerminated"  # count, dimension reason
CAPACITY_ERRORS = "CapacityErrors"  # count: EC2 Fleet capacity errors (InsufficientInstanceCapacity ...)
LIMIT_REACHED = "LimitReached"  # count: a launch refused because a NodePool limit would be exceeded
INTERRUPTIONS = "InterruptionActions"  # count, dimensions action and kind: interruption events acted upon
SCAN_COMPLETED = "ScanCompleted"  # count: one per finished scan (the scanner's heartbeat)
MANAGED_COST_PER_HOUR = "ManagedCostPerHour"  # gauge, USD/hour of the nodes Joiner manages
DISRUPTION_COMMANDS = "DisruptionCommandsExecuted"  # count, dimension method
NODES_DISRUPTED = "NodesDisrupted"  # count, dimension method
DISRUPTION_DROPPED = "DisruptionCommandsDropped"  # count: commands the 15 s re-simulation dropped
GARBAGE_COLLECTED = "GarbageCollected"  # count, dimension kind
GARBAGE_COLLECTION_ERRORS = "GarbageCollectionErrors"  # count, dimension kind
SPOT_PRICES_UNAVAILABLE = "SpotPricesUnavailable"  # count: spot price history could not be read

PENDING_POD_AGE_THRESHOLD_SECONDS = 300
CAPACITY_ERROR_THRESHOLD = 10
FIVE_MINUTES = Duration.minutes(5)


def joiner_metric(name: str, statistic: str, period: Duration = FIVE_MINUTES, label: str | None = None) -> cloudwatch.Metric:
    """A Joiner business metric with the ``service=joiner`` dimension only."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map=dict(METRIC_DIMENSIONS),
        statistic=statistic,
        period=period,
        label=label,
    )


def summed_over_dimensions(name: str, label: str, period: Duration) -> cloudwatch.MathExpression:
    """A dashboard line summing ``name`` over all its dimension sets (per reason, per kind ...).
    Alarms cannot use SEARCH, which is why alarmed metrics carry no extra dimensions."""
    seconds = int(period.to_seconds())
    return cloudwatch.MathExpression(
        expression=f"SUM(SEARCH('Namespace=\"{METRICS_NAMESPACE}\" MetricName=\"{name}\"', 'Sum', {seconds}))",
        label=label,
        period=period,
        using_metrics={},
    )


class Monitoring(Construct):
    """``topic`` (created, KMS-encrypted and TLS-only, publishable by this account's
    CloudWatch alarms, optionally with an e-mail subscription; or the existing
    ``alarm_topic_arn``, whose policy must let CloudWatch publish), ``alarms`` by name,
    ``dashboard``.

    Every alarm notifies the topic on ALARM and on OK.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        key: kms.IKey,
        functions: Mapping[str, lambda_.IFunction],
        dead_letter_queues: Mapping[str, sqs.IQueue],
        interruption_queue: sqs.IQueue,
        alarm_email: str | None,
        alarm_topic_arn: str | None,
    ) -> None:
        super().__init__(scope, construct_id)
        if alarm_topic_arn is not None:
            self.topic: sns.ITopic = sns.Topic.from_topic_arn(self, "AlarmTopic", alarm_topic_arn)
        else:
            topic = sns.Topic(self, "AlarmTopic", display_name=f"Joiner alarms ({cluster_name})", master_key=key, enforce_ssl=True)
            # A topic policy replaces SNS's default one: without this statement nothing may
            # publish, so alarms would never notify.
            topic.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="AllowThisAccountsAlarmsToPublish",
                    principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                    actions=["sns:Publish"],
                    resources=[topic.topic_arn],
                    conditions=alarm_source_conditions(Stack.of(self)),
                )
            )
            if alarm_email is not None:
                topic.add_subscription(subscriptions.EmailSubscription(alarm_email))
            self.topic = topic
        self.alarms: dict[str, cloudwatch.Alarm] = {}

        def alarm(alarm_id: str, description: str, metric: cloudwatch.IMetric, *, threshold: float,
                  comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                  periods: int = 1, missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING) -> None:
            created = cloudwatch.Alarm(
                self,
                alarm_id,
                alarm_description=f"Joiner ({cluster_name}): {description}",
                metric=metric,
                threshold=threshold,
                comparison_operator=comparison,
                evaluation_periods=periods,
                datapoints_to_alarm=periods,
                treat_missing_data=missing,
            )
            created.add_alarm_action(actions.SnsAction(self.topic))
            created.add_ok_action(actions.SnsAction(self.topic))
            self.alarms[alarm_id] = created

        for name, queue in dead_letter_queues.items():
            alarm(f"{name}DeadLetters", f"messages in the {name} dead-letter queue (failed 5 times)",
                  queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=FIVE_MINUTES), threshold=0)
        for name, function in functions.items():
            title = name.capitalize()
            alarm(f"{title}Errors", f"the {name} function failed",
                  function.metric_errors(statistic="Sum", period=FIVE_MINUTES), threshold=0)
            # Three periods: one overlapping run of a reserved-concurrency-1 function now and then is expected.
            alarm(f"{title}Throttles", f"the {name} function is throttled for 15 minutes",
                  function.metric_throttles(statistic="Sum", period=FIVE_MINUTES), threshold=0, periods=3)
        alarm("PendingPodAge", f"a pod has been pending for more than {PENDING_POD_AGE_THRESHOLD_SECONDS} s",
              joiner_metric(PENDING_POD_AGE, "Maximum"), threshold=PENDING_POD_AGE_THRESHOLD_SECONDS)
        alarm("LimitReached", "a NodePool limit stopped a launch", joiner_metric(LIMIT_REACHED, "Sum"), threshold=0)
        alarm("CapacityErrors", f"more than {CAPACITY_ERROR_THRESHOLD} EC2 capacity errors in 5 minutes",
              joiner_metric(CAPACITY_ERRORS, "Sum"), threshold=CAPACITY_ERROR_THRESHOLD)
        alarm("ScannerNotRunning", "no completed scan for 10 minutes", joiner_metric(SCAN_COMPLETED, "Sum"), threshold=1,
              comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD, periods=2,
              missing=cloudwatch.TreatMissingData.BREACHING)

        one_minute = Duration.minutes(1)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown=f"# Joiner: {cluster_name}", width=24, height=1))
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Pending pods",
                left=[joiner_metric(PENDING_PODS, "Maximum", one_minute, "pending pods")],
                right=[joiner_metric(PENDING_POD_AGE, "Maximum", one_minute, "oldest pending (s)")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Launches",
                left=[
                    joiner_metric(NODES_LAUNCHED, "Sum", one_minute, "nodes launched"),
                    summed_over_dimensions(NODES_TERMINATED, "nodes terminated", one_minute),
                ],
                right=[
                    joiner_metric(CAPACITY_ERRORS, "Sum", one_minute, "capacity errors"),
                    joiner_metric(LIMIT_REACHED, "Sum", one_minute, "limit reached"),
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Interruptions",
                left=[
                    summed_over_dimensions(INTERRUPTIONS, "events acted upon", one_minute),
                    interruption_queue.metric_number_of_messages_received(statistic="Sum", period=one_minute, label="events received"),
                ],
                width=8,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Cost per hour of managed nodes (USD)",
                left=[joiner_metric(MANAGED_COST_PER_HOUR, "Average", FIVE_MINUTES, "USD/hour")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Function errors and throttles",
                left=[function.metric_errors(statistic="Sum", period=FIVE_MINUTES, label=f"{name} errors") for name, function in functions.items()],
                right=[function.metric_throttles(statistic="Sum", period=FIVE_MINUTES, label=f"{name} throttles") for name, function in functions.items()],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Function duration p99 (ms)",
                left=[function.metric_duration(statistic="p99", period=FIVE_MINUTES, label=name) for name, function in functions.items()],
                width=8,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Disruption",
                left=[
                    summed_over_dimensions(DISRUPTION_COMMANDS, "commands executed", FIVE_MINUTES),
                    summed_over_dimensions(NODES_DISRUPTED, "nodes disrupted", FIVE_MINUTES),
                    joiner_metric(DISRUPTION_DROPPED, "Sum", FIVE_MINUTES, "dropped at validation"),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Garbage collection and spot prices",
                left=[
                    summed_over_dimensions(GARBAGE_COLLECTED, "collected", FIVE_MINUTES),
                    summed_over_dimensions(GARBAGE_COLLECTION_ERRORS, "gc errors", FIVE_MINUTES),
                    joiner_metric(SPOT_PRICES_UNAVAILABLE, "Sum", FIVE_MINUTES, "spot prices unavailable"),
                ],
                width=12,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24, height=4),
        )
