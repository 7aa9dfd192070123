"""The Lambda functions (five, six with responsive mode's watcher), their log groups and
their SQS event sources."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IDependable

from infra.deployment import BATCHING_WINDOW_SECONDS, FUNCTION_SPECS, RESPONSIVE_ONLY, SPECS_BY_NAME, FunctionSpec, specs_for_mode
from infra.nag import acknowledge
from infra.network import FunctionNetwork

__all__ = [
    "FunctionSpec",
    "FUNCTION_SPECS",
    "SPECS_BY_NAME",
    "RUNTIME",
    "ARCHITECTURE",
    "BATCHING_WINDOW_SECONDS",
    "SQS_BATCH_SIZE",
    "APPLICATION_LOG_LEVELS",
    "FUNCTIONS_ROOT",
    "RESPONSIVE_ONLY",
    "JoinerFunctions",
    "specs_for_mode",
]

FUNCTIONS_ROOT = Path(__file__).resolve().parent.parent / "functions"
RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64
SQS_BATCH_SIZE = 10
#: The functions' log level (``logLevel``, POWERTOOLS_LOG_LEVEL) -> Lambda's application log level.
APPLICATION_LOG_LEVELS: Mapping[str, lambda_.ApplicationLogLevel] = {
    "DEBUG": lambda_.ApplicationLogLevel.DEBUG,
    "INFO": lambda_.ApplicationLogLevel.INFO,
    "WARNING": lambda_.ApplicationLogLevel.WARN,
    "ERROR": lambda_.ApplicationLogLevel.ERROR,
}


class JoinerFunctions(Construct):
    """``functions`` by name: Python 3.13 on arm64 with the shared layer, X-Ray tracing,
    JSON logs in a log group with the configured retention, and the environment contract
    (``JOINER_*`` and powertools variables).

    Scheduled functions (no SQS source) drop an invocation that waited a minute instead of
    retrying it: the next tick does the same work with fresher data. The interruption and
    termination functions consume their queues in batches of 10 with partial batch responses.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        roles: Mapping[str, iam.IRole],
        role_policies: Mapping[str, Sequence[IDependable]],
        environment: Mapping[str, str],
        log_retention: logs.RetentionDays,
        interruption_queue: sqs.IQueue,
        work_queue: sqs.IQueue,
        network: FunctionNetwork | None = None,
        specs: Sequence[FunctionSpec] = FUNCTION_SPECS,
        log_level: str = "INFO",
    ) -> None:
        super().__init__(scope, construct_id)
        queue_sources = {"interruption": interruption_queue, "termination": work_queue}
        self.functions: dict[str, lambda_.Function] = {}
        self.log_groups: dict[str, logs.LogGroup] = {}
        for spec in specs:
            title = spec.name.capitalize()
            log_group = logs.LogGroup(self, f"{title}Logs", retention=log_retention)
            scheduled = spec.name not in queue_sources
            function = lambda_.Function(
                self,
                title,
                description=f"Joiner {spec.name}: {spec.description}",
                runtime=RUNTIME,
                architecture=ARCHITECTURE,
                handler="handler.handler",
                code=lambda_.Code.from_asset(str(FUNCTIONS_ROOT / spec.name), exclude=["__pycache__", "**/__pycache__", "*.pyc", "tests"]),
                layers=[layer],
                role=roles[spec.name],
                timeout=Duration.seconds(spec.timeout_seconds),
                memory_size=spec.memory_mb,
                reserved_concurrent_executions=spec.reserved_concurrency,
                environment=dict(environment),
                tracing=lambda_.Tracing.ACTIVE,
                log_group=log_group,
                logging_format=lambda_.LoggingFormat.JSON,
                # Lambda drops application logs below its own level before powertools' level applies.
                application_log_level_v2=APPLICATION_LOG_LEVELS[log_level],
                system_log_level_v2=lambda_.SystemLogLevel.WARN,
                retry_attempts=0 if scheduled else None,
                max_event_age=Duration.seconds(60) if scheduled else None,
                vpc=network.vpc if network else None,
                vpc_subnets=network.subnets if network else None,
                security_groups=[network.security_group] if network else None,
            )
            # The layer's compiled wheels (pydantic-core, PyYAML, aiohttp) are built for and tested
            # on CPython 3.13 (infra/layer.py); moving to a newer runtime is a deliberate change.
            cfn_function = function.node.default_child
            assert cfn_function is not None  # a Function always wraps its CfnFunction
            acknowledge(cfn_function, "AwsSolutions-L1", "Python 3.13 is pinned to match the layer's cp313 arm64 wheels.")
            log_group.grant_write(roles[spec.name])
            function.node.add_dependency(*role_policies.get(spec.name, ()))
            queue = queue_sources.get(spec.name)
            if queue is not None:
                function.add_event_source(
                    sources.SqsEventSource(
                        queue,
                        batch_size=SQS_BATCH_SIZE,
                        max_batching_window=Duration.seconds(BATCHING_WINDOW_SECONDS),
                        report_batch_item_failures=True,
                        max_concurrency=spec.sqs_max_concurrency,
                    )
                )
            self.functions[spec.name] = function
            self.log_groups[spec.name] = log_group
        watcher, scanner = self.functions.get("watcher"), self.functions.get("scanner")
        if watcher is not None and scanner is not None:
            # The watcher wakes the scanner (asynchronous lambda:InvokeFunction) and nothing else.
            watcher.add_environment("JOINER_PLANNER_FUNCTION", scanner.function_name)
            roles["watcher"].add_to_principal_policy(
                iam.PolicyStatement(sid="WakeTheScanner", actions=["lambda:InvokeFunction"], resources=[scanner.function_arn])
            )
