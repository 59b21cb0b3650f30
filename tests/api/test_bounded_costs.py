"""What an unauthenticated or read-only caller can make the server do is bounded (issue 37, item 5):
the webhook host's lookup has a timeout and one answer for "does not resolve" and "not public";
/v2/openapi.json is built once; /metrics is computed at most once per JETENCODE_METRICS_CACHE_SECONDS;
every list's offset is capped, and the job list pages by cursor past that."""

from __future__ import annotations

import socket
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from api import metrics
from api.api import api
from api.paging import MAX_OFFSET
from media import webhooks

pytestmark = pytest.mark.django_db


def _webhook_message(operator_api, url: str) -> str:
    response = operator_api.post("/v2/jobs", {"type": "noop", "webhook_url": url})
    assert response.status_code == 422, response.content[:300]
    [error] = response.json()["errors"]
    assert error["field"] == "webhook_url"
    return error["message"]


def test_does_not_resolve_and_not_public_get_one_message(operator_api, settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": False}
    unknown = _webhook_message(operator_api, "https://no-such-host.invalid/hook")
    private = _webhook_message(operator_api, "http://localhost:8000/hook")
    assert unknown.replace("no-such-host.invalid", "H") == private.replace("localhost", "H")
    assert "127.0.0.1" not in private and "::1" not in private


def test_a_slow_lookup_times_out_as_not_resolving(operator_api, settings, monkeypatch):
    settings.JETENCODE = {
        **settings.JETENCODE,
        "WEBHOOK_ALLOW_PRIVATE": False,
        "WEBHOOK_DNS_TIMEOUT_SECONDS": 0.3,
    }
    real = socket.getaddrinfo

    def slow(host, *args, **kwargs):
        if host == "slow.example.com":
            time.sleep(3)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    started = time.monotonic()
    message = _webhook_message(operator_api, "https://slow.example.com/hook")
    assert time.monotonic() - started < 2.0
    assert "does not resolve" in message
    assert webhooks.resolve("slow.example.com", 443) == []


def test_the_openapi_document_is_built_once(anonymous_api):
    api._openapi_documents.clear()
    started = time.perf_counter()
    first = anonymous_api.get("/v2/openapi.json")
    built = time.perf_counter() - started
    started = time.perf_counter()
    second = anonymous_api.get("/v2/openapi.json")
    cached = time.perf_counter() - started
    assert first.status_code == second.status_code == 200 and first.content == second.content
    assert len(api._openapi_documents) == 1
    print(f"openapi.json: built {built * 1000:.1f} ms, cached {cached * 1000:.1f} ms")
    assert cached < built


def test_metrics_are_computed_at_most_once_per_cache_period(anonymous_api, enqueue, settings):
    settings.JETENCODE = {**settings.JETENCODE, "METRICS_CACHE_SECONDS": 60}
    metrics._cached = None
    with CaptureQueriesContext(connection) as first:
        body = anonymous_api.get("/metrics").content
    enqueue("noop")
    with CaptureQueriesContext(connection) as repeated:
        for _ in range(5):
            assert anonymous_api.get("/metrics").content == body  # the cached exposition
    assert len(first.captured_queries) > 0 and len(repeated.captured_queries) == 0
    settings.JETENCODE = {**settings.JETENCODE, "METRICS_CACHE_SECONDS": 0}
    assert anonymous_api.get("/metrics").content != body  # the new job shows once the cache expires
    metrics._cached = None


@pytest.mark.parametrize("path", ["/v2/queue", "/v2/jobs"])
def test_deep_offsets_are_a_422_naming_the_page(viewer_api, path):
    response = viewer_api.get(path, {"page": 100_000, "limit": 500})
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["page"]
    assert viewer_api.get(path, {"page": MAX_OFFSET // 500 + 1, "limit": 500}).status_code == 200


@pytest.mark.parametrize("path", ["/dashboard/jobs", "/dashboard/queue", "/dashboard/library"])
def test_dashboard_pages_stop_at_the_offset_bound(client, charlie, path):
    client.force_login(charlie)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path, {"page": 10_000_000}).status_code == 200
    offsets = [int(word) for q in queries.captured_queries for word in _after("OFFSET", q["sql"])]
    assert offsets and max(offsets) <= MAX_OFFSET


def _after(keyword: str, sql: str) -> list[str]:
    words = sql.replace("\n", " ").split()
    return [
        words[i + 1]
        for i, word in enumerate(words[:-1])
        if word.upper() == keyword and words[i + 1].isdigit()
    ]


def test_the_job_list_pages_by_cursor(viewer_api, enqueue):
    ids = [str(enqueue("noop")) for _ in range(5)]
    seen, cursor = [], None
    for _ in range(4):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = viewer_api.get("/v2/jobs", params).json()
        seen += [job["id"] for job in page["data"]]
        cursor = page["pagination"]["next_cursor"]
        if cursor is None:
            break
    # The order of the plain listing (newest first; jobs of one transaction share created_at and
    # are ordered by id), each job once.
    listed = [job["id"] for job in viewer_api.get("/v2/jobs", {"limit": 100}).json()["data"]]
    assert seen == listed and sorted(seen) == sorted(ids)
    bad = viewer_api.get("/v2/jobs", {"cursor": "yesterday~not-a-uuid"})
    assert bad.status_code == 422 and [e["field"] for e in bad.json()["errors"]] == ["cursor"]
