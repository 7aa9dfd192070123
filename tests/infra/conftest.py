"""Synthesize the Joiner app once per test session (a few seconds) for all infra tests.

Layer bundling is skipped (``aws:cdk:bundling-stacks=[]``): synth stays offline, and the
bundler has its own tests. cdk-nag runs as part of every synth: a synth that returns
passed AwsSolutions with no unacknowledged finding.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from infra import use_bundled_node

use_bundled_node()

CLUSTER = "demo"
#: The private variant's customer-managed EBS key (its launches encrypt volumes with it).
EBS_KEY = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@dataclass(frozen=True)
class Synthesized:
    template: dict[str, Any]
    template_path: Path
    seconds: float
    nag_violations: list[dict[str, Any]]

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {key: value for key, value in self.template["Resources"].items() if value["Type"] == resource_type}


def synthesize(context: dict[str, Any], outdir: Path) -> Synthesized:
    from infra.synth import SKIP_BUNDLING, build_app

    started = time.monotonic()
    app = build_app({**context, **SKIP_BUNDLING}, outdir=str(outdir))
    assembly = app.synth()
    (stack,) = assembly.stacks
    path = Path(assembly.directory) / stack.template_file
    report_path = Path(assembly.directory) / "validation-report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {"pluginReports": []}
    violations = [violation for plugin in report["pluginReports"] for violation in plugin.get("violations", [])]
    return Synthesized(json.loads(path.read_text()), path, time.monotonic() - started, violations)


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default deployment: public functions, created node role, access entries, new topic."""
    return synthesize({"clusterName": CLUSTER}, tmp_path_factory.mktemp("cdk-default"))


@pytest.fixture(scope="session")
def synthesized_private(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """A private cluster: functions in a VPC, an existing node role and alarm topic, no access entries."""
    return synthesize(
        {
            "clusterName": "private-cluster",
            "region": "eu-west-1",
            "vpcId": "vpc-0123456789abcdef0",
            "vpcEndpoints": "existing",
            "subnetIds": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
            "scannerMode": "economy",
            "logRetentionDays": "14",
            "alarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:ops-alarms",
            "nodeRoleArn": "arn:aws:iam::123456789012:role/eks/MyNodeRole",
            "ebsKmsKeyArn": EBS_KEY,
            "createAccessEntry": "false",
            "pendingPodAgeAlarmSeconds": "900",
            "capacityErrorsAlarmThreshold": 25,
            "interruptionQueueAgeAlarmSeconds": "45",
            "dashboardName": "platform-private",
            "logLevel": "debug",
            "readKarpenterCrds": "true",
        },
        tmp_path_factory.mktemp("cdk-private"),
    )
