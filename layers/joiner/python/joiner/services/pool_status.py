"""Status of Joiner's custom resources, written by the scanner after each round from what the
round read and resolved (:class:`~joiner.services.planning_round.PlanningRound`):

* NodePool: resources and node count of its Nodes, and a ``Ready`` condition;
* NodeClass: what its selectors resolve to (subnets, security groups, AMIs, capacity
  reservations) and a ``Ready`` condition saying whether nodes can launch from it;
* NodeOverlay: the instance types and NodePools it matched, ``ValidationSucceeded`` and ``Ready``.

Each is patched only when something changed (a condition's transition time is kept while it holds).
"""

from __future__ import annotations

from typing import Any

from joiner.domain import labels as wk
from joiner.domain.amis import PUBLISHED, STANDARD, variant_requirements
from joiner.domain.model import NodeClass
from joiner.domain.resources import EMPTY, Resources
from joiner.observability import logger
from joiner.ports import Ec2Error, JsonDict, KubernetesError
from joiner.services.planning_round import NODES, PlanningRound

__all__ = ["STATUS_MAX_ITEMS", "write_statuses", "patch_pool_status", "patch_class_status", "patch_overlay_status"]


def write_statuses(work: PlanningRound) -> None:
    """NodePool, NodeClass and NodeOverlay status after ``work``'s round."""
    patch_pool_status(work)
    patch_class_status(work)
    patch_overlay_status(work)


def patch_pool_status(work: PlanningRound) -> None:
    """NodePool status: resources and node count of its Nodes, and a Ready condition. Written
    only when it differs from what the API server holds; a resource no Node has any more is
    removed (null in the merge patch)."""
    for name in sorted(work.pools_raw):
        pool = work.pools.get(name)
        raw = work.pools_raw.get(name) or {}
        current = raw.get("status") or {}
        usage = work.in_use.get(name, EMPTY)
        resources = Resources({k: v for k, v in usage.items() if k != NODES}).as_quantities()
        resources[NODES] = str(work.node_counts.get(name, 0))
        if pool is None:
            problem, reason = work.invalid_by_name.get((str(raw.get("kind")), name), "cannot be read"), "InvalidSpec"
        else:
            problem, reason = work.pool_problem(pool), "NodeClassNotReady"
        ready: dict[str, Any] = {
            "type": "Ready",
            "status": "False" if problem else "True",
            "reason": reason if problem else "Ready",
            "message": problem,
        }
        previous = next((c for c in current.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
        unchanged = previous is not None and all(previous.get(k) == v for k, v in ready.items())
        ready["lastTransitionTime"] = previous.get("lastTransitionTime") if unchanged and previous else work.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        others = [c for c in current.get("conditions") or [] if isinstance(c, dict) and c.get("type") != "Ready"]
        stored = current.get("resources")
        held: dict[str, Any] = stored if isinstance(stored, dict) else {}
        if held == resources and current.get("nodes") == work.node_counts.get(name, 0) and unchanged:
            continue
        # a merge patch leaves the keys it does not name as they are: one that went to zero is
        # sent as null, which removes it (else the status would keep it and be rewritten every round)
        gone: dict[str, Any] = dict.fromkeys(key for key in held if key not in resources)
        status = {"resources": {**resources, **gone}, "nodes": work.node_counts.get(name, 0), "conditions": [*others, ready]}
        try:
            work.kube.patch_node_pool_status(name, status)
        except KubernetesError as error:
            logger.warning("NodePool status patch failed", extra={"nodepool": name, "error": str(error)})


def patch_overlay_status(work: PlanningRound) -> None:
    """NodeOverlay status: the instance types and NodePools it matched, and conditions
    ``ValidationSucceeded`` and ``Ready`` (False with reason ``Conflict`` naming the other
    overlay, or ``RuntimeValidation`` with the parse error), as Karpenter's controller writes."""
    from joiner.domain.overlays import MAX_LISTED_TYPES, OverlayOutcome

    stamp = work.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in sorted(work.overlays_raw):
        current = work.overlays_raw[name].get("status") or {}
        outcome = work.overlay_outcomes.get(name, OverlayOutcome())
        error = work.overlay_errors.get(name)
        if error is not None:
            reason, message = "RuntimeValidation", error
        elif outcome.conflict:
            reason, message = "Conflict", outcome.conflict
        else:
            reason, message = "", ""
        conditions = []
        previous = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, dict)}
        for kind in ("ValidationSucceeded", "Ready"):
            condition: dict[str, Any] = {"type": kind, "status": "False" if reason else "True", "reason": reason or kind, "message": message}
            old = previous.get(kind)
            same = old is not None and all(old.get(k) == v for k, v in condition.items())
            condition["lastTransitionTime"] = old.get("lastTransitionTime") if same and old else stamp
            conditions.append(condition)
        status: dict[str, Any] = {
            "instanceTypes": list(outcome.instance_types[:MAX_LISTED_TYPES]),
            "instanceTypeCount": len(outcome.instance_types),
            "nodePools": list(outcome.node_pools[:MAX_LISTED_TYPES]),
            "conditions": conditions,
        }
        if all(current.get(k) == v for k, v in status.items() if k != "conditions") and all(previous.get(c["type"]) == c for c in conditions):
            continue
        try:
            work.kube.patch_node_overlay_status(name, status)
        except KubernetesError as error:
            logger.warning("NodeOverlay status patch failed", extra={"nodeoverlay": name, "error": str(error)})


#: ``maxItems`` of a NodeClass's ``status.subnets`` and ``status.securityGroups`` in the CRD.
STATUS_MAX_ITEMS = 1000


def _class_amis(work: PlanningRound, node_class: NodeClass) -> tuple[list[JsonDict], str]:
    """The AMIs a launch of this NodeClass uses now, one per architecture and AL2023 variant
    (:data:`~joiner.domain.amis.PUBLISHED`; one per architecture for AMIs chosen by id, name
    or tags), as ``status.amis`` entries, and the first lookup error. Shares the disruption
    pass's cache keys; lookups EKS answers with no such AMI are remembered as misses."""
    try:
        version = work.runtime.cluster().version
    except Exception as error:  # noqa: BLE001 - reported in the condition, tried again next round
        return [], f"reading the cluster's Kubernetes version failed: {error}"
    by_alias = any(term.alias for term in node_class.ami_selector_terms) or not node_class.ami_selector_terms
    wanted = PUBLISHED if by_alias else tuple((arch, STANDARD) for arch in sorted({arch for arch, _ in PUBLISHED}))
    amis: list[JsonDict] = []
    first_error = ""
    for arch, variant in wanted:
        key = ("ami", repr(node_class), version, arch, variant)
        missing = ("ami-missing", *key[1:])
        ami = work.runtime.resolved.get(key, work.now)
        if ami is None and work.runtime.resolved.get(missing, work.now) is None:
            try:
                ami = work.runtime.ec2.resolve_ami(node_class, version, arch, variant)
            except Ec2Error as error:
                first_error = first_error or str(error)
                if error.code == "AMINotFound":
                    work.runtime.resolved.put(missing, str(error), work.now)
                continue
            if ami:
                work.runtime.resolved.put(key, ami, work.now)
        if ami:
            requirements: list[JsonDict] = [{"key": wk.ARCH, "operator": "In", "values": [arch]}]
            if by_alias:
                requirements += variant_requirements(variant)
            amis.append({"id": str(ami), "requirements": requirements})
    if not amis and not first_error:
        first_error = str(work.runtime.resolved.get(("ami-missing", repr(node_class), version, *wanted[0]), work.now) or "no AMI resolved")
    return amis, first_error


def patch_class_status(work: PlanningRound) -> None:
    """NodeClass status: what its selectors resolve to (subnets, security groups, AMIs) and a
    Ready condition saying whether nodes can launch from it, and if not, why. Written only
    when something changed (the condition's transition time is kept while it holds)."""
    for name in sorted(work.classes_raw):
        raw = work.classes_raw[name]
        current = raw.get("status") or {}
        node_class = work.classes.get(name)
        env = work.envs.get(name)
        subnets: list[JsonDict] = []
        groups: list[JsonDict] = []
        amis: list[JsonDict] = []
        reservations: list[JsonDict] = []
        if node_class is None:
            problem, reason = work.invalid_by_name.get((str(raw.get("kind")), name), "cannot be read"), "InvalidSpec"
        elif env is None:
            problem, reason = "not resolved", "ResolutionFailed"
        else:
            # within the CRD's maxItems, or the API server would refuse the whole patch
            subnets = [{"id": s.id, "zone": s.zone} for s in sorted(env.subnets, key=lambda s: (s.zone, s.id))][:STATUS_MAX_ITEMS]
            groups = [{"id": group} for group in sorted(env.security_groups)][:STATUS_MAX_ITEMS]
            reservations = [
                {
                    "id": r.id,
                    "instanceType": r.instance_type,
                    "availabilityZone": r.zone,
                    "ownerID": r.owner_id,
                    "instanceMatchCriteria": r.match_criteria,
                    "reservationType": r.reservation_type,
                }
                for r in env.reservations
            ][:STATUS_MAX_ITEMS]
            problem, reason = env.error, env.reason or "ResolutionFailed"
            if not problem:
                amis, ami_error = _class_amis(work, node_class)
                if not amis:
                    problem, reason = f"no AMI: {ami_error}", "AMINotFound"
        ready: JsonDict = {
            "type": "Ready",
            "status": "False" if problem else "True",
            "reason": reason if problem else "Ready",
            "message": problem,
        }
        generation = (raw.get("metadata") or {}).get("generation")
        if isinstance(generation, int):
            ready["observedGeneration"] = generation
        previous = next((c for c in current.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "Ready"), None)
        unchanged = previous is not None and all(previous.get(k) == v for k, v in ready.items())
        ready["lastTransitionTime"] = (
            previous.get("lastTransitionTime")
            if previous is not None and previous.get("status") == ready["status"] and previous.get("lastTransitionTime")
            else work.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        others = [c for c in current.get("conditions") or [] if isinstance(c, dict) and c.get("type") != "Ready"]
        status: JsonDict = {"subnets": subnets, "securityGroups": groups, "amis": amis, "conditions": [*others, ready]}
        if reservations or current.get("capacityReservations"):
            status["capacityReservations"] = reservations
        if unchanged and all(current.get(field) == status.get(field) for field in ("subnets", "securityGroups", "amis", "capacityReservations")):
            continue
        try:
            work.kube.patch_node_class_status(name, status)
        except KubernetesError as error:
            logger.warning("NodeClass status patch failed", extra={"nodeclass": name, "error": str(error)})
