"""Output storage: where published stage outputs live.

Local (default): JETENCODE_OUTPUT_ROOT/<job id>/<name>. S3-compatible (any endpoint boto3 speaks
to) when JETENCODE_S3_BUCKET is set: s3://<bucket>/<JETENCODE_S3_PREFIX>/<job id>/<name>, which is
what lets workers on different machines share results.

Publication is two-phase so the worker runtime can do the slow part (copying bytes) before its
finish transaction and only the fast, atomic part inside it:
- `prepare(job_id, source, name)` moves or copies the bytes next to their final place under a
  temporary name (local: a hidden file in the job's directory; S3: a `.tmp/` key);
- `commit(prepared)` makes the file appear under its final name atomically (local: rename(2);
  S3: server-side copy, and an S3 object is never visible half-written) and returns its URL;
- `abort(prepared)` removes the temporary copy (a failed or fenced attempt publishes nothing).
`publish()` does both for callers that need no split.
"""

from __future__ import annotations

import mimetypes
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from django.conf import settings

from media.paths import check_output_name, job_output_dir

CONTENT_TYPES = {
    ".m3u8": "application/vnd.apple.mpegurl",
    ".ts": "video/mp2t",
    ".m4s": "video/iso.segment",
    ".mp4": "video/mp4",
    ".jpg": "image/jpeg",
    ".gif": "image/gif",
    ".json": "application/json",
}


def content_type(name: str) -> str:
    suffix = Path(name).suffix.lower()
    return CONTENT_TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"


def read_range(path: Path, start: int, length: int, chunk: int = 256 * 1024):
    """The bytes start..start+length-1 of a local file, in chunks (an HTTP Range response's body);
    stops early if the file turns out shorter."""
    with path.open("rb") as handle:
        handle.seek(start)
        while length > 0:
            data = handle.read(min(chunk, length))
            if not data:
                return
            length -= len(data)
            yield data


@dataclass(frozen=True)
class Prepared:
    job_id: str
    name: str
    temp: str  # local path or S3 key of the temporary copy
    size_bytes: int


@dataclass(frozen=True)
class Published:
    name: str
    url: str
    size_bytes: int


class OutputStorage(Protocol):
    def prepare(self, job_id: str, source: Path, name: str, *, move: bool = False) -> Prepared: ...

    def commit(self, prepared: Prepared) -> Published: ...

    def abort(self, prepared: Prepared) -> None: ...

    def publish(self, job_id: str, source: Path, name: str, *, move: bool = False) -> Published: ...

    def url(self, job_id: str, name: str) -> str: ...

    def exists(self, job_id: str, name: str) -> bool: ...

    def delete_job(self, job_id: str) -> None: ...


class _PublishMixin:
    def publish(self, job_id: str, source: Path, name: str, *, move: bool = False) -> Published:
        prepared = self.prepare(job_id, source, name, move=move)
        try:
            return self.commit(prepared)
        except BaseException:
            self.abort(prepared)
            raise


class LocalStorage(_PublishMixin):
    def __init__(self, root: Path | None = None):
        self.root = Path(root).resolve() if root is not None else None

    def job_dir(self, job_id: str) -> Path:
        if self.root is None:
            return job_output_dir(job_id)
        return self.root / str(uuid.UUID(str(job_id)))

    def path(self, job_id: str, name: str) -> Path:
        return self.job_dir(job_id) / check_output_name(name)

    def prepare(self, job_id: str, source: Path, name: str, *, move: bool = False) -> Prepared:
        final = self.path(job_id, name)
        final.parent.mkdir(parents=True, exist_ok=True)
        # Same directory as the final name, so commit is a rename within one filesystem.
        temp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
        source = Path(source)
        if move:
            try:
                os.rename(source, temp)
            except OSError:  # another filesystem: copy, then drop the source
                _copy_durably(source, temp)
                source.unlink()
        else:
            try:
                os.link(source, temp)  # the workspace and output root often share a filesystem
            except OSError:
                _copy_durably(source, temp)
        return Prepared(str(job_id), check_output_name(name), str(temp), temp.stat().st_size)

    def commit(self, prepared: Prepared) -> Published:
        final = self.path(prepared.job_id, prepared.name)
        os.replace(prepared.temp, final)
        _fsync_dir(final.parent)
        return Published(prepared.name, self.url(prepared.job_id, prepared.name), prepared.size_bytes)

    def abort(self, prepared: Prepared) -> None:
        try:
            os.unlink(prepared.temp)
        except FileNotFoundError:
            pass

    def url(self, job_id: str, name: str) -> str:
        return self.path(job_id, name).as_uri()

    def exists(self, job_id: str, name: str) -> bool:
        return self.path(job_id, name).is_file()

    def delete_job(self, job_id: str) -> None:
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)


def _copy_durably(source: Path, dest: Path) -> None:
    with open(source, "rb") as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst, 1024 * 1024)
        dst.flush()
        os.fsync(dst.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class S3Storage(_PublishMixin):
    def __init__(self, bucket: str, *, endpoint_url: str | None = None, prefix: str = "outputs", client=None):
        import boto3

        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client = client or boto3.client("s3", endpoint_url=endpoint_url or None)

    def key(self, job_id: str, name: str) -> str:
        parts = [self.prefix] if self.prefix else []
        return "/".join([*parts, str(uuid.UUID(str(job_id))), check_output_name(name)])

    def prepare(self, job_id: str, source: Path, name: str, *, move: bool = False) -> Prepared:
        temp_key = "/".join(
            ([self.prefix] if self.prefix else [])
            + [".tmp", str(uuid.UUID(str(job_id))), uuid.uuid4().hex, check_output_name(name)]
        )
        size = Path(source).stat().st_size
        self.client.upload_file(
            str(source), self.bucket, temp_key, ExtraArgs={"ContentType": content_type(name)}
        )
        if move:
            Path(source).unlink()
        return Prepared(str(job_id), check_output_name(name), temp_key, size)

    def commit(self, prepared: Prepared) -> Published:
        final_key = self.key(prepared.job_id, prepared.name)
        # Managed copy: server-side, multipart above 5 GB; the final key appears whole or not at all.
        self.client.copy(
            {"Bucket": self.bucket, "Key": prepared.temp},
            self.bucket,
            final_key,
            ExtraArgs={"ContentType": content_type(prepared.name), "MetadataDirective": "REPLACE"},
        )
        self.abort(prepared)
        return Published(prepared.name, self.url(prepared.job_id, prepared.name), prepared.size_bytes)

    def abort(self, prepared: Prepared) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=prepared.temp)

    def url(self, job_id: str, name: str) -> str:
        return f"s3://{self.bucket}/{self.key(job_id, name)}"

    def exists(self, job_id: str, name: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(job_id, name))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def download_url(self, job_id: str, name: str, expires_seconds: int = 3600) -> str:
        """A presigned GET URL, for the dashboard to link an output without proxying it."""
        return self.client.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.bucket, "Key": self.key(job_id, name)},
            ExpiresIn=expires_seconds,
        )

    def delete_job(self, job_id: str) -> None:
        prefix = "/".join(([self.prefix] if self.prefix else []) + [str(uuid.UUID(str(job_id)))]) + "/"
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            objects = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if objects:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects})


def get_storage() -> OutputStorage:
    """The configured output storage (read from settings on each call, so tests can override)."""
    bucket = getattr(settings, "S3_BUCKET", "") or ""
    if bucket:
        return S3Storage(
            bucket,
            endpoint_url=getattr(settings, "S3_ENDPOINT_URL", "") or None,
            prefix=getattr(settings, "S3_PREFIX", "outputs") or "",
        )
    return LocalStorage()
