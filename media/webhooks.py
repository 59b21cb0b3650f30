"""Job webhooks: Standard Webhooks signing and verification, URL safety, delivery.

Signing (https://www.standardwebhooks.com): the signed content is `{webhook-id}.{webhook-timestamp}.{body}`,
HMAC-SHA256 with the base64-decoded part of a `whsec_<base64>` secret, sent as
`webhook-signature: v1,<base64 digest>`. The id is stable across retries (receivers dedupe on it);
the timestamp and signature are fresh on every attempt.

URL safety: a webhook URL is user input that makes the worker open a connection, so it must not
reach loopback, link-local (cloud metadata at 169.254.169.254), private or otherwise non-public
addresses unless JETENCODE_WEBHOOK_ALLOW_PRIVATE says so. The check runs on every resolved address,
and the connection then goes to the address that was checked (not a second DNS answer), so DNS
rebinding between check and connect does not help an attacker. Redirects are never followed.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import hmac
import http.client
import ipaddress
import json
import secrets
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

SECRET_PREFIX = "whsec_"
TIMEOUT_SECONDS = 15.0  # each connect, send and receive
DEADLINE_SECONDS = 30.0  # the whole delivery: connect + send + response (JETENCODE_WEBHOOK_DEADLINE_SECONDS)
DEFAULT_TOLERANCE_SECONDS = 5 * 60
MAX_RESPONSE_BYTES = 4096
USER_AGENT = "JetEncode-Webhooks/1"


class WebhookError(Exception):
    pass


class WebhookVerificationError(WebhookError):
    """A received webhook failed verification (bad signature, stale timestamp, missing header)."""


class UnsafeWebhookURL(WebhookError, ValueError):
    """The URL is not http(s) or resolves to an address webhooks may not reach."""


# --- secrets and signatures -------------------------------------------------------------------


def generate_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_<base64>` secret (the prefix is optional, as in the reference libraries)."""
    if not secret:
        raise WebhookError("webhook secret is empty")
    raw = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    try:
        return base64.b64decode(raw, validate=True)
    except (ValueError, TypeError) as exc:
        raise WebhookError("webhook secret is not whsec_ followed by base64") from exc


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of id.timestamp.body>`."""
    signed = f"{webhook_id}.{int(timestamp)}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_headers(
    secret: str | None, webhook_id: str, body: bytes, timestamp: int | None = None
) -> dict[str, str]:
    timestamp = int(time.time()) if timestamp is None else int(timestamp)
    headers = {"webhook-id": webhook_id, "webhook-timestamp": str(timestamp)}
    if secret:
        headers["webhook-signature"] = sign(secret, webhook_id, timestamp, body)
    return headers


def verify(
    secret: str,
    headers: dict[str, str],
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> None:
    """Raise WebhookVerificationError unless `headers` carry a valid, fresh signature of `body`.

    Header names are matched case-insensitively; the signature header may hold several
    space-separated signatures (key rotation), any valid `v1` one is enough.
    """
    lower = {key.lower(): value for key, value in headers.items()}
    try:
        webhook_id = lower["webhook-id"]
        timestamp_text = lower["webhook-timestamp"]
        signatures = lower["webhook-signature"]
    except KeyError as exc:
        raise WebhookVerificationError(f"missing header {exc.args[0]}") from None
    try:
        timestamp = int(timestamp_text)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not an integer") from None
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance:
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance window")
    expected = sign(secret, webhook_id, timestamp, body).split(",", 1)[1]
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            return
    raise WebhookVerificationError("no matching signature")


# --- payloads ---------------------------------------------------------------------------------


def stable_webhook_id(job_id: str, event: str, manual_retry_count: int = 0) -> str:
    """Deterministic per (job, event, manual retry): retries of one delivery share it, and a manual
    retry of the job (which may notify again, DECISIONS 6) gets a new one."""
    return "msg_" + uuid.uuid5(uuid.NAMESPACE_URL, f"jetencode:{job_id}:{event}:{manual_retry_count}").hex


def task_payload(
    url: str, event: str, job: dict[str, Any], *, manual_retry_count: int = 0, occurred_at: str | None = None
) -> dict[str, Any]:
    """The payload of a `webhook` task, built by the scheduler in the terminal transaction."""
    return {
        "url": url,
        "event": event,
        "job": job,
        "webhook_id": stable_webhook_id(str(job.get("id", "")), event, manual_retry_count),
        "occurred_at": occurred_at or datetime.now(UTC).isoformat(),
    }


def envelope(event: str, job: dict[str, Any], occurred_at: str) -> dict[str, Any]:
    """The Standard Webhooks body shape: {"type", "timestamp", "data"}."""
    return {"type": event, "timestamp": occurred_at, "data": job}


def body_bytes(payload: dict[str, Any]) -> bytes:
    """Compact, key-sorted JSON: the same payload always signs to the same bytes."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True, default=str).encode()


# --- URL safety -------------------------------------------------------------------------------


def allow_private_default() -> bool:
    return bool(getattr(settings, "JETENCODE", {}).get("WEBHOOK_ALLOW_PRIVATE", False))


SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
SITE_LOCAL = ipaddress.ip_network("fec0::/10")


def address_is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address_is_public(address.ipv4_mapped)  # ::ffff:127.0.0.1 is loopback too
        if address in SITE_LOCAL:
            return False  # deprecated site-local: Python 3.11 counts it global
        if address in SIX_TO_FOUR:
            # 6to4 embeds an IPv4 address (2002:7f00:1:: is 127.0.0.1) that relays route to.
            return address.sixtofour is not None and address_is_public(address.sixtofour)
        if address.teredo is not None:
            server, client = address.teredo
            return address_is_public(server) and address_is_public(client)
    return not (
        address.is_loopback
        or address.is_link_local
        or address.is_private
        or address.is_multicast
        or address.is_unspecified
        or address.is_reserved
        or not address.is_global
    )


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # path + query, as sent in the request line
    addresses: tuple[str, ...]  # resolved and checked, in resolver order


# getaddrinfo has no timeout of its own: lookups run on a few threads and are waited for at most
# DNS_TIMEOUT_SECONDS (JETENCODE_WEBHOOK_DNS_TIMEOUT_SECONDS); a lookup still running then counts as
# "does not resolve". With every thread stuck, new lookups wait in the queue and time out the same way.
_RESOLVER = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")


def dns_timeout() -> float:
    return float(getattr(settings, "JETENCODE", {}).get("WEBHOOK_DNS_TIMEOUT_SECONDS", 5.0))


def _lookup(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        return []
    addresses: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        text = sockaddr[0].split("%", 1)[0]  # drop an IPv6 zone id
        if text not in addresses:
            addresses.append(text)
    return addresses


def resolve(host: str, port: int) -> list[str]:
    """The addresses of `host` in resolver order, or [] when it does not resolve within the timeout."""
    future = _RESOLVER.submit(_lookup, host, port)
    try:
        return future.result(timeout=dns_timeout())
    except concurrent.futures.TimeoutError:
        future.cancel()
        return []


def check_url(url: str, *, allow_private: bool | None = None) -> Target:
    """Parse, resolve and check a webhook URL. Raises UnsafeWebhookURL with the reason."""
    allow_private = allow_private_default() if allow_private is None else allow_private
    if not isinstance(url, str) or len(url) > 2048:
        raise UnsafeWebhookURL("webhook URL must be a string of at most 2048 characters")
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):
        raise UnsafeWebhookURL("webhook URL contains whitespace or control characters")
    try:
        # urlsplit itself raises on a bad IPv6 literal ("http://[::1") and on a host whose NFKC
        # form holds a separator (a fullwidth solidus); .port on a port out of range.
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise UnsafeWebhookURL("webhook URL is malformed (its host or port cannot be parsed)") from None
    if scheme not in ("http", "https"):
        raise UnsafeWebhookURL("webhook URL must use http or https")
    if not host:
        raise UnsafeWebhookURL("webhook URL has no host")
    if parts.username or parts.password:
        raise UnsafeWebhookURL("webhook URL must not contain credentials")
    addresses = resolve(host, port)
    # One message whether the name does not resolve (or not in time) or resolves to a non-public
    # address: two would tell a caller which internal names exist. Nor is the address said.
    if not addresses or (
        not allow_private and not all(address_is_public(ipaddress.ip_address(a)) for a in addresses)
    ):
        raise UnsafeWebhookURL(
            f"webhook host {host!r} is not a public address or does not resolve (names that do not resolve "
            "in time, loopback, private, link-local and other non-public targets are refused; "
            "JETENCODE_WEBHOOK_ALLOW_PRIVATE=true allows non-public ones)"
        )
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme, host, port, path, tuple(addresses))


# --- delivery ---------------------------------------------------------------------------------


class DeliveryDeadline(TimeoutError):
    """The delivery as a whole (connect + send + response) took longer than its deadline."""


class _Deadline:
    """A monotonic deadline for one delivery, enforced on its socket.

    A socket timeout bounds one `recv`; a receiver that trickles a byte every few seconds never
    trips it. So when the deadline passes a timer shuts the socket down, which wakes whatever
    `recv`/`send` is blocked on it, and the delivery fails with DeliveryDeadline."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        left = self.ends - time.monotonic()
        if left <= 0:
            self.expired = True
            raise DeliveryDeadline(f"webhook delivery exceeded its deadline of {self.seconds:g}s")
        return left

    def guard(self, sock: socket.socket) -> None:
        """Shut `sock` down when the deadline passes (until `release`)."""
        with self._lock:
            self._sock = sock
            self._timer = threading.Timer(max(0.0, self.ends - time.monotonic()), self._expire)
            self._timer.daemon = True
            self._timer.start()

    def release(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._sock = None

    def _expire(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
            self.expired = True
        if sock is not None:
            try:
                # The plain socket's shutdown (an SSLSocket's own would try a TLS close first).
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to an already-checked address while sending the URL's Host header."""

    def __init__(self, host: str, port: int, address: str, timeout: float, deadline: _Deadline):
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._deadline = deadline

    def _open(self) -> socket.socket:
        timeout = min(self.timeout, self._deadline.remaining())
        sock = socket.create_connection((self._address, self.port), timeout)
        self._deadline.guard(sock)
        return sock

    def connect(self) -> None:
        self.sock = self._open()


class _PinnedHTTPSConnection(_PinnedHTTPConnection, http.client.HTTPSConnection):
    def __init__(
        self, host: str, port: int, address: str, timeout: float, deadline: _Deadline, context: ssl.SSLContext
    ):
        http.client.HTTPSConnection.__init__(self, host, port, timeout=timeout, context=context)
        self._address = address
        self._deadline = deadline
        self._ssl_context = context

    def connect(self) -> None:
        # Certificate and SNI are checked against the URL's host name, not the address; the
        # handshake runs under the deadline's guard too.
        self.sock = self._ssl_context.wrap_socket(self._open(), server_hostname=self.host)


def deadline_default() -> float:
    return float(getattr(settings, "JETENCODE", {}).get("WEBHOOK_DEADLINE_SECONDS") or DEADLINE_SECONDS)


@dataclass(frozen=True)
class Delivery:
    status: int
    body: str  # first MAX_RESPONSE_BYTES of the response, for the stage log
    webhook_id: str
    address: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def send(
    url: str,
    payload: dict[str, Any],
    webhook_id: str,
    *,
    secret: str | None = None,
    timeout: float = TIMEOUT_SECONDS,
    deadline: float | None = None,
    allow_private: bool | None = None,
    timestamp: int | None = None,
) -> Delivery:
    """POST `payload` as signed JSON, once. Returns the Delivery whatever its status; raises
    UnsafeWebhookURL for a refused URL and OSError/http.client errors for network failures
    (DeliveryDeadline, a TimeoutError, when the whole delivery took longer than `deadline`
    seconds, default JETENCODE_WEBHOOK_DEADLINE_SECONDS). `timeout` bounds each socket operation.
    Redirects come back as their 3xx status and are never followed.

    `secret` defaults to JETENCODE_WEBHOOK_SECRET; without one the request carries webhook-id and
    webhook-timestamp but no signature.
    """
    target = check_url(url, allow_private=allow_private)
    if secret is None:
        secret = getattr(settings, "JETENCODE", {}).get("WEBHOOK_SECRET") or None
    body = body_bytes(payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signature_headers(secret, webhook_id, body, timestamp),
    }
    clock = _Deadline(deadline_default() if deadline is None else deadline)
    last_error: Exception | None = None
    for address in target.addresses:
        if target.scheme == "https":
            conn: http.client.HTTPConnection = _PinnedHTTPSConnection(
                target.host, target.port, address, timeout, clock, ssl.create_default_context()
            )
        else:
            conn = _PinnedHTTPConnection(target.host, target.port, address, timeout, clock)
        try:
            conn.request("POST", target.path, body=body, headers=headers)
            response = conn.getresponse()
            text = response.read(MAX_RESPONSE_BYTES).decode("utf-8", "replace")
            if clock.expired:  # the guard cut the response short
                raise DeliveryDeadline(f"webhook delivery exceeded its deadline of {clock.seconds:g}s")
            return Delivery(response.status, text, webhook_id, address)
        except (OSError, http.client.HTTPException) as exc:
            if clock.expired:
                raise DeliveryDeadline(
                    f"webhook delivery exceeded its deadline of {clock.seconds:g}s"
                ) from exc
            # Only connection failures move on to the next address; a response is final.
            last_error = exc
        finally:
            clock.release()
            conn.close()
    assert last_error is not None
    raise last_error
