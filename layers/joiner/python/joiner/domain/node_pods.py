"""A node's pods as the drain and its replacement read them: from the Kubernetes JSON of the
pods bound to a node being terminated, tolerant of what the drain does not need."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from joiner.domain.bounded import parse_aware_time
from joiner.domain.durations import clamp_seconds
from joiner.domain.model import Pod
from joiner.ports import JsonDict

__all__ = ["parse_node_pods"]


def parse_node_pods(raw_pods: Sequence[JsonDict]) -> tuple[list[Pod], dict[str, datetime]]:
    """Domain pods plus, for terminating pods, when their grace ends (deletionTimestamp).

    A pod the snapshot parser rejects (a malformed field the drain does not need) is still
    drained: it is reduced to what draining uses (name, owner, priority class, grace
    period, annotations, tolerations dropped), so one odd pod cannot wedge a termination.
    """
    from joiner.domain.snapshot import SnapshotError, parse_pod

    pods: list[Pod] = []
    deletion_deadlines: dict[str, datetime] = {}
    for raw in raw_pods:
        try:
            pod = parse_pod(raw)
        except SnapshotError:
            pod = _minimal_pod(raw)
        pods.append(pod)
        stamp = parse_aware_time((raw.get("metadata") or {}).get("deletionTimestamp"))
        if stamp is not None:
            deletion_deadlines[pod.key] = stamp
    return pods, deletion_deadlines


def _minimal_pod(raw: JsonDict) -> Pod:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    owners = [ref for ref in meta.get("ownerReferences") or [] if isinstance(ref, dict) and ref.get("controller")]
    grace = spec.get("terminationGracePeriodSeconds")
    raw_annotations = meta.get("annotations")
    annotations: Mapping[str, Any] = raw_annotations if isinstance(raw_annotations, dict) else {}
    return Pod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        annotations={str(k): str(v) for k, v in annotations.items()},
        priority_class_name=str(spec.get("priorityClassName") or ""),
        node_name=spec.get("nodeName") or None,
        owner_kind=str(owners[0].get("kind")) if owners else None,
        owner_name=str(owners[0].get("name")) if owners else None,
        phase=str((raw.get("status") or {}).get("phase") or "Running"),
        deleting=bool(meta.get("deletionTimestamp")),
        termination_grace_seconds=clamp_seconds(grace) if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0 else 30,
    )
