"""The shared scratch of split transcodes (issue 33, DECISIONS 19).

A split job keeps nothing of its own in a worker's workspace: its chunks, audio, stitched
renditions, HLS package and quality document live in the shared scratch, either
`JETENCODE_SCRATCH_ROOT/<job id>/<execution id>/` (a directory every worker mounts; by default one
under the var directory, which every worker of one machine shares; the workspace's layout, so
`workers.workspaces.sweep` removes it the same way) or, when JETENCODE_S3_BUCKET is set, the keys
`scratch/<job id>/<execution id>/...` of that bucket (each worker keeps a cache of what it read in
the job's workspace, which is only a cache: every file is in S3).

Two-phase, like outputs: a stage writes its files under a directory named by its task id and attempt
(`<what>/t<task>a<attempt>/`) and names them in its result or in its children's payloads (`rel`,
which with S3 uploads them under those names), which the scheduler stores only with the fenced
finish. A later stage reads only the files an accepted finish named (`resolve`), so a superseded
attempt's files (a zombie that kept writing after its lease was lost) are never read; they go with
the job's scratch when it ends (`sweep`, from every worker's maintenance thread).

`ScratchView` lets the existing handlers run on the scratch: it is the stage context whose every
child is placed `cluster` and stays on the scratch.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import replace
from pathlib import Path

from django.conf import settings

from media.paths import UnsafePathError, workspace_file
from workers.stages.base import ChildSpec, PermanentFailure, StageContext

SCRATCH_KEY = "scratch"  # payload flag: this stage belongs to a split job and works on the scratch
S3_SCRATCH = "scratch"  # key prefix under JETENCODE_S3_PREFIX's parent: <bucket>/scratch/<job>/<execution>/


def scratch_root() -> Path:
    return Path(settings.SCRATCH_ROOT_DIR)


def s3_bucket() -> str:
    return getattr(settings, "S3_BUCKET", "") or ""


def on_scratch(ctx: StageContext) -> bool:
    return bool((ctx.payload or {}).get(SCRATCH_KEY))


def local_dir(ctx: StageContext) -> Path:
    """Where this stage reads and writes the execution's scratch files: the shared directory itself,
    or with an S3 scratch this worker's cache of it (in the job's workspace, swept with it)."""
    if s3_bucket():
        return Path(ctx.workspace) / "scratch"
    return scratch_root() / str(ctx.job_id) / str(int(ctx.execution_id))


def attempt_dir(ctx: StageContext, what: str) -> Path:
    """A fresh directory for this attempt's files: `<what>/t<task id>a<attempt>/`."""
    path = local_dir(ctx) / what / f"t{ctx.task_id}a{ctx.attempt}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def rel(ctx: StageContext, path: Path) -> str:
    """`path` (a file or a directory this attempt wrote) relative to the execution's scratch, as
    results and payloads name it. Naming it is what shares it: with an S3 scratch the file (or the
    tree) is uploaded here, under its attempt's own key, before the finish that names it."""
    relative = Path(path).resolve().relative_to(local_dir(ctx).resolve()).as_posix()
    if s3_bucket():
        S3Scratch.from_settings().upload(ctx, Path(path), relative)
    return relative


def resolve(ctx: StageContext, relative: str) -> Path:
    """A scratch file or directory named by a payload or result, as a local path (checked to stay
    inside the execution's scratch); with an S3 scratch, fetched into this worker's cache first."""
    try:
        path = workspace_file(local_dir(ctx), relative)
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None
    if s3_bucket() and not path.exists():
        S3Scratch.from_settings().download(ctx, relative, path)
    return path


class S3Scratch:
    """The scratch as S3 keys `scratch/<job>/<execution>/<relative path>` (next to the outputs'
    prefix, in JETENCODE_S3_BUCKET). Keys carry the attempt in their path, so a cached copy never
    goes stale."""

    def __init__(self, bucket: str, client):
        self.bucket = bucket
        self.client = client

    @classmethod
    def from_settings(cls) -> S3Scratch:
        import boto3

        return cls(
            s3_bucket(), boto3.client("s3", endpoint_url=getattr(settings, "S3_ENDPOINT_URL", "") or None)
        )

    @staticmethod
    def job_prefix(job_id: str) -> str:
        return f"{S3_SCRATCH}/{uuid.UUID(str(job_id))}/"

    def key(self, ctx: StageContext, relative: str) -> str:
        return f"{self.job_prefix(ctx.job_id)}{int(ctx.execution_id)}/{relative}"

    def upload(self, ctx: StageContext, path: Path, relative: str) -> None:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            inner = relative if file == path else f"{relative}/{file.relative_to(path).as_posix()}"
            self.client.upload_file(str(file), self.bucket, self.key(ctx, inner))

    def download(self, ctx: StageContext, relative: str, dest: Path) -> None:
        """`relative` into `dest`: one object, or every object below it (a directory)."""
        key = self.key(ctx, relative)
        keys = [item["Key"] for page in self._pages(key) for item in page.get("Contents", [])]
        if key not in keys:
            keys = [k for k in keys if k.startswith(key + "/")]
        if not keys:
            raise RuntimeError(f"scratch file {relative} is missing from s3://{self.bucket}/{key}")
        for found in keys:
            target = dest if found == key else dest / found[len(key) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".download")
            self.client.download_file(self.bucket, found, str(partial))
            partial.replace(target)

    def _pages(self, prefix: str, **kwargs):
        paginator = self.client.get_paginator("list_objects_v2")
        return paginator.paginate(Bucket=self.bucket, Prefix=prefix, **kwargs)

    def job_ids(self) -> list[str]:
        found = []
        for page in self._pages(f"{S3_SCRATCH}/", Delimiter="/"):
            for entry in page.get("CommonPrefixes", []):
                name = entry["Prefix"].rstrip("/").rsplit("/", 1)[-1]
                try:
                    found.append(str(uuid.UUID(name)))
                except ValueError:
                    continue
        return found

    def delete_job(self, job_id: str) -> None:
        for page in self._pages(self.job_prefix(job_id)):
            objects = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if objects:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects})


def sweep(grace_seconds: float) -> list[str]:
    """Remove the scratch of ended (completed, cancelled), purged and superseded executions: the
    shared directory's (workers.workspaces.sweep, the same layout) or the S3 scratch's jobs."""
    from workers import workspaces

    if not s3_bucket():
        return [str(p) for p in workspaces.sweep(scratch_root(), grace_seconds)]
    from scheduler import queries

    store = S3Scratch.from_settings()
    jobs = store.job_ids()
    fates = queries.workspace_fates(jobs, grace_seconds) if jobs else {}
    removed = []
    for job_id in jobs:
        fate = fates.get(job_id)
        if fate is None or (fate["status"] in ("completed", "cancelled") and fate["ended_a_while_ago"]):
            store.delete_job(job_id)
            removed.append(f"s3://{store.bucket}/{store.job_prefix(job_id)}")
    return removed


class ScratchView:
    """The stage context, with the scratch as its workspace; children stay on the scratch, anywhere."""

    def __init__(self, ctx: StageContext):
        self._ctx = ctx

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    @property
    def workspace(self) -> Path:
        path = local_dir(self._ctx)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def spawn_child(self, child: ChildSpec) -> None:
        payload = {**child.payload, SCRATCH_KEY: True}
        self._ctx.spawn_child(replace(child, payload=payload, placement="cluster"))


def view(ctx: StageContext) -> StageContext:
    """`ctx` itself for a stage of an unsplit job, its ScratchView for one of a split job."""
    return ScratchView(ctx) if on_scratch(ctx) else ctx
