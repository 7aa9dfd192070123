"""Shared fixtures for the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.kube_fixtures import kube_client, kube_emulator, kube_sleeps  # noqa: F401


@pytest.fixture(scope="module")
def aws_base() -> Iterator[Any]:
    """A moto server answering one request at a time, with the network, AMI parameters and EKS
    cluster every :class:`tests.events.world.World` of the module shares."""
    from tests.events.world import AwsBase
    from tests.support.aws import SerialMotoServer, fake_credentials

    with fake_credentials():
        server = SerialMotoServer()
        server.start()
        try:
            yield AwsBase(server)
        finally:
            server.stop()
