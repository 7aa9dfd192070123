"""pytest fixtures for the Kubernetes emulator and the adapter pointed at it.

``kube_emulator`` serves a fresh, empty API per test; ``kube_client`` is a
:class:`~joiner.adapters.kubernetes.KubernetesClient` on it whose backoff sleeps are recorded
in ``kube_sleeps`` instead of slept (full jitter pinned to its upper bound).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from joiner.adapters.kubernetes import KubernetesClient
from testworld.kube_emulator import KubeEmulator


@pytest.fixture
def kube_emulator() -> Iterator[KubeEmulator]:
    with KubeEmulator() as emulator:
        yield emulator


@pytest.fixture
def kube_sleeps() -> list[float]:
    return []


@pytest.fixture
def kube_client(kube_emulator: KubeEmulator, kube_sleeps: list[float]) -> Iterator[KubernetesClient]:
    client = KubernetesClient(kube_emulator.url, sleep=kube_sleeps.append, random=lambda: 1.0, timeout=(2.0, 5.0))
    yield client
    client.close()
