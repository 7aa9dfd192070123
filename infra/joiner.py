"""``Joiner``: the reusable construct that deploys Joiner for one EKS cluster."""

from __future__ import annotations

from aws_cdk import AspectPriority, Aspects, CfnOutput, Stack
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.access import FunctionAccess
from infra.cluster_image import ClusterImageBucket
from infra.config import RETENTION_DAY_NAMES, JoinerConfig
from infra.encryption import JoinerKey
from infra.functions import ARCHITECTURE, BATCHING_WINDOW_SECONDS, RUNTIME, SPECS_BY_NAME, JoinerFunctions, specs_for_mode
from infra.ingestion import InterruptionIngestion
from infra.layer import JoinerLayer, LayerBundler
from infra.monitoring import METRICS_NAMESPACE, Monitoring
from infra.nag import JustifiedFindings
from infra.network import FunctionNetwork
from infra.node_role import NodeRole
from infra.schedules import Schedules
from infra.state import StateTables
from infra.work_queue import WorkQueue

__all__ = ["Joiner"]


class Joiner(Construct):
    """Everything Joiner needs in AWS for one cluster; put it in any stack::

        Joiner(stack, "Joiner", config=JoinerConfig(cluster_name="prod", alarm_email="ops@example.com"))

    The stack's region and account are used; the cluster must use the EKS access-entry
    API (authentication mode ``API`` or ``API_AND_CONFIG_MAP``) unless
    ``create_access_entry`` is false. Attributes expose the parts (``tables``,
    ``ingestion``, ``work``, ``functions``, ``monitoring``...) for further wiring.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: JoinerConfig, layer_bundler: LayerBundler | None = None) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        cluster = config.cluster_name
        self.encryption = JoinerKey(self, "Encryption", cluster_name=cluster)
        key = self.encryption.key
        self.tables = StateTables(self, "State", key=key)
        self.cluster_image = ClusterImageBucket(self, "ClusterImage", key=key)
        self.work = WorkQueue(
            self,
            "WorkQueue",
            key=key,
            consumer_timeout_seconds=SPECS_BY_NAME["termination"].timeout_seconds,
            batching_window_seconds=BATCHING_WINDOW_SECONDS,
        )
        self.ingestion = InterruptionIngestion(
            self,
            "Ingestion",
            consumer_timeout_seconds=SPECS_BY_NAME["interruption"].timeout_seconds,
            batching_window_seconds=BATCHING_WINDOW_SECONDS,
        )
        self.node_role = NodeRole(
            self,
            "NodeRole",
            cluster_name=cluster,
            node_role_arn=config.node_role_arn,
            existing_role_name=config.existing_node_role_name,
            create_access_entry=config.create_access_entry,
        )
        self.layer = JoinerLayer(self, "Layer", runtime=RUNTIME, architecture=ARCHITECTURE, bundler=layer_bundler)
        self.network = (
            FunctionNetwork(
                self,
                "Network",
                vpc_id=config.vpc_id,
                subnet_ids=config.subnet_ids,
                security_group_id=config.security_group_id,
                interface_endpoints=config.interface_endpoints_needed if config.vpc_endpoints == "create" else (),
            )
            if config.vpc_id is not None
            else None
        )
        specs = specs_for_mode(config.scanner_mode)
        self.access = FunctionAccess(
            self,
            "Access",
            cluster_name=cluster,
            function_names=tuple(spec.name for spec in specs),
            node_role_arn=self.node_role.role_arn,
            state_table=self.tables.state_table,
            idempotency_table=self.tables.idempotency_table,
            work_queue=self.work.queue,
            cluster_image=self.cluster_image,
            create_access_entries=config.create_access_entry,
            in_vpc=config.in_vpc,
            ebs_kms_key_arn=config.ebs_kms_key_arn,
        )
        environment = {
            "JOINER_CLUSTER_NAME": cluster,
            "JOINER_STATE_TABLE": self.tables.state_table.table_name,
            "JOINER_IDEMPOTENCY_TABLE": self.tables.idempotency_table.table_name,
            "JOINER_STATE_BUCKET": self.cluster_image.bucket.bucket_name,
            "JOINER_INTERRUPTION_QUEUE_URL": self.ingestion.queue.queue_url,
            "JOINER_WORK_QUEUE_URL": self.work.queue.queue_url,
            # Responsive mode's waiting is the watcher's: the scanner itself always runs one round.
            "JOINER_SCANNER_MODE": "economy",
            "JOINER_NODE_ROLE": self.node_role.role_name,
            "POWERTOOLS_SERVICE_NAME": "joiner",
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            "POWERTOOLS_LOG_LEVEL": config.log_level,
        }
        if config.read_karpenter_crds:
            environment["JOINER_KARPENTER_CRDS"] = "true"
        self.functions = JoinerFunctions(
            self,
            "Functions",
            layer=self.layer.layer,
            roles=self.access.roles,
            role_policies=self.access.policies,
            environment=environment,
            log_retention=getattr(logs.RetentionDays, RETENTION_DAY_NAMES[config.log_retention_days]),
            interruption_queue=self.ingestion.queue,
            work_queue=self.work.queue,
            network=self.network,
            specs=specs,
            log_level=config.log_level,
        )
        self.schedules = Schedules(self, "Schedules", functions=self.functions.functions)
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            cluster_name=cluster,
            key=key,
            functions=self.functions.functions,
            dead_letter_queues={"Interruption": self.ingestion.dead_letter_queue, "Work": self.work.dead_letter_queue},
            interruption_queue=self.ingestion.queue,
            interruption_rules=self.ingestion.rules,
            alarm_email=config.alarm_email,
            alarm_topic_arn=config.alarm_topic_arn,
            dashboard_name=config.dashboard,
            pending_pod_age_threshold_seconds=config.pending_pod_age_alarm_seconds,
            capacity_error_threshold=config.capacity_errors_alarm_threshold,
            interruption_queue_age_threshold_seconds=config.interruption_queue_age_alarm_seconds,
        )
        # Before cdk-nag's own aspect copies acknowledgements into the template metadata.
        Aspects.of(self).add(JustifiedFindings(), priority=AspectPriority.MUTATING)

        outputs = {
            "StateTableName": (self.tables.state_table.table_name, "DynamoDB state table"),
            "StateBucketName": (self.cluster_image.bucket.bucket_name, "S3 bucket of the cluster state's image"),
            "InterruptionQueueUrl": (self.ingestion.queue.queue_url, "SQS queue fed by the interruption rules"),
            "WorkQueueUrl": (self.work.queue.queue_url, "SQS work queue (drain continuations)"),
            "NodeRoleName": (self.node_role.role_name, "Role for NodeClass spec.role"),
            "AlarmTopicArn": (self.monitoring.topic.topic_arn, "SNS topic the alarms notify"),
        }
        if self.monitoring.dashboard is not None:
            outputs["DashboardName"] = (self.monitoring.dashboard.dashboard_name, "CloudWatch dashboard")
            outputs["DashboardUrl"] = (
                f"https://console.aws.amazon.com/cloudwatch/home?region={Stack.of(self).region}#dashboards:name={config.dashboard}",
                "CloudWatch dashboard in the console",
            )
        for name, function in self.functions.functions.items():
            outputs[f"{name.capitalize()}FunctionName"] = (function.function_name, f"The {name} function")
        for output_id, (value, description) in outputs.items():
            CfnOutput(self, output_id, value=value, description=description)
