"""HTTP details django-ninja leaves to the project.

- 405 Method Not Allowed keeps the API's error shape: ninja answers a method a route does not
  accept with Django's bare HttpResponseNotAllowed (text/html, empty body) before any exception
  handler runs; integrators get `{"detail": ...}` everywhere else.
- HEAD is answered on every GET route (`HeadAsGetMiddleware`).
"""

from django.http import JsonResponse

API_PREFIXES = ("/v1/", "/v2/")


class JsonMethodNotAllowedMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code == 405
            and request.path.startswith(API_PREFIXES)
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            allowed = response.get("Allow", "")
            replacement = JsonResponse(
                {
                    "detail": f"method {request.method} is not allowed on {request.path}; allowed: {allowed or 'none'}"
                },
                status=405,
            )
            if allowed:
                replacement["Allow"] = allowed
            return replacement
        return response


class HeadAsGetMiddleware:
    """HEAD on every GET route: the GET view runs and the body is dropped, every header kept.

    django-ninja routes by method and has no HEAD operations, so without this HEAD is a 405 on
    /v2/jobs, an output, /healthz and /metrics. RFC 9110 §9.3.2: HEAD is GET without content, so
    the GET runs as it is (authentication, validators and ranges included). A file is opened and
    closed again without a byte read; Content-Length is what the GET would send.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if getattr(request, "_head_as_get", False):
            request.method = "HEAD"
            return without_body(response)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        # A view that speaks HEAD itself (tus uploads: HEAD reports the offset) is left alone.
        if request.method == "HEAD" and not getattr(view_func, "answers_head", False):
            request.method = "GET"
            request._head_as_get = True
        return None


def without_body(response):
    if response.streaming:
        # FileResponse registered the file's close() as a resource closer: closing the response
        # (the handler does) closes it. Content-Length was set from the file's size.
        response.streaming_content = []
        return response
    length = response.get("Content-Length") or str(len(response.content))
    response.content = b""
    response["Content-Length"] = length
    return response
