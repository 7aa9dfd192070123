"""The termination handler makes its received batch visible again 20 s later, so a death
before a step's safety continuation costs seconds, not the queue's 66 s visibility timeout;
a message received again after failing stays invisible longer each time, so a continuation
failing on an outage of a dependency outlives it instead of being dead-lettered."""

from __future__ import annotations

import importlib.util
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from joiner.adapters.queue import shorten_visibility
from joiner.services.termination import (
    OUTAGE_BUDGET,
    RECEIVED_VISIBILITY_CAP_SECONDS,
    RECEIVED_VISIBILITY_SECONDS,
    SAFETY_DELAY_SECONDS,
    SPARE_RECEIVES,
    WORK_MAX_RECEIVES,
    received_visibility,
    redelivery_budget,
)

QUEUE_URL = "https://sqs.eu-west-1.amazonaws.com/123456789012/joiner-work"


def _client() -> Any:
    return boto3.client("sqs", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")


def test_the_window_outlasts_a_safety_continuation_but_not_the_visibility_timeout() -> None:
    assert SAFETY_DELAY_SECONDS < RECEIVED_VISIBILITY_SECONDS < 66


def test_every_received_message_is_changed_in_batches_of_ten() -> None:
    sqs = _client()
    handles = [f"receipt-{index}" for index in range(12)] + [""]
    with Stubber(sqs) as stub:
        for chunk in (handles[:10], handles[10:12]):
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 20} for i, h in enumerate(chunk)]
            stub.add_response(
                "change_message_visibility_batch", {"Successful": [{"Id": e["Id"]} for e in entries], "Failed": []}, {"QueueUrl": QUEUE_URL, "Entries": entries}
            )
        assert shorten_visibility(sqs, QUEUE_URL, handles, 20) == 12
        stub.assert_no_pending_responses()


def test_a_failed_change_leaves_the_visibility_timeout_and_raises_nothing() -> None:
    sqs = _client()
    with Stubber(sqs) as stub:
        stub.add_client_error("change_message_visibility_batch", "AWS.SimpleQueueService.NonExistentQueue", http_status_code=400)
        assert shorten_visibility(sqs, QUEUE_URL, ["receipt-0"], 20) == 0


def _load_handler() -> Any:
    path = Path(__file__).resolve().parents[2] / "functions" / "termination" / "handler.py"
    spec = importlib.util.spec_from_file_location("termination_handler_visibility", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class _Settings:
    work_queue_url = QUEUE_URL


class _Runtime:
    def __init__(self, sqs: Any) -> None:
        self.settings = _Settings()
        self.sqs = sqs

    def aws_client(self, service: str) -> Any:
        assert service == "sqs"
        return self.sqs


@pytest.mark.parametrize("records", [[{"receiptHandle": "a"}, {"receiptHandle": "b"}]])
def test_the_handler_shortens_the_whole_batch_before_the_first_step(records: list[dict[str, Any]]) -> None:
    module = _load_handler()
    sqs = _client()
    with Stubber(sqs) as stub:
        entries = [
            {"Id": "0", "ReceiptHandle": "a", "VisibilityTimeout": RECEIVED_VISIBILITY_SECONDS},
            {"Id": "1", "ReceiptHandle": "b", "VisibilityTimeout": RECEIVED_VISIBILITY_SECONDS},
        ]
        stub.add_response(
            "change_message_visibility_batch", {"Successful": [{"Id": "0"}, {"Id": "1"}], "Failed": []}, {"QueueUrl": QUEUE_URL, "Entries": entries}
        )
        module._shorten_visibility(_Runtime(sqs), {"Records": records})
        stub.assert_no_pending_responses()


@given(st.one_of(st.integers(-(2**63), 2**63), st.none(), st.text(max_size=5), st.sampled_from(["1", "2", "24", "25", "0", "-3", "1e9"])))
def test_every_receive_count_gets_a_visibility_between_the_window_and_the_cap(count: object) -> None:
    seconds = received_visibility(count if not isinstance(count, int) else str(count))
    assert RECEIVED_VISIBILITY_SECONDS <= seconds <= RECEIVED_VISIBILITY_CAP_SECONDS
    assert received_visibility(count if not isinstance(count, int) else str(count)) == seconds


@given(st.integers(1, 10**6))
def test_the_visibility_never_shrinks_as_receives_add_up(count: int) -> None:
    assert received_visibility(count) <= received_visibility(count + 1)


def test_the_first_receives_keep_a_death_cheap() -> None:
    assert received_visibility(1) == received_visibility(2) == RECEIVED_VISIBILITY_SECONDS
    assert received_visibility(WORK_MAX_RECEIVES) == RECEIVED_VISIBILITY_CAP_SECONDS


@given(
    first=st.integers(1, SPARE_RECEIVES + 1),
    outage_seconds=st.integers(0, int(OUTAGE_BUDGET.total_seconds())),
    started=st.integers(0, RECEIVED_VISIBILITY_CAP_SECONDS),
)
def test_a_continuation_failing_through_any_outage_within_the_budget_is_received_after_it(first: int, outage_seconds: int, started: int) -> None:
    """A message that already spent up to SPARE_RECEIVES receives (deaths, duplicates) meets
    an outage of at most OUTAGE_BUDGET that began up to one capped visibility before its
    next receive: failing on every receive during the outage, it is received again once the
    outage is over, before SQS dead-letters it (on the receive after WORK_MAX_RECEIVES)."""
    assert redelivery_budget(first) > OUTAGE_BUDGET
    ends = -started + outage_seconds  # the outage's end, from the message's next receive
    at = 0
    for receive in range(first, WORK_MAX_RECEIVES + 1):
        if at >= ends:
            return  # received after the outage: the step runs
        at += received_visibility(receive)  # failed: back after its visibility
    raise AssertionError(f"dead-lettered {at} s after the receive {first}, the outage lasting {outage_seconds} s")


def test_the_budget_is_the_sum_of_the_visibilities_and_the_queue_redrives_after_them() -> None:
    assert redelivery_budget() == timedelta(seconds=sum(received_visibility(n) for n in range(1, WORK_MAX_RECEIVES + 1)))
    assert redelivery_budget(first=SPARE_RECEIVES + 1) > OUTAGE_BUDGET


def test_the_handler_sets_each_records_visibility_by_its_receive_count() -> None:
    module = _load_handler()
    sqs = _client()
    records = [
        {"receiptHandle": "a", "attributes": {"ApproximateReceiveCount": "1"}},
        {"receiptHandle": "b", "attributes": {"ApproximateReceiveCount": "4"}},
        {"receiptHandle": "c", "attributes": {"ApproximateReceiveCount": "17"}},
        {"receiptHandle": "d", "attributes": {"ApproximateReceiveCount": "garbage"}},
    ]
    with Stubber(sqs) as stub:
        entries = [
            {"Id": "0", "ReceiptHandle": "a", "VisibilityTimeout": 20},
            {"Id": "1", "ReceiptHandle": "b", "VisibilityTimeout": 80},
            {"Id": "2", "ReceiptHandle": "c", "VisibilityTimeout": 120},
            {"Id": "3", "ReceiptHandle": "d", "VisibilityTimeout": 20},
        ]
        stub.add_response(
            "change_message_visibility_batch", {"Successful": [{"Id": e["Id"]} for e in entries], "Failed": []}, {"QueueUrl": QUEUE_URL, "Entries": entries}
        )
        module._shorten_visibility(_Runtime(sqs), {"Records": records})
        stub.assert_no_pending_responses()
