"""moto fixtures for the AWS adapters: network, EKS cluster, AMI parameters, state table, queue,
an HTTP moto server that serialises requests (all from :mod:`joiner.local.aws`, shared with
``joiner demo``), and botocore hooks that inject EC2 failures moto cannot produce (capacity
errors, throttling).

Use inside ``moto.mock_aws()`` (in-process) or against :class:`SerialMotoServer`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse
from moto.core.botocore_stubber import MockRawResponse

from joiner.local.aws import (  # noqa: F401  (re-exported for the tests)
    K8S_VERSION,
    REGION,
    ZONES,
    Network,
    SerialMotoServer,
    create_eks_cluster,
    create_network,
    create_state_table,
    create_work_queue,
    fake_credentials,
    moto_amis,
    put_eks_ami_parameters,
    put_public_parameter,
)


# ---------------------------------------------------------------- failure injection


def _aws_response(status: int, body: str) -> AWSResponse:
    return AWSResponse("https://ec2.amazonaws.com/", status, {"Content-Type": "text/xml"}, MockRawResponse(body))


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
        body = (
            f"<Response><Errors><Error><Code>{self.code}</Code><Message>{self.message}</Message></Error></Errors>"
            "<RequestID>injected</RequestID></Response>"
        )
        return _aws_response(self.status, body)


def inject_error(client: Any, operation: str, injector: ErrorInjector) -> ErrorInjector:
    """Register ``injector`` for ``operation`` (e.g. ``CreateFleet``) on this client only."""
    service = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register_first(f"before-send.{service}.{operation}", injector)
    return injector


def _fleet_overrides(body: Mapping[str, Any]) -> list[dict[str, str]]:
    prefix = "LaunchTemplateConfigs.1.Overrides."
    indexes = sorted({int(key[len(prefix):].split(".", 1)[0]) for key in body if key.startswith(prefix)})
    return [
        {name[len(f"{prefix}{index}."):]: value for name, value in body.items() if name.startswith(f"{prefix}{index}.")}
        for index in indexes
    ]


@dataclass
class CapacityInjector:
    """EC2 capacity errors for chosen (instance type, zone) overrides of CreateFleet.

    Before the call, the failing overrides are removed from the serialized request (as EC2
    skips offerings without capacity) and remembered; after it, one error per failing override
    is added to the response's ``Errors``. When no override is left, the call is answered
    without reaching moto: no instance, only errors.
    """

    failing: Callable[[str, str], bool]
    code: str = "InsufficientInstanceCapacity"
    message: str = "We currently do not have sufficient capacity in the Availability Zone you requested."
    calls: int = 0
    _pending: list[dict[str, Any]] = field(default_factory=list)

    def before_call(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        self.calls += 1
        body = params["body"]
        if isinstance(body, (str, bytes)):
            body = dict(urllib.parse.parse_qsl(body.decode() if isinstance(body, bytes) else body))
        overrides = _fleet_overrides(body)
        lifecycle = body.get("TargetCapacitySpecification.DefaultTargetCapacityType", "on-demand")
        template = {k.split("LaunchTemplateConfigs.1.LaunchTemplateSpecification.", 1)[1]: v for k, v in body.items()
                    if k.startswith("LaunchTemplateConfigs.1.LaunchTemplateSpecification.")}
        kept, failed = [], []
        for override in overrides:
            (failed if self.failing(override["InstanceType"], override.get("AvailabilityZone", "")) else kept).append(override)
        self._pending = [
            {
                "LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": template, "Overrides": override},
                "Lifecycle": lifecycle,
                "ErrorCode": self.code,
                "ErrorMessage": self.message,
            }
            for override in failed
        ]
        for key in [k for k in body if k.startswith("LaunchTemplateConfigs.1.Overrides.")]:
            del body[key]
        for index, override in enumerate(kept, start=1):
            for name, value in override.items():
                body[f"LaunchTemplateConfigs.1.Overrides.{index}.{name}"] = value
        params["body"] = body
        if kept:
            return None
        parsed = {"FleetId": "fleet-injected", "Instances": [], "Errors": self._pending}
        self._pending = []
        return _aws_response(200, ""), parsed

    def after_call(self, parsed: dict[str, Any], **_: Any) -> None:
        if self._pending:
            parsed.setdefault("Errors", []).extend(self._pending)
            self._pending = []


def inject_capacity_errors(ec2: Any, failing: Callable[[str, str], bool], code: str = "InsufficientInstanceCapacity") -> CapacityInjector:
    injector = CapacityInjector(failing=failing, code=code)
    ec2.meta.events.register_first("before-call.ec2.CreateFleet", injector.before_call)
    ec2.meta.events.register("after-call.ec2.CreateFleet", injector.after_call)
    return injector
