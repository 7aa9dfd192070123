"""The payload contract and cold-start runtime every scheduled function shares."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joiner.events.scheduled import (
    ColdStart,
    ScheduledEventError,
    envelope_problems,
    manual_run_fields,
)

SCHEDULED = {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2025-01-06T09:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/joiner-scanner"],
    "detail": {},
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


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"detail": None}, "detail: must be an object"),
        ({"resources": "arn"}, "resources: must be a list of strings"),
        ({"account": 123456789012}, "account: must be a string"),
        ({"time": "2025-01-06"}, "time: not an RFC 3339 date-time"),
        ({"time": "2025-13-06T09:00:00Z"}, "time: not an RFC 3339 date-time"),
    ],
)
def test_the_envelope_is_checked_field_by_field(change: dict[str, object], problem: str) -> None:
    with pytest.raises(ScheduledEventError, match=f"^f: malformed EventBridge event: {problem}"):
        manual_run_fields({**SCHEDULED, **change}, "f")
    missing = {key: value for key, value in SCHEDULED.items() if key != "region"}
    with pytest.raises(ScheduledEventError, match="^f: malformed EventBridge event: region: field required$"):
        manual_run_fields(missing, "f")


_field_values = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=12),
    st.lists(st.text(max_size=5), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["2025-01-06T09:00:00Z", "2025-01-06T09:00:00.5+02:00", "2025-01-06", "Scheduled Event"]),
)


@settings(max_examples=300, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(sorted(SCHEDULED)), _field_values, max_size=4), dropped=st.sets(st.sampled_from(sorted(SCHEDULED)), max_size=2))
def test_the_envelope_check_accepts_only_what_the_powertools_model_accepts(changes: dict[str, object], dropped: set[str]) -> None:
    """The hand-written check (no pydantic at cold start) is never laxer than powertools'
    ``EventBridgeModel``: whatever it accepts, the model parses to the same detail-type."""
    from aws_lambda_powertools.utilities.parser import ValidationError, parse
    from aws_lambda_powertools.utilities.parser.models import EventBridgeModel

    event = {key: value for key, value in {**SCHEDULED, **changes}.items() if key not in dropped}
    if envelope_problems(event):
        return
    try:
        parsed = parse(event=event, model=EventBridgeModel)
    except ValidationError as invalid:
        raise AssertionError(f"accepted what the model rejects: {event!r}: {invalid}") from None
    assert parsed.detail_type == event["detail-type"]
