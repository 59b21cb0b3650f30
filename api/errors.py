"""Every error the API returns, in one of two shapes (DECISIONS 14):

- 422: `{"detail": "invalid <fields>", "errors": [{"field": ..., "message": ...}]}`, for schema
  violations, malformed JSON, bad job params and refused arguments alike;
- anything else: `{"detail": "..."}`.

`install(api)` replaces django-ninja's default handlers so nothing leaks out as HTML or as
ninja's own `{"detail": [...]}` list, and nothing the client sends turns into a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from media import submission
from scheduler import repository

logger = logging.getLogger("jetencode.api")

API_PREFIXES = ("/v1/", "/v2/")


class ErrorOut(Schema):
    detail: str


class FieldErrorOut(Schema):
    field: str
    message: str


class ValidationErrorOut(Schema):
    detail: str
    errors: list[FieldErrorOut]


def responses(*codes: int) -> dict[int, type[Schema]]:
    """The error part of an operation's `response=` mapping, for OpenAPI and schemathesis: the
    given codes plus the two every operation can return (a bug; the database unavailable)."""
    return {code: ValidationErrorOut if code == 422 else ErrorOut for code in (*codes, *SERVER_ERRORS)}


# Errors every authenticated operation can return.
AUTH_ERRORS = (401, 403)
# Errors any operation can return: 500 (a bug, logged with its traceback), 503 (database down).
SERVER_ERRORS = (500, 503)


def field_name(loc: tuple | list) -> str:
    """ninja's error location → the name a client sent: ("body", "payload", "priority") → "priority"."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie", "form"):
        source, parts = parts[0], parts[1:]
        if source == "body" and parts and parts[0] == "payload":
            parts = parts[1:]
        if not parts:
            return source
    return ".".join(parts) or "body"


def _message(error: dict[str, Any]) -> str:
    if error.get("type") == "missing" and tuple(error.get("loc", ()))[-1:] == ("payload",):
        return "a JSON object body is required"
    message = str(error.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message


def validation_response(errors: list[dict[str, str]]) -> JsonResponse:
    return JsonResponse({"detail": submission.summarize(errors), "errors": errors}, status=422)


def detail_response(status: int, detail: str, **headers: str) -> JsonResponse:
    response = JsonResponse({"detail": detail}, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


# ---- the handlers, one per kind of error --------------------------------------------------------


def schema_violation(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    return validation_response(
        [{"field": field_name(e.get("loc", ())), "message": _message(e)} for e in exc.errors]
    )


def invalid_job(request: HttpRequest, exc: submission.ValidationError) -> HttpResponse:
    return validation_response(exc.errors)


def invalid_argument(request: HttpRequest, exc: repository.InvalidArgument) -> HttpResponse:
    return validation_response([{"field": exc.field, "message": exc.message}])


def not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return detail_response(404, str(exc) or "not found")


def conflict(request: HttpRequest, exc: repository.ActionNotAllowed) -> HttpResponse:
    return detail_response(409, str(exc))


def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400 and str(exc).startswith("Cannot parse request body"):
        # ninja's message for a body that is not JSON: answer in the 422 shape like any bad input.
        return validation_response([{"field": "body", "message": "the request body is not valid JSON"}])
    if isinstance(exc, AuthenticationError):
        message = (
            str(exc)
            if str(exc) != "Unauthorized"
            else "authentication required: send Authorization: Bearer <token>"
        )
        return detail_response(401, message, WWW_Authenticate='Bearer realm="jetencode"')
    return detail_response(exc.status_code, str(exc))


def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return detail_response(403, str(exc) or "permission denied")


def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return detail_response(
        413, f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes"
    )


def database_down(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.error("database unavailable: %s", exc)
    return detail_response(503, "the database is unavailable", Retry_After="5")


def unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("unhandled error in %s %s", request.method, request.path)
    return detail_response(500, "internal server error")


# ninja picks the handler of the nearest class in the exception's MRO, so `Exception` only catches
# what nothing above it names.
HANDLERS: tuple[tuple[type[Exception], Callable[[HttpRequest, Any], HttpResponse]], ...] = (
    (NinjaValidationError, schema_violation),
    (submission.ValidationError, invalid_job),
    (repository.InvalidArgument, invalid_argument),
    (repository.JobNotFound, not_found),
    (Http404, not_found),
    (repository.ActionNotAllowed, conflict),
    (HttpError, http_error),
    (PermissionDenied, forbidden),
    (RequestDataTooBig, too_big),
    (OperationalError, database_down),
    (InterfaceError, database_down),
    (Exception, unexpected),
)


def install(api: NinjaAPI) -> None:
    for exc_class, handler in HANDLERS:
        api.add_exception_handler(exc_class, handler)


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIXES) or request.path.rstrip("/") in ("/healthz", "/metrics")


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Project 404 handler: JSON under the API prefixes (a path parameter with a '/' in it never
    reaches a route), Django's page everywhere else."""
    if _is_api(request):
        return detail_response(404, "not found")
    return defaults.page_not_found(request, exception)


# What Django answers itself, before or outside any API view (a Host header not in ALLOWED_HOSTS,
# a failure in a middleware): the API's JSON shape under its prefixes, Django's pages elsewhere.


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return detail_response(400, "bad request (the Host header is not one this server answers to?)")
    return defaults.bad_request(request, exception)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return detail_response(403, str(exception or "") or "permission denied")
    return defaults.permission_denied(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return detail_response(500, "internal server error")
    return defaults.server_error(request)
