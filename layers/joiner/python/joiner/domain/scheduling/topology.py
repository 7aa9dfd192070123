"""Pod affinity, anti-affinity and topology spread bookkeeping (Karpenter's topology.go
and topologygroup.go semantics).

A :class:`TopologyGroup` counts, per domain of one topology key, the pods a selector
picks. Groups are shared by every pod whose term has the same key, namespaces and
selector (and skew and node filter for spreads). *Inverse* groups count the pods that
own a required anti-affinity term, so a pod the term selects is kept out of their
domains (anti-affinity works both ways).

Namespaces: a term with no namespaces and no namespace selector means the owner's
namespace; listed namespaces mean those; any namespace selector (empty or not) is taken
as *all namespaces*, because the scheduler does not see namespace labels. For
anti-affinity that is the safe side; for affinity it may co-locate with a pod of a
namespace the selector would not pick.

Where a new claim can still land in several domains of a key, pods placed on it count
for anti-affinity in every one of them, and for affinity and spreads in none (they do
once the claim is narrowed to one domain), as Karpenter does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from joiner.domain import labels as wk
from joiner.domain.model import LabelSelector, PodAffinityTerm, Taint, Toleration, TopologySpreadConstraint
from joiner.domain.requirements import Requirements

__all__ = ["SkipIndex", "SPREAD", "AFFINITY", "ANTI", "INVERSE", "TopologyGroup", "UNLIMITED", "resolve_namespaces", "KIND_NAMES"]

SPREAD, AFFINITY, ANTI, INVERSE = 0, 1, 2, 3
KIND_NAMES = {SPREAD: "topology spread", AFFINITY: "pod affinity", ANTI: "pod anti-affinity", INVERSE: "anti-affinity of existing pods"}
UNLIMITED = 1 << 60


def resolve_namespaces(term: PodAffinityTerm, owner_namespace: str) -> frozenset[str] | None:
    """Namespaces a term selects pods in; None means all namespaces."""
    if term.namespace_selector is not None:
        return None
    if term.namespaces:
        return frozenset(term.namespaces)
    return frozenset((owner_namespace,))


class SkipIndex:
    """Target indexes known to reject something forever: a cursor below which every
    target is rejected, plus the rejected ones above it."""

    __slots__ = ("cursor", "dead")

    def __init__(self) -> None:
        self.cursor = 0
        self.dead: set[int] = set()

    def mark(self, index: int) -> None:
        if index == self.cursor:
            cursor = index + 1
            dead = self.dead
            while cursor in dead:
                dead.discard(cursor)
                cursor += 1
            self.cursor = cursor
        elif index > self.cursor:
            self.dead.add(index)


class TopologyGroup:
    """Counts of selected pods per domain of ``key``."""

    __slots__ = (
        "gid",
        "kind",
        "key",
        "namespaces",
        "selector",
        "max_skew",
        "min_domains",
        "node_filter",
        "filter_tolerations",
        "honor_affinity",
        "counts",
        "positive",
        "hostname",
        "skip",
        "self_skip",
        "select_cache",
        "filter_cache",
        "eligible_cache",
        "eligible_by_tolerations",
    )

    def __init__(
        self,
        gid: int,
        kind: int,
        key: str,
        namespaces: frozenset[str] | None,
        selector: LabelSelector | None,
        max_skew: int = 0,
        min_domains: int | None = None,
        node_filter: tuple[Requirements, ...] | None = None,
        filter_tolerations: tuple[Toleration, ...] | None = None,
        honor_affinity: bool = True,
    ) -> None:
        self.gid = gid
        self.kind = kind
        # Karpenter aliases (karpenter.sh/capacity-type ...) name the same domains as Joiner's keys:
        # nodes carry both, and existing nodes are read with their aliases normalised.
        self.key = wk.normalize_label_key(key)
        self.namespaces = namespaces
        self.selector = selector
        self.max_skew = max_skew
        self.min_domains = min_domains
        self.node_filter = node_filter
        self.filter_tolerations = filter_tolerations
        self.honor_affinity = honor_affinity
        self.counts: dict[str, int] = {}
        self.positive: set[str] = set()
        self.hostname = key == wk.HOSTNAME
        self.skip = SkipIndex()  # targets this group rejects for pods it does not select
        self.self_skip = SkipIndex()  # ... for pods it selects (hostname spreads count them)
        self.select_cache: dict[int, bool] = {}
        self.filter_cache: dict[object, bool] = {}
        self.eligible_cache: dict[int, frozenset[str]] = {}
        self.eligible_by_tolerations: dict[tuple[Toleration, ...] | None, frozenset[str]] = {}

    @property
    def monotonic(self) -> bool:
        """Whether a target this group rejects stays rejected (counts only grow)."""
        return self.kind in (ANTI, INVERSE) or (self.kind == SPREAD and self.hostname)

    @property
    def filters_nodes(self) -> bool:
        return self.node_filter is not None or self.filter_tolerations is not None

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.selector is None:
            return False
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.selector.matches(labels)

    def add(self, domains: Iterable[str], count: int) -> None:
        counts = self.counts
        for domain in domains:
            counts[domain] = counts.get(domain, 0) + count
            if count > 0:
                self.positive.add(domain)

    def describe(self) -> str:
        return f"{KIND_NAMES[self.kind]}, key {self.key}"


def group_key_for_spread(
    spread: TopologySpreadConstraint,
    namespace: str,
    selector: LabelSelector | None,
    node_filter: tuple[Requirements, ...] | None,
    tolerations: tuple[Toleration, ...] | None,
) -> tuple[object, ...]:
    return (
        SPREAD,
        spread.topology_key,
        frozenset((namespace,)),
        selector,
        spread.max_skew,
        spread.min_domains,
        node_filter,
        tolerations,
        spread.node_affinity_policy != "Ignore",
    )


def hard_taints(taints: Iterable[Taint]) -> tuple[Taint, ...]:
    return tuple(t for t in taints if t.effect in ("NoSchedule", "NoExecute"))
