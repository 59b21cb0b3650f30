"""Every API response goes through one renderer, which applies the viewer filter (media.disclosure)
for callers who do not see everything: viewers, and read-scope tokens whoever holds them. One place,
so a new endpoint cannot forget it (docs/security.md, "What viewers see")."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja.renderers import JSONRenderer

from media.disclosure import for_viewer
from scheduler.permissions import can_operate

# Token scopes whose holders (if their user may operate) see paths, argv and tracebacks.
FULL_VIEW_SCOPES = frozenset({"operate", "fleet"})


def sees_everything(principal: Any) -> bool:
    """An operator on the session, or an operator's operate/fleet token. Read tokens never do."""
    if principal is None or not hasattr(principal, "user"):
        return False
    if principal.via == "token" and principal.scope not in FULL_VIEW_SCOPES:
        return False
    return can_operate(principal.user)


class DisclosingRenderer(JSONRenderer):
    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> Any:
        if not sees_everything(getattr(request, "auth", None)):
            data = for_viewer(data)
        return super().render(request, data, response_status=response_status)
