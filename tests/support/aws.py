"""botocore hooks for the AWS adapters' tests that inject what moto cannot produce: errors on
any operation (throttling), capacity errors on CreateFleet, DescribeCapacityReservations.
The moto fixtures themselves (network, EKS cluster, AMI parameters, state table, queues, a
serial moto server) are :mod:`testworld.aws`.

Use inside ``moto.mock_aws()`` (in-process) or against :class:`testworld.aws.SerialMotoServer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse

from testworld.faults import CapacityInjector, aws_response
from testworld.faults import inject_capacity_errors as _inject

# ---------------------------------------------------------------- failure injection


@dataclass
class ErrorInjector:
    """Makes every HTTP attempt of one operation fail with an AWS error (before moto sees it).

    Registered on ``before-send``, which fires once per attempt, so botocore's retry logic runs
    exactly as against AWS. ``attempts`` counts the attempts seen; ``failures`` limits how many
    attempts fail (None: all).
    """

    code: str = "RequestLimitExceeded"
    message: str = "Request limit exceeded."
    status: int = 503
    failures: int | None = None
    attempts: int = 0

    def __call__(self, request: Any = None, **_: Any) -> AWSResponse | None:
        self.attempts += 1
        if self.failures is not None and self.attempts > self.failures:
            return None
        body = f"<Response><Errors><Error><Code>{self.code}</Code><Message>{self.message}</Message></Error></Errors><RequestID>injected</RequestID></Response>"
        return aws_response(self.status, body)


def inject_error(client: Any, operation: str, injector: ErrorInjector) -> ErrorInjector:
    """Register ``injector`` for ``operation`` (e.g. ``CreateFleet``) on this client only."""
    service = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register_first(f"before-send.{service}.{operation}", injector)
    return injector


def inject_capacity_errors(ec2: Any, failing: Callable[[str, str], bool], code: str = "InsufficientInstanceCapacity") -> CapacityInjector:
    """Capacity errors on this client's CreateFleet for the (instance type, zone) overrides
    ``failing`` picks, whatever the capacity type (see :class:`testworld.faults.CapacityInjector`)."""
    return _inject(ec2, lambda instance_type, zone, _capacity_type: failing(instance_type, zone), code)


@dataclass(frozen=True)
class FakeReservation:
    """One capacity reservation :class:`CapacityReservationApi` serves."""

    id: str
    instance_type: str
    zone: str
    available: int
    tags: tuple[tuple[str, str], ...] = ()
    owner: str = "123456789012"
    state: str = "active"
    match_criteria: str = "targeted"


class CapacityReservationApi:
    """EC2's DescribeCapacityReservations, which moto lacks, answered on ``before-call`` (after
    every other hook, the IAM guard's included, has seen the call) with what EC2 returns,
    honouring what EC2 filters on: ``CapacityReservationIds``, ``state``, ``owner-id``,
    ``tag:<key>``, ``tag-key``. ``requests`` keeps every request's (flattened) parameters."""

    def __init__(self, reservations: list[FakeReservation]) -> None:
        self.reservations = reservations
        self.requests: list[dict[str, str]] = []

    def register(self, client: Any) -> CapacityReservationApi:
        client.meta.events.register("before-call.ec2.DescribeCapacityReservations", self)
        return self

    def __call__(self, params: Any = None, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        body = (params or {}).get("body") or {}
        flat = {str(k): str(v) for k, v in body.items()} if isinstance(body, dict) else {}
        self.requests.append(flat)
        ids = {v for k, v in flat.items() if k.startswith("CapacityReservationId.")}
        filters: dict[str, set[str]] = {}
        for key, name in flat.items():
            if key.startswith("Filter.") and key.endswith(".Name"):
                prefix = key[: -len("Name")]
                filters[name] = {v for k, v in flat.items() if k.startswith(f"{prefix}Value.")}
        items = []
        for r in self.reservations:
            tags = dict(r.tags)
            if ids and r.id not in ids:
                continue
            if "state" in filters and r.state not in filters["state"]:
                continue
            if "owner-id" in filters and r.owner not in filters["owner-id"]:
                continue
            if "tag-key" in filters and not filters["tag-key"] & set(tags):
                continue
            if any(name.startswith("tag:") and tags.get(name[4:]) not in values for name, values in filters.items()):
                continue
            items.append(
                {
                    "CapacityReservationId": r.id,
                    "OwnerId": r.owner,
                    "InstanceType": r.instance_type,
                    "AvailabilityZone": r.zone,
                    "AvailableInstanceCount": r.available,
                    "State": r.state,
                    "InstanceMatchCriteria": r.match_criteria,
                    "ReservationType": "default",
                    "Tags": [{"Key": k, "Value": v} for k, v in r.tags],
                }
            )
        return aws_response(200, ""), {"CapacityReservations": items, "ResponseMetadata": {"HTTPStatusCode": 200}}
