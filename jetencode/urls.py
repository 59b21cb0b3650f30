from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import include, path
from django.views.generic import RedirectView

from jetencode.login import throttled

urlpatterns = [
    # Both login forms count failures (jetencode/login.py); these come before the routes they shadow.
    path("admin/login/", throttled(admin.site.login)),
    path("accounts/login/", throttled(LoginView.as_view()), name="login"),
    path("admin/", admin.site.urls),
    path("dashboard/", include("dashboard.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", RedirectView.as_view(pattern_name="dashboard:overview", permanent=False)),
    path("", include("api.urls")),  # /v2/..., /v1/sysinfo, /healthz, /metrics
]

# JSON errors under /v1/, /v2/, /healthz and /metrics, Django's pages elsewhere.
handler400 = "api.errors.handler400"
handler403 = "api.errors.handler403"
handler404 = "api.errors.handler404"
handler500 = "api.errors.handler500"
