"""Helpers shared by the stage handlers. Everything goes through the StageContext.

Conventions the handlers keep:
- The dispatch stage (task type == job type) reads the job's params; a child reads its payload.
  Both are validated with the job type's params model, so the worker re-checks every path.
- Payloads name workspace files by paths relative to ctx.workspace (the job execution's directory
  on this worker), never absolute paths, and they are resolved with a containment check.
- FFmpeg writes to a `.partial` name; the file gets its final workspace name only after FFmpeg
  exited 0, so a retried stage never mistakes a half-written file for a finished one.
- Outputs leave the workspace only through ctx.publish_file.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from media.jobtypes import JOB_TYPES, ParamsError, ResourceChoice, parse_params, resolve_resource
from media.params import Params
from media.paths import (
    UnsafePathError,
    open_media_file,
    relative_to_media_root,
    resolve_media_path,
    workspace_file,
)
from media.probe import MediaInfo, ProbeError, probe
from media.progress import ProgressParser, ProgressSample, ProgressThrottle
from workers.stages.base import ChildSpec, PermanentFailure, PublishSpec, StageContext

STDERR_TAIL_CHARS = 4000
COPY_CHUNK = 8 * 1024 * 1024


class FFmpegFailed(RuntimeError):
    """FFmpeg exited non-zero; retried per the queue's policy (a transient I/O error may pass)."""


# --- params and inputs ------------------------------------------------------------------------


def stage_params(ctx: StageContext, job_type: str | None = None) -> Any:
    """The validated params model for this stage. A payload carrying any of the type's fields is
    used (children, and a dispatch whose payload repeats the params); otherwise the job's params.
    Invalid params cannot get better by retrying: PermanentFailure."""
    job_type = job_type or ctx.job_type
    model = JOB_TYPES[job_type].params_model if job_type in JOB_TYPES else None
    payload = ctx.payload or {}
    if model is not None:
        own = {k: v for k, v in payload.items() if k in model.model_fields}
        source = own if own else (ctx.job_params or {})
    else:
        source = ctx.job_params or {}
    try:
        return parse_params(job_type, source)
    except ParamsError as exc:
        raise PermanentFailure("; ".join(f"{e['field']}: {e['message']}" for e in exc.errors)) from None


@dataclass(frozen=True)
class Source:
    path: Path  # absolute, resolved, inside the media root
    rel_path: str  # as stored in MediaAsset.path
    video_id: str | None


def _checked(rel: str, what: str, video_id: str | None) -> Source:
    try:
        path = resolve_media_path(rel, must_exist=True, kind="file", what=what)
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None
    return Source(path, relative_to_media_root(path), video_id)


def asset_source(video_id) -> Source:
    """A library asset's file, with the same containment checks as a user-given path."""
    from media.models import MediaAsset

    asset = MediaAsset.objects.filter(id=video_id).only("path").first()
    if asset is None:
        raise PermanentFailure(f"video_id {video_id} is not in the media library")
    return _checked(asset.path, "input", str(video_id))


def resolve_source(params: Params, ctx: StageContext | None = None) -> Source:
    """The input video of `params` (input, input_url or video_id), checked again here in the
    worker; an input_url is fetched into the source cache first (needs `ctx`: progress, cancel)."""
    video_id = getattr(params, "video_id", None)
    if video_id is not None:
        return asset_source(video_id)
    if getattr(params, "input_url", None):
        if ctx is None:
            raise PermanentFailure("input_url needs a stage context to fetch it")
        return _checked(relative_to_media_root(fetched_source(ctx, params.input_url)), "input", None)
    return _checked(params.input, "input", None)


DOWNLOAD_SHARE = 30.0  # of the dispatch stage's progress bar


def fetched_source(ctx: StageContext, url: str, low: float = 0.0, high: float = DOWNLOAD_SHARE) -> Path:
    """Fetch `url` into the source cache, showing the download as the stage's progress from `low`
    to `high` % (one download: 0 to DOWNLOAD_SHARE). A failure a retry cannot fix (HTTP 404, a
    refused address, too large) fails the stage for good: no retry storm against a missing object."""
    from media.sources.fetch import FetchError, PermanentFetchError, fetch_source

    throttle = throttle_for(ctx)

    def progress(done: int, total: int | None) -> None:
        share = low + (high - low) * done / total if total else low
        throttle.update(share, {"download_bytes": done, "download_total_bytes": total})

    try:
        path = fetch_source(url, progress=progress, check_cancelled=ctx.check_cancelled, log=ctx.log)
    except PermanentFetchError as exc:
        raise PermanentFailure(str(exc)) from None
    except FetchError as exc:
        raise FetchFailed(str(exc)) from None
    size = path.stat().st_size
    ctx.progress(high, {"download_bytes": size, "download_total_bytes": size})
    return path


class FetchFailed(RuntimeError):
    """An input_url download failed in a way a later attempt may not (retried with backoff)."""


def resolve_sources(params: Params, ctx: StageContext | None = None) -> list[Source]:
    """The inputs of a multi-input type, in the order given; input_urls are fetched into the source
    cache first, one after the other, each with its share of DOWNLOAD_SHARE % (needs `ctx`)."""
    urls = getattr(params, "input_urls", None)
    if urls is not None:
        if ctx is None:
            raise PermanentFailure("input_urls need a stage context to fetch them")
        share = DOWNLOAD_SHARE / len(urls)
        fetched = [fetched_source(ctx, url, i * share, (i + 1) * share) for i, url in enumerate(urls)]
        return [
            _checked(relative_to_media_root(path), f"input_urls[{i}]", None) for i, path in enumerate(fetched)
        ]
    if getattr(params, "video_ids", None) is not None:
        from media.models import MediaAsset

        ids = [str(v) for v in params.video_ids]
        assets = {str(a.id): a.path for a in MediaAsset.objects.filter(id__in=ids).only("path")}
        missing = [v for v in ids if v not in assets]
        if missing:
            raise PermanentFailure(f"video_ids not in the media library: {', '.join(missing)}")
        pairs = [(assets[v], v) for v in ids]
    else:
        pairs = [(rel, None) for rel in params.inputs]
    return [_checked(rel, f"inputs[{index}]", video_id) for index, (rel, video_id) in enumerate(pairs)]


_SAFE_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")


def stage_input(ctx: StageContext, source: Source, name: str = "source") -> Path:
    """Bring an input into the workspace under a name of our own, so FFmpeg never sees the user's
    name (no `%` sequence pattern, no symlink to follow) and later stages on this worker read a
    local file. The input is opened by descriptor (media.paths.open_media_file: O_NOFOLLOW below
    the resolved root) and that descriptor is linked (same filesystem) or copied in chunks that
    check for cancellation. Idempotent: a retry finds the finished copy and reuses it."""
    suffix = source.path.suffix.lower() if _SAFE_SUFFIX.fullmatch(source.path.suffix) else ".media"
    dest = Path(ctx.workspace) / "input" / f"{name}{suffix}"
    try:
        with open_media_file(source.rel_path, what="input") as (fd, _path):
            size = os.fstat(fd).st_size
            if dest.exists() and dest.stat().st_size == size:
                return dest
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(dest.name + ".partial")
            partial.unlink(missing_ok=True)
            how = _link_or_copy(ctx, fd, partial)
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None
    os.replace(partial, dest)
    ctx.log(f"input {how} into the workspace as {workspace_rel(ctx, dest)} ({dest.stat().st_size} bytes)")
    return dest


def _link_or_copy(ctx: StageContext, fd: int, dest: Path) -> str:
    """A new name for the opened file: a hard link to the descriptor's inode (through /proc, so the
    link is to what was opened, not to whatever the name means now), else a chunked copy."""
    try:
        os.link(f"/proc/self/fd/{fd}", dest)
        return "linked"
    except OSError:
        pass
    with os.fdopen(os.dup(fd), "rb") as src, open(dest, "wb") as dst:
        src.seek(0)
        while chunk := src.read(COPY_CHUNK):
            dst.write(chunk)
            ctx.check_cancelled()
    return "copied"


def probe_media(path: Path, *, need_video: bool = True, fd: int | None = None) -> MediaInfo:
    """`path` measured; with `fd` (`path` opened by descriptor) the descriptor is what is read and
    `path` only names the file in messages."""
    try:
        info = probe(path) if fd is None else probe(name=path.name, fd=fd)
    except ProbeError as exc:
        raise PermanentFailure(str(exc)) from None
    if need_video and not (info.has_video and info.width and info.height):
        raise PermanentFailure(f"{path.name} has no video stream")
    if need_video and info.duration_seconds <= 0:
        raise PermanentFailure(f"{path.name} has no measurable duration")
    return info


# --- workspace ---------------------------------------------------------------------------------


def ws(ctx: StageContext, rel: str) -> Path:
    """A payload's workspace-relative path, resolved inside the workspace."""
    try:
        return workspace_file(Path(ctx.workspace), rel)
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None


def workspace_rel(ctx: StageContext, path: Path) -> str:
    return Path(path).resolve().relative_to(Path(ctx.workspace).resolve()).as_posix()


def partial_path(path: Path) -> Path:
    """`name.partial.ext`: FFmpeg picks formats by extension only where we do not pass -f, but the
    extension is kept anyway so tools that inspect the workspace see what the file is."""
    return path.with_name(f"{path.stem}.partial{path.suffix}")


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


# --- running FFmpeg ----------------------------------------------------------------------------


def stall_seconds() -> float:
    return float(settings.JETENCODE.get("STALL_SECONDS", 120))


def stage_timeout(duration_seconds: float | None) -> float:
    """DECISIONS 11: max(10 minutes, 10 x the media duration)."""
    return max(600.0, 10.0 * float(duration_seconds or 0))


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def run_ffmpeg(
    ctx: StageContext,
    argv: list[str],
    *,
    duration: float | None,
    throttle: ProgressThrottle | None,
    what: str = "ffmpeg",
    cwd: Path | None = None,
    pass_fds: tuple[int, ...] = (),
) -> ProgressSample | None:
    """Run one FFmpeg command through ctx.run with progress, and log command, stderr tail and result.
    `pass_fds`: the descriptors argv names as `/proc/self/fd/N` (an input opened by descriptor).

    Raises FFmpegFailed on a non-zero exit (the runtime raises StageCancelled/StageTimeout/LeaseLost
    itself when it killed the process group).
    """
    parser = ProgressParser(duration, throttle.on_sample if throttle is not None else None)
    # shlex.join only to *display* the command; it is run as the list it is.
    ctx.log(f"{what}: {shlex.join(argv)}")
    started = time.monotonic()
    proc = ctx.run(
        argv, on_stdout_line=parser.feed, stall_seconds=stall_seconds(), cwd=cwd, pass_fds=pass_fds
    )
    elapsed = time.monotonic() - started
    tail = _text(getattr(proc, "stderr", None)).strip()[-STDERR_TAIL_CHARS:]
    if proc.returncode != 0:
        if tail:
            ctx.log(f"{what} stderr (tail):\n{tail}")
        last = tail.splitlines()[-1] if tail else "no error output"
        raise FFmpegFailed(f"{what} failed with exit code {proc.returncode}: {last}")
    if tail:
        ctx.log(f"{what} warnings:\n{tail}")
    speed = parser.last.speed if parser.last is not None else None
    ctx.log(f"{what} finished in {elapsed:.1f}s" + (f" at {speed}x" if speed else ""))
    return parser.last


def throttle_for(ctx: StageContext) -> ProgressThrottle:
    """5 % or 2 s, whichever comes first."""
    return ProgressThrottle(ctx.progress, min_step=5.0, max_interval=2.0)


# --- resources, children, outputs --------------------------------------------------------------


def choose_resource(ctx: StageContext) -> ResourceChoice:
    try:
        choice = resolve_resource(
            ctx.job_type,
            getattr(ctx, "job_hardware", None) or "auto",
            getattr(ctx, "job_resource_category", None),
            getattr(ctx, "job_vram_mb", None),
            worker_catalog=dict(ctx.capabilities or {}),
        )
    except ParamsError as exc:
        raise PermanentFailure("; ".join(f"{e['field']}: {e['message']}" for e in exc.errors)) from None
    ctx.log(
        f"resources: {choice.category}, {choice.vram_mb} MB VRAM, encoder {choice.encoder} ({choice.reason})"
    )
    return choice


def child(
    task_type: str,
    payload: dict[str, Any],
    *,
    resource: ResourceChoice | None = None,
    pool: str = "media",
    duration: float | None = None,
    wait_for_siblings: bool = False,
    placement: str = "job",
) -> ChildSpec:
    return ChildSpec(
        task_type=task_type,
        payload=payload,
        placement=placement,
        pool=pool,
        resource_category=resource.category if resource is not None else "cpu",
        vram_mb=resource.vram_mb if resource is not None else 0,
        timeout_seconds=stage_timeout(duration),
        wait_for_siblings=wait_for_siblings,
    )


KIND_BY_SUFFIX = {".mp4": "video", ".jpg": "image", ".gif": "image", ".m3u8": "playlist", ".json": "data"}


def publish(
    ctx: StageContext,
    path: Path,
    name: str,
    *,
    kind: str | None = None,
    probe_it: bool = True,
    extra: dict[str, Any] | None = None,
) -> None:
    """Buffer a workspace file for publication under <output root>/<job id>/<name>, with its probed
    metadata (the job detail lists each output with it)."""
    kind = kind or KIND_BY_SUFFIX.get(path.suffix.lower(), "file")
    metadata: dict[str, Any] = {"size_bytes": path.stat().st_size}
    if probe_it and kind in ("video", "image"):
        try:
            info = probe(path).to_dict()
            info.pop("path", None)
            metadata.update(info)
        except ProbeError as exc:
            raise FFmpegFailed(f"output {name} is not readable media: {exc.reason}") from None
    if extra:
        metadata.update(extra)
    ctx.publish_file(PublishSpec(source=path, name=name, kind=kind, metadata=metadata))


def encoder_of(payload: dict[str, Any]) -> str:
    encoder = payload.get("encoder") or "libx264"
    from media.commands import SUPPORTED_ENCODERS

    if encoder not in SUPPORTED_ENCODERS:
        raise PermanentFailure(f"unsupported encoder {encoder!r}")
    return encoder


def publish_register_thumbnail(ctx: StageContext, register: dict) -> None:
    """Publish, with the video it belongs to, the thumbnail a library.register payload will set on
    the asset (`thumbnail_file`, made by reencode_streaming.encode), if there is one."""
    if register.get("thumbnail_file"):
        publish(ctx, ws(ctx, register["thumbnail_file"]), "thumbnail.jpg")
