"""The emulator contract: the same calls against the test world's Kubernetes API emulator and the
real kube-apiserver, with the same observable results (status codes, Status bodies, what Joiner's
adapter reads, watch and list semantics, discovery, Table responses, strict field validation,
dry runs). Where they differ the emulator is made as strict as the real server.

Every test takes ``backend`` (parametrized: ``emulator``, ``real``) and asserts one expectation
for both; the discovery test also compares the two answers side by side. The real server is used
as its admin (RBAC is the RBAC tier's concern); the emulator accepts the same token. The real
server runs no controller manager: where an answer depends on a controller (a
PodDisruptionBudget's status), the test writes what the controller would.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlencode

import pytest
import urllib3

from joiner.adapters.kubernetes import KubernetesClient, _watch_event
from joiner.ports import JsonDict, KubernetesError, KubernetesPort, WatchEvent, WatchExpired
from joiner.services.cluster_state import ClusterCache, ClusterRead
from tests.realkube.conftest import RealKube
from tests.support.cluster_parsers import node_or_none as _node
from tests.support.cluster_parsers import pod_or_none as _pod
from testworld.kube_emulator import CONTINUE_EXPIRED
from testworld.real_kube import ADMIN, CRDS, ROOT, manifests

pytestmark = pytest.mark.real_kube

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@dataclass
class Answer:
    status: int
    body: Any
    headers: Mapping[str, str]


class Backend:
    """One API server under contract: raw calls, the adapter, fresh names."""

    def __init__(self, name: str, url: str, token: str, ca_file: str | None, real: RealKube, emulator: Any = None) -> None:
        self.name, self.url, self.token, self.ca_file, self.real, self.emulator = name, url, token, ca_file, real, emulator
        self._pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED" if ca_file else "CERT_NONE", ca_certs=ca_file, retries=False)
        self.label = f"contract-{uuid.uuid4().hex[:8]}"  # on cluster-scoped objects: this test's own

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> Answer:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": accept}
        encoded = None
        if body is not None:
            encoded = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        url = self.url + path + (f"?{urlencode(query)}" if query else "")
        answer = self._pool.request(method, url, body=encoded, headers=headers, timeout=urllib3.Timeout(connect=5.0, read=30.0))
        try:
            parsed = json.loads(answer.data) if answer.data else None
        except ValueError:
            parsed = answer.data.decode(errors="replace")
        return Answer(answer.status, parsed, dict(answer.headers))

    def ok(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        answer = self.call(method, path, body, **options)
        assert 200 <= answer.status < 300, f"{self.name}: {method} {path}: HTTP {answer.status}: {answer.body}"
        return answer.body

    def watch(self, path: str, **query: str) -> list[dict[str, Any]]:
        """A watch read to its end (the server's ``timeoutSeconds``): every event."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        url = f"{self.url}{path}?{urlencode(dict(query, watch='true'))}"
        answer = self._pool.request("GET", url, headers=headers, timeout=urllib3.Timeout(connect=5.0, read=30.0))
        assert answer.status == 200, f"{self.name}: watch {path}: HTTP {answer.status}: {answer.data[:300]!r}"
        return [json.loads(line) for line in answer.data.splitlines() if line.strip()]

    def client(self, **options: Any) -> KubernetesClient:
        return KubernetesClient(self.url, token=self.token, ca_file=self.ca_file, max_attempts=1, **options)

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def namespace(self) -> str:
        """A fresh namespace (the emulator's namespaces need no object)."""
        if self.emulator is not None:
            return self.unique("ns")
        return self.real.namespace("contract")

    def node(self, name: str | None = None, **extra: Any) -> dict[str, Any]:
        obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name or self.unique("node"), "labels": {"contract": self.label}}}
        obj.update(extra)
        created: dict[str, Any] = self.ok("POST", "/api/v1/nodes", obj)
        return created

    def pod(
        self, namespace: str, name: str | None = None, *, labels: Mapping[str, str] | None = None, node: str | None = None, running: bool = False
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
            "schedulerName": "contract-no-scheduler",
        }  # kube-scheduler leaves them alone
        if node:
            spec["nodeName"] = node
        obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name or self.unique("pod"), "labels": dict(labels or {})}, "spec": spec}
        created: dict[str, Any] = self.ok("POST", f"/api/v1/namespaces/{namespace}/pods", obj)
        if running:
            created = self.ok(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{created['metadata']['name']}/status",
                {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
                content_type=MERGE,
            )
        return created

    def node_pool(self, name: str | None = None) -> dict[str, Any]:
        obj = {
            "apiVersion": "joiner.dev/v1",
            "kind": "NodePool",
            "metadata": {"name": name or self.unique("pool"), "labels": {"contract": self.label}},
            "spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}}}},
        }
        created: dict[str, Any] = self.ok("POST", "/apis/joiner.dev/v1/nodepools", obj, query={"fieldValidation": "Strict"})
        return created

    def pdb_status(self, namespace: str, name: str, *, expected: int, healthy: int, desired: int) -> None:
        """What the disruption controller writes (the real tier runs no controller manager; the
        emulator computes it from the pods itself)."""
        if self.emulator is not None:
            return
        allowed = max(0, healthy - desired)
        self.ok(
            "PUT",
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}/status",
            {
                **self.ok("GET", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"),
                "status": {
                    "observedGeneration": 1,
                    "expectedPods": expected,
                    "currentHealthy": healthy,
                    "desiredHealthy": desired,
                    "disruptionsAllowed": allowed,
                    "conditions": [
                        {
                            "type": "DisruptionAllowed",
                            "status": "True" if allowed else "False",
                            "reason": "SufficientPods" if allowed else "InsufficientPods",
                            "message": "",
                            "observedGeneration": 1,
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ],
                },
            },
        )

    @contextmanager
    def history_forgotten(self) -> Iterator[Backend]:
        """This server as one whose history starts now: etcd compacted at its current revision,
        served by an API server whose watch cache was built after it (the real tier starts a
        second kube-apiserver on the same etcd: compaction alone does not do it, as the running
        server's watch cache still replays every version since it started)."""
        if self.emulator is not None:
            self.emulator.compact()
            yield self
            return
        self.real.cluster.compact_etcd()
        with self.real.cluster.peer_apiserver() as url:
            peer = Backend("real peer", url, self.token, self.ca_file, self.real)
            try:
                yield peer
            finally:
                peer.close()

    def close(self) -> None:
        self._pool.clear()


@pytest.fixture(params=["emulator", "apiserver"])
def backend(request: pytest.FixtureRequest, real_kube: RealKube) -> Iterator[Backend]:
    token = real_kube.cluster.identities[ADMIN].token
    if request.param == "emulator":
        emulator = request.getfixturevalue("kube_emulator_server")
        chosen = Backend("emulator", emulator.url, token, None, real_kube, emulator)
    else:
        chosen = Backend("real", real_kube.url, token, real_kube.cluster.ca_file, real_kube)
    yield chosen
    chosen.close()


def status_of(answer: Answer) -> tuple[int, str, str]:
    """(code, reason, message) of a Status answer, checked to be one."""
    body = answer.body
    assert isinstance(body, dict) and body.get("kind") == "Status" and body.get("apiVersion") == "v1", body
    assert body["status"] == "Failure" and body["code"] == answer.status, body
    return answer.status, body["reason"], body["message"]


# ------------------------------------------------------------------ discovery


def test_core_discovery(backend: Backend) -> None:
    assert backend.ok("GET", "/api")["versions"] == ["v1"]
    core = backend.ok("GET", "/api/v1")
    assert (core["kind"], core["groupVersion"]) == ("APIResourceList", "v1")
    resources = {r["name"]: r for r in core["resources"]}
    assert (resources["pods"]["kind"], resources["pods"]["namespaced"], resources["pods"]["shortNames"]) == ("Pod", True, ["po"])
    assert (resources["nodes"]["kind"], resources["nodes"]["namespaced"], resources["nodes"]["shortNames"]) == ("Node", False, ["no"])
    assert resources["events"]["shortNames"] == ["ev"]
    assert set(resources["pods/status"]["verbs"]) == {"get", "patch", "update"}
    eviction = resources["pods/eviction"]
    assert (eviction["kind"], eviction["group"], eviction["version"], eviction["verbs"]) == ("Eviction", "policy", "v1", ["create"])
    assert (resources["pods/binding"]["kind"], resources["pods/binding"]["verbs"]) == ("Binding", ["create"])


def test_group_discovery(backend: Backend) -> None:
    groups = {g["name"]: g for g in backend.ok("GET", "/apis")["groups"]}
    joiner = groups["joiner.dev"]
    assert [v["groupVersion"] for v in joiner["versions"]] == ["joiner.dev/v1", "joiner.dev/v1alpha1"]
    assert joiner["preferredVersion"] == {"groupVersion": "joiner.dev/v1", "version": "v1"}
    for name in ("apps", "policy", "storage.k8s.io", "node.k8s.io", "apiextensions.k8s.io"):
        assert groups[name]["preferredVersion"]["groupVersion"] == f"{name}/v1"
    v1 = backend.ok("GET", "/apis/joiner.dev/v1")
    assert v1["groupVersion"] == "joiner.dev/v1"
    resources = {r["name"]: r for r in v1["resources"]}
    for plural, kind, short in (("nodepools", "NodePool", "jnp"), ("nodeclasses", "NodeClass", "jnc"), ("nodeclaims", "NodeClaim", "jncl")):
        entry = resources[plural]
        assert (entry["kind"], entry["namespaced"], entry["shortNames"], entry["categories"]) == (kind, False, [short], ["joiner"])
        assert {"get", "list", "watch", "create", "update", "patch", "delete"} <= set(entry["verbs"])
        assert set(resources[f"{plural}/status"]["verbs"]) == {"get", "patch", "update"}
    overlays = {r["name"]: r for r in backend.ok("GET", "/apis/joiner.dev/v1alpha1")["resources"]}
    assert overlays["nodeoverlays"]["shortNames"] == ["jno"]
    assert backend.call("GET", "/apis/joiner.dev/v9").status == 404


def _discovery(backend: Backend) -> dict[tuple[str, str], dict[str, Any]]:
    """(groupVersion, resource name) -> its discovery entry, for every group version served."""
    versions = ["v1"] + [v["groupVersion"] for g in backend.ok("GET", "/apis")["groups"] for v in g["versions"]]
    found = {}
    for group_version in versions:
        answer = backend.ok("GET", "/api/v1" if group_version == "v1" else f"/apis/{group_version}")
        assert answer["groupVersion"] == group_version
        for entry in answer["resources"]:
            found[(group_version, entry["name"])] = entry
    return found


def test_every_resource_the_emulator_announces_is_announced_alike_by_the_real_server(real_kube: RealKube, kube_emulator_server: Any) -> None:
    token = real_kube.cluster.identities[ADMIN].token
    emulated = _discovery(Backend("emulator", kube_emulator_server.url, token, None, real_kube, kube_emulator_server))
    real = _discovery(Backend("real", real_kube.url, token, real_kube.cluster.ca_file, real_kube))
    for key, entry in emulated.items():
        assert key in real, f"the emulator announces {key}, the real server does not"
        other = real[key]
        for field in ("kind", "namespaced", "singularName", "group", "version"):
            assert entry.get(field) == other.get(field), (key, field, entry.get(field), other.get(field))
        for field in ("shortNames", "categories"):
            assert (entry.get(field) or []) == (other.get(field) or []), (key, field, entry.get(field), other.get(field))
        assert set(entry["verbs"]) <= set(other["verbs"]), (key, entry["verbs"], other["verbs"])


# ------------------------------------------------------------------ create, get, errors


def test_create_get_and_their_errors(backend: Backend) -> None:
    node = backend.node()
    name = node["metadata"]["name"]
    assert node["metadata"]["resourceVersion"] and node["metadata"]["uid"]
    again = backend.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    assert status_of(again) == (409, "AlreadyExists", f'nodes "{name}" already exists')
    assert again.body["details"] == {"name": name, "kind": "nodes"}
    missing = backend.call("GET", "/api/v1/nodes/no-such-node")
    assert status_of(missing) == (404, "NotFound", 'nodes "no-such-node" not found')
    assert missing.body["details"] == {"name": "no-such-node", "kind": "nodes"}
    claim = backend.call("GET", "/apis/joiner.dev/v1/nodeclaims/nope")
    assert status_of(claim) == (404, "NotFound", 'nodeclaims.joiner.dev "nope" not found')
    assert claim.body["details"] == {"name": "nope", "group": "joiner.dev", "kind": "nodeclaims"}
    assert status_of(backend.call("GET", "/api/v1/nosuchresources"))[0] == 404


def test_invalid_objects_are_refused_with_every_cause(backend: Backend) -> None:
    refused = backend.call(
        "POST",
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Bad_Name"}, "spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}},
    )
    name_message = (
        'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '
        "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
        "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )
    effect_message = 'Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'
    assert status_of(refused) == (
        422,
        "Invalid",
        (f'Node "Bad_Name" is invalid: [metadata.name: {name_message}, metadata.taints[0].effect: {effect_message}]'),
    )  # sic: the real server's path
    assert refused.body["details"] == {
        "name": "Bad_Name",
        "kind": "Node",
        "causes": [
            {"reason": "FieldValueInvalid", "message": name_message, "field": "metadata.name"},
            {"reason": "FieldValueNotSupported", "message": effect_message, "field": "metadata.taints[0].effect"},
        ],
    }


def test_updates_with_a_stale_resource_version_conflict(backend: Backend) -> None:
    node = backend.node()
    name = node["metadata"]["name"]
    stale = node["metadata"]["resourceVersion"]
    backend.ok("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": {"a": "1"}}}, content_type=MERGE)
    conflict = (
        409,
        "Conflict",
        (f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; please apply your changes to the latest version and try again'),
    )
    patched = backend.call("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"resourceVersion": stale, "labels": {"b": "2"}}}, content_type=MERGE)
    assert status_of(patched) == conflict
    put = dict(node, metadata=dict(node["metadata"], resourceVersion=stale))
    assert status_of(backend.call("PUT", f"/api/v1/nodes/{name}", put)) == conflict
    pool = backend.node_pool()
    unversioned = {k: v for k, v in pool.items() if k != "status"}
    unversioned["metadata"] = {k: v for k, v in pool["metadata"].items() if k != "resourceVersion"}
    code, reason, message = status_of(backend.call("PUT", f"/apis/joiner.dev/v1/nodepools/{pool['metadata']['name']}", unversioned))
    assert (code, reason) == (422, "Invalid")
    assert "metadata.resourceVersion: Invalid value: 0" in message and "must be specified for an update" in message


def test_strategic_merge_patch(backend: Backend) -> None:
    """Joiner adds and removes one Node finalizer with a strategic merge patch (other finalizers
    kept); custom resources refuse strategic merge patch with 415."""
    node = backend.node(metadata={"name": backend.unique("node"), "labels": {"contract": backend.label}, "finalizers": ["other/keep"]})
    name = node["metadata"]["name"]
    added = backend.ok("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"finalizers": ["joiner.dev/termination"]}}, content_type=STRATEGIC)
    assert added["metadata"]["finalizers"] == ["joiner.dev/termination", "other/keep"]
    removed = backend.ok(
        "PATCH", f"/api/v1/nodes/{name}", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["joiner.dev/termination"]}}, content_type=STRATEGIC
    )
    assert removed["metadata"]["finalizers"] == ["other/keep"]
    backend.ok("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"finalizers": None}}, content_type=MERGE)
    pool = backend.node_pool()
    refused = backend.call("PATCH", f"/apis/joiner.dev/v1/nodepools/{pool['metadata']['name']}", {"spec": {"weight": 3}}, content_type=STRATEGIC)
    code, reason, message = status_of(refused)
    assert (code, reason) == (415, "UnsupportedMediaType")
    assert message.startswith("the body of the request was in an unknown format - accepted media types include:")


def test_delete_with_preconditions(backend: Backend) -> None:
    node = backend.node()
    name, uid = node["metadata"]["name"], node["metadata"]["uid"]
    backend.ok("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": {"changed": "yes"}}}, content_type=MERGE)
    wrong = "00000000-0000-0000-0000-000000000000"
    refused = backend.call("DELETE", f"/api/v1/nodes/{name}", {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": wrong}})
    assert status_of(refused) == (
        409,
        "Conflict",
        (
            f'Operation cannot be fulfilled on Node "{name}": the UID in the precondition '
            f"({wrong}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        ),
    )
    stale = backend.call(
        "DELETE",
        f"/api/v1/nodes/{name}",
        {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": node["metadata"]["resourceVersion"]}},
    )
    version = backend.ok("GET", f"/api/v1/nodes/{name}")["metadata"]["resourceVersion"]
    assert status_of(stale) == (
        409,
        "Conflict",
        (
            f'Operation cannot be fulfilled on Node "{name}": the ResourceVersion in the precondition '
            f"({node['metadata']['resourceVersion']}) does not match the ResourceVersion in record ({version}). "
            "The object might have been modified"
        ),
    )
    gone = backend.ok("DELETE", f"/api/v1/nodes/{name}", {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}})
    assert gone == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {"name": name, "kind": "nodes", "uid": uid}}
    assert status_of(backend.call("DELETE", f"/api/v1/nodes/{name}")) == (404, "NotFound", f'nodes "{name}" not found')


def test_eviction(backend: Backend) -> None:
    namespace = backend.namespace()
    free = backend.pod(namespace, labels={"app": "free"}, node="somewhere", running=True)
    evicted = backend.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/{free['metadata']['name']}/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": free["metadata"]["name"]}},
    )
    assert evicted.status == 201
    assert {k: v for k, v in evicted.body.items() if k != "metadata"} == {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
    guarded = backend.pod(namespace, labels={"app": "guarded"}, node="somewhere", running=True)
    backend.ok(
        "POST",
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    backend.pdb_status(namespace, "guard", expected=1, healthy=1, desired=1)
    blocked = backend.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/{guarded['metadata']['name']}/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": guarded["metadata"]["name"]}},
    )
    assert status_of(blocked) == (429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    assert blocked.body["details"]["causes"] == [
        {"reason": "DisruptionBudget", "message": "The disruption budget guard needs 1 healthy pods and has 1 currently"}
    ]
    missing = backend.call(
        "POST", f"/api/v1/namespaces/{namespace}/pods/nope/eviction", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "nope"}}
    )
    assert status_of(missing) == (404, "NotFound", 'pods "nope" not found')


def test_dry_run_does_not_store(backend: Backend) -> None:
    name = backend.unique("node")
    dry = backend.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}, query={"dryRun": "All"})
    assert dry.status == 201 and dry.body["metadata"]["name"] == name
    assert "resourceVersion" not in dry.body["metadata"]
    assert backend.call("GET", f"/api/v1/nodes/{name}").status == 404
    pool = backend.node_pool()
    pool_name = pool["metadata"]["name"]
    backend.ok("PATCH", f"/apis/joiner.dev/v1/nodepools/{pool_name}", {"spec": {"weight": 7}}, content_type=MERGE, query={"dryRun": "All"})
    assert backend.ok("GET", f"/apis/joiner.dev/v1/nodepools/{pool_name}")["metadata"]["resourceVersion"] == pool["metadata"]["resourceVersion"]
    backend.ok("DELETE", f"/apis/joiner.dev/v1/nodepools/{pool_name}", query={"dryRun": "All"})
    assert backend.ok("GET", f"/apis/joiner.dev/v1/nodepools/{pool_name}")["metadata"]["uid"] == pool["metadata"]["uid"]
    invalid = backend.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Not_Valid"}}, query={"dryRun": "All"})
    assert status_of(invalid)[:2] == (422, "Invalid")


def test_strict_field_validation_refuses_unknown_fields(backend: Backend) -> None:
    name = backend.unique("node")
    refused = backend.call(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labelz": {}},
            "spec": {"unschedulabel": True, "taints": [{"key": "a", "effect": "NoSchedule", "valu": "x"}]},
        },
        query={"fieldValidation": "Strict"},
    )
    assert status_of(refused) == (
        400,
        "BadRequest",
        (
            'Node in version "v1" cannot be handled as a Node: strict decoding error: '
            'unknown field "metadata.labelz", unknown field "spec.unschedulabel", unknown field "spec.taints[0].valu"'
        ),
    )
    assert backend.call("GET", f"/api/v1/nodes/{name}").status == 404
    claim = backend.call(
        "POST",
        "/apis/joiner.dev/v1/nodeclaims",
        {"apiVersion": "joiner.dev/v1", "kind": "NodeClaim", "metadata": {"name": backend.unique("claim")}, "spec": {"nodePool": "p", "bogus": 1}, "extra": 2},
        query={"fieldValidation": "Strict"},
    )
    assert status_of(claim) == (
        400,
        "BadRequest",
        ('NodeClaim in version "v1" cannot be handled as a NodeClaim: strict decoding error: unknown field "extra", unknown field "spec.bogus"'),
    )
    node = backend.node()
    patched = backend.call(
        "PATCH", f"/api/v1/nodes/{node['metadata']['name']}", {"spec": {"unschedulabel": True}}, content_type=MERGE, query={"fieldValidation": "Strict"}
    )
    code, reason, message = status_of(patched)
    assert (code, reason) == (422, "Invalid") and message.startswith(' "" is invalid: patch: Invalid value: "{')
    assert message.endswith('": strict decoding error: unknown field "spec.unschedulabel"')
    # Without Strict the unknown field is dropped (pruned), not stored.
    lax = backend.ok(
        "POST",
        "/apis/joiner.dev/v1/nodeclaims",
        {"apiVersion": "joiner.dev/v1", "kind": "NodeClaim", "metadata": {"name": backend.unique("claim")}, "spec": {"nodePool": "p", "bogus": 1}},
    )
    assert lax["spec"] == {"nodePool": "p"}


# ------------------------------------------------------------------ lists and Tables


def test_pagination(backend: Backend) -> None:
    namespace = backend.namespace()
    names = sorted(backend.pod(namespace)["metadata"]["name"] for _ in range(5))
    first = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": "2"})
    assert [p["metadata"]["name"] for p in first["items"]] == names[:2]
    assert first["metadata"]["remainingItemCount"] == 3 and first["metadata"]["continue"]
    second = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": "2", "continue": first["metadata"]["continue"]})
    assert [p["metadata"]["name"] for p in second["items"]] == names[2:4]
    third = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": "2", "continue": second["metadata"]["continue"]})
    assert [p["metadata"]["name"] for p in third["items"]] == names[4:]
    assert "continue" not in third["metadata"]
    code, reason, message = status_of(backend.call("GET", "/api/v1/pods", query={"limit": "1", "continue": "garbage"}))
    assert (code, reason) == (400, "BadRequest") and message.startswith("invalid continue token: continue key is not valid")
    code, reason, message = status_of(backend.call("GET", "/api/v1/pods", query={"fieldSelector": "spec.noSuchField=x"}))
    assert (code, reason, message) == (400, "BadRequest", "field label not supported: spec.noSuchField")


def _rows(table: Mapping[str, Any], label: str | None = None) -> dict[str, list[Any]]:
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1"), table
    rows = {}
    for row in table["rows"]:
        meta = row["object"]["metadata"]
        assert (row["object"]["kind"], row["object"]["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
        if label is None or (meta.get("labels") or {}).get("contract") == label:
            rows[meta["name"]] = row["cells"]
    return rows


def test_table_responses(backend: Backend) -> None:
    node = backend.node()
    table = backend.ok("GET", "/api/v1/nodes", accept=TABLE, query={"labelSelector": f"contract={backend.label}"})
    assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", 0),
        ("Status", 0),
        ("Roles", 0),
        ("Age", 0),
        ("Version", 0),
        ("Internal-IP", 1),
        ("External-IP", 1),
        ("OS-Image", 1),
        ("Kernel-Version", 1),
        ("Container-Runtime", 1),
    ]
    cells = _rows(table)[node["metadata"]["name"]]
    assert cells[:3] == [node["metadata"]["name"], "Unknown", "<none>"] and cells[4:] == ["", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"]
    one = backend.ok("GET", f"/api/v1/nodes/{node['metadata']['name']}", accept=TABLE)
    assert list(_rows(one)) == [node["metadata"]["name"]]

    namespace = backend.namespace()
    pod = backend.pod(namespace, node="node-a")
    pods = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods", accept=TABLE)
    assert [c["name"] for c in pods["columnDefinitions"]] == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
    cells = _rows(pods)[pod["metadata"]["name"]]
    assert cells[:4] == [pod["metadata"]["name"], "0/1", "Pending", "0"] and cells[5:] == ["<none>", "node-a", "<none>", "<none>"]

    pool = backend.node_pool()
    pools = backend.ok("GET", "/apis/joiner.dev/v1/nodepools", accept=TABLE, query={"labelSelector": f"contract={backend.label}"})
    crd = next(obj for _, obj in manifests(CRDS) if obj["metadata"]["name"] == "nodepools.joiner.dev")
    printed = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["type"], c["priority"]) for c in pools["columnDefinitions"]] == [("Name", "string", 0)] + [
        (c["name"], c["type"], c.get("priority", 0)) for c in printed
    ]
    cells = _rows(pools)[pool["metadata"]["name"]]
    assert cells[0] == pool["metadata"]["name"] and len(cells) == len(printed) + 1
    for column, cell in zip(printed, cells[1:], strict=True):
        path = column["jsonPath"]
        if path == ".spec.template.spec.nodeClassRef.name":
            assert cell == "default"
        elif column["type"] == "date":
            assert isinstance(cell, str) and cell.endswith("s")
        elif path.startswith(".status"):
            assert cell is None, (column, cell)


# ------------------------------------------------------------------ watches


def test_watch_resumes_from_a_resource_version(backend: Backend) -> None:
    namespace = backend.namespace()
    listed = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods")
    version = listed["metadata"]["resourceVersion"]
    pod = backend.pod(namespace)
    name = pod["metadata"]["name"]
    backend.ok(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
        {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": "node-b"}},
    )
    backend.ok("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", {"gracePeriodSeconds": 0})
    events = backend.watch(f"/api/v1/namespaces/{namespace}/pods", resourceVersion=version, timeoutSeconds="2")
    # created, bound, marked for deletion (a bound pod's deletion is graceful, even at 0 s), removed
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", name), ("MODIFIED", name), ("MODIFIED", name), ("DELETED", name)]
    assert events[2]["object"]["metadata"]["deletionTimestamp"] and events[2]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    assert all((e["object"]["kind"], e["object"]["apiVersion"]) == ("Pod", "v1") for e in events)
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and versions[0] > int(version)
    # With a field selector, a pod that stops matching arrives as DELETED.
    unbound = backend.watch(f"/api/v1/namespaces/{namespace}/pods", resourceVersion=version, timeoutSeconds="2", fieldSelector="spec.nodeName=")
    assert [e["type"] for e in unbound] == ["ADDED", "DELETED"]
    # From "0" (or none): the current objects as synthetic ADDED events first.
    other = backend.pod(namespace)["metadata"]["name"]
    assert [
        (e["type"], e["object"]["metadata"]["name"]) for e in backend.watch(f"/api/v1/namespaces/{namespace}/pods", resourceVersion="0", timeoutSeconds="1")
    ] == [("ADDED", other)]


def test_an_idle_watch_ends_at_its_timeout(backend: Backend) -> None:
    """Nothing changes: the stream stays open ``timeoutSeconds`` and ends without an event. The
    real server's bookmarks on a plain watch come about every minute and 2 s before its deadline,
    and only with a version newer than the watch's: an idle watch gets none."""
    namespace = backend.namespace()
    version = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
    started = time.monotonic()
    events = backend.watch(f"/api/v1/namespaces/{namespace}/pods", resourceVersion=version, timeoutSeconds="2", allowWatchBookmarks="true")
    assert 1.5 <= time.monotonic() - started < 6
    assert events == []


def test_a_watch_its_resource_changed_during_gets_a_bookmark_before_its_deadline(backend: Backend) -> None:
    """With ``allowWatchBookmarks=true``, a watch during which its resource changed gets a
    BOOKMARK at that version about 2 s before its deadline (the real server may send one more a
    second earlier): Joiner's adapter passes it on as a bookmark, with no object change."""
    namespace = backend.namespace()
    version = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
    created: list[dict[str, Any]] = []
    writer = threading.Timer(0.3, lambda: created.append(backend.pod(namespace)))
    writer.start()
    try:
        events = [e for e in backend.client().watch_unbound_pods(version, 4) if e.type == "BOOKMARK" or e.object["metadata"].get("namespace") == namespace]
    finally:
        writer.join()
    assert [e.type for e in events][:2] == ["ADDED", "BOOKMARK"] and {e.type for e in events[1:]} == {"BOOKMARK"}, events
    assert events[0].object["metadata"]["name"] == created[0]["metadata"]["name"]
    for bookmark in events[1:]:
        assert (bookmark.object["kind"], bookmark.object["apiVersion"]) == ("Pod", "v1")
        assert "annotations" not in bookmark.object["metadata"] and "name" not in bookmark.object["metadata"]
        assert int(bookmark.resource_version) >= int(created[0]["metadata"]["resourceVersion"])


def test_a_version_older_than_the_servers_history_is_refused_with_410(backend: Backend) -> None:
    """A watch resumed from a version the server no longer has answers 200 with one ERROR event
    (410 Expired), and Joiner's adapter raises WatchExpired for it; a list continued from a
    compacted page answers 410 with a token that continues at the latest version."""
    namespace = backend.namespace()
    names = sorted(backend.pod(namespace)["metadata"]["name"] for _ in range(3))
    first = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": "1"})
    old = first["metadata"]["resourceVersion"]
    later = backend.pod(namespace)["metadata"]["name"]  # a change after the saved version
    with backend.history_forgotten() as server:
        refused = server.watch(f"/api/v1/namespaces/{namespace}/pods", resourceVersion=old, timeoutSeconds="2", allowWatchBookmarks="true")
        assert [e["type"] for e in refused] == ["ERROR"], refused
        status = refused[0]["object"]
        assert {k: status[k] for k in ("kind", "apiVersion", "metadata", "status", "reason", "code")} == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "reason": "Expired",
            "code": 410,
        }
        assert re.fullmatch(rf"too old resource version: {old} \(\d+\)", status["message"]), status["message"]
        client = server.client()
        with pytest.raises(WatchExpired, match="too old resource version"):
            list(client.changes_since("pods", old))
        with pytest.raises(WatchExpired, match="too old resource version"):
            list(client.watch_unbound_pods(old, 2))
        continued = server.call("GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": "1", "continue": first["metadata"]["continue"]})
        assert status_of(continued) == (410, "Expired", CONTINUE_EXPIRED)
        rest = server.ok("GET", f"/api/v1/namespaces/{namespace}/pods", query={"limit": "10", "continue": continued.body["metadata"]["continue"]})
        assert [p["metadata"]["name"] for p in rest["items"]] == sorted(n for n in [*names, later] if n > names[0])


class _Kube:
    """The real adapter's lists; its changes are ``changes`` when given (else the adapter's),
    and each resumed version and refusal is recorded."""

    def __init__(self, client: KubernetesClient, changes: list[WatchEvent] | None = None) -> None:
        self.client, self.changes = client, changes
        self.resumed: list[tuple[str, str]] = []
        self.refused: list[str] = []

    def list_pages(self, resource: str) -> Iterator[tuple[list[JsonDict], str]]:
        return self.client.list_pages(resource)

    def changes_since(self, resource: str, resource_version: str) -> Iterator[WatchEvent]:
        self.resumed.append((resource, resource_version))
        if self.changes is not None:
            yield from self.changes if resource == "pods" else []
            return
        try:
            yield from self.client.changes_since(resource, resource_version, idle_seconds=1.0)
        except WatchExpired:
            self.refused.append(resource)
            raise


def _read(cache: ClusterCache, kube: _Kube) -> ClusterRead:
    return cache.read(cast(KubernetesPort, kube), {}, _pod, _node)


def test_a_watch_list_ends_its_initial_events_with_a_bookmark(backend: Backend) -> None:
    """``sendInitialEvents=true`` (with ``resourceVersionMatch=NotOlderThan``): the current
    objects, then a BOOKMARK at their version annotated as the end of the initial events. Joiner's
    adapter reads that line as a bookmark, and the cluster state moves its version on it and
    changes nothing else."""
    namespace = backend.namespace()
    path = f"/api/v1/namespaces/{namespace}/pods"
    created = [backend.pod(namespace) for _ in range(2)]
    cache, kube = ClusterCache(), _Kube(backend.client())
    listed = _read(cache, kube)
    events = backend.watch(path, sendInitialEvents="true", resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true", timeoutSeconds="1")
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", name) for name in sorted(p["metadata"]["name"] for p in created)
    ] + [("BOOKMARK", None)]
    bookmark = events[-1]["object"]
    version = bookmark["metadata"]["resourceVersion"]
    assert (bookmark["kind"], bookmark["apiVersion"], bookmark["metadata"]["annotations"]) == ("Pod", "v1", {"k8s.io/initial-events-end": "true"})
    assert int(version) >= max(int(p["metadata"]["resourceVersion"]) for p in created)
    event = _watch_event("/api/v1/pods", "Pod", "v1", json.dumps(events[-1]).encode(), trim=True)
    assert (event.type, event.resource_version) == ("BOOKMARK", version)

    kube.changes = [event]
    caught_up = _read(cache, kube)
    assert caught_up.how == {"pods": "changes", "nodes": "changes"} and caught_up.pods == listed.pods
    _read(cache, kube)
    assert ("pods", version) in kube.resumed[-2:]  # the next read resumes from the bookmark's version (Nodes are read beside pods)

    refused = backend.call("GET", path, query={"watch": "true", "sendInitialEvents": "true", "timeoutSeconds": "1"})
    assert status_of(refused) == (
        422,
        "Invalid",
        ('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan'),
    )


def test_the_cluster_state_lists_again_when_its_version_is_refused(real_kube: RealKube) -> None:
    """End to end on the real server: a container's cluster state saved a version, the next read
    reaches an API server that no longer has it (etcd compacted, a watch cache built since): the
    resume is refused (410), the state lists again and equals a fresh list, and then resumes."""
    main = Backend("real", real_kube.url, real_kube.cluster.identities[ADMIN].token, real_kube.cluster.ca_file, real_kube)
    namespace = main.namespace()
    doomed = [main.pod(namespace)["metadata"]["name"] for _ in range(2)]
    cache, kube = ClusterCache(), _Kube(main.client())
    assert _read(cache, kube).how == {"pods": "list", "nodes": "list"}
    main.ok("DELETE", f"/api/v1/namespaces/{namespace}/pods/{doomed[0]}", {"gracePeriodSeconds": 0})
    added = main.pod(namespace, node="somewhere")["metadata"]["name"]
    main.node()
    with main.history_forgotten() as peer:
        again_kube = _Kube(peer.client())
        again = _read(cache, again_kube)
        assert again.how == {"pods": "list", "nodes": "list"} and sorted(again_kube.refused) == ["nodes", "pods"]
        fresh = _read(ClusterCache(), _Kube(peer.client()))
        assert (again.pods, again.nodes) == (fresh.pods, fresh.nodes)
        kept = {e.pod.key for e in again.pods}
        assert f"{namespace}/{added}" in kept and f"{namespace}/{doomed[1]}" in kept and f"{namespace}/{doomed[0]}" not in kept
        assert _read(cache, again_kube).how == {"pods": "changes", "nodes": "changes"}
    main.close()


# ------------------------------------------------------------------ Joiner's adapter, call by call


def test_adapter_reads(backend: Backend) -> None:
    namespace = backend.namespace()
    client = backend.client(page_size=2)
    node = backend.node()
    node_name = node["metadata"]["name"]
    on_node = sorted(backend.pod(namespace, node=node_name)["metadata"]["name"] for _ in range(3))
    unbound = backend.pod(namespace)["metadata"]["name"]
    assert sorted(p["metadata"]["name"] for p in client.list_pods_on_node(node_name)) == on_node
    assert unbound in {p["metadata"]["name"] for p in client.list_pods(field_selector="spec.nodeName=")}
    pods, version = client.list_unbound_pods()
    assert unbound in {p["metadata"]["name"] for p in pods} and int(version) > 0
    assert [n["metadata"]["name"] for n in client.iter_nodes(label_selector=f"contract={backend.label}")] == [node_name]
    assert node_name in {n["metadata"]["name"] for n in client.list_nodes()}
    got = client.get_node(node_name)
    assert got is not None and (got["kind"], got["metadata"]["uid"]) == ("Node", node["metadata"]["uid"])
    assert client.get_node("no-such-node") is None
    pages = list(client.list_pages("pods"))
    assert len(pages) >= 2 and all(v == pages[0][1] for _, v in pages)
    for method in (
        "list_events",
        "list_daemonsets",
        "list_pdbs",
        "list_volume_objects",
        "list_node_pools",
        "list_node_classes",
        "list_runtime_classes",
        "list_node_claims",
        "list_node_overlays",
    ):
        assert isinstance(getattr(client, method)(), list), method
    unschedulable = backend.pod(namespace)["metadata"]["name"]
    backend.ok(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{unschedulable}/status",
        {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/0 nodes are available"}]}},
        content_type=MERGE,
    )
    pending = {p["metadata"]["name"] for p in client.list_pending_pods() if p["metadata"]["namespace"] == namespace}
    assert pending == {unschedulable}
    pool = backend.node_pool()
    assert pool["metadata"]["name"] in {p["metadata"]["name"] for p in client.list_node_pools()}
    assert int(client.plan_input_version("nodepools")) > 0 and int(client.plan_input_version("nodeclasses")) > 0


def test_adapter_node_writes(backend: Backend) -> None:
    client = backend.client()
    node = backend.node()
    name = node["metadata"]["name"]
    patched = client.patch_node(name, {"spec": {"unschedulable": True, "taints": [{"key": "joiner.dev/disrupted", "effect": "NoSchedule"}]}})
    assert patched["spec"]["unschedulable"] is True and patched["kind"] == "Node"
    with pytest.raises(KubernetesError) as stale:
        client.patch_node(name, {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"], "labels": {"x": "y"}}})
    assert stale.value.status == 409
    assert client.set_node_finalizer(name, "joiner.dev/termination", True)
    assert client.set_node_finalizer(name, "joiner.dev/termination", False)
    assert client.set_node_finalizer("no-such-node", "joiner.dev/termination", True) is False
    assert client.delete_node(name, uid="00000000-0000-0000-0000-000000000000") is False
    assert client.delete_node(name, uid=node["metadata"]["uid"]) is True
    assert client.delete_node(name) is True  # already gone
    with pytest.raises(KubernetesError) as invalid:
        client.patch_node(backend.node()["metadata"]["name"], {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}})
    assert invalid.value.status == 422


def test_adapter_pod_writes_and_events(backend: Backend) -> None:
    client = backend.client()
    namespace = backend.namespace()
    free = backend.pod(namespace, node="somewhere", running=True)["metadata"]["name"]
    assert client.evict_pod(namespace, free, grace_seconds=5).status == "evicted"
    guarded = backend.pod(namespace, labels={"app": "g"}, node="somewhere", running=True)["metadata"]["name"]
    backend.ok(
        "POST",
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "g"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "g"}}},
        },
    )
    backend.pdb_status(namespace, "g", expected=1, healthy=1, desired=1)
    blocked = client.evict_pod(namespace, guarded)
    assert blocked.status == "blocked" and "disruption budget" in blocked.message
    assert client.evict_pod(namespace, "nope").status == "gone"
    client.delete_pod(namespace, guarded, grace_seconds=0)
    client.delete_pod(namespace, guarded)  # already gone: fine

    waiting = backend.pod(namespace)
    waiting_name, waiting_uid = waiting["metadata"]["name"], waiting["metadata"]["uid"]
    assert client.nominate_pod(namespace, waiting_name, str(uuid.uuid4()), "elsewhere") is False  # re-created under the name
    assert client.nominate_pod(namespace, waiting_name, waiting_uid, "registering") is True
    nominated = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods/{waiting_name}")
    assert nominated["status"]["nominatedNodeName"] == "registering" and nominated["metadata"]["uid"] == waiting_uid
    assert client.nominate_pod(namespace, "nope", waiting_uid, "registering") is False
    assert backend.call("GET", f"/api/v1/namespaces/{namespace}/pods/{guarded}").status == 404

    involved = backend.ok("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    pod = backend.pod(namespace)
    pod.setdefault("kind", "Pod")
    pod.setdefault("apiVersion", "v1")
    del involved
    client.create_event(pod, "Nominated", "planned onto a new node")
    client.create_event(pod, "Nominated", "planned onto a new node")  # the same again: 409 then a patch
    events = [e for e in backend.ok("GET", f"/api/v1/namespaces/{namespace}/events")["items"] if e["involvedObject"].get("name") == pod["metadata"]["name"]]
    assert len(events) == 1 and events[0]["reason"] == "Nominated" and events[0]["source"] == {"component": "joiner"}
    node = backend.node()
    node.setdefault("kind", "Node")
    client.create_event(node, "Launched", "i-0123")  # a cluster-scoped object's event goes to "default"
    assert any(e["involvedObject"].get("name") == node["metadata"]["name"] for e in backend.ok("GET", "/api/v1/namespaces/default/events")["items"])


def test_adapter_custom_resources(backend: Backend) -> None:
    client = backend.client()
    pool = backend.node_pool()
    pool_name = pool["metadata"]["name"]
    client.patch_node_pool_status(
        pool_name, {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    )
    stored = backend.ok("GET", f"/apis/joiner.dev/v1/nodepools/{pool_name}")
    assert stored["status"]["conditions"][0]["status"] == "True" and stored["spec"] == pool["spec"]
    assert stored["metadata"]["generation"] == pool["metadata"]["generation"]
    client.patch_node_pool_status("no-such-pool", {"conditions": []})
    client.patch_node_class_status("no-such-class", {"conditions": []})
    client.patch_node_overlay_status("no-such-overlay", {"conditions": []})
    ready = [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    node_class = next(obj for _, obj in manifests(ROOT / "manifests" / "examples" / "nodeclass-default.yaml"))
    node_class["metadata"] = {"name": backend.unique("class")}
    backend.ok("POST", "/apis/joiner.dev/v1/nodeclasses", node_class, query={"fieldValidation": "Strict"})
    client.patch_node_class_status(node_class["metadata"]["name"], {"conditions": ready})
    stored_class = backend.ok("GET", f"/apis/joiner.dev/v1/nodeclasses/{node_class['metadata']['name']}")
    assert stored_class["status"]["conditions"][0]["status"] == "True" and stored_class["spec"] == node_class["spec"]
    overlay_name = backend.unique("overlay")
    overlay = {
        "apiVersion": "joiner.dev/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": overlay_name},
        "spec": {"weight": 10, "requirements": [{"key": "joiner.dev/instance-family", "operator": "In", "values": ["m5"]}], "priceAdjustment": "-28%"},
    }
    backend.ok("POST", "/apis/joiner.dev/v1alpha1/nodeoverlays", overlay, query={"fieldValidation": "Strict"})
    client.patch_node_overlay_status(overlay_name, {"conditions": ready, "instanceTypeCount": 3})
    stored_overlay = backend.ok("GET", f"/apis/joiner.dev/v1alpha1/nodeoverlays/{overlay_name}")
    assert stored_overlay["status"]["instanceTypeCount"] == 3 and stored_overlay["spec"]["weight"] == 10
    assert overlay_name in {o["metadata"]["name"] for o in client.list_node_overlays()}

    name = backend.unique("claim")
    claim = {"apiVersion": "joiner.dev/v1", "kind": "NodeClaim", "metadata": {"name": name}, "spec": {"nodePool": pool_name}}
    created = client.create_node_claim(claim)
    assert created is not None and created["metadata"]["name"] == name
    assert client.create_node_claim(claim) is None  # exists
    got = client.get_node_claim(name)
    assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert client.get_node_claim("no-such-claim") is None
    assert client.patch_node_claim(name, {"status": {"instanceID": "i-0123"}}, status=True)
    assert backend.ok("GET", f"/apis/joiner.dev/v1/nodeclaims/{name}")["status"]["instanceID"] == "i-0123"
    assert client.patch_node_claim(name, {"metadata": {"labels": {"a": "b"}}})
    assert client.patch_node_claim("no-such-claim", {"metadata": {"labels": {"a": "b"}}}) is False
    assert name in {c["metadata"]["name"] for c in client.list_node_claims()}
    assert client.delete_node_claim(name, uid="00000000-0000-0000-0000-000000000000") is False
    assert client.delete_node_claim(name, uid=created["metadata"]["uid"]) is True
    assert client.delete_node_claim(name) is True


def test_adapter_watches(backend: Backend) -> None:
    client = backend.client()
    namespace = backend.namespace()
    _, version = client.list_unbound_pods()
    pod = backend.pod(namespace)["metadata"]["name"]
    seen = [
        (e.type, e.object["metadata"]["name"])
        for e in client.watch_unbound_pods(version, 2)
        if e.type != "BOOKMARK" and e.object["metadata"].get("namespace") == namespace
    ]
    assert seen == [("ADDED", pod)]

    pools_version = client.plan_input_version("nodepools")
    pool = backend.node_pool()
    backend.ok("PATCH", f"/apis/joiner.dev/v1/nodepools/{pool['metadata']['name']}", {"spec": {"weight": 5}}, content_type=MERGE)
    changes = [
        (e.type, e.object["spec"].get("weight"))
        for e in client.watch_plan_inputs("nodepools", pools_version, 2)
        if e.type != "BOOKMARK" and e.object["metadata"]["name"] == pool["metadata"]["name"]
    ]
    assert changes == [("ADDED", None), ("MODIFIED", 5)]

    classes_version = client.plan_input_version("nodeclasses")
    node_class = next(obj for _, obj in manifests(ROOT / "manifests" / "examples" / "nodeclass-default.yaml"))
    node_class["metadata"] = {"name": backend.unique("class")}
    backend.ok("POST", "/apis/joiner.dev/v1/nodeclasses", node_class)
    assert [
        (e.type, e.object["kind"])
        for e in client.watch_plan_inputs("nodeclasses", classes_version, 1)
        if e.type != "BOOKMARK" and e.object["metadata"]["name"] == node_class["metadata"]["name"]
    ] == [("ADDED", "NodeClass")]

    pods_version = list(client.list_pages("pods"))[0][1]
    changed = backend.pod(namespace)["metadata"]["name"]
    assert [
        (e.type, e.object["metadata"]["name"])
        for e in client.changes_since("pods", pods_version, idle_seconds=1.0)
        if e.type != "BOOKMARK" and e.object["metadata"].get("namespace") == namespace
    ] == [("ADDED", changed)]

    pages = list(client.list_pages("nodes"))
    nodes_version = pages[0][1]
    node = backend.node()["metadata"]["name"]
    backend.ok("DELETE", f"/api/v1/nodes/{node}")
    caught_up = [
        (e.type, e.object["metadata"]["name"])
        for e in client.changes_since("nodes", nodes_version, idle_seconds=1.0)
        if e.type != "BOOKMARK" and e.object["metadata"]["name"] == node
    ]
    assert caught_up == [("ADDED", node), ("DELETED", node)]

    # the watcher's nodes stream: Joiner's Nodes until its registration labels them
    joining_version = client.plan_input_version("nodes")
    joining = backend.unique("joining")
    backend.ok(
        "POST",
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": joining, "labels": {"contract": backend.label, "joiner.dev/nodepool": "p"}}},
    )
    backend.node()  # not Joiner's: not in the stream
    backend.ok("PATCH", f"/api/v1/nodes/{joining}", {"metadata": {"labels": {"joiner.dev/registered": "true"}}}, content_type=MERGE)
    stream = [
        (e.type, e.object["metadata"]["name"])
        for e in client.watch_plan_inputs("nodes", joining_version, 2)
        if e.type != "BOOKMARK" and e.object["metadata"].get("labels", {}).get("contract") == backend.label
    ]
    assert stream == [("ADDED", joining), ("DELETED", joining)]
