"""GET /v2/jobs/{id}/outputs/{name}: outputs over HTTP with a bearer token, local and S3."""

import hashlib
import uuid
from urllib.parse import urljoin, urlsplit
from urllib.request import urlopen

import boto3
import pytest

from tests.api.conftest import MASTER, SEGMENT, publish

pytestmark = pytest.mark.django_db


def download_urls(api, job_id):
    detail = api.get(f"/v2/jobs/{job_id}").json()
    return {o["name"]: o["download_url"] for o in detail["outputs"]}


def test_every_output_has_a_download_url_that_serves_it(viewer_api, local_job):
    urls = download_urls(viewer_api, local_job)
    assert urls["report.json"] == f"http://testserver/v2/jobs/{local_job}/outputs/report.json"
    response = viewer_api.get(urlsplit(urls["hls/360p/seg_000.ts"]).path)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == SEGMENT
    assert response["Content-Type"] == "video/mp2t"
    assert response["Content-Length"] == str(len(SEGMENT))
    assert response["Accept-Ranges"] == "bytes"
    assert response["ETag"].startswith('"') and response["Last-Modified"].endswith("GMT")


def test_an_etag_or_date_the_client_has_answers_304(viewer_api, local_job):
    path = f"/v2/jobs/{local_job}/outputs/report.json"
    first = viewer_api.get(path)
    assert viewer_api.get(path, headers={"If-None-Match": first["ETag"]}).status_code == 304
    assert viewer_api.get(path, headers={"If-Modified-Since": first["Last-Modified"]}).status_code == 304
    assert viewer_api.get(path, headers={"If-None-Match": '"other"'}).status_code == 200


@pytest.mark.parametrize(
    "header, status, content_range, body",
    [
        ("bytes=0-9", 206, "bytes 0-9/10240", SEGMENT[:10]),
        ("bytes=10200-", 206, "bytes 10200-10239/10240", SEGMENT[10200:]),
        ("bytes=-16", 206, "bytes 10224-10239/10240", SEGMENT[-16:]),
        ("bytes=10000-99999999", 206, "bytes 10000-10239/10240", SEGMENT[10000:]),
        ("bytes=10240-", 416, "bytes */10240", None),
        ("bytes=" + "9" * 5000 + "-", 416, "bytes */10240", None),
        ("bytes=0-" + "9" * 5000, 206, "bytes 0-10239/10240", SEGMENT),
        ("bytes=-" + "9" * 5000, 206, "bytes 0-10239/10240", SEGMENT),
        ("bytes=" + "0" * 40 + "1-2", 206, "bytes 1-2/10240", SEGMENT[1:3]),  # leading zeros
        ("bytes=" + "9" * 5000, 200, None, SEGMENT),  # malformed: ignored
        ("bytes=0-1,5-6", 200, None, SEGMENT),  # several ranges: ignored
        ("bytes=9-3", 200, None, SEGMENT),  # last < first: invalid, ignored
    ],
)
def test_byte_ranges(viewer_api, local_job, header, status, content_range, body):
    response = viewer_api.get(f"/v2/jobs/{local_job}/outputs/hls/360p/seg_000.ts", headers={"Range": header})
    assert response.status_code == status
    assert response.get("Content-Range") == content_range
    content = b"".join(response.streaming_content) if response.streaming else response.content
    if status == 416:  # the API's error shape, like every other error
        assert response["Content-Type"] == "application/json"
        assert "not satisfiable" in response.json()["detail"] and "10240 bytes" in response.json()["detail"]
        return
    assert content == body
    assert response["Content-Length"] == str(len(body))


def test_if_range_with_a_stale_etag_sends_the_whole_file(viewer_api, local_job):
    path = f"/v2/jobs/{local_job}/outputs/hls/360p/seg_000.ts"
    etag = viewer_api.get(path)["ETag"]
    fresh = viewer_api.get(path, headers={"Range": "bytes=0-3", "If-Range": etag})
    stale = viewer_api.get(path, headers={"Range": "bytes=0-3", "If-Range": '"old"'})
    assert (fresh.status_code, stale.status_code) == (206, 200)


def test_hls_references_resolve_to_outputs_of_the_same_job(viewer_api, local_job):
    """What a player does: fetch the master, resolve each URI against its URL, fetch that, and so on."""
    master_url = download_urls(viewer_api, local_job)["hls/master.m3u8"]
    seen, todo = [], [master_url]
    while todo:
        url = todo.pop()
        response = viewer_api.get(urlsplit(url).path)
        assert response.status_code == 200, url
        content = b"".join(response.streaming_content)
        seen.append(urlsplit(url).path.rsplit("/outputs/", 1)[1])
        if url.endswith(".m3u8"):
            assert response["Content-Type"] == "application/vnd.apple.mpegurl"
            refs = [line for line in content.decode().splitlines() if line and not line.startswith("#")]
            todo += [urljoin(url, ref) for ref in refs]
    assert seen == ["hls/master.m3u8", "hls/360p/index.m3u8", "hls/360p/seg_000.ts"]


def test_unknown_or_unsafe_names_and_missing_credentials(viewer_api, anonymous_api, local_job):
    for name in ("nope.mp4", "../report.json", "hls/../../etc/passwd", ".hidden", "hls/%2e%2e/report.json"):
        response = viewer_api.get(f"/v2/jobs/{local_job}/outputs/{name}")
        assert response.status_code == 404, name
        assert set(response.json()) == {"detail"}
    assert viewer_api.get(f"/v2/jobs/{uuid.uuid4()}/outputs/report.json").status_code == 404
    assert anonymous_api.get(f"/v2/jobs/{local_job}/outputs/report.json").status_code == 401


def test_a_purged_file_is_a_404_not_a_500(viewer_api, local_job, settings):
    (settings.OUTPUT_ROOT_DIR / str(local_job) / "report.json").unlink()
    response = viewer_api.get(f"/v2/jobs/{local_job}/outputs/report.json")
    assert response.status_code == 404 and "gone" in response.json()["detail"]


# ---- S3 (moto's server as the endpoint) -----------------------------------------------------------


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_job(s3_endpoint, monkeypatch, settings, enqueue, worker):
    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = f"jet-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket=bucket)
    settings.S3_BUCKET, settings.S3_ENDPOINT_URL, settings.S3_PRESIGN_SECONDS = bucket, s3_endpoint, 120

    def url_of(job_id, name, data):
        key = f"outputs/{job_id}/{name}"
        client.put_object(Bucket=bucket, Key=key, Body=data)
        return f"s3://{bucket}/{key}"

    return publish(enqueue, worker, {"hls/master.m3u8": MASTER.encode(), "video.mp4": SEGMENT}, url_of)


def test_an_s3_output_redirects_to_a_presigned_url(viewer_api, s3_job):
    response = viewer_api.get(f"/v2/jobs/{s3_job}/outputs/video.mp4")
    assert response.status_code == 302
    location = response["Location"]
    assert "X-Amz-Expires=120" in location and "X-Amz-Signature=" in location
    with urlopen(location, timeout=10) as fetched:  # no credentials of ours: the signature is enough
        assert hashlib.sha256(fetched.read()).digest() == hashlib.sha256(SEGMENT).digest()


def test_an_s3_playlist_is_answered_here_so_its_references_stay_under_the_api(viewer_api, s3_job):
    response = viewer_api.get(f"/v2/jobs/{s3_job}/outputs/hls/master.m3u8")
    assert response.status_code == 200
    assert response.content == MASTER.encode()
    assert response["Content-Type"] == "application/vnd.apple.mpegurl" and response["ETag"]


def test_the_webhook_body_carries_each_outputs_download_url(local_job, settings):
    from workers.stages.webhook import job_summary

    settings.PUBLIC_URL = "https://jet.example.com"
    outputs = {o["name"]: o for o in job_summary(str(local_job))["outputs"]}
    assert outputs["hls/master.m3u8"]["download_url"] == (
        f"https://jet.example.com/v2/jobs/{local_job}/outputs/hls/master.m3u8"
    )
    settings.PUBLIC_URL = ""
    assert job_summary(str(local_job))["outputs"][0]["download_url"].startswith(
        f"/v2/jobs/{local_job}/outputs/"
    )
