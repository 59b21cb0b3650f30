"""tus 1.0 at /v2/uploads/, request by request (Django's test client): the headers each method
answers with, every refusal naming its header, checksums (460 keeps nothing), termination,
limits, expiry, and the library asset a finished upload becomes. The real clients (tuspy over a
dropped connection, then a transcode) are in tests/e2e/test_sources.py."""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from media import uploads
from media.models import MediaAsset, Upload
from tests.kit.media import generate_clips
from tests.kit.web import issue_token

pytestmark = pytest.mark.django_db

TUS = {"HTTP_TUS_RESUMABLE": "1.0.0"}
OFFSET_STREAM = "application/offset+octet-stream"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    out = tmp_path_factory.mktemp("upload-clip")
    generate_clips(out, {"clip.mp4": {"width": 160, "height": 90, "seconds": 1.0, "audio": True}})
    return (out / "clip.mp4").read_bytes()


@pytest.fixture
def media_root(settings, tmp_path):
    settings.MEDIA_ROOT_DIR = tmp_path / "media"
    settings.MEDIA_ROOT_DIR.mkdir()
    settings.SOURCES = {**settings.SOURCES, "UPLOAD_MAX_BYTES": 10_000_000, "UPLOAD_MAX_CONCURRENT": 3}
    return settings.MEDIA_ROOT_DIR


@functools.cache
def documented_statuses() -> dict[tuple[str, str], set[str]]:
    """{(method, "collection" or "upload"): the statuses the OpenAPI document declares}
    (api.openapi_tus): every answer these tests get must be one of them."""
    paths = Client().get("/v2/openapi.json").json()["paths"]
    return {
        (method, kind): set(operation["responses"])
        for kind, path in (("collection", "/v2/uploads/"), ("upload", "/v2/uploads/{upload_id}"))
        for method, operation in paths[path].items()
    }


class Tus:
    """An integrator's raw tus requests with one bearer token; each answer's status is checked
    against the OpenAPI document's."""

    def __init__(self, token: str | None):
        self.client = Client()
        self.auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def _documented(self, method: str, url: str, response):
        kind = "collection" if url == "/v2/uploads/" else "upload"
        declared = documented_statuses()[(method, kind)]
        assert str(response.status_code) in declared, (method, url, response.status_code, sorted(declared))
        return response

    def options(self):
        return self._documented("options", "/v2/uploads/", self.client.options("/v2/uploads/"))

    def create(self, length: int, metadata: dict[str, str] | None = None, **headers):
        encoded = ",".join(
            f"{k} {base64.b64encode(v.encode()).decode()}" for k, v in (metadata or {}).items()
        )
        extra = {"HTTP_UPLOAD_LENGTH": str(length), **TUS, **self.auth, **headers}
        if encoded:
            extra["HTTP_UPLOAD_METADATA"] = encoded
        return self._documented(
            "post", "/v2/uploads/", self.client.generic("POST", "/v2/uploads/", b"", **extra)
        )

    def patch(self, url: str, offset: int, data: bytes, *, checksum=None, content_type=OFFSET_STREAM):
        extra = {"HTTP_UPLOAD_OFFSET": str(offset), **TUS, **self.auth}
        if checksum:
            extra["HTTP_UPLOAD_CHECKSUM"] = checksum
        return self._documented(
            "patch", url, self.client.generic("PATCH", url, data, content_type=content_type, **extra)
        )

    def head(self, url: str):
        return self._documented("head", url, self.client.head(url, **TUS, **self.auth))

    def get(self, url: str):
        return self._documented("get", url, self.client.get(url, **self.auth))

    def delete(self, url: str):
        return self._documented("delete", url, self.client.delete(url, **TUS, **self.auth))


def sha(algorithm: str, data: bytes) -> str:
    return f"{algorithm} {base64.b64encode(hashlib.new(algorithm, data).digest()).decode()}"


@pytest.fixture
def tus(bob, media_root):
    return Tus(issue_token(bob, "operate"))


def location(response) -> str:
    assert response.status_code == 201, response.content
    return response["Location"].removeprefix("http://testserver")


def test_options_advertises_the_protocol_without_credentials(media_root):
    response = Tus(None).options()
    assert response.status_code == 204
    assert response["Tus-Resumable"] == "1.0.0" and response["Tus-Version"] == "1.0.0"
    assert set(response["Tus-Extension"].split(",")) >= {"creation", "termination", "checksum", "expiration"}
    assert "sha256" in response["Tus-Checksum-Algorithm"].split(",")
    assert response["Tus-Max-Size"] == "10000000"


def test_an_upload_in_three_patches_becomes_a_library_asset(tus, clip, media_root):
    url = location(tus.create(len(clip), {"filename": "holiday.mp4"}))
    assert url.startswith("/v2/uploads/")
    thirds = [clip[: len(clip) // 3], clip[len(clip) // 3 : 2 * len(clip) // 3], clip[2 * len(clip) // 3 :]]
    offset = 0
    for part in thirds:
        response = tus.patch(url, offset, part, checksum=sha("sha256", part))
        assert response.status_code == 204, response.content
        offset += len(part)
        assert response["Upload-Offset"] == str(offset) and response["Tus-Resumable"] == "1.0.0"
    head = tus.head(url)
    assert head.status_code == 200 and head["Upload-Offset"] == head["Upload-Length"] == str(len(clip))
    assert head["Cache-Control"] == "no-store"
    body = tus.get(url).json()
    upload_id = url.rsplit("/", 1)[1]
    assert body["complete"] is True and body["size"] == len(clip)
    assert body["sha256"] == hashlib.sha256(clip).hexdigest()
    assert body["path"] == f"uploads/{upload_id}.mp4" and body["valid"] is True
    asset = MediaAsset.objects.get(pk=body["video_id"])
    assert asset.path == body["path"] and asset.directory == "uploads" and asset.title == "holiday"
    assert asset.width == 160 and asset.height == 90 and asset.valid
    assert (media_root / body["path"]).read_bytes() == clip
    assert sorted(p.name for p in (media_root / "uploads").iterdir()) == [f"{upload_id}.mp4"]


def test_a_checksum_mismatch_answers_460_and_keeps_nothing_of_the_request(tus, media_root):
    url = location(tus.create(10))
    assert tus.patch(url, 0, b"abcd", checksum=sha("sha1", b"abcd")).status_code == 204
    response = tus.patch(url, 4, b"efgh", checksum=sha("sha256", b"EFGH"))
    assert response.status_code == 460 and "Upload-Checksum" in response.json()["detail"]
    assert tus.head(url)["Upload-Offset"] == "4"
    assert uploads.part_path(url.rsplit("/", 1)[1]).read_bytes() == b"abcd"
    assert tus.patch(url, 4, b"efghij", checksum=sha("sha256", b"efghij")).status_code == 204


def test_a_whole_file_sha256_mismatch_removes_the_upload(tus, media_root):
    url = location(tus.create(4, {"filename": "x.mp4", "sha256": hashlib.sha256(b"good").hexdigest()}))
    response = tus.patch(url, 0, b"evil")
    assert response.status_code == 460 and "sha256" in response.json()["detail"]
    assert tus.head(url).status_code == 404
    assert Upload.objects.count() == 0 and MediaAsset.objects.count() == 0
    assert list((media_root / "uploads").iterdir()) == []


@pytest.mark.parametrize(
    ("headers", "status", "named"),
    [
        ({"HTTP_TUS_RESUMABLE": "0.2.2"}, 412, "Tus-Resumable"),
        ({"HTTP_UPLOAD_LENGTH": "ten"}, 400, "Upload-Length"),
        ({"HTTP_UPLOAD_LENGTH": "0"}, 400, "Upload-Length"),
        ({"HTTP_UPLOAD_LENGTH": "10000001"}, 413, "Upload-Length"),
        ({"HTTP_UPLOAD_DEFER_LENGTH": "1"}, 400, "Upload-Defer-Length"),
        ({"HTTP_UPLOAD_METADATA": "filename not*base64"}, 400, "Upload-Metadata"),
    ],
)
def test_creation_refusals_name_the_header(tus, headers, status, named):
    length = headers.pop("HTTP_UPLOAD_LENGTH", "10")
    response = tus.client.generic(
        "POST", "/v2/uploads/", b"", **{**TUS, **tus.auth, "HTTP_UPLOAD_LENGTH": length, **headers}
    )
    assert response.status_code == status and named in response.json()["detail"], response.content
    assert response["Tus-Resumable"] == "1.0.0"
    assert Upload.objects.count() == 0


def test_patch_refusals_name_the_header(tus):
    url = location(tus.create(8))
    wrong_offset = tus.patch(url, 3, b"abc")
    assert wrong_offset.status_code == 409 and "Upload-Offset" in wrong_offset.json()["detail"]
    wrong_type = tus.patch(url, 0, b"abc", content_type="application/octet-stream")
    assert wrong_type.status_code == 415 and "Content-Type" in wrong_type.json()["detail"]
    too_long = tus.patch(url, 0, b"123456789")
    assert too_long.status_code == 413 and "Content-Length" in too_long.json()["detail"]
    bad_algorithm = tus.patch(url, 0, b"abc", checksum="md5 AAAA")
    assert bad_algorithm.status_code == 400 and "Upload-Checksum" in bad_algorithm.json()["detail"]
    assert tus.head(url)["Upload-Offset"] == "0"


def test_only_operate_tokens_of_the_owner_may_use_an_upload(tus, charlie, alice, media_root):
    assert Tus(None).create(10).status_code == 401
    session = Client()  # a dashboard login is not enough: uploads take bearer tokens only
    session.force_login(alice)
    assert session.generic("POST", "/v2/uploads/", b"", HTTP_UPLOAD_LENGTH="10", **TUS).status_code == 401
    viewer = Tus(issue_token(charlie, "read")).create(10)
    assert viewer.status_code == 403 and "operate" in viewer.json()["detail"]
    url = location(tus.create(10))
    stranger = Tus(issue_token(alice, "operate"))
    assert stranger.head(url).status_code == 404
    assert stranger.patch(url, 0, b"x").status_code == 404


def test_termination_removes_the_bytes(tus, media_root):
    url = location(tus.create(10))
    tus.patch(url, 0, b"12345")
    assert tus.delete(url).status_code == 204
    assert tus.head(url).status_code == 404
    assert list((media_root / "uploads").iterdir()) == []


def test_uploads_in_progress_per_token_are_limited(tus):
    for _ in range(3):
        location(tus.create(10))
    refused = tus.create(10)
    assert refused.status_code == 429 and "JETENCODE_UPLOAD_MAX_CONCURRENT" in refused.json()["detail"]


def test_abandoned_uploads_expire_and_maintenance_removes_their_bytes(tus, media_root):
    url = location(tus.create(10))
    tus.patch(url, 0, b"12345")
    upload_id = url.rsplit("/", 1)[1]
    Upload.objects.filter(pk=upload_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert tus.head(url).status_code == 410
    assert tus.patch(url, 5, b"678").status_code == 410
    assert uploads.expire_abandoned() == 1
    assert Upload.objects.count() == 0 and list((media_root / "uploads").iterdir()) == []


def test_get_before_completion_says_how_far_it_got(tus):
    url = location(tus.create(10))
    tus.patch(url, 0, b"123")
    body = tus.get(url).json()
    assert body == {**body, "complete": False, "offset": 3, "length": 10}
    assert "video_id" not in body


def test_a_patch_may_be_larger_than_the_apis_body_limit(tus, settings):
    """PATCH bodies stream to disk: JETENCODE_MAX_BODY_BYTES (JSON bodies) does not apply."""
    data = os.urandom(3 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    url = location(tus.create(len(data)))
    response = tus.patch(url, 0, data, checksum=sha("sha256", data))
    assert response.status_code == 204 and response["Upload-Offset"] == str(len(data))
    assert tus.get(url).json()["sha256"] == hashlib.sha256(data).hexdigest()


def test_clients_that_cannot_send_patch_may_override_a_post(tus):
    url = location(tus.create(6))
    response = tus.client.generic(
        "POST",
        url,
        b"abc",
        content_type=OFFSET_STREAM,
        HTTP_X_HTTP_METHOD_OVERRIDE="PATCH",
        HTTP_UPLOAD_OFFSET="0",
        **TUS,
        **tus.auth,
    )
    assert response.status_code == 204 and response["Upload-Offset"] == "3"
