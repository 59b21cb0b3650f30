"""What an `input_url` fetch may connect to: the webhook rule (media.webhooks.address_is_public),
applied on every hop and at connect time.

A host name is resolved once per connection, through `Policy.resolver` (the seam tests use to
play a rebinding DNS server); every answer is checked, the connection goes to a checked address
(never to a second DNS answer), and the address the socket actually reached (`getpeername`) is
checked again before a byte is sent. Redirects are new hops: each target URL is checked the same
way. Loopback, private, link-local, IPv4-mapped and other non-public addresses are refused unless
JETENCODE_FETCH_ALLOW_PRIVATE is on; the configured S3 endpoint (JETENCODE_S3_ENDPOINT_URL) is
trusted, since an operator chose it.
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from django.conf import settings

from media.webhooks import address_is_public

MAX_URL_CHARS = 4096
S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")

Resolver = Callable[[str, int], list[str]]


class UnsafeSourceURL(ValueError):
    """The URL is malformed, of a refused scheme, or reaches an address fetches may not reach."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, in resolver order (IPv6 zone ids dropped)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeSourceURL(unreachable(host)) from exc
    found: list[str] = []
    for *_ignored, sockaddr in infos:
        text = sockaddr[0].split("%", 1)[0]
        if text not in found:
            found.append(text)
    return found


def redact(url: str) -> str:
    """The URL as logs and messages may show it: no user info, no query (presigned URLs carry
    their credentials there), no fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<malformed URL>"
    if parts.scheme == "s3":
        return f"s3://{parts.netloc}{parts.path}"
    return f"{parts.scheme}://{host}{port}{parts.path}" + ("?…" if parts.query else "")


def _trusted_endpoints() -> frozenset[tuple[str, int]]:
    endpoint = getattr(settings, "S3_ENDPOINT_URL", "") or ""
    if not endpoint:
        return frozenset()
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return frozenset({((parts.hostname or "").lower(), port)})


def fetch_allows_http() -> bool:
    return bool(getattr(settings, "SOURCES", {}).get("FETCH_ALLOW_HTTP", False))


@dataclass(frozen=True)
class Policy:
    allow_private: bool = False
    allow_http: bool = False
    trusted: frozenset[tuple[str, int]] = frozenset()
    resolver: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def from_settings(cls, resolver: Resolver | None = None) -> Policy:
        sources = getattr(settings, "SOURCES", {})
        return cls(
            allow_private=bool(sources.get("FETCH_ALLOW_PRIVATE", False)),
            allow_http=fetch_allows_http(),
            trusted=_trusted_endpoints(),
            resolver=resolver or system_resolver,
        )

    def check_address(self, host: str, port: int, address: str) -> None:
        if self.allow_private or (host.lower(), port) in self.trusted:
            return
        if not address_is_public(ipaddress.ip_address(address)):
            # The address itself is not named: it would map internal names for a caller.
            raise UnsafeSourceURL(unreachable(host))

    def resolve(self, host: str, port: int) -> list[str]:
        """The checked addresses of `host` (all of them must pass)."""
        addresses = self.resolver(host, port)
        if not addresses:
            raise UnsafeSourceURL(unreachable(host))
        for address in addresses:
            self.check_address(host, port, address)
        return addresses


def unreachable(host: str) -> str:
    """One message whether `host` does not resolve or resolves to a non-public address (as for
    webhooks, media.webhooks.check_url): two would tell a caller which internal names exist."""
    return (
        f"host {host!r} is not a public address or does not resolve (loopback, private, link-local and "
        "other non-public targets are refused; JETENCODE_FETCH_ALLOW_PRIVATE=true allows them)"
    )


def check_shape(url: str, *, allow_http: bool) -> SplitResult:
    """Scheme, host and length of an input_url, without touching the network."""
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        raise UnsafeSourceURL(f"must be a URL of at most {MAX_URL_CHARS} characters")
    if any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in url):
        raise UnsafeSourceURL("contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise UnsafeSourceURL("is malformed (its host or port cannot be parsed)") from None
    schemes = ("https", "http", "s3") if allow_http else ("https", "s3")
    if parts.scheme not in schemes:
        hint = "" if allow_http else " (http:// needs JETENCODE_FETCH_ALLOW_HTTP=true)"
        raise UnsafeSourceURL("must be an https:// or s3://bucket/key URL" + hint)
    if parts.username is not None or parts.password is not None:
        raise UnsafeSourceURL("must not contain credentials (user:password@)")
    if parts.scheme == "s3":
        if not S3_BUCKET.fullmatch(parts.netloc) or parts.path.strip("/") == "":
            raise UnsafeSourceURL("must be s3://bucket/key with a valid bucket name and a key")
    elif not parts.hostname:
        raise UnsafeSourceURL("has no host")
    return parts


def check_url(url: str, policy: Policy) -> SplitResult:
    """Shape, then (for http/https) every address the host resolves to. Raises UnsafeSourceURL."""
    parts = check_shape(url, allow_http=policy.allow_http)
    if parts.scheme != "s3":
        policy.resolve(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    return parts


# --- connections ----------------------------------------------------------------------------------


class GuardedHTTPConnection(http.client.HTTPConnection):
    """Resolves through the policy at connect time, connects to a checked address, and checks the
    peer it reached before the request is sent. The Host header stays the URL's host."""

    def __init__(self, host: str, port: int, policy: Policy, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.policy = policy
        self.peer: str | None = None

    def _guarded_socket(self) -> socket.socket:
        last_error: OSError | None = None
        for address in self.policy.resolve(self.host, self.port):
            try:
                sock = socket.create_connection((address, self.port), self.timeout)
            except OSError as exc:
                last_error = exc
                continue
            peer = sock.getpeername()[0].split("%", 1)[0]
            try:
                self.policy.check_address(self.host, self.port, peer)
            except UnsafeSourceURL:
                sock.close()
                raise
            self.peer = peer
            return sock
        assert last_error is not None
        raise last_error

    def connect(self) -> None:
        self.sock = self._guarded_socket()


class GuardedHTTPSConnection(GuardedHTTPConnection):
    default_port = 443

    def __init__(self, host: str, port: int, policy: Policy, timeout: float, context: ssl.SSLContext):
        super().__init__(host, port, policy, timeout)
        self.context = context

    def connect(self) -> None:
        # The certificate and SNI are checked against the URL's host name, not the address.
        self.sock = self.context.wrap_socket(self._guarded_socket(), server_hostname=self.host)


def connection(parts: SplitResult, policy: Policy, timeout: float) -> GuardedHTTPConnection:
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if parts.scheme == "https":
        # The system's trust store (SSL_CERT_FILE / SSL_CERT_DIR are honoured, as OpenSSL does).
        return GuardedHTTPSConnection(parts.hostname, port, policy, timeout, ssl.create_default_context())
    return GuardedHTTPConnection(parts.hostname, port, policy, timeout)
