"""Stages that read or write the media library (MediaAsset), run by a worker in this process
(tests/kit/workers.py) through the runtime's RunContext and fenced conclusion, as in
test_handlers.py."""

import json
import os
import uuid

import pytest

from media.models import MediaAsset
from media.probe import probe
from tests.kit.db import job_status
from tests.kit.web import Receiver
from tests.kit.workers import InProcessWorker
from workers.stages.base import PermanentFailure

pytestmark = pytest.mark.django_db
FAST = {"preset": "ultrafast"}


def asset_for(roots, clip, rel, **fields) -> MediaAsset:
    roots.add(clip, rel)
    info = probe(roots.media / rel)
    values = {
        "directory": rel.rsplit("/", 1)[0] if "/" in rel else "",
        "valid": True,
        **info.asset_fields(),
        **fields,
    }
    return MediaAsset.objects.create(path=rel, **values)


def test_scan_creates_assets_and_validates_them(local_worker, roots, clips, tmp_path):
    roots.add(clips.landscape, "videos/a.mp4")
    roots.add(clips.portrait, "videos/nested/b.MOV")
    (roots.media / "videos" / "notes.txt").write_text("not a video")
    (roots.media / "videos" / "broken.mp4").write_bytes(b"garbage" * 10)
    outside = tmp_path / "outside.mp4"
    outside.write_bytes(b"x")
    os.symlink(outside, roots.media / "videos" / "escape.mp4")
    run = local_worker.run_job("scan", {"directory": "videos"})
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
    assert run.stages[0].progress_calls[-1][2] == {"files_done": 3, "files_found": 3}

    again = local_worker.run_job("scan", {"directory": "videos"})
    assert again.stages[0].result["assets_created"] == 0
    assert [s.task_type for s in again.stages] == ["scan"]  # valid/invalid assets are not re-validated


def test_validate_by_path_creates_the_asset(local_worker, roots, clips):
    roots.add(clips.silent, "inbox/s.mp4")
    result = local_worker.stage_of("validate", {"input": "inbox/s.mp4"}).execute()
    asset = MediaAsset.objects.get(path="inbox/s.mp4")
    assert result["valid"] is True and asset.has_audio is False and asset.directory == "inbox"


def test_move_to_library_moves_the_file_and_updates_the_asset_once(local_worker, roots, clips):
    asset = asset_for(roots, clips.landscape, "inbox/a.mp4")
    params = {"video_id": str(asset.pk), "target_directory": "videos"}
    stage = local_worker.stage_of("move_to_library", params)
    result = stage.execute(conclude=False)  # the move happened, but its finish is lost
    assert result["to"] == "videos/a.mp4"
    asset.refresh_from_db()
    assert (asset.path, asset.directory) == ("videos/a.mp4", "videos")
    assert (roots.media / "videos/a.mp4").exists() and not (roots.media / "inbox/a.mp4").exists()
    # The retry after the lost finish changes nothing and does not fail.
    retry = local_worker.again(stage)
    assert retry.attempt == 2 and retry.execute()["to"] == "videos/a.mp4"
    asset.refresh_from_db()
    assert asset.path == "videos/a.mp4"
    assert job_status(retry.job_id) == "completed"


def test_move_to_library_by_path_can_be_retried(local_worker, roots, clips):
    roots.add(clips.landscape, "inbox/b.mp4")
    params = {"input": "inbox/b.mp4", "target_directory": "videos"}
    stage = local_worker.stage_of("move_to_library", params)
    assert stage.execute(conclude=False)["to"] == "videos/b.mp4"
    assert local_worker.again(stage).execute()["to"] == "videos/b.mp4"
    assert (roots.media / "videos/b.mp4").exists()
    missing = local_worker.stage_of("move_to_library", {"input": "inbox/missing.mp4"})
    with pytest.raises(PermanentFailure, match="does not exist"):
        missing.execute()


def test_move_to_library_refuses_to_overwrite(local_worker, roots, clips):
    asset = asset_for(roots, clips.landscape, "inbox/a.mp4")
    roots.add(clips.portrait, "videos/a.mp4")
    stage = local_worker.stage_of(
        "move_to_library", {"video_id": str(asset.pk), "target_directory": "videos"}
    )
    with pytest.raises(PermanentFailure, match="already exists"):
        stage.execute()


def test_reencode_streaming_adds_one_library_asset(local_worker, roots, clips):
    source = asset_for(roots, clips.landscape, "inbox/source.mp4")
    job_id = local_worker.submit("reencode_streaming", {"video_id": str(source.pk), **FAST})
    stages = []
    while (stage := local_worker.next_stage()).task_type != "library.register":
        stage.execute()
        stages.append(stage.task_type)
    assert stages == ["reencode_streaming", "reencode_streaming.encode", "reencode_streaming.quality"]
    register = stage
    first = register.execute(conclude=False)  # registered, but the finish is lost: a retry follows
    created = MediaAsset.objects.get(pk=first["video_id"])
    assert created.path == f"playback/source-{job_id[:8]}.mp4" and created.valid is True
    assert created.width == 320 and str(created.source_job_id) == job_id
    assert probe(roots.media / created.path).video_codec == "h264"
    # Running the register stage again (the retry) finds the same asset.
    retry = local_worker.again(register)
    assert retry.execute() == {**first, "created": False}
    assert MediaAsset.objects.filter(path=created.path).count() == 1
    assert job_status(job_id) == "completed"
    assert roots.published_files(job_id) == ["quality.json", "source.mp4", "thumbnail.jpg"]
    assert created.thumbnail == f"{job_id}/thumbnail.jpg"  # the asset has the job's thumbnail


def test_thumbnail_for_an_asset_updates_it_after_publication(local_worker, roots, clips):
    asset = asset_for(roots, clips.landscape, "videos/a.mp4")
    run = local_worker.run_job("thumbnail_generate", {"video_id": str(asset.pk), "width": 64})
    assert [s.task_type for s in run.stages] == ["thumbnail_generate", "library.update"]
    asset.refresh_from_db()
    assert asset.thumbnail == f"{run.job_id}/thumbnail.jpg"


def test_scene_extract_and_tags_are_stored_on_the_asset(local_worker, roots, clips):
    asset = asset_for(roots, clips.scenes, "videos/s.mp4")
    local_worker.run_job("scene_extract", {"video_id": str(asset.pk), "min_scene_seconds": 0.5})
    local_worker.run_job("tag_generation", {"video_id": str(asset.pk)})
    asset.refresh_from_db()
    assert [s["start"] for s in asset.scenes] == [0.0, 1.0, 2.0]
    assert "has-audio" in asset.tags and "landscape" in asset.tags
    # clip_generate on the asset uses its stored scenes without detecting again.
    run = local_worker.run_job("clip_generate", {"video_id": str(asset.pk), "min_clip_seconds": 0.5, **FAST})
    assert run.stages[0].result["clips_from"] == "the asset's scene list"
    assert len(run.outputs()) == 3


def test_compile_random_is_repeatable_and_filters(local_worker, roots, clips):
    for i in range(3):
        asset_for(roots, clips.landscape, f"videos/l{i}.mp4")
    asset_for(roots, clips.portrait, "videos/p.mp4")
    asset_for(roots, clips.silent, "videos/bad.mp4", valid=False)
    params = {"count": 2, "orientation": "landscape", "seed": 7, "width": 320, "height": 180, **FAST}
    run = local_worker.run_job("compile_random", params)
    chosen = run.stages[0].result["sources"]
    assert len(chosen) == 2 and all(p.startswith("videos/l") for p in chosen)
    info = probe(run.output_dir / "compilation.mp4")
    assert (info.width, info.height) == (320, 180)
    assert info.duration_seconds == pytest.approx(6.0, abs=0.2)
    assert local_worker.stage_of("compile_random", params).execute()["sources"] == chosen
    # That dispatch's render now waits for local_worker (job placement); another worker takes the next job.
    elsewhere = InProcessWorker("another-worker")
    with pytest.raises(PermanentFailure, match="no valid library videos"):
        elsewhere.stage_of("compile_random", {"orientation": "square"}).execute()


def test_compile_quad_by_video_ids(local_worker, roots, clips):
    ids = [str(asset_for(roots, clips.landscape, f"v/{i}.mp4").pk) for i in range(4)]
    run = local_worker.run_job(
        "compile_quad", {"video_ids": ids, "cell_width": 96, "cell_height": 54, **FAST}
    )
    info = probe(run.output_dir / "quad.mp4")
    assert (info.width, info.height) == (192, 108)
    unknown = local_worker.stage_of("compile_quad", {"video_ids": ids[:3] + [str(uuid.uuid4())]})
    with pytest.raises(PermanentFailure, match="not in the media library"):
        unknown.execute()


def test_webhook_reads_the_job_summary_when_the_payload_has_none(local_worker, settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": True}
    with Receiver() as receiver:
        # The terminal webhook the scheduler queues carries the url, event and id, not the job.
        run = local_worker.run_job("noop", {}, webhook_url=receiver.url)
    [_noop, hook] = run.stages
    assert hook.task_type == "webhook" and "job" not in hook.payload
    data = json.loads(receiver.requests[0][2])["data"]
    assert (data["id"], data["status"], data["type"], data["outputs"]) == (
        run.job_id,
        "completed",
        "noop",
        [],
    )
