"""Garbage collection decisions: what leaked, and what must be left alone.

Pure and deterministic: :func:`plan_gc` takes one consistent read of the world
(:class:`GcInputs`: the cluster's EC2 instances, the open claims, the Nodes, the nodes under
termination, the launch templates, the clock) and returns a frozen :class:`GcPlan` of
actions, each with its reason, plus the guards that held other resources back (``kept``).
The service (:mod:`joiner.services.gc`) reads, re-checks and executes.

Rules (docs/gc.md):

* **instance** — a live instance tagged for the cluster that no open claim owns (neither
  by instance id nor by its ``joiner.dev/nodeclaim`` tag) :data:`INSTANCE_GRACE` after its
  launch, and that no Node runs on, is terminated.
* **claim** — an open claim whose instance is ``shutting-down``/``terminated``, or not found
  :data:`INSTANCE_GRACE` after launch, is closed (its limit reservation released) and the
  Nodes backed by that instance are deleted. A ``reserved`` claim with no instance
  :data:`RESERVED_ABANDON_AFTER` after creation, and no instance tagged for it, is closed.
* **node** — a Joiner Node (``joiner.dev/nodepool``/``nodeclaim`` label, or an instance
  tagged for the cluster) whose instance is gone is deleted.
* **launch template** — a template used by no live instance for :data:`TEMPLATE_IDLE`
  (:data:`TEMPLATE_IDLE_ORPHANED` when its NodeClass no longer exists) is deleted.

Guards, all conservative (GC must never kill a healthy node): nothing under termination
(a ``TERMINATION`` item names the node, instance or claim) is touched; a Node that reports
``Ready=True`` is never deleted and keeps its claim open (EC2 and Kubernetes disagree: wait);
a Node created less than :data:`NODE_GRACE` ago is never deleted; an instance that has a
Node is never terminated for lack of a claim; an instance whose state was not looked up is
never treated as gone; at most :attr:`GcPolicy.max_per_kind` actions of a kind per run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.bounded import parse_aware_time
from joiner.domain.launch import CLUSTER_TAG
from joiner.ports import ClaimRecord, ClaimState, InstanceRecord, LaunchTemplateInfo

__all__ = [
    "INSTANCE_GRACE",
    "NODE_GRACE",
    "RESERVED_ABANDON_AFTER",
    "TEMPLATE_IDLE",
    "TEMPLATE_IDLE_ORPHANED",
    "MAX_PER_KIND",
    "LAUNCH_TEMPLATE_TAG",
    "GONE_STATES",
    "KIND_INSTANCE",
    "KIND_CLAIM",
    "KIND_NODE",
    "KIND_LAUNCH_TEMPLATE",
    "KINDS",
    "GcPolicy",
    "GcNode",
    "GcTemplate",
    "GcInputs",
    "GcAction",
    "GcKept",
    "GcPlan",
    "parse_gc_node",
    "instance_of_provider_id",
    "plan_gc",
    "terminating_names",
]

#: An instance's claim write may still be in flight this long after launch (and a brand-new
#: instance may not be visible to DescribeInstances yet).
INSTANCE_GRACE = timedelta(minutes=5)
#: A Node younger than this is never deleted.
NODE_GRACE = timedelta(minutes=10)
#: A ``reserved`` claim this old belongs to a launch that will never happen (provisioning
#: settles its own orphans after 3 minutes; this is the backstop).
RESERVED_ABANDON_AFTER = timedelta(minutes=30)
#: A launch template unused (by any live instance) this long is deleted.
TEMPLATE_IDLE = timedelta(hours=24)
#: ... and this long when its NodeClass no longer exists.
TEMPLATE_IDLE_ORPHANED = timedelta(hours=1)
#: Actions of one kind per run at most (blast radius of a wrong read; the rest wait a run).
MAX_PER_KIND = 50
#: The tag EC2 puts on every instance launched from a launch template.
LAUNCH_TEMPLATE_TAG = "aws:ec2launchtemplate:id"
#: Instance states from which there is no way back.
GONE_STATES = frozenset({"shutting-down", "terminated"})

KIND_INSTANCE = "instance"
KIND_CLAIM = "claim"
KIND_NODE = "node"
KIND_LAUNCH_TEMPLATE = "launch-template"
KINDS = (KIND_INSTANCE, KIND_CLAIM, KIND_NODE, KIND_LAUNCH_TEMPLATE)

_LIVE, _GONE, _ABSENT, _UNKNOWN = "live", "gone", "absent", "unknown"


@dataclass(frozen=True, slots=True)
class GcPolicy:
    """The grace periods and limits :func:`plan_gc` applies (defaults: the module constants)."""

    instance_grace: timedelta = INSTANCE_GRACE
    node_grace: timedelta = NODE_GRACE
    reserved_abandon_after: timedelta = RESERVED_ABANDON_AFTER
    template_idle: timedelta = TEMPLATE_IDLE
    template_idle_orphaned: timedelta = TEMPLATE_IDLE_ORPHANED
    max_per_kind: int = MAX_PER_KIND


@dataclass(frozen=True, slots=True)
class GcNode:
    """What GC needs of a Node."""

    name: str
    uid: str = ""
    instance_id: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    created: datetime | None = None
    ready: bool = False
    deleting: bool = False

    @property
    def labelled_joiner(self) -> bool:
        """Carries Joiner's NodePool or NodeClaim label."""
        return bool(self.labels.get(wk.NODEPOOL) or self.labels.get(wk.NODECLAIM))


@dataclass(frozen=True, slots=True)
class GcTemplate:
    """A launch template tagged for the cluster. ``referenced``: the caller knows of a use
    (instances' ``aws:ec2launchtemplate:id`` tags are checked by :func:`plan_gc` itself)."""

    id: str
    name: str
    created: datetime | None
    node_class: str = ""
    referenced: bool = False

    @classmethod
    def from_info(cls, info: LaunchTemplateInfo, referenced: bool = False) -> GcTemplate:
        return cls(info.ref.id, info.ref.name, info.created, info.node_class, referenced)


@dataclass(frozen=True, slots=True)
class GcInputs:
    """One read of the world.

    ``instances``: the cluster's instances as listed by tag (live states; shutting-down ones
    may be included). ``described``: instances looked up by id because a claim or a Node
    names them and the listing did not include them; ``None`` means looked up and not found.
    An id in neither is *unknown* and never treated as gone. ``terminating_*``: nodes,
    instances and claims named by termination items. ``template_unused_since``: when GC
    first saw each template unused (its own bookkeeping). ``node_classes``: names of the
    NodeClasses that exist (None: unknown, every template's NodeClass counts as existing).
    """

    cluster: str
    now: datetime
    instances: tuple[InstanceRecord, ...] = ()
    described: Mapping[str, InstanceRecord | None] = field(default_factory=dict)
    claims: tuple[ClaimRecord, ...] = ()
    nodes: tuple[GcNode, ...] = ()
    terminating_nodes: frozenset[str] = frozenset()
    terminating_instances: frozenset[str] = frozenset()
    terminating_claims: frozenset[str] = frozenset()
    templates: tuple[GcTemplate, ...] = ()
    template_unused_since: Mapping[str, datetime] = field(default_factory=dict)
    node_classes: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class GcAction:
    """One thing to collect. ``kind``: instance, claim, node or launch-template; ``target``
    its id (node: name). Claim actions carry ``node_pool`` (for the reservation) and
    ``instance_id``; node actions ``uid`` and ``instance_id`` (re-checked before deleting)."""

    kind: str
    target: str
    reason: str
    node_pool: str | None = None
    instance_id: str | None = None
    uid: str | None = None
    claim_id: str | None = None

    def log_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "target": self.target, "reason": self.reason}
        for key, value in (("nodePool", self.node_pool), ("instanceId", self.instance_id), ("claimId", self.claim_id)):
            if value:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class GcKept:
    """A resource a rule would collect that a guard held back, and why."""

    kind: str
    target: str
    reason: str


@dataclass(frozen=True, slots=True)
class GcPlan:
    """The actions of one run, in execution order (nodes of a claim come right before the
    claim), the guards that held, and GC's own launch-template bookkeeping: templates seen
    unused for the first time (``mark_unused``: id -> now) and marks to forget."""

    actions: tuple[GcAction, ...] = ()
    kept: tuple[GcKept, ...] = ()
    mark_unused: Mapping[str, datetime] = field(default_factory=dict)
    unmark: tuple[str, ...] = ()

    def of_kind(self, kind: str) -> tuple[GcAction, ...]:
        return tuple(a for a in self.actions if a.kind == kind)

    def targets(self, kind: str) -> tuple[str, ...]:
        return tuple(a.target for a in self.actions if a.kind == kind)

    def kept_reason(self, kind: str, target: str) -> str | None:
        return next((k.reason for k in self.kept if k.kind == kind and k.target == target), None)


# ---------------------------------------------------------------- parsing


def instance_of_provider_id(provider_id: str | None) -> str | None:
    """``i-...`` from ``aws:///<zone>/<instance-id>``; None for anything else."""
    if not provider_id or not provider_id.startswith("aws://"):
        return None
    tail = provider_id.rsplit("/", 1)[-1]
    return tail if tail.startswith("i-") else None


def _mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (unreadable fields read as absent)."""
    return value if isinstance(value, Mapping) else {}


def parse_gc_node(raw: Mapping[str, Any]) -> GcNode:
    """A Node's JSON reduced to what GC needs. Lenient, and conservative where unsure: an
    unreadable creation time leaves the Node too young to delete, and an unreadable
    ``status.conditions`` counts as Ready (kept). With a conditions list, the Node is Ready
    only when its ``Ready`` condition says ``True``."""
    meta = _mapping(raw.get("metadata"))
    spec = _mapping(raw.get("spec"))
    status = _mapping(raw.get("status"))
    labels = _mapping(meta.get("labels"))
    conditions = status.get("conditions")
    ready = True  # unreadable status: assume healthy
    if isinstance(conditions, list):
        found = [c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Ready"]
        ready = bool(found) and found[0].get("status") == "True"
    provider = spec.get("providerID")
    return GcNode(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        instance_id=instance_of_provider_id(provider if isinstance(provider, str) else None),
        labels={str(k): str(v) for k, v in labels.items()},
        created=parse_aware_time(meta.get("creationTimestamp")),
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
    )


# ---------------------------------------------------------------- planning


def _minutes(delta: timedelta) -> str:
    """A readable duration: ``90 s``, ``42 min``, ``25 h``."""
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


class _Planner:
    def __init__(self, inputs: GcInputs, policy: GcPolicy) -> None:
        self.inputs = inputs
        self.policy = policy
        self.now = inputs.now
        self.listed: dict[str, InstanceRecord] = {r.instance_id: r for r in inputs.instances}
        self.open_claims = [c for c in sorted(inputs.claims, key=lambda c: c.claim_id) if c.state != ClaimState.CLOSED]
        self.claim_by_id = {c.claim_id: c for c in self.open_claims}
        self.claim_by_instance: dict[str, ClaimRecord] = {}
        for claim in self.open_claims:
            if claim.instance_id:
                self.claim_by_instance.setdefault(claim.instance_id, claim)
        self.nodes_by_instance: dict[str, list[GcNode]] = {}
        for node in sorted(inputs.nodes, key=lambda n: n.name):
            if node.instance_id:
                self.nodes_by_instance.setdefault(node.instance_id, []).append(node)
        self.actions: list[GcAction] = []
        self.kept: list[GcKept] = []
        self.deleting_nodes: set[str] = set()

    # -- helpers

    def keep(self, kind: str, target: str, reason: str) -> None:
        self.kept.append(GcKept(kind, target, reason))

    def record(self, instance_id: str) -> InstanceRecord | None:
        return self.listed.get(instance_id) or self.inputs.described.get(instance_id)

    def status(self, instance_id: str) -> tuple[str, InstanceRecord | None]:
        """live / gone (shutting-down, terminated) / absent (looked up, not found) / unknown."""
        record = self.record(instance_id)
        if record is not None:
            return (_GONE if record.state in GONE_STATES else _LIVE), record
        if instance_id in self.inputs.described:
            return _ABSENT, None
        return _UNKNOWN, None

    def under_termination(self, *, node: str | None = None, instance: str | None = None, claim: str | None = None) -> bool:
        i = self.inputs
        return bool((node and node in i.terminating_nodes) or (instance and instance in i.terminating_instances) or (claim and claim in i.terminating_claims))

    def node_guard(self, node: GcNode) -> str | None:
        """Why this Node must not be deleted now (None: it may be)."""
        if self.under_termination(node=node.name, instance=node.instance_id):
            return "termination in progress"
        if node.ready:
            return "Node reports Ready although its instance is gone; EC2 and Kubernetes disagree, waiting"
        if node.created is None:
            return "creation time unknown"
        age = self.now - node.created
        if age < self.policy.node_grace:
            return f"Node registered {_minutes(age)} ago"
        return None

    # -- rules

    def claims(self) -> None:
        for claim in self.open_claims:
            if self.under_termination(node=claim.node_name, instance=claim.instance_id, claim=claim.claim_id):
                continue  # the termination machinery closes it
            if not claim.instance_id:
                self.claim_without_instance(claim)
                continue
            status, record = self.status(claim.instance_id)
            if status == _LIVE:
                continue
            if status == _UNKNOWN:
                self.keep(KIND_CLAIM, claim.claim_id, f"instance {claim.instance_id} state not looked up")
                continue
            if status == _ABSENT:
                since = claim.launched_at or claim.created_at
                if self.now - since < self.policy.instance_grace:
                    self.keep(KIND_CLAIM, claim.claim_id, f"instance {claim.instance_id} not visible yet (launched {_minutes(self.now - since)} ago)")
                    continue
                why = f"instance {claim.instance_id} no longer exists"
            else:
                assert record is not None
                why = f"instance {claim.instance_id} is {record.state}"
            nodes = self.nodes_by_instance.get(claim.instance_id, [])
            blocked = [(n, self.node_guard(n)) for n in nodes if not n.deleting]
            blocked = [(n, reason) for n, reason in blocked if reason]
            if blocked:
                node, reason = blocked[0]
                self.keep(KIND_CLAIM, claim.claim_id, f"{why}, but Node {node.name}: {reason}")
                continue
            for node in nodes:
                if not node.deleting and node.name not in self.deleting_nodes:
                    self.deleting_nodes.add(node.name)
                    self.actions.append(
                        GcAction(
                            KIND_NODE,
                            node.name,
                            f"{why} (claim {claim.claim_id})",
                            instance_id=claim.instance_id,
                            uid=node.uid,
                            claim_id=claim.claim_id,
                            node_pool=claim.node_pool,
                        )
                    )
            if claim.node_name and not any(n.name == claim.node_name for n in nodes):
                other = next((n for n in self.inputs.nodes if n.name == claim.node_name), None)
                if other is not None:
                    # the name now belongs to another instance (private DNS names are reused)
                    self.keep(KIND_NODE, other.name, f"claim {claim.claim_id} names it, but it runs on {other.instance_id}, not {claim.instance_id}")
            self.actions.append(GcAction(KIND_CLAIM, claim.claim_id, why, node_pool=claim.node_pool, instance_id=claim.instance_id))

    def claim_without_instance(self, claim: ClaimRecord) -> None:
        if claim.state != ClaimState.RESERVED:
            self.keep(KIND_CLAIM, claim.claim_id, f"state {claim.state} without an instance id")
            return
        age = self.now - claim.created_at
        if age < self.policy.reserved_abandon_after:
            return  # the provisioning path owns it
        tagged = sorted(r.instance_id for r in self.inputs.instances if r.tags.get(wk.NODECLAIM) == claim.claim_id and r.state not in GONE_STATES)
        if tagged:
            self.keep(KIND_CLAIM, claim.claim_id, f"reserved, but instance {tagged[0]} is tagged for it (provisioning adopts it)")
            return
        self.actions.append(GcAction(KIND_CLAIM, claim.claim_id, f"reserved {_minutes(age)} ago and never launched", node_pool=claim.node_pool))

    def instances(self) -> None:
        for record in sorted(self.inputs.instances, key=lambda r: r.instance_id):
            if record.state in GONE_STATES:
                continue
            if record.tags.get(CLUSTER_TAG) != self.inputs.cluster:
                continue  # not ours, whatever the listing said
            iid = record.instance_id
            if iid in self.claim_by_instance:
                continue
            tagged_claim = record.tags.get(wk.NODECLAIM)
            owner_claim = self.claim_by_id.get(tagged_claim or "")
            if owner_claim is not None and not owner_claim.instance_id:
                self.keep(KIND_INSTANCE, iid, f"claim {tagged_claim} is open (its launch is being recorded)")
                continue
            if self.under_termination(instance=iid):
                self.keep(KIND_INSTANCE, iid, "termination in progress")
                continue
            if record.launch_time is None:
                self.keep(KIND_INSTANCE, iid, "launch time unknown")
                continue
            age = self.now - record.launch_time
            if age < self.policy.instance_grace:
                self.keep(KIND_INSTANCE, iid, f"launched {_minutes(age)} ago; its claim may still be being written")
                continue
            nodes = self.nodes_by_instance.get(iid, [])
            if nodes:
                self.keep(KIND_INSTANCE, iid, f"no open claim, but Node {nodes[0].name} runs on it (left to an operator)")
                continue
            if owner_claim is not None:
                owner = f"duplicate launch: claim {tagged_claim} owns {owner_claim.instance_id}"
            else:
                owner = f"claim {tagged_claim} is closed or unknown" if tagged_claim else "no claim"
            self.actions.append(GcAction(KIND_INSTANCE, iid, f"{owner} {_minutes(age)} after launch", claim_id=tagged_claim or None))

    def nodes(self) -> None:
        for node in sorted(self.inputs.nodes, key=lambda n: n.name):
            iid = node.instance_id
            if not iid or node.deleting or node.name in self.deleting_nodes:
                continue
            if iid in self.claim_by_instance:
                continue  # its claim's rule decides (and may have held it back)
            status, record = self.status(iid)
            if status in (_LIVE, _UNKNOWN):
                continue
            ours = node.labelled_joiner or (record is not None and record.tags.get(CLUSTER_TAG) == self.inputs.cluster)
            if not ours:
                continue  # another provisioner's Node
            guard = self.node_guard(node)
            why = f"instance {iid} is {record.state}" if record is not None else f"instance {iid} no longer exists"
            if guard:
                self.keep(KIND_NODE, node.name, f"{why}, but {guard}")
                continue
            self.deleting_nodes.add(node.name)
            self.actions.append(GcAction(KIND_NODE, node.name, why, instance_id=iid, uid=node.uid))

    def templates(self) -> tuple[dict[str, datetime], list[str]]:
        in_use = {r.tags.get(LAUNCH_TEMPLATE_TAG) for r in self.inputs.instances if r.state not in GONE_STATES}
        in_use |= {r.tags.get(LAUNCH_TEMPLATE_TAG) for r in self.inputs.described.values() if r is not None and r.state not in GONE_STATES}
        marks = self.inputs.template_unused_since
        mark: dict[str, datetime] = {}
        unmark: list[str] = []
        listed = {t.id for t in self.inputs.templates}
        unmark.extend(sorted(set(marks) - listed))
        for template in sorted(self.inputs.templates, key=lambda t: t.name):
            if template.referenced or template.id in in_use:
                if template.id in marks:
                    unmark.append(template.id)
                continue
            since = marks.get(template.id)
            if since is None:
                mark[template.id] = self.now
                since = self.now
            if template.created is not None:
                since = max(since, template.created)
            else:
                since = self.now  # unknown age: never old enough
            classes = self.inputs.node_classes
            orphaned = classes is not None and template.node_class not in classes
            idle = self.policy.template_idle_orphaned if orphaned else self.policy.template_idle
            if self.now - since < idle:
                continue
            why = f"unused for {_minutes(self.now - since)}" + (f" and NodeClass {template.node_class or '?'} is gone" if orphaned else "")
            self.actions.append(GcAction(KIND_LAUNCH_TEMPLATE, template.id, f"{template.name}: {why}"))
        return mark, unmark

    def capped(self) -> list[GcAction]:
        """At most ``max_per_kind`` actions per kind; a claim's Node deletions are kept with it."""
        limit = self.policy.max_per_kind
        out: list[GcAction] = []
        counts: dict[str, int] = {}
        claim_nodes: dict[str, list[GcAction]] = {}
        for action in self.actions:
            if action.kind == KIND_NODE and action.claim_id:
                claim_nodes.setdefault(action.claim_id, []).append(action)
        for action in self.actions:
            if action.kind == KIND_NODE and action.claim_id:
                continue  # placed with its claim
            group = [*claim_nodes.get(action.target, []), action] if action.kind == KIND_CLAIM else [action]
            if any(counts.get(a.kind, 0) >= limit for a in group):
                for a in group:
                    self.keep(a.kind, a.target, f"over this run's limit of {limit} {a.kind} actions: {a.reason}")
                continue
            for a in group:
                counts[a.kind] = counts.get(a.kind, 0) + 1
            out.extend(group)
        return out


def plan_gc(inputs: GcInputs, policy: GcPolicy = GcPolicy()) -> GcPlan:
    """Decide what to collect from one read of the world (see the module docstring).

    Order of the plan: claims (each preceded by the deletion of its Nodes), orphaned Nodes,
    instances, launch templates.
    """
    planner = _Planner(inputs, policy)
    planner.claims()
    planner.nodes()
    planner.instances()
    mark, unmark = planner.templates()
    actions = planner.capped()
    deleted_templates = {a.target for a in actions if a.kind == KIND_LAUNCH_TEMPLATE}
    return GcPlan(
        actions=tuple(actions),
        kept=tuple(planner.kept),
        mark_unused={k: v for k, v in sorted(mark.items()) if k not in deleted_templates},
        unmark=tuple(dict.fromkeys(unmark)),
    )


def terminating_names(items: Iterable[Mapping[str, Any]]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(nodes, instances, claims) named by termination items (``TERMINATION`` kind data)."""
    nodes: set[str] = set()
    instances: set[str] = set()
    claims: set[str] = set()
    for item in items:
        for key, bucket in (("node", nodes), ("instanceId", instances), ("claimId", claims)):
            value = item.get(key)
            if isinstance(value, str) and value:
                bucket.add(value)
    return frozenset(nodes), frozenset(instances), frozenset(claims)
