"""moto fixtures for the AWS adapters: network, EKS cluster, AMI parameters, state table, queue,
an HTTP moto server that serialises requests (all from :mod:`joiner.local.aws`, shared with
``joiner demo``), and botocore hooks that inject EC2 failures moto cannot produce (capacity
errors, throttling).

Use inside ``moto.mock_aws()`` (in-process) or against :class:`SerialMotoServer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse

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
from joiner.local.faults import CapacityInjector, aws_response  # noqa: F401  (re-exported for the tests)
from joiner.local.faults import inject_capacity_errors as _inject

# ---------------------------------------------------------------- failure injection


_aws_response = aws_response


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


def inject_capacity_errors(ec2: Any, failing: Callable[[str, str], bool], code: str = "InsufficientInstanceCapacity") -> CapacityInjector:
    """Capacity errors on this client's CreateFleet for the (instance type, zone) overrides
    ``failing`` picks, whatever the capacity type (see :class:`joiner.local.faults.CapacityInjector`)."""
    return _inject(ec2, lambda instance_type, zone, _capacity_type: failing(instance_type, zone), code)
