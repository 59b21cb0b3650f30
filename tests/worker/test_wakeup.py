"""Wakeup: per-pool wake-ups between threads, none lost between an empty claim and the wait."""

import threading
import time

from workers.wakeup import Wakeup


def _waiter(wakeup, pool, timeout):
    seen = wakeup.generation(pool)
    result = {}

    def wait():
        started = time.monotonic()
        result["woken"] = wakeup.wait(pool, seen, timeout)
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, result


def test_a_pool_wakes_only_its_own_waiters():
    wakeup = Wakeup()
    media, media_result = _waiter(wakeup, "media", 5)
    background, background_result = _waiter(wakeup, "background", 0.5)
    time.sleep(0.1)
    wakeup.notify("media")
    media.join()
    background.join()
    assert media_result["woken"] and media_result["seconds"] < 1
    assert not background_result["woken"] and background_result["seconds"] >= 0.5


def test_wake_all_wakes_every_pool():
    wakeup = Wakeup()
    waiters = [_waiter(wakeup, pool, 5) for pool in ("media", "background")]
    time.sleep(0.1)
    wakeup.wake_all()
    for thread, result in waiters:
        thread.join()
        assert result["woken"] and result["seconds"] < 1


def test_a_notification_before_the_wait_is_not_lost():
    wakeup = Wakeup()
    seen = wakeup.generation("media")
    wakeup.notify("media")  # arrives between the empty claim and the wait
    started = time.monotonic()
    assert wakeup.wait("media", seen, 5) is True
    assert time.monotonic() - started < 0.5


def test_a_payload_names_its_pool_and_perhaps_the_one_worker_it_is_for():
    from workers.wakeup import parse_payload

    assert parse_payload("media", "w1") == "media"
    assert parse_payload("background:w1#3", "w1") == "background"
    assert parse_payload("media:w1#1", "w2") is None
    assert parse_payload("media:site:a#2", "site:a") == "media"  # a uid may contain ':', never '#'
    assert parse_payload("other:w1#1", "w1") is None


def test_a_notification_to_every_worker_is_counted_as_such():
    """The listener tells an offer ('media:<uid>#<n>') from an announcement to everyone ('media')."""
    from types import SimpleNamespace

    from workers.wakeup import CHANNEL, Listener

    wakeup = Wakeup()
    listener = Listener(wakeup, threading.Event(), {}, uid="w1")
    listener._deliver(SimpleNamespace(channel=CHANNEL, payload="media:w1#1"))
    assert (wakeup.generation("media"), wakeup.generation("media.everyone")) == (1, 0)
    listener._deliver(SimpleNamespace(channel=CHANNEL, payload="media"))
    assert (wakeup.generation("media"), wakeup.generation("media.everyone")) == (2, 1)
    listener._deliver(SimpleNamespace(channel=CHANNEL, payload="media:w2#1"))  # someone else's
    assert wakeup.generation("media") == 2
