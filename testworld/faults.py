"""EC2 failures moto cannot produce, injected with botocore event hooks on the client a
caller uses (shared by ``joiner simulate``'s ``capacityError`` events and the tests).

:class:`CapacityInjector` turns chosen (instance type, zone, capacity type) overrides of a
``CreateFleet`` into capacity errors, as EC2 reports them: before the call the failing
overrides are removed from the serialized request (EC2 skips offerings without capacity and
tries the next override of the same call) and after it one error per failing override is
added to the response's ``Errors``. When no override is left, the call is answered without
reaching moto: no instance, only errors.

Development-only (imports moto's response helper).
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse
from moto.core.botocore_stubber import MockRawResponse

__all__ = ["CAPACITY_ERROR", "CAPACITY_MESSAGE", "CapacityInjector", "FleetFailure", "aws_response", "inject_capacity_errors"]

CAPACITY_ERROR = "InsufficientInstanceCapacity"
CAPACITY_MESSAGE = "We currently do not have sufficient capacity in the Availability Zone you requested."
_OVERRIDES = "LaunchTemplateConfigs.1.Overrides."
_TEMPLATE = "LaunchTemplateConfigs.1.LaunchTemplateSpecification."


def aws_response(status: int, body: str) -> AWSResponse:
    """A raw HTTP response as botocore would have received it."""
    # botocore's stub asks for HTTPHeaders; AWSResponse wraps any mapping in a HeadersDict.
    return AWSResponse("https://ec2.amazonaws.com/", status, {"Content-Type": "text/xml"}, MockRawResponse(body))  # type: ignore[arg-type]


def _fleet_overrides(body: Mapping[str, Any]) -> list[dict[str, str]]:
    indexes = sorted({int(key[len(_OVERRIDES) :].split(".", 1)[0]) for key in body if key.startswith(_OVERRIDES)})
    return [{name[len(f"{_OVERRIDES}{index}.") :]: value for name, value in body.items() if name.startswith(f"{_OVERRIDES}{index}.")} for index in indexes]


@dataclass(frozen=True)
class FleetFailure:
    """One override of one CreateFleet call that was answered with a capacity error."""

    instance_type: str
    zone: str
    capacity_type: str
    code: str


@dataclass
class CapacityInjector:
    """Capacity errors for the overrides ``failing(instance_type, zone, capacity_type)`` picks.

    ``calls`` counts the CreateFleet calls seen, ``failures`` every override failed (in order),
    ``on_failure`` (optional) is told about each as it happens. Safe for clients used from
    several threads (the scanner launches claims in parallel): what the response must carry
    is kept per thread between ``before-call`` and ``after-call``.
    """

    failing: Callable[[str, str, str], bool]
    code: str = CAPACITY_ERROR
    message: str = CAPACITY_MESSAGE
    on_failure: Callable[[FleetFailure], None] | None = None
    calls: int = 0
    failures: list[FleetFailure] = field(default_factory=list)
    _pending: dict[int, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def before_call(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        with self._lock:
            self.calls += 1
        body = params["body"]
        if isinstance(body, (str, bytes)):
            body = dict(urllib.parse.parse_qsl(body.decode() if isinstance(body, bytes) else body))
        overrides = _fleet_overrides(body)
        lifecycle = body.get("TargetCapacitySpecification.DefaultTargetCapacityType", "on-demand")
        template = {k[len(_TEMPLATE) :]: v for k, v in body.items() if k.startswith(_TEMPLATE)}
        kept: list[dict[str, str]] = []
        failed: list[dict[str, str]] = []
        for override in overrides:
            fails = self.failing(override["InstanceType"], override.get("AvailabilityZone", ""), lifecycle)
            (failed if fails else kept).append(override)
        errors = [
            {
                "LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": template, "Overrides": override},
                "Lifecycle": lifecycle,
                "ErrorCode": self.code,
                "ErrorMessage": self.message,
            }
            for override in failed
        ]
        for override in failed:
            failure = FleetFailure(override["InstanceType"], override.get("AvailabilityZone", ""), lifecycle, self.code)
            with self._lock:
                self.failures.append(failure)
            if self.on_failure is not None:
                self.on_failure(failure)
        for key in [k for k in body if k.startswith(_OVERRIDES)]:
            del body[key]
        for index, override in enumerate(kept, start=1):
            for name, value in override.items():
                body[f"{_OVERRIDES}{index}.{name}"] = value
        params["body"] = body
        if kept:
            with self._lock:
                self._pending[threading.get_ident()] = errors
            return None
        return aws_response(200, ""), {"FleetId": "fleet-injected", "Instances": [], "Errors": errors}

    def after_call(self, parsed: dict[str, Any], **_: Any) -> None:
        with self._lock:
            errors = self._pending.pop(threading.get_ident(), None)
        if errors:
            parsed.setdefault("Errors", []).extend(errors)


def inject_capacity_errors(
    ec2: Any,
    failing: Callable[[str, str, str], bool],
    code: str = CAPACITY_ERROR,
    *,
    injector: CapacityInjector | None = None,
) -> CapacityInjector:
    """Register an injector (a new one, or ``injector`` shared between clients) on this EC2
    client's ``CreateFleet``; ``failing(instance_type, zone, capacity_type)``."""
    injector = injector or CapacityInjector(failing=failing, code=code)
    ec2.meta.events.register_first("before-call.ec2.CreateFleet", injector.before_call)
    ec2.meta.events.register("after-call.ec2.CreateFleet", injector.after_call)
    return injector
