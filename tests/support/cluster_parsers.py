"""The parsers a test hands to :class:`joiner.services.cluster_state.ClusterCache`: the
snapshot's, with an invalid object read as None (as the planning passes' reporting parsers do)."""

from __future__ import annotations

from joiner.domain.model import Node, Pod
from joiner.domain.snapshot import PodSpecMemo, SnapshotError, parse_node, parse_pod
from joiner.ports import JsonDict


def pod_or_none(obj: JsonDict, memo: PodSpecMemo | None = None) -> Pod | None:
    try:
        return parse_pod(obj, memo=memo)
    except SnapshotError:
        return None


def node_or_none(obj: JsonDict) -> Node | None:
    try:
        return parse_node(obj)
    except SnapshotError:
        return None
