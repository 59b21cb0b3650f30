"""tus 1.0 at /v2/uploads/: resumable uploads that tus-py-client, tus-js-client and Uppy speak as-is.

Extensions: creation, termination, checksum (sha1, sha256), expiration. Plain Django views rather
than ninja operations: the protocol is headers and raw bodies (a PATCH body is streamed to disk,
never read into memory), with its own status codes (460 for a checksum mismatch).

Auth: `Authorization: Bearer <token>` with operate scope on every method but OPTIONS (which tus
clients and browsers send without credentials to discover the server). An upload belongs to the
token's user; another user gets 404. Errors are `{"detail": ...}` naming the header at fault.
Once complete, `GET` on the upload's URL answers JSON: video_id, path, size, sha256.
"""

from __future__ import annotations

import base64

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from ninja.errors import AuthenticationError, AuthorizationError

from api.auth import Principal, token_auth
from media import uploads
from media.models import Upload

TUS_VERSION = "1.0.0"
EXTENSIONS = "creation,termination,checksum,expiration"
OFFSET_CONTENT_TYPE = "application/offset+octet-stream"


def _tus_headers(response: HttpResponse) -> HttpResponse:
    response["Tus-Resumable"] = TUS_VERSION
    response["Cache-Control"] = "no-store"
    return response


def _error(status: int, detail: str) -> HttpResponse:
    response = JsonResponse({"detail": detail}, status=status)
    if status == 412:
        response["Tus-Version"] = TUS_VERSION
    return _tus_headers(response)


def _principal(request: HttpRequest) -> Principal:
    try:
        principal = token_auth(request)
    except AuthenticationError as exc:
        raise uploads.UploadError(401, exc.message) from None
    except AuthorizationError as exc:
        raise uploads.UploadError(403, exc.message) from None
    if principal is None:
        raise uploads.UploadError(401, "Authorization: Bearer <API token> is required for uploads")
    if principal.scope != "operate":
        raise uploads.UploadError(403, "uploads need a token with operate scope")
    return principal


def _int_header(request: HttpRequest, name: str) -> int:
    value = request.headers.get(name)
    if value is None:
        raise uploads.UploadError(400, f"{name} header is required")
    if not value.isdigit() or len(value) > 19:
        raise uploads.UploadError(400, f"{name} must be a non-negative integer")
    return int(value)


def _check_version(request: HttpRequest) -> None:
    if request.headers.get("Tus-Resumable") != TUS_VERSION:
        raise uploads.UploadError(412, f"Tus-Resumable: {TUS_VERSION} header is required")


def _offsets(response: HttpResponse, upload: Upload) -> HttpResponse:
    response["Upload-Offset"] = str(upload.offset)
    response["Upload-Length"] = str(upload.length)
    if upload.state == Upload.RECEIVING:
        response["Upload-Expires"] = upload.expires_at.strftime("%a, %d %b %Y %H:%M:%S GMT")
    return response


@csrf_exempt
def collection(request: HttpRequest) -> HttpResponse:
    """OPTIONS (discovery) and POST (creation) on /v2/uploads/."""
    try:
        if request.method == "OPTIONS":
            return _options()
        if request.method != "POST":
            response = _error(
                405, f"method {request.method} is not allowed on {request.path}; allowed: OPTIONS, POST"
            )
            response["Allow"] = "OPTIONS, POST"
            return response
        principal = _principal(request)
        _check_version(request)
        if request.headers.get("Upload-Defer-Length"):
            raise uploads.UploadError(400, "Upload-Defer-Length is not supported: send Upload-Length")
        if (
            request.content_type == OFFSET_CONTENT_TYPE
            and (request.headers.get("Content-Length") or "0") != "0"
        ):
            raise uploads.UploadError(
                400, "creation-with-upload is not supported: POST without a body, then PATCH"
            )
        length = _int_header(request, "Upload-Length")
        metadata = uploads.parse_metadata(request.headers.get("Upload-Metadata"))
        upload = uploads.create(principal.user, principal.token_id, length, metadata)
    except uploads.UploadError as exc:
        return _error(exc.status, str(exc))
    response = _offsets(_tus_headers(HttpResponse(status=201)), upload)
    response["Location"] = request.build_absolute_uri(reverse("tus-upload", args=[upload.pk]))
    return response


def _options() -> HttpResponse:
    response = _tus_headers(HttpResponse(status=204))
    response["Tus-Version"] = TUS_VERSION
    response["Tus-Extension"] = EXTENSIONS
    response["Tus-Max-Size"] = str(uploads.max_bytes())
    response["Tus-Checksum-Algorithm"] = ",".join(uploads.CHECKSUM_ALGORITHMS)
    return response


@csrf_exempt
def resource(request: HttpRequest, upload_id) -> HttpResponse:
    """HEAD (offset), PATCH (bytes), DELETE (termination), GET (JSON) on /v2/uploads/<id>."""
    if request.method == "OPTIONS":
        return _options()
    method = request.method
    if method == "POST" and request.headers.get("X-HTTP-Method-Override") in ("PATCH", "DELETE", "HEAD"):
        # tus clients behind proxies that drop PATCH and DELETE send them as POST (the spec's override).
        method = request.headers["X-HTTP-Method-Override"]
    handler = {"HEAD": _head, "PATCH": _patch, "DELETE": _delete, "GET": _get}.get(method)
    if handler is None:
        response = _error(405, f"method {request.method} is not allowed on {request.path}")
        response["Allow"] = "OPTIONS, HEAD, GET, PATCH, DELETE"
        return response
    try:
        principal = _principal(request)
        if method != "GET":
            _check_version(request)
        return handler(request, uploads.get_for(principal.user, upload_id))
    except uploads.UploadError as exc:
        if method == "HEAD":  # no body on HEAD; the status says it
            return _tus_headers(HttpResponse(status=exc.status))
        return _error(exc.status, str(exc))


resource.answers_head = True  # HEAD is tus's offset request, not GET without a body (api.middleware)


def _settled(upload: Upload) -> Upload:
    """The upload once no request is writing to it (and completed, if a crash left it whole)."""
    if upload.state == Upload.COMPLETE:
        return upload
    with uploads.locked(upload.pk):
        upload.refresh_from_db()
        if upload.state == Upload.RECEIVING and upload.offset == upload.length:
            upload = uploads.complete(upload)
    return upload


def _head(request: HttpRequest, upload: Upload) -> HttpResponse:
    upload = _settled(upload)
    response = _offsets(_tus_headers(HttpResponse(status=200)), upload)
    if upload.metadata:
        response["Upload-Metadata"] = _encoded_metadata(upload)
    return response


def _encoded_metadata(upload: Upload) -> str:
    return ",".join(
        f"{key} {base64.b64encode(value.encode()).decode()}" if value else key
        for key, value in (upload.metadata or {}).items()
    )


def _patch(request: HttpRequest, upload: Upload) -> HttpResponse:
    if request.content_type != OFFSET_CONTENT_TYPE:
        raise uploads.UploadError(415, f"Content-Type must be {OFFSET_CONTENT_TYPE}")
    chunk = uploads.Chunk(
        offset=_int_header(request, "Upload-Offset"),
        length=_int_header(request, "Content-Length"),
        checksum=uploads.parse_checksum(request.headers.get("Upload-Checksum")),
        read=request.read,
    )
    with uploads.locked(upload.pk):
        upload.refresh_from_db()
        upload = uploads.append(upload, chunk)
    return _offsets(_tus_headers(HttpResponse(status=204)), upload)


def _delete(request: HttpRequest, upload: Upload) -> HttpResponse:
    if upload.state == Upload.COMPLETE:
        raise uploads.UploadError(
            409, "this upload is complete and its file is library asset " + str(upload.asset_id)
        )
    with uploads.locked(upload.pk):
        uploads.terminate(upload)
    return _tus_headers(HttpResponse(status=204))


def _get(request: HttpRequest, upload: Upload) -> HttpResponse:
    upload = _settled(upload)
    body = {"id": str(upload.pk), "complete": upload.state == Upload.COMPLETE, "offset": upload.offset}
    if upload.state == Upload.COMPLETE:
        asset = upload.asset
        body.update(
            video_id=str(upload.asset_id) if upload.asset_id else None,
            path=upload.path,
            size=upload.length,
            sha256=upload.sha256,
            valid=asset.valid if asset is not None else None,
            invalid_reason=asset.invalid_reason if asset is not None else "",
        )
    else:
        body.update(length=upload.length, expires_at=upload.expires_at.isoformat())
    return _tus_headers(JsonResponse(body))
