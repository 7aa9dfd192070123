"""A real Kubernetes control plane for the test world: etcd, kube-apiserver and kube-scheduler
built from source by ``tools/kube/build.sh`` (the versions ``tools/kube/go.mod`` pins), on
loopback ports, in their own process groups. The real tier's session fixture (tests/realkube),
the simulator's real mode (:mod:`testworld.real_world`) and ``joiner demo --kube real`` start it.

The API server is configured as EKS configures its own where it matters to Joiner: Node and
RBAC authorisation, the admission plugins EKS enables, bearer-token identities (one token per
Joiner function, with the Kubernetes groups of its EKS access entry), service-account signing
keys, TLS with a certificate made at startup. Its audit log (level Metadata) records every
request with the identity, verb, resource and status: :func:`read_audit` parses it.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml


def _repo_root() -> Path:
    """The repository holding tools/kube (this file's checkout, else the working directory's)."""
    for candidate in (*Path(__file__).resolve().parents, *Path.cwd().resolve().parents, Path.cwd().resolve()):
        if (candidate / "tools" / "kube" / "build.sh").is_file():
            return candidate
    return Path.cwd().resolve()


ROOT = _repo_root()
BUILD_SCRIPT = ROOT / "tools" / "kube" / "build.sh"
CRDS = ROOT / "manifests" / "crds"
RBAC = ROOT / "manifests" / "rbac.yaml"
#: build.sh's exit status when Go is missing (it prints what to install).
NO_GO = 3

#: The admission plugins EKS enables on its API servers (EKS platform versions, "The following
#: admission controllers are enabled for all ... platform versions"), all of which exist upstream.
EKS_ADMISSION_PLUGINS = (
    "NodeRestriction",
    "ExtendedResourceToleration",
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "TaintNodesByCondition",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "ValidatingAdmissionPolicy",
)

ADMIN = "joiner-test-admin"
SCHEDULER = "system:kube-scheduler"

#: Every request at level Metadata: who, what, on which object, and the answer's status; pod
#: deletions and evictions with their request body too (the grace period asked for).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Request", "verbs": ["delete"], "resources": [{"group": "", "resources": ["pods"]}]},
        {"level": "Request", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods/eviction"]}]},
        {"level": "Metadata"},
    ],
}


@dataclass(frozen=True)
class Identity:
    """A user of the token file: name, groups, bearer token."""

    user: str
    groups: tuple[str, ...]
    token: str


@dataclass(frozen=True)
class AuditedRequest:
    """One request as the API server's audit log recorded it (final stage)."""

    user: str
    verb: str
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    uri: str
    #: the request's body where the audit policy records it (pod deletions and evictions)
    body: Mapping[str, Any] | None = None

    @property
    def rbac_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build(progress: Callable[[str], object] = lambda line: None) -> Path:
    """The binaries' directory; builds them on first use (build.sh's progress lines are passed to
    ``progress`` as they come). Raises :class:`FileNotFoundError` with build.sh's message when Go is missing."""
    with subprocess.Popen(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as script:  # noqa: S603
        assert script.stderr is not None and script.stdout is not None
        said = []
        for line in script.stderr:
            said.append(line)
            progress(line)
        out = script.stdout.read()
    if script.returncode == NO_GO:
        raise FileNotFoundError("".join(said).strip())
    if script.returncode != 0:
        raise RuntimeError(f"tools/kube/build.sh failed ({script.returncode}):\n{''.join(said)[-4000:]}")
    return Path(out.strip())


def installed_bin_dir() -> Path:
    """The directory ``make kube`` built the pinned binaries into, without building: raises
    FileNotFoundError with one line saying what to run when any is missing."""
    version = ""
    go_mod = ROOT / "tools" / "kube" / "go.mod"
    if go_mod.is_file():
        for line in go_mod.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes" and parts[1].startswith("v"):
                version = parts[1]
                break
    directory = Path(os.environ.get("JOINER_KUBE_BIN") or ROOT / ".cache" / "kube" / version)
    missing = [name for name in ("etcd", "kube-apiserver", "kube-scheduler") if not (directory / name).is_file()]
    if not version or missing:
        raise FileNotFoundError(
            f"the real Kubernetes components are not built ({', '.join(missing) or 'tools/kube/go.mod not found'} "
            f"missing in {directory}): run `make kube` in the repository (needs Go >= 1.26)"
        )
    return directory


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 and localhost (its own CA) and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "joiner-test-apiserver")])
    now = _dt.datetime.now(_dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(minutes=5))
        .not_valid_after(now + _dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "apiserver.crt", directory / "apiserver.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_file, key_file


def _signing_key(directory: Path) -> Path:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = directory / "service-account.key"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return path


def _die_with_parent() -> None:
    """In the child before exec: its own session (one process group to kill), and SIGKILL when
    the test process dies, so nothing outlives a crashed or killed session."""
    os.setsid()
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace: float = 5.0) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        # The group too: anything the component started, and the leader once it has exited.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.process.poll() is None:
            self.process.wait(grace)

    def group_gone(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return True
        return False


@dataclass
class ControlPlane:
    """Starts and stops the control plane; ``url``, ``ca_file``, identities and an admin API."""

    bin_dir: Path
    work: Path
    identities: dict[str, Identity]
    components: list[Component] = field(default_factory=list)
    url: str = ""
    ca_file: str = ""
    audit_log: Path = Path()
    startup_seconds: float = 0.0
    scheduler_port: int = 0
    etcd_url: str = ""
    _apiserver_args: list[str] = field(default_factory=list)

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 90.0) -> None:
        started = time.monotonic()
        self.work.mkdir(parents=True, exist_ok=True)
        cert_file, key_file = _self_signed(self.work)
        self.ca_file = str(cert_file)
        signing_key = _signing_key(self.work)
        tokens = self.work / "tokens.csv"
        tokens.write_text("".join(f'{i.token},{i.user},{i.user},"{",".join(i.groups)}"\n' for i in self.identities.values()))
        policy = self.work / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self.audit_log = self.work / "audit.log"

        etcd_client, etcd_peer, secure_port = free_port(), free_port(), free_port()
        etcd_url = self.etcd_url = f"http://127.0.0.1:{etcd_client}"
        self._spawn(
            "etcd",
            [
                "--name=joiner-test",
                f"--data-dir={self.work / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=joiner-test=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait(f"{etcd_url}/health", "etcd", started + timeout, ca=None, token=None)

        self.url = f"https://127.0.0.1:{secure_port}"
        self._apiserver_args = [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={secure_port}",
            "--endpoint-reconciler-type=none",  # a loopback address cannot back the kubernetes Service
            f"--tls-cert-file={cert_file}",
            f"--tls-private-key-file={key_file}",
            f"--token-auth-file={tokens}",
            "--anonymous-auth=false",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(EKS_ADMISSION_PLUGINS)}",
            f"--service-account-key-file={signing_key}",
            f"--service-account-signing-key-file={signing_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.100.0.0/16",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
            "--profiling=false",
            "--v=0",
        ]
        self._spawn("kube-apiserver", self._apiserver_args)
        admin = self.identities[ADMIN].token
        self._wait(f"{self.url}/readyz", "kube-apiserver", started + timeout, ca=self.ca_file, token=admin)

        kubeconfig = self.work / "scheduler.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "scheduler",
                    "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": self.ca_file}}],
                    "users": [{"name": "scheduler", "user": {"token": self.identities[SCHEDULER].token}}],
                    "contexts": [{"name": "scheduler", "context": {"cluster": "test", "user": "scheduler"}}],
                }
            )
        )
        config = self.work / "scheduler-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                    # Retry timing only (filters and scores are the defaults): the simulator's clock stands
                    # still while it waits for the scheduler, so real seconds of backoff are pure waiting.
                    "podInitialBackoffSeconds": 1,
                    "podMaxBackoffSeconds": 1,
                }
            )
        )
        self.scheduler_port = free_port()
        self._spawn(
            "kube-scheduler",
            [
                f"--config={config}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.scheduler_port}",
                "--v=0",
            ],
        )
        self.startup_seconds = time.monotonic() - started

    def scheduler_metrics(self, names: Sequence[str]) -> dict[str, float]:
        """kube-scheduler's Prometheus samples whose metric name is in ``names`` (``name{labels}`` ->
        value), read from its secure port as the admin (delegated authentication and authorisation)."""
        if not hasattr(self, "_metrics_pool"):
            self._metrics_pool = urllib3.PoolManager(cert_reqs="CERT_NONE", retries=False)
        with warnings.catch_warnings():  # its serving certificate is self-signed in memory: nothing to verify it with
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            answer = self._metrics_pool.request(
                "GET",
                f"https://127.0.0.1:{self.scheduler_port}/metrics",
                headers={"Authorization": f"Bearer {self.identities[ADMIN].token}"},
                timeout=urllib3.Timeout(connect=2.0, read=10.0),
            )
        if answer.status != 200:
            raise RuntimeError(f"kube-scheduler /metrics: HTTP {answer.status}: {answer.data[:300]!r}")
        samples: dict[str, float] = {}
        for line in answer.data.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            if key.split("{", 1)[0] in names:
                samples[key] = float(value)
        return samples

    def compact_etcd(self) -> int:
        """Compacts etcd at its current revision (what kube-apiserver does every
        ``--etcd-compaction-interval``, 5 minutes by default) and returns that revision: every
        older version is gone from etcd (a list continued from one answers 410)."""
        pool = urllib3.PoolManager(retries=False)
        headers = {"Content-Type": "application/json"}
        timeout = urllib3.Timeout(connect=2.0, read=10.0)
        current = pool.request("POST", f"{self.etcd_url}/v3/kv/range", body=json.dumps({"key": "AA=="}).encode(), headers=headers, timeout=timeout)
        revision = int(json.loads(current.data)["header"]["revision"])
        answer = pool.request(
            "POST", f"{self.etcd_url}/v3/kv/compaction", body=json.dumps({"revision": revision, "physical": True}).encode(), headers=headers, timeout=timeout
        )
        if answer.status != 200:
            raise RuntimeError(f"etcd compaction at {revision}: HTTP {answer.status}: {answer.data[:300]!r}")
        return revision

    @contextmanager
    def peer_apiserver(self, timeout: float = 60.0) -> Iterator[str]:
        """A second kube-apiserver on the same etcd, configured as the first (as EKS runs two or
        more behind one endpoint), for as long as the context lasts; yields its URL. Its watch
        cache starts now, so it holds no history before this moment: a watch resumed from an
        older version is refused with 410, as by any API server whose cache was (re)built after
        that version (a restart, an upgrade, another instance behind the load balancer)."""
        port = free_port()
        args = [
            f"--secure-port={port}"
            if arg.startswith("--secure-port=")
            else f"--audit-log-path={self.work / 'peer-audit.log'}"
            if arg.startswith("--audit-log-path=")
            else arg
            for arg in self._apiserver_args
        ]
        component = self._spawn("kube-apiserver-peer", args, binary="kube-apiserver")
        try:
            url = f"https://127.0.0.1:{port}"
            self._wait(f"{url}/readyz", component.name, time.monotonic() + timeout, ca=self.ca_file, token=self.identities[ADMIN].token)
            yield url
        finally:
            component.stop()
            self.components.remove(component)

    def _spawn(self, name: str, args: Sequence[str], binary: str | None = None) -> Component:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(  # noqa: S603
                [str(self.bin_dir / (binary or name)), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                cwd=self.work,  # noqa: PLW1509
            )
        component = Component(name, process, log)
        self.components.append(component)
        return component

    def _wait(self, url: str, name: str, deadline: float, *, ca: str | None, token: str | None) -> None:
        component = next(c for c in self.components if c.name == name)
        pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED" if ca else "CERT_NONE", ca_certs=ca, retries=False)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        last = ""
        while time.monotonic() < deadline:
            if not component.alive():
                raise RuntimeError(f"{name} exited with status {component.process.returncode}:\n{component.tail()}")
            try:
                answer = pool.request("GET", url, headers=headers, timeout=urllib3.Timeout(connect=1.0, read=5.0))
                if answer.status == 200:
                    return
                last = f"HTTP {answer.status}: {answer.data.decode(errors='replace')[-600:]}"
            except urllib3.exceptions.HTTPError as error:
                last = str(error)
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready at {url} in time (last answer: {last}):\n{component.tail()}")

    def stop(self) -> list[str]:
        """Stops every component (scheduler first); returns the names of any whose process group
        is still there afterwards (a leak)."""
        for component in reversed(self.components):
            component.stop()
        return [c.name for c in self.components if not c.group_gone()]

    # ------------------------------------------------------------ clients

    def api(self, identity: str = ADMIN, *, impersonate: tuple[str, tuple[str, ...]] | None = None) -> Api:
        """A client as ``identity``; with ``impersonate`` (user, groups) the admin acting as that
        user (authorisation and admission see the impersonated user, as for a kubelet's own credentials)."""
        return Api(self.url, self.identities[identity].token, self.ca_file, impersonate=impersonate)


class ApiError(Exception):
    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.body = body


class Api:
    """A minimal JSON client for test set-up (the admin's objects) and for server-side apply."""

    def __init__(self, url: str, token: str, ca_file: str, *, impersonate: tuple[str, tuple[str, ...]] | None = None) -> None:
        self.url = url
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._group_headers: list[tuple[str, str]] = []
        if impersonate is not None:
            headers["Impersonate-User"] = impersonate[0]
            self._group_headers = [("Impersonate-Group", group) for group in impersonate[1]]
        self._headers = headers
        self._pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=ca_file, retries=False)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        ok: Sequence[int] = (),
    ) -> tuple[int, Any]:
        encoded = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = urllib3.HTTPHeaderDict(dict(self._headers, **({"Content-Type": content_type} if body is not None else {})))
        for name, value in self._group_headers:
            headers.add(name, value)
        url = self.url + path + (("?" + "&".join(f"{k}={v}" for k, v in query.items())) if query else "")
        answer = self._pool.request(method, url, body=encoded, headers=headers, timeout=urllib3.Timeout(connect=5.0, read=30.0))
        try:
            parsed = json.loads(answer.data) if answer.data else None
        except ValueError:
            parsed = answer.data.decode(errors="replace")
        if not 200 <= answer.status < 300 and answer.status not in ok:
            raise ApiError(method, path, answer.status, parsed)
        return answer.status, parsed

    def get(self, path: str) -> Any:
        return self.request("GET", path)[1]

    def create(self, path: str, obj: Mapping[str, Any], *, strict: bool = True) -> Any:
        return self.request("POST", path, obj, query={"fieldValidation": "Strict"} if strict else None)[1]

    def delete(self, path: str) -> None:
        self.request("DELETE", path, ok=(404,))

    def apply(self, obj: Mapping[str, Any]) -> Any:
        """Server-side apply with strict field validation (what ``kubectl apply --server-side`` does)."""
        path = object_path(obj)
        return self.request(
            "PATCH",
            path,
            yaml.safe_dump(dict(obj)).encode(),
            content_type="application/apply-patch+yaml",
            query={"fieldManager": "joiner-tests", "fieldValidation": "Strict", "force": "true"},
        )[1]


#: (apiVersion, kind) -> (collection path, namespaced) for what the shipped manifests hold.
_PATHS = {
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("/apis/rbac.authorization.k8s.io/v1/clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", False),
    ("rbac.authorization.k8s.io/v1", "Role"): ("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", True),
}


def object_path(obj: Mapping[str, Any]) -> str:
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key not in _PATHS:
        raise ValueError(f"no API path known for {key} (testworld.real_kube._PATHS)")
    collection, namespaced = _PATHS[key]
    meta = obj.get("metadata") or {}
    if namespaced:
        collection = collection.format(namespace=meta.get("namespace") or "default")
    return f"{collection}/{meta['name']}"


def manifests(*paths: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            for obj in yaml.safe_load_all(file.read_text()):
                if obj:
                    yield file, obj


class AuditLog:
    """Reads the API server's audit log incrementally: each request once, at its first stage that
    has a status (a watch is counted when its response starts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._seen: set[str] = set()

    def new(self) -> list[AuditedRequest]:
        try:
            with self.path.open("rb") as log:
                log.seek(self._offset)
                data = log.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        found = []
        for line in data[:end].splitlines():
            event = json.loads(line)
            status = event.get("responseStatus") or {}
            if "code" not in status or event["auditID"] in self._seen:
                continue
            self._seen.add(event["auditID"])
            ref = event.get("objectRef") or {}
            found.append(
                AuditedRequest(
                    user=(event.get("user") or {}).get("username", ""),
                    verb=event.get("verb", ""),
                    api_group=ref.get("apiGroup", ""),
                    resource=ref.get("resource", ""),
                    subresource=ref.get("subresource", ""),
                    namespace=ref.get("namespace", ""),
                    name=ref.get("name", ""),
                    code=int(status["code"]),
                    uri=event.get("requestURI", ""),
                    body=event.get("requestObject"),
                )
            )
        return found


def new_token() -> str:
    return secrets.token_urlsafe(24)


#: The name the test tier knew the control plane by.
RealCluster = ControlPlane
