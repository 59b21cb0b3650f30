"""Media-library stages: scan, public_scan, validate, move_to_library, library.register, library.update.

These use the ORM on MediaAsset (application data, not queue state). Each is written to be safe
to run twice, because a stage may be retried after it did its work but before its finish was
accepted: assets are found or created by path, updates set absolute values, and a move that
already happened is recognised and completed.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from media.paths import (
    UnsafePathError,
    check_relative,
    media_root,
    open_media_dir,
    open_media_file,
    relative_to_media_root,
    resolve_media_path,
    resolved_parent,
)
from media.probe import ASSET_FIELDS, ProbeError, probe
from workers import scratch
from workers.stages.base import PermanentFailure, StageContext, stage
from workers.stages.common import child, stage_params, throttle_for, ws

VIDEO_EXTENSIONS = frozenset(
    {
        ".mp4",
        ".m4v",
        ".mov",
        ".mkv",
        ".webm",
        ".avi",
        ".ts",
        ".mts",
        ".m2ts",
        ".wmv",
        ".flv",
        ".mpg",
        ".mpeg",
        ".3gp",
        ".ogv",
    }
)
# Fields library.update may set: results of analysis stages, never paths or validity.
UPDATABLE_FIELDS = frozenset({"thumbnail", "tags", "scenes"})
COPY_CHUNK = 8 * 1024 * 1024


def _asset_model():
    from media.models import MediaAsset

    return MediaAsset


# --- scan ----------------------------------------------------------------------------------------


def _walk_videos(root_dir: Path, recursive: bool) -> list[Path]:
    """Video files under root_dir, sorted; never follows directory symlinks, and skips file symlinks
    that resolve outside the media root and names the path rules refuse."""
    found = []
    base = media_root()
    for dirpath, dirnames, filenames in os.walk(root_dir, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if not recursive:
            dirnames[:] = []
        for name in sorted(filenames):
            if name.startswith(".") or Path(name).suffix.lower() not in VIDEO_EXTENSIONS:
                continue
            path = Path(dirpath) / name
            try:
                rel = path.relative_to(base).as_posix()
                resolve_media_path(rel, kind="file", must_exist=True)
            except (UnsafePathError, ValueError):
                continue
            found.append(path)
    return found


def _scan(ctx: StageContext, job_type: str) -> dict:
    params = stage_params(ctx, job_type)
    MediaAsset = _asset_model()
    try:
        directory = resolve_media_path(params.directory, must_exist=True, kind="dir", what="directory")
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None
    files = _walk_videos(directory, params.recursive)
    ctx.log(f"found {len(files)} video files under {params.directory}")
    throttle = throttle_for(ctx)
    created = revalidate = 0
    for done, path in enumerate(files, start=1):
        ctx.check_cancelled()
        rel = path.relative_to(media_root()).as_posix()
        asset, was_created = MediaAsset.objects.get_or_create(
            path=rel,
            defaults={"title": path.stem, "directory": params.directory, "size_bytes": path.stat().st_size},
        )
        created += was_created
        # Validate new assets, and any never validated (created by an earlier attempt that did not
        # finish: its children were never published). Child dedupe makes a repeat harmless.
        if was_created or asset.valid is None or not params.skip_existing:
            revalidate += not was_created
            ctx.spawn_child(child("validate", {"video_id": str(asset.id)}))
        throttle.update(100.0 * done / len(files), {"files_done": done, "files_found": len(files)})
    ctx.progress(100.0, {"files_done": len(files), "files_found": len(files)})
    ctx.log(f"{created} new assets; {created + revalidate} validate stages queued")
    return {"files_found": len(files), "assets_created": created, "validations": created + revalidate}


@stage("scan")
def scan(ctx: StageContext) -> dict:
    return _scan(ctx, "scan")


@stage("public_scan")
def public_scan(ctx: StageContext) -> dict:
    return _scan(ctx, "public_scan")


# --- validate ------------------------------------------------------------------------------------


@stage("validate")
def validate(ctx: StageContext) -> dict:
    """Probe the file and store its metadata; an unreadable file is a *result* (invalid), not a
    stage failure: validation did its job."""
    params = stage_params(ctx, "validate")
    MediaAsset = _asset_model()
    if params.video_id is not None:
        asset = MediaAsset.objects.filter(id=params.video_id).first()
        if asset is None:
            raise PermanentFailure(f"video_id {params.video_id} is not in the media library")
        rel = asset.path
    else:
        rel = params.input
        asset = None
    fields: dict = {"validated_at": timezone.now()}
    try:
        with open_media_file(rel, what="input") as (fd, path):
            info = probe(fd=fd, name=path.name)
        if not info.has_video:
            raise ProbeError(path, "no video stream")
        fields.update(info.asset_fields(), valid=True, invalid_reason="")
        ctx.log(
            f"valid: {info.width}x{info.height} {info.video_codec}/{info.audio_codec or '-'} "
            f"{info.duration_seconds:.2f}s"
        )
    except (UnsafePathError, ProbeError) as exc:
        reason = exc.reason if isinstance(exc, ProbeError) else str(exc)
        fields.update(valid=False, invalid_reason=reason[:1000])
        ctx.log(f"invalid: {reason}")
    if asset is None:
        try:
            clean = check_relative(rel).as_posix()
        except UnsafePathError as exc:
            raise PermanentFailure(str(exc)) from None
        parent = Path(clean).parent.as_posix()
        asset, _ = MediaAsset.objects.get_or_create(
            path=clean, defaults={"title": Path(clean).stem, "directory": "" if parent == "." else parent}
        )
    MediaAsset.objects.filter(pk=asset.pk).update(**fields)
    ctx.progress(100.0)
    result = {k: v for k, v in fields.items() if k != "validated_at"}
    return {"video_id": str(asset.pk), "path": asset.path, **result}


# --- move_to_library -------------------------------------------------------------------------------


@stage("move_to_library")
def move_to_library(ctx: StageContext) -> dict:
    params = stage_params(ctx, "move_to_library")
    MediaAsset = _asset_model()
    asset = MediaAsset.objects.filter(id=params.video_id).first() if params.video_id else None
    if params.video_id and asset is None:
        raise PermanentFailure(f"video_id {params.video_id} is not in the media library")
    old_rel = asset.path if asset is not None else params.input
    try:
        old_clean = check_relative(old_rel).as_posix()
        target_dir = resolve_media_path(params.target_directory, kind="dir", what="target_directory")
        new_path = resolve_media_path(f"{params.target_directory}/{Path(old_clean).name}", what="destination")
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None
    new_rel = relative_to_media_root(new_path)
    old_path = media_root() / old_clean
    if asset is None:
        asset = MediaAsset.objects.filter(path=old_clean).first()
    occupant = (
        MediaAsset.objects.filter(path=new_rel).exclude(pk=asset.pk if asset is not None else None).first()
    )
    if occupant is not None and old_rel != new_rel:
        raise PermanentFailure(f"{new_rel} already belongs to library asset {occupant.pk}")

    if old_rel == new_rel:
        ctx.log("already in the target directory")
    elif not old_path.exists() and new_path.exists():
        # An earlier attempt moved the file but did not finish: complete the record update below.
        ctx.log(f"{old_clean} was already moved to {new_rel}")
    else:
        try:
            resolve_media_path(old_clean, must_exist=True, kind="file", what="input")
        except UnsafePathError as exc:
            raise PermanentFailure(str(exc)) from None
        if new_path.exists() and not params.overwrite:
            raise PermanentFailure(f"{new_rel} already exists (set overwrite to replace it)")
        _move(old_clean, relative_to_media_root(target_dir), Path(old_clean).name)
        ctx.log(f"moved {old_clean} -> {new_rel}")
    if asset is not None:
        with transaction.atomic():
            MediaAsset.objects.filter(pk=asset.pk).update(path=new_rel, directory=params.target_directory)
    ctx.progress(100.0)
    return {"from": old_clean, "to": new_rel, "video_id": str(asset.pk) if asset is not None else None}


def _move(old_rel: str, target_rel: str, new_name: str) -> None:
    """Rename old_rel into target_rel/new_name by directory descriptors (O_NOFOLLOW below the
    resolved root), so a directory swapped for a symlink after the checks cannot redirect it."""
    try:
        source_dir, old_name = resolved_parent(old_rel, what="input")
        with (
            open_media_dir(source_dir, what="input") as src_fd,
            open_media_dir(target_rel, what="target_directory", create=True) as dst_fd,
        ):
            try:
                os.replace(old_name, new_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _copy_into(dst_fd, new_name, old_name, src_fd)
                os.unlink(old_name, dir_fd=src_fd)
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None


def _copy_into(dir_fd: int, name: str, source_name_or_path, source_dir_fd: int | None = None) -> None:
    """Write a copy (never a hard link) of a file into dir_fd/name: a temporary name created with
    O_EXCL | O_NOFOLLOW in that directory, then renamed over `name`."""
    temp = f".{name}.{uuid.uuid4().hex}.partial"
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    src = os.open(source_name_or_path, flags, dir_fd=source_dir_fd)
    try:
        out = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd
        )
        with os.fdopen(src, "rb", closefd=False) as reader, os.fdopen(out, "wb") as writer:
            shutil.copyfileobj(reader, writer, COPY_CHUNK)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(src)


# --- follow-up stages used by other types -------------------------------------------------------


@stage("library.register")
def library_register(ctx: StageContext) -> dict:
    """Add a produced video to the library, exactly once per path.

    payload: {"source": workspace-relative file, "path": media-root-relative destination,
              "directory", "title", "metadata": {MediaAsset fields}}
    Spawned by a stage only when that stage's outputs were published (same transaction), so an
    asset never points at work that was thrown away; the copy is temp-then-rename and the asset is
    get_or_create by path, so a retry is harmless.
    """
    payload = ctx.payload
    # A split reencode's file is on the shared scratch (workers/scratch.py), not in a workspace.
    source = (
        scratch.resolve(ctx, payload["source"]) if scratch.on_scratch(ctx) else ws(ctx, payload["source"])
    )
    try:
        dest = resolve_media_path(payload["path"], what="library path")
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None
    if not (dest.is_file() and dest.stat().st_size == source.stat().st_size):
        # A copy written by directory descriptor: the library file shares no inode with the
        # workspace or a published output, and a parent swapped for a symlink cannot redirect it.
        parent = dest.parent.relative_to(media_root()).as_posix()
        try:
            with open_media_dir(parent, what="library path", create=True) as dir_fd:
                _copy_into(dir_fd, dest.name, str(source))
        except UnsafePathError as exc:
            raise PermanentFailure(str(exc)) from None
        ctx.log(f"{payload['source']} -> media root {payload['path']}")
    from scheduler.models import Job

    MediaAsset = _asset_model()
    # The job row normally exists; if retention removed it, register the asset without the link.
    source_job_id = ctx.job_id if Job.objects.filter(pk=ctx.job_id).exists() else None
    fields = {k: v for k, v in (payload.get("metadata") or {}).items() if k in ASSET_FIELDS}
    asset, created = MediaAsset.objects.get_or_create(
        path=relative_to_media_root(dest),
        defaults={
            "title": payload.get("title", dest.stem),
            "directory": payload.get("directory", ""),
            "source_job_id": source_job_id,
            "valid": True,
            "validated_at": timezone.now(),
            # "<job id>/thumbnail.jpg", published with the video (reencode_streaming), or none.
            "thumbnail": payload.get("thumbnail", ""),
            **fields,
        },
    )
    ctx.progress(100.0)
    ctx.log(("created" if created else "found existing") + f" library asset {asset.pk} for {asset.path}")
    return {"video_id": str(asset.pk), "path": asset.path, "created": created}


@stage("library.update")
def library_update(ctx: StageContext) -> dict:
    """Set analysis results (thumbnail, tags, scenes) on an asset after they were published.
    payload: {"video_id": ..., "fields": {...}}; absolute values, so repeating it changes nothing."""
    payload = ctx.payload
    fields = {k: v for k, v in (payload.get("fields") or {}).items() if k in UPDATABLE_FIELDS}
    if not fields:
        raise PermanentFailure("library.update has nothing to update")
    updated = _asset_model().objects.filter(id=payload["video_id"]).update(**fields)
    ctx.progress(100.0)
    ctx.log(
        f"updated {', '.join(sorted(fields))} on asset {payload['video_id']}"
        if updated
        else f"asset {payload['video_id']} no longer exists; nothing updated"
    )
    return {"video_id": payload["video_id"], "updated": bool(updated), "fields": sorted(fields)}
