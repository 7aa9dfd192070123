"""Pods grouped by everything the scheduler looks at, and Karpenter's preference relaxation.

Identical pods (same namespace, labels, requests and constraints) share a
:class:`PodSpec`; a :class:`Variant` is a spec under a relaxation state: preferences are
first treated as required and then dropped one at a time in Karpenter's order
(``preferences.go``): the first required node-affinity term (when several), a preferred
pod-affinity term, a preferred pod-anti-affinity term, the heaviest preferred
node-affinity term, a ScheduleAnyway spread, and finally tolerating PreferNoSchedule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from joiner.domain.model import LabelSelector, Pod, PodAffinityTerm, Toleration, TopologySpreadConstraint
from joiner.domain.requirements import Requirements
from joiner.domain.resources import CPU, MEMORY, Resources

if TYPE_CHECKING:
    from joiner.domain.scheduling.topology import SkipIndex, TopologyGroup

__all__ = ["PodSpec", "Variant", "RelaxState", "spec_signature", "effective_selector", "PREFER_NO_SCHEDULE_TOLERATION"]

PREFER_NO_SCHEDULE_TOLERATION = Toleration(operator="Exists", effect="PreferNoSchedule")


def effective_selector(selector: LabelSelector | None, match_label_keys: tuple[str, ...], labels: Mapping[str, str]) -> LabelSelector | None:
    """``selector`` ANDed with ``key=<pod's value>`` for each match-label key the pod
    carries (idempotent: snapshot parsing may already have merged them)."""
    if selector is None or not match_label_keys:
        return selector
    extra = []
    for key in match_label_keys:
        value = labels.get(key)
        if value is None:
            continue
        if (key, value) in selector.match_labels or (key, "In", (value,)) in selector.match_expressions:
            continue
        extra.append((key, value))
    if not extra:
        return selector
    return LabelSelector(tuple(sorted((*selector.match_labels, *extra))), selector.match_expressions)


def spec_signature(pod: Pod) -> tuple[object, ...]:
    """Everything scheduling depends on; pods with equal signatures are interchangeable."""
    return (
        pod.namespace,
        frozenset(pod.labels.items()),
        pod.requests,
        pod.node_selector,
        pod.required_node_affinity,
        pod.preferred_node_affinity,
        pod.tolerations,
        pod.pod_affinity,
        pod.pod_anti_affinity,
        pod.topology_spread,
        pod.host_ports,
        pod.volume_attachments,
        pod.volume_requirements,
    )


@dataclass(frozen=True, slots=True)
class RelaxState:
    required_term: int = 0
    affinity_dropped: int = 0
    anti_affinity_dropped: int = 0
    node_preference_dropped: int = 0
    spreads_dropped: int = 0
    tolerate_prefer_no_schedule: bool = False


class PodSpec:
    """The scheduling-relevant part of a group of identical pods."""

    __slots__ = (
        "index",
        "signature",
        "namespace",
        "labels",
        "requests",
        "cpu",
        "memory",
        "node_selector",
        "required_terms",
        "preferred_node",
        "tolerations",
        "affinity_required",
        "affinity_preferred",
        "anti_required",
        "anti_preferred",
        "spreads_hard",
        "spreads_soft",
        "host_ports",
        "volumes",
        "volume_requirements",
        "variants",
    )

    def __init__(self, index: int, pod: Pod) -> None:
        self.index = index
        self.signature = spec_signature(pod)
        self.namespace = pod.namespace
        self.labels = dict(pod.labels)
        self.requests: Resources = pod.requests
        self.cpu = pod.requests.get(CPU, 0)
        self.memory = pod.requests.get(MEMORY, 0)
        self.node_selector = pod.node_selector
        self.required_terms = pod.required_node_affinity
        self.preferred_node = tuple(term.requirements for term in sorted(pod.preferred_node_affinity, key=lambda t: -t.weight))
        self.tolerations = pod.tolerations
        self.affinity_required = tuple(t for t in pod.pod_affinity if t.weight is None)
        self.affinity_preferred = tuple(sorted((t for t in pod.pod_affinity if t.weight is not None), key=lambda t: -(t.weight or 0)))
        self.anti_required = tuple(t for t in pod.pod_anti_affinity if t.weight is None)
        self.anti_preferred = tuple(sorted((t for t in pod.pod_anti_affinity if t.weight is not None), key=lambda t: -(t.weight or 0)))
        self.spreads_hard = tuple(s for s in pod.topology_spread if s.when_unsatisfiable != "ScheduleAnyway")
        self.spreads_soft = tuple(s for s in pod.topology_spread if s.when_unsatisfiable == "ScheduleAnyway")
        self.host_ports = tuple(sorted(pod.host_ports))
        self.volumes = pod.volume_attachments
        self.volume_requirements = pod.volume_requirements
        self.variants: dict[RelaxState, Variant] = {}

    @property
    def has_pod_constraints(self) -> bool:
        """Constraints that need topology tracking or per-node bookkeeping."""
        return bool(
            self.affinity_required
            or self.affinity_preferred
            or self.anti_required
            or self.anti_preferred
            or self.spreads_hard
            or self.spreads_soft
            or self.host_ports
        )

    def all_affinity_terms(self) -> tuple[PodAffinityTerm, ...]:
        return (*self.affinity_required, *self.affinity_preferred)

    def all_anti_terms(self) -> tuple[PodAffinityTerm, ...]:
        return (*self.anti_required, *self.anti_preferred)

    def all_spreads(self) -> tuple[TopologySpreadConstraint, ...]:
        return (*self.spreads_hard, *self.spreads_soft)

    def variant(self, state: RelaxState) -> Variant:
        found = self.variants.get(state)
        if found is None:
            found = Variant(self, state)
            self.variants[state] = found
        return found

    def relax(self, state: RelaxState, any_prefer_no_schedule: bool) -> RelaxState | None:
        """The next relaxation step after ``state`` (Karpenter's order), or None."""
        if len(self.required_terms) - state.required_term > 1:
            return replace(state, required_term=state.required_term + 1)
        if state.affinity_dropped < len(self.affinity_preferred):
            return replace(state, affinity_dropped=state.affinity_dropped + 1)
        if state.anti_affinity_dropped < len(self.anti_preferred):
            return replace(state, anti_affinity_dropped=state.anti_affinity_dropped + 1)
        if state.node_preference_dropped < len(self.preferred_node):
            return replace(state, node_preference_dropped=state.node_preference_dropped + 1)
        if state.spreads_dropped < len(self.spreads_soft):
            return replace(state, spreads_dropped=state.spreads_dropped + 1)
        if any_prefer_no_schedule and not state.tolerate_prefer_no_schedule:
            if not any(_tolerates_all_prefer(t) for t in self.tolerations):
                return replace(state, tolerate_prefer_no_schedule=True)
        return None


def _tolerates_all_prefer(toleration: Toleration) -> bool:
    return not toleration.key and toleration.operator == "Exists" and toleration.effect in ("", "PreferNoSchedule")


class Variant:
    """A pod spec under one relaxation state: the requirements, tolerations and
    topology terms the scheduler enforces for it right now."""

    __slots__ = (
        "spec",
        "state",
        "strict_requirements",
        "requirements",
        "tolerations",
        "affinity_terms",
        "anti_terms",
        "spreads",
        "static_key",
        "sid",
        "size",
        "groups",
        "monotonic_groups",
        "selected_by",
        "inverse_owned",
        "bulk_groups",
    )

    def __init__(self, spec: PodSpec, state: RelaxState) -> None:
        self.spec = spec
        self.state = state
        strict = spec.node_selector
        if spec.volume_requirements:
            strict = strict.intersect(spec.volume_requirements)
        if spec.required_terms:
            strict = strict.intersect(spec.required_terms[state.required_term])
        self.strict_requirements: Requirements = strict
        requirements = strict
        if state.node_preference_dropped < len(spec.preferred_node):
            requirements = requirements.intersect(spec.preferred_node[state.node_preference_dropped])
        self.requirements: Requirements = requirements
        tolerations = spec.tolerations
        if state.tolerate_prefer_no_schedule:
            tolerations = (*tolerations, PREFER_NO_SCHEDULE_TOLERATION)
        self.tolerations = tolerations
        self.affinity_terms = (*spec.affinity_required, *spec.affinity_preferred[state.affinity_dropped :])
        self.anti_terms = (*spec.anti_required, *spec.anti_preferred[state.anti_affinity_dropped :])
        self.spreads = (*spec.spreads_hard, *spec.spreads_soft[state.spreads_dropped :])
        self.static_key = (tolerations, requirements, spec.host_ports)
        self.sid = -1
        self.size: tuple[int, ...] = ()
        self.groups: list[TopologyGroup] = []  # topology groups constraining this variant (own + inverse)
        self.monotonic_groups: list[tuple[TopologyGroup, SkipIndex]] = []
        self.selected_by: list[TopologyGroup] = []
        self.inverse_owned: list[TopologyGroup] = []
        self.bulk_groups: list[TopologyGroup] = []
