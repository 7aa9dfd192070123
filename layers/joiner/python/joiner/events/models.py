"""Powertools parser (pydantic) models for the EventBridge events Joiner consumes, one per
(source, detail-type). Shapes follow the AWS EventBridge schemas ``aws.ec2`` and
``aws.health``; unknown extra fields are ignored so new fields AWS adds do not break us.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import BaseModel, Field, field_validator
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import ConfigDict

__all__ = [
    "EventHeader",
    "InstanceDetail",
    "SpotInterruptionDetail",
    "StateChangeDetail",
    "CapacityReservationInterruptionDetail",
    "CapacityBlockExpirationDetail",
    "AffectedEntity",
    "HealthDetail",
    "SpotInterruptionEvent",
    "RebalanceRecommendationEvent",
    "StateChangeEvent",
    "CapacityReservationInterruptionEvent",
    "CapacityBlockExpirationEvent",
    "HealthEvent",
    "SPOT_INTERRUPTION_TYPE",
    "REBALANCE_TYPE",
    "STATE_CHANGE_TYPE",
    "CAPACITY_RESERVATION_TYPE",
    "CAPACITY_BLOCK_TYPES",
    "HEALTH_TYPE",
]

SPOT_INTERRUPTION_TYPE = ("aws.ec2", "EC2 Spot Instance Interruption Warning")
REBALANCE_TYPE = ("aws.ec2", "EC2 Instance Rebalance Recommendation")
STATE_CHANGE_TYPE = ("aws.ec2", "EC2 Instance State-change Notification")
CAPACITY_RESERVATION_TYPE = ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning")
#: AWS documents the Capacity Block expiration warning under both names (the EC2 user guide's
#: sample, the EventBridge event reference): both are accepted.
CAPACITY_BLOCK_TYPES = (
    ("aws.ec2", "Capacity Block Reservation Expiration Warning"),
    ("aws.ec2", "Capacity Block Expiration Warning"),
)
HEALTH_TYPE = ("aws.health", "AWS Health Event")


class EventHeader(BaseModel):
    """Just enough of an EventBridge event to pick the right model."""

    model_config = ConfigDict(populate_by_name=True)

    id: str = Field(min_length=1)
    source: str
    detail_type: str = Field(alias="detail-type")


class _Lenient(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class InstanceDetail(_Lenient):
    instance_id: str = Field(alias="instance-id", min_length=1)


class SpotInterruptionDetail(InstanceDetail):
    instance_action: str = Field(default="terminate", alias="instance-action")


class StateChangeDetail(InstanceDetail):
    state: str = Field(min_length=1)


class CapacityReservationInterruptionDetail(InstanceDetail):
    instance_action: str = Field(default="terminate", alias="instance-action")
    instance_termination_time: str | None = Field(default=None, alias="instance-termination-time")


class CapacityBlockExpirationDetail(_Lenient):
    """Names the reservation (``cr-...``), not instances; ``end-date`` is when the block ends.
    The id may instead come from the event's ``resources`` (the reservation's ARN)."""

    capacity_reservation_id: str | None = Field(default=None, alias="capacity-reservation-id")
    end_date: str | None = Field(default=None, alias="end-date")


class AffectedEntity(_Lenient):
    entity_value: str = Field(alias="entityValue")


class HealthDetail(_Lenient):
    event_arn: str = Field(default="", alias="eventArn")
    service: str
    event_type_code: str = Field(default="", alias="eventTypeCode")
    event_type_category: str = Field(alias="eventTypeCategory")
    start_time: str | None = Field(default=None, alias="startTime")
    end_time: str | None = Field(default=None, alias="endTime")
    status_code: str | None = Field(default=None, alias="statusCode")
    affected_entities: list[AffectedEntity] = Field(default_factory=list, alias="affectedEntities")


class _Event(EventBridgeModel):
    """EventBridge envelope fields. Lenient where Joiner does not depend on a field:
    ``resources`` may be absent or a lone string (as some AWS samples show), ``account``
    and ``version`` may be absent (local emulators omit them)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    version: str = "0"
    account: str = ""
    resources: list[str] = Field(default_factory=list)

    @field_validator("resources", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        if value is None:
            return []
        return [value] if isinstance(value, str) else value


class SpotInterruptionEvent(_Event):
    detail: SpotInterruptionDetail


class RebalanceRecommendationEvent(_Event):
    detail: InstanceDetail


class StateChangeEvent(_Event):
    detail: StateChangeDetail


class CapacityReservationInterruptionEvent(_Event):
    detail: CapacityReservationInterruptionDetail


class CapacityBlockExpirationEvent(_Event):
    detail: CapacityBlockExpirationDetail


class HealthEvent(_Event):
    detail: HealthDetail
