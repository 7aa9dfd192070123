"""Load the real-shaped EventBridge fixtures in this directory, re-targeted at test instances.

Every fixture names instance ``i-0b662ef9931388ba0`` (bare or inside an ARN);
``load_event`` swaps in the instance ids a test launched and, optionally, a fresh event id
and time, so one fixture drives many tests.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from joiner.events import parse_time

FIXTURE_DIR = Path(__file__).parent
FIXTURE_INSTANCE = "i-0b662ef9931388ba0"
#: The reservation ``capacity_block_expiration.json`` names (it names no instance).
FIXTURE_RESERVATION = "cr-0a1b2c3d4e5f60718"

#: fixture file -> expected normalised kind
KINDS = {
    "spot_interruption.json": "spot-interruption",
    "rebalance_recommendation.json": "rebalance-recommendation",
    "state_change_stopping.json": "state-change",
    "state_change_stopped.json": "state-change",
    "state_change_shutting_down.json": "state-change",
    "state_change_terminated.json": "state-change",
    "state_change_running.json": "noop",
    "capacity_reservation_interruption.json": "capacity-reservation-interruption",
    "capacity_block_expiration.json": "capacity-block-expiration",
    "health_scheduled_change.json": "scheduled-change",
    "health_scheduled_change_arn.json": "scheduled-change",
}


#: Times inside ``detail`` that move with the event time (kept at the same distance from it).
DETAIL_TIMES = ("startTime", "endTime", "lastUpdatedTime", "instance-termination-time", "end-date")


def load_event(name: str, *, instance_id: str | None = None, event_id: str | None = None, time: datetime | None = None) -> dict[str, Any]:
    """The fixture as a dict; ``event_id="new"`` draws a fresh uuid. With ``time`` the event
    is moved to that time, its detail times (Health ``startTime``...) by the same amount."""
    text = (FIXTURE_DIR / name).read_text(encoding="utf-8")
    if instance_id:
        text = text.replace(FIXTURE_INSTANCE, instance_id)
    event = json.loads(text)
    if event_id:
        event["id"] = str(uuid.uuid4()) if event_id == "new" else event_id
    if time is not None:
        shift = time - parse_time(event["time"], where="time")
        event["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ")
        for key in DETAIL_TIMES:
            if isinstance(event["detail"].get(key), str):
                moved = parse_time(event["detail"][key], where=key) + shift
                event["detail"][key] = moved.strftime("%Y-%m-%dT%H:%M:%SZ")
    return event
