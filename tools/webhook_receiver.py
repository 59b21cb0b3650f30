"""`python -m tools.webhook_receiver`: a webhook receiver for trying JetEncode's webhooks locally.

It listens on 127.0.0.1 (`--port`, default 8099), answers every POST with 204 and appends one JSON
line per delivery to `--log` (default stdout): {"type", "webhook_id", "verified", "body"}. With a
secret (`--secret`, else JETENCODE_WEBHOOK_SECRET) it checks each delivery's Standard Webhooks
signature with `media.webhooks.verify` ("verified": true or false; null without a secret).

Loopback is a private address, so the server and worker must run with
JETENCODE_WEBHOOK_ALLOW_PRIVATE=true to deliver to it (docs/api.md, "Create the job"). A lab tool:
in production the receiver is your own service at a public https URL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TextIO

from media.webhooks import WebhookVerificationError, verify


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.webhook_receiver", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--port", type=int, default=8099, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument("--log", help="append deliveries here (JSON lines); default stdout")
    parser.add_argument("--secret", default=os.environ.get("JETENCODE_WEBHOOK_SECRET"))
    return parser.parse_args(argv)


def delivery_record(headers: dict[str, str], body: bytes, secret: str | None) -> dict:
    """What one delivery is logged as."""
    verified = None
    if secret:
        try:
            verify(secret, headers, body)
            verified = True
        except WebhookVerificationError:
            verified = False
    try:
        payload = json.loads(body)
    except ValueError:
        payload = body.decode(errors="replace")
    kind = payload.get("type") if isinstance(payload, dict) else None
    return {"type": kind, "webhook_id": headers.get("webhook-id"), "verified": verified, "body": payload}


def make_server(port: int, out: TextIO, secret: str | None) -> ThreadingHTTPServer:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            record = delivery_record({k.lower(): v for k, v in self.headers.items()}, body, secret)
            with lock:
                out.write(json.dumps(record) + "\n")
                out.flush()
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass  # the JSON lines are the log

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = open(args.log, "a", encoding="utf-8") if args.log else sys.stdout  # noqa: SIM115 (lives as long as the server)
    server = make_server(args.port, out, args.secret)
    print(f"receiving webhooks at http://127.0.0.1:{server.server_address[1]}/", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
