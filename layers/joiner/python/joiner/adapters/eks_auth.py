"""Bearer tokens for the EKS API server, the way ``aws eks get-token`` and aws-iam-authenticator
make them: ``k8s-aws-v1.`` + base64url (no padding) of an STS ``GetCallerIdentity`` URL
presigned for 60 seconds with the ``x-k8s-aws-id: <cluster>`` header among the signed headers.

EKS accepts such a token for 15 minutes after it was signed; :class:`EksTokenProvider` signs
a new one after 10 minutes (clock injectable), and at once after :meth:`EksTokenProvider.invalidate`
(the Kubernetes adapter calls it on a 401).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from joiner.clock import SystemClock
from joiner.ports import Clock

__all__ = [
    "CLUSTER_ID_HEADER",
    "TOKEN_PREFIX",
    "URL_EXPIRES_SECONDS",
    "EksTokenProvider",
    "generate_token",
    "presigned_caller_identity_url",
]

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
URL_EXPIRES_SECONDS = 60
TOKEN_LIFETIME = timedelta(minutes=15)
REFRESH_AFTER = timedelta(minutes=10)

_HANDLER_ID = "joiner-eks-cluster-id-header"


def _stash_cluster_id(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    """``provide-client-params``: move our pseudo-parameter out of the API params into the context."""
    if CLUSTER_ID_HEADER in params:
        context[CLUSTER_ID_HEADER] = params.pop(CLUSTER_ID_HEADER)


def _add_cluster_id_header(request: Any, **_: Any) -> None:
    """``before-sign``: add the header so the signer includes it in SignedHeaders."""
    if CLUSTER_ID_HEADER in request.context:
        request.headers[CLUSTER_ID_HEADER] = request.context[CLUSTER_ID_HEADER]


def presigned_caller_identity_url(sts_client: Any, cluster_name: str, expires_in: int = URL_EXPIRES_SECONDS) -> str:
    """A GET URL for ``sts:GetCallerIdentity`` presigned (SigV4, query auth) by ``sts_client``'s
    request signer, with ``x-k8s-aws-id: <cluster_name>`` signed. Registers two event handlers
    on the client (idempotent); they act only on calls that carry the pseudo-parameter."""
    if not cluster_name:
        raise ValueError("presigned_caller_identity_url: cluster_name is required")
    events = sts_client.meta.events
    events.register("provide-client-params.sts.GetCallerIdentity", _stash_cluster_id, unique_id=f"{_HANDLER_ID}-params")
    events.register("before-sign.sts.GetCallerIdentity", _add_cluster_id_header, unique_id=f"{_HANDLER_ID}-sign")
    url: str = sts_client.generate_presigned_url(
        "get_caller_identity",
        Params={CLUSTER_ID_HEADER: cluster_name},
        ExpiresIn=expires_in,
        HttpMethod="GET",
    )
    return url


def generate_token(sts_client: Any, cluster_name: str) -> str:
    """One EKS bearer token for ``cluster_name`` signed with ``sts_client``'s credentials."""
    url = presigned_caller_identity_url(sts_client, cluster_name)
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class EksTokenProvider:
    """Hands out a cached EKS token, signing a new one when the cached one is ``refresh_after`` old.

    Thread-safe; ``sts_client`` is created lazily by ``sts_client_factory`` when not given.
    """

    def __init__(
        self,
        cluster_name: str,
        sts_client: Any = None,
        *,
        clock: Clock | None = None,
        refresh_after: timedelta = REFRESH_AFTER,
        sts_client_factory: Callable[[], Any] | None = None,
    ) -> None:
        if not cluster_name:
            raise ValueError("EksTokenProvider: cluster_name is required")
        if sts_client is None and sts_client_factory is None:
            raise ValueError("EksTokenProvider: give sts_client or sts_client_factory")
        if not timedelta(0) < refresh_after < TOKEN_LIFETIME:
            raise ValueError(f"EksTokenProvider: refresh_after must be between 0 and {TOKEN_LIFETIME}")
        self.cluster_name = cluster_name
        self._sts_client = sts_client
        self._sts_client_factory = sts_client_factory
        self._clock = clock or SystemClock()
        self._refresh_after = refresh_after
        self._lock = threading.Lock()
        self._token: str | None = None
        self._signed_at: datetime | None = None

    def token(self) -> str:
        with self._lock:
            now = self._clock.now()
            if self._token is None or self._signed_at is None or now - self._signed_at >= self._refresh_after or now < self._signed_at:
                if self._sts_client is None:
                    assert self._sts_client_factory is not None
                    self._sts_client = self._sts_client_factory()
                self._token = generate_token(self._sts_client, self.cluster_name)
                self._signed_at = now
            return self._token

    def authorization(self) -> str:
        """The ``Authorization`` header value."""
        return f"Bearer {self.token()}"

    def invalidate(self) -> None:
        """Sign a fresh token on the next call (after the API server answered 401)."""
        with self._lock:
            self._token = None

    @property
    def signed_at(self) -> datetime | None:
        return self._signed_at
