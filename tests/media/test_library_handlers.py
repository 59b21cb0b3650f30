"""Stages that read or write the media library (MediaAsset): these use the test database."""

import json
import os
import uuid

import pytest

from media.models import MediaAsset
from media.probe import probe
from scheduler.models import Job
from tests.media.localctx import LocalContext, run_job, run_stage
from tests.media.receiver import Receiver
from workers.stages.base import PermanentFailure

pytestmark = pytest.mark.django_db
FAST = {"preset": "ultrafast"}


def job(media_env, job_type, params, **kwargs):
    return run_job(
        job_type, params, workspace=media_env.workspace(), output_root=media_env.output_root, **kwargs
    )


def asset_for(media_env, clip, rel, **fields) -> MediaAsset:
    media_env.add(clip, rel)
    info = probe(media_env.media_root / rel)
    values = {
        "directory": rel.rsplit("/", 1)[0] if "/" in rel else "",
        "valid": True,
        **info.asset_fields(),
        **fields,
    }
    return MediaAsset.objects.create(path=rel, **values)


def test_scan_creates_assets_and_validates_them(media_env, tmp_path):
    c = media_env.clips
    media_env.add(c.landscape, "videos/a.mp4")
    media_env.add(c.portrait, "videos/nested/b.MOV")
    (media_env.media_root / "videos" / "notes.txt").write_text("not a video")
    (media_env.media_root / "videos" / "broken.mp4").write_bytes(b"garbage" * 10)
    outside = tmp_path / "outside.mp4"
    outside.write_bytes(b"x")
    os.symlink(outside, media_env.media_root / "videos" / "escape.mp4")
    run = job(media_env, "scan", {"directory": "videos"})
    assert run.stages[0].result == {"files_found": 3, "assets_created": 3, "validations": 3}
    assert [s.task_type for s in run.stages[1:]] == ["validate"] * 3
    assets = {a.path: a for a in MediaAsset.objects.all()}
    assert set(assets) == {"videos/a.mp4", "videos/broken.mp4", "videos/nested/b.MOV"}
    a, b, broken = assets["videos/a.mp4"], assets["videos/nested/b.MOV"], assets["videos/broken.mp4"]
    assert (a.valid, a.width, a.height, a.orientation, a.has_audio, a.video_codec) == (
        True,
        320,
        180,
        "landscape",
        True,
        "h264",
    )
    assert a.duration_seconds == pytest.approx(3.0, abs=0.05) and a.validated_at is not None
    assert (b.valid, b.orientation, b.directory) == (True, "portrait", "videos")
    assert broken.valid is False and "not a readable media file" in broken.invalid_reason
    scan_ctx = run.stages[0].ctx
    assert scan_ctx.progress_calls[-1][2] == {"files_done": 3, "files_found": 3}

    again = job(media_env, "scan", {"directory": "videos"})
    assert again.stages[0].result["assets_created"] == 0
    assert [s.task_type for s in again.stages] == ["scan"]  # valid/invalid assets are not re-validated


def test_validate_by_path_creates_the_asset(media_env):
    media_env.add(media_env.clips.silent, "inbox/s.mp4")
    result = run_stage(
        LocalContext("validate", workspace=media_env.workspace(), job_params={"input": "inbox/s.mp4"})
    )
    asset = MediaAsset.objects.get(path="inbox/s.mp4")
    assert result["valid"] is True and asset.has_audio is False and asset.directory == "inbox"


def test_move_to_library_moves_the_file_and_updates_the_asset_once(media_env):
    asset = asset_for(media_env, media_env.clips.landscape, "inbox/a.mp4")
    params = {"video_id": str(asset.pk), "target_directory": "videos"}
    result = run_stage(LocalContext("move_to_library", workspace=media_env.workspace(), job_params=params))
    assert result["to"] == "videos/a.mp4"
    asset.refresh_from_db()
    assert (asset.path, asset.directory) == ("videos/a.mp4", "videos")
    assert (media_env.media_root / "videos/a.mp4").exists() and not (
        media_env.media_root / "inbox/a.mp4"
    ).exists()
    # A retry after the move (e.g. the finish was lost) changes nothing and does not fail.
    run_stage(LocalContext("move_to_library", workspace=media_env.workspace(), job_params=params))
    asset.refresh_from_db()
    assert asset.path == "videos/a.mp4"


def test_move_to_library_by_path_can_be_retried(media_env):
    media_env.add(media_env.clips.landscape, "inbox/b.mp4")
    params = {"input": "inbox/b.mp4", "target_directory": "videos"}
    for _attempt in range(2):
        result = run_stage(
            LocalContext("move_to_library", workspace=media_env.workspace(), job_params=params)
        )
        assert result["to"] == "videos/b.mp4"
    assert (media_env.media_root / "videos/b.mp4").exists()
    with pytest.raises(PermanentFailure, match="does not exist"):
        run_stage(
            LocalContext(
                "move_to_library", workspace=media_env.workspace(), job_params={"input": "inbox/missing.mp4"}
            )
        )


def test_move_to_library_refuses_to_overwrite(media_env):
    asset = asset_for(media_env, media_env.clips.landscape, "inbox/a.mp4")
    media_env.add(media_env.clips.portrait, "videos/a.mp4")
    with pytest.raises(PermanentFailure, match="already exists"):
        run_stage(
            LocalContext(
                "move_to_library",
                workspace=media_env.workspace(),
                job_params={"video_id": str(asset.pk), "target_directory": "videos"},
            )
        )


def test_reencode_streaming_adds_one_library_asset(media_env):
    source = asset_for(media_env, media_env.clips.landscape, "inbox/source.mp4")
    record = Job.objects.create(type="reencode_streaming", status="running")
    run = job(media_env, "reencode_streaming", {"video_id": str(source.pk), **FAST}, job_id=str(record.pk))
    assert [s.task_type for s in run.stages] == [
        "reencode_streaming",
        "reencode_streaming.encode",
        "library.register",
    ]
    assert run.outputs() == ["source.mp4"]
    register = run.of("library.register")[0]
    created = MediaAsset.objects.get(pk=register.result["video_id"])
    assert created.path == f"playback/source-{run.job_id[:8]}.mp4" and created.valid is True
    assert created.width == 320 and str(created.source_job_id) == run.job_id
    assert probe(media_env.media_root / created.path).video_codec == "h264"
    # Running the register stage again (a retry) finds the same asset.
    again = LocalContext(
        "library.register",
        workspace=register.ctx.workspace,
        job_type="reencode_streaming",
        job_id=run.job_id,
        payload=register.payload,
    )
    assert run_stage(again) == {**register.result, "created": False}
    assert MediaAsset.objects.filter(path=created.path).count() == 1


def test_thumbnail_for_an_asset_updates_it_after_publication(media_env):
    asset = asset_for(media_env, media_env.clips.landscape, "videos/a.mp4")
    run = job(media_env, "thumbnail_generate", {"video_id": str(asset.pk), "width": 64})
    assert [s.task_type for s in run.stages] == ["thumbnail_generate", "library.update"]
    asset.refresh_from_db()
    assert asset.thumbnail == f"{run.job_id}/thumbnail.jpg"


def test_scene_extract_and_tags_are_stored_on_the_asset(media_env):
    asset = asset_for(media_env, media_env.clips.scenes, "videos/s.mp4")
    job(media_env, "scene_extract", {"video_id": str(asset.pk), "min_scene_seconds": 0.5})
    job(media_env, "tag_generation", {"video_id": str(asset.pk)})
    asset.refresh_from_db()
    assert [s["start"] for s in asset.scenes] == [0.0, 1.0, 2.0]
    assert "has-audio" in asset.tags and "landscape" in asset.tags
    # clip_generate on the asset uses its stored scenes without detecting again.
    run = job(media_env, "clip_generate", {"video_id": str(asset.pk), "min_clip_seconds": 0.5, **FAST})
    assert run.stages[0].result["clips_from"] == "the asset's scene list"
    assert len(run.outputs()) == 3


def test_compile_random_is_repeatable_and_filters(media_env):
    for i in range(3):
        asset_for(media_env, media_env.clips.landscape, f"videos/l{i}.mp4")
    asset_for(media_env, media_env.clips.portrait, "videos/p.mp4")
    asset_for(media_env, media_env.clips.silent, "videos/bad.mp4", valid=False)
    params = {"count": 2, "orientation": "landscape", "seed": 7, "width": 320, "height": 180, **FAST}
    run = job(media_env, "compile_random", params)
    chosen = run.stages[0].result["sources"]
    assert len(chosen) == 2 and all(p.startswith("videos/l") for p in chosen)
    info = probe(run.output_dir / "compilation.mp4")
    assert (info.width, info.height) == (320, 180)
    assert info.duration_seconds == pytest.approx(6.0, abs=0.2)
    dispatch_again = LocalContext("compile_random", workspace=media_env.workspace("again"), job_params=params)
    assert run_stage(dispatch_again)["sources"] == chosen
    with pytest.raises(PermanentFailure, match="no valid library videos"):
        run_stage(
            LocalContext(
                "compile_random", workspace=media_env.workspace("none"), job_params={"orientation": "square"}
            )
        )


def test_compile_quad_by_video_ids(media_env):
    ids = [str(asset_for(media_env, media_env.clips.landscape, f"v/{i}.mp4").pk) for i in range(4)]
    run = job(media_env, "compile_quad", {"video_ids": ids, "cell_width": 96, "cell_height": 54, **FAST})
    assert (probe(run.output_dir / "quad.mp4").width, probe(run.output_dir / "quad.mp4").height) == (192, 108)
    with pytest.raises(PermanentFailure, match="not in the media library"):
        run_stage(
            LocalContext(
                "compile_quad",
                workspace=media_env.workspace("x"),
                job_params={"video_ids": ids[:3] + [str(uuid.uuid4())]},
            )
        )


def test_webhook_reads_the_job_summary_when_the_payload_has_none(media_env, settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": True}
    record = Job.objects.create(type="noop", status="completed", progress=100)
    with Receiver() as receiver:
        ctx = LocalContext(
            "webhook",
            workspace=media_env.workspace(),
            job_type="noop",
            job_id=str(record.pk),
            payload={"url": receiver.url, "event": "job.completed", "webhook_id": "msg_1"},
        )
        run_stage(ctx)
    data = json.loads(receiver.requests[0][2])["data"]
    assert (data["id"], data["status"], data["type"], data["outputs"]) == (
        str(record.pk),
        "completed",
        "noop",
        [],
    )
