"""The tus upload routes (api.uploads) in the OpenAPI document, so a reader of /v2/docs or a client
generated from /v2/openapi.json sees that /v2/uploads/ exists and what it answers.

They are plain Django views (the protocol is headers and raw bodies, api.uploads), so ninja does not
describe them; this module does, by hand, from the same constants the views use. A tus client
(tus-js-client, tus-py-client, Uppy) is how they are meant to be called, and the document says so.
schemathesis fuzzes them like every route (tests/api/test_schemathesis.py), tests/api/test_uploads.py
checks every status it receives against this description, and tuspy drives them over a dropped
connection (tests/e2e/test_sources.py).
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from api.uploads import EXTENSIONS, OFFSET_CONTENT_TYPE, TUS_VERSION
from media import uploads

ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
AUTH = [{"TokenAuth": []}]
UPLOAD_ID = {
    "in": "path",
    "name": "upload_id",
    "required": True,
    "schema": {"type": "string", "format": "uuid"},
}
STATUS = {
    400: "Bad Request: a header missing or malformed (named in `detail`)",
    401: "Unauthorized: no valid bearer token",
    403: "Forbidden: the token lacks operate scope",
    404: "Not Found: no such upload of this token's user",
    409: "Conflict: Upload-Offset is not the upload's offset, or the upload is complete",
    410: "Gone: the upload expired",
    412: f"Precondition Failed: `Tus-Resumable: {TUS_VERSION}` is required",
    413: "Request Entity Too Large: beyond JETENCODE_UPLOAD_MAX_BYTES (Tus-Max-Size)",
    415: f"Unsupported Media Type: a PATCH body must be {OFFSET_CONTENT_TYPE}",
    429: "Too Many Requests: too many unfinished uploads for this token (JETENCODE_UPLOAD_MAX_CONCURRENT)",
    460: "Checksum Mismatch: the chunk's Upload-Checksum did not match; nothing of it was kept",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _header(name: str, description: str, *, required: bool = False, **schema: Any) -> dict:
    return {"in": "header", "name": name, "required": required, "description": description, "schema": schema}


TUS_RESUMABLE = _header(
    "Tus-Resumable", "The protocol version", required=True, type="string", enum=[TUS_VERSION]
)


def _headers(*names: str) -> dict:
    described = {
        "Tus-Resumable": "The protocol version",
        "Upload-Offset": "Bytes received so far",
        "Upload-Length": "The upload's size in bytes",
        "Upload-Expires": "When an unfinished upload is removed (RFC 9110 date)",
        "Location": "The upload's URL",
        "Tus-Version": "Protocol versions the server speaks",
        "Tus-Extension": "The extensions it supports",
        "Tus-Max-Size": "The largest upload it accepts, in bytes",
        "Tus-Checksum-Algorithm": "The checksum algorithms of Upload-Checksum",
        "Upload-Metadata": "The metadata given at creation (tus encoding)",
    }
    return {name: {"description": described[name], "schema": {"type": "string"}} for name in names}


def _responses(success: dict[int, dict], *errors: int) -> dict:
    out = {str(code): spec for code, spec in success.items()}
    for code in (*errors, 500, 503):
        out[str(code)] = {"description": STATUS[code], "content": ERROR}
    return out


def _operation(operation_id: str, summary: str, description: str, responses: dict, **extra: Any) -> dict:
    return {
        "operationId": operation_id,
        "summary": summary,
        "description": description,
        "tags": ["uploads"],
        "responses": responses,
        **extra,
    }


def tus_paths() -> dict[str, dict]:
    """The path items of /v2/uploads/ and /v2/uploads/{upload_id}."""
    discovery = _operation(
        "tus_options",
        "What the tus server supports",
        "Sent by tus clients and browsers without credentials.",
        _responses(
            {
                204: {
                    "description": "No Content",
                    "headers": _headers(
                        "Tus-Resumable",
                        "Tus-Version",
                        "Tus-Extension",
                        "Tus-Max-Size",
                        "Tus-Checksum-Algorithm",
                    ),
                }
            }
        ),
        security=[],
    )
    created = {"description": "Created", "headers": _headers("Location", "Upload-Offset", "Upload-Expires")}
    collection = {
        "options": discovery,
        "post": _operation(
            "create_upload",
            "Create an upload (tus creation)",
            f"tus 1.0 with the {EXTENSIONS} extensions: use a tus client. Then PATCH the bytes to the "
            "Location. Once complete, the file is a library asset (GET the upload for its video_id).",
            _responses({201: created}, 400, 401, 403, 412, 413, 429),
            parameters=[
                TUS_RESUMABLE,
                _header(
                    "Upload-Length", "The file's size in bytes", required=True, type="integer", minimum=0
                ),
                _header("Upload-Metadata", "tus metadata; `filename` names the file", type="string"),
            ],
            security=AUTH,
        ),
    }
    offset = {"description": "OK", "headers": _headers("Upload-Offset", "Upload-Length", "Upload-Expires")}
    status = {
        "type": "object",
        "required": ["id", "complete", "offset"],
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "complete": {"type": "boolean"},
            "offset": {"type": "integer"},
            "length": {"type": "integer", "description": "While receiving"},
            "expires_at": {"type": "string", "format": "date-time", "description": "While receiving"},
            "video_id": {"type": ["string", "null"], "format": "uuid", "description": "Once complete"},
            "path": {"type": "string", "description": "Once complete: under the media root"},
            "size": {"type": "integer", "description": "Once complete"},
            "sha256": {"type": "string", "description": "Once complete"},
            "valid": {"type": ["boolean", "null"], "description": "Once complete"},
            "invalid_reason": {"type": "string", "description": "Once complete"},
        },
    }
    resource = {
        "options": {
            **discovery,
            "operationId": "tus_upload_options",
            "responses": {**discovery["responses"], "404": {"description": STATUS[404], "content": ERROR}},
        },
        "head": _operation(
            "upload_offset",
            "The upload's offset (tus)",
            "Where to resume: PATCH from Upload-Offset. Errors have no body (HEAD).",
            {
                "200": offset,
                **{str(code): {"description": STATUS[code]} for code in (401, 403, 404, 410, 412, 500, 503)},
            },
            parameters=[TUS_RESUMABLE],
            security=AUTH,
        ),
        "patch": _operation(
            "append_to_upload",
            "Send bytes from Upload-Offset (tus)",
            "The body is streamed to disk; with Upload-Checksum a mismatching chunk is dropped (460).",
            _responses(
                {204: {"description": "No Content", "headers": _headers("Upload-Offset", "Upload-Expires")}},
                *(400, 401, 403, 404, 409, 410, 412, 413, 415, 460),
            ),
            parameters=[
                TUS_RESUMABLE,
                _header(
                    "Upload-Offset",
                    "The offset this body starts at",
                    required=True,
                    type="integer",
                    minimum=0,
                ),
                _header(
                    "Upload-Checksum",
                    f"`<algorithm> <base64 digest>` of this body ({', '.join(uploads.CHECKSUM_ALGORITHMS)})",
                    type="string",
                ),
            ],
            requestBody={
                "required": True,
                "content": {OFFSET_CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}}},
            },
            security=AUTH,
        ),
        "delete": _operation(
            "terminate_upload",
            "Abandon an unfinished upload (tus termination)",
            "Its bytes are removed. A complete upload is a library asset: 409.",
            _responses({204: {"description": "No Content"}}, 401, 403, 404, 409, 412),
            parameters=[TUS_RESUMABLE],
            security=AUTH,
        ),
        "get": _operation(
            "get_upload",
            "The upload as JSON",
            "Its offset while receiving; once complete, the library asset it became.",
            _responses(
                {200: {"description": "OK", "content": {"application/json": {"schema": status}}}},
                401,
                403,
                404,
            ),
            security=AUTH,
        ),
    }
    for operation in resource.values():  # every operation on an upload names it
        operation["parameters"] = [UPLOAD_ID, *operation.get("parameters", [])]
    # Where api.urls mounts the views, under this deployment's script prefix like every other path.
    placeholder = "00000000-0000-0000-0000-000000000000"
    item = reverse("tus-upload", args=[placeholder]).replace(placeholder, "{upload_id}")
    return {reverse("tus-uploads"): collection, item: resource}


def add_tus_paths(document: dict[str, Any]) -> dict[str, Any]:
    document["paths"].update(tus_paths())
    return document
