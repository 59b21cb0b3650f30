"""record_sample_v1: the queue's per-minute sample, written once a minute whoever asks."""

import pytest

from scheduler import repository
from tests.kit.db import one, sql

pytestmark = pytest.mark.django_db


def test_the_minute_is_sampled_once_and_later_asks_only_look(enqueue):
    enqueue()
    enqueue()
    assert repository.record_sample() is True
    row = sql("SELECT pending, running FROM queue_samples WHERE at = date_trunc('minute', now())")
    assert row == [(2, 0)]
    enqueue()
    # Another worker's ask in the same minute finds the sample and counts nothing again: no scan
    # of `jobs` in this transaction's statistics (the old function counted, then lost the INSERT).
    scans = "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = 'jobs'"
    before = one(scans)
    assert repository.record_sample() is False
    assert one(scans) == before
    assert one("SELECT pending FROM queue_samples WHERE at = date_trunc('minute', now())") == 2
    assert one("SELECT count(*) FROM queue_samples") == 1
