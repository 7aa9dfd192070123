"""The runtime every handler uses: settings plus lazily built adapters.

``build_runtime(settings)`` is cheap: nothing touches AWS or Kubernetes (and no boto3 or
Kubernetes client module is imported) until a service first uses ``runtime.kube``,
``runtime.ec2``, ``runtime.state`` or ``runtime.queue``. A handler builds one runtime per
cold start and reuses it across warm invocations, so HTTP connections, the EKS cluster
description, the instance catalog and short-lived caches (resolved subnets, recently
emitted events) survive between invocations.

Tests build a :class:`Runtime` directly with fakes for any of the ports.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from joiner.settings import Settings

if TYPE_CHECKING:
    from joiner.domain.catalog import Catalog
    from joiner.ports import Clock, ClusterInfo, Ec2Port, KubernetesPort, QueuePort, StatePort

__all__ = ["Runtime", "SystemClock", "TtlCache", "build_runtime"]

MetricFunction = Callable[..., None]


class SystemClock:
    """Wall-clock UTC time."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class TtlCache:
    """A small thread-safe cache whose entries expire after a fixed time (by the runtime clock)."""

    def __init__(self, ttl: timedelta, max_entries: int = 50_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[Any, tuple[datetime, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, now: datetime) -> Any | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            if found[0] <= now:
                del self._entries[key]
                return None
            return found[1]

    def put(self, key: Any, value: Any, now: datetime) -> None:
        with self._lock:
            if len(self._entries) >= self.max_entries:
                for stale in [k for k, (expiry, _) in self._entries.items() if expiry <= now]:
                    del self._entries[stale]
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()
            self._entries[key] = (now + self.ttl, value)

    def add_if_absent(self, key: Any, now: datetime) -> bool:
        """Remember ``key``; False when it was already remembered and not expired."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None and found[0] > now:
                return False
        self.put(key, True, now)
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


@dataclass
class Runtime:
    """Settings, ports and per-execution-environment caches.

    Ports passed in are used as given; missing ones are built from ``settings`` on first
    use (thread-safe). ``invocation_id`` identifies the current invocation (the Lambda
    request id; handlers set it) and owns leases.
    """

    settings: Settings
    kube_port: KubernetesPort | None = None
    ec2_port: Ec2Port | None = None
    state_port: StatePort | None = None
    queue_port: QueuePort | None = None
    catalog_value: Catalog | None = None
    clock: Clock = field(default_factory=SystemClock)
    sleep: Callable[[float], None] = time.sleep
    metric: MetricFunction | None = None
    invocation_id: str = field(default_factory=lambda: f"local-{uuid.uuid4()}")
    #: (uid, reason, message) of recently emitted Kubernetes events, to avoid repeating them every round.
    recent_events: TtlCache = field(default_factory=lambda: TtlCache(timedelta(minutes=5)))
    #: Resolved subnets / security groups / AMIs / launch templates per NodeClass, briefly.
    resolved: TtlCache = field(default_factory=lambda: TtlCache(timedelta(seconds=60)))
    #: Pods parsed in the previous round by (uid, resourceVersion): unchanged pods are not parsed again.
    parsed_pods: dict[str, Any] = field(default_factory=dict, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _cluster: ClusterInfo | None = field(default=None, repr=False)
    _aws: Any = field(default=None, repr=False)

    # -- ports

    @property
    def kube(self) -> KubernetesPort:
        if self.kube_port is None:
            with self._lock:
                if self.kube_port is None:
                    self.kube_port = _build_kubernetes(self)
        return self.kube_port

    @property
    def ec2(self) -> Ec2Port:
        if self.ec2_port is None:
            with self._lock:
                if self.ec2_port is None:
                    self.ec2_port = _build_ec2(self)
        return self.ec2_port

    @property
    def state(self) -> StatePort:
        if self.state_port is None:
            with self._lock:
                if self.state_port is None:
                    self.state_port = _build_state(self)
        return self.state_port

    @property
    def queue(self) -> QueuePort:
        if self.queue_port is None:
            with self._lock:
                if self.queue_port is None:
                    self.queue_port = _build_queue(self)
        return self.queue_port

    @property
    def catalog(self) -> Catalog:
        if self.catalog_value is None:
            with self._lock:
                if self.catalog_value is None:
                    from joiner.domain.catalog import load_bundled_catalog

                    self.catalog_value = load_bundled_catalog(self.settings.region)
        return self.catalog_value

    def cluster(self) -> ClusterInfo:
        """The EKS cluster description (endpoint, CA, version), fetched once per runtime."""
        if self._cluster is None:
            with self._lock:
                if self._cluster is None:
                    self._cluster = self.ec2.describe_cluster(self.settings.cluster_name)
        return self._cluster

    def count(self, name: str, value: float = 1, unit: str = "Count", **dimensions: str) -> None:
        """Emit one metric through ``metric`` (default: :func:`joiner.observability.count`)."""
        if self.metric is None:
            from joiner.observability import count

            self.metric = count
        self.metric(name, value, unit, **dimensions)

    @property
    def aws(self) -> Any:
        """The runtime's :class:`joiner.adapters.aws.AwsClients` (boto3 clients, built lazily)."""
        if self._aws is None:
            with self._lock:
                if self._aws is None:
                    from joiner.adapters.aws import AwsClients

                    self._aws = AwsClients.from_settings(self.settings)
        return self._aws

    def aws_client(self, service: str) -> Any:
        """A boto3 client for ``service`` (shared, cached; local endpoint when configured)."""
        return self.aws.client(service)


def build_runtime(settings: Settings, **overrides: Any) -> Runtime:
    """A runtime for ``settings``; keyword overrides are passed to :class:`Runtime` (tests)."""
    return Runtime(settings=settings, **overrides)


# ---------------------------------------------------------------- adapter factories


def _build_kubernetes(runtime: Runtime) -> KubernetesPort:
    from joiner.adapters.kubernetes import KubernetesClient

    if runtime.settings.kubernetes_host:
        return KubernetesClient.from_settings(runtime.settings, clock=runtime.clock)
    return KubernetesClient.from_settings(runtime.settings, runtime.aws.eks, runtime.aws.sts, clock=runtime.clock)


def _build_ec2(runtime: Runtime) -> Ec2Port:
    from joiner.adapters.aws import ec2_adapter

    return ec2_adapter(runtime.settings, runtime.aws, runtime.clock)


def _build_state(runtime: Runtime) -> StatePort:
    from joiner.adapters.aws import state_adapter

    return state_adapter(runtime.settings, runtime.aws, runtime.clock)


def _build_queue(runtime: Runtime) -> QueuePort:
    from joiner.adapters.aws import work_queue

    return work_queue(runtime.settings, runtime.aws)
