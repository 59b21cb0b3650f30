"""Standard Webhooks signing, URL safety, and delivery to a local receiver."""

import json
import socket

import pytest

from media import webhooks
from tests.kit.web import Receiver

SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def test_signature_matches_the_published_test_vector():
    # From the Standard Webhooks reference implementations.
    body = b'{"test": 2432232314}'
    assert (
        webhooks.sign(SPEC_SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
        == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )


def test_sign_verify_round_trip_and_tampering():
    secret = webhooks.generate_secret()
    assert secret.startswith("whsec_")
    body = webhooks.body_bytes({"type": "job.completed", "data": {"id": "x"}})
    headers = webhooks.signature_headers(secret, "msg_1", body, timestamp=1_700_000_000)
    webhooks.verify(secret, headers, body, now=1_700_000_010)
    upper = {k.upper(): v for k, v in headers.items()}
    webhooks.verify(secret, upper, body, now=1_700_000_010)  # header names are case-insensitive
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(secret, headers, body + b" ", now=1_700_000_010)
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(secret, {**headers, "webhook-id": "msg_2"}, body, now=1_700_000_010)
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(webhooks.generate_secret(), headers, body, now=1_700_000_010)
    with pytest.raises(webhooks.WebhookVerificationError, match="tolerance"):
        webhooks.verify(secret, headers, body, now=1_700_000_000 + 3600)
    with pytest.raises(webhooks.WebhookVerificationError, match="missing"):
        webhooks.verify(secret, {"webhook-id": "msg_1"}, body)
    rotated = {**headers, "webhook-signature": "v1,bm9wZQ== " + headers["webhook-signature"]}
    webhooks.verify(secret, rotated, body, now=1_700_000_010)


def test_webhook_ids_are_stable_per_event_and_manual_retry():
    a = webhooks.stable_webhook_id("job-1", "job.completed", 0)
    assert a == webhooks.stable_webhook_id("job-1", "job.completed", 0)
    assert a != webhooks.stable_webhook_id("job-1", "job.completed", 1)
    payload = webhooks.task_payload("https://example.com/h", "job.failed", {"id": "job-1"})
    assert payload["webhook_id"] == webhooks.stable_webhook_id("job-1", "job.failed", 0)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8000/hook",
        "http://[::1]/hook",
        "http://10.1.2.3/",
        "http://192.168.0.10/",
        "http://172.16.5.4/",
        "http://169.254.169.254/latest/meta-data",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://100.64.0.1/",
    ],
)
def test_non_public_addresses_are_refused(url):
    with pytest.raises(webhooks.UnsafeWebhookURL):
        webhooks.check_url(url, allow_private=False)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "gopher://x/",
        "http://",
        "https://u:p@8.8.8.8/",
        "http://exa mple.com/",
    ],
)
def test_only_plain_http_urls(url):
    with pytest.raises(webhooks.UnsafeWebhookURL):
        webhooks.check_url(url, allow_private=True)


def test_public_literal_addresses_pass_and_private_ones_pass_when_allowed(settings):
    target = webhooks.check_url("https://8.8.8.8:8443/hook?x=1", allow_private=False)
    assert (target.host, target.port, target.path, target.addresses) == (
        "8.8.8.8",
        8443,
        "/hook?x=1",
        ("8.8.8.8",),
    )
    assert webhooks.check_url("http://127.0.0.1:9/", allow_private=True).addresses == ("127.0.0.1",)
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": True}
    webhooks.check_url("http://127.0.0.1:9/")


def test_send_posts_signed_json_that_the_receiver_verifies():
    secret = webhooks.generate_secret()
    payload = webhooks.envelope(
        "job.completed", {"id": "j1", "status": "completed"}, "2026-01-01T00:00:00+00:00"
    )
    with Receiver() as receiver:
        delivery = webhooks.send(
            receiver.url + "/hook?token=abc", payload, "msg_abc", secret=secret, allow_private=True
        )
    assert delivery.ok and delivery.status == 200
    [(path, headers, body)] = receiver.requests
    assert path == "/hook?token=abc"
    assert headers["content-type"] == "application/json"
    webhooks.verify(secret, headers, body)
    assert json.loads(body) == payload
    assert headers["webhook-id"] == "msg_abc"


def test_redirects_are_not_followed():
    with Receiver(status=302, location="http://169.254.169.254/") as receiver:
        delivery = webhooks.send(
            receiver.url, {"a": 1}, "msg_r", secret=webhooks.generate_secret(), allow_private=True
        )
    assert delivery.status == 302 and not delivery.ok
    assert len(receiver.requests) == 1


def test_refused_before_connecting(settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": False}
    with Receiver() as receiver:
        with pytest.raises(webhooks.UnsafeWebhookURL):
            webhooks.send(receiver.url, {"a": 1}, "msg_x")
    assert receiver.requests == []


def test_connection_errors_raise():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OSError):
        webhooks.send(f"http://127.0.0.1:{port}/", {"a": 1}, "msg_y", allow_private=True, timeout=2)
