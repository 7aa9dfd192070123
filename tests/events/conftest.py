"""The end-to-end event world every test module here shares: moto over HTTP, the Kubernetes
emulator, SQS on the test's clock and a default NodePool."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.events.world import AwsBase, SqsTime, World
from testworld.aws import fake_credentials
from testworld.kube_emulator import KubeEmulator


@pytest.fixture
def world(aws_base: AwsBase, kube_emulator: KubeEmulator) -> Iterator[World]:
    with fake_credentials(), SqsTime() as sqs_time:
        built = World(aws_base, kube_emulator, sqs_time)
        built.node_pool()
        try:
            yield built
        finally:
            built.close()
