"""Shared fixtures for the whole test suite, and the IAM guard (tests/support/iam_guard.py):
every AWS request a Lambda handler makes is evaluated against its role's policies in the
synthesized template; a request IAM would deny fails the test that made it, and the
granted actions no test exercised are listed at the end of the run
(``JOINER_IAM_REPORT=<path>`` also writes the full report as JSON)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.iam_guard import Guard, install
from tests.support.kube_fixtures import kube_client, kube_emulator, kube_sleeps  # noqa: F401

IAM_GUARD = Guard()
_installed = contextlib.ExitStack()


def pytest_configure(config: pytest.Config) -> None:
    # Before any test module builds a client: every client created from here on is hooked.
    _installed.enter_context(contextlib.contextmanager(install)(IAM_GUARD))


def pytest_unconfigure(config: pytest.Config) -> None:
    _installed.close()


@pytest.fixture(autouse=True)
def iam_guard() -> Iterator[Guard]:
    """Fails the test if a request its handlers made would be denied by IAM (or cannot be decided)."""
    before = len(IAM_GUARD.findings)
    yield IAM_GUARD
    found = IAM_GUARD.findings[before:]
    if found:
        lines = sorted({f"{f.function}: {f.request}: {f.message}" for f in found})
        pytest.fail("IAM guard: requests the deployed roles would not allow:\n" + "\n".join(lines), pytrace=False)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not IAM_GUARD.requests and not IAM_GUARD.findings:
        return
    report = IAM_GUARD.report()
    terminalreporter.section("IAM guard")
    terminalreporter.write_line(
        f"{report['requests_evaluated']} handler requests evaluated against their roles' policies, {len(report['findings'])} denied or undecidable"
    )
    for function, entry in report["functions"].items():
        terminalreporter.write_line(f"{function}: granted but not exercised by any test: {', '.join(entry['unexercised']) or 'none'}")
    path = os.environ.get("JOINER_IAM_REPORT")
    if path:
        Path(path).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def aws_base() -> Iterator[Any]:
    """A moto server answering one request at a time, with the network, AMI parameters and EKS
    cluster every :class:`tests.events.world.World` of the module shares."""
    from tests.events.world import AwsBase
    from testworld.aws import SerialMotoServer, fake_credentials

    with fake_credentials():
        server = SerialMotoServer()
        server.start()
        try:
            yield AwsBase(server)
        finally:
            server.stop()
