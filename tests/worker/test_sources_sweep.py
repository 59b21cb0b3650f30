"""The maintenance loop's sources step: abandoned uploads and the fetch cache beyond its bounds."""

import logging
import os
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from media import uploads
from media.models import Upload
from media.sources.cache import RECENT_USE_SECONDS, SourceCache

pytestmark = pytest.mark.django_db


def test_the_maintenance_thread_removes_abandoned_uploads_and_old_cached_sources(
    tmp_path, settings, bob, caplog
):
    from workers.maintenance import Maintenance

    settings.MEDIA_ROOT_DIR = tmp_path / "media"
    settings.MEDIA_ROOT_DIR.mkdir()
    settings.SOURCES = {**settings.SOURCES, "FETCH_CACHE_MAX_BYTES": 10**9}
    abandoned = uploads.create(bob, None, 100, {"filename": "a.mp4"})
    kept = uploads.create(bob, None, 100, {"filename": "b.mp4"})
    Upload.objects.filter(pk=abandoned.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    cache = SourceCache()
    stale = cache.root / "objects" / ("a" * 64 + ".mp4")
    stale.write_bytes(b"old")
    long_ago = time.time() - 40 * 86400 - RECENT_USE_SECONDS
    os.utime(stale, (long_ago, long_ago))
    fresh = cache.root / "objects" / ("b" * 64 + ".mp4")
    fresh.write_bytes(b"new")

    worker = SimpleNamespace(uid="w-sources", log_extra={}, timing=SimpleNamespace(retention_days=30))
    with caplog.at_level(logging.INFO, logger="jetencode.worker"):
        Maintenance(worker).sweep_sources()

    assert list(Upload.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not uploads.part_path(abandoned.pk).exists() and uploads.part_path(kept.pk).exists()
    assert not stale.exists() and fresh.exists()
    assert "sources: removed 1 abandoned uploads and 1 cached downloads" in caplog.text
