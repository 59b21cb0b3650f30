"""Where a published output can be downloaded over HTTP: `GET /v2/jobs/{id}/outputs/{name}`.

Shared by the API (which answers with the request's own host) and the webhook stage (which has no
request, so it uses JETENCODE_PUBLIC_URL, or a path relative to the API when that is unset). An
output's name may contain '/' (HLS renditions: `hls/720p/index.m3u8`): each component is
percent-encoded, the slashes are kept, so a playlist's relative references resolve to the other
outputs of the same job.
"""

from __future__ import annotations

from urllib.parse import quote

from django.conf import settings


def output_path(job_id, name: str, prefix: str = "/") -> str:
    """The download path of output `name` of job `job_id`, under the site's script prefix."""
    return f"{prefix}v2/jobs/{job_id}/outputs/{quote(name, safe='/')}"


def public_output_url(job_id, name: str) -> str:
    """The absolute download URL when JETENCODE_PUBLIC_URL is set, else the path."""
    base = getattr(settings, "PUBLIC_URL", "") or ""
    return base.rstrip("/") + output_path(job_id, name)
