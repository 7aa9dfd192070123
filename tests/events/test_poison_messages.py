"""Poison messages on the interruption and work queues (issue 10, defect 6): a record that
cannot be parsed or interpreted is acknowledged and counted, and never holds back the
valid records of its batch. End to end through SQS (moto), the real handlers, DynamoDB and
the Kubernetes emulator; fuzzed bodies through the record handler itself."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from hypothesis import HealthCheck, given, settings

from joiner.domain import labels as wk
from tests.events.fixtures import load_event
from tests.events.fuzz import event_bodies
from tests.events.world import World

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:No application metrics to publish")]

DEEP_ARRAY = "[" * 5000 + "]" * 5000


def poison_bodies(world: World, instance: str) -> list[str]:
    """The three bodies that failed the old handler's batch."""
    spot = load_event("spot_interruption.json", instance_id=instance, event_id="new")
    spot["time"] = "9999-12-31T23:59:59Z"
    health = load_event("health_scheduled_change.json", instance_id=instance, event_id="new", time=world.clock.now())
    health["detail"]["startTime"] = "9999-12-31T23:59:59-01:00"
    return [DEEP_ARRAY, json.dumps(spot), json.dumps(health)]


def test_poison_messages_do_not_hold_back_a_spot_warning(world: World) -> None:
    instance = world.launch_node("n1")
    world.add_pod("n1-web-1", "n1")
    for body in poison_bodies(world, instance):
        world.sqs.send_message(QueueUrl=world.interruption.url, MessageBody=body)
    world.publish("spot_interruption.json", instance)

    response, messages = world.deliver_interruptions()
    assert len(messages) == 4
    assert response == {"batchItemFailures": []}
    assert world.metrics.total("InterruptionUnparseable") == 3
    node = world.node("n1")
    assert node is not None and node["spec"].get("unschedulable") is True
    assert wk.DISRUPTED_TAINT_KEY in [taint["key"] for taint in node["spec"].get("taints") or []]
    assert world.receive(world.interruption) == []


@pytest.mark.parametrize(("shift", "fragment"), [(-timedelta(days=31), "older than 30 day"), (timedelta(days=2), "later than 1 day")])
def test_events_far_from_the_clock_are_acknowledged_as_unparseable(world: World, shift: timedelta, fragment: str) -> None:
    instance = world.launch_node("n1")
    world.publish("spot_interruption.json", instance, time=world.clock.now() + shift)
    response, _ = world.deliver_interruptions()
    assert response == {"batchItemFailures": []}
    assert world.metrics.total("InterruptionUnparseable") == 1
    assert world.node("n1")["spec"].get("unschedulable") is None


def test_poison_work_messages_are_acknowledged(world: World) -> None:
    for body in (DEEP_ARRAY, json.dumps({"kind": "termination", "node": "n1", "generation": 10**400})):
        world.sqs.send_message(QueueUrl=world.work.url, MessageBody=body)
    messages = world.receive(world.work)
    assert len(messages) == 2
    response = world.invoke(world.termination_handler, messages, world.work)
    assert response == {"batchItemFailures": []}
    assert world.metrics.total("WorkMessageInvalid") == 2


# ---------------------------------------------------------------- fuzzing


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=event_bodies())
def test_fuzzed_bodies_never_raise_out_of_the_record_handler(world: World, body: str) -> None:
    record = SQSRecord(
        {
            "messageId": str(uuid.uuid4()),
            "body": body,
            "receiptHandle": "r",
            "attributes": {},
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "eventSourceARN": world.interruption.arn,
            "awsRegion": "us-east-1",
        }
    )
    outcome = world.interruption_handler.record_handler(record)
    assert isinstance(outcome, dict)
