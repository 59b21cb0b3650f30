"""Signed, expiring playback URLs: a job's outputs for players that cannot send a header.

Safari's native HLS, a `<video>` tag, VLC or ffplay cannot add `Authorization: Bearer`, so
`POST /v2/jobs/{id}/playback` (read scope) hands out a URL whose credential is in the *path*:

    /v2/jobs/{id}/playback/{token}/hls/master.m3u8

A playlist's relative references (`720p/index.m3u8`, `seg_00001.m4s`) resolve under the same
`.../playback/{token}/` prefix, so every request the player makes carries the token without the
playlist being rewritten. The token is Django's signing of (job id, generation, expiry) with the
project's SECRET_KEY: stateless, and good for that job's outputs only. `DELETE` advances the job's
generation (api.models.PlaybackGeneration), which invalidates every URL made before at once.

An altered, expired or revoked token, or one of another job, gets 403 `{"detail": ...}`; the
outputs themselves are served exactly as `GET /v2/jobs/{id}/outputs/{name}` serves them (ranges,
validators, S3 redirects), and with CORS (settings: JETENCODE_CORS_ORIGINS) on another site too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from django.core import signing
from django.db import transaction
from django.db.models import F
from django.http import HttpRequest, HttpResponse
from django.urls import get_script_prefix
from django.utils import timezone
from ninja import Router, Schema
from ninja.errors import AuthorizationError
from ninja.utils import check_csrf
from pydantic import ConfigDict, Field

from api.auth import SessionAuth, TokenAuth
from api.errors import AUTH_ERRORS, detail_response, responses
from api.models import PlaybackGeneration
from api.outputs import OPENAPI_RESPONSES, find_output, serve_local, serve_s3
from api.schemas import JsonInt
from scheduler import queries
from scheduler.models import JobOutput
from scheduler.repository import JobNotFound

router = Router(tags=["playback"])

SALT = "jetencode.playback.v1"
MIN_TTL_SECONDS = 60
MAX_TTL_SECONDS = 7 * 24 * 3600
DEFAULT_TTL_SECONDS = 3600
MASTER_PLAYLIST = "hls/master.m3u8"


# ---- who may ask for one: anyone who may view the job ------------------------------------------


def _as_viewer(request: HttpRequest, authenticate):
    """Run the project's authorization as for a GET: making a playback URL changes nothing a
    viewer could not already read with a read-scope token."""
    method = request.method
    request.method = "GET"
    try:
        return authenticate()
    finally:
        request.method = method


class PlaybackTokenAuth(TokenAuth):
    def authenticate(self, request: HttpRequest, token: str):
        return _as_viewer(request, lambda: super(PlaybackTokenAuth, self).authenticate(request, token))


class PlaybackSessionAuth(SessionAuth):
    def __call__(self, request: HttpRequest):
        user = getattr(request, "user", None)
        # The cookie is sent by the browser on its own: CSRF still applies to this POST.
        if user is not None and user.is_authenticated and check_csrf(request) is not None:
            raise AuthorizationError(
                message="CSRF check failed: send the csrftoken cookie's value in an X-CSRFToken header"
            )
        return _as_viewer(request, lambda: super(PlaybackSessionAuth, self).__call__(request))


# The same credentials as every operation, so the same security schemes in the OpenAPI document
# (ninja names a scheme after its class): only the authorization differs.
PlaybackTokenAuth.__name__ = TokenAuth.__name__
PlaybackSessionAuth.__name__ = SessionAuth.__name__
VIEWER_AUTH = [PlaybackTokenAuth(), PlaybackSessionAuth()]


# ---- the token ------------------------------------------------------------------------------------


class PlaybackDenied(Exception):
    """The token in a playback URL does not open this job's outputs (403)."""


def current_generation(job_id: UUID) -> int:
    row = PlaybackGeneration.objects.filter(job_id=job_id).values_list("generation", flat=True).first()
    return row or 0


def make_token(job_id: UUID, expires_at: datetime) -> str:
    payload = {"j": str(job_id), "g": current_generation(job_id), "e": int(expires_at.timestamp())}
    return signing.dumps(payload, salt=SALT)


def check_token(job_id: UUID, token: str) -> None:
    """Raise PlaybackDenied unless `token` was made for `job_id`, is unexpired and not revoked."""
    try:
        payload = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        raise PlaybackDenied("this playback URL is not valid: its signature does not match") from None
    if not isinstance(payload, dict) or payload.get("j") != str(job_id):
        raise PlaybackDenied("this playback URL was made for another job")
    expires = payload.get("e")
    if not isinstance(expires, int) or expires <= timezone.now().timestamp():
        raise PlaybackDenied("this playback URL has expired: ask POST /v2/jobs/{id}/playback for a new one")
    if payload.get("g") != current_generation(job_id):
        raise PlaybackDenied("this playback URL has been revoked (DELETE /v2/jobs/{id}/playback)")


def revoke(job_id: UUID) -> int:
    """Advance the job's generation; returns the new one."""
    with transaction.atomic():
        row, created = PlaybackGeneration.objects.select_for_update().get_or_create(job_id=job_id)
        PlaybackGeneration.objects.filter(job_id=job_id).update(
            generation=F("generation") + 1, revoked_at=timezone.now()
        )
    return row.generation + 1


# ---- the endpoints ----------------------------------------------------------------------------------


class PlaybackIn(Schema):
    model_config = ConfigDict(extra="forbid")
    ttl_seconds: JsonInt = Field(
        DEFAULT_TTL_SECONDS,
        ge=MIN_TTL_SECONDS,
        le=MAX_TTL_SECONDS,
        description="How long the URL works, in seconds (1 minute to 7 days).",
    )


class PlaybackOut(Schema):
    url: str = Field(..., description="Prefix of the job's outputs: append an output's name.")
    playlist_url: str | None = Field(
        None, description="The HLS master playlist under `url`, when the job published one."
    )
    expires_at: datetime


class RevokedOut(Schema):
    generation: int = Field(..., description="URLs made before this generation no longer work.")


def _job_or_404(job_id: UUID):
    job = queries.job_row(job_id)
    if job is None:
        raise JobNotFound("job not found")
    return job


@router.post(
    "/{job_id}/playback",
    auth=VIEWER_AUTH,
    response={200: PlaybackOut, **responses(*AUTH_ERRORS, 404, 422)},
    summary="Make a signed playback URL",
)
def create_playback(request: HttpRequest, job_id: UUID, payload: PlaybackIn | None = None):
    """A URL that serves this job's outputs without credentials until `expires_at` (read scope).
    The token is in the path, so relative references inside HLS playlists keep it."""
    job = _job_or_404(job_id)
    ttl = payload.ttl_seconds if payload is not None else DEFAULT_TTL_SECONDS
    expires_at = (timezone.now() + timedelta(seconds=ttl)).replace(microsecond=0)
    base = request.build_absolute_uri(f"{get_script_prefix()}v2/jobs/{job_id}/playback/")
    url = f"{base}{make_token(job_id, expires_at)}/"
    has_master = JobOutput.objects.filter(
        job_id=job_id, execution_id=job.execution_id, name=MASTER_PLAYLIST
    ).exists()
    return {
        "url": url,
        "playlist_url": url + MASTER_PLAYLIST if has_master else None,
        "expires_at": expires_at.astimezone(UTC),
    }


@router.delete(
    "/{job_id}/playback",
    response={200: RevokedOut, **responses(*AUTH_ERRORS, 404, 422)},
    summary="Revoke every playback URL of a job",
)
def revoke_playback(request: HttpRequest, job_id: UUID):
    """Every signed URL made for this job stops working (403) at once; new ones can be made."""
    _job_or_404(job_id)
    return {"generation": revoke(job_id)}


@router.get(
    "/{job_id}/playback/{token}/{path:name}",
    auth=None,
    response=responses(403, 404, 422),
    summary="Play an output through a signed URL",
    openapi_extra={"responses": OPENAPI_RESPONSES},
)
def play_output(request: HttpRequest, job_id: UUID, token: str, name: str) -> HttpResponse:
    """Output `name` of the job, as `GET /v2/jobs/{id}/outputs/{name}` serves it, for whoever holds
    an unexpired, unrevoked token of this job (no other credentials)."""
    try:
        check_token(job_id, token)
    except PlaybackDenied as exc:
        return detail_response(403, str(exc))
    output = find_output(job_id, name)
    if output.storage_url.startswith("s3://"):
        return serve_s3(request, output)
    return serve_local(request, output)
