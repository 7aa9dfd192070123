"""The blob stores behind BlobPort: S3 (through boto3 against moto) and a directory."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from joiner.adapters.blobs import DirectoryBlobs, S3Blobs
from joiner.ports import BlobError


@mock_aws
def test_s3_objects_round_trip_and_a_missing_one_is_none() -> None:
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="joiner-image")
    blobs = S3Blobs(client, "joiner-image")
    assert blobs.get("cluster-state/base") is None
    blobs.put("cluster-state/base", b"\x00image")
    assert blobs.get("cluster-state/base") == b"\x00image"
    blobs.put("cluster-state/base", b"newer")
    assert blobs.get("cluster-state/base") == b"newer"


@mock_aws
def test_s3_refusals_and_outages_are_blob_errors() -> None:
    client = boto3.client("s3", region_name="us-east-1")
    blobs = S3Blobs(client, "joiner-image")
    with Stubber(client) as stub:
        stub.add_client_error("get_object", service_error_code="AccessDenied", http_status_code=403)
        stub.add_client_error("put_object", service_error_code="SlowDown", http_status_code=503)
        with pytest.raises(BlobError, match="AccessDenied"):
            blobs.get("cluster-state/base")
        with pytest.raises(BlobError, match="SlowDown"):
            blobs.put("cluster-state/base", b"x")


def test_a_directory_replaces_objects_whole_and_refuses_keys_outside_it(tmp_path: Path) -> None:
    blobs = DirectoryBlobs(tmp_path)
    assert blobs.get("cluster-state/base") is None
    blobs.put("cluster-state/base", b"one")
    blobs.put("cluster-state/base", b"two")
    assert blobs.get("cluster-state/base") == b"two"
    assert [p.name for p in (tmp_path / "cluster-state").iterdir()] == ["base"]  # no temporary left
    for key in ("../escape", "/abs", ""):
        with pytest.raises(BlobError, match="invalid blob key"):
            blobs.put(key, b"x")
