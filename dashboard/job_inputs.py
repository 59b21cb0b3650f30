"""What a job works on, in a few words, for the job list's Input column.

Read from each job's params: `input` (a media-root path), `video_id` (a library asset, shown by its
title), `input_url` (its file name; URLs shown without query or user info), `inputs` / `input_urls`
/ `video_ids` (several), `directory` (scans and compilations). Two queries for a
whole page: the params of its jobs, then the titles of the assets they name.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.db.models import Count

from media.models import MediaAsset
from media.sources.guard import redact
from scheduler.models import Job, JobOutput


@dataclass(frozen=True)
class JobInput:
    label: str  # "videos/demo-landscape.mp4", "Demo · portrait 360×640, 4 s", "4 clips", "videos/"
    title: str = ""  # the hover text: the full path or id


def _asset_ids(params: dict) -> list[str]:
    ids = [params.get("video_id")] + list(params.get("video_ids") or [])
    return [str(i) for i in ids if i]


def _describe(params: dict, titles: dict[str, str]) -> JobInput | None:
    if params.get("input"):
        return JobInput(str(params["input"]), str(params["input"]))
    if params.get("video_id"):
        asset = str(params["video_id"])
        return JobInput(titles.get(asset, asset[:8]), f"library asset {asset}")
    if params.get("input_url"):
        shown = redact(str(params["input_url"]))  # never a presigned URL's credentials
        return JobInput(shown.rsplit("/", 1)[-1] or shown, shown)
    several = list(params.get("inputs") or []) + list(params.get("video_ids") or [])
    several += [redact(str(url)) for url in params.get("input_urls") or []]
    if several:
        names = [titles.get(str(i), str(i)) for i in several]
        return JobInput(f"{len(several)} clips", ", ".join(names))
    if params.get("directory"):
        return JobInput(f"{str(params['directory']).rstrip('/')}/", "every video under it")
    return None


def job_inputs(job_ids: list) -> dict:
    """{job id: JobInput or None} for the given jobs."""
    params = dict(Job.objects.filter(id__in=job_ids).values_list("id", "params"))
    wanted = set()
    for value in params.values():
        for raw in _asset_ids(value or {}):
            try:
                wanted.add(uuid.UUID(raw))
            except ValueError:
                continue
    titles = {
        str(asset_id): title or path
        for asset_id, title, path in MediaAsset.objects.filter(id__in=wanted).values_list(
            "id", "title", "path"
        )
    }
    return {job_id: _describe(value or {}, titles) for job_id, value in params.items()}


def output_counts(job_ids: list) -> dict:
    """{job id: how many outputs it published} (jobs with none are absent)."""
    rows = JobOutput.objects.filter(job_id__in=job_ids).values("job_id").annotate(n=Count("id"))
    return {row["job_id"]: row["n"] for row in rows}
