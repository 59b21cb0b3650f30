"""API test fixtures: the cast's API clients, their tokens, and jobs in a known state.

The cast is tests/kit/personas.py (its fixtures are in tests/conftest.py); here each member gets
the client an integrator would use (tests/kit/web.py's `Api`, a bearer token):
- `admin_api`: alice (superuser) with an operate-scope token;
- `operator_api`: bob (Operators) with an operate-scope token, what an integrator normally uses;
- `viewer_api`: charlie (Viewers) with a read-scope token;
- `anonymous_api`: no token at all.
dave (no group) has no client of his own: the tests that need him issue his token with `token_for`.
"""

import pytest
from django.test import Client

from media.storage import LocalStorage
from scheduler import repository
from tests.kit.db import claim, lease_of
from tests.kit.web import Api, issue_token


@pytest.fixture
def token_for(db):
    """token_for(user, scope="operate") -> a new raw API token of `user`."""
    return issue_token


@pytest.fixture
def bearer():
    """bearer(raw_token) → an Api client that sends it."""

    def make(raw, client=None):
        return Api(client or Client(), raw)

    return make


@pytest.fixture
def anonymous_api():
    return Api(Client())


@pytest.fixture
def operator_api(bob):
    return Api(Client(), issue_token(bob, "operate"))


@pytest.fixture
def viewer_api(charlie):
    return Api(Client(), issue_token(charlie, "read"))


@pytest.fixture
def admin_api(alice):
    return Api(Client(), issue_token(alice, "operate"))


@pytest.fixture
def failed_job(enqueue, worker):
    """A noop job whose only stage failed for good."""
    job_id = enqueue(max_attempts=1)
    assert repository.fail(lease_of(claim(worker), worker), "boom", retryable=False).outcome == "failed"
    return job_id


@pytest.fixture
def completed_job(enqueue, worker):
    job_id = enqueue()
    assert repository.finish(lease_of(claim(worker), worker), result={"ok": True}).outcome == "completed"
    return job_id


# ---- published outputs (tests/api/test_outputs.py, test_playing.py) ----------------------------

MASTER = "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=800000\n360p/index.m3u8\n"
MEDIA = "#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\nseg_000.ts\n#EXT-X-ENDLIST\n"
SEGMENT = bytes(range(256)) * 40  # 10,240 bytes


def publish(enqueue, worker, files, url_of):
    """A completed job whose only stage published `files` ({name: bytes}); url_of(job, name) → storage_url."""
    job_id = enqueue()
    outputs = [
        repository.Output(name, size_bytes=len(data), storage_url=url_of(job_id, name, data))
        for name, data in files.items()
    ]
    assert repository.finish(lease_of(claim(worker), worker), outputs=outputs).outcome == "completed"
    return job_id


@pytest.fixture
def local_job(settings, tmp_path, enqueue, worker):
    settings.OUTPUT_ROOT_DIR = tmp_path / "outputs"
    storage = LocalStorage()

    def url_of(job_id, name, data):
        path = storage.path(str(job_id), name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path.as_uri()

    files = {
        "hls/master.m3u8": MASTER.encode(),
        "hls/360p/index.m3u8": MEDIA.encode(),
        "hls/360p/seg_000.ts": SEGMENT,
        "report.json": b'{"ok": true}',
    }
    return publish(enqueue, worker, files, url_of)
