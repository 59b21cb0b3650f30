"""GET /v2/jobs/{id}/outputs/{name}: a published output over HTTP, for clients on other hosts.

Only outputs the job's current execution published (the `outputs` of the job detail) are served,
found by name in `job_outputs`; the name is checked again (relative, no '..', no hidden component)
and, for local storage, the resolved file must lie inside the job's own output directory.

- Local storage: the bytes, with Content-Type, Content-Length, ETag (size and mtime), Last-Modified,
  `304` for a matching If-None-Match / If-Modified-Since, and one byte range (`206`, or `416` with
  `Content-Range: bytes */size` when it is unsatisfiable) so players can seek and downloads resume.
  A Range header this server does not honour (several ranges, other units, a malformed value) is
  ignored and the whole file is sent, as RFC 9110 allows; numbers too long to be offsets are
  treated as "beyond the end", never parsed into a 500.
- S3: `302` to a presigned GET URL (JETENCODE_S3_PRESIGN_SECONDS). HLS playlists are the exception:
  they are answered here, from the bucket, so their relative references (`720p/index.m3u8`,
  `seg_001.ts`) resolve under this same path rather than under a presigned URL's signature.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.http import http_date, parse_http_date_safe, quote_etag
from ninja import Router

from api.errors import AUTH_ERRORS, detail_response, responses
from media.paths import UnsafePathError, check_output_name, job_output_dir
from media.storage import content_type, read_range
from scheduler import queries
from scheduler.models import JobOutput
from scheduler.repository import JobNotFound

router = Router(tags=["jobs"])

CHUNK = 256 * 1024
PLAYLIST_SUFFIXES = (".m3u8",)
# Offsets longer than this cannot name a byte of any file; they are never handed to int().
MAX_OFFSET_DIGITS = 18
RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
# Shown inline by a browser; anything else is a download (and a stray HTML output cannot run script).
INLINE_TYPES = frozenset(
    {
        "application/json",
        "application/vnd.apple.mpegurl",
        "audio/aac",
        "audio/mp4",
        "audio/mpeg",
        "image/gif",
        "image/jpeg",
        "image/png",
        "image/webp",
        "text/plain",
        "video/iso.segment",
        "video/mp2t",
        "video/mp4",
        "video/webm",
    }
)
UNSATISFIABLE = "unsatisfiable"


def byte_range(header: str, size: int) -> tuple[int, int] | str | None:
    """`Range` → (first, last) inclusive, UNSATISFIABLE, or None (ignore it: send the whole file)."""
    match = RANGE.match(header.strip())
    if not match:
        return None
    first, last = match.groups()
    if first == "" and last == "":
        return None
    # Leading zeros say nothing (000…01 is 1); what is left decides whether it can be an offset.
    first = first and (first.lstrip("0") or "0")
    last = last and (last.lstrip("0") or "0")
    if first == "":  # suffix range: the last N bytes
        if len(last) > MAX_OFFSET_DIGITS:
            return (0, size - 1) if size else UNSATISFIABLE
        length = int(last)
        if length == 0 or size == 0:
            return UNSATISFIABLE
        return max(0, size - length), size - 1
    if len(first) > MAX_OFFSET_DIGITS:
        return UNSATISFIABLE
    start = int(first)
    end = size - 1 if last == "" or len(last) > MAX_OFFSET_DIGITS else min(int(last), size - 1)
    if last != "" and len(last) <= MAX_OFFSET_DIGITS and int(last) < start:
        return None  # syntactically invalid (last < first): ignored, RFC 9110 §14.1.1
    if start >= size:
        return UNSATISFIABLE
    return start, end


def find_output(job_id: UUID, name: str) -> JobOutput:
    job = queries.job_row(job_id)
    if job is None:
        raise JobNotFound("job not found")
    try:
        clean = check_output_name(name)
    except UnsafePathError:
        raise JobNotFound("no such output") from None
    output = JobOutput.objects.filter(job_id=job_id, execution_id=job.execution_id, name=clean).first()
    if output is None:
        raise JobNotFound("no such output")
    return output


def local_file(output: JobOutput) -> Path:
    base = job_output_dir(output.job_id).resolve()
    path = (base / output.name).resolve()
    if not path.is_relative_to(base) or not path.is_file():
        raise JobNotFound("the output's file is gone from the output storage")
    return path


def _common_headers(response: HttpResponse, name: str, kind: str) -> HttpResponse:
    inline = kind in INLINE_TYPES
    response["Content-Type"] = kind if inline else "application/octet-stream"
    filename = Path(name).name.replace('"', "")
    response["Content-Disposition"] = f'{"inline" if inline else "attachment"}; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Cache-Control"] = "private, max-age=300"
    return response


def _not_modified(request: HttpRequest, etag: str, modified: float) -> bool:
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match is not None:
        return etag in [t.strip() for t in if_none_match.split(",")] or if_none_match.strip() == "*"
    since = parse_http_date_safe(request.headers.get("If-Modified-Since") or "")
    return since is not None and int(modified) <= since


def _range_applies(request: HttpRequest, etag: str, modified: float) -> bool:
    """If-Range: honour the range only while the file is the one the client has part of."""
    if_range = request.headers.get("If-Range")
    if if_range is None:
        return True
    if if_range.startswith(('"', 'W/"')):
        return if_range.strip() == etag
    since = parse_http_date_safe(if_range)
    return since is not None and int(modified) == since


def serve_local(request: HttpRequest, output: JobOutput) -> HttpResponse:
    path = local_file(output)
    stat = path.stat()
    size, modified = stat.st_size, stat.st_mtime
    etag = quote_etag(f"{size:x}-{stat.st_mtime_ns:x}")
    kind = content_type(output.name)
    validators = {"ETag": etag, "Last-Modified": http_date(modified), "Accept-Ranges": "bytes"}
    if _not_modified(request, etag, modified):
        response = HttpResponse(status=304)
    else:
        wanted = request.headers.get("Range")
        chosen = byte_range(wanted, size) if wanted and _range_applies(request, etag, modified) else None
        if chosen == UNSATISFIABLE:
            response = detail_response(
                416, f"the range {wanted.strip()[:100]} is not satisfiable: the file has {size} bytes"
            )
            response["Content-Range"] = f"bytes */{size}"
        elif chosen is None:
            response = FileResponse(path.open("rb"))
            response["Content-Length"] = str(size)
        else:
            start, end = chosen
            response = StreamingHttpResponse(read_range(path, start, end - start + 1, CHUNK), status=206)
            response["Content-Range"] = f"bytes {start}-{end}/{size}"
            response["Content-Length"] = str(end - start + 1)
    for header, value in validators.items():
        response[header] = value
    return _common_headers(response, output.name, kind) if response.status_code != 416 else response


def _s3_location(url: str) -> tuple[str, str]:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


def _s3_client():
    import boto3
    from botocore.config import Config

    # Signature V4: the presigned URL carries its own expiry (X-Amz-Expires) and works in every region.
    return boto3.client(
        "s3",
        endpoint_url=getattr(settings, "S3_ENDPOINT_URL", "") or None,
        config=Config(signature_version="s3v4"),
    )


def serve_s3(request: HttpRequest, output: JobOutput) -> HttpResponse:
    bucket, key = _s3_location(output.storage_url)
    client = _s3_client()
    if not output.name.lower().endswith(PLAYLIST_SUFFIXES):
        response = HttpResponse(status=302)
        response["Location"] = client.generate_presigned_url(
            "get_object",
            Params={"Bucket": bucket, "Key": key},
            ExpiresIn=int(getattr(settings, "S3_PRESIGN_SECONDS", 3600)),
        )
        response["Cache-Control"] = "private, no-store"
        return response
    from botocore.exceptions import ClientError

    try:
        obj = client.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            raise JobNotFound("the output's file is gone from the output storage") from None
        raise
    body = obj["Body"].read()
    modified = obj.get("LastModified") or datetime.now(UTC)
    etag = obj.get("ETag") or quote_etag(f"{len(body):x}")
    if _not_modified(request, etag, modified.timestamp()):
        response = HttpResponse(status=304)
    else:
        response = HttpResponse(body)
        response["Content-Length"] = str(len(body))
    response["ETag"] = etag
    response["Last-Modified"] = http_date(modified.timestamp())
    return _common_headers(response, output.name, content_type(output.name))


# The real Content-Type is the file's own (video/mp4, application/vnd.apple.mpegurl...): listed
# first as octet-stream, the binary type client generators understand, then as any type.
BINARY = {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    "*/*": {"schema": {"type": "string", "format": "binary"}},
}
FILE_HEADERS = {
    "Content-Length": {"schema": {"type": "integer"}},
    "ETag": {"schema": {"type": "string"}},
    "Last-Modified": {"schema": {"type": "string"}},
    "Accept-Ranges": {"schema": {"type": "string", "enum": ["bytes"]}},
}
OPENAPI_RESPONSES = {
    200: {"description": "The file", "content": BINARY, "headers": FILE_HEADERS},
    206: {
        "description": "The requested byte range",
        "content": BINARY,
        "headers": {**FILE_HEADERS, "Content-Range": {"schema": {"type": "string"}}},
    },
    302: {
        "description": "An S3 output: the presigned URL to GET it from",
        "headers": {"Location": {"schema": {"type": "string", "format": "uri"}}},
    },
    304: {"description": "Not modified (If-None-Match / If-Modified-Since)"},
    416: {
        "description": "The range starts beyond the end of the file",
        "headers": {"Content-Range": {"schema": {"type": "string"}}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
    },
}


@router.get(
    "/{job_id}/outputs/{path:name}",
    response=responses(*AUTH_ERRORS, 404, 422),
    summary="Download an output",
    openapi_extra={"responses": OPENAPI_RESPONSES},
)
def download_output(request: HttpRequest, job_id: UUID, name: str):
    """The file of output `name` (its `download_url`): the bytes with ranges and validators, or for
    S3 a redirect to a presigned URL. A name may contain `/`, so an HLS master playlist's relative
    references resolve to the job's other outputs under the same path."""
    output = find_output(job_id, name)
    if output.storage_url.startswith("s3://"):
        return serve_s3(request, output)
    return serve_local(request, output)
