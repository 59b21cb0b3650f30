"""Helpers for the security tests (tests/security): personas on both transports, and fingerprints
of everything a request could change."""

from __future__ import annotations

import json

from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from jetencode.models import ApiToken

PERSONAS = ("anonymous", "viewer", "operator", "admin")
PASSWORD = "a long and unguessable password 42"


def make_user(persona: str) -> User | None:
    if persona == "anonymous":
        return None
    if persona == "admin":
        return User.objects.create_superuser(f"sec-{persona}", f"{persona}@example.com", PASSWORD)
    user = User.objects.create_user(f"sec-{persona}", password=PASSWORD)
    user.groups.add(Group.objects.get(name={"viewer": "Viewers", "operator": "Operators"}[persona]))
    return user


class Caller:
    """One persona on one transport: `request(method, path, body=None)` → response."""

    def __init__(self, persona: str, transport: str):
        self.persona = persona
        self.transport = transport
        self.user = make_user(persona)
        self.client = Client(enforce_csrf_checks=True)
        self.token = None
        if self.user is not None and transport == "token":
            self.token = ApiToken.issue(self.user, scope="operate", name="security")[1]
        if self.user is not None and transport == "session":
            self.client.force_login(self.user)

    def csrf_token(self) -> str:
        if "csrftoken" not in self.client.cookies:
            self.client.get("/accounts/login/")
        return self.client.cookies["csrftoken"].value

    def request(self, method: str, path: str, body=None, *, csrf: bool = True, raw: bytes | str | None = None,
                content_type: str = "application/json", headers: dict | None = None):
        headers = dict(headers or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.transport == "session" and csrf and method.upper() not in ("GET", "HEAD", "OPTIONS"):
            headers["X-CSRFToken"] = self.csrf_token()
        call = getattr(self.client, method.lower())
        if method.upper() in ("GET", "HEAD"):
            return call(path, headers=headers)
        data = raw if raw is not None else ("" if body is None else json.dumps(body))
        return call(path, data, content_type=content_type, headers=headers)

    def __repr__(self) -> str:
        return f"{self.persona}/{self.transport}"


def fingerprint() -> tuple:
    """Everything an API, dashboard or admin request could change, in a comparable form."""
    with connection.cursor() as cursor:
        cursor.execute("""
          SELECT
            (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM (
               SELECT j.id, j.status, j.priority, j.max_attempts, j.webhook_url, j.manual_retry_count,
                      s.priority AS live_priority, s.position, s.paused, s.cancel_requested_at IS NOT NULL AS cancel,
                      s.execution_id, s.assigned_worker_uid
                 FROM jobs j LEFT JOIN job_schedule s ON s.job_id = j.id) x)::text,
            (SELECT count(*) FROM queue_tasks),
            (SELECT coalesce(json_agg(x ORDER BY x.uid), '[]') FROM (
               SELECT uid, lifecycle FROM queue_workers) x)::text,
            (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM (
               SELECT id, revoked, scope FROM api_tokens) x)::text,
            (SELECT count(*) FROM media_assets),
            (SELECT count(*) FROM auth_user)
        """)
        return cursor.fetchone()


def counts() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM queue_tasks)")
        return cursor.fetchone()
