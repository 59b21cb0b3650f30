"""What every dashboard view shares: who may look, who may act, how an action answers, paging.

Reading needs `can_view` (Viewers, Operators, superusers); acting needs `can_operate`, checked here
on the server for every POST whatever the page rendered. CSRF is Django's middleware: no view in
the dashboard is exempt. An action answers JSON to the page scripts (they send
`Accept: application/json`) and a redirect with a flash message to a plain form post, so every
control also works without JavaScript.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from scheduler.permissions import can_operate, can_view


def role_of(user) -> str:
    if user.is_superuser:
        return "admin"
    if can_operate(user):
        return "operator"
    return "viewer"


def wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def viewer_required(view):
    """Login required (redirect to the login page), then the view permission (403)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not can_view(request.user):
            raise PermissionDenied("You may not view the dashboard.")
        return view(request, *args, **kwargs)

    return login_required(wrapped)


def operator_required(view):
    """POST only, login required, and the operate permission (403 otherwise, JSON for scripts)."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not can_operate(request.user):
            if wants_json(request):
                return JsonResponse(
                    {"detail": "You may not operate the queue (read-only access)."}, status=403
                )
            raise PermissionDenied("You may not operate the queue (read-only access).")
        return view(request, *args, **kwargs)

    return require_POST(login_required(wrapped))


def page(
    request: HttpRequest, template: str, context: dict[str, Any] | None = None, *, status: int = 200
) -> HttpResponse:
    """Render a dashboard page (or its live partial) with what the layout needs."""
    context = dict(context or {})
    context.setdefault("operator", can_operate(request.user))
    context.setdefault("role", role_of(request.user))
    return render(request, template, context, status=status)


def is_partial(request: HttpRequest) -> bool:
    return request.GET.get("partial") == "1"


def safe_next(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.headers.get("Referer") or ""
    if target and url_has_allowed_host_and_scheme(
        target, {request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def answer(
    request: HttpRequest,
    message: str,
    *,
    status: int = 200,
    fallback: str,
    extra: dict[str, Any] | None = None,
) -> HttpResponse:
    """The reply to an action: JSON for the page scripts, else a flash message and a redirect."""
    if wants_json(request):
        return JsonResponse({"detail": message, **(extra or {})}, status=status)
    level = messages.SUCCESS if status < 400 else messages.ERROR
    messages.add_message(request, level, message)
    return redirect(safe_next(request, fallback))


@dataclass
class CheapPage:
    """One page of a queryset without COUNT(*): fetch one row more than the page to know if another follows."""

    items: list
    number: int
    per_page: int
    has_next: bool

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def start_index(self) -> int:
        return (self.number - 1) * self.per_page + 1 if self.items else 0

    @property
    def end_index(self) -> int:
        return (self.number - 1) * self.per_page + len(self.items)


# Pages stop at this offset (OFFSET reads and drops every row before the page): deeper rows are
# reached by the filters. The API has the same bound (api.paging).
MAX_OFFSET = 10_000


def page_number(request: HttpRequest, per_page: int) -> int:
    """The requested page, clamped to 1..the last page before MAX_OFFSET rows."""
    maximum = MAX_OFFSET // max(1, per_page) + 1
    try:
        return max(1, min(int(request.GET.get("page", "1")), maximum))
    except ValueError:
        return 1


def cheap_page(queryset, request: HttpRequest, per_page: int) -> CheapPage:
    return cheap_page_of(lambda limit, offset: list(queryset[offset : offset + limit]), request, per_page)


def cheap_page_of(fetch, request: HttpRequest, per_page: int) -> CheapPage:
    """The same page from `fetch(limit, offset) -> rows` (a named query of scheduler.queries)."""
    number = page_number(request, per_page)
    rows = fetch(per_page + 1, (number - 1) * per_page)
    return CheapPage(rows[:per_page], number, per_page, len(rows) > per_page)
