"""input_url fetching in this process (media/sources): the address guard on every hop and at
connect time, the resolver seam playing a rebinding DNS server, TLS trust, Range resume, the
cache's reuse and bounds, clear failures, and no credentials in messages or logs.

The guard stays at its default (JETENCODE_FETCH_ALLOW_PRIVATE off) except where a test needs to
reach a loopback origin and says so; the refusals are all proven with it off. Transcodes of
fetched sources by a real worker are in tests/e2e/test_sources.py.
"""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from media.params import MAX_SOURCE_REPEATS
from media.sources import cache as source_cache
from media.sources import guard
from media.sources.fetch import FetchError, PermanentFetchError, fetch_source
from media.submission import ValidationError, create_job
from tests.kit.origin import Origin, TlsFiles

DATA = os.urandom(300_000)
PUBLIC = "93.184.215.14"  # a public address (example.com's): the guard lets it through


@pytest.fixture
def sources(settings, roots):
    """The default guard (nothing private, no http://), small limits, this test's media root."""
    settings.SOURCES = {
        **settings.SOURCES,
        "FETCH_ALLOW_PRIVATE": False,
        "FETCH_ALLOW_HTTP": False,
        "FETCH_MAX_BYTES": 10_000_000,
        "FETCH_TIMEOUT_SECONDS": 60,
    }
    settings.S3_ENDPOINT_URL = ""

    def allow(**changes):
        settings.SOURCES = {**settings.SOURCES, **{f"FETCH_{k.upper()}": v for k, v in changes.items()}}

    return allow


class Rebinding:
    """A DNS server that answers `first` for the first `times` questions, then `then`."""

    def __init__(self, first: str, then: str, times: int = 1):
        self.answers = [first] * times
        self.then = then
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        return [self.answers.pop(0) if self.answers else self.then]


# --- the guard -------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://127.0.0.1/clip.mp4", "not a public address"),
        ("https://[::ffff:127.0.0.1]/clip.mp4", "not a public address"),
        ("https://169.254.169.254/latest/meta-data", "not a public address"),
        ("https://10.0.0.8/clip.mp4", "not a public address"),
        ("https://localhost/clip.mp4", "not a public address"),
        ("http://example.com/clip.mp4", "JETENCODE_FETCH_ALLOW_HTTP"),
        ("ftp://example.com/clip.mp4", "https://"),
        ("https://user:secret@example.com/clip.mp4", "credentials"),
        ("s3://UPPER/key.mp4", "bucket"),
    ],
)
def test_submission_refuses_urls_the_guard_refuses_naming_the_field(sources, url, words):
    with pytest.raises(ValidationError) as refused:
        create_job(None, {"type": "transcode", "params": {"input_url": url}})
    errors = refused.value.errors
    assert [e["field"] for e in errors] == ["params.input_url"] and words in errors[0]["message"], errors
    assert "secret" not in str(errors)


@pytest.mark.django_db
def test_exactly_one_source_is_required_naming_the_field(sources, roots, clips):
    roots.add(clips.landscape, "src/a.mp4")
    for params, field in [
        ({"input": "src/a.mp4", "input_url": "s3://bucket/a.mp4"}, "params.input_url"),
        (
            {"video_id": "6b1c6c2e-1111-4111-8111-111111111111", "input_url": "s3://bucket/a.mp4"},
            "params.input_url",
        ),
        ({}, "params.input"),
    ]:
        with pytest.raises(ValidationError) as refused:
            create_job(None, {"type": "thumbnail_generate", "params": params})
        assert [e["field"] for e in refused.value.errors] == [field], refused.value.errors
        assert "exactly one of input" in refused.value.errors[0]["message"]


@pytest.mark.django_db
def test_multi_input_types_take_input_urls_each_checked_and_named_by_its_index(sources, roots, clips):
    good = ["s3://bucket/a.mp4", "s3://bucket/b.mp4"]  # s3:// needs no DNS: the guard checks its shape
    job = create_job(None, {"type": "compile_quad", "params": {"input_urls": good * 2}})
    assert job.params["input_urls"] == good * 2
    for urls, words in [
        ([good[0], "ftp://example.com/b.mp4"], "input_urls[1]"),
        ([*good, "https://127.0.0.1/c.mp4"], "input_urls[2] "),
        ([good[0]] * (MAX_SOURCE_REPEATS + 1), f"at most {MAX_SOURCE_REPEATS}"),
    ]:
        with pytest.raises(ValidationError) as refused:
            create_job(None, {"type": "compile_mega", "params": {"input_urls": urls}})
        errors = refused.value.errors
        assert [e["field"] for e in errors] == ["params.input_urls"] and words in errors[0]["message"], errors
    roots.add(clips.landscape, "src/a.mp4")
    with pytest.raises(ValidationError) as refused:
        create_job(
            None, {"type": "compile_mega", "params": {"inputs": ["src/a.mp4"] * 2, "input_urls": good}}
        )
    assert [e["field"] for e in refused.value.errors] == ["params.input_urls"], refused.value.errors
    assert "exactly one of inputs" in refused.value.errors[0]["message"]


def test_a_redirect_to_loopback_is_refused_and_never_connected(sources, settings):
    sources(allow_http=True)
    with Origin({"/clip.mp4": DATA}) as inner, Origin(host="127.0.0.2") as outer:
        outer.redirects["/start"] = inner.url("/clip.mp4")
        # The first hop is the configured S3 endpoint, which an operator chose (trusted, though it
        # is on loopback here); the hop it redirects to is checked like any other URL.
        settings.S3_ENDPOINT_URL = f"http://127.0.0.2:{outer.port}"
        with pytest.raises(PermanentFetchError, match="refused at http://127.0.0.1:.*not a public address"):
            fetch_source(outer.url("/start"))
        assert [r["path"] for r in outer.requests] == ["/start"] and inner.requests == []

        sources(allow_private=True)  # the same redirect, private targets allowed: it is followed
        assert fetch_source(outer.url("/start")).read_bytes() == DATA
        assert [r["path"] for r in inner.requests] == ["/clip.mp4"]


def test_a_dns_answer_that_changes_to_loopback_is_refused(sources):
    sources(allow_http=True)
    with Origin({"/clip.mp4": DATA}) as origin:
        url = f"http://media.example:{origin.port}/clip.mp4"
        dns = Rebinding(first=PUBLIC, then="127.0.0.1")
        policy = guard.Policy.from_settings(resolver=dns)
        guard.check_url(url, policy)  # at submission: a public answer, accepted
        with pytest.raises(PermanentFetchError, match="not a public address"):
            fetch_source(url, policy=policy)  # at connect time: loopback now, refused
        assert origin.requests == [] and dns.asked == ["media.example", "media.example"]


def test_the_connection_goes_to_the_address_that_was_checked(sources):
    """One question per connection, and the socket connects to its checked answer: a resolver
    that turns to loopback after answering is never asked again (a client that resolved once to
    check and once more to connect would reach the origin here)."""
    sources(allow_http=True)
    with Origin({"/clip.mp4": DATA}) as origin:
        dns = Rebinding(first="127.0.0.1", then=PUBLIC, times=1)
        allowed = guard.Policy(allow_private=True, allow_http=True, resolver=dns)
        assert (
            fetch_source(f"http://media.example:{origin.port}/clip.mp4", policy=allowed).read_bytes() == DATA
        )
        assert dns.asked == ["media.example"] and len(origin.requests) == 1
        conn = guard.connection(
            guard.check_shape(f"http://media.example:{origin.port}/", allow_http=True),
            guard.Policy(allow_private=True, allow_http=True, resolver=lambda h, p: ["127.0.0.1"]),
            5,
        )
        conn.connect()
        assert conn.peer == "127.0.0.1"
        conn.close()


# --- https ------------------------------------------------------------------------------------------


def test_https_needs_a_trusted_certificate(sources, tmp_path, monkeypatch):
    tls = TlsFiles.make(tmp_path / "tls")
    sources(allow_private=True)  # the origin is on loopback
    with Origin({"/clip.mp4": DATA}, tls=tls) as origin:
        with pytest.raises(PermanentFetchError, match="certificate is not trusted"):
            fetch_source(origin.url("/clip.mp4"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.cert))
        assert fetch_source(origin.url("/clip.mp4")).read_bytes() == DATA


# --- resume, cache, failures -----------------------------------------------------------------------


def test_a_broken_download_resumes_with_range(sources):
    sources(allow_private=True, allow_http=True)
    logs: list[str] = []
    seen: list[tuple[int, int | None]] = []
    with Origin({"/clip.mp4": DATA}, drop_after={"/clip.mp4": 100_000}) as origin:
        path = fetch_source(
            origin.url("/clip.mp4"), log=logs.append, progress=lambda d, t: seen.append((d, t))
        )
        assert path.read_bytes() == DATA
        first, second = origin.requests
        assert "Range" not in first["headers"]
        assert second["headers"]["Range"] == "bytes=100000-" and second["headers"]["If-Range"] == origin.etag(
            "/clip.mp4"
        )
    assert any("resuming at byte 100000" in line for line in logs), logs
    assert seen[-1] == (len(DATA), len(DATA)) and all(t == len(DATA) for _, t in seen)
    assert path.name == hashlib.sha256(DATA).hexdigest() + ".mp4"  # content-addressed


def test_the_cache_is_reused_while_the_origin_says_unchanged(sources):
    sources(allow_private=True, allow_http=True)
    with Origin({"/clip.mp4": DATA}) as origin:
        first = fetch_source(origin.url("/clip.mp4"))
        again = fetch_source(origin.url("/clip.mp4"))
        assert again == first and origin.requests[1]["headers"]["If-None-Match"] == origin.etag("/clip.mp4")
        origin.files["/clip.mp4"] = DATA[::-1]  # the object changes: a new ETag, fetched again
        changed = fetch_source(origin.url("/clip.mp4"))
        assert changed != first and changed.read_bytes() == DATA[::-1]


def test_failures_say_what_happened_and_which_are_permanent(sources, settings):
    sources(allow_private=True, allow_http=True)
    with Origin({"/clip.mp4": DATA}, statuses={"/gone.mp4": 404, "/busy.mp4": 503}) as origin:
        with pytest.raises(PermanentFetchError, match="HTTP 404 Not Found"):
            fetch_source(origin.url("/gone.mp4"))
        assert len(origin.requests) == 1  # no retries against a missing object
        with pytest.raises(FetchError, match="HTTP 503") as busy:
            fetch_source(origin.url("/busy.mp4"))
        assert not isinstance(busy.value, PermanentFetchError)  # the queue retries it, with backoff
        settings.SOURCES = {**settings.SOURCES, "FETCH_MAX_BYTES": 1000}
        with pytest.raises(
            PermanentFetchError, match=r"300000 bytes, more than JETENCODE_FETCH_MAX_BYTES \(1000\)"
        ):
            fetch_source(origin.url("/clip.mp4"))


def test_credentials_in_a_url_stay_out_of_messages_and_logs(sources, caplog):
    sources(allow_private=True, allow_http=True)
    logs: list[str] = []
    with Origin({"/clip.mp4": DATA}, statuses={"/gone.mp4": 403}) as origin:
        fetch_source(origin.url("/clip.mp4") + "?X-Amz-Signature=topsecret", log=logs.append)
        with pytest.raises(PermanentFetchError) as refused:
            fetch_source(origin.url("/gone.mp4") + "?X-Amz-Signature=topsecret", log=logs.append)
    text = " ".join(logs) + str(refused.value) + caplog.text
    assert "/clip.mp4?…" in text and "topsecret" not in text


def test_trim_keeps_the_cache_within_its_bound(sources, roots):
    cache = source_cache.SourceCache()
    old = time.time() - 3 * source_cache.RECENT_USE_SECONDS
    for index in range(4):
        path = cache.root / "objects" / f"{index:064x}.mp4"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (old + index, old + index))
    recent = cache.root / "objects" / ("f" * 64 + ".mp4")
    recent.write_bytes(b"x" * 1000)  # just used: never trimmed, whatever the bound
    assert source_cache.trim(max_bytes=2500, keep_days=30) == 3
    assert sorted(p.name[:1] for p in (cache.root / "objects").iterdir()) == ["0", "f"]


def test_a_download_slower_than_its_time_cap_fails_and_keeps_its_bytes_for_the_next_attempt(
    sources, settings
):
    sources(allow_private=True, allow_http=True)
    settings.SOURCES = {**settings.SOURCES, "FETCH_TIMEOUT_SECONDS": 1}
    with Origin({"/clip.mp4": DATA}, slow={"/clip.mp4": 0.1}) as origin:
        started = time.monotonic()
        with pytest.raises(FetchError, match=r"longer than JETENCODE_FETCH_TIMEOUT_SECONDS \(1 s\)") as slow:
            fetch_source(origin.url("/clip.mp4"))
        assert not isinstance(slow.value, PermanentFetchError) and time.monotonic() - started < 5
        kept = source_cache.SourceCache().partial(source_cache.SourceCache.key(origin.url("/clip.mp4")))
        size = kept.stat().st_size
        assert 0 < size < len(DATA)
        origin.slow.clear()  # the next attempt, with a faster link, resumes where this one stopped
        assert fetch_source(origin.url("/clip.mp4")).read_bytes() == DATA
        assert origin.requests[-1]["headers"]["Range"] == f"bytes={size}-"


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_s3_sources_are_read_with_the_outputs_settings_and_reused_by_etag(
    sources, settings, s3_endpoint, monkeypatch
):
    import boto3

    for name, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    settings.S3_ENDPOINT_URL = s3_endpoint  # the guard stays on: the S3 endpoint is trusted
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket="sources-test")
    client.put_object(Bucket="sources-test", Key="in/a.mp4", Body=DATA)
    logs: list[str] = []
    first = fetch_source("s3://sources-test/in/a.mp4", log=logs.append)
    again = fetch_source("s3://sources-test/in/a.mp4", log=logs.append)
    assert first == again and first.read_bytes() == DATA
    assert any("unchanged (ETag)" in line for line in logs), logs
    client.put_object(Bucket="sources-test", Key="in/a.mp4", Body=DATA[:1000])
    assert fetch_source("s3://sources-test/in/a.mp4").read_bytes() == DATA[:1000]
    with pytest.raises(PermanentFetchError, match="s3://sources-test/in/missing.mp4: S3 answered 404"):
        fetch_source("s3://sources-test/in/missing.mp4")
