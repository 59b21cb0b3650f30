"""Serving job outputs to logged-in users: only files under OUTPUT_ROOT_DIR/<job id>/.

The name comes from the URL, so it is checked twice: its shape (relative, no '..', no hidden
components) and, after resolving symlinks, that it still lies inside the job's own directory.
Anything else is a 404, never a file from elsewhere. Only media, images and plain data are shown
inline; everything else downloads, and a sandbox CSP keeps a stray HTML output from running script
under the dashboard's origin. Single byte ranges are honoured so <video> can seek.
"""

from __future__ import annotations

import mimetypes
import re
from pathlib import Path

from django.http import FileResponse, Http404, HttpResponse, StreamingHttpResponse

from media.paths import UnsafePathError, check_output_name, job_output_dir
from media.storage import read_range

INLINE_TYPES = {
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/webp",
    "video/mp4",
    "video/webm",
    "video/mp2t",
    "audio/mpeg",
    "audio/mp4",
    "audio/aac",
    "application/json",
    "text/plain",
    "application/vnd.apple.mpegurl",
}
EXTRA_TYPES = {".m3u8": "application/vnd.apple.mpegurl", ".ts": "video/mp2t", ".m4s": "video/iso.segment"}
# ASCII digits only (\d would take "²", which int() refuses), at most 18 of them (a byte offset
# fits in a signed 64-bit integer): a longer number is not a range we can honour, so the header is
# ignored and the whole file is served, as RFC 9110 allows for an invalid Range.
RANGE = re.compile(r"^bytes=([0-9]{0,18})-([0-9]{0,18})$")
CHUNK = 64 * 1024


def resolve_output(job_id, name: str) -> Path:
    """The absolute path of output `name` of job `job_id`, or Http404."""
    try:
        clean = check_output_name(name)
        base = job_output_dir(job_id).resolve()
    except (UnsafePathError, ValueError):
        raise Http404("no such output") from None
    path = (base / clean).resolve()
    if not path.is_relative_to(base) or not path.is_file():
        raise Http404("no such output")
    return path


def _content_type(path: Path) -> str:
    return (
        EXTRA_TYPES.get(path.suffix.lower())
        or mimetypes.guess_type(path.name)[0]
        or "application/octet-stream"
    )


def _ranged(path: Path, header: str, size: int):
    match = RANGE.match(header.strip())
    if not match or (match.group(1) == "" and match.group(2) == ""):
        return None
    if match.group(1) == "":
        start, end = max(0, size - int(match.group(2))), size - 1
    else:
        start = int(match.group(1))
        end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
    if start >= size or start > end:
        response = HttpResponse(status=416)
        response["Content-Range"] = f"bytes */{size}"
        return response

    response = StreamingHttpResponse(read_range(path, start, end - start + 1, CHUNK), status=206)
    response["Content-Range"] = f"bytes {start}-{end}/{size}"
    response["Content-Length"] = str(end - start + 1)
    return response


def serve_output(request, job_id, name: str):
    path = resolve_output(job_id, name)
    content_type = _content_type(path)
    inline = content_type in INLINE_TYPES
    if not inline:
        content_type = "application/octet-stream"
    size = path.stat().st_size
    response = None
    if request.headers.get("Range"):
        response = _ranged(path, request.headers["Range"], size)
    if response is None:
        response = FileResponse(path.open("rb"), as_attachment=not inline, filename=path.name)
    response["Content-Type"] = content_type
    response["Accept-Ranges"] = "bytes"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'; img-src 'self'; media-src 'self'"
    response["Cache-Control"] = "private, max-age=300"
    return response
