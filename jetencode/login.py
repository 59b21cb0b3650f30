"""Login throttling for the dashboard's login page and the admin's.

Two limits within LOGIN_WINDOW_SECONDS, checked before the password is:

- per user name *and client*: LOGIN_FAILURES_PER_USER (10) failed logins naming one user from one
  client refuse that client further tries of that name (429). Keyed on the client too, so an
  attacker who fails for `admin` locks himself out, not the admin: the admin still logs in from
  anywhere else. Distributed guessing is bounded by 10 tries per address per window.
- per client: LOGIN_FAILURES_PER_ADDRESS (50, at least the per-user limit) failed logins from one
  client, whatever names they tried, refuse that client (429).

The user name is counted as the form authenticates it: stripped of surrounding white space and
NFKC-normalised (Django's UsernameField), so `' admin'`, `'admin '` and `'ａｄｍｉｎ'` are one
name. Django compares user names case-sensitively, so `'ADMIN'` is another name (it cannot log in
as `admin` either). The client is REMOTE_ADDR, or behind JETENCODE_TRUSTED_PROXIES the first
address in X-Forwarded-For that is not one of them (read from the right, as each proxy appends the
address it saw), so clients behind one load balancer are not one client. A successful login
clears that user's failures from that client. docs/security.md, "Login throttling".
"""

from __future__ import annotations

import ipaddress
import unicodedata
from datetime import timedelta
from functools import wraps

from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone

from jetencode.models import LoginFailure

MAX_USERNAME = 150


def _limits() -> tuple[int, int, float]:
    conf = getattr(settings, "JETENCODE", {})
    return (
        int(conf.get("LOGIN_FAILURES_PER_USER", 10)),
        int(conf.get("LOGIN_FAILURES_PER_ADDRESS", 50)),
        float(conf.get("LOGIN_WINDOW_SECONDS", 900)),
    )


def normalized_username(raw: object) -> str:
    """The user name AuthenticationForm authenticates: stripped, NFKC (django.contrib.auth.forms.UsernameField)."""
    text = str(raw or "").replace("\x00", "").strip()
    return unicodedata.normalize("NFKC", text)[:MAX_USERNAME]


def _networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for entry in getattr(settings, "TRUSTED_PROXIES", []) or []:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            continue  # settings refuse bad entries at start-up; never fail a login over one
    return networks


def _parse(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def client_address(request) -> str | None:
    """REMOTE_ADDR, or behind trusted proxies the nearest X-Forwarded-For address that is not one."""
    remote = _parse(request.META.get("REMOTE_ADDR") or "")
    trusted = _networks()
    if remote is None:
        return None
    if not any(remote in net for net in trusted):
        return str(remote)
    hops = [_parse(part) for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    for hop in reversed(hops):
        if hop is None:
            break  # a forged or garbled entry: stop at the last address a trusted proxy wrote
        if not any(hop in net for net in trusted):
            return str(hop)
    return str(remote)


def _wait(times: list, limit: int, window: float, now) -> float:
    if limit <= 0 or len(times) < limit:
        return 0.0
    return (times[limit - 1] + timedelta(seconds=window) - now).total_seconds()


def blocked_for(username: str, address: str | None) -> int:
    """Seconds until this user name from this client, or this client at all, may try again (0: now)."""
    per_user, per_address, window = _limits()
    now = timezone.now()
    recent = LoginFailure.objects.filter(at__gte=now - timedelta(seconds=window)).order_by("-at")
    pair = recent.filter(username=username, address=address)
    wait = _wait(list(pair.values_list("at", flat=True)[: max(per_user, 0)]), per_user, window, now)
    if address is not None:
        client = recent.filter(address=address).values_list("at", flat=True)[: max(per_address, 0)]
        wait = max(wait, _wait(list(client), per_address, window, now))
    return int(wait) + 1 if wait > 0 else 0


def record_failure(username: str, address: str | None) -> None:
    _per_user, _per_address, window = _limits()
    LoginFailure.objects.filter(at__lt=timezone.now() - timedelta(seconds=window)).delete()
    LoginFailure.objects.create(username=username, address=address)


def _too_many(wait: int) -> HttpResponse:
    response = HttpResponse(
        f"Too many failed logins from this client: try again in {wait} s.",
        status=429,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(wait)
    return response


def throttled(view):
    """Wrap a login view: refuse a throttled POST with 429; count a failed one (the form comes
    back, 200) and clear the user's failures from this client on success (a redirect)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.method != "POST":
            return view(request, *args, **kwargs)
        username = normalized_username(request.POST.get("username", ""))
        address = client_address(request)
        wait = blocked_for(username, address)
        if wait:
            return _too_many(wait)
        response = view(request, *args, **kwargs)
        if response.status_code == 200:
            record_failure(username, address)
        elif response.status_code in (301, 302, 303):
            LoginFailure.objects.filter(username=username, address=address).delete()
        return response

    return wrapped
