"""Hypothesis strategies for hostile interruption-queue message bodies."""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import strategies as st

from tests.events.fixtures import KINDS, load_event

_JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
_JSON = st.recursive(_JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
_TIMES = st.datetimes(timezones=st.timezones()).map(lambda moment: moment.isoformat()) | st.sampled_from(
    [
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:59:59-01:00",
        "0001-01-01T00:00:00+01:00",
        "Fri, 31 Dec 9999 23:59:59 -0100",
        "2025-01-06T09:00:00Z",
        "",
        "Z",
        "+00:00",
    ]
)
_FIELDS = ("id", "source", "detail-type", "time", "resources", "detail")
_DETAIL_FIELDS = (
    "instance-id",
    "instance-action",
    "state",
    "startTime",
    "endTime",
    "instance-termination-time",
    "service",
    "eventTypeCategory",
    "statusCode",
    "affectedEntities",
)


@st.composite
def event_bodies(draw: st.DrawFn) -> str:
    """Fixture events with fields replaced by random JSON or extreme times, random JSON,
    deep nesting, huge numbers, and arbitrary text."""
    choice = draw(st.integers(0, 4))
    if choice == 0:
        return draw(st.text(max_size=200))
    if choice == 1:
        return json.dumps(draw(_JSON))
    if choice == 2:
        depth = draw(st.integers(1, 6000))
        return draw(st.sampled_from(["[", '{"a":'])) * depth
    event: dict[str, Any] = load_event(draw(st.sampled_from(sorted(KINDS))), instance_id=f"i-{uuid.uuid4().hex[:17]}", event_id="new")
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            event[draw(st.sampled_from(_FIELDS))] = draw(_TIMES | _JSON)
        elif isinstance(event.get("detail"), dict):
            event["detail"][draw(st.sampled_from(_DETAIL_FIELDS))] = draw(_TIMES | _JSON | st.integers(min_value=10**18, max_value=10**400))
    text = json.dumps(event)
    if choice == 4 and draw(st.booleans()):
        text = text.replace("}", "]", 1)
    return text
