"""An origin server for input_url tests: plain HTTP or TLS with a self-signed certificate the test
trusts, on any loopback address (127.0.0.1, 127.0.0.2... all reach this machine on Linux).

    with Origin(files={"/clip.mp4": data}) as origin:          # http://127.0.0.1:<port>
        origin.url("/clip.mp4")
    with Origin(files=..., tls=TlsFiles.make(tmp_path)) as o:  # https://localhost:<port>

It serves GET with ETag / Last-Modified, conditional requests (If-None-Match → 304), Range with
If-Range (206), redirects (`redirects={"/a": "http://..."}`), statuses (`statuses={"/gone": 404}`)
drops: `drop_after={"/clip.mp4": 1000}` cuts the first response for that path after 1000 body
bytes, and trickles: `slow={"/clip.mp4": 0.2}` sends the body in 16 KiB pieces 0.2 s apart. Every request is recorded (`origin.requests`: method, path, headers).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LAST_MODIFIED = "Fri, 04 Dec 2026 12:00:00 GMT"


@dataclass(frozen=True)
class TlsFiles:
    """A self-signed certificate for localhost / 127.0.0.1 and its key (PEM files)."""

    cert: Path
    key: Path

    @classmethod
    def make(cls, directory: Path) -> TlsFiles:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / "origin-cert.pem", directory / "origin-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        return cls(cert_path, key_path)


class Origin:
    def __init__(
        self,
        files: dict[str, bytes] | None = None,
        *,
        host: str = "127.0.0.1",
        tls: TlsFiles | None = None,
        redirects: dict[str, str] | None = None,
        statuses: dict[str, int] | None = None,
        drop_after: dict[str, int] | None = None,
        slow: dict[str, float] | None = None,
    ):
        self.files = dict(files or {})
        self.redirects = dict(redirects or {})
        self.statuses = dict(statuses or {})
        self.drop_after = dict(drop_after or {})
        self.slow = dict(slow or {})  # path: seconds between 16 KiB pieces of the body
        self.requests: list[dict] = []
        self.tls = tls
        self.server = ThreadingHTTPServer((host, 0), _handler_for(self))
        self.server.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls.cert, tls.key)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.host, self.port = host, self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str, host: str | None = None) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host or ('localhost' if self.tls else self.host)}:{self.port}{path}"

    def etag(self, path: str) -> str:
        return '"' + hashlib.sha256(self.files[path]).hexdigest()[:16] + '"'

    def __enter__(self) -> Origin:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler_for(origin: Origin):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = self.path.split("?", 1)[0]  # the query (a presigned signature) does not pick the file
            origin.requests.append({"method": "GET", "path": path, "headers": dict(self.headers)})
            if path in origin.redirects:
                return self._empty(302, {"Location": origin.redirects[path]})
            if path in origin.statuses:
                return self._empty(origin.statuses[path])
            if path not in origin.files:
                return self._empty(404)
            data, etag = origin.files[path], origin.etag(path)
            if self.headers.get("If-None-Match") == etag:
                return self._empty(304, {"ETag": etag})
            start = self._range_start(etag)
            headers = {"ETag": etag, "Last-Modified": LAST_MODIFIED, "Content-Length": str(len(data) - start)}
            if start:
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            self._send_head(206 if start else 200, headers)
            body = data[start:]
            cut = origin.drop_after.pop(path, None)
            if cut is not None:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # the link breaks mid-body
                return
            if path in origin.slow:
                for start in range(0, len(body), 16384):
                    time.sleep(origin.slow[path])
                    self.wfile.write(body[start : start + 16384])
                    self.wfile.flush()
                return
            self.wfile.write(body)

        def _range_start(self, etag: str) -> int:
            wanted = self.headers.get("Range", "")
            if not wanted.startswith("bytes=") or self.headers.get("If-Range", etag) not in (
                etag,
                LAST_MODIFIED,
            ):
                return 0
            return int(wanted[len("bytes=") :].split("-", 1)[0])

        def _send_head(self, status: int, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()

        def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
            self._send_head(status, {**(headers or {}), "Content-Length": "0"})

    return Handler
