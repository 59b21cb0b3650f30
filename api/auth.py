"""Who is calling, and may they do this?

Two ways in, tried in order:

1. `Authorization: Bearer <token>`: an ApiToken. Only SHA-256 digests are stored; the digest of the
   presented token is looked up and compared in constant time. A bearer header that does not name
   a live token is a 401 at once (it never falls back to the session).
2. The Django session cookie (the dashboard's own JavaScript). Unsafe methods must pass Django's
   CSRF check (`X-CSRFToken` header), because a cookie is sent by the browser on its own.

Then authorization, by method: GET/HEAD/OPTIONS need view permission (Viewers, Operators,
superusers); anything else needs `scheduler.operate_queue` (Operators, superusers) *and*, for a
token, a scope that covers it: `operate` covers every method (queue and fleet control, as before),
`fleet` only fleet control (drain, evacuate and undrain a worker: FLEET_OPERATIONS), `read` nothing
but GET. Failing either is a 403 that says which.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from ninja.errors import AuthenticationError, AuthorizationError
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from api.models import ApiToken, hash_token
from scheduler.permissions import can_operate, can_view

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Fleet control: the operations (api.workers' view names) a fleet-scope token may call.
FLEET_OPERATIONS = frozenset({"drain_worker", "evacuate_worker", "undrain_worker"})
MAX_TOKEN_LENGTH = 256
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """`request.auth` on every authenticated operation."""

    user: Any
    via: str  # "token" | "session"
    scope: str  # token scope; "session" callers have whatever their permissions allow
    token_id: int | None = None

    @property
    def username(self) -> str:
        return self.user.get_username()


def authorize(request: HttpRequest, principal: Principal) -> Principal:
    """Raise a 403 unless the principal may use this method. Returns the principal."""
    if request.method in SAFE_METHODS:
        if not can_view(principal.user):
            raise AuthorizationError(
                message="permission denied: viewing needs the Viewers or Operators group"
            )
        return principal
    if principal.via == "token" and principal.scope == "fleet" and not is_fleet_operation(request):
        raise AuthorizationError(
            message="this token has fleet scope: it may only drain, evacuate and undrain workers"
        )
    if principal.via == "token" and principal.scope not in ("operate", "fleet"):
        raise AuthorizationError(message="this token has read scope: changes need a token with operate scope")
    if not can_operate(principal.user):
        raise AuthorizationError(
            message="permission denied: changes need the Operators group (scheduler.operate_queue)"
        )
    return principal


def is_fleet_operation(request: HttpRequest) -> bool:
    """Whether the request is for drain, evacuate or undrain (its view, as Django resolved the URL)."""
    match = getattr(request, "resolver_match", None)
    return match is not None and match.url_name in FLEET_OPERATIONS


class TokenAuth(HttpBearer):
    """`Authorization: Bearer jet_…`."""

    def authenticate(self, request: HttpRequest, token: str) -> Principal:
        if not token or len(token) > MAX_TOKEN_LENGTH:
            raise AuthenticationError(message="invalid API token")
        digest = hash_token(token)
        found = ApiToken.objects.select_related("user").filter(token_hash=digest).first()
        # The lookup is by digest; the constant-time comparison keeps the check itself timing-safe.
        if found is None or not hmac.compare_digest(found.token_hash.encode(), digest.encode()):
            raise AuthenticationError(message="invalid API token")
        if found.revoked:
            raise AuthenticationError(message="this API token has been revoked")
        if not found.user.is_active:
            raise AuthenticationError(message="the token's user is inactive")
        self._touch(found)
        return authorize(request, Principal(found.user, "token", found.scope, found.pk))

    @staticmethod
    def _touch(token: ApiToken) -> None:
        """Record use, at most once a minute per token (one conditional UPDATE, only when due)."""
        now = timezone.now()
        if token.last_used_at is not None and token.last_used_at >= now - LAST_USED_RESOLUTION:
            return
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)


class SessionAuth(APIKeyCookie):
    """The dashboard's session cookie, with CSRF enforced on unsafe methods."""

    param_name = settings.SESSION_COOKIE_NAME

    def __call__(self, request: HttpRequest) -> Principal | None:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None  # no session: the caller gets the 401
        if request.method not in SAFE_METHODS and check_csrf(request) is not None:
            raise AuthorizationError(
                message="CSRF check failed: send the csrftoken cookie's value in an X-CSRFToken header"
            )
        return authorize(request, Principal(user, "session", "session"))

    def authenticate(self, request: HttpRequest, key: str | None) -> Principal | None:  # pragma: no cover
        return None  # __call__ does the work; required by the abstract base


token_auth = TokenAuth()
session_auth = SessionAuth()
AUTH = [token_auth, session_auth]
