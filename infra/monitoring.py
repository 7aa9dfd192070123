"""Alarms, the alarm topic and the dashboard.

Business metrics come from the functions as powertools EMF in the ``Joiner`` namespace
with the dimensions ``service=joiner`` and ``cluster=<cluster name>``
(``joiner.observability.count(name, value)``). The alarms read exactly that dimension set,
so an alarmed metric must be emitted without extra dimensions (per-NodePool or per-reason
breakdowns can be emitted in addition), and two clusters in one account and region have
alarms of their own; the dashboard sums this cluster's dimensioned metrics with SEARCH.
Thresholds come from :class:`infra.config.JoinerConfig` (CDK context).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.encryption import alarm_source_conditions
from infra.functions import SPECS_BY_NAME

__all__ = [
    "CAPACITY_ERRORS",
    "CAPACITY_ERROR_THRESHOLD",
    "INTERRUPTIONS",
    "LIMIT_REACHED",
    "MANAGED_COST_PER_HOUR",
    "METRICS_NAMESPACE",
    "INTERRUPTION_QUEUE_AGE_THRESHOLD_SECONDS",
    "NODES_LAUNCHED",
    "NODES_TERMINATED",
    "PENDING_PODS",
    "PENDING_POD_AGE",
    "PENDING_POD_AGE_THRESHOLD_SECONDS",
    "SCAN_COMPLETED",
    "Monitoring",
    "joiner_metric",
    "metric_dimensions",
    "summed_over_dimensions",
]

METRICS_NAMESPACE = "Joiner"
#: What a message in each dead-letter queue went through, and where to look (the queue's depth
#: cannot name the node).
DEAD_LETTER_HINTS = {
    "Interruption": "failed 5 receives",
    "Work": (
        "a drain continuation failed 24 receives over 42 minutes; the termination function logged "
        "'termination continuation dead-lettered' with the node, and gc resumes a drain stalled 20 minutes"
    ),
}


def metric_dimensions(cluster_name: str) -> dict[str, str]:
    """The dimension set of an alarmed Joiner metric (``joiner.observability``)."""
    return {"service": "joiner", "cluster": cluster_name}


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
#: A spot warning gives two minutes: a message older than 30 s means the interruption function
#: is not keeping up (throttled, failing, or the batch stuck) while there is still time to act.
INTERRUPTION_QUEUE_AGE_THRESHOLD_SECONDS = 30
FIVE_MINUTES = Duration.minutes(5)


def joiner_metric(name: str, statistic: str, cluster_name: str, period: Duration = FIVE_MINUTES, label: str | None = None) -> cloudwatch.Metric:
    """A Joiner business metric of one cluster, with the ``service`` and ``cluster`` dimensions only."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map=metric_dimensions(cluster_name),
        statistic=statistic,
        period=period,
        label=label,
    )


def summed_over_dimensions(name: str, label: str, period: Duration, cluster_name: str) -> cloudwatch.MathExpression:
    """A dashboard line summing one cluster's ``name`` over all its dimension sets (per reason,
    per kind ...). Alarms cannot use SEARCH, which is why alarmed metrics carry no extra dimensions."""
    seconds = int(period.to_seconds())
    search = f'Namespace="{METRICS_NAMESPACE}" MetricName="{name}" cluster="{cluster_name}"'
    return cloudwatch.MathExpression(
        expression=f"SUM(SEARCH('{search}', 'Sum', {seconds}))",
        label=label,
        period=period,
        using_metrics={},
    )


class Monitoring(Construct):
    """``topic`` (created, KMS-encrypted and TLS-only, publishable by this account's
    CloudWatch alarms, optionally with an e-mail subscription; or the existing
    ``alarm_topic_arn``, whose policy must let CloudWatch publish), ``alarms`` by name,
    ``dashboard`` (named ``dashboard_name``; none when it is None).

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
        interruption_rules: Sequence[events.IRule] = (),
        alarm_email: str | None,
        alarm_topic_arn: str | None,
        dashboard_name: str | None,
        pending_pod_age_threshold_seconds: int = PENDING_POD_AGE_THRESHOLD_SECONDS,
        capacity_error_threshold: int = CAPACITY_ERROR_THRESHOLD,
        interruption_queue_age_threshold_seconds: int = INTERRUPTION_QUEUE_AGE_THRESHOLD_SECONDS,
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

        def alarm(
            alarm_id: str,
            description: str,
            metric: cloudwatch.IMetric,
            *,
            threshold: float,
            comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            periods: int = 1,
            missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
        ) -> None:
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
            alarm(
                f"{name}DeadLetters",
                f"messages in the {name} dead-letter queue ({DEAD_LETTER_HINTS.get(name, 'failed on every receive')})",
                queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=FIVE_MINUTES),
                threshold=0,
            )
        for name, function in functions.items():
            title = name.capitalize()
            alarm(f"{title}Errors", f"the {name} function failed", function.metric_errors(statistic="Sum", period=FIVE_MINUTES), threshold=0)
            spec = SPECS_BY_NAME.get(name)
            if spec is not None and spec.reserved_concurrency is not None:
                # One-at-a-time functions are throttled by design (a watcher wake-up during a round
                # waits for it); one that stops running shows in ScannerNotRunning or its errors.
                continue
            # The queue consumers: throttling delays interruption handling (raise the account's concurrency).
            alarm(
                f"{title}Throttles",
                f"the {name} function is throttled for 15 minutes",
                function.metric_throttles(statistic="Sum", period=FIVE_MINUTES),
                threshold=0,
                periods=3,
            )
        one_minute = Duration.minutes(1)
        if interruption_rules:
            # EventBridge could not deliver to the queue (its policy, its key, SQS itself): the
            # event is retried for an hour, then goes to the DLQ (alarmed above), or is lost.
            failed = {
                f"rule{index}": cloudwatch.Metric(
                    namespace="AWS/Events", metric_name="FailedInvocations", dimensions_map={"RuleName": rule.rule_name}, statistic="Sum", period=FIVE_MINUTES
                )
                for index, rule in enumerate(interruption_rules)
            }
            alarm(
                "InterruptionDeliveryFailures",
                "EventBridge failed to deliver interruption events to the queue",
                cloudwatch.MathExpression(
                    expression=" + ".join(f"FILL({name}, 0)" for name in failed), using_metrics=failed, period=FIVE_MINUTES, label="failed deliveries"
                ),
                threshold=0,
            )
        alarm(
            "InterruptionQueueAge",
            f"an interruption event has waited more than {interruption_queue_age_threshold_seconds} s (a spot warning gives 120 s)",
            interruption_queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=one_minute),
            threshold=interruption_queue_age_threshold_seconds,
        )

        def metric(name: str, statistic: str, period: Duration = FIVE_MINUTES, label: str | None = None) -> cloudwatch.Metric:
            return joiner_metric(name, statistic, cluster_name, period, label)

        def summed(name: str, label: str, period: Duration) -> cloudwatch.MathExpression:
            return summed_over_dimensions(name, label, period, cluster_name)

        alarm(
            "PendingPodAge",
            f"a pod has been pending for more than {pending_pod_age_threshold_seconds} s",
            metric(PENDING_POD_AGE, "Maximum"),
            threshold=pending_pod_age_threshold_seconds,
            missing=cloudwatch.TreatMissingData.NOT_BREACHING,
        )  # emitted only while pods are pending
        alarm("LimitReached", "a NodePool limit stopped a launch", metric(LIMIT_REACHED, "Sum"), threshold=0)
        alarm(
            "CapacityErrors",
            f"more than {capacity_error_threshold} EC2 capacity errors in 5 minutes",
            metric(CAPACITY_ERRORS, "Sum"),
            threshold=capacity_error_threshold,
        )
        alarm(
            "ScannerNotRunning",
            "no completed scan for 10 minutes",
            metric(SCAN_COMPLETED, "Sum"),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            periods=2,
            missing=cloudwatch.TreatMissingData.BREACHING,
        )

        self.dashboard: cloudwatch.Dashboard | None = None
        if dashboard_name is None:
            return
        dashboard = self.dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=dashboard_name, default_interval=Duration.hours(3))
        dashboard.add_widgets(cloudwatch.TextWidget(markdown=f"# Joiner: {cluster_name}", width=24, height=1))
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Pending pods",
                left=[metric(PENDING_PODS, "Maximum", one_minute, "pending pods")],
                right=[metric(PENDING_POD_AGE, "Maximum", one_minute, "oldest pending (s)")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Launches",
                left=[
                    metric(NODES_LAUNCHED, "Sum", one_minute, "nodes launched"),
                    summed(NODES_TERMINATED, "nodes terminated", one_minute),
                ],
                right=[
                    metric(CAPACITY_ERRORS, "Sum", one_minute, "capacity errors"),
                    metric(LIMIT_REACHED, "Sum", one_minute, "limit reached"),
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Interruptions",
                left=[
                    summed(INTERRUPTIONS, "events acted upon", one_minute),
                    interruption_queue.metric_number_of_messages_received(statistic="Sum", period=one_minute, label="events received"),
                ],
                right=[interruption_queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=one_minute, label="oldest waiting event (s)")],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Cost per hour of managed nodes (USD)",
                left=[metric(MANAGED_COST_PER_HOUR, "Average", FIVE_MINUTES, "USD/hour")],
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
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Disruption",
                left=[
                    summed(DISRUPTION_COMMANDS, "commands executed", FIVE_MINUTES),
                    summed(NODES_DISRUPTED, "nodes disrupted", FIVE_MINUTES),
                    metric(DISRUPTION_DROPPED, "Sum", FIVE_MINUTES, "dropped at validation"),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Garbage collection and spot prices",
                left=[
                    summed(GARBAGE_COLLECTED, "collected", FIVE_MINUTES),
                    summed(GARBAGE_COLLECTION_ERRORS, "gc errors", FIVE_MINUTES),
                    metric(SPOT_PRICES_UNAVAILABLE, "Sum", FIVE_MINUTES, "spot prices unavailable"),
                ],
                width=12,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24, height=4),
        )
