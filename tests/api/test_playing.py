"""Players on any site: CORS, HEAD on every GET route, and signed expiring playback URLs.

The browser half (hls.js and Shaka Player on another origin) is tests/players/test_players_browser.py.
"""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.core import signing
from django.test import Client
from django.utils import timezone

from api import playback
from api.api import api
from tests.api.conftest import MASTER, SEGMENT

pytestmark = pytest.mark.django_db

PLAYER = "https://player.example"
# Headers that may differ between two responses to the same request.
VOLATILE = {"date", "set-cookie", "vary"}


@pytest.fixture
def cors(settings):
    settings.CORS_ALLOWED_ORIGINS = [PLAYER]
    settings.CORS_ALLOW_ALL_ORIGINS = False


def signed(api_client, job_id, **body):
    response = api_client.post(f"/v2/jobs/{job_id}/playback", body or None)
    assert response.status_code == 200, response.content
    return response.json()


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def path_of(url: str) -> str:
    return urlsplit(url).path


# ---- CORS -------------------------------------------------------------------------------------------


def test_a_preflight_from_a_listed_origin_is_answered(cors, anonymous_api, local_job):
    response = anonymous_api.client.options(
        f"/v2/jobs/{local_job}/outputs/hls/master.m3u8",
        headers={
            "Origin": PLAYER,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization, range",
        },
    )
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == PLAYER
    allowed = {h.strip() for h in response["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "range", "if-range", "if-none-match"} <= allowed
    assert "GET" in response["Access-Control-Allow-Methods"]
    assert "Access-Control-Allow-Credentials" not in response  # tokens, never cookies


def test_a_range_response_exposes_its_range_headers_to_the_listed_origin(cors, viewer_api, local_job):
    response = viewer_api.get(
        f"/v2/jobs/{local_job}/outputs/hls/360p/seg_000.ts", headers={"Origin": PLAYER, "Range": "bytes=0-9"}
    )
    assert response.status_code == 206
    assert response["Access-Control-Allow-Origin"] == PLAYER
    exposed = {h.strip().lower() for h in response["Access-Control-Expose-Headers"].split(",")}
    assert {"content-range", "accept-ranges", "content-length", "etag"} <= exposed


def test_an_origin_not_on_the_list_gets_no_cors_headers(cors, viewer_api, local_job):
    response = viewer_api.get(
        f"/v2/jobs/{local_job}/outputs/report.json", headers={"Origin": "https://evil.example"}
    )
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response
    preflight = viewer_api.client.options(
        "/v2/jobs", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
    )
    assert "Access-Control-Allow-Origin" not in preflight


def test_cors_is_off_by_default_and_the_dashboard_never_answers_cross_origin(settings, viewer_api):
    assert settings.CORS_ALLOWED_ORIGINS == [] and not settings.CORS_ALLOW_ALL_ORIGINS
    assert "Access-Control-Allow-Origin" not in viewer_api.get("/v2/jobs", headers={"Origin": PLAYER})
    settings.CORS_ALLOW_ALL_ORIGINS = True
    assert viewer_api.get("/v2/jobs", headers={"Origin": PLAYER})["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Origin" not in Client().get("/accounts/login/", headers={"Origin": PLAYER})


# ---- HEAD -------------------------------------------------------------------------------------------


def get_routes() -> list[str]:
    """Every GET path of the OpenAPI document (which lists every route the API has) but the tus
    upload's: its HEAD is tus's offset request, not a GET without a body (tests/api/test_uploads.py)."""
    return [
        path
        for path, operations in api.get_openapi_schema()["paths"].items()
        if "get" in operations and "uploads" not in operations["get"].get("tags", [])
    ]


def test_the_routes_walked_below_are_every_get_route():
    # The resolver and the document agree: nothing served by the API is missing from the walk.
    assert {"/v2/jobs", "/healthz", "/metrics", "/v2/jobs/{job_id}/outputs/{name}"} <= set(get_routes())
    assert len(get_routes()) >= 14


def test_head_on_every_get_route_has_the_get_headers_and_no_body(viewer_api, local_job, worker):
    token = path_of(signed(viewer_api, local_job)["url"]).rstrip("/").rsplit("/", 1)[1]
    values = {"job_id": str(local_job), "name": "hls/360p/seg_000.ts", "uid": worker[0], "token": token}
    for route in get_routes():
        path = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], route)
        get = viewer_api.get(path)
        head = viewer_api.client.head(path, headers=viewer_api.headers())
        assert get.status_code == 200, (route, get.status_code)
        assert head.status_code == 200, (route, head.status_code, head.content)
        assert body(head) == b"", route
        same = {k.lower(): v for k, v in get.headers.items() if k.lower() not in VOLATILE}
        assert {k.lower(): v for k, v in head.headers.items() if k.lower() not in VOLATILE} == same, route
        assert head["Content-Length"] == str(len(body(get))), route


def test_head_keeps_ranges_validators_and_errors(viewer_api, anonymous_api, local_job):
    path = f"/v2/jobs/{local_job}/outputs/hls/360p/seg_000.ts"
    ranged = viewer_api.client.head(path, headers=viewer_api.headers({"Range": "bytes=0-9"}))
    assert (ranged.status_code, ranged["Content-Range"], ranged["Content-Length"]) == (
        206,
        "bytes 0-9/10240",
        "10",
    )
    assert body(ranged) == b""
    etag = viewer_api.get(path)["ETag"]
    assert (
        viewer_api.client.head(path, headers=viewer_api.headers({"If-None-Match": etag})).status_code == 304
    )
    assert anonymous_api.client.head("/v2/jobs").status_code == 401
    # A POST-only route: 405 with Allow, as for any other method it does not take.
    refused = viewer_api.client.head(f"/v2/queue/{local_job}/pause", headers=viewer_api.headers())
    assert refused.status_code == 405 and "POST" in refused["Allow"]


# ---- signed playback URLs ---------------------------------------------------------------------------


def test_a_signed_url_plays_the_outputs_without_credentials(viewer_api, anonymous_api, local_job):
    made = signed(viewer_api, local_job, ttl_seconds=120)
    assert made["url"].endswith("/") and f"/v2/jobs/{local_job}/playback/" in made["url"]
    assert made["playlist_url"] == made["url"] + "hls/master.m3u8"
    expires = timezone.datetime.fromisoformat(made["expires_at"])
    assert timedelta(seconds=110) < expires - timezone.now() <= timedelta(seconds=120)
    master = anonymous_api.get(path_of(made["playlist_url"]))
    assert master.status_code == 200 and b"".join(master.streaming_content) == MASTER.encode()
    # The playlist's relative reference resolves under the token: the player needs nothing else.
    assert anonymous_api.get(path_of(made["url"]) + "hls/360p/index.m3u8").status_code == 200
    segment = anonymous_api.get(
        path_of(made["url"]) + "hls/360p/seg_000.ts", headers={"Range": "bytes=10-19"}
    )
    assert segment.status_code == 206 and b"".join(segment.streaming_content) == SEGMENT[10:20]


def test_the_default_lifetime_is_an_hour_and_the_bounds_are_enforced(viewer_api, local_job):
    made = signed(viewer_api, local_job)
    expires = timezone.datetime.fromisoformat(made["expires_at"])
    assert timedelta(minutes=59) < expires - timezone.now() <= timedelta(hours=1)
    for bad in (59, 604_801, True, "3600", 3600.5):
        response = viewer_api.post(f"/v2/jobs/{local_job}/playback", {"ttl_seconds": bad})
        assert response.status_code == 422, bad
        assert response.json()["errors"][0]["field"] == "ttl_seconds"
    assert viewer_api.post(f"/v2/jobs/{local_job}/playback", {"ttl_seconds": 604_800}).status_code == 200


def test_an_expired_url_is_refused_with_403(viewer_api, anonymous_api, local_job):
    past = timezone.now() - timedelta(seconds=1)
    token = playback.make_token(local_job, past)
    response = anonymous_api.get(f"/v2/jobs/{local_job}/playback/{token}/hls/master.m3u8")
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json" and "expired" in response.json()["detail"]


def test_an_altered_url_is_refused_with_403(viewer_api, anonymous_api, local_job, completed_job):
    base = path_of(signed(viewer_api, local_job)["url"])
    token = base.rstrip("/").rsplit("/", 1)[1]
    payload, signature = token.rsplit(":", 1)
    forged = f"{payload}:{'A' if signature[0] != 'A' else 'B'}{signature[1:]}"
    assert anonymous_api.get(base.replace(token, forged) + "report.json").status_code == 403
    # A real token of one job opens nothing of another.
    other = base.replace(str(local_job), str(completed_job)) + "report.json"
    denied = anonymous_api.get(other)
    assert denied.status_code == 403 and "another job" in denied.json()["detail"]
    # A longer lifetime cannot be written into the payload without the key.
    loaded = signing.loads(token, salt=playback.SALT)
    loaded["e"] += 10**6
    tampered = signing.dumps(loaded, salt=playback.SALT, key="not the secret key")
    assert anonymous_api.get(base.replace(token, tampered) + "report.json").status_code == 403


def test_revoking_ends_every_url_of_the_job_and_only_of_that_job(
    viewer_api, operator_api, anonymous_api, local_job, completed_job
):
    first, second = signed(viewer_api, local_job), signed(viewer_api, local_job)
    elsewhere = signed(viewer_api, completed_job)
    assert (
        viewer_api.client.delete(f"/v2/jobs/{local_job}/playback", headers=viewer_api.headers()).status_code
        == 403
    )
    revoked = operator_api.client.delete(f"/v2/jobs/{local_job}/playback", headers=operator_api.headers())
    assert revoked.status_code == 200 and revoked.json() == {"generation": 1}
    for made in (first, second):
        response = anonymous_api.get(path_of(made["url"]) + "report.json")
        assert response.status_code == 403 and "revoked" in response.json()["detail"]
    assert anonymous_api.client.head(path_of(first["url"]) + "report.json").status_code == 403
    fresh = signed(viewer_api, local_job)
    assert anonymous_api.get(path_of(fresh["url"]) + "report.json").status_code == 200
    # The other job's URL was not touched (its output is missing: 404, not 403).
    assert anonymous_api.get(path_of(elsewhere["url"]) + "report.json").status_code == 404


def test_who_may_make_a_playback_url(viewer_api, anonymous_api, token_for, bearer, dave, local_job):
    assert anonymous_api.post(f"/v2/jobs/{local_job}/playback").status_code == 401
    assert bearer(token_for(dave, "read")).post(f"/v2/jobs/{local_job}/playback").status_code == 403
    assert viewer_api.post("/v2/jobs/00000000-0000-0000-0000-000000000000/playback").status_code == 404
    assert (
        viewer_api.post(f"/v2/jobs/{local_job}/playback", {"ttl": 60}).json()["errors"][0]["field"] == "ttl"
    )


def test_a_session_needs_csrf_to_make_one(charlie, local_job):
    client = Client(enforce_csrf_checks=True)
    client.force_login(charlie)
    refused = client.post(f"/v2/jobs/{local_job}/playback", "{}", content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    client.get("/accounts/login/")
    csrf = client.cookies["csrftoken"].value
    made = client.post(
        f"/v2/jobs/{local_job}/playback", "{}", content_type="application/json", headers={"X-CSRFToken": csrf}
    )
    assert made.status_code == 200, made.content


def test_a_signed_url_never_reaches_outside_the_job(viewer_api, anonymous_api, local_job):
    base = path_of(signed(viewer_api, local_job)["url"])
    for name in ("../../outputs/report.json", "hls/../../x", "missing.mp4", "%2e%2e/report.json"):
        assert anonymous_api.get(base + name).status_code == 404, name


# ---- JSON on every error status -----------------------------------------------------------------


def test_errors_django_answers_itself_are_json_under_the_api(viewer_api, local_job):
    # A Host not in ALLOWED_HOSTS: Django refuses it before any view (DisallowedHost → 400).
    bad_host = viewer_api.client.get("/v2/jobs", headers=viewer_api.headers(), HTTP_HOST="evil.example")
    assert bad_host.status_code == 400 and bad_host["Content-Type"] == "application/json"
    assert "Host" in bad_host.json()["detail"]
    statuses = {
        416: viewer_api.get(f"/v2/jobs/{local_job}/outputs/report.json", headers={"Range": "bytes=999-"}),
        405: viewer_api.client.put("/v2/jobs", headers=viewer_api.headers()),
        404: viewer_api.get("/v2/nothing-here"),
        401: Client().get("/v2/jobs"),
    }
    for status, response in statuses.items():
        assert response.status_code == status
        assert response["Content-Type"] == "application/json" and response.json()["detail"], status
    # Django's own pages stay HTML outside the API.
    page = Client().get("/accounts/login/", HTTP_HOST="evil.example")
    assert page.status_code == 400 and "application/json" not in page["Content-Type"]
