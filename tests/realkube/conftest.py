"""The real Kubernetes tier: one etcd + kube-apiserver + kube-scheduler per test session
(testworld/real_kube.py), with manifests/crds/ and manifests/rbac.yaml applied as shipped.

Every request a Joiner identity makes is read back from the API server's audit log: a 403
fails the test that made it, and the session ends with a report like the IAM guard's
(requests, identities, forbidden, and per identity what manifests/rbac.yaml grants that no
test exercised).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from joiner.adapters.kubernetes import KubernetesClient
from tests.realkube.access import Grant, allowed, function_groups, shipped_grants
from testworld.real_kube import (
    ADMIN,
    SCHEDULER,
    Api,
    AuditedRequest,
    AuditLog,
    Identity,
    RealCluster,
    build,
    new_token,
)
from testworld.real_world import InstallError, install


@dataclass
class Session:
    """What the session's Joiner identities did (for the terminal report)."""

    version: str = ""
    startup_seconds: float = 0.0
    requests: list[AuditedRequest] = field(default_factory=list)
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    leaked: list[str] = field(default_factory=list)

    def forbidden(self) -> list[AuditedRequest]:
        return [r for r in self.requests if r.code == 403]

    def unexercised(self) -> dict[str, list[Grant]]:
        by_group = shipped_grants()
        used: dict[str, set[Grant]] = {}
        for r in self.requests:
            used.setdefault(r.user, set()).add((r.api_group, r.rbac_resource, r.verb))
        return {user: sorted(allowed(groups, by_group) - used.get(user, set())) for user, groups in sorted(self.groups.items())}


SESSION = Session()


@dataclass
class RealKube:
    """The running cluster: an adapter per Joiner identity, an admin API for set-up."""

    cluster: RealCluster
    audit: AuditLog
    admin: Api
    version: str

    @property
    def url(self) -> str:
        return self.cluster.url

    def client(self, function: str, **options: Any) -> KubernetesClient:
        """The real adapter as ``joiner:<function>``, trusting the API server's CA file."""
        identity = self.cluster.identities[f"joiner:{function}"]
        return KubernetesClient(self.cluster.url, token=identity.token, ca_file=self.cluster.ca_file, **options)

    def as_user(self, identity: str) -> Api:
        return self.cluster.api(identity)

    @staticmethod
    def unique(prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def namespace(self, prefix: str = "t") -> str:
        """A fresh namespace with its ``default`` ServiceAccount (no controller manager runs to make it)."""
        name = self.unique(prefix)
        self.admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.admin.create(f"/api/v1/namespaces/{name}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
        return name


def _identities() -> dict[str, Identity]:
    identities = {
        ADMIN: Identity(ADMIN, ("system:masters",), new_token()),
        SCHEDULER: Identity(SCHEDULER, (), new_token()),
    }
    for user, groups in function_groups().items():
        identities[user] = Identity(user, groups, new_token())
    return identities


def install_manifests(admin: Api, *paths: Path) -> None:
    """The test world's :func:`~testworld.real_world.install`; a refusal fails the test with the
    server's message."""
    try:
        install(admin, *paths)
    except InstallError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def real_kube(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealKube]:
    capture = request.config.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled():  # a first build's progress shows as it goes
            bin_dir = build(sys.stderr.write)
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    identities = _identities()
    cluster = RealCluster(bin_dir, tmp_path_factory.mktemp("realkube"), identities)
    SESSION.groups = {user: identity.groups for user, identity in identities.items() if user.startswith("joiner:")}
    try:
        cluster.start()
        admin = cluster.api(ADMIN)
        install_manifests(admin)
        version = str(admin.get("/version").get("gitVersion"))
        SESSION.version, SESSION.startup_seconds = version, cluster.startup_seconds
        yield RealKube(cluster, AuditLog(cluster.audit_log), admin, version)
    finally:
        SESSION.leaked = cluster.stop()
        if SESSION.leaked:
            raise RuntimeError(f"real Kubernetes: process groups still alive after stopping: {SESSION.leaked}")


@dataclass
class Guard:
    """This test's requests by Joiner identities; ``expect_forbidden`` names a refusal the test provokes."""

    requests: list[AuditedRequest] = field(default_factory=list)
    expected: set[tuple[str, str, str]] = field(default_factory=set)

    def expect_forbidden(self, user: str, verb: str, resource: str) -> None:
        self.expected.add((user, verb, resource))

    def is_expected(self, request: AuditedRequest) -> bool:
        return (request.user, request.verb, request.rbac_resource) in self.expected


@pytest.fixture(autouse=True)
def rbac_guard(real_kube: RealKube) -> Iterator[Guard]:
    """Fails the test if the API server answered 403 to any request of a Joiner identity."""
    _settled(real_kube)  # what came before (set-up of earlier tests) is not this test's
    guard = Guard()
    yield guard
    guard.requests = [r for r in _settled(real_kube) if r.user in SESSION.groups]
    SESSION.requests.extend(r for r in guard.requests if not (r.code == 403 and guard.is_expected(r)))
    forbidden = [r for r in guard.requests if r.code == 403 and not guard.is_expected(r)]
    if forbidden:
        lines = sorted({f"{r.user}: {r.verb} {r.api_group or 'core'}/{r.rbac_resource} {r.uri}" for r in forbidden})
        pytest.fail("RBAC: the API server refused (403) requests of Joiner identities:\n" + "\n".join(lines), pytrace=False)


def _settled(kube: RealKube, timeout: float = 5.0) -> list[AuditedRequest]:
    """The audit log's new requests up to a marker request made now: the log is written as
    requests complete, so everything before the marker is in once the marker is."""
    marker = kube.unique("audit-marker")
    kube.admin.request("GET", f"/api/v1/namespaces/{marker}", ok=(404,))
    found: list[AuditedRequest] = []
    deadline = time.monotonic() + timeout
    while True:
        found += kube.audit.new()
        if any(r.name == marker for r in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not SESSION.version:
        return
    terminalreporter.section("Real Kubernetes RBAC")
    users = {r.user for r in SESSION.requests}
    terminalreporter.write_line(
        f"Kubernetes {SESSION.version} (started in {SESSION.startup_seconds:.1f} s): {len(SESSION.requests)} requests "
        f"by {len(users)} Joiner identities, {len(SESSION.forbidden())} forbidden"
    )
    unexercised = SESSION.unexercised()
    for user, grants in unexercised.items():
        terminalreporter.write_line(f"{user}: allowed by manifests/rbac.yaml but not exercised by any test: {_listed(grants)}")
    by_group: dict[str, set[Grant]] = {}
    for user, groups in SESSION.groups.items():
        for group in groups:
            by_group[group] = by_group[group] & set(unexercised[user]) if group in by_group else set(unexercised[user])
    for group, shared in sorted(by_group.items()):
        terminalreporter.write_line(f"{group}: granted but exercised by none of its identities: {_listed(sorted(shared))}")


def _listed(grants: list[Grant]) -> str:
    return ", ".join(f"{verb} {group or 'core'}/{resource}" for group, resource, verb in grants) or "none"


@pytest.fixture
def kube_emulator_server() -> Iterator[Any]:
    """A fresh Kubernetes API emulator (the test world's, as the fast tests and ``make demo``
    run it: plain HTTP, no authentication): the one place the contract suite imports it from."""
    from testworld.kube_emulator import KubeEmulator

    with KubeEmulator() as emulator:
        yield emulator
