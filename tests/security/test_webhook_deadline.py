"""A webhook delivery has a total deadline (connect + send + response), enforced on the socket.

The per-operation timeout (15 s) bounds one `recv`; a receiver trickling one byte at a time never
trips it and used to hold the worker's background slot forever. These receivers are real TCP
servers on loopback; the deadline setting is shortened so each test takes about a second.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from media import webhooks


class Trickler:
    """Accepts connections, reads the request, then sends its answer one byte every `every` s
    (or nothing at all with silent=True)."""

    ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    def __init__(self, every: float = 0.2, silent: bool = False):
        self.every, self.silent = every, silent
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    for byte in self.ANSWER:
                        if self.stop.wait(self.every) or self.silent:
                            if self.silent:
                                self.stop.wait(10)
                            break
                        conn.sendall(bytes([byte]))
                        self.sent += 1
                except OSError:
                    pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)
        self.server.close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/hook"


@pytest.fixture
def short_deadline(settings):
    settings.JETENCODE = {
        **settings.JETENCODE,
        "WEBHOOK_DEADLINE_SECONDS": 1.0,
        "WEBHOOK_ALLOW_PRIVATE": True,
    }


@pytest.mark.parametrize("silent", [False, True], ids=["trickling", "silent"])
def test_a_slow_receiver_is_cut_off_at_the_total_deadline(short_deadline, silent):
    with Trickler(every=0.2, silent=silent) as receiver:
        started = time.monotonic()
        with pytest.raises(webhooks.DeliveryDeadline, match="deadline of 1s"):
            webhooks.send(receiver.url, {"type": "job.completed"}, "msg_1", timeout=15.0)
        elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 3.0, elapsed
    if not silent:
        assert 0 < receiver.sent < len(Trickler.ANSWER)  # it was trickling when it was cut off


def test_a_receiver_answering_within_the_deadline_is_delivered(short_deadline):
    with Trickler(every=0.005) as receiver:
        delivery = webhooks.send(receiver.url, {"type": "job.completed"}, "msg_2", timeout=15.0)
    assert delivery.status == 200 and delivery.body == "ok"


def test_the_deadline_is_a_timeout_the_webhook_stage_retries(short_deadline):
    # The stage catches OSError (and http.client errors) and lets the queue retry.
    assert issubclass(webhooks.DeliveryDeadline, OSError)
