"""HTTP as the personas use it, and a webhook receiver.

- `Api`: a JSON client that sends `Authorization: Bearer <token>` (when it has one): an integrator;
- `Caller`: one role on one transport, a bearer token (with *operate* scope, so only the permission
  stops a viewer) or the session cookie with CSRF enforced, sending the csrftoken cookie's value in
  `X-CSRFToken` on unsafe methods as the dashboard's scripts do;
- `Receiver`: a local HTTP server that records webhook deliveries and answers with chosen statuses.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.test import Client

from api.models import ApiToken
from tests.kit.personas import in_role


class Api:
    """A JSON client that sends `Authorization: Bearer <token>` (when it has one)."""

    def __init__(self, client: Client, token: str | None = None):
        self.client = client
        self.token = token

    def headers(self, extra=None):
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        headers.update(extra or {})
        return headers

    def get(self, path, params=None, headers=None):
        return self.client.get(path, params or {}, headers=self.headers(headers))

    def _send(self, method, path, body, raw, headers):
        data = raw if raw is not None else ("" if body is None else json.dumps(body))
        return getattr(self.client, method)(
            path, data, content_type="application/json", headers=self.headers(headers)
        )

    def post(self, path, body=None, raw=None, headers=None):
        return self._send("post", path, body, raw, headers)

    def patch(self, path, body=None, raw=None, headers=None):
        return self._send("patch", path, body, raw, headers)

    def delete(self, path, headers=None):
        return self.client.delete(path, headers=self.headers(headers))


def issue_token(user, scope: str = "operate") -> str:
    """A new API token of `user`: the raw value, as create_api_token prints it."""
    return ApiToken.issue(user, scope=scope, name="test")[1]


class Caller:
    """One role (tests/kit/personas.py) on one transport: `request(method, path, body=None)` → response."""

    def __init__(self, role: str, transport: str):
        self.persona = role
        self.transport = transport
        self.user = in_role(role)
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

    def request(
        self,
        method: str,
        path: str,
        body=None,
        *,
        csrf: bool = True,
        raw: bytes | str | None = None,
        content_type: str = "application/json",
        headers: dict | None = None,
    ):
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


class Receiver:
    """A local HTTP receiver that records requests (path, lower-cased headers, body) and answers with
    `status`, or with each of `statuses` in turn (the last one repeats)."""

    def __init__(self, status=200, location=None, *, statuses=None):
        self.requests = []
        answers = list(statuses or [status])
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(answers.pop(0) if len(answers) > 1 else answers[0])
                if location:
                    self.send_header("Location", location)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
