from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("jetencode.api.urls")),  # /v2/..., /v1/sysinfo, /healthz, /metrics
]

handler404 = "jetencode.api.errors.handler404"  # JSON 404s under /v1/ and /v2/
