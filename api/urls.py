"""URL patterns of the API, for `path("", include("api.urls"))`.

ninja adds a root view at "" for the API's own prefix; mounted at the site root it would answer
"/", which belongs to the dashboard, so it is left out.
"""

from django.urls import include, path

from api.api import api

_patterns, _app_name, _namespace = api.urls

urlpatterns = [
    path(
        "",
        include(
            ([p for p in _patterns if getattr(p, "name", None) != "api-root"], _app_name),
            namespace=_namespace,
        ),
    ),
]
