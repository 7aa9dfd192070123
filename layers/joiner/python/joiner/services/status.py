"""What a running Joiner is doing, from its state table and the cluster (``joiner status``).

Read-only: NodePools with their nodes' capacity and the reservation their limits are checked
against, claims in flight (reserved, launched, registered) with their age, terminations in
progress, offerings marked unavailable, pending pods with the reason Joiner gave them
(its latest ``FailedScheduling`` event) and Joiner's recent decisions (its Kubernetes events).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from joiner.domain import labels as wk
from joiner.domain.bounded import parse_aware_time
from joiner.domain.model import OfferingKey
from joiner.domain.quantity import QuantityError, parse_milli
from joiner.domain.resources import Resources
from joiner.ports import IN_FLIGHT_STATES, ClaimRecord, JsonDict

__all__ = ["ClusterStatus", "StatusKube", "StatusState", "collect_status", "format_age"]

#: Claim states that are neither settled (initialized) nor over (terminating, closed).
#: How many of Joiner's latest events ``recentDecisions`` keeps.
RECENT_DECISIONS = 20
EVENT_COMPONENT = "joiner"


class StatusState(Protocol):
    def open_claims(self) -> list[ClaimRecord]: ...
    def reservations(self, node_pool: str) -> dict[str, Resources]: ...
    def unavailable_offerings(self, now: datetime) -> frozenset[OfferingKey]: ...
    def list_items(self, kind: str) -> list[JsonDict]: ...


class StatusKube(Protocol):
    def list_node_pools(self) -> list[JsonDict]: ...
    def list_nodes(self) -> list[JsonDict]: ...
    def list_pending_pods(self) -> list[JsonDict]: ...
    def list_events(self) -> list[JsonDict]: ...


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """One snapshot of Joiner's view; :meth:`to_dict` is ``joiner status -o json``."""

    generated_at: datetime
    node_pools: tuple[JsonDict, ...]
    claims_in_flight: tuple[JsonDict, ...]
    terminations: tuple[JsonDict, ...]
    unavailable_offerings: tuple[JsonDict, ...]
    pending_pods: tuple[JsonDict, ...]
    recent_decisions: tuple[JsonDict, ...] = field(default=())

    def to_dict(self) -> JsonDict:
        return {
            "generatedAt": _iso(self.generated_at),
            "nodePools": list(self.node_pools),
            "claimsInFlight": list(self.claims_in_flight),
            "terminations": list(self.terminations),
            "unavailableOfferings": list(self.unavailable_offerings),
            "pendingPods": list(self.pending_pods),
            "recentDecisions": list(self.recent_decisions),
        }


def format_age(seconds: float) -> str:
    """kubectl's human durations: 45s, 5m12s, 3h4m, 2d3h, 400d."""
    total = max(0, int(seconds))
    if total < 120:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 10:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours, mins = divmod(minutes, 60)
    if hours < 8:
        return f"{hours}h{mins}m" if mins else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days, hrs = divmod(hours, 24)
    if days < 8:
        return f"{days}d{hrs}h" if hrs else f"{days}d"
    return f"{days}d"


def collect_status(state: StatusState, kube: StatusKube, now: datetime) -> ClusterStatus:
    """Read everything ``joiner status`` shows (a handful of API calls and table reads)."""
    pools = kube.list_node_pools()
    nodes = kube.list_nodes()
    claims = [c for c in state.open_claims() if c.state in IN_FLIGHT_STATES]
    capacity_by_pool: dict[str, Resources] = {}
    nodes_by_pool: dict[str, int] = {}
    for node in nodes:
        pool = ((node.get("metadata") or {}).get("labels") or {}).get(wk.NODEPOOL)
        if not pool:
            continue
        nodes_by_pool[pool] = nodes_by_pool.get(pool, 0) + 1
        capacity_by_pool[pool] = capacity_by_pool.get(pool, Resources()) + _resources((node.get("status") or {}).get("capacity"))
    pool_rows = []
    for pool in sorted(pools, key=lambda p: str((p.get("metadata") or {}).get("name", ""))):
        name = str((pool.get("metadata") or {}).get("name", ""))
        spec = pool.get("spec") or {}
        node_class = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        reserved = sum(state.reservations(name).values(), Resources()) if name else Resources()
        pool_rows.append(
            {
                "name": name,
                "nodeClass": node_class.get("name"),
                "nodes": nodes_by_pool.get(name, 0),
                "capacity": capacity_by_pool.get(name, Resources()).as_quantities(),
                "reserved": reserved.as_quantities(),
                "limits": dict(sorted((str(k), str(v)) for k, v in (spec.get("limits") or {}).items())),
                "inFlight": sum(1 for c in claims if c.node_pool == name),
                "ready": _condition(pool, "Ready"),
            }
        )
    claim_rows = [
        {
            "claim": c.claim_id,
            "nodePool": c.node_pool,
            "state": c.state,
            "instanceType": c.instance_type,
            "zone": c.zone,
            "capacityType": c.capacity_type,
            "instanceId": c.instance_id,
            "node": c.node_name,
            "pods": len(c.pods),
            "age": format_age((now - c.created_at).total_seconds()),
        }
        for c in sorted(claims, key=lambda c: (c.created_at, c.claim_id))
    ]
    terminations = []
    for item in sorted(state.list_items("TERMINATION"), key=lambda i: str(i.get("node", ""))):
        terminations.append(
            {
                "node": item.get("node"),
                "reason": item.get("reason"),
                "phase": item.get("phase"),
                "deadline": item.get("deadline"),
                "replacementClaims": list(item.get("replacementClaims") or ()),
                "age": _age_of(item.get("startedAt"), now),
            }
        )
    unavailable = [
        {"instanceType": o.instance_type, "zone": o.zone, "capacityType": o.capacity_type, **({"reservationId": o.reservation_id} if o.reservation_id else {})}
        for o in sorted(state.unavailable_offerings(now))
    ]
    events = [e for e in kube.list_events() if _from_joiner(e)]
    latest_reason: dict[str, str] = {}
    for event in sorted(events, key=_event_time):
        involved = event.get("involvedObject") or {}
        if involved.get("kind") == "Pod" and event.get("reason") == "FailedScheduling":
            latest_reason[f"{involved.get('namespace')}/{involved.get('name')}"] = str(event.get("message") or "")
    pending = []
    for pod in sorted(kube.list_pending_pods(), key=lambda p: (str(p["metadata"].get("namespace")), str(p["metadata"].get("name")))):
        meta = pod["metadata"]
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        pending.append({"pod": key, "age": _age_of(meta.get("creationTimestamp"), now), "reason": latest_reason.get(key, "")})
    decisions = [
        {
            "time": _event_time(e),
            "object": f"{(e.get('involvedObject') or {}).get('kind')}/{(e.get('involvedObject') or {}).get('name')}",
            "reason": e.get("reason"),
            "message": e.get("message"),
            "count": e.get("count") or 1,
        }
        for e in sorted(events, key=_event_time, reverse=True)[:RECENT_DECISIONS]
    ]
    return ClusterStatus(now, tuple(pool_rows), tuple(claim_rows), tuple(terminations), tuple(unavailable), tuple(pending), tuple(decisions))


def _resources(raw: Mapping[str, Any] | None) -> Resources:
    values: dict[str, int] = {}
    for name, value in (raw or {}).items():
        if name not in ("cpu", "memory", "pods"):
            continue
        try:
            values[name] = parse_milli(str(value))
        except QuantityError:
            continue
    return Resources(values)


def _condition(obj: Mapping[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def _from_joiner(event: Mapping[str, Any]) -> bool:
    return (event.get("source") or {}).get("component") == EVENT_COMPONENT or event.get("reportingComponent") == EVENT_COMPONENT


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or (event.get("metadata") or {}).get("creationTimestamp") or ""
    )


def _age_of(stamp: Any, now: datetime) -> str | None:
    moment = parse_aware_time(stamp)
    return None if moment is None else format_age((now - moment).total_seconds())


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def pending_reasons(status: ClusterStatus) -> Sequence[str]:
    """The distinct reasons pending pods were given (for a summary line)."""
    return sorted({str(p["reason"]) for p in status.pending_pods if p["reason"]})
