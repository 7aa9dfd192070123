"""Shared fixtures for the whole test suite."""

from tests.support.kube_fixtures import kube_client, kube_emulator, kube_sleeps  # noqa: F401
