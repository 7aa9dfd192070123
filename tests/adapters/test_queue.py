"""SqsQueue against moto SQS: body, delay clamping, dedup attribute, errors."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from moto import mock_aws

from joiner.adapters.aws import AwsClients
from joiner.adapters.queue import DEDUP_ATTRIBUTE, MAX_DELAY_SECONDS, QueueError, SqsQueue, clamp_delay
from testworld.aws import REGION, create_work_queue, fake_credentials


@pytest.fixture()
def sqs() -> Iterator[object]:
    with fake_credentials(), mock_aws():
        yield AwsClients(REGION).sqs


def sent_delays(sqs) -> list[int]:
    """Record the DelaySeconds each SendMessage actually carries on the wire."""
    delays: list[int] = []

    def record(params, **_):
        delays.append(int(params["DelaySeconds"]))

    sqs.meta.events.register("provide-client-params.sqs.SendMessage", record)
    return delays


def test_message_body_and_dedup_attribute(sqs) -> None:
    url = create_work_queue(sqs)
    SqsQueue(sqs, url).send({"kind": "drain", "node": "n1", "attempt": 2}, dedup_id="drain-n1-2")
    messages = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=0)["Messages"]
    assert len(messages) == 1
    assert json.loads(messages[0]["Body"]) == {"kind": "drain", "node": "n1", "attempt": 2}
    assert messages[0]["Body"] == '{"attempt":2,"kind":"drain","node":"n1"}'  # compact, keys sorted
    assert messages[0]["MessageAttributes"][DEDUP_ATTRIBUTE]["StringValue"] == "drain-n1-2"


def test_delays_are_clamped_to_what_sqs_accepts(sqs) -> None:
    url = create_work_queue(sqs)
    delays = sent_delays(sqs)
    queue = SqsQueue(sqs, url)
    for requested in (-5, 0, 1.2, 899, 900, 5000):
        queue.send({"requested": requested}, delay_seconds=requested)
    assert delays == [0, 0, 2, 899, 900, 900]
    visible = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
    assert sorted(json.loads(m["Body"])["requested"] for m in visible) == [-5, 0]  # the rest are delayed


def test_errors_are_queue_errors(sqs) -> None:
    with pytest.raises(QueueError) as error:
        SqsQueue(sqs, "https://sqs.us-east-1.amazonaws.com/123456789012/missing").send({"a": 1})
    assert error.value.code
    with pytest.raises(QueueError, match="not configured"):
        SqsQueue(sqs, "").send({"a": 1})
    with pytest.raises(QueueError, match="JSON"):
        SqsQueue(sqs, create_work_queue(sqs)).send({"a": object()})


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-(10**6), max_value=10**6))
def test_clamp_delay_invariants(value) -> None:
    delay = clamp_delay(value)
    assert isinstance(delay, int)
    assert 0 <= delay <= MAX_DELAY_SECONDS
    if value == value and 0 <= value <= MAX_DELAY_SECONDS:
        assert delay == math.ceil(value)  # whole seconds, never early
