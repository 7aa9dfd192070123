"""Simulation scenarios: YAML files describing a cluster's configuration, the workloads that
arrive and leave, the interruptions EC2 delivers, and the outcomes expected.

::

    name: classic
    duration: 20m              # simulated time
    bootDelay: 60s             # instance launch -> Node Ready (the simulated kubelet)
    objects: [...]             # Kubernetes objects installed at start: NodeClass, NodePools, PDBs
    workloads:                 # kept at `replicas` pods by the simulated ReplicaSet controller
    - name: inflate
      replicas: 0
      cpu: "1"
    events:
    - at: 30s
      scale: {workload: inflate, replicas: 20}
    - at: 6m
      spotInterruption: {nodePool: spot}
    - at: 8m                 # the node monitoring agent (or the kubelet) reports a condition
      nodeCondition: {nodePool: general, type: NetworkingReady, status: "False"}
    - at: 9m                 # kubectl delete nodeclaim / node: Joiner's delete-to-drain
      delete: {nodeClaim: general-a}
    expect:
    - nodes: {c5.2xlarge: 3}
      at: 5m
    - podsLost: 0

``objects`` may hold NodeClaims (Joiner's ``joiner.dev/v1`` mirrors and Karpenter's
``karpenter.sh/v1`` ones, as a snapshot does): capacity Joiner launched before the start, running
from the first instant (:attr:`Scenario.node_claims`), with Pods bound to their nodes
(``spec.nodeName``: a claim's ``status.nodeName``). A ``delete`` event deletes one of them, or its
Node, as ``kubectl delete`` would.

Every problem is reported as one :class:`ScenarioError` naming the field
(``events[2].scale.replicas: must be a non-negative integer, got 'x'``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from joiner.domain.durations import parse_duration
from joiner.domain.known_fields import strict_problem
from joiner.domain.model import NodeClaim

__all__ = [
    "CHECKS",
    "DEFAULT_SCENARIO",
    "Check",
    "Event",
    "Scenario",
    "ScenarioError",
    "Workload",
    "bundled_scenario",
    "load_scenario",
    "parse_scenario",
]

#: The default scenario shipped in the package (``joiner demo``).
DEFAULT_SCENARIO = "classic"
_BUNDLED = Path(__file__).resolve().parent / "scenarios"

#: check name -> what its value is: "types" (instance type -> count), "duration", "count", "bool",
#: "price" (dollars per hour).
CHECKS: Mapping[str, str] = {
    "nodes": "types",
    "launched": "types",
    "nodeCount": "count",
    "pendingPods": "count",
    "podsLost": "count",
    "pendingP50": "duration",
    "pendingP99": "duration",
    "interruptionsWithinDeadline": "bool",
    "interruptionPendingMax": "duration",
    "pendingMax": "duration",
    "capacityErrors": "count",
    "rebalancesHandled": "bool",
    "costPerHourAtMost": "price",
    "deletionsDrained": "bool",
}
#: Handlers a check may declare it needs (``requires``); it is skipped when one is missing.
KNOWN_HANDLERS = ("scanner", "disruption", "gc", "interruption", "termination")
_EVENT_KINDS = ("scale", "delete", "spotInterruption", "rebalanceRecommendation", "capacityError", "nodeCondition")
#: What a ``nodeCondition`` event may set a condition to.
CONDITION_STATUSES = ("True", "False", "Unknown")
#: Capacity types a ``capacityError`` may name.
CAPACITY_TYPES = ("spot", "on-demand")
#: What a ``delete`` event deletes: a workload (its pods), a NodeClaim or a Node.
DELETE_TARGETS = ("workload", "nodeClaim", "node")


class ScenarioError(ValueError):
    """A scenario that cannot be run; the message names the field."""


@dataclass(frozen=True)
class Workload:
    """A ReplicaSet-like set of identical pods."""

    name: str
    namespace: str = "default"
    replicas: int = 0
    cpu: str = "1"
    memory: str = "256Mi"
    labels: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    termination_grace_seconds: int = 30

    def pod_spec(self) -> dict[str, Any]:
        """The pod template's spec."""
        spec: dict[str, Any] = {
            "terminationGracePeriodSeconds": self.termination_grace_seconds,
            "containers": [
                {"name": "main", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7", "resources": {"requests": {"cpu": self.cpu, "memory": self.memory}}}
            ],
        }
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        return spec


@dataclass(frozen=True)
class Event:
    """Something that happens at ``at``: ``scale`` (workload, replicas); ``spotInterruption``
    or ``rebalanceRecommendation`` (target: nodePool / instanceType / index among the matching
    running spot instances, oldest first); ``capacityError`` (EC2 answers CreateFleet overrides
    of ``instance_types`` x ``zones`` x ``capacity_type`` — empty: any — with
    ``InsufficientInstanceCapacity`` from ``at`` until ``until``, None: the end); ``nodeCondition``
    (the Node of a running instance, chosen as for an interruption but of any capacity type, gets
    condition ``condition`` in ``status`` with ``reason``, as a kubelet or the EKS node monitoring
    agent reports it); ``delete`` (``object_kind`` ``NodeClaim`` or ``Node`` named ``name``,
    deleted as ``kubectl delete`` does: Joiner's finalizer holds it while the node drains)."""

    at: timedelta
    kind: str
    workload: str = ""
    replicas: int = 0
    node_pool: str | None = None
    instance_type: str | None = None
    index: int = 0
    where: str = ""
    instance_types: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    capacity_type: str | None = None
    until: timedelta | None = None
    condition: str = ""
    status: str = ""
    reason: str = ""
    object_kind: str = ""
    name: str = ""

    def fails(self, instance_type: str, zone: str, capacity_type: str) -> bool:
        """Whether this ``capacityError`` covers the offering (time aside)."""
        return (
            self.kind == "capacityError"
            and (not self.instance_types or instance_type in self.instance_types)
            and (not self.zones or zone in self.zones)
            and (self.capacity_type is None or capacity_type == self.capacity_type)
        )

    def describe_offerings(self) -> str:
        """``c5.large, c5.xlarge spot in us-east-1a`` and the like."""
        types = ", ".join(self.instance_types) or "every instance type"
        zones = ", ".join(self.zones) or "every zone"
        return f"{types} {self.capacity_type or 'spot and on-demand'} in {zones}"


@dataclass(frozen=True)
class Check:
    """An expected outcome: ``name`` from :data:`CHECKS`, its ``value``, evaluated at ``at``
    (None: the end) unless a handler it ``requires`` is missing."""

    name: str
    value: Any
    at: timedelta | None = None
    requires: tuple[str, ...] = ()
    where: str = ""

    def describe(self) -> str:
        """``nodes {c5.2xlarge: 3} at 5m`` and the like."""
        value = self.value
        if isinstance(value, timedelta):
            value = f"<= {_fmt(value)}"
        elif isinstance(value, Mapping):
            value = "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
        elif isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, float):
            value = f"${value:.4f}"
        return f"{self.name} {value}" + (f" at {_fmt(self.at)}" if self.at is not None else "")


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario."""

    name: str
    description: str
    duration: timedelta
    boot_delay: timedelta
    cluster: str
    objects: tuple[Mapping[str, Any], ...]
    workloads: tuple[Workload, ...]
    events: tuple[Event, ...]
    expect: tuple[Check, ...]
    source: str = ""
    #: NodeClaims running from the start (declared in ``objects``; not applied as they are)
    node_claims: tuple[NodeClaim, ...] = ()


def _fmt(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


# ---------------------------------------------------------------- parsing


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{where}: must be a mapping, got {_type_name(value)}")
    return value


def _list(value: object, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise ScenarioError(f"{where}: must be a list, got {_type_name(value)}")
    return value


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _unknown(mapping: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    extra = sorted(str(key) for key in mapping if key not in allowed)
    if extra:
        prefix = f"{where}." if where else ""
        raise ScenarioError(f"{prefix}{extra[0]}: unknown field{_did_you_mean(extra[0], allowed)} (expected one of {', '.join(allowed)})")


def _string(value: object, where: str, *, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or not value:
        raise ScenarioError(f"{where}: must be a non-empty string, got {_type_name(value)}")
    return value


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScenarioError(f"{where}: must be a non-negative integer, got {value!r}")
    return value


def _duration(value: object, where: str, *, positive: bool = False) -> timedelta:
    if isinstance(value, bool):
        raise ScenarioError(f"{where}: must be a duration such as 30s or 5m, got {value!r}")
    if isinstance(value, (int, float)):
        result: timedelta | None = timedelta(seconds=value)
        if value < 0:
            raise ScenarioError(f"{where}: must not be negative, got {value!r}")
    else:
        try:
            result = parse_duration(value)
        except ValueError as error:
            raise ScenarioError(f"{where}: {error}") from None
    if result is None:
        raise ScenarioError(f"{where}: must be a finite duration, got {value!r}")
    if positive and result <= timedelta(0):
        raise ScenarioError(f"{where}: must be positive, got {value!r}")
    return result


def _quantity(value: object, where: str, resource: str) -> str:
    from joiner.domain.quantity import parse_milli

    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ScenarioError(f"{where}: must be a quantity such as 500m or 1Gi, got {_type_name(value)}")
    try:
        if parse_milli(value) < 0:
            raise ValueError("negative")
    except (ValueError, ArithmeticError):
        raise ScenarioError(f"{where}: not a valid {resource} quantity: {value!r}") from None
    return str(value)


def _labels(value: object, where: str) -> dict[str, str]:
    mapping = _mapping(value, where)
    out: dict[str, str] = {}
    for key, label in mapping.items():
        if not isinstance(key, str) or not isinstance(label, str):
            raise ScenarioError(f"{where}.{key}: label keys and values must be strings, got {label!r}")
        out[key] = label
    return out


_WORKLOAD_FIELDS = ("name", "namespace", "replicas", "cpu", "memory", "labels", "nodeSelector", "tolerations", "terminationGracePeriodSeconds")


def _workload(raw: object, where: str) -> Workload:
    item = _mapping(raw, where)
    _unknown(item, _WORKLOAD_FIELDS, where)
    name = _string(item.get("name"), f"{where}.name")
    tolerations = tuple(dict(_mapping(t, f"{where}.tolerations[{i}]")) for i, t in enumerate(_list(item.get("tolerations", []), f"{where}.tolerations")))
    return Workload(
        name=name,
        namespace=_string(item.get("namespace"), f"{where}.namespace", default="default"),
        replicas=_count(item.get("replicas", 0), f"{where}.replicas"),
        cpu=_quantity(item.get("cpu", "1"), f"{where}.cpu", "cpu"),
        memory=_quantity(item.get("memory", "256Mi"), f"{where}.memory", "memory"),
        labels=_labels(item.get("labels", {}), f"{where}.labels"),
        node_selector=_labels(item.get("nodeSelector", {}), f"{where}.nodeSelector"),
        tolerations=tolerations,
        termination_grace_seconds=_count(item.get("terminationGracePeriodSeconds", 30), f"{where}.terminationGracePeriodSeconds"),
    )


def _event(raw: object, where: str, workloads: Mapping[str, Workload], claims: Sequence[NodeClaim] = ()) -> Event:
    item = _mapping(raw, where)
    _unknown(item, ("at", *_EVENT_KINDS), where)
    if "at" not in item:
        raise ScenarioError(f"{where}.at: required")
    at = _duration(item["at"], f"{where}.at")
    kinds = [kind for kind in _EVENT_KINDS if kind in item]
    if len(kinds) != 1:
        raise ScenarioError(f"{where}: needs exactly one of {', '.join(_EVENT_KINDS)}")
    kind = kinds[0]
    body = _mapping(item[kind], f"{where}.{kind}")
    path = f"{where}.{kind}"
    if kind == "delete" and ("nodeClaim" in body or "node" in body):
        return _delete_object(body, at, path, where, claims)
    if kind in ("scale", "delete"):
        _unknown(body, ("workload", "replicas") if kind == "scale" else DELETE_TARGETS, path)
        workload = _string(body.get("workload"), f"{path}.workload")
        if workload not in workloads:
            raise ScenarioError(f"{path}.workload: no workload named {workload!r} (declared: {', '.join(sorted(workloads)) or 'none'})")
        if kind == "scale" and "replicas" not in body:
            raise ScenarioError(f"{path}.replicas: required")
        replicas = _count(body.get("replicas"), f"{path}.replicas") if kind == "scale" else 0
        return Event(at, "scale", workload=workload, replicas=replicas, where=where)
    if kind == "capacityError":
        return _capacity_error(body, at, path, where)
    if kind == "nodeCondition":
        return _node_condition(body, at, path, where)
    _unknown(body, ("nodePool", "instanceType", "index"), path)
    node_pool = _string(body["nodePool"], f"{path}.nodePool") if "nodePool" in body else None
    instance_type = _string(body["instanceType"], f"{path}.instanceType") if "instanceType" in body else None
    return Event(at, kind, node_pool=node_pool, instance_type=instance_type, index=_count(body.get("index", 0), f"{path}.index"), where=where)


def _delete_object(body: Mapping[str, Any], at: timedelta, path: str, where: str, claims: Sequence[NodeClaim]) -> Event:
    """``delete: {nodeClaim: NAME}`` or ``delete: {node: NAME}``: one of the scenario's NodeClaims or its Node."""
    _unknown(body, DELETE_TARGETS, path)
    targets = [key for key in DELETE_TARGETS if key in body]
    if len(targets) != 1:
        raise ScenarioError(f"{path}: needs exactly one of {', '.join(DELETE_TARGETS)}")
    field_name = targets[0]
    name = _string(body[field_name], f"{path}.{field_name}")
    if field_name == "nodeClaim":
        known = [c.name for c in claims]
        what = "NodeClaim"
    else:
        known = [c.node_name for c in claims if c.node_name]
        what = "node (the status.nodeName of one of the scenario's NodeClaims)"
    if name not in known:
        declared = ", ".join(sorted(known)) or "none"
        raise ScenarioError(f"{path}.{field_name}: no {what} named {name!r}{_did_you_mean(name, known)} (declared: {declared})")
    return Event(at, "delete", where=where, object_kind="NodeClaim" if field_name == "nodeClaim" else "Node", name=name)


def _node_condition(body: Mapping[str, Any], at: timedelta, path: str, where: str) -> Event:
    _unknown(body, ("nodePool", "instanceType", "index", "type", "status", "reason"), path)
    condition = _string(body.get("type"), f"{path}.type")
    status = body.get("status")
    if isinstance(status, bool):  # YAML reads an unquoted False as a boolean
        status = str(status)
    if status not in CONDITION_STATUSES:
        raise ScenarioError(f"{path}.status: must be one of {', '.join(CONDITION_STATUSES)}, got {body.get('status')!r}")
    reason = _string(body.get("reason"), f"{path}.reason", default="ScenarioEvent")
    node_pool = _string(body["nodePool"], f"{path}.nodePool") if "nodePool" in body else None
    instance_type = _string(body["instanceType"], f"{path}.instanceType") if "instanceType" in body else None
    return Event(
        at,
        "nodeCondition",
        node_pool=node_pool,
        instance_type=instance_type,
        index=_count(body.get("index", 0), f"{path}.index"),
        where=where,
        condition=condition,
        status=str(status),
        reason=reason,
    )


def _strings(value: object, where: str, allowed: Sequence[str] | None = None, what: str = "") -> tuple[str, ...]:
    items = _list(value, where)
    if not items:
        raise ScenarioError(f"{where}: must not be empty (leave the field out to mean all)")
    out = []
    for index, item in enumerate(items):
        name = _string(item, f"{where}[{index}]")
        if allowed is not None and name not in allowed:
            raise ScenarioError(f"{where}[{index}]: unknown {what} {name!r}")
        out.append(name)
    return tuple(dict.fromkeys(out))


def _capacity_error(body: Mapping[str, Any], at: timedelta, path: str, where: str) -> Event:
    from joiner.domain.catalog import load_bundled_catalog
    from testworld.aws import REGION, ZONES

    _unknown(body, ("instanceTypes", "zones", "capacityType", "until"), path)
    types: tuple[str, ...] = ()
    if "instanceTypes" in body:
        known = set(load_bundled_catalog(REGION).names)
        types = _strings(body["instanceTypes"], f"{path}.instanceTypes", sorted(known), f"instance type (not in the {REGION} catalog):")
    zones = _strings(body["zones"], f"{path}.zones", ZONES, f"zone (one of {', '.join(ZONES)}):") if "zones" in body else ()
    capacity_type = None
    if "capacityType" in body:
        capacity_type = body["capacityType"]
        if capacity_type not in CAPACITY_TYPES:
            raise ScenarioError(f"{path}.capacityType: must be one of {', '.join(CAPACITY_TYPES)}, got {capacity_type!r}")
    until = None
    if "until" in body:
        until = _duration(body["until"], f"{path}.until")
        if until <= at:
            raise ScenarioError(f"{path}.until: must be after the event's at ({_fmt(at)}), got {body['until']!r}")
    return Event(at, "capacityError", instance_types=types, zones=zones, capacity_type=capacity_type, until=until, where=where)


def _check(raw: object, where: str) -> Check:
    item = _mapping(raw, where)
    _unknown(item, (*CHECKS, "at", "requires"), where)
    names = [name for name in CHECKS if name in item]
    if len(names) != 1:
        raise ScenarioError(f"{where}: needs exactly one of {', '.join(CHECKS)}")
    name = names[0]
    path = f"{where}.{name}"
    kind = CHECKS[name]
    value: Any = item[name]
    if kind == "types":
        value = {str(k): _count(v, f"{path}.{k}") for k, v in _mapping(value, path).items()}
    elif kind == "count":
        value = _count(value, path)
    elif kind == "duration":
        value = _duration(value, path)
    elif kind == "price":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ScenarioError(f"{path}: must be a non-negative number of dollars per hour, got {value!r}")
        value = float(value)
    elif not isinstance(value, bool):
        raise ScenarioError(f"{path}: must be true or false, got {value!r}")
    at = _duration(item["at"], f"{where}.at") if "at" in item else None
    requires = tuple(_string(r, f"{where}.requires[{i}]") for i, r in enumerate(_list(item.get("requires", []), f"{where}.requires")))
    for index, handler in enumerate(requires):
        if handler not in KNOWN_HANDLERS:
            raise ScenarioError(f"{where}.requires[{index}]: unknown function {handler!r} (one of {', '.join(KNOWN_HANDLERS)})")
    return Check(name, value, at, requires, where)


_TOP = ("name", "description", "cluster", "duration", "bootDelay", "objects", "workloads", "events", "expect")


def parse_scenario(document: object, *, source: str = "") -> Scenario:
    """A :class:`Scenario` from the parsed YAML document. Raises :class:`ScenarioError`."""
    top = _mapping(document, "scenario")
    _unknown(top, _TOP, "")
    duration = _duration(top.get("duration", "20m"), "duration", positive=True)
    if duration > timedelta(hours=6):
        raise ScenarioError(f"duration: at most 6h of simulated time, got {top.get('duration')!r}")
    objects = []
    for index, raw in enumerate(_list(top.get("objects", []), "objects")):
        obj = _mapping(raw, f"objects[{index}]")
        for key in ("apiVersion", "kind"):
            _string(obj.get(key), f"objects[{index}].{key}")
        _string(_mapping(obj.get("metadata"), f"objects[{index}].metadata").get("name"), f"objects[{index}].metadata.name")
        problem = strict_problem(obj)
        if problem is not None:
            raise ScenarioError(f"objects[{index}].{problem[0]}: {problem[1]}")
        objects.append(copy.deepcopy(dict(obj)))
    objects, node_claims = _node_claims(objects)
    workloads: dict[str, Workload] = {}
    for index, raw in enumerate(_list(top.get("workloads", []), "workloads")):
        workload = _workload(raw, f"workloads[{index}]")
        if workload.name in workloads:
            raise ScenarioError(f"workloads[{index}].name: duplicate workload {workload.name!r}")
        workloads[workload.name] = workload
    events = [_event(raw, f"events[{index}]", workloads, node_claims) for index, raw in enumerate(_list(top.get("events", []), "events"))]
    for event in events:
        if event.at > duration:
            raise ScenarioError(f"{event.where}.at: after the scenario's duration ({_fmt(duration)})")
        if event.until is not None and event.until > duration:
            raise ScenarioError(f"{event.where}.{event.kind}.until: after the scenario's duration ({_fmt(duration)})")
    checks = tuple(_check(raw, f"expect[{index}]") for index, raw in enumerate(_list(top.get("expect", []), "expect")))
    for check in checks:
        if check.at is not None and check.at > duration:
            raise ScenarioError(f"{check.where}.at: after the scenario's duration ({_fmt(duration)})")
    cluster = _string(top.get("cluster"), "cluster", default="demo")
    return Scenario(
        name=_string(top.get("name"), "name", default=Path(source).stem if source else "scenario"),
        description=str(top.get("description") or "").strip(),
        duration=duration,
        boot_delay=_duration(top.get("bootDelay", "60s"), "bootDelay"),
        cluster=cluster,
        objects=tuple(objects),
        workloads=tuple(workloads.values()),
        events=tuple(sorted(events, key=lambda e: e.at)),
        expect=checks,
        source=source,
        node_claims=node_claims,
    )


def _node_claims(objects: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], tuple[NodeClaim, ...]]:
    """The objects but the NodeClaims, and the NodeClaims parsed: each of a declared NodePool,
    with an instance type of the bundled catalog, a zone of the simulated region and a capacity
    type; Pods bound to a node (``spec.nodeName``) only to one a NodeClaim names."""
    from joiner.domain import labels as wk
    from joiner.domain.catalog import load_bundled_catalog
    from joiner.domain.snapshot import SnapshotError, parse_node_claim
    from testworld.aws import REGION, ZONES

    pools = [str(o["metadata"]["name"]) for o in objects if o.get("kind") == "NodePool" and o.get("apiVersion") == "joiner.dev/v1"]
    kept: list[dict[str, Any]] = []
    claims: dict[str, NodeClaim] = {}
    nodes: dict[str, str] = {}
    catalog = None
    for index, obj in enumerate(objects):
        if obj.get("kind") != "NodeClaim":
            kept.append(obj)
            continue
        where = f"objects[{index}]"
        try:
            claim = parse_node_claim(obj)
        except SnapshotError as error:
            raise ScenarioError(f"{where}.{error.field}: {error.problem}" if error.field else f"{where}: {error.problem}") from None
        pool_field = "spec.nodePool" if claim.api_version == "joiner.dev/v1" else "metadata.labels.karpenter.sh/nodepool"
        if claim.node_pool not in pools:
            raise ScenarioError(
                f"{where}.{pool_field}: no joiner.dev/v1 NodePool named {claim.node_pool!r} among the objects"
                f"{_did_you_mean(claim.node_pool, pools)} (declared: {', '.join(sorted(pools)) or 'none'})"
            )
        if claim.name in claims:
            raise ScenarioError(f"{where}.metadata.name: a second NodeClaim named {claim.name!r}")
        if claim.deleting:
            raise ScenarioError(
                f"{where}.metadata.deletionTimestamp: a NodeClaim the scenario starts with is not being deleted; "
                "delete it with an event (delete: {nodeClaim: NAME})"
            )
        mirror = claim.api_version == "joiner.dev/v1"
        stated = {
            "instance type": (claim.instance_type, "status.instanceType" if mirror else f"metadata.labels.{wk.INSTANCE_TYPE}"),
            "zone": (claim.zone, "status.zone" if mirror else f"metadata.labels.{wk.ZONE}"),
            "capacity type": (claim.capacity_type, "status.capacityType" if mirror else "metadata.labels.karpenter.sh/capacity-type"),
        }
        for what, (value, field_name) in stated.items():
            if not value:
                raise ScenarioError(f"{where}.{field_name}: required: the {what} of the instance the simulation runs for it")
        catalog = catalog or load_bundled_catalog(REGION)
        if claim.instance_type not in catalog.names:
            field_name = stated["instance type"][1]
            raise ScenarioError(
                f"{where}.{field_name}: {claim.instance_type!r} is not in the {REGION} catalog{_did_you_mean(str(claim.instance_type), sorted(catalog.names))}"
            )
        if claim.zone not in ZONES:
            raise ScenarioError(f"{where}.{stated['zone'][1]}: {claim.zone!r} is not a simulated zone (one of {', '.join(ZONES)})")
        if claim.capacity_type not in CAPACITY_TYPES:
            raise ScenarioError(f"{where}.{stated['capacity type'][1]}: must be one of {', '.join(CAPACITY_TYPES)}, got {claim.capacity_type!r}")
        if claim.node_name is not None:
            if claim.node_name in nodes:
                raise ScenarioError(f"{where}.status.nodeName: node {claim.node_name!r} is already NodeClaim {nodes[claim.node_name]}'s")
            nodes[claim.node_name] = claim.name
        claims[claim.name] = claim
    for index, obj in enumerate(objects):
        bound = (obj.get("spec") or {}).get("nodeName") if obj.get("kind") == "Pod" else None
        if bound is not None and bound not in nodes:
            declared = ", ".join(sorted(nodes)) or "none"
            raise ScenarioError(
                f"objects[{index}].spec.nodeName: no NodeClaim of the scenario runs node {bound!r}"
                f"{_did_you_mean(str(bound), list(nodes))} (their status.nodeName: {declared})"
            )
    return kept, tuple(claims[name] for name in sorted(claims))


def load_scenario(path: str | Path) -> Scenario:
    """Read and parse a scenario file. Raises :class:`ScenarioError` (also for unreadable files
    and invalid YAML)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ScenarioError(f"cannot read scenario {str(path)!r}: {getattr(error, 'strerror', None) or error}") from None
    from joiner.domain.bounded import InputError, load_yaml

    try:
        document = load_yaml(text)
    except InputError as error:
        position = f" ({error.where})" if error.where else ""
        problem = error.problem.removeprefix("invalid YAML: ")
        raise ScenarioError(f"{path}: invalid YAML{position}: {problem}") from None
    return parse_scenario(document, source=str(path))


def bundled_scenario(name: str = DEFAULT_SCENARIO) -> Path:
    """The path of a scenario bundled with the test world (``testworld/scenarios/<name>.yaml``)."""
    return _BUNDLED / f"{name}.yaml"
