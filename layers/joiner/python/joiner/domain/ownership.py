"""Whether an instance is Joiner's to act on.

A Node's labels prove nothing: a kubelet may set ``joiner.dev/nodepool`` or
``joiner.dev/initialized`` on itself. Two facts a kubelet cannot forge do: the instance's
own EC2 tags (set at creation by Joiner's launch template, under IAM tag-on-create
conditions) naming this cluster, and a claim record in Joiner's state table that recorded
this instance id when it was launched. Every cordon, eviction and termination asks for
both; anything else is left alone and counted.
"""

from __future__ import annotations

from collections.abc import Mapping

from joiner.domain.launch import CLUSTER_TAG

__all__ = ["not_owned_reason"]


def not_owned_reason(
    instance_id: str | None,
    instance_tags: Mapping[str, str] | None,
    claim_instance_id: str | None,
    cluster: str,
) -> str | None:
    """None when ``instance_id`` is provably Joiner's in ``cluster``; otherwise why not.

    ``instance_tags``: the instance's tags as EC2 reports them (None: the instance was not
    found); ``claim_instance_id``: what the claim covering the instance (found by instance id,
    or by the instance's own ``joiner.dev/nodeclaim`` tag) records as its instance: "" when
    it has recorded none yet (a launch whose invocation died before recording it), None when
    there is no such claim."""
    if not instance_id:
        return "no instance id (the Node has no AWS providerID)"
    if instance_tags is None:
        return f"instance {instance_id} not found in EC2"
    tagged = instance_tags.get(CLUSTER_TAG)
    if tagged != cluster:
        shown = "no" if tagged is None else f"{tagged!r} in its"
        return f"instance {instance_id} has {shown} {CLUSTER_TAG} tag, not {cluster!r}"
    if claim_instance_id is None:
        return f"no claim records instance {instance_id}"
    if claim_instance_id not in ("", instance_id):
        return f"its claim records another instance ({claim_instance_id})"
    return None
