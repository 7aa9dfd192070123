"""The payload contract and cold-start runtime every scheduled function shares."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from joiner.events.scheduled import ColdStart, ScheduledEventError, manual_run_fields

SCHEDULED = {
    "version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa", "detail-type": "Scheduled Event", "source": "aws.events",
    "account": "123456789012", "time": "2025-01-06T09:00:00Z", "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/joiner-scanner"], "detail": {},
}


class Special(ScheduledEventError):
    pass


def test_scheduled_event_and_empty_payloads_are_plain_runs() -> None:
    assert manual_run_fields(SCHEDULED, "f", ("mode",)) == {}
    assert manual_run_fields({}, "f") == {} and manual_run_fields(None, "f") == {}


def test_manual_fields_are_returned_for_the_caller_to_check() -> None:
    assert manual_run_fields({"mode": "anything"}, "f", ("mode",)) == {"mode": "anything"}


@pytest.mark.parametrize(
    ("event", "accepted", "message"),
    [
        ({**SCHEDULED, "detail-type": "AWS Health Event"}, (), "f: expected detail-type 'Scheduled Event', got 'AWS Health Event'"),
        ({**SCHEDULED, "time": "yesterday"}, (), "f: malformed EventBridge event: time"),
        ({"mode": "x", "extra": 1}, ("mode",), "f: unknown field(s) extra (a manual run takes only 'mode')"),
        ({"extra": 1}, (), "f: unknown field(s) extra (a manual run takes {})"),
        ("text", (), "f: expected a JSON object, got str"),
    ],
)
def test_anything_else_is_rejected_with_the_functions_own_error(event: object, accepted: tuple[str, ...], message: str) -> None:
    with pytest.raises(Special) as raised:
        manual_run_fields(event, "f", accepted, Special)
    assert str(raised.value).startswith(message)


def test_cold_start_keeps_one_runtime_and_hands_it_to_each_request() -> None:
    cold = ColdStart()
    runtime = SimpleNamespace(invocation_id="local")
    assert cold.configure(runtime) is runtime
    assert cold.runtime(SimpleNamespace(aws_request_id="r-1")) is runtime and runtime.invocation_id == "r-1"
    assert cold.runtime(None) is runtime and runtime.invocation_id == "r-1"
    cold.reset()
    other = SimpleNamespace(invocation_id="local")
    cold.configure(other)
    assert cold.runtime() is other
