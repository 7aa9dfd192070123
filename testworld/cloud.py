"""What EC2 does around Joiner, simulated on moto: it tracks the cluster's instances in simulated
time (moto's own timestamps are wall-clock), delivers spot interruption warnings and rebalance
recommendations on request through EventBridge ``put_events`` (the stack's rule routes them to
the interruption queue),
terminates an interrupted instance two minutes of simulated time later if it is still
running, and publishes ``EC2 Instance State-change Notification`` events when instances
stop running, as EC2 does.

One correction to moto (:func:`spot_fleet_security_groups`): moto gives the spot instances of
an EC2 Fleet its ``default`` security group instead of the launch template's
``SecurityGroupIds`` (its on-demand instances get the right ones); EC2 uses the template's.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from joiner.domain import labels as wk
from joiner.domain.catalog import Catalog

__all__ = ["INTERRUPTION_NOTICE", "Instance", "Interruption", "Rebalance", "SimulatedEc2", "spot_fleet_security_groups"]

#: A spot interruption warning comes two minutes before EC2 reclaims the instance.
INTERRUPTION_NOTICE = timedelta(minutes=2)
_GONE = ("shutting-down", "terminated", "stopping", "stopped")


@contextlib.contextmanager
def spot_fleet_security_groups() -> Iterator[None]:
    """While active, spot instances of an EC2 Fleet (in-process moto) get their launch
    template's security groups, as in EC2 (moto 5 gives them the VPC's default group)."""
    from moto.ec2.models.fleets import Fleet

    original = Fleet.create_spot_requests

    def create_spot_requests(self: Any, weight_to_add: float) -> Any:
        for spec in self.launch_specs:
            template = spec.launch_template_spec or {}
            if spec.group_set or not template.get("LaunchTemplateId"):
                continue
            data = self.ec2_backend.get_launch_template(template["LaunchTemplateId"]).get_version(template.get("Version", "$Latest")).data
            spec.group_set = list(data.get("SecurityGroupIds") or data.get("SecurityGroupId") or [])
        return original(self, weight_to_add)

    Fleet.create_spot_requests = create_spot_requests  # type: ignore[method-assign]
    try:
        yield
    finally:
        Fleet.create_spot_requests = original  # type: ignore[method-assign]


@dataclass
class Instance:
    """An instance of the cluster as the simulation saw it."""

    instance_id: str
    instance_type: str
    zone: str
    capacity_type: str
    node_pool: str
    private_dns: str
    price: float
    launched: datetime
    managed: bool
    state: str = "running"
    terminated: datetime | None = None
    terminated_by: str | None = None  # "joiner" or "ec2"


@dataclass
class Interruption:
    """A spot interruption warning and what became of it."""

    instance_id: str
    node: str | None
    warned: datetime
    deadline: datetime
    pods_at_warning: int = 0
    drained: datetime | None = None
    terminated: datetime | None = None
    terminated_by: str | None = None
    replacement_ready: datetime | None = None

    @property
    def within_deadline(self) -> bool:
        """Drained and terminated by Joiner before EC2 reclaimed the instance."""
        return (
            self.terminated_by == "joiner"
            and self.drained is not None
            and self.drained <= self.deadline
            and self.terminated is not None
            and self.terminated <= self.deadline
        )


@dataclass
class Rebalance:
    """A rebalance recommendation and what became of it. ``policy`` is the NodePool's
    ``spec.interruption.rebalance`` (``replace`` or ``ignore``); ``drain_started`` is Joiner's
    first eviction or deletion of a pod on the node."""

    instance_id: str
    node: str | None
    warned: datetime
    policy: str
    pods_at_warning: int = 0
    replacement_ready: datetime | None = None
    drain_started: datetime | None = None
    drained: datetime | None = None
    cordoned: datetime | None = None
    terminated: datetime | None = None
    terminated_by: str | None = None

    @property
    def handled(self) -> bool:
        """``replace``: a replacement was Ready before the first pod left, the node was drained
        and Joiner terminated it. ``ignore``: the node was left alone (never cordoned, still running)."""
        if self.policy == "ignore":
            return self.cordoned is None and self.drain_started is None and self.terminated is None
        return (
            self.replacement_ready is not None
            and self.drain_started is not None
            and self.replacement_ready <= self.drain_started
            and self.drained is not None
            and self.terminated_by == "joiner"
        )


class SimulatedEc2:
    """Instances of ``cluster`` on moto, in simulated time."""

    def __init__(self, ec2: Any, events: Any, cluster: str, catalog: Catalog, now: Callable[[], datetime], region: str) -> None:
        self.ec2 = ec2
        self.events = events
        self.cluster = cluster
        self.catalog = catalog
        self.now = now
        self.region = region
        self.instances: dict[str, Instance] = {}
        self.interruptions: list[Interruption] = []
        self.rebalances: list[Rebalance] = []
        self._user_data: dict[str, str | None] = {}

    # ------------------------------------------------------------ observing

    def _describe(self) -> list[dict[str, Any]]:
        pages = self.ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": f"tag:kubernetes.io/cluster/{self.cluster}", "Values": ["owned"]}])
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def _price(self, instance_type: str, zone: str, capacity_type: str) -> float:
        for offering in self.catalog.offerings(instance_type):
            if offering.zone == zone and offering.capacity_type == capacity_type:
                return offering.price
        return 0.0

    def observe(self, *, actor: str = "joiner") -> tuple[list[Instance], list[Instance]]:
        """Refresh from moto; returns the instances (launched, terminated) since the last call,
        newly terminated ones attributed to ``actor``."""
        launched, gone = [], []
        for raw in self._describe():
            instance_id = raw["InstanceId"]
            state = raw["State"]["Name"]
            known = self.instances.get(instance_id)
            if known is None:
                tags = {t["Key"]: t["Value"] for t in raw.get("Tags") or []}
                capacity_type = "spot" if raw.get("InstanceLifecycle") == "spot" or raw.get("SpotInstanceRequestId") else "on-demand"
                zone = raw["Placement"]["AvailabilityZone"]
                known = Instance(
                    instance_id=instance_id,
                    instance_type=raw["InstanceType"],
                    zone=zone,
                    capacity_type=capacity_type,
                    node_pool=tags.get(wk.NODEPOOL, ""),
                    private_dns=raw.get("PrivateDnsName") or f"{instance_id}.ec2.internal",
                    price=self._price(raw["InstanceType"], zone, capacity_type),
                    launched=self.now(),
                    managed=wk.NODECLAIM in tags,
                    state=state,
                )
                self.instances[instance_id] = known
                launched.append(known)
            if state in _GONE and known.terminated is None:
                known.state, known.terminated, known.terminated_by = state, self.now(), actor
                gone.append(known)
                self._state_change(known)
            known.state = state
        return launched, gone

    def user_data(self, instance_id: str) -> str | None:
        """The instance's base64 user data (from its launch template), as the kubelet reads it."""
        if instance_id not in self._user_data:
            answer = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
            self._user_data[instance_id] = (answer.get("UserData") or {}).get("Value")
        return self._user_data[instance_id]

    def running(self) -> list[Instance]:
        """Instances not terminated, in launch order."""
        return [i for i in self.instances.values() if i.terminated is None]

    def cost_per_hour(self) -> float:
        """Sum of the running managed instances' prices (catalog on-demand or spot price)."""
        return sum(i.price for i in self.running() if i.managed)

    # ------------------------------------------------------------ acting

    def _put(self, detail_type: str, detail: dict[str, Any], instance: Instance) -> None:
        answer = self.events.put_events(
            Entries=[
                {
                    "Source": "aws.ec2",
                    "DetailType": detail_type,
                    "Detail": json.dumps(detail),
                    "Resources": [f"arn:aws:ec2:{self.region}:123456789012:instance/{instance.instance_id}"],
                    "Time": self.now(),
                }
            ]
        )
        if answer.get("FailedEntryCount"):
            raise RuntimeError(f"put_events failed: {answer}")

    def _state_change(self, instance: Instance) -> None:
        self._put("EC2 Instance State-change Notification", {"instance-id": instance.instance_id, "state": instance.state}, instance)

    def interrupt(self, instance: Instance, node: str | None, pods: int) -> Interruption:
        """Deliver a spot interruption warning for ``instance``; EC2 reclaims it two minutes later."""
        self._put("EC2 Spot Instance Interruption Warning", {"instance-id": instance.instance_id, "instance-action": "terminate"}, instance)
        record = Interruption(instance.instance_id, node, self.now(), self.now() + INTERRUPTION_NOTICE, pods_at_warning=pods)
        self.interruptions.append(record)
        return record

    def recommend_rebalance(self, instance: Instance, node: str | None, pods: int, policy: str) -> Rebalance:
        """Deliver an EC2 Instance Rebalance Recommendation for ``instance`` (no deadline: EC2
        takes nothing back by itself)."""
        self._put("EC2 Instance Rebalance Recommendation", {"instance-id": instance.instance_id}, instance)
        record = Rebalance(instance.instance_id, node, self.now(), policy, pods_at_warning=pods)
        self.rebalances.append(record)
        return record

    def due_reclaims(self) -> list[Interruption]:
        """Interruptions whose deadline has come while the instance still runs."""
        now = self.now()
        return [r for r in self.interruptions if r.deadline <= now and self.instances[r.instance_id].terminated is None]

    def reclaim(self, record: Interruption) -> Instance:
        """EC2 takes the instance back at the deadline."""
        self.ec2.terminate_instances(InstanceIds=[record.instance_id])
        self.observe(actor="ec2")
        return self.instances[record.instance_id]

    def next_reclaim(self) -> datetime | None:
        """When EC2 will next reclaim an interrupted instance."""
        times = [r.deadline for r in self.interruptions if self.instances[r.instance_id].terminated is None]
        return min(times) if times else None
