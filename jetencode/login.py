"""Login throttling for the dashboard's login page and the admin's.

A user name with LOGIN_FAILURES_PER_USER failed logins in the last LOGIN_WINDOW_SECONDS, or an
address with LOGIN_FAILURES_PER_ADDRESS, is refused (429) until the window has moved on, before
the password is even checked. The admin's user name is fixed ("admin"), so the per-user limit is
what stops guessing its password; the per-address limit stops one client trying many names. A
successful login clears the user's failures. The address is REMOTE_ADDR (behind a proxy, the
proxy's: set the limits per address accordingly, or rely on the per-user limit).
"""

from __future__ import annotations

from datetime import timedelta
from functools import wraps

from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone

from jetencode.models import LoginFailure


def _limits() -> tuple[int, int, float]:
    conf = getattr(settings, "JETENCODE", {})
    return (
        int(conf.get("LOGIN_FAILURES_PER_USER", 10)),
        int(conf.get("LOGIN_FAILURES_PER_ADDRESS", 50)),
        float(conf.get("LOGIN_WINDOW_SECONDS", 900)),
    )


def _address(request) -> str | None:
    return request.META.get("REMOTE_ADDR") or None


def blocked_for(username: str, address: str | None) -> int:
    """Seconds until this user name and address may try again (0: now)."""
    per_user, per_address, window = _limits()
    now = timezone.now()
    recent = LoginFailure.objects.filter(at__gte=now - timedelta(seconds=window))
    checks = [(recent.filter(username=username), per_user)]
    if address is not None:
        checks.append((recent.filter(address=address), per_address))
    wait = 0.0
    for failures, limit in checks:
        if limit <= 0:
            continue
        times = list(failures.order_by("-at").values_list("at", flat=True)[:limit])
        if len(times) >= limit:  # the oldest of the last `limit` failures leaves the window then
            wait = max(wait, (times[-1] + timedelta(seconds=window) - now).total_seconds())
    return int(wait) + 1 if wait > 0 else 0


def record_failure(username: str, address: str | None) -> None:
    _per_user, _per_address, window = _limits()
    LoginFailure.objects.filter(at__lt=timezone.now() - timedelta(seconds=window)).delete()
    LoginFailure.objects.create(username=username, address=address)


def throttled(view):
    """Wrap a login view: refuse a throttled POST with 429; count a failed one (the form comes
    back, 200) and clear the user's failures on success (a redirect)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.method != "POST":
            return view(request, *args, **kwargs)
        username = str(request.POST.get("username", ""))[:150].replace("\x00", "")
        address = _address(request)
        wait = blocked_for(username, address)
        if wait:
            response = HttpResponse(
                f"Too many failed logins for this user name or address: try again in {wait} s.",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
            response["Retry-After"] = str(wait)
            return response
        response = view(request, *args, **kwargs)
        if response.status_code == 200:
            record_failure(username, address)
        elif response.status_code in (301, 302, 303):
            LoginFailure.objects.filter(username=username).delete()
        return response

    return wrapped
