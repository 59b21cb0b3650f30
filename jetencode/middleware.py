"""Refuse NUL bytes in the URL of a dashboard, admin or login request with a 400.

PostgreSQL text cannot hold NUL, so a filter like `?worker=%00` or a path like `workers/%00`
reached the database and came back as a 500. The API validates its own parameters (a 422 naming
the field), so it is left to do so; every other page is answered here, before any view runs.
"""

from __future__ import annotations

from django.http import HttpResponseBadRequest, JsonResponse

API_PREFIXES = ("/v1/", "/v2/")
MESSAGE = "Bad request: the URL contains a NUL byte (%00)."


class RefuseNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith(API_PREFIXES) and _has_nul(request):
            if "application/json" in request.headers.get("Accept", ""):
                return JsonResponse({"detail": MESSAGE}, status=400)
            return HttpResponseBadRequest(MESSAGE, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def _has_nul(request) -> bool:
    if "\x00" in request.path:
        return True
    return any(
        "\x00" in key or any("\x00" in value for value in values) for key, values in request.GET.lists()
    )
