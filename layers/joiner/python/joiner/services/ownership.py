"""Ownership checks before Joiner cordons, evicts from or terminates a node.

See :mod:`joiner.domain.ownership` for the rule. These helpers read the instances' tags
(one batched DescribeInstances) and record every refusal under one metric,
``NotOwnedSkipped`` (dimension ``path``: the use case that refused)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from joiner.domain.labels import NODECLAIM
from joiner.domain.ownership import not_owned_reason
from joiner.observability import logger

if TYPE_CHECKING:
    from joiner.ports import InstanceRecord
    from joiner.services.context import Runtime

__all__ = ["NOT_OWNED_METRIC", "instance_tags", "ownership_problem", "refuse"]

NOT_OWNED_METRIC = "NotOwnedSkipped"


def instance_tags(runtime: Runtime, instance_ids: Iterable[str]) -> dict[str, Mapping[str, str]]:
    """Tags of each instance EC2 still knows (terminated ones included), by id."""
    ids = sorted({i for i in instance_ids if i})
    if not ids:
        return {}
    records: list[InstanceRecord] = runtime.ec2.describe_instances(ids)
    return {r.instance_id: r.tags for r in records}


def ownership_problem(runtime: Runtime, instance_id: str | None, claim_instance_id: str | None) -> str | None:
    """None when the instance is provably ours (its tags and a claim); otherwise why not.

    ``claim_instance_id``: the instance id on the claim found for the instance, None when
    none was found by instance id; the claim named by the instance's own
    ``joiner.dev/nodeclaim`` tag is then looked up (a launch whose invocation died before
    recording the instance on its claim)."""
    tags = instance_tags(runtime, [instance_id]).get(instance_id) if instance_id else None
    if claim_instance_id is None and tags is not None and tags.get(NODECLAIM):
        claim = runtime.state.get_claim(tags[NODECLAIM])
        if claim is not None:
            claim_instance_id = claim.instance_id or ""
    return not_owned_reason(instance_id, tags, claim_instance_id, runtime.settings.cluster_name)


def refuse(runtime: Runtime, path: str, reason: str, **context: object) -> None:
    """Count and log one refusal to act on something Joiner does not own."""
    runtime.count(NOT_OWNED_METRIC, path=path)
    logger.warning("not acting on an instance Joiner does not own", extra={"path": path, "reason": reason, **context})
