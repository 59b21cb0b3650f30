"""Resumable uploads (tus 1.0: core, creation, termination, checksum, expiration), minus the HTTP.

api/uploads.py speaks the protocol; this module keeps the bytes and the `Upload` rows.

Where the bytes live: `<media root>/uploads/.<id>.part` while receiving (a hidden name: library
scans skip it), renamed to `uploads/<id><suffix>` only when every byte is there and the checksums
match, then probed and registered as a MediaAsset (directory "uploads").

Why the offset is trusted from the row, not the file: a PATCH first truncates the file to the
recorded offset, so bytes written by a request that died before recording them (a crash, a killed
web process) are dropped, never counted twice. A per-upload `flock` on the part file serialises
requests on one upload across threads and web processes; HEAD waits for it too, so a client that
resumes after a dropped connection is told the offset the dropped request settled on.

Checksums: a PATCH's `Upload-Checksum` (sha1 or sha256, base64) covers that request's bytes; a
mismatch truncates them away (460, nothing kept). Optional metadata `sha256` (hex) covers the whole
file: a mismatch at completion removes the upload altogether.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fcntl
import hashlib
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from media.models import MediaAsset, Upload
from media.paths import media_root, relative_to_media_root
from media.probe import ProbeError, probe

UPLOADS_DIR = "uploads"
CHECKSUM_ALGORITHMS = {"sha1": hashlib.sha1, "sha256": hashlib.sha256}
READ_CHUNK = 256 * 1024
LOCK_WAIT_SECONDS = 15.0
MAX_METADATA_CHARS = 4096
_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")
_METADATA_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


class UploadError(Exception):
    """A request the protocol refuses: `status` and a message naming the header or field."""

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


def limits() -> dict:
    return dict(getattr(settings, "SOURCES", {}))


def max_bytes() -> int:
    return int(limits().get("UPLOAD_MAX_BYTES", 20 * 1024**3))


def uploads_dir() -> Path:
    path = media_root() / UPLOADS_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def part_path(upload_id) -> Path:
    return uploads_dir() / f".{uuid.UUID(str(upload_id))}.part"


# --- header parsing -------------------------------------------------------------------------------


def parse_metadata(header: str | None) -> dict[str, str]:
    """`Upload-Metadata`: comma-separated `key base64value` pairs (the value may be absent)."""
    if not header:
        return {}
    if len(header) > MAX_METADATA_CHARS:
        raise UploadError(400, f"Upload-Metadata is longer than {MAX_METADATA_CHARS} characters")
    found: dict[str, str] = {}
    for pair in header.split(","):
        parts = pair.strip().split(" ")
        if not parts[0] or len(parts) > 2 or not _METADATA_KEY.fullmatch(parts[0]):
            raise UploadError(400, "Upload-Metadata must be comma-separated 'key base64value' pairs")
        try:
            value = base64.b64decode(parts[1], validate=True).decode("utf-8") if len(parts) == 2 else ""
        except (binascii.Error, UnicodeDecodeError):
            raise UploadError(
                400, f"Upload-Metadata value of {parts[0]!r} is not base64 of UTF-8 text"
            ) from None
        if "\x00" in value:
            raise UploadError(400, f"Upload-Metadata value of {parts[0]!r} contains a NUL character")
        found[parts[0]] = value
    return found


def parse_checksum(header: str | None) -> tuple[str, bytes] | None:
    """`Upload-Checksum: <algorithm> <base64 digest>`, or None when absent."""
    if header is None:
        return None
    algorithm, _, encoded = header.strip().partition(" ")
    if algorithm not in CHECKSUM_ALGORITHMS:
        raise UploadError(
            400, f"Upload-Checksum algorithm {algorithm[:20]!r} is not supported; use one of sha1, sha256"
        )
    try:
        digest = base64.b64decode(encoded.strip(), validate=True)
    except binascii.Error:
        raise UploadError(400, "Upload-Checksum digest is not base64") from None
    if len(digest) != CHECKSUM_ALGORITHMS[algorithm]().digest_size:
        raise UploadError(400, f"Upload-Checksum digest has the wrong length for {algorithm}")
    return algorithm, digest


def _filename(metadata: dict[str, str]) -> str:
    name = metadata.get("filename") or metadata.get("name") or ""
    return Path(name.replace("\\", "/")).name[:255]


def _final_name(upload: Upload) -> str:
    suffix = Path(upload.filename).suffix.lower()
    return f"{upload.pk}{suffix if _SAFE_SUFFIX.fullmatch(suffix) else '.media'}"


# --- creation and lookup --------------------------------------------------------------------------


def create(user, token_id: int | None, length: int, metadata: dict[str, str]) -> Upload:
    """A new upload of `length` bytes (checked against the size and per-token limits)."""
    if length == 0:
        raise UploadError(400, "Upload-Length is 0: an empty file is not a video")
    if length > max_bytes():
        raise UploadError(413, f"Upload-Length {length} is larger than the limit of {max_bytes()} bytes")
    wanted = metadata.get("sha256")
    if wanted is not None and not _HEX_SHA256.fullmatch(wanted):
        raise UploadError(400, "Upload-Metadata sha256 must be 64 lowercase hexadecimal digits")
    now = timezone.now()
    with transaction.atomic():
        # One creator at a time per user, so two concurrent POSTs cannot both pass the limit.
        type(user).objects.select_for_update().filter(pk=user.pk).first()
        if token_id is not None:
            active = Upload.objects.filter(
                token_id=token_id, state=Upload.RECEIVING, expires_at__gt=now
            ).count()
            allowed = int(limits().get("UPLOAD_MAX_CONCURRENT", 10))
            if active >= allowed:
                raise UploadError(
                    429,
                    f"this token has {active} uploads in progress, the limit "
                    f"(JETENCODE_UPLOAD_MAX_CONCURRENT={allowed}); finish or DELETE one first",
                )
        upload = Upload.objects.create(
            user=user,
            token_id=token_id,
            length=length,
            metadata=metadata,
            filename=_filename(metadata),
            expires_at=now + expiry(),
        )
    part_path(upload.pk).touch()
    return upload


def expiry() -> timedelta:
    return timedelta(seconds=int(limits().get("UPLOAD_EXPIRE_SECONDS", 24 * 3600)))


def get_for(user, upload_id) -> Upload:
    """The caller's upload; 404 for another user's or an unknown one, 410 when it expired."""
    upload = Upload.objects.filter(pk=upload_id, user=user).first()
    if upload is None:
        raise UploadError(404, f"upload {upload_id} not found")
    if upload.state == Upload.RECEIVING and upload.expires_at <= timezone.now():
        raise UploadError(410, f"upload {upload_id} expired before it was complete")
    return upload


@contextlib.contextmanager
def locked(upload_id, wait: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """Exclusive use of one upload (across threads and processes), waiting up to `wait` seconds."""
    lock_file = uploads_dir() / f".{uuid.UUID(str(upload_id))}.lock"
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        give_up = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > give_up:
                    raise UploadError(409, "another request is writing to this upload; retry") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


# --- receiving bytes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    offset: int  # Upload-Offset
    length: int  # Content-Length
    checksum: tuple[str, bytes] | None
    read: Callable[[int], bytes]  # the request body; returns b"" (or raises OSError) when it ends


def append(upload: Upload, chunk: Chunk) -> Upload:
    """Write one PATCH's bytes. Returns the upload, completed (and registered) when it is whole."""
    if upload.state == Upload.COMPLETE:
        raise UploadError(409, "this upload is complete; nothing more can be appended")
    if chunk.offset != upload.offset:
        raise UploadError(
            409, f"Upload-Offset {chunk.offset} does not match the upload's offset {upload.offset}"
        )
    if upload.offset + chunk.length > upload.length:
        raise UploadError(
            413,
            f"Content-Length {chunk.length} goes past Upload-Length {upload.length} (offset {upload.offset})",
        )
    if not part_path(upload.pk).is_file():
        raise UploadError(410, f"upload {upload.pk}'s bytes are gone (it expired); start a new upload")
    received, digest = _write(part_path(upload.pk), upload.offset, chunk)
    if chunk.checksum is not None:
        algorithm, expected = chunk.checksum
        if received != chunk.length or digest is None or digest.digest() != expected:
            os.truncate(part_path(upload.pk), upload.offset)  # keep nothing of this request
            raise UploadError(460, f"Upload-Checksum ({algorithm}) does not match the bytes received")
    upload.offset += received
    upload.expires_at = timezone.now() + expiry()
    Upload.objects.filter(pk=upload.pk).update(
        offset=upload.offset, expires_at=upload.expires_at, updated_at=timezone.now()
    )
    if upload.offset == upload.length:
        return complete(upload)
    return upload


def _write(path: Path, offset: int, chunk: Chunk):
    """Append the body at `offset` (after dropping anything past it); (bytes kept, hash or None)."""
    digest = CHECKSUM_ALGORITHMS[chunk.checksum[0]]() if chunk.checksum else None
    received = 0
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.ftruncate(fd, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        while received < chunk.length:
            try:
                data = chunk.read(min(READ_CHUNK, chunk.length - received))
            except OSError:
                data = b""  # the client went away: keep what arrived (tus resumes from it)
            if not data:
                break
            os.write(fd, data)
            if digest is not None:
                digest.update(data)
            received += len(data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return received, digest


# --- completion -----------------------------------------------------------------------------------


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def complete(upload: Upload) -> Upload:
    """Every byte is here: check the whole-file sha256, rename, probe, register. Idempotent (a crash
    after the rename is completed by the next request)."""
    final = uploads_dir() / _final_name(upload)
    part = part_path(upload.pk)
    source = part if part.exists() else final
    sha256 = _sha256_of(source)
    wanted = (upload.metadata or {}).get("sha256")
    if wanted and wanted != sha256:
        terminate(upload)
        raise UploadError(
            460, "the file's sha256 does not match Upload-Metadata sha256; the upload was removed"
        )
    if source is part:
        os.replace(part, final)
    rel = relative_to_media_root(final)
    asset = _register(upload, final, rel)
    now = timezone.now()
    Upload.objects.filter(pk=upload.pk).update(
        state=Upload.COMPLETE, sha256=sha256, path=rel, asset=asset, completed_at=now, updated_at=now
    )
    (uploads_dir() / f".{upload.pk}.lock").unlink(missing_ok=True)
    upload.refresh_from_db()
    return upload


def _register(upload: Upload, final: Path, rel: str) -> MediaAsset:
    """The library asset of a finished upload, probed as the validate stage does."""
    fields: dict = {"validated_at": timezone.now(), "size_bytes": final.stat().st_size}
    try:
        info = probe(final)
        if not info.has_video:
            raise ProbeError(final, "no video stream")
        fields.update(info.asset_fields(), valid=True, invalid_reason="")
    except ProbeError as exc:
        fields.update(valid=False, invalid_reason=exc.reason[:1000])
    title = Path(upload.filename).stem if upload.filename else str(upload.pk)
    asset, _ = MediaAsset.objects.get_or_create(path=rel, defaults={"title": title, "directory": UPLOADS_DIR})
    MediaAsset.objects.filter(pk=asset.pk).update(**fields)
    return asset


# --- termination and expiry -----------------------------------------------------------------------


def terminate(upload: Upload) -> None:
    """Remove an upload in progress and its bytes."""
    part_path(upload.pk).unlink(missing_ok=True)
    (uploads_dir() / f".{upload.pk}.lock").unlink(missing_ok=True)
    Upload.objects.filter(pk=upload.pk, state=Upload.RECEIVING).delete()


def expire_abandoned(now=None) -> int:
    """Remove uploads still receiving past their expiry, and part files no row knows (a crash
    between the file and the row). Run by the workers' maintenance loop; safe on every worker."""
    now = now or timezone.now()
    removed = 0
    for upload in Upload.objects.filter(state=Upload.RECEIVING, expires_at__lte=now):
        with contextlib.suppress(UploadError):
            with locked(upload.pk, wait=0):
                terminate(upload)
                removed += 1
    directory = media_root() / UPLOADS_DIR
    if directory.is_dir():
        known = {str(pk) for pk in Upload.objects.filter(state=Upload.RECEIVING).values_list("pk", flat=True)}
        cutoff = time.time() - expiry().total_seconds()
        for path in directory.glob(".*.part"):
            upload_id = path.name[1 : -len(".part")]
            if upload_id not in known and path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                (directory / f".{upload_id}.lock").unlink(missing_ok=True)
                removed += 1
    return removed
