"""The test world's stack (testworld.stack) on a moto server: its queues redrive and come back
as the deployment's do (infra.deployment, which the CDK constructs are built from)."""

from __future__ import annotations

import json

from infra.deployment import INTERRUPTION_VISIBILITY_SECONDS, MAX_RECEIVE_COUNT, WORK_MAX_RECEIVE_COUNT, WORK_VISIBILITY_SECONDS
from testworld.aws import SerialMotoServer, fake_credentials
from testworld.stack import EVENT_RULE_PATTERN, LocalStack


def test_the_local_stacks_queues_have_the_deployed_redrive_visibility_and_routing() -> None:
    with fake_credentials():
        server = SerialMotoServer()
        server.start()
        try:
            stack = LocalStack(server.endpoint, "world").create()
            assert stack.interruption is not None and stack.work is not None
            for queue, visibility, receives in (
                (stack.interruption, INTERRUPTION_VISIBILITY_SECONDS, MAX_RECEIVE_COUNT),
                (stack.work, WORK_VISIBILITY_SECONDS, WORK_MAX_RECEIVE_COUNT),
            ):
                attributes = stack.sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=["All"])["Attributes"]
                assert int(attributes["VisibilityTimeout"]) == visibility
                assert int(json.loads(attributes["RedrivePolicy"])["maxReceiveCount"]) == receives
            rule = stack.events.describe_rule(Name=stack.rule)
            assert json.loads(rule["EventPattern"]) == EVENT_RULE_PATTERN
        finally:
            server.stop()
