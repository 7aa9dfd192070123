"""The termination handler makes its received batch visible again 20 s later, so a death
before a step's safety continuation costs seconds, not the queue's 66 s visibility timeout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from joiner.adapters.queue import shorten_visibility
from joiner.services.termination import RECEIVED_VISIBILITY_SECONDS, SAFETY_DELAY_SECONDS

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
            stub.add_response("change_message_visibility_batch", {"Successful": [{"Id": e["Id"]} for e in entries], "Failed": []},
                              {"QueueUrl": QUEUE_URL, "Entries": entries})
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
        entries = [{"Id": "0", "ReceiptHandle": "a", "VisibilityTimeout": RECEIVED_VISIBILITY_SECONDS},
                   {"Id": "1", "ReceiptHandle": "b", "VisibilityTimeout": RECEIVED_VISIBILITY_SECONDS}]
        stub.add_response("change_message_visibility_batch", {"Successful": [{"Id": "0"}, {"Id": "1"}], "Failed": []},
                          {"QueueUrl": QUEUE_URL, "Entries": entries})
        module._shorten_visibility(_Runtime(sqs), {"Records": records})
        stub.assert_no_pending_responses()
