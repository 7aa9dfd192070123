"""EKS bearer tokens: presigned STS GetCallerIdentity URLs signed with moto's credentials."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from moto import mock_aws

from joiner.adapters.eks_auth import CLUSTER_ID_HEADER, TOKEN_PREFIX, EksTokenProvider, generate_token


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.current = now

    def now(self) -> datetime:
        return self.current


@pytest.fixture
def sts() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("sts", region_name="us-west-2")


def decode(token: str) -> tuple[str, dict[str, list[str]]]:
    assert token.startswith(TOKEN_PREFIX)
    body = token[len(TOKEN_PREFIX) :]
    assert re.fullmatch(r"[A-Za-z0-9_-]+", body), "base64url without padding"
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    return url, parse_qs(urlparse(url).query)


def signing_counter(sts: Any) -> list[dict[str, str]]:
    """Every GetCallerIdentity signature made by this client, with the headers it signed."""
    signed: list[dict[str, str]] = []
    sts.meta.events.register_last("before-sign.sts.GetCallerIdentity", lambda request, **_: signed.append(dict(request.headers)))
    return signed


def test_token_is_a_presigned_get_caller_identity_url(sts: Any) -> None:
    url, query = decode(generate_token(sts, "prod-cluster"))

    parsed = urlparse(url)
    assert (parsed.scheme, parsed.hostname, parsed.path) == ("https", "sts.us-west-2.amazonaws.com", "/")
    assert query["Action"] == ["GetCallerIdentity"] and query["Version"] == ["2011-06-15"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"] and query["X-Amz-Expires"] == ["60"]
    assert query["X-Amz-SignedHeaders"][0].split(";") == ["host", CLUSTER_ID_HEADER]
    assert query["X-Amz-Credential"][0].endswith("/us-west-2/sts/aws4_request")
    assert re.fullmatch(r"[0-9a-f]{64}", query["X-Amz-Signature"][0])
    assert CLUSTER_ID_HEADER not in query  # a signed header, not a query parameter


def test_cluster_name_goes_into_the_signed_header_only_for_tokens(sts: Any) -> None:
    signed = signing_counter(sts)
    generate_token(sts, "prod-cluster")
    generate_token(sts, "prod-cluster")  # handlers are registered once, not twice
    assert sts.get_caller_identity()["Account"] == "123456789012"  # ordinary calls still work, without the header

    assert [headers.get(CLUSTER_ID_HEADER) for headers in signed] == ["prod-cluster", "prod-cluster", None]


def test_provider_refreshes_after_ten_minutes(sts: Any) -> None:
    signed = signing_counter(sts)
    clock = FixedClock(datetime(2025, 1, 1, 8, 0, tzinfo=UTC))
    provider = EksTokenProvider("prod-cluster", sts, clock=clock)

    first = provider.authorization()
    assert first.startswith(f"Bearer {TOKEN_PREFIX}")
    clock.current += timedelta(minutes=9, seconds=59)
    assert provider.authorization() == first and len(signed) == 1
    clock.current += timedelta(seconds=1)
    provider.token()
    assert len(signed) == 2 and provider.signed_at == clock.current
    provider.token()
    assert len(signed) == 2

    provider.invalidate()
    provider.token()
    assert len(signed) == 3


def test_provider_creates_the_sts_client_lazily() -> None:
    created: list[Any] = []

    def factory() -> Any:
        created.append(boto3.client("sts", region_name="us-east-1"))
        return created[-1]

    with mock_aws():
        provider = EksTokenProvider("c", sts_client_factory=factory)
        assert created == []
        decode(provider.token())
        provider.token()
        assert len(created) == 1


def test_provider_rejects_bad_configuration(sts: Any) -> None:
    with pytest.raises(ValueError, match="cluster_name"):
        EksTokenProvider("", sts)
    with pytest.raises(ValueError, match="refresh_after"):
        EksTokenProvider("c", sts, refresh_after=timedelta(minutes=15))
    with pytest.raises(ValueError, match="sts_client"):
        EksTokenProvider("c")
