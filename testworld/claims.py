"""NodeClaims a scenario starts with: capacity Joiner launched before the start, set up as Joiner
left it, so its real functions act on it from the first instant (a scenario's ``delete`` event
drains it through their delete-to-drain).

For each NodeClaim declared in a scenario's ``objects`` (Joiner's ``joiner.dev/v1`` mirror or
Karpenter's ``karpenter.sh/v1`` NodeClaim, :func:`joiner.domain.snapshot.parse_node_claim`):

* EC2 runs an instance of its type, zone and capacity type, with the tags Joiner's launch gives
  (:func:`joiner.domain.launch.launch_tags`), the EKS AMI and the NodeClass's subnet and
  security groups (nothing drifts);
* Joiner's state table holds its claim, ``initialized``, with the NodePool's and NodeClass's
  hashes, and its reservation against the NodePool's limits, written through Joiner's own
  state adapter;
* its kubelet has registered its Node (named by the claim's ``status.nodeName``, else by the
  instance's private DNS name) with the labels and taints a launch and registration give
  (:func:`joiner.domain.launch.node_labels`, :func:`joiner.services.registration.claim_labels`),
  Ready, carrying Joiner's finalizer and hash annotations;
* its ``joiner.dev/v1`` mirror, as Joiner writes it (:func:`joiner.domain.nodeclaims.node_claim_object`),
  of the same name and carrying Joiner's finalizer (a Karpenter NodeClaim stands for the claim
  Joiner keeps: the simulated cluster serves Joiner's NodeClaims only).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from joiner.domain import labels as wk
from joiner.domain.launch import launch_tags, node_labels, node_taints
from joiner.domain.model import NODECLASS_HASH_KEY, NODEPOOL_HASH_KEY, KubeletConfig, NodeClaim, nodeclass_hash, nodepool_hash
from joiner.domain.nodeclaims import TERMINATION_FINALIZER, node_claim_object
from joiner.domain.resources import EMPTY
from joiner.domain.snapshot import parse_node_class, parse_node_pool
from joiner.ports import ClaimRecord, ClaimState, StatePort
from testworld.cluster import BootSpec

if TYPE_CHECKING:
    from joiner.domain.catalog import Catalog
    from testworld.cloud import Instance, SimulatedEc2
    from testworld.cluster import KubeHarness, SimulatedCluster
    from testworld.stack import LocalStack

__all__ = ["RunningClaim", "install_claims"]

_EC2_ARCH = {"amd64": "x86_64", "arm64": "arm64"}


@dataclass(frozen=True)
class RunningClaim:
    """A declared NodeClaim as the simulation set it up."""

    name: str
    api_version: str
    node_pool: str
    node: str
    instance_id: str


def install_claims(
    claims: Sequence[NodeClaim],
    *,
    stack: LocalStack,
    ec2: SimulatedEc2,
    cluster: SimulatedCluster,
    kube: KubeHarness,
    state: StatePort,
    catalog: Catalog,
    now: Callable[[], datetime],
) -> list[RunningClaim]:
    """Set each of ``claims`` up as running capacity (see the module docstring)."""
    running = []
    for claim in claims:
        running.append(_install(claim, stack=stack, ec2=ec2, cluster=cluster, kube=kube, state=state, catalog=catalog, now=now()))
    return running


def _install(
    claim: NodeClaim, *, stack: LocalStack, ec2: SimulatedEc2, cluster: SimulatedCluster, kube: KubeHarness, state: StatePort, catalog: Catalog, now: datetime
) -> RunningClaim:
    from joiner.services.registration import claim_labels

    pool_raw = kube.get("NodePool", claim.node_pool)
    if pool_raw is None:
        raise ValueError(f"NodeClaim {claim.name}: NodePool {claim.node_pool} is not in the cluster")
    pool = parse_node_pool(pool_raw)
    class_raw = kube.get("NodeClass", pool.node_class)
    node_class = parse_node_class(class_raw) if class_raw is not None else None
    instance_type, zone, capacity_type = str(claim.instance_type), str(claim.zone), str(claim.capacity_type)
    kubelet = node_class.kubelet if node_class is not None else KubeletConfig()
    info = catalog.instance_type(instance_type, kubelet)
    if info is None:
        raise ValueError(f"NodeClaim {claim.name}: instance type {instance_type} is not in the catalog")
    arch = info.requirements[wk.ARCH].single_value() if wk.ARCH in info.requirements else "amd64"
    instance = _run_instance(
        claim,
        stack=stack,
        ec2=ec2,
        arch=_EC2_ARCH.get(arch or "amd64", "x86_64"),
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        tags=node_class.tags if node_class is not None else None,
    )
    node_name = claim.node_name or instance.private_dns
    record = ClaimRecord(
        claim_id=claim.name,
        node_pool=claim.node_pool,
        state=ClaimState.INITIALIZED,
        created_at=now,
        instance_id=instance.instance_id,
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        price=instance.price,
        node_name=node_name,
        reserved=info.capacity,
        launched_at=now,
        registered_at=now,
        initialized_at=now,
        pool_hash=nodepool_hash(pool),
        class_hash=nodeclass_hash(node_class) if node_class is not None else "",
    )
    state.put_claim(record)
    state.reserve_capacity(claim.node_pool, claim.name, info.capacity, pool.limits, EMPTY)

    labels = {**node_labels(pool, capacity_type), **claim_labels(record, initialized=True, instance_type=info)}
    startup = {(t.key, t.effect) for t in pool.startup_taints}
    taints = tuple(t for t in node_taints(pool) if (t.key, t.effect) not in startup)
    cluster.register_node(instance.instance_id, node_name, instance_type, zone, BootSpec(labels, taints, kubelet))
    kube.patch(
        "Node",
        node_name,
        {
            "metadata": {
                "finalizers": [TERMINATION_FINALIZER],
                "annotations": {NODEPOOL_HASH_KEY: record.pool_hash, **({NODECLASS_HASH_KEY: record.class_hash} if record.class_hash else {})},
            }
        },
    )

    mirror: dict[str, Any] = json.loads(json.dumps(node_claim_object(record, pool_raw, now=now)))  # plain JSON, as the API takes it
    mirror["metadata"]["finalizers"] = [TERMINATION_FINALIZER]
    kube.apply(mirror)
    return RunningClaim(claim.name, claim.api_version, claim.node_pool, node_name, instance.instance_id)


def _run_instance(
    claim: NodeClaim, *, stack: LocalStack, ec2: SimulatedEc2, arch: str, instance_type: str, zone: str, capacity_type: str, tags: Any
) -> Instance:
    """EC2 runs the claim's instance (as the claim's launch did), seen by the simulated EC2 as launched now."""
    cluster, network = stack.cluster, stack.network
    assert network is not None, "the stack is created before the scenario's NodeClaims"
    instance_tags = launch_tags(cluster, claim.node_pool, claim.name, tags)
    request: dict[str, Any] = {
        "ImageId": stack.amis[arch],
        "InstanceType": instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "SubnetId": network.subnets[zone],
        "SecurityGroupIds": list(network.security_groups),
        "TagSpecifications": [
            {"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in sorted(instance_tags.items())]} for kind in ("instance", "volume")
        ],
    }
    if capacity_type == wk.CAPACITY_TYPE_SPOT:
        request["InstanceMarketOptions"] = {"MarketType": "spot"}
    instance_id = stack.ec2.run_instances(**request)["Instances"][0]["InstanceId"]
    ec2.observe(actor="ec2")
    return ec2.instances[instance_id]
