"""Nominations: tell kube-scheduler which pods a registering node was launched for.

kube-scheduler does not bind pending pods in the order they became pending: a node launched for
one batch of pods would take whichever pods it tries first, and the rest of that batch would wait
for a node launched later for others. A pod's ``status.nominatedNodeName`` is the scheduler's own
lever for this (KEP-5278): the nominated node is tried first, and pods of equal or lower priority
see the nominated pods' requests as taken there.

The scheduler clears a nomination whenever the pod fails an attempt and preemption finds nothing,
which includes the attempt a registering Node triggers while it still carries the
``node.kubernetes.io/not-ready`` taint. A nomination written after that attempt and before the
taint is lifted is honoured. So each provisioning round nominates the still-pending pods of every
claim whose Node has registered but is not initialized yet (not Ready, or startup taints left);
responsive mode's watcher wakes the scanner when such a Node appears, so the round lands in that
window. Pods already nominated (by the scheduler's preemption or earlier) are left alone; at most
:data:`MAX_NOMINATIONS_PER_ROUND` writes a round, and the first failed write ends the pass.

Only kube-scheduler's pods (``spec.schedulerName`` ``default-scheduler``) are nominated: another
scheduler does not read the field, nobody would clear it, and the pod would be held out of
planning for as long as that Node lives. Such a pod still carrying a nomination to the Node of
a claim launched for it (the one Joiner would have written) is planned as not nominated
(:attr:`NominationResult.not_held`); a nomination to any other node is its own scheduler's
(preemption) and holds, as Karpenter treats it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from joiner.domain.model import Node, NodePool, Pod
from joiner.ports import ClaimRecord, ClaimState, KubernetesError
from joiner.services.registration import is_initialized

if TYPE_CHECKING:
    from joiner.services.context import Runtime

__all__ = ["MAX_NOMINATIONS_PER_ROUND", "NominationResult", "nominate_for_registering_nodes"]

#: Pod status writes one round attempts at most (the rest wait for the next round).
MAX_NOMINATIONS_PER_ROUND = 500


@dataclass(frozen=True, slots=True)
class NominationResult:
    """``nominated``: pod key -> the node it was nominated to this round. ``not_held``: pods of
    another scheduler whose nomination to their claim's Node does not hold them (planned as
    not nominated)."""

    nominated: Mapping[str, str] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    not_held: frozenset[str] = frozenset()


def nominate_for_registering_nodes(
    runtime: Runtime,
    claims: Iterable[ClaimRecord],
    nodes: Iterable[Node],
    pods: Iterable[Pod],
    node_pools: Mapping[str, NodePool],
    *,
    limit: int = MAX_NOMINATIONS_PER_ROUND,
) -> NominationResult:
    """Nominate each registered, not yet initialized claim's pending pods of kube-scheduler to
    its Node, at most ``limit`` writes (attempted, not only successful). The first failed
    write ends the pass (an API server in trouble, or RBAC without ``pods/status``): the rest
    waits for the next round."""
    claims = sorted(claims, key=lambda c: c.claim_id)
    pods = tuple(pods)
    not_held = _not_held(claims, pods)
    live = {node.name: node for node in nodes if node.accepts_pods}
    by_key = {pod.key: pod for pod in pods}
    nominated: dict[str, str] = {}
    attempts = 0
    for claim in claims:
        node = live.get(claim.node_name or "")
        if claim.state != ClaimState.REGISTERED or node is None or is_initialized(node, node_pools.get(claim.node_pool)):
            continue
        for key in sorted(claim.pods):
            pod = by_key.get(key)
            if pod is None or not pod.is_pending or not pod.by_default_scheduler or pod.nominated_node is not None or not pod.uid or key in nominated:
                continue
            if attempts >= limit:
                return _result(runtime, nominated, [], not_held)
            attempts += 1
            try:
                if runtime.kube.nominate_pod(pod.namespace, pod.name, pod.uid, node.name):
                    nominated[key] = node.name
            except KubernetesError as error:
                return _result(runtime, nominated, [f"pod {key}: nominating to {node.name}: {error} (the rest waits for the next round)"], not_held)
    return _result(runtime, nominated, [], not_held)


def _not_held(claims: Iterable[ClaimRecord], pods: Iterable[Pod]) -> frozenset[str]:
    """Pending pods of another scheduler nominated to the Node of a claim that lists them."""
    claim_nodes: dict[str, set[str]] = {}
    for claim in claims:
        if claim.node_name and claim.state != ClaimState.CLOSED:
            for key in claim.pods:
                claim_nodes.setdefault(key, set()).add(claim.node_name)
    return frozenset(
        pod.key
        for pod in pods
        if not pod.by_default_scheduler and pod.is_pending and pod.nominated_node is not None and pod.nominated_node in claim_nodes.get(pod.key, ())
    )


def _result(runtime: Runtime, nominated: dict[str, str], errors: list[str], not_held: frozenset[str]) -> NominationResult:
    if nominated:
        runtime.count("PodsNominated", len(nominated))
    return NominationResult(nominated, tuple(errors), not_held)
