"""Builders for the gc tests: instances, claims, Nodes and templates around one moment."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from joiner.domain import labels as wk
from joiner.domain.gc import LAUNCH_TEMPLATE_TAG, GcNode, GcTemplate
from joiner.ports import ClaimRecord, InstanceRecord

CLUSTER = "test-cluster"
NOW = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(hours=2)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def instance(
    instance_id: str,
    *,
    state: str = "running",
    launched: datetime | None = LONG_AGO,
    claim: str | None = None,
    cluster: str | None = CLUSTER,
    template: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> InstanceRecord:
    all_tags: dict[str, str] = {}
    if cluster:
        all_tags.update({"joiner.dev/cluster": cluster, wk.NODEPOOL: "default"})
    if claim:
        all_tags[wk.NODECLAIM] = claim
    if template:
        all_tags[LAUNCH_TEMPLATE_TAG] = template
    all_tags.update(tags or {})
    return InstanceRecord(instance_id, "c5.large", "us-east-1a", state, launched, all_tags)


def claim(
    claim_id: str,
    *,
    state: str = "initialized",
    instance_id: str | None = None,
    node: str | None = None,
    created: datetime = LONG_AGO,
    launched: datetime | None = LONG_AGO,
    pool: str = "default",
) -> ClaimRecord:
    return ClaimRecord(
        claim_id=claim_id,
        node_pool=pool,
        state=state,
        created_at=created,
        instance_id=instance_id,
        node_name=node,
        launched_at=launched if instance_id else None,
    )


def node(
    name: str,
    instance_id: str | None,
    *,
    ready: bool = False,
    created: datetime | None = LONG_AGO,
    managed: bool = True,
    deleting: bool = False,
    uid: str | None = None,
) -> GcNode:
    labels = {wk.NODEPOOL: "default", wk.NODECLAIM: f"claim-{name}"} if managed else {"eks.amazonaws.com/nodegroup": "ng"}
    return GcNode(name=name, uid=uid or f"uid-{name}", instance_id=instance_id, labels=labels, created=created, ready=ready, deleting=deleting)


def template(template_id: str, *, created: datetime | None = NOW - timedelta(days=3), node_class: str = "default", referenced: bool = False) -> GcTemplate:
    return GcTemplate(template_id, f"joiner-{CLUSTER}-{node_class}-amd64-{template_id[-16:]:0>16}", created, node_class, referenced)
