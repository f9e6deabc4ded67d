"""Named objects in a folder or under an ``s3://bucket/prefix``: where a training script's
:class:`~elasticgrid_provider.runtime.Checkpoint` keeps its files, and where ranks on hosts
that share no disk publish their addresses (:mod:`~elasticgrid_provider.object_rendezvous`).

Both stores replace an object whole, so a reader sees the old bytes or the new ones: a folder through
:func:`~elasticgrid_provider.atomic_files.write_atomically`, S3 by one PutObject. S3 takes
boto3's own configuration on the host (an instance profile, ``AWS_ENDPOINT_URL``,
``AWS_REGION``), as iroh-tinker's S3 rendezvous does; boto3 is imported on first use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from elasticgrid_provider.atomic_files import write_atomically

S3_SCHEME = "s3://"


class ObjectStore(Protocol):
    """Named objects: read, replaced whole, listed by prefix, deleted."""

    location: str  # where, for messages: the folder, or the s3:// URI

    def read(self, name: str) -> bytes | None:
        """The object's bytes, or None when there is none."""

    def write(self, name: str, data: bytes) -> None:
        """Replace the object whole."""

    def names(self, prefix: str) -> list[str]:
        """The names of the objects starting with ``prefix``."""

    def delete(self, name: str) -> None:
        """Remove the object (nothing when it is gone already)."""


class FolderStore:
    """Objects as files in a folder (created on the first write)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.location = str(folder)

    def read(self, name: str) -> bytes | None:
        """The file's bytes, or None when there is no such file."""
        path = self.folder / name
        return path.read_bytes() if path.is_file() else None

    def write(self, name: str, data: bytes) -> None:
        """Replace the file atomically (the folder made first)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomically(self.folder / name, data)

    def names(self, prefix: str) -> list[str]:
        """The files starting with ``prefix``."""
        return [path.name for path in self.folder.glob(f"{prefix}*")]

    def delete(self, name: str) -> None:
        """Remove the file, if it is there."""
        (self.folder / name).unlink(missing_ok=True)


class S3Store:
    """Objects under an ``s3://bucket/prefix`` (boto3's configuration on the host)."""

    def __init__(self, uri: str) -> None:
        bucket, _, prefix = uri[len(S3_SCHEME) :].partition("/")
        if not bucket:
            raise ValueError(f"{uri!r} names no bucket (s3://bucket/prefix)")
        self.location = uri
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self._client: Any = None

    @property
    def client(self) -> Any:
        """boto3's S3 client, built on first use."""
        if self._client is None:
            import boto3

            self._client = boto3.client("s3")
        return self._client

    def read(self, name: str) -> bytes | None:
        """The object's bytes, or None when there is no such key."""
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.prefix + name)
        except self.client.exceptions.NoSuchKey:
            return None
        return bytes(answer["Body"].read())

    def write(self, name: str, data: bytes) -> None:
        """One PutObject: the object is replaced whole."""
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=data)

    def names(self, prefix: str) -> list[str]:
        """The keys under the store's prefix starting with ``prefix``, without the store's
        prefix (every page of the listing)."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix
        )
        return [
            item["Key"][len(self.prefix) :] for page in pages for item in page.get("Contents", ())
        ]

    def delete(self, name: str) -> None:
        """DeleteObject (S3 answers the same when the key is gone)."""
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + name)


def object_store(location: str | os.PathLike[str]) -> ObjectStore:
    """The store of ``location``: an ``s3://`` URI, else a folder."""
    text = os.fspath(location)
    if text.startswith(S3_SCHEME):
        return S3Store(text)
    return FolderStore(Path(text).resolve())
