"""Blob stores behind :class:`~joiner.ports.BlobPort`: an S3 bucket (deployed) and a directory
(local runs, the benchmarks)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from joiner.ports import BlobError

__all__ = ["DirectoryBlobs", "S3Blobs"]

_ABSENT = frozenset({"NoSuchKey", "404", "NotFound"})


class S3Blobs:
    """Objects under ``prefix`` in ``bucket`` (the bucket encrypts them with its own key)."""

    def __init__(self, client: Any, bucket: str, prefix: str = "") -> None:
        self._client = client
        self._bucket = bucket
        self._prefix = prefix

    def get(self, key: str) -> bytes | None:
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=self._prefix + key)
            return bytes(response["Body"].read())
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code")) in _ABSENT:
                return None
            raise BlobError(f"s3://{self._bucket}/{self._prefix}{key}: {error}") from error
        except BotoCoreError as error:
            raise BlobError(f"s3://{self._bucket}/{self._prefix}{key}: {error}") from error

    def put(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self._bucket, Key=self._prefix + key, Body=data)
        except (ClientError, BotoCoreError) as error:
            raise BlobError(f"s3://{self._bucket}/{self._prefix}{key}: {error}") from error


class DirectoryBlobs:
    """Objects as files in ``root`` (each replaced atomically through a rename)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise BlobError(f"invalid blob key {key!r}")
        return self._root / key

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise BlobError(f"{self._path(key)}: {error}") from error

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as out:
                out.write(data)
            os.replace(out.name, path)
        except OSError as error:
            raise BlobError(f"{path}: {error}") from error
