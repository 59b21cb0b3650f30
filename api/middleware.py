"""Keep the API's error shape for the one response django-ninja builds itself: 405 Method Not Allowed.

ninja answers a method a route does not accept with Django's bare HttpResponseNotAllowed (text/html,
empty body) before any exception handler runs; integrators get `{"detail": ...}` everywhere else.
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
