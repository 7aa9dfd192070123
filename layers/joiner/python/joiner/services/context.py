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

from joiner.clock import SystemClock
from joiner.services.cluster_state import ClusterCache
from joiner.settings import Settings

if TYPE_CHECKING:
    from joiner.domain.catalog import Catalog
    from joiner.ports import BlobPort, Clock, ClusterInfo, Ec2Port, KubernetesPort, PricingPort, QueuePort, StatePort
    from joiner.services.cluster_image import ImageWrite, ImageWriter

__all__ = ["Runtime", "TtlCache", "build_runtime", "SPOT_PRICE_TTL", "SPOT_PRICE_RETRY"]

MetricFunction = Callable[..., None]
#: How long spot prices read from EC2 are used (EC2 publishes them about every five minutes).
SPOT_PRICE_TTL = timedelta(minutes=5)
#: How soon an unreadable spot price history is asked again.
SPOT_PRICE_RETRY = timedelta(minutes=1)
#: The state item (kind, id) through which functions share the spot prices they read.
SPOT_PRICES_KIND, SPOT_PRICES_ID = "PRICES", "spot"


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

    def discard(self, predicate: Callable[[Any, Any], bool]) -> int:
        """Drop every entry whose ``(key, value)`` matches; returns how many were dropped."""
        with self._lock:
            stale = [key for key, (_, value) in self._entries.items() if predicate(key, value)]
            for key in stale:
                del self._entries[key]
            return len(stale)

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
    pricing_port: PricingPort | None = None
    #: where the cluster state's image is kept (None: built from the settings' bucket or
    #: directory; neither set: no image is read or written)
    blobs_port: BlobPort | None = None
    catalog_value: Catalog | None = None
    clock: Clock = field(default_factory=SystemClock)
    sleep: Callable[[float], None] = time.sleep
    metric: MetricFunction | None = None
    invocation_id: str = field(default_factory=lambda: f"local-{uuid.uuid4()}")
    #: (uid, reason, message) of recently emitted Kubernetes events, to avoid repeating them every round.
    recent_events: TtlCache = field(default_factory=lambda: TtlCache(timedelta(minutes=5)))
    #: Resolved subnets / security groups / AMIs / launch templates per NodeClass, briefly.
    resolved: TtlCache = field(default_factory=lambda: TtlCache(timedelta(seconds=60)))
    #: The cluster's pods and Nodes, kept up to date from the changes since the last read.
    cluster_state: ClusterCache = field(default_factory=ClusterCache, repr=False)
    #: The NodeOverlays last read: used while they cannot be read, so prices do not jump back.
    node_overlays: list[Any] | None = field(default=None, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _cluster: ClusterInfo | None = field(default=None, repr=False)
    _base_catalog: Catalog | None = field(default=None, repr=False)
    _catalog_refresh_at: datetime = field(default=datetime.min.replace(tzinfo=UTC), repr=False)
    _priced_catalog: Catalog | None = field(default=None, repr=False)
    _prices_refresh_at: datetime = field(default=datetime.min.replace(tzinfo=UTC), repr=False)
    _aws: Any = field(default=None, repr=False)
    _image_writer: ImageWriter | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # The cluster state's resync follows the runtime's clock (the simulator's runs fast).
        self.cluster_state.clock = lambda: self.clock.now().timestamp()
        if self.cluster_state.image_loader is None:
            self.cluster_state.image_loader = self._load_cluster_image

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
    def blobs(self) -> BlobPort | None:
        """The cluster state's image store; None when the settings name neither a bucket nor
        a directory."""
        if self.blobs_port is None and (self.settings.state_bucket or self.settings.state_dir):
            with self._lock:
                if self.blobs_port is None:
                    self.blobs_port = _build_blobs(self)
        return self.blobs_port

    def _load_cluster_image(self) -> Any:
        blobs = self.blobs
        if blobs is None:
            return None
        from joiner.services.cluster_image import load_image

        loaded = load_image(blobs, lambda _reason: self.count("ClusterImageUnusable"))
        if loaded is None:
            return None
        image, read = loaded
        self.count("ClusterImageLoadSeconds", read["load_s"], "Seconds")
        from joiner.observability import logger

        logger.info("cluster state: image loaded", extra=read)
        return image

    def save_cluster_image(self) -> ImageWrite | None:
        """Write the cluster state's image when one is due (the scanner, after its round);
        None without an image store. Never raises."""
        blobs = self.blobs
        if blobs is None:
            return None
        from joiner.services.cluster_image import ImageWriter

        with self._lock:
            if self._image_writer is None:
                self._image_writer = ImageWriter()
            writer = self._image_writer
        written = writer.write(self.cluster_state, blobs, self.clock.now().timestamp())
        if written.kind:
            self.count("ClusterImageBytes", written.bytes, "Bytes")
        elif written.error:
            self.count("ClusterImageWriteFailures")
        return written

    @property
    def pricing(self) -> PricingPort:
        if self.pricing_port is None:
            with self._lock:
                if self.pricing_port is None:
                    from joiner.adapters.aws import pricing_adapter

                    self.pricing_port = pricing_adapter(self.aws)
        return self.pricing_port

    @property
    def catalog(self) -> Catalog:
        """The instance catalog. A catalog given to the runtime (tests, the simulator, a
        catalog file) is used as it is. Otherwise: the region's catalog built from EC2 and
        the Pricing API (shared through the state table, rebuilt every few hours; see
        :mod:`joiner.services.catalog`) with EC2's current spot prices overlaid, refreshed every :data:`SPOT_PRICE_TTL` (from
        the copy another function shared in the state table when it is fresh enough). When
        the spot price history cannot be read, the last prices read are kept (or on-demand
        only), the failure is logged and counted (``SpotPricesUnavailable``), and it is tried
        again after :data:`SPOT_PRICE_RETRY`: spot prices never block on-demand launches."""
        if self.catalog_value is not None:
            return self.catalog_value
        with self._lock:
            now = self.clock.now()
            if self._base_catalog is None or now >= self._catalog_refresh_at:
                self._refresh_base_catalog(now)
            if self._priced_catalog is None or now >= self._prices_refresh_at:
                self._priced_catalog = self._refresh_spot_prices(now)
            return self._priced_catalog

    def _pricing_if_served(self) -> PricingPort | None:
        """The pricing port, or None (logged) where the region's partition has no Price List
        Query API: the catalog is then priced from the bundled us-east-1 table."""
        from joiner.domain.catalog_build import partition_of, pricing_endpoint_region
        from joiner.observability import logger

        if self.pricing_port is None and pricing_endpoint_region(self.settings.region) is None:
            logger.warning(
                "no Price List Query API in this partition; on-demand prices come from the bundled us-east-1 table",
                extra={"region": self.settings.region, "partition": partition_of(self.settings.region)},
            )
            return None
        return self.pricing

    def _refresh_base_catalog(self, now: datetime) -> None:
        from joiner.observability import logger
        from joiner.services.catalog import load_region_catalog

        built = load_region_catalog(
            self.settings.region,
            now,
            previous=self._base_catalog,
            state=lambda: self.state,
            ec2=lambda: self.ec2,
            pricing=self._pricing_if_served,
            count=lambda name: self.count(name),
            warn=lambda message, extra: logger.warning(message, extra=extra),
        )
        if built.catalog is not self._base_catalog:
            self._base_catalog = built.catalog
            self._priced_catalog = None
        self._catalog_refresh_at = built.refresh_at

    def _refresh_spot_prices(self, now: datetime) -> Catalog:
        base = self._base_catalog
        assert base is not None  # set by _refresh_base_catalog first
        try:
            prices = self._shared_spot_prices(now)
            if prices is None:
                prices = self.ec2.spot_prices()
                self._share_spot_prices(prices, now)
        except Exception as error:  # noqa: BLE001 - any failure falls back to what is known
            from joiner.observability import logger

            logger.warning(
                "spot prices unavailable; planning with the last known prices",
                extra={"error": f"{type(error).__name__}: {error}", "have_spot_prices": self._priced_catalog is not None},
            )
            self.count("SpotPricesUnavailable")
            self._prices_refresh_at = now + SPOT_PRICE_RETRY
            return self._priced_catalog or base
        self._prices_refresh_at = now + SPOT_PRICE_TTL
        return base.with_spot_prices(prices) if prices else base

    def _shared_spot_prices(self, now: datetime) -> dict[tuple[str, str], float] | None:
        """Spot prices another function read from EC2 within :data:`SPOT_PRICE_TTL` (one
        state item), or None. Reading EC2's history takes seconds (thousands of entries);
        sharing it keeps that off the interruption path. An unreadable item is ignored."""
        try:
            item = self.state.get_item(SPOT_PRICES_KIND, SPOT_PRICES_ID)
            if not item:
                return None
            read_at = datetime.fromisoformat(str(item["readAt"]))
            if not timedelta(0) <= now - read_at < SPOT_PRICE_TTL:
                return None
            zones = [str(zone) for zone in item["zones"]]
            return {(str(name), zones[index]): float(price) for name, row in item["prices"].items() for index, price in enumerate(row) if price is not None}
        except Exception as error:  # noqa: BLE001 - a broken cache item only costs an EC2 read
            from joiner.observability import logger

            logger.warning("shared spot prices unreadable; reading EC2", extra={"error": f"{type(error).__name__}: {error}"})
            return None

    def _share_spot_prices(self, prices: dict[tuple[str, str], float], now: datetime) -> None:
        """Store ``prices`` for the other functions, compactly (one row of zone prices per
        type keeps a region's ~6,000 prices far below DynamoDB's item size limit)."""
        zones = sorted({zone for _, zone in prices})
        column = {zone: index for index, zone in enumerate(zones)}
        rows: dict[str, list[float | None]] = {}
        for (name, zone), price in sorted(prices.items()):
            rows.setdefault(name, [None] * len(zones))[column[zone]] = price
        try:
            self.state.put_item(
                SPOT_PRICES_KIND, SPOT_PRICES_ID, {"readAt": now.isoformat(), "zones": zones, "prices": rows}, expires_at=now + SPOT_PRICE_TTL * 12
            )
        except Exception as error:  # noqa: BLE001 - sharing is an optimisation
            from joiner.observability import logger

            logger.warning("could not share spot prices", extra={"error": f"{type(error).__name__}: {error}"})

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


def _build_blobs(runtime: Runtime) -> BlobPort:
    from joiner.adapters.blobs import DirectoryBlobs, S3Blobs

    if runtime.settings.state_bucket:
        return S3Blobs(runtime.aws.client("s3"), runtime.settings.state_bucket)
    return DirectoryBlobs(runtime.settings.state_dir)


def _build_queue(runtime: Runtime) -> QueuePort:
    from joiner.adapters.aws import work_queue

    return work_queue(runtime.settings, runtime.aws)
