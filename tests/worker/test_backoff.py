"""The retry backoff that every worker thread uses while the database is unreachable."""

from workers.db import Backoff


def test_backoff_doubles_up_to_its_cap_and_keeps_going_for_ever():
    backoff = Backoff(0.5, 10.0)
    first = [backoff.next_delay() for _ in range(6)]
    assert 0.4 <= first[0] <= 0.6 and 8.0 <= first[-1] <= 12.0
    # A database down for hours: ~10,000 failures in a row must not overflow (2**1024 is not a float).
    for _ in range(10_000):
        assert backoff.next_delay() <= 12.0
    backoff.reset()
    assert backoff.next_delay() <= 0.6
