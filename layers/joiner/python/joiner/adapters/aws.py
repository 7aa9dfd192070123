"""boto3 session and client factory, plus builders for the AWS adapters.

Clients are built lazily on first use (never at import, so a cold start pays only for the
clients an entry point touches) and cached per :class:`AwsClients`. Every client shares one
botocore ``Config``: standard retry mode with at most 5 attempts (botocore backs off with jitter
on throttling such as ``RequestLimitExceeded`` and on transient errors), bounded connect and read
timeouts so a hung call fails inside the Lambda timeout, and a ``joiner`` user-agent suffix.
``JOINER_AWS_ENDPOINT_URL`` (local runs) points every client at a moto server.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

import boto3
from botocore.config import Config

from joiner.adapters.ec2 import Ec2Adapter
from joiner.adapters.pricing import PricingAdapter
from joiner.adapters.queue import SqsQueue
from joiner.adapters.state import StateAdapter
from joiner.clock import SystemClock
from joiner.ports import Clock
from joiner.settings import Settings, get_settings

__all__ = [
    "RETRY_MAX_ATTEMPTS",
    "CONNECT_TIMEOUT_SECONDS",
    "READ_TIMEOUT_SECONDS",
    "client_config",
    "AwsClients",
    "get_clients",
    "ec2_adapter",
    "pricing_adapter",
    "state_adapter",
    "work_queue",
]

RETRY_MAX_ATTEMPTS = 5
CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 30


def client_config(**overrides: Any) -> Config:
    """The shared botocore config; ``overrides`` replace individual options (tests, tuning)."""
    options: dict[str, Any] = {
        "retries": {"mode": "standard", "total_max_attempts": RETRY_MAX_ATTEMPTS},  # attempts, first included
        "connect_timeout": CONNECT_TIMEOUT_SECONDS,
        "read_timeout": READ_TIMEOUT_SECONDS,
        "user_agent_extra": "joiner",
        "max_pool_connections": 16,
    }
    options.update(overrides)
    return Config(**options)


class AwsClients:
    """Lazily built, cached boto3 clients for one region (thread-safe)."""

    def __init__(self, region: str, endpoint_url: str = "", *, config: Config | None = None, session: boto3.Session | None = None) -> None:
        self.region = region
        self.endpoint_url = endpoint_url or None
        self.config = config or client_config()
        self._session = session
        self._clients: dict[str, Any] = {}
        self._tables: dict[str, Any] = {}
        self._resource: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings | None = None, **kwargs: Any) -> AwsClients:
        settings = settings or get_settings()
        return cls(settings.region, settings.aws_endpoint_url, **kwargs)

    def _get_session(self) -> boto3.Session:
        if self._session is None:
            self._session = boto3.Session(region_name=self.region)
        return self._session

    def client(self, service: str, region: str | None = None) -> Any:
        """The cached client for ``service`` (built on first use), in ``region`` when given
        (the Pricing API lives in a few regions only), else the runtime's region."""
        key = service if region is None else f"{service}@{region}"
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = self._get_session().client(service, region_name=region or self.region, endpoint_url=self.endpoint_url, config=self.config)
                self._clients[key] = client
            return client

    def table(self, name: str) -> Any:
        """A DynamoDB ``Table`` resource for ``name`` (cached)."""
        with self._lock:
            table = self._tables.get(name)
            if table is None:
                if self._resource is None:
                    self._resource = self._get_session().resource("dynamodb", region_name=self.region, endpoint_url=self.endpoint_url, config=self.config)
                table = self._resource.Table(name)
                self._tables[name] = table
            return table

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

    @property
    def ssm(self) -> Any:
        return self.client("ssm")

    @property
    def eks(self) -> Any:
        return self.client("eks")

    @property
    def sqs(self) -> Any:
        return self.client("sqs")

    @property
    def sts(self) -> Any:
        return self.client("sts")

    @property
    def dynamodb(self) -> Any:
        return self.client("dynamodb")

    @property
    def pricing(self) -> Any:
        """The Pricing API client at the endpoint nearest the runtime's region; LookupError
        where the region's partition has no Pricing API (GovCloud, ISO)."""
        from joiner.domain.catalog_build import partition_of, pricing_endpoint_region

        endpoint = pricing_endpoint_region(self.region)
        if endpoint is None:
            raise LookupError(f"the {partition_of(self.region)} partition ({self.region}) has no Price List Query API")
        return self.client("pricing", endpoint)


@lru_cache(maxsize=1)
def get_clients() -> AwsClients:
    """Clients for this execution environment, shared across warm invocations."""
    return AwsClients.from_settings(get_settings())


def ec2_adapter(settings: Settings | None = None, clients: AwsClients | None = None, clock: Clock | None = None) -> Ec2Adapter:
    settings = settings or get_settings()
    clients = clients or get_clients()
    return Ec2Adapter(
        clients.ec2,
        clients.ssm,
        clients.eks,
        settings.cluster_name,
        clock or SystemClock(),
        default_instance_profile=settings.node_role or None,
    )


def pricing_adapter(clients: AwsClients | None = None) -> PricingAdapter:
    return PricingAdapter((clients or get_clients()).pricing)


def state_adapter(settings: Settings | None = None, clients: AwsClients | None = None, clock: Clock | None = None) -> StateAdapter:
    settings = settings or get_settings()
    clients = clients or get_clients()
    return StateAdapter(clients.table(settings.state_table), clock or SystemClock())


def work_queue(settings: Settings | None = None, clients: AwsClients | None = None) -> SqsQueue:
    settings = settings or get_settings()
    clients = clients or get_clients()
    return SqsQueue(clients.sqs, settings.work_queue_url)
