"""The Kubernetes API adapter: :class:`KubernetesClient` implements :class:`joiner.ports.KubernetesPort`.

It moves raw JSON over urllib3 (connection pooling, TLS; the library the official client
uses underneath) and imports nothing from the ``kubernetes`` package: importing
``kubernetes.client`` loads its hundreds of generated model and API modules, a third of a
second of every cold start for code Joiner never calls. Only :meth:`KubernetesClient.from_kubeconfig`
(local runs) uses the official kubeconfig loader.

With ``karpenter=True`` (``JOINER_KARPENTER_CRDS``), :meth:`KubernetesClient.list_node_pools`
and :meth:`KubernetesClient.list_node_classes` also read Karpenter's ``karpenter.sh/v1``
NodePools and ``karpenter.k8s.aws/v1`` EC2NodeClasses, converted as ``joiner import-karpenter``
converts them (:func:`joiner.domain.karpenter.read_karpenter`), and write each one's
``JoinerConverted`` condition (an Event too when it is not read); status writes for a converted
object go to the Karpenter object.

Failure handling: 429, 500, 502, 503, 504, timeouts and connection errors are retried with
exponential backoff and full jitter (``Retry-After`` honoured, capped), at most
``max_attempts`` attempts in all, then :class:`joiner.ports.KubernetesError` names the method,
path, status and the server's message. The Eviction API's 429 is an answer (a
PodDisruptionBudget disallows it now), never retried here. A 401 makes the token provider
sign a fresh token once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random as _random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from joiner.adapters.trimming import decode_trimmed
from joiner.clock import SystemClock
from joiner.domain import labels as wk
from joiner.observability import logger
from joiner.ports import Clock, EvictionOutcome, JsonDict, KubernetesError, WatchEvent, WatchExpired
from joiner.settings import Settings

if TYPE_CHECKING:
    from joiner.domain.karpenter import KarpenterView, ReadOutcome

__all__ = ["MERGE_PATCH", "NODE_CLAIMS_PATH", "NODE_CLASSES_PATH", "NODE_POOLS_PATH", "KubernetesClient", "is_pending_pod", "pending_view"]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
NODE_POOLS_PATH = "/apis/joiner.dev/v1/nodepools"
NODE_CLASSES_PATH = "/apis/joiner.dev/v1/nodeclasses"
NODE_CLAIMS_PATH = "/apis/joiner.dev/v1/nodeclaims"
NODE_OVERLAYS_PATH = "/apis/joiner.dev/v1alpha1/nodeoverlays"
#: Nodes Joiner launched (the kubelet registers them with their NodePool's label) that Joiner's
#: registration has not labelled yet: the watcher's ``nodes`` stream.
JOINING_NODES_SELECTOR = f"{wk.NODEPOOL},!{wk.REGISTERED}"
KARPENTER_NODE_POOLS_PATH = "/apis/karpenter.sh/v1/nodepools"
KARPENTER_NODE_CLASSES_PATH = "/apis/karpenter.k8s.aws/v1/ec2nodeclasses"
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
EVENT_COMPONENT = "joiner"
USER_AGENT = "joiner/0.1"
_EVENT_MESSAGE_LIMIT = 1024
#: A watch line longer than this is a broken stream, not a pod (the API server's own object limit is 1.5 MiB).
WATCH_LINE_LIMIT = 4 * 1024 * 1024
WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
#: A catch-up watch (:meth:`KubernetesClient.changes_since`) ends once its stream was idle this long.
CATCH_UP_IDLE_SECONDS = 0.3
#: ... or after this long (the server's ``timeoutSeconds``): a busy cluster's next round goes on from there.
CATCH_UP_MAX_SECONDS = 10
#: how long a catch-up waits for the watch's response headers (the server sends them at once)
CATCH_UP_HEADERS_SECONDS = 5.0


#: Pages of unbound pods are smaller: the watcher (128 MB) keeps a few fields of each, so a page
#: decoded at once is most of its peak memory.
UNBOUND_PAGE_SIZE = 100


def _owned_by(pod: Mapping[str, Any], api_version: str, kind: str) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("apiVersion") == api_version and o.get("kind") == kind for o in owners)


def pending_view(pod: Mapping[str, Any]) -> JsonDict:
    """``pod`` with only the fields :func:`is_pending_pod` and a pod's identity need."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    kept_meta = {key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp", "ownerReferences") if key in meta}
    kept_status = {key: status[key] for key in ("phase", "nominatedNodeName", "conditions") if key in status}
    view: JsonDict = {"apiVersion": pod.get("apiVersion"), "kind": pod.get("kind"), "metadata": kept_meta, "status": kept_status}
    if spec.get("nodeName"):
        view["spec"] = {"nodeName": spec["nodeName"]}
    return view


def is_pending_pod(pod: Mapping[str, Any]) -> bool:
    """Karpenter's "provisionable" test: the scheduler marked it PodScheduled=False/Unschedulable,
    it is not bound, not nominated to a node (preempting), not DaemonSet- or Node-owned (mirror
    pods), not terminal and not terminating."""
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod.get("metadata") or {}
    if spec.get("nodeName") or status.get("nominatedNodeName") or meta.get("deletionTimestamp"):
        return False
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    if _owned_by(pod, "apps/v1", "DaemonSet") or _owned_by(pod, "v1", "Node"):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable" for c in status.get("conditions") or [])


class KubernetesClient:
    """:class:`joiner.ports.KubernetesPort`, hand-written on urllib3 (the HTTP library the
    official client uses underneath; none of the official client's code).

    ``authorization`` returns the ``Authorization`` header value per request (tokens that
    expire are refreshed by it); ``invalidate`` is called once on a 401. ``sleep`` and
    ``random`` are injectable so tests run retries without waiting.
    """

    def __init__(
        self,
        host: str,
        *,
        token: str | None = None,
        authorization: Callable[[], str | None] | None = None,
        invalidate: Callable[[], None] | None = None,
        ca_file: str | None = None,
        ca_data: str | None = None,
        insecure: bool = False,
        cert_file: str | None = None,
        key_file: str | None = None,
        max_attempts: int = 4,
        backoff_base: float = 0.25,
        backoff_cap: float = 8.0,
        max_retry_after: float = 10.0,
        timeout: tuple[float, float] = (5.0, 30.0),
        page_size: int = 500,
        pool_size: int = 16,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = _random.random,
        karpenter: bool = False,
    ) -> None:
        import urllib3

        if not host:
            raise ValueError("KubernetesClient: host is required")
        if max_attempts < 1:
            raise ValueError("KubernetesClient: max_attempts must be at least 1")
        if page_size < 1:
            raise ValueError("KubernetesClient: page_size must be at least 1")
        if token is not None and authorization is not None:
            raise ValueError("KubernetesClient: give token or authorization, not both")
        self._host = host.rstrip("/")
        # Our retry loop owns retries; urllib3's own would multiply the attempts.
        self._pool = urllib3.PoolManager(
            num_pools=4,
            maxsize=pool_size,
            retries=False,
            cert_reqs="CERT_NONE" if insecure else "CERT_REQUIRED",
            ca_certs=ca_file or None,
            ca_cert_data=ca_data or None,
            cert_file=cert_file or None,
            key_file=key_file or None,
        )
        self._urllib3_timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        if token is not None:
            static = f"Bearer {token}"
            authorization = lambda: static
        self._authorization = authorization or (lambda: None)
        self._invalidate = invalidate
        self._max_attempts = max_attempts
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._max_retry_after = max_retry_after
        self._page_size = page_size
        self._clock = clock or SystemClock()
        self._sleep = sleep
        self._random = random
        #: also read Karpenter's NodePools and EC2NodeClasses (converted)
        self.karpenter = karpenter

    # ------------------------------------------------ construction

    @classmethod
    def from_settings(
        cls, settings: Settings, eks_client: Any = None, sts_client: Any = None, *, clock: Clock | None = None, **options: Any
    ) -> KubernetesClient:
        """Local runs: ``JOINER_KUBERNETES_HOST`` (+ ``_TOKEN``, ``_CA_FILE``, ``_INSECURE``).
        In AWS: endpoint and CA from ``eks:DescribeCluster``, bearer tokens signed with STS
        (refreshed every 10 minutes). boto3 clients are created here when not given."""
        if settings.kubernetes_host:
            return cls(
                settings.kubernetes_host,
                token=settings.kubernetes_token or None,
                ca_file=settings.kubernetes_ca_file or None,
                insecure=settings.kubernetes_insecure,
                clock=clock,
                karpenter=settings.karpenter_crds,
                **options,
            )
        from joiner.adapters.eks_auth import EksTokenProvider

        if eks_client is None or sts_client is None:
            import boto3

            endpoint = settings.aws_endpoint_url or None
            eks_client = eks_client or boto3.client("eks", region_name=settings.region, endpoint_url=endpoint)
            sts_client = sts_client or boto3.client("sts", region_name=settings.region, endpoint_url=endpoint)
        try:
            cluster = eks_client.describe_cluster(name=settings.cluster_name)["cluster"]
            endpoint_url = cluster["endpoint"]
            ca_data = base64.b64decode(cluster["certificateAuthority"]["data"]).decode()
        except KeyError as missing:
            raise KubernetesError(f"eks:DescribeCluster {settings.cluster_name}: the answer has no {missing}") from None
        provider = EksTokenProvider(settings.cluster_name, sts_client, clock=clock)
        return cls(
            endpoint_url,
            authorization=provider.authorization,
            invalidate=provider.invalidate,
            ca_data=ca_data,
            clock=clock,
            karpenter=settings.karpenter_crds,
            **options,
        )

    @classmethod
    def from_kubeconfig(cls, path: str, context: str | None = None, **options: Any) -> KubernetesClient:
        """A kubeconfig file (tokens, client certificates and exec plugins as the official loader
        supports them); for local runs against a real cluster."""
        from kubernetes.client.configuration import Configuration
        from kubernetes.config.kube_config import load_kube_config

        configuration = Configuration()
        load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=configuration, persist_config=False
        )

        def authorization() -> str | None:  # refreshes expiring exec/OIDC credentials through the loader's hook
            settings: dict[str, Any] = dict(configuration.auth_settings())
            value = (settings.get("BearerToken") or {}).get("value")
            return str(value) if value else None

        return cls(
            configuration.host,
            authorization=authorization,
            ca_file=configuration.ssl_ca_cert,
            insecure=not configuration.verify_ssl,
            cert_file=configuration.cert_file,
            key_file=configuration.key_file,
            **options,
        )

    def close(self) -> None:
        self._pool.clear()

    # ------------------------------------------------ HTTP with retries

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: Iterable[int] = (),
        retry_too_many: bool = True,
        trim: bool = False,
    ) -> tuple[int, Any]:
        """One API call with bounded retries. Returns (status, parsed JSON or None) for 2xx and
        for statuses in ``accept``; raises :class:`KubernetesError` otherwise. ``trim`` decodes
        without the arrays no part of Joiner reads (:mod:`joiner.adapters.trimming`)."""
        from urllib3.exceptions import HTTPError, SSLError

        accepted = frozenset(accept)
        encoded = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
        url = self._host + path + (f"?{urlencode(query)}" if query else "")
        refreshed_token = False
        attempt = 0
        while True:
            attempt += 1
            headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
            if body is not None:
                headers["Content-Type"] = content_type
            authorization = self._authorization()
            if authorization:
                headers["Authorization"] = authorization
            try:
                response = self._pool.request(method, url, body=encoded, headers=headers, timeout=self._urllib3_timeout, retries=False, redirect=False)
                status = response.status
                raw = response.data
                retry_after = response.headers.get("Retry-After")
            except SSLError as error:  # a certificate problem: retrying will not fix it
                raise KubernetesError(f"Kubernetes {method} {path} failed: TLS: {error}") from error
            except (HTTPError, OSError) as error:
                failure = f"{type(error).__name__}: {error}"
                if attempt >= self._max_attempts:
                    raise KubernetesError(f"Kubernetes {method} {path} failed after {attempt} attempts: {failure}") from error
                logger.warning("kubernetes request failed", extra={"method": method, "path": path, "attempt": attempt, "error": str(failure)})
                self._backoff(attempt, None)
                continue

            if 200 <= status < 300 or status in accepted:
                return status, _parse(raw, trim=trim)
            if status == 401 and self._invalidate is not None and not refreshed_token:
                refreshed_token = True
                self._invalidate()
                attempt -= 1
                continue
            retryable = status in RETRYABLE_STATUSES and (status != 429 or retry_too_many)
            if retryable and attempt < self._max_attempts:
                logger.warning("kubernetes request answered an error", extra={"method": method, "path": path, "attempt": attempt, "status": status})
                self._backoff(attempt, _seconds(retry_after))
                continue
            tries = f" after {attempt} attempts" if retryable else ""
            raise KubernetesError(f"Kubernetes {method} {path} failed{tries}: HTTP {status}: {_excerpt(raw)}", status=status)

    def _backoff(self, attempt: int, retry_after: float | None) -> None:
        delay = self._random() * min(self._backoff_cap, self._backoff_base * 2 ** (attempt - 1))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self._max_retry_after))
        self._sleep(delay)

    def _list(self, path: str, kind: str, api_version: str, **query: str | None) -> list[JsonDict]:
        return self._list_versioned(path, kind, api_version, **query)[0]

    def _list_versioned(self, path: str, kind: str, api_version: str, **query: str | None) -> tuple[list[JsonDict], str]:
        """All items and the list's ``resourceVersion`` (see :meth:`_pages`)."""
        items: list[JsonDict] = []
        version = ""
        for page, page_version in self._pages(path, kind, api_version, query):
            if page is None:  # the listing restarted: what was read belongs to an expired snapshot
                items = []
                continue
            items.extend(page)
            version = version or page_version
        return items, version

    def _iter(self, path: str, kind: str, api_version: str, *, trim: bool = False, **query: str | None) -> Iterator[JsonDict]:
        """Every item, one page held at a time. A listing that restarts (an expired
        continuation) cannot take back what it yielded, so it raises instead."""
        for page, _ in self._pages(path, kind, api_version, query, trim=trim):
            if page is None:
                raise KubernetesError(f"Kubernetes GET {path}: continuation expired while streaming the list", status=410)
            yield from page

    def _pages(
        self,
        path: str,
        kind: str,
        api_version: str,
        query: Mapping[str, str | None],
        *,
        trim: bool = False,
        prefetch: bool = False,
        page_size: int | None = None,
    ) -> Iterator[tuple[list[JsonDict] | None, str]]:
        """The list a page of ``page_size`` at a time, each with the list's ``resourceVersion``
        (the first page's: later pages belong to the same snapshot). A continuation that
        expired (410) yields ``None`` and restarts the listing once from the beginning.
        ``prefetch`` requests the next page on a helper thread while the caller works on this
        one (the server's and the network's time then overlaps the caller's). ``page_size``
        overrides the client's for a caller that keeps little of each page."""
        params = {key: value for key, value in query.items() if value}

        def fetch(token: str | None) -> tuple[list[JsonDict], str, str | None]:
            page_query = dict(params, limit=str(page_size or self._page_size))
            if token:
                page_query["continue"] = token
            _, page = self._request("GET", path, query=page_query, trim=trim)
            items: list[JsonDict] = page.get("items") or []
            for item in items:
                item.setdefault("apiVersion", api_version)
                item.setdefault("kind", kind)
            metadata = page.get("metadata") or {}
            return items, str(metadata.get("resourceVersion") or ""), metadata.get("continue") or None

        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="joiner-list") if prefetch else None
        try:
            for _ in range(2):
                token: str | None = None
                version = ""
                try:
                    ahead: Future[tuple[list[JsonDict], str, str | None]] | None = None
                    while True:
                        items, page_version, next_token = ahead.result() if ahead is not None else fetch(token)
                        ahead = None
                        version = version or page_version
                        token = next_token
                        if token and executor is not None:
                            ahead = executor.submit(fetch, token)
                        yield items, version
                        del items
                        if not token:
                            return
                except KubernetesError as error:
                    if error.status != 410 or token is None:
                        raise
                    logger.warning("kubernetes list continuation expired, listing again", extra={"path": path})
                    yield None, ""
            raise KubernetesError(f"Kubernetes GET {path}: continuation expired twice")
        finally:
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------ reads

    def list_pods(self, *, field_selector: str | None = None, label_selector: str | None = None) -> list[JsonDict]:
        return self._list("/api/v1/pods", "Pod", "v1", fieldSelector=field_selector, labelSelector=label_selector)

    def list_unbound_pods(self) -> tuple[list[JsonDict], str]:
        """The unbound pods, each trimmed as it streams in to what :func:`is_pending_pod` and
        the watcher read (:func:`pending_view`): a thousand pending pods cost kilobytes a pod
        less than their full objects."""
        pods: list[JsonDict] = []
        version = ""
        for page, page_version in self._pages(
            "/api/v1/pods", "Pod", "v1", {"fieldSelector": "spec.nodeName="}, trim=True, page_size=min(self._page_size, UNBOUND_PAGE_SIZE)
        ):
            if page is None:
                pods = []
                continue
            pods.extend(pending_view(pod) for pod in page)
            version = version or page_version
        return pods, version

    def watch_unbound_pods(self, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        """Watch pods without a node from ``resource_version`` (see :class:`joiner.ports.PodWatchPort`).
        Opening the stream is retried like any call; a stream that breaks raises
        :class:`KubernetesError` and the caller resumes from the last version it saw."""
        if not resource_version:
            raise ValueError("watch_unbound_pods: resource_version is required (list first)")
        if not 1 <= timeout_seconds <= 3600:
            raise ValueError(f"watch_unbound_pods: timeout_seconds must be 1-3600, got {timeout_seconds}")
        return self._watch("/api/v1/pods", "Pod", "v1", resource_version, timeout_seconds, fieldSelector="spec.nodeName=")

    def plan_input_version(self, resource: str) -> str:
        path, _, _, selector = _plan_input(resource)
        _, page = self._request("GET", path, query={"limit": "1", **selector})
        version = str((page.get("metadata") or {}).get("resourceVersion") or "")
        if not version:
            raise KubernetesError(f"Kubernetes GET {path}: the list has no resourceVersion")
        return version

    def watch_plan_inputs(self, resource: str, resource_version: str, timeout_seconds: int) -> Iterator[WatchEvent]:
        path, kind, api_version, selector = _plan_input(resource)
        if not resource_version:
            raise ValueError("watch_plan_inputs: resource_version is required")
        if not 1 <= timeout_seconds <= 3600:
            raise ValueError(f"watch_plan_inputs: timeout_seconds must be 1-3600, got {timeout_seconds}")
        return self._watch(path, kind, api_version, resource_version, timeout_seconds, **selector)

    def _watch(self, path: str, kind: str, api_version: str, resource_version: str, timeout_seconds: int, **query: str) -> Iterator[WatchEvent]:
        import urllib3
        from urllib3.exceptions import HTTPError

        params = dict(query, watch="true", resourceVersion=resource_version, timeoutSeconds=str(timeout_seconds), allowWatchBookmarks="true")
        url = f"{self._host}{path}?{urlencode(params)}"
        timeout = urllib3.Timeout(connect=self._urllib3_timeout.connect_timeout, read=timeout_seconds + 30)
        refreshed_token = False
        attempt = 0
        while True:
            attempt += 1
            headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
            authorization = self._authorization()
            if authorization:
                headers["Authorization"] = authorization
            try:
                response = self._pool.request("GET", url, headers=headers, timeout=timeout, retries=False, redirect=False, preload_content=False)
            except (HTTPError, OSError) as error:
                if attempt >= self._max_attempts:
                    raise KubernetesError(f"Kubernetes watch {path} failed after {attempt} attempts: {error}") from error
                self._backoff(attempt, None)
                continue
            if response.status == 200:
                break
            raw = response.read()
            response.release_conn()
            if response.status == 410:
                raise WatchExpired(f"Kubernetes watch {path} from {resource_version}: {_excerpt(raw)}")
            if response.status == 401 and self._invalidate is not None and not refreshed_token:
                refreshed_token = True
                self._invalidate()
                attempt -= 1
                continue
            if response.status in RETRYABLE_STATUSES and attempt < self._max_attempts:
                self._backoff(attempt, _seconds(response.headers.get("Retry-After")))
                continue
            raise KubernetesError(f"Kubernetes watch {path} failed: HTTP {response.status}: {_excerpt(raw)}", status=response.status)
        return self._watch_lines(path, kind, api_version, response)

    @staticmethod
    def _watch_lines(path: str, kind: str, api_version: str, response: Any) -> Iterator[WatchEvent]:
        from urllib3.exceptions import HTTPError

        buffer = b""
        try:
            while True:
                try:
                    chunk = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
                except (HTTPError, OSError) as error:
                    raise KubernetesError(f"Kubernetes watch {path}: the stream broke: {error}") from error
                if not chunk:
                    return
                lines, buffer = _take_lines(buffer, chunk, path)
                for line in lines:
                    yield _watch_event(path, kind, api_version, line)
        finally:
            response.release_conn()

    def list_pages(self, resource: str) -> Iterator[tuple[list[JsonDict], str]]:
        path, kind, api_version = _cluster_resource(resource)
        for page, version in self._pages(path, kind, api_version, {}, trim=True, prefetch=True):
            if page is None:
                raise KubernetesError(f"Kubernetes GET {path}: continuation expired while streaming the list", status=410)
            yield page, version

    def changes_since(self, resource: str, resource_version: str, *, idle_seconds: float = CATCH_UP_IDLE_SECONDS) -> Iterator[WatchEvent]:
        """The changes the server has ready after ``resource_version`` (see
        :meth:`joiner.ports.KubernetesPort.changes_since`): a watch whose stream is closed once
        no line arrived for ``idle_seconds`` (the server replays its backlog at once) or after
        :data:`CATCH_UP_MAX_SECONDS`."""
        import urllib3
        from urllib3.exceptions import ProtocolError, ReadTimeoutError

        if not resource_version:
            raise ValueError("changes_since: resource_version is required (list first)")
        path, kind, api_version = _cluster_resource(resource)
        params = {"watch": "true", "resourceVersion": resource_version, "timeoutSeconds": str(CATCH_UP_MAX_SECONDS), "allowWatchBookmarks": "true"}
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        authorization = self._authorization()
        if authorization:
            headers["Authorization"] = authorization
        # The server answers a watch's headers at once, before any event: a slow answer is a
        # loaded server, not an idle stream, so it gets the longer wait.
        timeout = urllib3.Timeout(connect=self._urllib3_timeout.connect_timeout, read=max(idle_seconds, CATCH_UP_HEADERS_SECONDS))
        try:
            response = self._pool.request(
                "GET", f"{self._host}{path}?{urlencode(params)}", headers=headers, timeout=timeout, retries=False, redirect=False, preload_content=False
            )
        except ReadTimeoutError:
            return  # no headers even then: nothing is ready now; the next read catches up
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise KubernetesError(f"Kubernetes watch {path} failed: {error}") from error
        finished = False  # the server ended the stream: the connection may serve another request
        try:
            connection = getattr(response, "connection", None)
            if connection is not None and getattr(connection, "sock", None) is not None:
                connection.sock.settimeout(idle_seconds)  # from here on, silence means caught up
            if response.status == 410:
                raise WatchExpired(f"Kubernetes watch {path} from {resource_version}: {_excerpt(response.read())}")
            if response.status != 200:
                raise KubernetesError(f"Kubernetes watch {path} failed: HTTP {response.status}: {_excerpt(response.read())}", status=response.status)
            buffer = b""
            while True:
                try:
                    chunk = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
                except (ReadTimeoutError, ProtocolError) as error:
                    if isinstance(error, ReadTimeoutError) or "timed out" in str(error):
                        return  # idle: caught up
                    raise KubernetesError(f"Kubernetes watch {path}: the stream broke: {error}") from error
                except OSError as error:
                    raise KubernetesError(f"Kubernetes watch {path}: the stream broke: {error}") from error
                if not chunk:
                    finished = True
                    return
                lines, buffer = _take_lines(buffer, chunk, path)
                for line in lines:
                    yield _watch_event(path, kind, api_version, line, trim=True)
        finally:
            if finished or response.status != 200:
                response.release_conn()
            else:
                # Left mid-stream (idle, a consumer that stopped, an error): the rest of the
                # stream is still on the wire, so the connection must not serve another request.
                response.close()

    def list_pending_pods(self) -> list[JsonDict]:
        return [pod for pod in self.list_pods(field_selector="spec.nodeName=") if is_pending_pod(pod)]

    def list_pods_on_node(self, node_name: str) -> list[JsonDict]:
        if not node_name:
            raise ValueError("list_pods_on_node: node_name is required")
        return self.list_pods(field_selector=f"spec.nodeName={node_name}")

    def list_nodes(self) -> list[JsonDict]:
        return self._list("/api/v1/nodes", "Node", "v1")

    def iter_nodes(self, *, label_selector: str | None = None) -> Iterator[JsonDict]:
        return self._iter("/api/v1/nodes", "Node", "v1", trim=True, labelSelector=label_selector)

    def get_node(self, name: str) -> JsonDict | None:
        node: JsonDict
        status, node = self._request("GET", f"/api/v1/nodes/{_segment(name)}", accept={404})
        if status == 404:
            return None
        node.setdefault("apiVersion", "v1")
        node.setdefault("kind", "Node")
        return node

    def list_events(self) -> list[JsonDict]:
        """Core v1 Events in every namespace (``joiner status``; the functions never read them)."""
        return self._list("/api/v1/events", "Event", "v1")

    def list_daemonsets(self) -> list[JsonDict]:
        return self._list("/apis/apps/v1/daemonsets", "DaemonSet", "apps/v1")

    def list_pdbs(self) -> list[JsonDict]:
        return self._list("/apis/policy/v1/poddisruptionbudgets", "PodDisruptionBudget", "policy/v1")

    def list_volume_objects(self) -> list[JsonDict]:
        """PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes: what volume
        topology and attach limits are planned from."""
        return [
            *self._list("/api/v1/persistentvolumeclaims", "PersistentVolumeClaim", "v1"),
            *self._list("/api/v1/persistentvolumes", "PersistentVolume", "v1"),
            *self._list("/apis/storage.k8s.io/v1/storageclasses", "StorageClass", "storage.k8s.io/v1"),
            *self._list("/apis/storage.k8s.io/v1/csinodes", "CSINode", "storage.k8s.io/v1"),
        ]

    def list_node_pools(self) -> list[JsonDict]:
        """Joiner's NodePools (with ``karpenter``: and Karpenter's, converted, see :meth:`_karpenter_view`)."""
        pools = self._list(NODE_POOLS_PATH, "NodePool", "joiner.dev/v1")
        if not self.karpenter:
            return pools
        classes = self._list(NODE_CLASSES_PATH, "NodeClass", "joiner.dev/v1")
        return list(self._karpenter_view(pools, classes, with_pools=True).node_pools)

    def list_node_classes(self) -> list[JsonDict]:
        """Joiner's NodeClasses (with ``karpenter``: and Karpenter's EC2NodeClasses, converted)."""
        classes = self._list(NODE_CLASSES_PATH, "NodeClass", "joiner.dev/v1")
        if not self.karpenter:
            return classes
        return list(self._karpenter_view([], classes, with_pools=False).node_classes)

    def _karpenter_view(self, pools: list[JsonDict], classes: list[JsonDict], *, with_pools: bool) -> KarpenterView:
        """Karpenter's EC2NodeClasses (and ``with_pools`` its NodePools) read beside Joiner's, each
        one's ``JoinerConverted`` condition written where it changed."""
        from joiner.domain.karpenter import read_karpenter  # its converter loads schemas: only when asked

        karpenter_classes = self._list_karpenter(KARPENTER_NODE_CLASSES_PATH, "EC2NodeClass", "karpenter.k8s.aws/v1")
        karpenter_pools = self._list_karpenter(KARPENTER_NODE_POOLS_PATH, "NodePool", "karpenter.sh/v1") if with_pools else []
        view = read_karpenter(pools, classes, karpenter_pools, karpenter_classes)
        originals = {("EC2NodeClass", str(o["metadata"].get("name"))): o for o in karpenter_classes}
        originals.update({("NodePool", str(o["metadata"].get("name"))): o for o in karpenter_pools})
        written = False
        for outcome in view.outcomes:
            original = originals.get((outcome.kind, outcome.name))
            if original is not None:
                written = self._report_karpenter(outcome, original) or written
        # What is planned with carries the condition just written: a status write computed from
        # it keeps the condition instead of dropping it until the next read.
        return read_karpenter(pools, classes, karpenter_pools, karpenter_classes) if written else view

    def _list_karpenter(self, path: str, kind: str, api_version: str) -> list[JsonDict]:
        """Karpenter's objects; none when their CRD is not installed (404). A refusal (403) is
        an error naming the manifest that grants the reads: planning without pools that exist
        would take their nodes for strays."""
        try:
            code, _ = self._request("GET", path, query={"limit": "1"}, accept={404})
            if code == 404:
                return []
            return self._list(path, kind, api_version)
        except KubernetesError as error:
            if error.status == 403:
                raise KubernetesError(f"{error} (JOINER_KARPENTER_CRDS is on: apply manifests/rbac-karpenter.yaml)", status=403) from None
            raise

    def _report_karpenter(self, outcome: ReadOutcome, original: JsonDict) -> bool:
        """Write ``outcome`` as the object's ``JoinerConverted`` condition when it changed
        (conditional on the version read: a 409 leaves it to the next read), with a Warning
        Event when the object is not read. A status write RBAC refuses is logged: the Event says it.
        True when the condition was written (``original`` then holds it)."""
        from joiner.domain.karpenter import conversion_conditions

        stamp = self._clock.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = conversion_conditions(outcome, original, stamp)
        if conditions is None:
            return False
        meta = original.get("metadata") or {}
        path = KARPENTER_NODE_POOLS_PATH if outcome.kind == "NodePool" else KARPENTER_NODE_CLASSES_PATH
        logger.info(
            "karpenter object read" if outcome.read else "karpenter object not read",
            extra={"kind": outcome.kind, "object": outcome.name, "reason": str(outcome.reason), "detail": outcome.message},
        )
        if not outcome.read:
            try:
                self.create_event(original, str(outcome.reason), outcome.message, "Warning")
            except KubernetesError as error:
                logger.warning("writing an event failed", extra={"object": outcome.name, "error": str(error)})
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": {"conditions": conditions}}
        try:
            code, _ = self._request("PATCH", f"{path}/{_segment(outcome.name)}/status", body=patch, content_type=MERGE_PATCH, accept={404, 409})
        except KubernetesError as error:
            logger.warning("JoinerConverted condition not written", extra={"kind": outcome.kind, "object": outcome.name, "error": str(error)})
            return False
        if code in (404, 409):
            return False
        status = original.get("status")
        original["status"] = {**(status if isinstance(status, dict) else {}), "conditions": conditions}
        return True

    def list_runtime_classes(self) -> list[JsonDict]:
        return self._list("/apis/node.k8s.io/v1/runtimeclasses", "RuntimeClass", "node.k8s.io/v1")

    def list_node_claims(self) -> list[JsonDict]:
        """Joiner's NodeClaim mirrors; an empty list when the NodeClaim CRD is not installed (404)."""
        code, _ = self._request("GET", NODE_CLAIMS_PATH, query={"limit": "1"}, accept={404})
        if code == 404:
            return []
        return self._list(NODE_CLAIMS_PATH, "NodeClaim", "joiner.dev/v1")

    def list_node_overlays(self) -> list[JsonDict]:
        """NodeOverlays (``joiner.dev/v1alpha1``); an empty list when their CRD is not installed (404)."""
        code, _ = self._request("GET", NODE_OVERLAYS_PATH, query={"limit": "1"}, accept={404})
        if code == 404:
            return []
        return self._list(NODE_OVERLAYS_PATH, "NodeOverlay", "joiner.dev/v1alpha1")

    def patch_node_overlay_status(self, name: str, status: JsonDict) -> None:
        """Merge patch on a NodeOverlay's status subresource; one deleted meanwhile is skipped."""
        code, _ = self._request("PATCH", f"{NODE_OVERLAYS_PATH}/{_segment(name)}/status", body={"status": status}, content_type=MERGE_PATCH, accept={404})
        if code == 404:
            logger.info("NodeOverlay is gone; status not written", extra={"nodeoverlay": name})

    def get_node_claim(self, name: str) -> JsonDict | None:
        """One NodeClaim mirror; None when it does not exist or the NodeClaim CRD is not installed (404)."""
        claim: JsonDict
        code, claim = self._request("GET", f"{NODE_CLAIMS_PATH}/{_segment(name)}", accept={404})
        return None if code == 404 else claim

    def create_node_claim(self, obj: JsonDict) -> JsonDict | None:
        """Create a NodeClaim mirror (its status written separately): the object created, None
        if one of that name exists."""
        created: JsonDict
        code, created = self._request("POST", NODE_CLAIMS_PATH, body=obj, accept={409})
        return None if code == 409 else created

    def patch_node_claim(self, name: str, patch: JsonDict, *, status: bool = False) -> bool:
        """JSON merge patch of a NodeClaim mirror (``status``: its status subresource); False if it is gone."""
        path = f"{NODE_CLAIMS_PATH}/{_segment(name)}" + ("/status" if status else "")
        code, _ = self._request("PATCH", path, body=patch, content_type=MERGE_PATCH, accept={404})
        return code != 404

    def delete_node_claim(self, name: str, uid: str | None = None) -> bool:
        """Delete a NodeClaim mirror (only that very object with ``uid``); one already gone is fine."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}} if uid else None
        code, _ = self._request("DELETE", f"{NODE_CLAIMS_PATH}/{_segment(name)}", body=body, accept={404, 409})
        return code != 409

    # ------------------------------------------------ writes

    def patch_node(self, name: str, patch: JsonDict) -> JsonDict:
        """JSON merge patch (labels, annotations, spec.taints as a whole list, spec.unschedulable);
        a ``metadata.resourceVersion`` in the patch makes it conditional (409 -> KubernetesError)."""
        node: JsonDict
        _, node = self._request("PATCH", f"/api/v1/nodes/{_segment(name)}", body=patch, content_type=MERGE_PATCH)
        node.setdefault("apiVersion", "v1")
        node.setdefault("kind", "Node")
        return node

    def set_node_finalizer(self, name: str, finalizer: str, present: bool) -> bool:
        """Add or remove one finalizer of a Node (a strategic merge patch: other finalizers are
        kept whatever was added meanwhile); False when the Node is gone."""
        metadata = {"finalizers": [finalizer]} if present else {"$deleteFromPrimitiveList/finalizers": [finalizer]}
        code, _ = self._request("PATCH", f"/api/v1/nodes/{_segment(name)}", body={"metadata": metadata}, content_type=STRATEGIC_PATCH, accept={404})
        return code != 404

    def delete_node(self, name: str, uid: str | None = None) -> bool:
        """Delete a Node. Idempotent: a node already gone is fine (True).

        With ``uid`` the deletion carries DeleteOptions ``preconditions.uid``: if the Node now
        called ``name`` is another one (private DNS names are reused, so a new instance may
        register under the old name), the API server answers 409 Conflict, nothing is deleted
        and this returns False ("someone else's node")."""
        body: JsonDict | None = None
        if uid:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        status, answer = self._request(
            "DELETE",
            f"/api/v1/nodes/{_segment(name)}",
            body=body,
            accept={404, 409} if uid else {404},
        )
        if status == 409:
            logger.info("node not deleted: its uid changed", extra={"node": name, "uid": uid, "answer": _status_message(answer)})
            return False
        return True

    def evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> EvictionOutcome:
        eviction: JsonDict = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        if grace_seconds is not None:
            eviction["deleteOptions"] = {"gracePeriodSeconds": grace_seconds}
        status, answer = self._request(
            "POST",
            f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}/eviction",
            body=eviction,
            accept={404, 429},
            retry_too_many=False,
        )
        if status == 429:
            return EvictionOutcome("blocked", _status_message(answer))
        if status == 404:
            return EvictionOutcome("gone", _status_message(answer))
        return EvictionOutcome("evicted")

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        """Idempotent: a pod already gone is fine."""
        options: JsonDict = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        self._request("DELETE", f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}", body=options, accept={404})

    def nominate_pod(self, namespace: str, name: str, uid: str, node_name: str) -> bool:
        """Merge patch of the pod's status carrying ``metadata.uid``: a pod re-created under the
        name has another uid, which the API server refuses to change (422 on ``metadata.uid``);
        False when the pod is gone or re-created."""
        if not uid or not node_name:
            raise ValueError("nominate_pod: uid and node_name are required")
        path = f"/api/v1/namespaces/{_segment(namespace)}/pods/{_segment(name)}/status"
        code, answer = self._request(
            "PATCH", path, body={"metadata": {"uid": uid}, "status": {"nominatedNodeName": node_name}}, content_type=MERGE_PATCH, accept={404, 409, 422}
        )
        if code == 422 and "metadata.uid" not in json.dumps(answer):
            raise KubernetesError(f"Kubernetes PATCH {path} failed: HTTP 422: {str(answer.get('message', ''))[:300]}", status=422)
        return code not in (404, 409, 422)

    def create_event(self, involved: JsonDict, reason: str, message: str, event_type: str = "Normal") -> None:
        """A core/v1 Event named ``<object>.<hash of object, reason, type, message>``: the same
        event again is not duplicated, its ``lastTimestamp`` moves instead. Events of
        cluster-scoped objects go to the ``default`` namespace, as kubectl expects."""
        meta = involved.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise ValueError(f"create_event: the involved {involved.get('kind') or 'object'} has no metadata.name")
        if event_type not in ("Normal", "Warning"):
            raise ValueError(f"create_event: event_type must be Normal or Warning, got {event_type!r}")
        namespace = meta.get("namespace") or "default"
        identity = json.dumps([involved.get("kind"), meta.get("namespace") or "", name, meta.get("uid") or "", reason, event_type, message])
        event_name = f"{name[:200].rstrip('.-')}.{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
        now = self._clock.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        reference = {
            key: value
            for key, value in {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": name,
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            }.items()
            if value
        }
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name, "namespace": namespace},
            "involvedObject": reference,
            "reason": reason,
            "message": message[:_EVENT_MESSAGE_LIMIT],
            "type": event_type,
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": EVENT_COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        events_path = f"/api/v1/namespaces/{_segment(namespace)}/events"
        status, _ = self._request("POST", events_path, body=event, accept={409})
        if status == 409:
            self._request("PATCH", f"{events_path}/{_segment(event_name)}", body={"lastTimestamp": now}, content_type=MERGE_PATCH, accept={404})

    def patch_node_pool_status(self, name: str, status: JsonDict) -> None:
        """Merge patch on the status subresource; a NodePool deleted meanwhile is skipped."""
        code, _ = self._request("PATCH", f"{NODE_POOLS_PATH}/{_segment(name)}/status", body={"status": status}, content_type=MERGE_PATCH, accept={404})
        if code == 404 and self.karpenter:  # no Joiner NodePool of that name: Karpenter's, read converted
            code = self._patch_karpenter_status(KARPENTER_NODE_POOLS_PATH, name, status)
        if code == 404:
            logger.info("NodePool is gone; status not written", extra={"nodepool": name})

    def patch_node_class_status(self, name: str, status: JsonDict) -> None:
        """Merge patch on the NodeClass status subresource; a NodeClass deleted meanwhile is skipped."""
        code, _ = self._request("PATCH", f"{NODE_CLASSES_PATH}/{_segment(name)}/status", body={"status": status}, content_type=MERGE_PATCH, accept={404})
        if code == 404 and self.karpenter:  # no Joiner NodeClass of that name: Karpenter's EC2NodeClass, read converted
            code = self._patch_karpenter_status(KARPENTER_NODE_CLASSES_PATH, name, status)
        if code == 404:
            logger.info("NodeClass is gone; status not written", extra={"nodeclass": name})

    def _patch_karpenter_status(self, path: str, name: str, status: JsonDict) -> int:
        """The status Joiner computed for a converted object, on the Karpenter object, with the
        ``JoinerConverted`` condition as it is there (this adapter alone writes that one: a
        status computed from an older read must not take it away). The HTTP status (404: gone)."""
        from joiner.domain.karpenter import CONDITION_TYPE

        # listed by name, not got: rbac-karpenter.yaml grants list only
        found = self._list(path, "", "", fieldSelector=f"metadata.name={name}")
        if not found:
            return 404
        current_status = found[0].get("status")
        ours = [
            c
            for c in (current_status.get("conditions") or [] if isinstance(current_status, dict) else [])
            if isinstance(c, dict) and c.get("type") == CONDITION_TYPE
        ]
        if "conditions" in status:
            status = {**status, "conditions": [*(c for c in status["conditions"] if c.get("type") != CONDITION_TYPE), *ours]}
        code, _ = self._request("PATCH", f"{path}/{_segment(name)}/status", body={"status": status}, content_type=MERGE_PATCH, accept={404})
        return code


def _segment(value: str) -> str:
    if not value:
        raise ValueError("a Kubernetes object name or namespace must not be empty")
    return quote(value, safe="")


def _plan_input(resource: str) -> tuple[str, str, str, dict[str, str]]:
    """Path, kind, apiVersion and query of a watched plan input."""
    if resource == "nodepools":
        return NODE_POOLS_PATH, "NodePool", "joiner.dev/v1", {}
    if resource == "nodeclasses":
        return NODE_CLASSES_PATH, "NodeClass", "joiner.dev/v1", {}
    if resource == "nodes":
        return "/api/v1/nodes", "Node", "v1", {"labelSelector": JOINING_NODES_SELECTOR}
    raise ValueError(f"plan inputs are nodepools, nodeclasses or nodes, not {resource!r}")


def _take_lines(buffer: bytes, chunk: bytes, path: str) -> tuple[list[bytes], bytes]:
    """The whole, non-blank lines a watch stream has sent so far, and the unfinished rest; a
    line past :data:`WATCH_LINE_LIMIT` is an error."""
    buffer += chunk
    if len(buffer) > WATCH_LINE_LIMIT and b"\n" not in buffer:
        raise KubernetesError(f"Kubernetes watch {path}: a line longer than {WATCH_LINE_LIMIT} bytes")
    *lines, rest = buffer.split(b"\n")
    return [line for line in lines if line.strip()], rest


def _cluster_resource(resource: str) -> tuple[str, str, str]:
    """The path, kind and apiVersion of ``pods``, ``nodes`` or ``nodeclaims`` (the resources kept by :mod:`joiner.services.cluster_state`)."""
    if resource == "pods":
        return "/api/v1/pods", "Pod", "v1"
    if resource == "nodes":
        return "/api/v1/nodes", "Node", "v1"
    if resource == "nodeclaims":
        return NODE_CLAIMS_PATH, "NodeClaim", "joiner.dev/v1"
    raise ValueError(f"unknown cluster resource {resource!r} (pods, nodes or nodeclaims)")


def _watch_event(path: str, kind: str, api_version: str, line: bytes, *, trim: bool = False) -> WatchEvent:
    """One watch line; an ``ERROR`` event raises (410: :class:`WatchExpired`)."""
    try:
        event = decode_trimmed(line) if trim else json.loads(line)
    except ValueError:
        raise KubernetesError(f"Kubernetes watch {path}: not JSON: {_excerpt(line)}") from None
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise KubernetesError(f"Kubernetes watch {path}: not a watch event: {_excerpt(line)}")
    kind_of_event, obj = event.get("type"), event["object"]
    if kind_of_event == "ERROR":
        if obj.get("code") == 410:
            raise WatchExpired(f"Kubernetes watch {path}: {obj.get('message') or 'resource version expired'}")
        raise KubernetesError(f"Kubernetes watch {path}: {obj.get('code')}: {obj.get('message')}", status=obj.get("code"))
    if kind_of_event not in WATCH_EVENT_TYPES:
        raise KubernetesError(f"Kubernetes watch {path}: unknown event type {str(kind_of_event)[:40]!r}")
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", kind)
    return WatchEvent(str(kind_of_event), obj)


def _parse(raw: bytes | None, *, trim: bool = False) -> Any:
    if not raw:
        return None
    try:
        return decode_trimmed(raw) if trim else json.loads(raw)
    except ValueError:
        return None


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # HTTP-date form; the API server sends seconds
    return seconds if seconds >= 0 else None


def _status_message(answer: Any) -> str:
    if not isinstance(answer, Mapping):
        return ""
    parts = [answer.get("message") or ""]
    parts += [cause.get("message", "") for cause in (answer.get("details") or {}).get("causes") or []]
    return " ".join(part for part in parts if part)


def _excerpt(raw: bytes | None, limit: int = 300) -> str:
    parsed = _parse(raw)
    if isinstance(parsed, Mapping) and parsed.get("kind") == "Status":
        text = f"{parsed.get('reason', '')}: {_status_message(parsed)}"
    else:
        text = (raw or b"").decode("utf-8", "replace")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
