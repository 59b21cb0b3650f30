"""Fetch an `input_url` into the source cache: https:// (http:// when allowed) or s3://bucket/key.

`fetch_source(url, ...)` returns the cached file's path. A broken download is resumed with Range
(several times within one call, and by the next attempt of the stage, from the partial file the
cache keeps); the size is capped by JETENCODE_FETCH_MAX_BYTES and the time by
JETENCODE_FETCH_TIMEOUT_SECONDS. Failures say what happened: `PermanentFetchError` for what a
retry cannot fix (HTTP 4xx such as 404, a refused address, too large), `FetchError` otherwise
(5xx, timeouts, resets), which the queue retries with backoff. URLs appear in messages and logs
only through `guard.redact` (no user info, no query string: presigned credentials stay out).
"""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from django.conf import settings

from media.sources import guard
from media.sources.cache import SourceCache, suffix_of

MAX_REDIRECTS = 5
RESUMES_PER_CALL = 3
SOCKET_TIMEOUT = 30.0
READ_CHUNK = 256 * 1024
USER_AGENT = "JetEncode-Fetch/1"
RETRYABLE_STATUSES = frozenset({408, 425, 429})


class FetchError(RuntimeError):
    """The download failed in a way a later attempt may not (5xx, timeout, reset)."""


class PermanentFetchError(FetchError):
    """The download cannot succeed by retrying (4xx, refused address, larger than the cap)."""


class _Broken(Exception):
    """The transfer stopped midway: resume it with Range."""


@dataclass
class Limits:
    max_bytes: int
    deadline: float  # time.monotonic() by which the whole fetch must be done
    seconds: float

    @classmethod
    def from_settings(cls) -> Limits:
        sources = getattr(settings, "SOURCES", {})
        seconds = float(sources.get("FETCH_TIMEOUT_SECONDS", 3600))
        return cls(int(sources.get("FETCH_MAX_BYTES", 20 * 1024**3)), time.monotonic() + seconds, seconds)

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise FetchError(
                f"the download took longer than JETENCODE_FETCH_TIMEOUT_SECONDS ({self.seconds:g} s)"
            )
        return left

    def check_size(self, size: int, what: str) -> None:
        if size > self.max_bytes:
            raise PermanentFetchError(
                f"{what} is {size} bytes, more than JETENCODE_FETCH_MAX_BYTES ({self.max_bytes})"
            )


@dataclass
class Job:
    """One fetch: where it goes and whom it tells."""

    url: str
    cache: SourceCache
    key: str
    limits: Limits
    progress: Callable[[int, int | None], None]
    check_cancelled: Callable[[], None]
    log: Callable[[str], None]


def fetch_source(
    url: str,
    *,
    progress: Callable[[int, int | None], None] = lambda done, total: None,
    check_cancelled: Callable[[], None] = lambda: None,
    log: Callable[[str], None] = lambda message: None,
    policy: guard.Policy | None = None,
    cache: SourceCache | None = None,
) -> Path:
    """The cached copy of `url` (fetched now unless the cache holds the same bytes)."""
    policy = policy or guard.Policy.from_settings()
    try:
        parts = guard.check_shape(url, allow_http=policy.allow_http)
    except guard.UnsafeSourceURL as exc:
        raise PermanentFetchError(f"input_url {exc}") from None
    cache = cache or SourceCache()
    job = Job(url, cache, SourceCache.key(url), Limits.from_settings(), progress, check_cancelled, log)
    with cache.lock(job.key, check_cancelled):
        for attempt in range(RESUMES_PER_CALL + 1):
            try:
                if parts.scheme == "s3":
                    return _s3_once(job, parts)
                return _http_once(job, policy)
            except _Broken as exc:
                kept = cache.partial(job.key).stat().st_size if cache.partial(job.key).exists() else 0
                if attempt == RESUMES_PER_CALL:
                    raise FetchError(f"the download of {guard.redact(url)} broke off: {exc}") from None
                log(f"download broke off ({exc}); resuming at byte {kept}")
                job.limits.remaining()
    raise AssertionError("unreachable")


def _stream(job: Job, chunks: Iterable[bytes], have: int, total: int | None) -> int:
    """Append `chunks` to the partial file (which holds `have` bytes). Returns the new size."""
    part = job.cache.partial(job.key)
    done = have
    with open(part, "r+b" if part.exists() else "wb") as handle:
        handle.truncate(have)
        handle.seek(have)
        try:
            for data in chunks:
                handle.write(data)
                done += len(data)
                job.limits.check_size(done, "the source")
                job.progress(done, total)
                job.check_cancelled()
                job.limits.remaining()
        except (OSError, http.client.HTTPException) as exc:
            raise _Broken(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
    if total is not None and done < total:
        raise _Broken(f"the connection closed after {done} of {total} bytes")
    return done


# --- https:// and http:// ---------------------------------------------------------------------------


def _open(job: Job, policy: guard.Policy, headers: dict[str, str]):
    """GET the URL, following redirects; every hop's URL and address are checked again."""
    url = job.url
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            parts = guard.check_shape(url, allow_http=policy.allow_http)
            if parts.scheme == "s3":
                raise guard.UnsafeSourceURL("redirects to s3:// are not followed")
            conn = guard.connection(parts, policy, min(SOCKET_TIMEOUT, job.limits.remaining()))
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            conn.request(
                "GET", path, headers={"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
            )
            response = conn.getresponse()
        except guard.UnsafeSourceURL as exc:
            raise PermanentFetchError(f"input_url refused at {guard.redact(url)}: {exc}") from None
        except ssl.SSLCertVerificationError as exc:
            raise PermanentFetchError(
                f"input_url {guard.redact(url)}: the TLS certificate is not trusted ({exc.verify_message})"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise _Broken(f"cannot reach {guard.redact(url)}: {exc or type(exc).__name__}") from None
        location = response.getheader("Location")
        if response.status in (301, 302, 303, 307, 308) and location:
            response.close()
            conn.close()
            url = urljoin(url, location)
            job.log(f"redirected to {guard.redact(url)}")
            continue
        return conn, response, url
    raise PermanentFetchError(f"input_url redirected more than {MAX_REDIRECTS} times")


def _http_headers(job: Job, entry, have: int, kept: dict) -> dict[str, str]:
    headers: dict[str, str] = {}
    if entry is not None and entry.etag:
        headers["If-None-Match"] = entry.etag
    elif entry is not None and entry.last_modified:
        headers["If-Modified-Since"] = entry.last_modified
    validator = kept.get("etag") or kept.get("last_modified")
    if have and validator:
        headers["Range"] = f"bytes={have}-"
        headers["If-Range"] = validator  # the origin sends everything again if the bytes changed
    return headers


def _http_once(job: Job, policy: guard.Policy) -> Path:
    cache = job.cache
    entry = cache.lookup(job.key)
    part = cache.partial(job.key)
    kept = cache.partial_validators(job.key)
    have = part.stat().st_size if part.exists() and kept else 0
    conn, response, final_url = _open(job, policy, _http_headers(job, entry, have, kept))
    try:
        if response.status == 304 and entry is not None:
            job.log(f"{guard.redact(job.url)} unchanged (304): reusing the cached copy")
            return cache.touch(entry)
        if response.status == 416:
            cache.drop_partial(job.key)
            raise _Broken("the origin refused the resume range; starting again")
        _check_status(response, final_url)
        if response.status == 206:
            start = _range_start(response.getheader("Content-Range"))
            if start != have:
                cache.drop_partial(job.key)
                raise _Broken(f"the origin resumed at byte {start}, not {have}; starting again")
            validators = kept
        else:
            have = 0
            validators = {
                "etag": response.getheader("ETag") or "",
                "last_modified": response.getheader("Last-Modified") or "",
            }
        length = response.getheader("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        if total is not None:
            job.limits.check_size(total, "the source")
        cache.save_partial_validators(job.key, validators)
        size = f"{total} bytes" if total is not None else "size unknown"
        job.log(f"downloading {guard.redact(job.url)} ({size}" + (f", from byte {have})" if have else ")"))
        _stream(job, iter(lambda: response.read1(READ_CHUNK), b""), have, total)
        return cache.store(job.key, validators, suffix_of(urlsplit(job.url).path))
    finally:
        response.close()
        conn.close()


def _check_status(response, url: str) -> None:
    status = response.status
    if status in (200, 206):
        return
    message = f"input_url answered HTTP {status} {response.reason} ({guard.redact(url)})"
    if 400 <= status < 500 and status not in RETRYABLE_STATUSES:
        raise PermanentFetchError(message)
    raise FetchError(message)


def _range_start(content_range: str | None) -> int:
    # "bytes 100-199/200"
    try:
        return int((content_range or "").split(" ", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return -1


# --- s3:// ------------------------------------------------------------------------------------------


def _s3_client():
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=getattr(settings, "S3_ENDPOINT_URL", "") or None,
        config=Config(
            connect_timeout=SOCKET_TIMEOUT, read_timeout=SOCKET_TIMEOUT, retries={"max_attempts": 2}
        ),
    )


def _s3_call(call, url: str):
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return call()
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        message = f"input_url {guard.redact(url)}: S3 answered {error.get('Code') or status}"
        if 400 <= status < 500 and status not in RETRYABLE_STATUSES and status != 412:
            raise PermanentFetchError(message) from None
        raise _Broken(message) from None
    except BotoCoreError as exc:
        raise _Broken(f"S3 request failed: {type(exc).__name__}") from None


def _s3_once(job: Job, parts) -> Path:
    client, bucket, key = _s3_client(), parts.netloc, parts.path.lstrip("/")
    head = _s3_call(lambda: client.head_object(Bucket=bucket, Key=key), job.url)
    etag, total = head.get("ETag", ""), int(head.get("ContentLength") or 0)
    job.limits.check_size(total, "the source")
    entry = job.cache.lookup(job.key)
    if entry is not None and etag and entry.etag == etag:
        job.log(f"{guard.redact(job.url)} unchanged (ETag): reusing the cached copy")
        return job.cache.touch(entry)
    part = job.cache.partial(job.key)
    kept = job.cache.partial_validators(job.key)
    have = part.stat().st_size if part.exists() and kept.get("etag") == etag else 0
    request = {"Bucket": bucket, "Key": key, "IfMatch": etag} if etag else {"Bucket": bucket, "Key": key}
    if have:
        request["Range"] = f"bytes={have}-"
    body = _s3_call(lambda: client.get_object(**request), job.url)["Body"]
    validators = {"etag": etag, "last_modified": str(head.get("LastModified") or "")}
    job.cache.save_partial_validators(job.key, validators)
    job.log(f"downloading {guard.redact(job.url)} ({total} bytes" + (f", from byte {have})" if have else ")"))
    try:
        _stream(job, _s3_chunks(body), have, total)
    finally:
        body.close()
    return job.cache.store(job.key, validators, suffix_of(key))


def _s3_chunks(body):
    from botocore.exceptions import BotoCoreError

    try:
        yield from body.iter_chunks(READ_CHUNK)
    except BotoCoreError as exc:
        raise OSError(f"S3 read failed: {type(exc).__name__}") from None
