"""tools/webhook_receiver.py, the receiver docs/api.md's walk delivers its webhook to: a real server
on a free port, real signed POSTs (media.webhooks signs them as the worker does)."""

from __future__ import annotations

import io
import json
import threading
import urllib.request

from media.webhooks import generate_secret, signature_headers
from tools.webhook_receiver import make_server


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status


def test_the_receiver_logs_each_delivery_and_checks_its_signature():
    secret = generate_secret()
    log = io.StringIO()
    server = make_server(0, log, secret)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jetencode"
        body = json.dumps({"type": "job.completed", "data": {"id": "x"}}).encode()
        signed = signature_headers(secret, "msg_1", body)
        assert post(url, body, signed) == 204
        forged = {**signed, "webhook-signature": "v1,bm90IGEgc2lnbmF0dXJl"}
        assert post(url, body, forged) == 204  # logged as unverified; a lab tool, not a gate
    finally:
        server.shutdown()
        server.server_close()
    first, second = (json.loads(line) for line in log.getvalue().splitlines())
    assert first == {
        "type": "job.completed",
        "webhook_id": "msg_1",
        "verified": True,
        "body": json.loads(body),
    }
    assert second["verified"] is False
