"""In-memory fakes of the ports in :mod:`joiner.ports`, for fast service tests.

They are faithful where services depend on semantics: the state fake enforces the same
conditional writes as the DynamoDB adapter (claims created once, leases exclusive until
they expire, limit reservations atomic and idempotent per claim), the EC2 fake honours
client tokens (same token and request -> the same result; same token, different
request -> ``IdempotentParameterMismatch``) and the Kubernetes fake applies JSON merge
patches. Every fake is thread-safe so services can be driven from several threads.

Failures are scripted, never random: ``FakeKubernetes.fail(...)``, ``FakeEc2.fail(...)``
and ``FakeEc2.insufficient`` (offerings that return InsufficientInstanceCapacity).

Other helpers may append classes at the end of this module; the classes above the
``# ---- appended`` marker keep their behaviour.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from joiner.domain.model import NodeClass, OfferingKey, SelectorTerm, Taint
from joiner.domain.resources import EMPTY, Resources
from joiner.ports import (
    CapacityReservation,
    ClaimRecord,
    ClaimStateConflict,
    ClusterInfo,
    Ec2Error,
    EvictionOutcome,
    FleetError,
    FleetRequest,
    FleetResult,
    InstanceRecord,
    JsonDict,
    KubernetesError,
    LaunchedInstance,
    LaunchTemplateInfo,
    LaunchTemplateNotFound,
    LaunchTemplateRef,
    StateError,
    Subnet,
    WatchEvent,
    WatchExpired,
)

__all__ = [
    "FakeClock",
    "FakeKubernetes",
    "FakeEc2",
    "FakeState",
    "FakeQueue",
    "RecordingMetrics",
    "RecordedEvent",
    "merge_patch",
    "pod_json",
    "node_json",
    "node_pool_json",
    "node_class_json",
    "daemonset_json",
    "EPOCH",
    "FakeWorld",
    "fake_world",
    "small_catalog",
]

EPOCH = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


# ---------------------------------------------------------------- clock


class FakeClock:
    """A manual UTC clock. ``sleep`` advances it (and records the request) instead of waiting."""

    def __init__(self, start: datetime = EPOCH) -> None:
        if start.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._now = start
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def monotonic(self) -> float:
        """Seconds since the clock's epoch; a stand-in for ``time.monotonic``."""
        return (self.now() - EPOCH).total_seconds()


# ---------------------------------------------------------------- metrics


class RecordingMetrics:
    """Collects ``count(name, value, unit, **dimensions)`` calls (the observability.count signature)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, float, str, dict[str, str]]] = []
        self._lock = threading.Lock()

    def __call__(self, name: str, value: float = 1, unit: str = "Count", **dimensions: str) -> None:
        with self._lock:
            self.records.append((name, float(value), str(unit), dict(dimensions)))

    def total(self, name: str, **dimensions: str) -> float:
        return sum(v for n, v, _, d in self.records if n == name and all(d.get(k) == x for k, x in dimensions.items()))

    def values(self, name: str) -> list[float]:
        return [v for n, v, _, _ in self.records if n == name]


# ---------------------------------------------------------------- Kubernetes


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge recursively, ``None`` deletes, others replace."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedEvent:
    kind: str
    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    event_type: str


def _selector_matches(labels: Mapping[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    for part in selector.split(","):
        part = part.strip()
        if "!=" in part:
            key, value = part.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            if labels.get(key) != value:
                return False
        elif part.startswith("!"):
            if part[1:] in labels:
                return False
        elif part not in labels:
            return False
    return True


def _field_matches(obj: JsonDict, selector: str | None) -> bool:
    """Supports the field selectors Joiner uses: spec.nodeName, status.phase, metadata.namespace/name."""
    if not selector:
        return True
    for part in selector.split(","):
        negate = "!=" in part
        key, value = part.split("!=" if negate else "=", 1)
        node: Any = obj
        for step in key.strip().split("."):
            node = node.get(step) if isinstance(node, dict) else None
        actual = "" if node is None else str(node)
        if (actual == value.strip()) == negate:
            return False
    return True


class FakeKubernetes:
    """An in-memory API server holding raw JSON objects (what the real adapter returns).

    Objects are deep-copied in and out, so callers cannot mutate stored state by accident.
    ``fail(method, error, times)`` makes the next calls of one method raise.
    """

    KINDS = ("pods", "nodes", "daemonsets", "pdbs", "node_pools", "node_classes", "runtime_classes", "node_claims", "volume_objects", "node_overlays")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[str, dict[str, JsonDict]] = {kind: {} for kind in self.KINDS}
        self.events: list[RecordedEvent] = []
        self.node_patches: list[tuple[str, JsonDict]] = []
        self.nominations: list[tuple[str, str]] = []
        self.status_patches: list[tuple[str, JsonDict]] = []
        self.class_status_patches: list[tuple[str, JsonDict]] = []
        self.overlay_status_patches: list[tuple[str, JsonDict]] = []
        self.calls: list[str] = []
        self._failures: dict[str, list[Exception]] = {}
        self._uids = itertools.count(1)
        self._versions = itertools.count(1)

    def _deletion_stamp(self) -> str:
        """When a deletion held by finalizers is recorded: the fake's clock when it has one."""
        clock = getattr(self, "clock", None)
        return (clock.now() if clock is not None else EPOCH).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _next_version(self) -> str:
        """Every write bumps one global counter, as the API server's resourceVersion does."""
        return str(next(self._versions))

    # -- setup helpers (not part of the port)

    def add(self, kind: str, obj: JsonDict) -> JsonDict:
        """Store an object under ``kind`` (one of KINDS), filling metadata.uid and creationTimestamp."""
        if kind not in self._objects:
            raise ValueError(f"unknown kind {kind!r}")
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        with self._lock:
            meta.setdefault("uid", f"uid-{next(self._uids):06d}")
            meta.setdefault("creationTimestamp", EPOCH.strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["resourceVersion"] = self._next_version()
            self._objects[kind][self._key(meta)] = obj
        return copy.deepcopy(obj)

    def remove(self, kind: str, namespace: str | None, name: str) -> None:
        with self._lock:
            self._objects[kind].pop(f"{namespace}/{name}" if namespace else name, None)

    def get(self, kind: str, namespace: str | None, name: str) -> JsonDict | None:
        with self._lock:
            found = self._objects[kind].get(f"{namespace}/{name}" if namespace else name)
            return copy.deepcopy(found) if found is not None else None

    def bind(self, namespace: str, name: str, node_name: str) -> None:
        """What kube-scheduler does: set spec.nodeName and PodScheduled=True."""
        with self._lock:
            pod = self._objects["pods"][f"{namespace}/{name}"]
            pod["metadata"]["resourceVersion"] = self._next_version()
            pod.setdefault("spec", {})["nodeName"] = node_name
            pod.setdefault("status", {})["conditions"] = [{"type": "PodScheduled", "status": "True"}]

    def fail(self, method: str, error: Exception | None = None, times: int = 1) -> None:
        error = error or KubernetesError(f"{method}: injected failure", status=500)
        with self._lock:
            self._failures.setdefault(method, []).extend([error] * times)

    def events_for(self, name: str, reason: str | None = None) -> list[RecordedEvent]:
        with self._lock:
            return [e for e in self.events if e.name == name and (reason is None or e.reason == reason)]

    @staticmethod
    def _key(meta: Mapping[str, Any]) -> str:
        namespace = meta.get("namespace")
        return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])

    def _enter(self, method: str) -> None:
        with self._lock:
            self.calls.append(method)
            queue = self._failures.get(method)
            if queue:
                raise queue.pop(0)

    def _list(self, kind: str) -> list[JsonDict]:
        with self._lock:
            return [copy.deepcopy(self._objects[kind][key]) for key in sorted(self._objects[kind])]

    # -- KubernetesPort

    def list_pods(self, *, field_selector: str | None = None, label_selector: str | None = None) -> list[JsonDict]:
        self._enter("list_pods")
        return [
            pod for pod in self._list("pods") if _field_matches(pod, field_selector) and _selector_matches(pod["metadata"].get("labels") or {}, label_selector)
        ]

    def list_unbound_pods(self) -> tuple[list[JsonDict], str]:
        self._enter("list_unbound_pods")
        with self._lock:
            version = str(int(self._next_version()) - 1)
        return [pod for pod in self._list("pods") if not (pod.get("spec") or {}).get("nodeName")], version

    def watch_unbound_pods(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """No change stream in memory: the watcher is tested against the emulator's real watch."""
        self._enter("watch_unbound_pods")
        return iter(())

    def plan_input_version(self, resource: str) -> str:
        self._enter("plan_input_version")
        return "1"

    def watch_plan_inputs(self, resource: str, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        self._enter("watch_plan_inputs")
        return iter(())

    def list_pending_pods(self) -> list[JsonDict]:
        self._enter("list_pending_pods")
        result = []
        for pod in self._list("pods"):
            if (pod.get("spec") or {}).get("nodeName"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if any(ref.get("kind") == "DaemonSet" for ref in pod["metadata"].get("ownerReferences") or []):
                continue
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable" for c in conditions):
                result.append(pod)
        return result

    def list_pods_on_node(self, node_name: str) -> list[JsonDict]:
        self._enter("list_pods_on_node")
        return [pod for pod in self._list("pods") if (pod.get("spec") or {}).get("nodeName") == node_name]

    def list_nodes(self) -> list[JsonDict]:
        self._enter("list_nodes")
        return self._list("nodes")

    def list_pages(self, resource: str) -> Iterator[tuple[list[JsonDict], str]]:
        self._enter(f"list_pages({resource})")
        with self._lock:
            version = str(int(self._next_version()) - 1)
        yield self._list({"nodeclaims": "node_claims"}.get(resource, resource)), version

    def changes_since(self, resource: str, resource_version: str) -> Iterator[WatchEvent]:
        """No change log in memory: every read lists again (the emulator and the stand-in
        API server test the resumed path)."""
        raise WatchExpired(f"the fake keeps no history of {resource}")

    def iter_nodes(self, *, label_selector: str | None = None) -> Iterator[JsonDict]:
        self._enter("iter_nodes")
        return iter([node for node in self._list("nodes") if _selector_matches(node["metadata"].get("labels") or {}, label_selector)])

    def get_node(self, name: str) -> JsonDict | None:
        self._enter("get_node")
        return self.get("nodes", None, name)

    def list_daemonsets(self) -> list[JsonDict]:
        self._enter("list_daemonsets")
        return self._list("daemonsets")

    def list_pdbs(self) -> list[JsonDict]:
        self._enter("list_pdbs")
        return self._list("pdbs")

    def list_volume_objects(self) -> list[JsonDict]:
        self._enter("list_volume_objects")
        return self._list("volume_objects")

    def list_node_pools(self) -> list[JsonDict]:
        self._enter("list_node_pools")
        return self._list("node_pools")

    def list_node_classes(self) -> list[JsonDict]:
        self._enter("list_node_classes")
        return self._list("node_classes")

    def list_runtime_classes(self) -> list[JsonDict]:
        self._enter("list_runtime_classes")
        return self._list("runtime_classes")

    def list_node_overlays(self) -> list[JsonDict]:
        self._enter("list_node_overlays")
        return self._list("node_overlays")

    def patch_node_overlay_status(self, name: str, status: JsonDict) -> None:
        self._enter("patch_node_overlay_status")
        with self._lock:
            overlay = self._objects["node_overlays"].get(name)
            self.overlay_status_patches.append((name, copy.deepcopy(status)))
            if overlay is not None:
                overlay["status"] = merge_patch(overlay.get("status") or {}, status)

    def patch_node(self, name: str, patch: JsonDict) -> JsonDict:
        self._enter("patch_node")
        with self._lock:
            node = self._objects["nodes"].get(name)
            if node is None:
                raise KubernetesError(f"nodes {name!r} not found", status=404)
            patched = merge_patch(node, patch)
            patched["metadata"]["resourceVersion"] = self._next_version()
            self._objects["nodes"][name] = patched
            self.node_patches.append((name, copy.deepcopy(patch)))
            return copy.deepcopy(patched)

    def set_node_finalizer(self, name: str, finalizer: str, present: bool) -> bool:
        self._enter("set_node_finalizer")
        with self._lock:
            node = self._objects["nodes"].get(name)
            if node is None:
                return False
            meta = node.setdefault("metadata", {})
            finalizers = [f for f in meta.get("finalizers") or [] if f != finalizer] + ([finalizer] if present else [])
            meta["finalizers"] = finalizers
            meta["resourceVersion"] = self._next_version()
            if not finalizers and meta.get("deletionTimestamp"):
                self._objects["nodes"].pop(name)  # the API server removes it with its last finalizer
            return True

    def delete_node(self, name: str, uid: str | None = None) -> bool:
        self._enter("delete_node")
        with self._lock:
            node = self._objects["nodes"].get(name)
            if node is not None and uid and (node.get("metadata") or {}).get("uid") != uid:
                return False  # the API's 409: a Node re-created under this name is someone else's
            if node is not None and (node.get("metadata") or {}).get("finalizers"):
                node["metadata"].setdefault("deletionTimestamp", self._deletion_stamp())  # held until they are removed
                return True
            self._objects["nodes"].pop(name, None)
            return True

    def evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> EvictionOutcome:
        self._enter("evict_pod")
        with self._lock:
            if self._objects["pods"].pop(f"{namespace}/{name}", None) is None:
                return EvictionOutcome("gone", "not found")
        return EvictionOutcome("evicted")

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        self._enter("delete_pod")
        with self._lock:
            self._objects["pods"].pop(f"{namespace}/{name}", None)

    def nominate_pod(self, namespace: str, name: str, uid: str, node_name: str) -> bool:
        self._enter("nominate_pod")
        with self._lock:
            pod = self._objects["pods"].get(f"{namespace}/{name}")
            if pod is None or (pod.get("metadata") or {}).get("uid") != uid:
                return False
            pod.setdefault("status", {})["nominatedNodeName"] = node_name
            pod["metadata"]["resourceVersion"] = self._next_version()
            self.nominations.append((f"{namespace}/{name}", node_name))
            return True

    def create_event(self, involved: JsonDict, reason: str, message: str, event_type: str = "Normal") -> None:
        self._enter("create_event")
        meta = involved.get("metadata") or {}
        with self._lock:
            self.events.append(
                RecordedEvent(
                    kind=str(involved.get("kind", "")),
                    namespace=str(meta.get("namespace", "")),
                    name=str(meta.get("name", "")),
                    uid=str(meta.get("uid", "")),
                    reason=reason,
                    message=message,
                    event_type=event_type,
                )
            )

    def patch_node_class_status(self, name: str, status: JsonDict) -> None:
        self._enter("patch_node_class_status")
        with self._lock:
            node_class = self._objects["node_classes"].get(name)
            if node_class is None:
                return
            self._objects["node_classes"][name] = merge_patch(node_class, {"status": status, "metadata": {"resourceVersion": self._next_version()}})
            self.class_status_patches.append((name, copy.deepcopy(status)))

    def list_node_claims(self) -> list[JsonDict]:
        self._enter("list_node_claims")
        return self._list("node_claims")

    def get_node_claim(self, name: str) -> JsonDict | None:
        self._enter("get_node_claim")
        with self._lock:
            found = self._objects["node_claims"].get(name)
            return copy.deepcopy(found) if found is not None else None

    def create_node_claim(self, obj: JsonDict) -> JsonDict | None:
        self._enter("create_node_claim")
        with self._lock:
            name = obj["metadata"]["name"]
            if name in self._objects["node_claims"]:
                return None
            stored = copy.deepcopy(dict(obj))
            stored.pop("status", None)  # the status subresource is written separately
            stored["metadata"] = dict(stored["metadata"], uid=f"uid-{next(self._uids)}", resourceVersion=self._next_version())
            self._objects["node_claims"][name] = stored
            return copy.deepcopy(stored)

    def patch_node_claim(self, name: str, patch: JsonDict, *, status: bool = False) -> bool:
        self._enter("patch_node_claim")
        with self._lock:
            current = self._objects["node_claims"].get(name)
            if current is None:
                return False
            body = {"status": patch.get("status")} if status else {k: v for k, v in patch.items() if k != "status"}
            patched = merge_patch(current, dict(body, metadata={**(body.get("metadata") or {}), "resourceVersion": self._next_version()}))
            if patched["metadata"].get("deletionTimestamp") and not patched["metadata"].get("finalizers"):
                del self._objects["node_claims"][name]  # the API server removes it with its last finalizer
            else:
                self._objects["node_claims"][name] = patched
            return True

    def delete_node_claim(self, name: str, uid: str | None = None) -> bool:
        self._enter("delete_node_claim")
        with self._lock:
            current = self._objects["node_claims"].get(name)
            if current is None:
                return True
            if uid and current["metadata"].get("uid") != uid:
                return False
            if current["metadata"].get("finalizers"):
                current["metadata"].setdefault("deletionTimestamp", self._deletion_stamp())  # held until they are removed
                return True
            del self._objects["node_claims"][name]
            return True

    def patch_node_pool_status(self, name: str, status: JsonDict) -> None:
        self._enter("patch_node_pool_status")
        with self._lock:
            pool = self._objects["node_pools"].get(name)
            if pool is None:
                raise KubernetesError(f"nodepools.joiner.dev {name!r} not found", status=404)
            self._objects["node_pools"][name] = merge_patch(pool, {"status": status, "metadata": {"resourceVersion": self._next_version()}})
            self.status_patches.append((name, copy.deepcopy(status)))


# ---------------------------------------------------------------- EC2


def _term_matches(term: SelectorTerm, resource_id: str, tags: Mapping[str, str], name: str | None = None) -> bool:
    if term.id is not None and term.id != resource_id:
        return False
    if term.name is not None and term.name != name:
        return False
    for key, value in term.tags:
        if key not in tags or (value not in ("*", "") and tags[key] != value):
            return False
    return term.id is not None or term.name is not None or bool(term.tags)


class FakeEc2:
    """EC2/EKS as the provisioning path sees them.

    ``insufficient``: offerings (type, zone, capacity type) that fail with
    InsufficientInstanceCapacity. ``create_fleet`` tries overrides in priority order
    (then as given) and launches the first that has capacity, reporting errors for the
    ones before it, as an instant fleet with one target does.
    """

    def __init__(
        self,
        cluster_name: str = "test-cluster",
        zones: Sequence[str] = ("us-east-1a", "us-east-1b", "us-east-1c"),
        clock: FakeClock | None = None,
        discovery_tag: tuple[str, str] | None = None,
    ) -> None:
        self.cluster_name = cluster_name
        self.clock = clock or FakeClock()
        tag_key, tag_value = discovery_tag or ("joiner.dev/discovery", cluster_name)
        self.subnets: list[Subnet] = [
            Subnet(id=f"subnet-{index:08x}", zone=zone, available_ips=250, tags={tag_key: tag_value}) for index, zone in enumerate(zones, start=1)
        ]
        self.security_groups: list[tuple[str, str, dict[str, str]]] = [("sg-00000001", "nodes", {tag_key: tag_value})]
        #: the only role/profile launches may pass (the stack's node role), None: any
        self.node_role: str | None = None
        #: AL2023 variants (nvidia, neuron) whose alias lookup answers AMINotFound
        self.missing_variants: set[str] = set()
        self.insufficient: set[OfferingKey] = set()
        #: active capacity reservations with their tags (resolve_capacity_reservations)
        self.capacity_reservations: list[tuple[CapacityReservation, dict[str, str]]] = []
        #: (instance type, zone) -> current spot price, as DescribeSpotPriceHistory reports it
        self.spot_price_table: dict[tuple[str, str], float] = {}
        self.instances: dict[str, InstanceRecord] = {}
        self.fleet_requests: list[FleetRequest] = []
        self.launch_templates: dict[tuple[str, str], LaunchTemplateRef] = {}
        self.template_inputs: dict[str, dict[str, Any]] = {}
        #: template id -> (cluster, info): what list_launch_templates sees (gc)
        self.template_records: dict[str, tuple[str, LaunchTemplateInfo]] = {}
        self.deleted_templates: list[str] = []
        self.terminated: list[str] = []
        self.calls: list[str] = []
        self._tokens: dict[str, tuple[FleetRequest, FleetResult]] = {}
        self._failures: dict[str, list[Exception]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()

    def fail(self, method: str, error: Exception | None = None, times: int = 1) -> None:
        error = error or Ec2Error(f"{method}: Rate exceeded", code="RequestLimitExceeded")
        with self._lock:
            self._failures.setdefault(method, []).extend([error] * times)

    def _enter(self, method: str) -> None:
        with self._lock:
            self.calls.append(method)
            queue = self._failures.get(method)
            if queue:
                raise queue.pop(0)

    def resolve_subnets(self, terms: Sequence[SelectorTerm]) -> list[Subnet]:
        self._enter("resolve_subnets")
        return sorted((s for s in self.subnets if any(_term_matches(t, s.id, s.tags) for t in terms)), key=lambda s: s.id)

    def resolve_capacity_reservations(self, terms: Sequence[SelectorTerm]) -> list[CapacityReservation]:
        self._enter("resolve_capacity_reservations")
        return sorted(
            (r for r, tags in self.capacity_reservations if any(_term_matches(t, r.id, tags) and (not t.owner or t.owner == r.owner_id) for t in terms)),
            key=lambda r: r.id,
        )

    def resolve_security_groups(self, terms: Sequence[SelectorTerm]) -> list[str]:
        self._enter("resolve_security_groups")
        return sorted(gid for gid, name, tags in self.security_groups if any(_term_matches(t, gid, tags, name) for t in terms))

    def instance_profile(self, node_class: NodeClass) -> str:
        self._enter("instance_profile")
        profile = node_class.instance_profile or node_class.role or self.node_role
        if self.node_role and profile != self.node_role:
            raise Ec2Error(
                f"NodeClass {node_class.name}: {profile!r} is not allowed: Joiner may pass only its node role {self.node_role}", code="InvalidNodeClass"
            )
        return profile or "JoinerNodeRole"

    def resolve_ami(self, node_class: NodeClass, kubernetes_version: str, arch: str, variant: str = "standard") -> str:
        self._enter("resolve_ami")
        if variant in self.missing_variants:
            raise Ec2Error(f"SSM parameter for the {variant} {arch} AMI does not exist", code="AMINotFound")
        for term in node_class.ami_selector_terms:
            if term.id:
                return term.id
        suffix = "" if variant == "standard" else f"-{variant}"
        return f"ami-{arch}{suffix}-{kubernetes_version.replace('.', '')}"

    def ensure_launch_template(
        self,
        node_class: NodeClass,
        arch: str,
        cluster: ClusterInfo,
        security_groups: Sequence[str],
        ami_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        capacity_reservation_id: str | None = None,
        tenancy: str = "default",
        reservation_type: str = "default",
    ) -> LaunchTemplateRef:
        self._enter("ensure_launch_template")
        inputs = (
            node_class.name,
            arch,
            tuple(security_groups),
            ami_id,
            tuple(sorted((labels or {}).items())),
            tuple(taints),
            capacity_reservation_id,
            reservation_type,
            tenancy,
        )
        digest = hashlib.sha256(repr(inputs).encode()).hexdigest()[:17]
        ref = LaunchTemplateRef(id=f"lt-{digest}", name=f"joiner/{cluster.name}/{node_class.name}/{arch}")
        with self._lock:
            self.launch_templates[(node_class.name, arch)] = ref
            if ref.id not in self.template_records:
                self.template_records[ref.id] = (cluster.name, LaunchTemplateInfo(ref, node_class.name, self.clock.now()))
            self.template_inputs[ref.id] = {
                "labels": dict(labels or {}),
                "taints": tuple(taints),
                "ami": ami_id,
                "security_groups": tuple(security_groups),
                "capacity_reservation_id": capacity_reservation_id,
                "reservation_type": reservation_type,
                "tenancy": tenancy,
            }
        return ref

    def create_fleet(self, request: FleetRequest) -> FleetResult:
        self._enter("create_fleet")
        with self._lock:
            self.fleet_requests.append(request)
            template_id = request.launch_template.id
            if template_id in self.deleted_templates and template_id not in self.template_records:
                raise LaunchTemplateNotFound(
                    f"ec2 CreateFleet failed: InvalidLaunchTemplateId.NotFound: {template_id}",
                    "InvalidLaunchTemplateId.NotFound",
                    request.launch_template,
                )
            seen = self._tokens.get(request.client_token)
            if seen is not None:
                if seen[0] != request:
                    raise Ec2Error(f"client token {request.client_token} was used with different parameters", code="IdempotentParameterMismatch")
                return seen[1]
            ordered = sorted(enumerate(request.overrides), key=lambda item: (item[1].priority if item[1].priority is not None else float("inf"), item[0]))
            errors: list[FleetError] = []
            instances: list[LaunchedInstance] = []
            for _, override in ordered:
                key = OfferingKey(override.instance_type, override.zone, request.capacity_type)
                if key in self.insufficient:
                    errors.append(
                        FleetError(
                            code="ReservationCapacityExceeded" if request.capacity_type == "reserved" else "InsufficientInstanceCapacity",
                            message=f"We currently do not have sufficient {override.instance_type} capacity in {override.zone}.",
                            instance_type=override.instance_type,
                            zone=override.zone,
                            subnet_id=override.subnet_id,
                            capacity_type=request.capacity_type,
                        )
                    )
                    continue
                instance_id = f"i-{next(self._ids):017x}"
                template_id = (override.launch_template or request.launch_template).id
                self.instances[instance_id] = InstanceRecord(
                    instance_id=instance_id,
                    instance_type=override.instance_type,
                    zone=override.zone,
                    state="pending",
                    launch_time=self.clock.now(),
                    tags=dict(request.tags),
                    capacity_type=request.capacity_type,
                    # what the launch template says, as EC2 reports it on the instance
                    image_id=str(self.template_inputs.get(template_id, {}).get("ami", "")),
                    subnet_id=override.subnet_id,
                    security_group_ids=tuple(sorted(set(self.template_inputs.get(template_id, {}).get("security_groups", ())))),
                    capacity_reservation_id=str(self.template_inputs.get(template_id, {}).get("capacity_reservation_id") or ""),
                )
                instances.append(LaunchedInstance(instance_id, override.instance_type, override.zone, request.capacity_type, override.subnet_id))
                break
            result = FleetResult(instances=tuple(instances), errors=tuple(errors))
            self._tokens[request.client_token] = (request, result)
            return result

    def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        self._enter("terminate_instances")
        with self._lock:
            for instance_id in instance_ids:
                record = self.instances.get(instance_id)
                if record is not None:
                    self.instances[instance_id] = dataclasses.replace(record, state="shutting-down")
                self.terminated.append(instance_id)

    def add_instance(
        self, instance_id: str, instance_type: str = "c5.xlarge", zone: str = "us-east-1a", *, tags: Mapping[str, str] | None = None
    ) -> InstanceRecord:
        """A running instance Joiner launched (tagged ``joiner.dev/cluster``) unless ``tags`` says otherwise."""
        record = InstanceRecord(
            instance_id,
            instance_type,
            zone,
            "running",
            self.clock.now(),
            dict(tags) if tags is not None else {"joiner.dev/cluster": self.cluster_name},
        )
        with self._lock:
            self.instances[instance_id] = record
        return record

    def describe_instances(self, instance_ids: Sequence[str]) -> list[InstanceRecord]:
        self._enter("describe_instances")
        with self._lock:
            return [self.instances[i] for i in instance_ids if i in self.instances]

    def list_cluster_instances(self, cluster_name: str) -> list[InstanceRecord]:
        self._enter("list_cluster_instances")
        with self._lock:
            return [
                record
                for _, record in sorted(self.instances.items())
                if record.tags.get("joiner.dev/cluster") == cluster_name and record.state not in ("shutting-down", "terminated")
            ]

    def reservation_instances(self, cluster_name: str, reservation_id: str) -> list[InstanceRecord]:
        self._enter("reservation_instances")
        return [record for record in self.list_cluster_instances(cluster_name) if record.capacity_reservation_id == reservation_id]

    def add_launch_template(self, name: str, *, node_class: str = "default", created: datetime | None = None, cluster: str | None = None) -> LaunchTemplateRef:
        """Test helper: a launch template tagged for ``cluster`` (default: this fake's), created at ``created``."""
        ref = LaunchTemplateRef(id=f"lt-{hashlib.sha256(name.encode()).hexdigest()[:17]}", name=name)
        with self._lock:
            self.template_records[ref.id] = (cluster or self.cluster_name, LaunchTemplateInfo(ref, node_class, created or self.clock.now()))
        return ref

    def spot_prices(self) -> dict[tuple[str, str], float]:
        self._enter("spot_prices")
        return dict(self.spot_price_table)

    def describe_instance_types(self) -> list[dict[str, Any]]:
        """moto's copy of EC2's real DescribeInstanceTypes records."""
        self._enter("describe_instance_types")
        return list(moto_instance_types().values())

    def instance_type_zones(self) -> dict[str, list[str]]:
        """moto's copy of EC2's real offerings in the region of this fake's zones."""
        self._enter("instance_type_zones")
        return moto_instance_type_zones(self.subnets[0].zone[:-1])

    def zone_ids(self) -> dict[str, str]:
        """A zone id per subnet zone (``us-east-1a`` -> ``use1-az1``, in zone order)."""
        self._enter("zone_ids")
        zones = sorted({subnet.zone for subnet in self.subnets})
        return {zone: f"{zone[:2]}{zone.split('-')[1][0]}{zone.split('-')[2][:-1]}-az{index + 1}" for index, zone in enumerate(zones)}

    def list_launch_templates(self, cluster_name: str) -> list[LaunchTemplateInfo]:
        self._enter("list_launch_templates")
        with self._lock:
            return sorted((info for cluster, info in self.template_records.values() if cluster == cluster_name), key=lambda i: i.ref.name)

    def delete_launch_template(self, template_id: str) -> None:
        self._enter("delete_launch_template")
        with self._lock:
            if self.template_records.pop(template_id, None) is not None:
                self.deleted_templates.append(template_id)
            self.launch_templates = {key: ref for key, ref in self.launch_templates.items() if ref.id != template_id}

    def describe_cluster(self, cluster_name: str) -> ClusterInfo:
        self._enter("describe_cluster")
        return ClusterInfo(name=cluster_name, endpoint=f"https://{cluster_name}.example", certificate_authority="Q0EK", version="1.31")

    def running_instances(self) -> list[InstanceRecord]:
        with self._lock:
            return [r for _, r in sorted(self.instances.items()) if r.state not in ("shutting-down", "terminated")]


# ---------------------------------------------------------------- state


@functools.lru_cache(maxsize=1)
def moto_instance_types() -> dict[str, dict[str, Any]]:
    import gzip
    import json
    from pathlib import Path

    import moto.ec2

    path = Path(moto.ec2.__file__).parent / "resources" / "instance_types.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        records: dict[str, dict[str, Any]] = json.load(handle)
    return records


@functools.lru_cache(maxsize=8)
def moto_instance_type_zones(region: str) -> dict[str, list[str]]:
    import gzip
    import json
    from pathlib import Path

    import moto.ec2

    path = Path(moto.ec2.__file__).parent / "resources" / "instance_type_offerings" / "availability-zone" / f"{region}.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        offerings = json.load(handle)
    zones: dict[str, set[str]] = {}
    for offering in offerings:
        zones.setdefault(offering["InstanceType"], set()).add(offering["Location"])
    return {name: sorted(found) for name, found in sorted(zones.items())}


class FakePricing:
    """The Pricing API as :class:`joiner.ports.PricingPort`: ``prices`` per region, or failing."""

    def __init__(self, prices: dict[str, dict[str, float]] | None = None) -> None:
        self.prices = prices or {}
        self.calls: list[str] = []
        self.error: Exception | None = None

    def on_demand_prices(self, region: str) -> dict[str, float]:
        self.calls.append(region)
        if self.error is not None:
            raise self.error
        return dict(self.prices.get(region, {}))


class FakeState:
    """The StatePort with the DynamoDB adapter's conditional semantics, in memory."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._claims: dict[str, ClaimRecord] = {}
        self._reservations: dict[str, dict[str, Resources]] = {}
        self._leases: dict[str, tuple[str, datetime]] = {}
        self._unavailable: dict[OfferingKey, tuple[datetime, str]] = {}
        self._items: dict[tuple[str, str], tuple[JsonDict, datetime | None]] = {}
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)

    # claims

    def put_claim(self, claim: ClaimRecord) -> bool:
        self._call("put_claim")
        with self._lock:
            if claim.claim_id in self._claims:
                return False
            self._claims[claim.claim_id] = claim
            return True

    def update_claim(self, claim_id: str, *, expected_state: str | tuple[str, ...] | None = None, **fields: Any) -> ClaimRecord:
        self._call("update_claim")
        with self._lock:
            current = self._claims.get(claim_id)
            if current is None:
                raise KeyError(f"claim {claim_id} does not exist")
            if expected_state is not None:
                expected = (expected_state,) if isinstance(expected_state, str) else tuple(expected_state)
                if current.state not in expected:
                    raise ClaimStateConflict(claim_id, expected, current)
            updated = dataclasses.replace(current, **fields)
            self._claims[claim_id] = updated
            return updated

    def get_claim(self, claim_id: str) -> ClaimRecord | None:
        self._call("get_claim")
        with self._lock:
            return self._claims.get(claim_id)

    def claim_by_instance(self, instance_id: str) -> ClaimRecord | None:
        self._call("claim_by_instance")
        with self._lock:
            found = sorted((c for c in self._claims.values() if c.instance_id == instance_id), key=lambda c: c.claim_id)
            return found[0] if found else None

    def claims_by_node_pool(self, node_pool: str) -> list[ClaimRecord]:
        self._call("claims_by_node_pool")
        with self._lock:
            return sorted((c for c in self._claims.values() if c.node_pool == node_pool), key=lambda c: c.claim_id)

    def open_claims(self) -> list[ClaimRecord]:
        self._call("open_claims")
        with self._lock:
            return sorted((c for c in self._claims.values() if c.state != "closed"), key=lambda c: c.claim_id)

    # limits

    def reserve_capacity(self, node_pool: str, claim_id: str, amount: Resources, limits: Resources | None, in_use: Resources) -> bool:
        self._call("reserve_capacity")
        with self._lock:
            pool = self._reservations.setdefault(node_pool, {})
            if claim_id in pool:
                return True
            if limits is not None:
                reserved = self._total(pool)
                for name in limits:
                    if amount.get(name, 0) <= 0:
                        continue  # a claim that adds nothing of a resource is not limited by it
                    if in_use.get(name, 0) + reserved.get(name, 0) + amount.get(name, 0) > limits.get(name, 0):
                        return False
            pool[claim_id] = amount
            return True

    def release_capacity(self, node_pool: str, claim_id: str) -> None:
        self._call("release_capacity")
        with self._lock:
            self._reservations.get(node_pool, {}).pop(claim_id, None)

    def shrink_reservation(self, node_pool: str, claim_id: str, amount: Resources) -> None:
        self._call("shrink_reservation")
        with self._lock:
            held = self._reservations.get(node_pool, {}).get(claim_id)
            if held is None:
                return
            if any(value > held.get(name, 0) for name, value in amount.items()):
                raise StateError(f"shrink_reservation({node_pool}, {claim_id}): {amount} exceeds the {held} held")
            self._reservations[node_pool][claim_id] = amount

    def reserved_capacity(self, node_pool: str) -> Resources:
        self._call("reserved_capacity")
        with self._lock:
            return self._total(self._reservations.get(node_pool, {}))

    def reservations(self, node_pool: str) -> dict[str, Resources]:
        """Claim id -> reserved amount."""
        self._call("reservations")
        with self._lock:
            return dict(self._reservations.get(node_pool, {}))

    @staticmethod
    def _total(pool: Mapping[str, Resources]) -> Resources:
        total = EMPTY
        for amount in pool.values():
            total = total + amount
        return total

    # leases

    def acquire_lease(self, name: str, owner: str, now: datetime, ttl_seconds: int) -> bool:
        self._call("acquire_lease")
        with self._lock:
            held = self._leases.get(name)
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._leases[name] = (owner, now + timedelta(seconds=ttl_seconds))
            return True

    def release_lease(self, name: str, owner: str) -> None:
        self._call("release_lease")
        with self._lock:
            held = self._leases.get(name)
            if held is not None and held[0] == owner:
                del self._leases[name]

    def lease_holder(self, name: str) -> tuple[str, datetime] | None:
        """Test helper: (owner, expiry) of a lease."""
        with self._lock:
            return self._leases.get(name)

    # unavailable offerings

    def mark_unavailable(self, key: OfferingKey, until: datetime, reason: str) -> None:
        self._call("mark_unavailable")
        with self._lock:
            self._unavailable[key] = (until, reason)

    def unavailable_offerings(self, now: datetime) -> frozenset[OfferingKey]:
        self._call("unavailable_offerings")
        with self._lock:
            return frozenset(key for key, (until, _) in self._unavailable.items() if until > now)

    def unavailable_until(self, key: OfferingKey) -> datetime | None:
        """Test helper: when an offering becomes available again."""
        with self._lock:
            found = self._unavailable.get(key)
            return found[0] if found else None

    # generic items

    def put_item(self, kind: str, item_id: str, data: JsonDict, *, expires_at: datetime | None = None, if_absent: bool = False) -> bool:
        self._call("put_item")
        with self._lock:
            if if_absent and (kind, item_id) in self._items:
                return False
            self._items[(kind, item_id)] = (copy.deepcopy(data), expires_at)
            return True

    def get_item(self, kind: str, item_id: str) -> JsonDict | None:
        self._call("get_item")
        with self._lock:
            found = self._items.get((kind, item_id))
            return copy.deepcopy(found[0]) if found else None

    def delete_item(self, kind: str, item_id: str) -> None:
        self._call("delete_item")
        with self._lock:
            self._items.pop((kind, item_id), None)

    def list_items(self, kind: str) -> list[JsonDict]:
        self._call("list_items")
        with self._lock:
            return [copy.deepcopy(data) for (k, _), (data, _) in sorted(self._items.items(), key=lambda kv: kv[0]) if k == kind]


# ---------------------------------------------------------------- queue


class FakeQueue:
    def __init__(self) -> None:
        self.messages: list[tuple[JsonDict, int, str | None]] = []
        self._lock = threading.Lock()

    def send(self, body: JsonDict, delay_seconds: int = 0, dedup_id: str | None = None) -> None:
        if not 0 <= delay_seconds <= 900:
            raise ValueError(f"delay_seconds must be within 0..900, got {delay_seconds}")
        with self._lock:
            self.messages.append((copy.deepcopy(body), delay_seconds, dedup_id))


# ---------------------------------------------------------------- JSON builders


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_json(
    name: str,
    *,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "1Gi",
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    node_name: str | None = None,
    created: datetime = EPOCH,
    tolerations: Sequence[Mapping[str, Any]] = (),
    extra_spec: Mapping[str, Any] | None = None,
) -> JsonDict:
    """A pending (PodScheduled=False/Unschedulable) pod, or a running one with ``node_name``."""
    spec: JsonDict = {"containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if extra_spec:
        spec.update(copy.deepcopy(dict(extra_spec)))
    meta: JsonDict = {"name": name, "namespace": namespace, "labels": dict(labels or {"app": "web"}), "creationTimestamp": _stamp(created)}
    if uid:
        meta["uid"] = uid
    if node_name:
        spec["nodeName"] = node_name
        status: JsonDict = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    else:
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": _stamp(created)}],
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def node_json(
    name: str,
    *,
    instance_id: str,
    zone: str = "us-east-1a",
    instance_type: str = "c5.large",
    cpu: str = "2",
    memory: str = "4Gi",
    pods: str = "29",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    ready: bool = True,
    created: datetime = EPOCH,
) -> JsonDict:
    """A Node as kubelet registers it (providerID ``aws:///<zone>/<instance-id>``)."""
    all_labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zone[:-1],
    }
    all_labels.update(labels or {})
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "creationTimestamp": _stamp(created)},
        "spec": {"providerID": f"aws:///{zone}/{instance_id}", "taints": [dict(t) for t in taints]},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def node_pool_json(
    name: str = "default",
    *,
    node_class: str = "default",
    requirements: Sequence[Mapping[str, Any]] | None = None,
    limits: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    startup_taints: Sequence[Mapping[str, str]] = (),
    weight: int | None = None,
) -> JsonDict:
    template_spec: JsonDict = {
        "nodeClassRef": {"group": "joiner.dev", "kind": "NodeClass", "name": node_class},
        "requirements": [
            dict(r)
            for r in (
                requirements
                if requirements is not None
                else [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "c5.xlarge", "c5.2xlarge"]},
                    {"key": "joiner.dev/capacity-type", "operator": "In", "values": ["on-demand"]},
                ]
            )
        ],
    }
    if taints:
        template_spec["taints"] = [dict(t) for t in taints]
    if startup_taints:
        template_spec["startupTaints"] = [dict(t) for t in startup_taints]
    spec: JsonDict = {"template": {"metadata": {"labels": dict(labels or {})}, "spec": template_spec}}
    if limits is not None:
        spec["limits"] = dict(limits)
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": "joiner.dev/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def node_class_json(name: str = "default", *, discovery: str = "test-cluster", kubelet: Mapping[str, Any] | None = None) -> JsonDict:
    spec: JsonDict = {
        "subnetSelectorTerms": [{"tags": {"joiner.dev/discovery": discovery}}],
        "securityGroupSelectorTerms": [{"tags": {"joiner.dev/discovery": discovery}}],
        "role": f"JoinerNodeRole-{discovery}",
    }
    if kubelet:
        spec["kubelet"] = dict(kubelet)
    return {"apiVersion": "joiner.dev/v1", "kind": "NodeClass", "metadata": {"name": name}, "spec": spec}


def daemonset_json(name: str, *, namespace: str = "kube-system", cpu: str = "100m", memory: str = "128Mi") -> JsonDict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
            },
        },
    }


# ---------------------------------------------------------------- a whole fake world


#: (name, vCPUs, memory, pods, on-demand $/h, arch) of the small test catalog.
SMALL_CATALOG_TYPES = (
    ("c5.large", 2, "4Gi", 29, 0.085, "amd64"),
    ("c5.xlarge", 4, "8Gi", 58, 0.17, "amd64"),
    ("c5.2xlarge", 8, "16Gi", 58, 0.34, "amd64"),
    ("m5.large", 2, "8Gi", 29, 0.096, "amd64"),
    ("m6g.large", 2, "8Gi", 29, 0.077, "arm64"),
)
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")


def small_catalog(zones: Sequence[str] = ZONES, spot_discount: float = 0.4) -> Any:
    """A five-type catalog with on-demand and spot offerings in every zone (spot price =
    on-demand x ``spot_discount``, a little dearer in later zones so choices are deterministic)."""
    from joiner.domain.catalog import parse_catalog

    entries = []
    for name, cpu, memory, pods, price, arch in SMALL_CATALOG_TYPES:
        offerings = []
        for index, zone in enumerate(zones):
            offerings.append({"zone": zone, "capacityType": "on-demand", "price": price})
            offerings.append({"zone": zone, "capacityType": "spot", "price": round(price * spot_discount * (1 + index / 100), 6)})
        entries.append(
            {
                "name": name,
                "capacity": {"cpu": str(cpu), "memory": memory, "pods": str(pods)},
                "labels": {"kubernetes.io/arch": arch},
                "offerings": offerings,
            }
        )
    return parse_catalog({"region": "us-east-1", "instanceTypes": entries})


@dataclasses.dataclass
class FakeWorld:
    """Fakes wired together: one cluster, its API, EC2, state, queue, clock and metrics."""

    cluster: str
    clock: FakeClock
    kube: FakeKubernetes
    ec2: FakeEc2
    state: FakeState
    queue: FakeQueue
    metrics: RecordingMetrics
    catalog: Any
    pricing: FakePricing = dataclasses.field(default_factory=FakePricing)

    def settings(self, **overrides: Any) -> Any:
        from joiner.settings import Settings

        values: dict[str, Any] = {"cluster_name": self.cluster, "region": "us-east-1", "state_table": "joiner-state", "idempotency_table": "joiner-idempotency"}
        values.update(overrides)
        return Settings(**values)

    def runtime(self, invocation_id: str = "invocation-1", *, settings: Any = None, **overrides: Any) -> Any:
        """A :class:`joiner.services.context.Runtime` on these fakes (fresh caches each call)."""
        from joiner.services.context import Runtime

        values: dict[str, Any] = {
            "kube_port": self.kube,
            "ec2_port": self.ec2,
            "state_port": self.state,
            "queue_port": self.queue,
            "pricing_port": self.pricing,
            "catalog_value": self.catalog,
            "clock": self.clock,
            "sleep": self.clock.sleep,
            "metric": self.metrics,
            "invocation_id": invocation_id,
        }
        values.update(overrides)
        return Runtime(settings=settings or self.settings(), **values)


def fake_world(cluster: str = "test-cluster", *, catalog: Any = None) -> FakeWorld:
    clock = FakeClock()
    return FakeWorld(
        cluster=cluster,
        clock=clock,
        kube=FakeKubernetes(),
        ec2=FakeEc2(cluster, clock=clock),
        state=FakeState(),
        queue=FakeQueue(),
        metrics=RecordingMetrics(),
        catalog=catalog if catalog is not None else small_catalog(),
    )


# ---- appended: classes other helpers add go below this line


# ---- appended by the interruption/termination helper


class DrainingKubernetes(FakeKubernetes):
    """A FakeKubernetes whose pods shut down gracefully and whose evictions can be blocked.

    * ``evict_pod`` returns ``blocked`` (HTTP 429, a PDB said no) while ``block(key, times)``
      has blocks left for the pod; otherwise the pod starts terminating: it gets
      ``metadata.deletionTimestamp = now + grace`` and stays listed until
      :meth:`finish_terminating` (or :meth:`advance_to`) removes it, as kubelet would.
    * ``delete_pod`` does the same with the grace it is given (0 removes at once).
    * ``evictions`` and ``deletions`` record (pod key, grace) in call order.
    """

    def __init__(self, clock: FakeClock | None = None) -> None:
        super().__init__()
        self.clock = clock or FakeClock()
        self.evictions: list[str] = []
        self.blocked: list[str] = []
        self.deletions: list[tuple[str, int | None]] = []
        self._blocks: dict[str, int] = {}

    def block(self, key: str, times: int = 1_000_000) -> None:
        """Block the next ``times`` evictions of ``namespace/name``."""
        with self._lock:
            self._blocks[key] = times

    def unblock(self, key: str) -> None:
        with self._lock:
            self._blocks.pop(key, None)

    def _terminate(self, key: str, grace: int) -> bool:
        pod = self._objects["pods"].get(key)
        if pod is None:
            return False
        if grace <= 0:
            del self._objects["pods"][key]
            return True
        meta = pod.setdefault("metadata", {})
        ends = self.clock.now() + timedelta(seconds=grace)
        current = meta.get("deletionTimestamp")
        if current is None or _stamp(ends) < current:
            meta["deletionTimestamp"] = _stamp(ends)
            meta["deletionGracePeriodSeconds"] = grace
        return True

    def evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> EvictionOutcome:
        self._enter("evict_pod")
        key = f"{namespace}/{name}"
        with self._lock:
            if key not in self._objects["pods"]:
                return EvictionOutcome("gone", "not found")
            left = self._blocks.get(key, 0)
            if left > 0:
                self._blocks[key] = left - 1
                self.blocked.append(key)
                return EvictionOutcome("blocked", "Cannot evict pod as it would violate the pod's disruption budget.")
            self.evictions.append(key)
            spec = self._objects["pods"][key].get("spec") or {}
            grace = grace_seconds if grace_seconds is not None else int(spec.get("terminationGracePeriodSeconds", 30))
            self._terminate(key, grace)
        return EvictionOutcome("evicted")

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        self._enter("delete_pod")
        key = f"{namespace}/{name}"
        with self._lock:
            self.deletions.append((key, grace_seconds))
            spec = (self._objects["pods"].get(key) or {}).get("spec") or {}
            self._terminate(key, grace_seconds if grace_seconds is not None else int(spec.get("terminationGracePeriodSeconds", 30)))

    def finish_terminating(self) -> list[str]:
        """Remove every terminating pod whose grace has ended by the clock (all with ``force``)."""
        now = _stamp(self.clock.now())
        with self._lock:
            done = [key for key, pod in self._objects["pods"].items() if (pod.get("metadata") or {}).get("deletionTimestamp", "9999") <= now]
            for key in done:
                del self._objects["pods"][key]
        return sorted(done)

    def terminating(self) -> list[str]:
        with self._lock:
            return sorted(key for key, pod in self._objects["pods"].items() if (pod.get("metadata") or {}).get("deletionTimestamp"))

    def pods_on(self, node_name: str) -> list[str]:
        with self._lock:
            return sorted(key for key, pod in self._objects["pods"].items() if (pod.get("spec") or {}).get("nodeName") == node_name)


# ---- appended by the NodeClaim lifecycle machine (tests/services/test_lifecycle_machine.py)


#: How far back the DynamoDB adapter re-reads claims by id instead of trusting its
#: eventually consistent index (``joiner.adapters.state._RECENT_WRITES``).
RECENT_WRITES = timedelta(minutes=2)


class LaggingOpenClaims:
    """``open_claims`` of :class:`joiner.adapters.state.StateAdapter` over one :class:`FakeState`,
    with the adapter's eventually consistent open-claims index lagging by ``lag``.

    What the real adapter reads (``StateAdapter.open_claims``): the sparse GSI ``byOpenClaim``
    (eventually consistent: a claim another container created moments ago may be missing
    from it), plus the claims *its own container* wrote (created or updated) within
    :data:`RECENT_WRITES`, re-read by id (strongly consistent), plus, since the
    ``RECENT#CLAIM`` partition (commit 3abbe84), the claims *any* container created within
    :data:`RECENT_WRITES`, listed with a strongly consistent Query and read by id. Only the
    index lags, so only that part is modelled as lagging: a claim created by another writer
    less than ``lag`` ago is missing from the index, and the other two parts find it again
    wherever they cover it. ``recent_partition=False`` models the adapter before the partition.

    Not modelled: the index's stale copies of claims updated or closed elsewhere (records are
    returned as they are now); ``get_claim`` and every other read stay strongly consistent,
    as the adapter's are. Each container (Lambda execution environment) uses its own
    :meth:`writer`; a container that dies is a new writer (its memory of its writes is gone)."""

    def __init__(self, state: FakeState, clock: FakeClock, lag: timedelta, *, recent_partition: bool = True) -> None:
        self.state = state
        self.clock = clock
        self.lag = lag
        self.recent_partition = recent_partition
        self._lock = threading.Lock()
        self._created: dict[str, tuple[str, datetime]] = {}  # claim id -> (writer, when)
        self._written: dict[tuple[str, str], datetime] = {}  # (writer, claim id) -> last write
        #: (writer, claim id) of every claim an ``open_claims`` answer left out
        self.hidden: list[tuple[str, str]] = []

    def writer(self, name: str) -> LaggingStateWriter:
        return LaggingStateWriter(self, name)

    def note_write(self, writer: str, claim_id: str) -> None:
        with self._lock:
            self._written[(writer, claim_id)] = self.clock.now()

    def note_created(self, writer: str, claim_id: str) -> None:
        with self._lock:
            self._created.setdefault(claim_id, (writer, self.clock.now()))

    def visible(self, writer: str, claim_id: str) -> bool:
        """Whether ``writer``'s ``open_claims`` finds the claim (it is open)."""
        now = self.clock.now()
        with self._lock:
            created = self._created.get(claim_id)
            if created is None or created[0] == writer or now - created[1] >= self.lag:
                return True  # in the index
            own = self._written.get((writer, claim_id))
            if own is not None and now - own < RECENT_WRITES:
                return True  # this container's recent write, re-read by id
            return self.recent_partition and now - created[1] < RECENT_WRITES


class LaggingStateWriter:
    """One container's :class:`FakeState` (see :class:`LaggingOpenClaims`): every call goes to
    the shared state; claim writes are remembered and ``open_claims`` hides what the lagging
    index would."""

    def __init__(self, index: LaggingOpenClaims, name: str) -> None:
        self._index = index
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._index.state, attr)

    def put_claim(self, claim: ClaimRecord) -> bool:
        self._index.note_write(self.name, claim.claim_id)  # the adapter remembers it before writing
        created = self._index.state.put_claim(claim)
        if created:
            self._index.note_created(self.name, claim.claim_id)
        return created

    def update_claim(self, claim_id: str, *, expected_state: str | tuple[str, ...] | None = None, **fields: Any) -> ClaimRecord:
        self._index.note_write(self.name, claim_id)
        return self._index.state.update_claim(claim_id, expected_state=expected_state, **fields)

    def open_claims(self) -> list[ClaimRecord]:
        found = self._index.state.open_claims()
        shown = [c for c in found if self._index.visible(self.name, c.claim_id)]
        if len(shown) != len(found):
            self._index.hidden.extend((self.name, c.claim_id) for c in found if c not in shown)
        return shown


class FakeBlobs:
    """The cluster state's image store in memory (BlobPort); ``failing`` makes every call
    raise as an unreachable bucket would."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.failing = False
        self.gets = 0

    def get(self, key: str) -> bytes | None:
        from joiner.ports import BlobError

        self.gets += 1
        if self.failing:
            raise BlobError("unreachable")
        return self.objects.get(key)

    def put(self, key: str, data: bytes) -> None:
        from joiner.ports import BlobError

        if self.failing:
            raise BlobError("unreachable")
        self.objects[key] = data
