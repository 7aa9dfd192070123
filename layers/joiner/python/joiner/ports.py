"""Ports: the small ``typing.Protocol`` interfaces services use to reach the world.

Adapters in :mod:`joiner.adapters` implement them against EC2/SSM/EKS/STS (boto3),
DynamoDB (boto3) and the Kubernetes API (Joiner's own client on urllib3, raw JSON; the
``kubernetes`` package stays out of Lambda's cold start). Unit tests use
in-memory fakes (``tests/support/fakes.py``). Kubernetes objects cross this boundary as
plain JSON dicts; :mod:`joiner.domain.snapshot` turns them into domain objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from joiner.domain.model import NodeClass, OfferingKey, SelectorTerm, Taint
from joiner.domain.resources import Resources

JsonDict = dict[str, Any]


class Clock(Protocol):
    def now(self) -> datetime:
        """Timezone-aware UTC now."""
        ...


# ---------------------------------------------------------------- Kubernetes


@dataclass(frozen=True, slots=True)
class EvictionOutcome:
    """Result of one Eviction API call: ``evicted``, ``blocked`` (429: a PDB disallows it
    now), ``gone`` (404: the pod no longer exists)."""

    status: str
    message: str = ""


class KubernetesError(Exception):
    """A Kubernetes API call failed after bounded retries."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class WatchExpired(KubernetesError):
    """A watch's ``resourceVersion`` is older than the API server keeps (410 Gone): list again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=410)


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a watch stream: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK`` and
    the object (for a bookmark only its ``metadata.resourceVersion`` is meaningful)."""

    type: str
    object: JsonDict

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class PodWatchPort(Protocol):
    """What the watcher needs: pods without a node, listed and then watched from the list's
    version (``spec.nodeName=``: a pod that is bound leaves the watch as ``DELETED``), and the
    NodePools and NodeClasses whose changes can make pending pods schedulable, and the Nodes
    Joiner launched as they register."""

    def list_unbound_pods(self) -> tuple[list[JsonDict], str]:
        """The unbound pods and the list's ``resourceVersion``. A pod may be trimmed to its
        metadata (name, namespace, uid, resourceVersion, deletionTimestamp, ownerReferences),
        ``spec.nodeName`` and status (phase, nominatedNodeName, conditions): what deciding
        whether it is pending needs."""
        ...

    def watch_unbound_pods(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Events after ``resource_version`` until the server ends the stream (about
        ``timeout_seconds``). Raises :class:`WatchExpired` when the version is too old and
        :class:`KubernetesError` when the stream fails."""
        ...

    def plan_input_version(self, resource: str) -> str:
        """The current ``resourceVersion`` of ``nodepools``, ``nodeclasses`` or ``nodes`` (a one-item list)."""
        ...

    def watch_plan_inputs(self, resource: str, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Changes to NodePools, NodeClasses or (``nodes``) the Nodes Joiner launched that its
        registration has not labelled yet, after ``resource_version`` (as :meth:`watch_unbound_pods`;
        a Node Joiner labels leaves the ``nodes`` watch as ``DELETED``)."""
        ...


class ScannerWakePort(Protocol):
    """Wakes the scanner function to run a round now."""

    def wake(self, reason: str, pending_pods: int) -> None: ...


class KubernetesPort(PodWatchPort, Protocol):
    def list_pods(self, *, field_selector: str | None = None, label_selector: str | None = None) -> list[JsonDict]: ...
    def list_pending_pods(self) -> list[JsonDict]:
        """Unbound pods with PodScheduled=False/Unschedulable, not DaemonSet-owned."""
        ...

    def list_pods_on_node(self, node_name: str) -> list[JsonDict]: ...
    def list_nodes(self) -> list[JsonDict]: ...
    def list_pages(self, resource: str) -> Iterator[tuple[list[JsonDict], str]]:
        """Every object of ``resource`` (``pods``, ``nodes`` or ``nodeclaims``: Joiner's
        mirrors; 404 when their CRD is not installed), a page at a time, each page
        with the list's ``resourceVersion``. Objects may lack the arrays no part of Joiner reads
        (``managedFields``, container statuses, a Node's images). Raises :class:`KubernetesError`
        when the listing must restart (an expired continuation): the caller lists again."""
        ...

    def changes_since(self, resource: str, resource_version: str) -> Iterator[WatchEvent]:
        """The changes to ``resource`` (as :meth:`list_pages`) after ``resource_version`` that
        the server has ready now, in order, then the iterator ends (it does not wait for new
        ones): whatever prefix a caller has applied is a consistent state at the last event's
        version; objects may lack the same arrays as :meth:`list_pages`'. Raises
        :class:`WatchExpired` when the version is older than the server keeps."""
        ...

    def iter_nodes(self, *, label_selector: str | None = None) -> Iterator[JsonDict]:
        """The Nodes, read a page at a time: memory holds one page, so a caller that keeps only
        what it parses never holds the raw list; ``label_selector`` narrows them. Objects may lack
        the arrays no part of Joiner reads, as in :meth:`list_pages`. Raises
        :class:`KubernetesError` when the listing must restart (an expired continuation)."""
        ...

    def get_node(self, name: str) -> JsonDict | None: ...
    def list_daemonsets(self) -> list[JsonDict]: ...
    def list_pdbs(self) -> list[JsonDict]: ...
    def list_node_pools(self) -> list[JsonDict]:
        """Joiner's NodePools; with ``JOINER_KARPENTER_CRDS`` also Karpenter's, converted to
        ``joiner.dev/v1`` (:func:`joiner.domain.karpenter.read_karpenter`)."""
        ...

    def list_node_classes(self) -> list[JsonDict]:
        """Joiner's NodeClasses; with ``JOINER_KARPENTER_CRDS`` also Karpenter's EC2NodeClasses, converted."""
        ...

    def list_runtime_classes(self) -> list[JsonDict]: ...
    def patch_node(self, name: str, patch: JsonDict) -> JsonDict:
        """Strategic-merge-free JSON merge patch of a Node (labels, annotations, spec.taints, spec.unschedulable)."""
        ...

    def set_node_finalizer(self, name: str, finalizer: str, present: bool) -> bool:
        """Add or remove one finalizer of a Node, keeping the others; False when it is gone."""
        ...

    def delete_node(self, name: str, uid: str | None = None) -> bool:
        """Delete a Node; one already gone is fine (True). With ``uid``, only that very Node
        (DeleteOptions ``preconditions.uid``): a Node re-created under the same name has
        another uid, the API answers 409 and nothing is deleted (False)."""
        ...

    def evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> EvictionOutcome: ...
    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None: ...
    def nominate_pod(self, namespace: str, name: str, uid: str, node_name: str) -> bool:
        """Set an unbound pod's ``status.nominatedNodeName`` (merge patch of its status, only
        that very pod: ``uid`` is a precondition); False when it is gone or was re-created."""
        ...

    def create_event(self, involved: JsonDict, reason: str, message: str, event_type: str = "Normal") -> None:
        """Record a core/v1 Event; ``involved`` is an object (its kind, name, namespace, uid are used)."""
        ...

    def patch_node_pool_status(self, name: str, status: JsonDict) -> None: ...
    def patch_node_class_status(self, name: str, status: JsonDict) -> None:
        """Merge patch on a NodeClass's status subresource; a NodeClass deleted meanwhile is skipped."""
        ...

    def list_volume_objects(self) -> list[JsonDict]:
        """PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes (each with its kind)."""
        ...

    def list_node_claims(self) -> list[JsonDict]:
        """NodeClaim mirrors (``joiner.dev/v1``); none when their CRD is not installed."""
        ...

    def get_node_claim(self, name: str) -> JsonDict | None:
        """One NodeClaim mirror; None when there is none (or no NodeClaim CRD)."""
        ...

    def create_node_claim(self, obj: JsonDict) -> JsonDict | None:
        """Create a NodeClaim mirror: the object created (its uid), None if one of that name exists."""
        ...

    def list_node_overlays(self) -> list[JsonDict]:
        """NodeOverlays (``joiner.dev/v1alpha1``); none when their CRD is not installed."""
        ...

    def patch_node_overlay_status(self, name: str, status: JsonDict) -> None:
        """Merge patch on a NodeOverlay's status subresource; one deleted meanwhile is skipped."""
        ...

    def patch_node_claim(self, name: str, patch: JsonDict, *, status: bool = False) -> bool:
        """Merge patch of a NodeClaim mirror or (``status``) its status; False if it is gone."""
        ...

    def delete_node_claim(self, name: str, uid: str | None = None) -> bool:
        """Delete a NodeClaim mirror (only that very object with ``uid``); False on a uid mismatch."""
        ...


# ---------------------------------------------------------------- EC2


@dataclass(frozen=True, slots=True)
class Subnet:
    id: str
    zone: str
    available_ips: int = 0
    tags: Mapping[str, str] = field(default_factory=dict)
    #: ``MapPublicIpOnLaunch``: instances launched here get a public IPv4 address (billed hourly).
    map_public_ip: bool = False


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    name: str
    endpoint: str
    certificate_authority: str  # base64 PEM, as DescribeCluster returns it
    version: str  # e.g. "1.31"
    service_cidr: str = "172.20.0.0/16"
    cluster_dns: str | None = None


@dataclass(frozen=True, slots=True)
class LaunchTemplateRef:
    id: str
    name: str
    version: str = "$Latest"


@dataclass(frozen=True, slots=True)
class FleetOverride:
    """One (instance type, subnet) a fleet may launch; ``launch_template`` when this type
    needs another template than the request's (another AMI variant, e.g. NVIDIA)."""

    instance_type: str
    subnet_id: str
    zone: str
    priority: float | None = None
    launch_template: LaunchTemplateRef | None = None


@dataclass(frozen=True, slots=True)
class FleetRequest:
    """One EC2 Fleet ``instant`` request for one node claim."""

    client_token: str
    launch_template: LaunchTemplateRef
    capacity_type: str  # "reserved" | "spot" | "on-demand" (reserved: on-demand into the overrides' reservations)
    overrides: tuple[FleetOverride, ...]
    tags: Mapping[str, str]
    target_capacity: int = 1
    #: reserved launches: "default" (on-demand capacity reservations) or "capacity-block"
    #: (EC2 Fleet's capacity-block market; one Capacity Block per request)
    reservation_type: str = "default"

    @property
    def launch_templates(self) -> tuple[LaunchTemplateRef, ...]:
        """Every template the request names, the request's own first, then in override order."""
        found = {self.launch_template.id: self.launch_template}
        for override in self.overrides:
            if override.launch_template is not None:
                found.setdefault(override.launch_template.id, override.launch_template)
        return tuple(found.values())


@dataclass(frozen=True, slots=True)
class LaunchedInstance:
    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str
    subnet_id: str = ""


@dataclass(frozen=True, slots=True)
class FleetError:
    """One error from CreateFleet: ``code`` such as InsufficientInstanceCapacity."""

    code: str
    message: str
    instance_type: str | None = None
    zone: str | None = None
    subnet_id: str | None = None
    capacity_type: str | None = None

    @property
    def is_capacity_error(self) -> bool:
        return self.code in CAPACITY_ERROR_CODES


CAPACITY_ERROR_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "UnfulfillableCapacity",
        "MaxSpotInstanceCountExceeded",
        "InsufficientFreeAddressesInSubnet",
        "SpotMaxPriceTooLow",
        "VcpuLimitExceeded",
        "Unsupported",
        "ReservationCapacityExceeded",
    }
)


@dataclass(frozen=True, slots=True)
class FleetResult:
    instances: tuple[LaunchedInstance, ...]
    errors: tuple[FleetError, ...] = ()


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    instance_id: str
    instance_type: str
    zone: str
    state: str
    launch_time: datetime | None
    tags: Mapping[str, str] = field(default_factory=dict)
    capacity_type: str = "on-demand"
    #: launch inputs as EC2 reports them ("" / () when not reported): drift detection
    image_id: str = ""
    subnet_id: str = ""
    security_group_ids: tuple[str, ...] = ()  # sorted
    #: the capacity reservation the instance runs in ("" when none)
    capacity_reservation_id: str = ""


@dataclass(frozen=True, slots=True)
class LaunchTemplateInfo:
    """A launch template Joiner created for a cluster (``joiner.dev/cluster`` tag), for
    garbage collection. ``node_class`` is its ``joiner.dev/nodeclass`` tag ("" if missing);
    ``created`` is EC2's CreateTime (None when unknown)."""

    ref: LaunchTemplateRef
    node_class: str
    created: datetime | None


class Ec2Error(Exception):
    """An EC2 call failed after botocore's retries (throttling included)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


#: EC2 error codes meaning "this launch template (version) does not exist (any more)".
LAUNCH_TEMPLATE_NOT_FOUND_CODES = frozenset(
    {"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.VersionNotFound"}
)


class LaunchTemplateNotFound(Ec2Error):
    """CreateFleet named a launch template that no longer exists (gc deleted it) and launched
    nothing. ``template`` is the request's template; the adapter has already forgotten it, so
    ``ensure_launch_template`` creates it again."""

    def __init__(self, message: str, code: str, template: LaunchTemplateRef) -> None:
        super().__init__(message, code)
        self.template = template


#: ``CapacityReservation.reservation_type`` of a Capacity Block (EC2's ``ReservationType``).
CAPACITY_BLOCK = "capacity-block"


@dataclass(frozen=True, slots=True)
class CapacityReservation:
    """An active on-demand capacity reservation a NodeClass selects: ``available`` instances
    of ``instance_type`` may still launch into it in ``zone``. ``reservation_type`` is
    ``default`` or ``capacity-block``."""

    id: str
    instance_type: str
    zone: str
    available: int
    owner_id: str = ""
    match_criteria: str = "open"
    reservation_type: str = "default"
    end_time: datetime | None = None


class Ec2Port(Protocol):
    def resolve_subnets(self, terms: Sequence[SelectorTerm]) -> list[Subnet]: ...
    def resolve_capacity_reservations(self, terms: Sequence[SelectorTerm]) -> list[CapacityReservation]:
        """Active reservations matching any term (``id``, or ``tags`` and ``owner``), sorted by id."""
        ...

    def resolve_security_groups(self, terms: Sequence[SelectorTerm]) -> list[str]: ...
    def instance_profile(self, node_class: NodeClass) -> str:
        """The instance profile launches of this NodeClass pass; raises the adapter's config
        error (an :class:`Ec2Error`) when Joiner may not pass it (``iam:PassRole`` scope)."""
        ...

    def resolve_ami(self, node_class: NodeClass, kubernetes_version: str, arch: str, variant: str = "standard") -> str:
        """The AMI a launch of this architecture and AL2023 variant uses (see joiner.domain.amis)."""
        ...

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
        """Create (or reuse when inputs are unchanged) the launch template for this NodeClass and
        architecture. ``labels``/``taints`` go into the kubelet's start flags (user data), so the
        template is also per distinct label/taint set (see docs/aws.md). ``tenancy``
        ``dedicated`` launches Dedicated Instances (``Placement.Tenancy``). A template targeting a
        ``capacity-block`` reservation uses the capacity-block market."""
        ...

    def create_fleet(self, request: FleetRequest) -> FleetResult: ...
    def terminate_instances(self, instance_ids: Sequence[str]) -> None: ...
    def describe_instances(self, instance_ids: Sequence[str]) -> list[InstanceRecord]: ...
    def list_cluster_instances(self, cluster_name: str) -> list[InstanceRecord]:
        """Non-terminated instances tagged for this cluster by Joiner."""
        ...

    def reservation_instances(self, cluster_name: str, reservation_id: str) -> list[InstanceRecord]:
        """Non-terminated instances tagged for this cluster running in capacity reservation
        ``reservation_id`` (DescribeInstances filter ``capacity-reservation-id``)."""
        ...

    def describe_cluster(self, cluster_name: str) -> ClusterInfo: ...
    def list_launch_templates(self, cluster_name: str) -> list[LaunchTemplateInfo]:
        """Launch templates Joiner created for this cluster (tagged ``joiner.dev/cluster``), by name."""
        ...

    def delete_launch_template(self, template_id: str) -> None:
        """Delete one launch template; one already gone is not an error."""
        ...

    def spot_prices(self) -> dict[tuple[str, str], float]:
        """Current Linux spot price per ``(instance type, zone)`` (EC2 spot price history)."""
        ...

    def describe_instance_types(self) -> list[JsonDict]:
        """Every ``DescribeInstanceTypes`` record of the region, raw."""
        ...

    def instance_type_zones(self) -> dict[str, list[str]]:
        """Availability zones each instance type is offered in (``DescribeInstanceTypeOfferings``)."""
        ...

    def zone_ids(self) -> dict[str, str]:
        """Zone name -> zone id (``use1-az4``) of the region's zones (``DescribeAvailabilityZones``)."""
        ...


class PricingPort(Protocol):
    def on_demand_prices(self, region: str) -> dict[str, float]:
        """Linux shared-tenancy on-demand USD per hour by instance type in ``region`` (AWS Pricing API)."""
        ...


# ---------------------------------------------------------------- State (DynamoDB)


class ClaimState(StrEnum):
    """A claim's lifecycle, stored as these strings in the state table. A ``StrEnum``: each
    member equals its string, so records read back with plain strings compare equal."""

    #: The NodePool limit is reserved; nothing launched yet.
    RESERVED = "reserved"
    #: Fleet returned an instance.
    LAUNCHED = "launched"
    #: The instance's Node exists.
    REGISTERED = "registered"
    #: The Node is Ready and its startup taints are gone.
    INITIALIZED = "initialized"
    #: Deletion started (drain, then terminate).
    TERMINATING = "terminating"
    #: Done: the instance is gone or was never launched; the record expires after retention.
    CLOSED = "closed"


#: Claims launched or launching whose Node is not yet initialized (``joiner status``'s IN FLIGHT).
IN_FLIGHT_STATES = (ClaimState.RESERVED, ClaimState.LAUNCHED, ClaimState.REGISTERED)


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """A node claim's durable state; ``state`` is a :class:`ClaimState`."""

    claim_id: str
    node_pool: str
    state: str  # a ClaimState (plain strings compare equal)
    created_at: datetime
    instance_id: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    price: float | None = None
    pods: tuple[str, ...] = ()
    node_name: str | None = None
    reserved: Resources = Resources()
    launched_at: datetime | None = None
    registered_at: datetime | None = None
    initialized_at: datetime | None = None
    closed_at: datetime | None = None
    #: When a round first found this registered claim's Node gone with no termination under
    #: way (deleted past Joiner's finalizer); cleared when the Node is back.
    node_lost_at: datetime | None = None
    reason: str = ""
    #: :func:`joiner.domain.model.nodepool_hash` of the NodePool when the claim was made
    #: (stamped on its Node at registration; a different hash later means template drift).
    pool_hash: str = ""
    #: :func:`joiner.domain.model.nodeclass_hash` of its NodeClass when the claim was made.
    class_hash: str = ""


class StateError(Exception):
    """A DynamoDB call failed after botocore's retries, or the table holds something unexpected."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class ClaimNotFound(StateError, LookupError):
    """``update_claim`` on a claim id that does not exist."""

    def __init__(self, claim_id: str) -> None:
        super().__init__(f"node claim {claim_id} does not exist", code="ClaimNotFound")
        self.claim_id = claim_id


class ClaimStateConflict(StateError):
    """``update_claim(..., expected_state=...)`` found the claim in another state (a concurrent
    transition won): nothing was written. ``current`` is the claim as it is now."""

    def __init__(self, claim_id: str, expected: tuple[str, ...], current: ClaimRecord) -> None:
        super().__init__(
            f"node claim {claim_id} is {current.state}, not {' or '.join(expected)}: a concurrent change won",
            code="ClaimStateConflict",
        )
        self.claim_id = claim_id
        self.expected = expected
        self.current = current


class StatePort(Protocol):
    def put_claim(self, claim: ClaimRecord) -> bool:
        """Create the claim; False when one with this id already exists (idempotent retry)."""
        ...

    def update_claim(self, claim_id: str, *, expected_state: str | tuple[str, ...] | None = None, **fields: Any) -> ClaimRecord:
        """Set fields and return the updated claim. Raises :class:`ClaimNotFound` for an
        unknown id and, when ``expected_state`` is given and the claim's current state is not
        (one of) it, :class:`ClaimStateConflict` (nothing written) carrying the current record."""
        ...

    def get_claim(self, claim_id: str) -> ClaimRecord | None: ...
    def claim_by_instance(self, instance_id: str) -> ClaimRecord | None: ...
    def claims_by_node_pool(self, node_pool: str) -> list[ClaimRecord]: ...
    def open_claims(self) -> list[ClaimRecord]:
        """Claims not closed. Reads no item per claim of the table's other kinds, and the
        caller's own writes of the last minutes are always reflected; another caller's write
        of the last moments may not be yet (an eventually consistent index), so a decision
        that a claim is absent or in some state is re-checked by id (:meth:`get_claim`,
        strongly consistent) or made by a conditional write."""
        ...

    def reserve_capacity(self, node_pool: str, claim_id: str, amount: Resources, limits: Resources | None, in_use: Resources) -> bool:
        """Atomically add ``amount`` to the pool's reserved total unless ``in_use`` + reserved +
        amount would exceed ``limits``. Idempotent per claim id. False when the limit would be
        exceeded.

        The reserved total is the NodePool's one authoritative usage figure: a claim's
        reservation stays in it from before its launch until its capacity is really gone
        (instance terminated, launch failed or abandoned); registering a Node does not move it.
        ``in_use`` is only what Nodes no reservation covers use (Nodes of claims released by an
        older version, Nodes Joiner has no claim for): nothing a concurrent round does can
        make it shrink while the capacity still exists.

        No stored item grows with the number of reservations: the total and each claim's
        reservation are separate items, changed together atomically."""
        ...

    def release_capacity(self, node_pool: str, claim_id: str) -> None:
        """Return a claim's reservation (no-op if already released; never subtracted twice,
        however many callers release it at once): only once its capacity is gone."""
        ...

    def shrink_reservation(self, node_pool: str, claim_id: str, amount: Resources) -> None:
        """Lower a claim's reservation to ``amount`` (at most what it holds, per resource) in one
        atomic step, e.g. from the largest candidate to the instance type launched. A no-op
        when the claim holds no reservation."""
        ...

    def reserved_capacity(self, node_pool: str) -> Resources: ...
    def reservations(self, node_pool: str) -> dict[str, Resources]:
        """Claim id -> its reservation, for every claim the pool's reserved total holds
        (strongly consistent; a paged read: a concurrent change may land between pages, so
        the sum is not checked against :meth:`reserved_capacity` by callers)."""
        ...

    def acquire_lease(self, name: str, owner: str, now: datetime, ttl_seconds: int) -> bool:
        """Take or renew a lease with a conditional write; False when another owner holds an unexpired one."""
        ...

    def release_lease(self, name: str, owner: str) -> None: ...

    def mark_unavailable(self, key: OfferingKey, until: datetime, reason: str) -> None: ...
    def unavailable_offerings(self, now: datetime) -> frozenset[OfferingKey]: ...

    def put_item(self, kind: str, item_id: str, data: JsonDict, *, expires_at: datetime | None = None, if_absent: bool = False) -> bool:
        """Generic durable record (termination state, disruption commands...). False when
        ``if_absent`` and it exists."""
        ...

    def get_item(self, kind: str, item_id: str) -> JsonDict | None: ...
    def delete_item(self, kind: str, item_id: str) -> None: ...
    def list_items(self, kind: str) -> list[JsonDict]: ...


class QueuePort(Protocol):
    def send(self, body: JsonDict, delay_seconds: int = 0, dedup_id: str | None = None) -> None:
        """Send a message (delay 0-900 s) to the work queue for continuations."""
        ...


class BlobError(RuntimeError):
    """A blob could not be read or written (the store is unreachable, refused or throttled)."""


class BlobPort(Protocol):
    """A small private object store (an S3 bucket deployed; a directory locally): whole
    objects by key, each write replacing the object at once (a reader sees the old object or
    the new one, never a mix)."""

    def get(self, key: str) -> bytes | None:
        """The object's bytes; None when there is none. Raises :class:`BlobError`."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` as the object (replacing it). Raises :class:`BlobError`."""
        ...
