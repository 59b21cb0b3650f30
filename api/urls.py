"""URL patterns of the API, for `path("", include("api.urls"))`.

ninja adds a root view at "" for the API's own prefix; mounted at the site root it would answer
"/", which belongs to the dashboard, so it is left out.
"""

from django.urls import include, path

from api import uploads
from api.api import api

_patterns, _app_name, _namespace = api.urls

urlpatterns = [
    # tus resumable uploads (api.uploads): plain views, the protocol is headers and raw bodies.
    path("v2/uploads/", uploads.collection, name="tus-uploads"),
    path("v2/uploads/<uuid:upload_id>", uploads.resource, name="tus-upload"),
    path(
        "",
        include(
            ([p for p in _patterns if getattr(p, "name", None) != "api-root"], _app_name),
            namespace=_namespace,
        ),
    ),
]
