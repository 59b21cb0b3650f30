"""Stage handlers on real clips, run the way a worker slot runs them: claimed from the test database
by a worker in this process (tests/kit/workers.py, `InProcessWorker`), each handler given the
runtime's RunContext (FFmpeg through `RunContext.run` and `workers.processes`), each stage
concluded by the runtime's fenced finish or fail, its children and files published by it.

Inputs are paths under a private media root. Library stages (which use MediaAsset) are in
test_library_handlers.py.
"""

import json
import os
import subprocess
import threading
import time

import pytest

from media import commands, webhooks
from media.probe import is_faststart, probe
from tests.kit.db import job_status, task_state
from tests.kit.web import Receiver
from tests.kit.workers import InProcessWorker
from workers.stages import HANDLERS
from workers.stages.base import PermanentFailure, StageCancelled

pytestmark = pytest.mark.django_db

FAST = {"preset": "ultrafast"}


def test_every_job_type_stage_has_a_handler():
    from media.jobtypes import JOB_TYPES

    for jt in JOB_TYPES.values():
        for task_type in jt.stages:
            assert task_type in HANDLERS, task_type
    assert "webhook" in HANDLERS


# --- noop --------------------------------------------------------------------------------------------


def test_noop_sleeps_reports_progress_and_spawns_children(local_worker):
    dispatch = local_worker.stage_of("noop", {"seconds": 0.3, "children": 3})
    started = time.monotonic()
    result = dispatch.execute()
    assert time.monotonic() - started >= 0.3
    assert result["children"] == 3 and dispatch.progress_calls[-1][1] == 100.0
    assert [c.task_type for c in dispatch.children] == ["noop"] * 3
    assert all(
        c.payload == {"seconds": 0.3, "children": 0} and c.placement == "job" for c in dispatch.children
    )
    child = local_worker.next_stage()
    assert (child.task_type, child.payload["children"], child.payload["seconds"]) == ("noop", 0, 0.3)
    assert child.execute()["children"] == 0  # the child's payload wins over the job's params (3)


def test_noop_fails_its_first_attempts_then_succeeds(local_worker):
    stage = local_worker.stage_of("noop", {"fail_attempts": 2})
    for attempt in (1, 2):
        assert stage.attempt == attempt
        with pytest.raises(RuntimeError, match="on purpose"):
            stage.execute()
        assert task_state(stage.task.id) == "retry_wait"
        stage = local_worker.again(stage)
    assert stage.execute()["attempt"] == 3
    assert job_status(stage.job_id) == "completed"


def test_noop_notices_cancellation_quickly(local_worker):
    stage = local_worker.stage_of("noop", {"seconds": 30, "children": 2})
    threading.Timer(0.2, stage.cancel).start()
    started = time.monotonic()
    with pytest.raises(StageCancelled):
        stage.execute()
    assert time.monotonic() - started < 1.0
    assert stage.children == []
    assert job_status(stage.job_id) == "cancelled"


# --- transcode -------------------------------------------------------------------------------------


def test_transcode_end_to_end(local_worker, roots, clips):
    rel = roots.add(clips.landscape, "videos/landscape.mp4")
    run = local_worker.run_job(
        "transcode",
        {
            "input": rel,
            "ladder": [{"height": 144}, {"height": 180}, {"height": 720}],
            "segment_seconds": 1,
            "thumbnail_width": 160,
            **FAST,
        },
    )
    assert [s.task_type for s in run.stages] == [
        "transcode",
        "transcode.rendition",
        "transcode.rendition",
        "transcode.thumbnail",
        "transcode.quality",
        "transcode.package",
        "transcode.upload",
    ]
    assert job_status(run.job_id) == "completed"
    dispatch = run.stages[0]
    assert [c.payload["name"] for c in dispatch.children[:2]] == [
        "180p",
        "144p",
    ]  # 720p dropped: above the source
    measuring = dispatch.children[3]  # scores the renditions, then spawns the package
    assert (measuring.task_type, measuring.wait_for_siblings, measuring.pool) == (
        "transcode.quality",
        True,
        "media",
    )
    package = run.of("transcode.quality")[0].children[0]
    assert (package.task_type, package.pool) == ("transcode.package", "background")
    assert all(not c.wait_for_siblings for c in dispatch.children[:3])
    assert all(
        c.resource_category == "cpu" and c.vram_mb == 0 and c.timeout_seconds == 600
        for c in dispatch.children
    )
    assert run.of("transcode.package")[0].children[0].pool == "background"

    outputs = run.outputs()
    for name in (
        "renditions/180p.mp4",
        "renditions/144p.mp4",
        "hls/master.m3u8",
        "hls/180p/index.m3u8",
        "hls/144p/index.m3u8",
        "thumbnail.jpg",
        "quality.json",
    ):
        assert name in outputs
    assert len([o for o in outputs if o.startswith("hls/180p/seg_")]) == 3  # 3 s in 1 s segments
    r180, r144 = probe(run.output_dir / "renditions/180p.mp4"), probe(run.output_dir / "renditions/144p.mp4")
    assert (r180.width, r180.height, r144.width, r144.height) == (320, 180, 256, 144)
    assert r180.video_codec == "h264" and r180.audio_codec == "aac"
    assert is_faststart(run.output_dir / "renditions/144p.mp4")
    master = (run.output_dir / "hls/master.m3u8").read_text()
    assert master.startswith("#EXTM3U") and "RESOLUTION=320x180" in master and "RESOLUTION=256x144" in master
    assert "180p/index.m3u8" in master and 'CODECS="avc1.' in master
    assert probe(run.output_dir / "thumbnail.jpg").width == 160

    upload = run.of("transcode.upload")[0]
    specs = {s.name: s for s in upload.published}
    assert (
        specs["renditions/180p.mp4"].kind == "video" and specs["renditions/180p.mp4"].metadata["width"] == 320
    )
    assert specs["hls/master.m3u8"].kind == "playlist"
    # Every FFmpeg stage logged its command line and reported progress up to 100.
    rendition = run.of("transcode.rendition")[0]
    assert any("-progress pipe:1" in line for line in rendition.logs())
    assert rendition.progress_calls and rendition.progress_calls[-1][1] == 100.0
    for stage in run.stages:
        assert not list(stage.workspace.rglob("*.partial*")), stage.task_type


def test_transcode_caps_a_portrait_default_ladder_at_the_source(local_worker, roots, clips):
    rel = roots.add(clips.portrait, "p.mp4")
    result = local_worker.stage_of("transcode", {"input": rel}).execute()
    assert [(r["name"], r["resolution"]) for r in result["ladder"]] == [("180p", "180x320")]


def test_transcode_on_a_gpu_worker_uses_the_hardware_encoder_and_gpu_category(db, roots, clips):
    rel = roots.add(clips.landscape, "a.mp4")
    catalog = {"encoders": ["libx264", "h264_nvenc"], "hardware_encoders": ["h264_nvenc"]}
    gpu_worker = InProcessWorker("gpu-worker", capabilities=catalog)
    dispatch = gpu_worker.stage_of("transcode", {"input": rel})
    dispatch.execute()
    rendition = dispatch.children[0]
    assert (rendition.resource_category, rendition.vram_mb, rendition.payload["encoder"]) == (
        "gpu_encode",
        4000,
        "h264_nvenc",
    )
    assert dispatch.children[1].resource_category == "cpu"  # the thumbnail is plain FFmpeg
    # The first job's thumbnail is now claimable on gpu_worker (job placement): a second GPU machine
    # takes the job that asks for the CPU.
    on_cpu = InProcessWorker("gpu-worker-2", capabilities=catalog).stage_of(
        "transcode", {"input": rel}, hardware="cpu"
    )
    on_cpu.execute()
    assert (
        on_cpu.children[0].resource_category == "cpu" and on_cpu.children[0].payload["encoder"] == "libx264"
    )


def test_cancelling_a_running_rendition_kills_ffmpeg_and_publishes_nothing(
    local_worker, roots, ffmpeg, tmp_path
):
    long_clip = tmp_path / "long.mp4"
    subprocess.run(
        commands.synthetic_clip(long_clip, width=640, height=360, seconds=10, ffmpeg=ffmpeg), check=True
    )
    rel = roots.add(long_clip, "videos/long.mp4")
    params = {
        "input": rel,
        "ladder": [{"height": 360, "video_bitrate_kbps": 800}],
        "preset": "veryslow",
        "crf": 18,
    }
    local_worker.stage_of("transcode", params).execute()
    rendition = local_worker.next_stage()
    assert (rendition.task_type, rendition.payload["name"]) == ("transcode.rendition", "360p")
    rendition.on_progress = lambda percent: rendition.cancel()
    with pytest.raises(StageCancelled):
        rendition.execute()
    [group] = rendition.groups
    with pytest.raises(ProcessLookupError):
        os.kill(group.pgid, 0)  # the process group was killed (and reaped)
    assert rendition.published == [] and rendition.children == []
    assert not (rendition.workspace / "renditions" / "360p.mp4").exists()
    assert job_status(rendition.job_id) == "cancelled"
    assert roots.published_files(rendition.job_id) == []


def test_the_worker_checks_the_input_path_again(local_worker, roots, clips, tmp_path):
    rel = roots.add(clips.landscape, "videos/a.mp4")
    # Accepted at submission; then the file is replaced by a symlink that escapes the media root.
    os.unlink(roots.media / rel)
    secret = tmp_path / "secret.mp4"
    secret.write_bytes(b"x")
    os.symlink(secret, roots.media / rel)
    for job_type in ("transcode", "thumbnail_generate", "reencode_streaming"):
        dispatch = local_worker.stage_of(job_type, {"input": rel})
        with pytest.raises(PermanentFailure, match="outside the media root"):
            dispatch.execute()
        assert job_status(dispatch.job_id) == "failed"
    with pytest.raises(PermanentFailure, match="params.input"):
        local_worker.stage_of("transcode", {"input": "../etc/passwd"}).execute()


def test_an_unreadable_input_fails_permanently(local_worker, roots):
    (roots.media / "bad.mp4").write_bytes(b"garbage" * 100)
    dispatch = local_worker.stage_of("transcode", {"input": "bad.mp4"})
    with pytest.raises(PermanentFailure, match="not a readable media file"):
        dispatch.execute()
    assert task_state(dispatch.task.id) == "failed"


# --- encode, compile ---------------------------------------------------------------------------------


def test_reencode_streaming_encodes_one_faststart_file_and_registers_it(local_worker, roots, clips):
    rel = roots.add(clips.portrait, "inbox/My Clip!.mp4")
    dispatch = local_worker.stage_of(
        "reencode_streaming", {"input": rel, "target_bitrate_kbps": 400, "max_height": 144, **FAST}
    )
    dispatch.execute()
    [encode] = dispatch.children
    assert encode.payload["size"] == [144, 256] and encode.payload["output_name"] == "My_Clip.mp4"
    stage = local_worker.next_stage()
    assert stage.task_type == encode.task_type
    result = stage.execute()
    assert stage.outputs() == []  # published only once measured (reencode_streaming.quality)
    measuring = local_worker.next_stage()
    assert measuring.task_type == "reencode_streaming.quality"
    measured = measuring.execute()["quality"]
    out, _, thumbnail = measuring.outputs()
    info = probe(out)
    assert (info.width, info.height, info.video_codec, info.audio_codec) == (144, 256, "h264", "aac")
    assert is_faststart(out) and result["library_path"].startswith("playback/My_Clip-")
    # The thumbnail the library asset gets is published with the video (issue 35).
    assert [s.name for s in measuring.published] == ["My_Clip.mp4", "quality.json", "thumbnail.jpg"]
    assert probe(thumbnail).video_codec == "mjpeg"
    assert measured["renditions"][0]["name"] == "My_Clip" and 0 <= measured["renditions"][0]["vmaf"] <= 100
    assert measured["renditions"][0]["crf"] == FAST.get("crf", 23)  # the CRF it was encoded with
    [register] = measuring.children
    assert (
        register.task_type == "library.register"
        and (measuring.workspace / register.payload["source"]).exists()
        and register.payload["thumbnail"] == f"{measuring.job_id}/thumbnail.jpg"
    )


def test_thumbnail_generate_takes_a_frame_at_a_quarter_of_the_duration(local_worker, roots, clips):
    rel = roots.add(clips.landscape, "a.mp4")
    run = local_worker.run_job("thumbnail_generate", {"input": rel, "width": 200})
    assert run.outputs() == ["thumbnail.jpg"]
    assert run.stages[0].result["timestamp"] == 0.75  # 25 % of 3 s
    assert probe(run.output_dir / "thumbnail.jpg").width == 200


def test_compile_gif_clamps_the_clip_to_the_end_of_the_video(local_worker, roots, clips):
    rel = roots.add(clips.landscape, "a.mp4")
    run = local_worker.run_job(
        "compile_gif", {"input": rel, "start": 2.0, "duration": 5, "width": 100, "fps": 10}
    )
    info = probe(run.output_dir / "clip.gif")
    assert (info.video_codec, info.width) == ("gif", 100)
    assert run.stages[0].result["duration"] == 1.0  # clamped to the end of the video


def test_compile_quad_tiles_four_inputs_with_audio(local_worker, roots, clips):
    c = clips
    inputs = [roots.add(p, f"q/{i}.mp4") for i, p in enumerate([c.landscape, c.portrait, c.silent, c.scenes])]
    run = local_worker.run_job(
        "compile_quad", {"inputs": inputs, "cell_width": 160, "cell_height": 90, **FAST}
    )
    assert [s.task_type for s in run.stages] == ["compile_quad", "compile_quad.render"]
    info = probe(run.output_dir / "quad.mp4")
    assert (info.width, info.height, info.has_audio) == (320, 180, True)
    assert info.duration_seconds == pytest.approx(2.0, abs=0.1)
    assert json.loads((run.output_dir / "sources.json").read_text())["sources"][0]["path"] == "q/0.mp4"


@pytest.mark.parametrize("layout, size, duration", [("grid", (480, 180), 3.0), ("concat", (320, 180), 7.0)])
def test_compile_mega_lays_out_a_grid_or_a_sequence(local_worker, roots, clips, layout, size, duration):
    c = clips
    inputs = [roots.add(p, f"m/{i}.mp4") for i, p in enumerate([c.landscape, c.portrait, c.silent])]
    run = local_worker.run_job(
        "compile_mega",
        {
            "inputs": inputs,
            "layout": layout,
            "columns": 3,
            "cell_width": 160,
            "cell_height": 180,
            "width": 320,
            "height": 180,
            "duration": "longest",
            **FAST,
        },
    )
    info = probe(run.output_dir / "mega.mp4")
    assert (info.width, info.height) == size
    assert info.duration_seconds == pytest.approx(duration, abs=0.15)


# --- analysis ------------------------------------------------------------------------------------------


def test_scene_extract_finds_the_three_scenes_with_an_image_each(local_worker, roots, clips):
    rel = roots.add(clips.scenes, "s.mp4")
    run = local_worker.run_job(
        "scene_extract", {"input": rel, "min_scene_seconds": 0.5, "thumbnail_width": 96}
    )
    report = json.loads((run.output_dir / "scenes.json").read_text())
    assert [(s["start"], s["end"]) for s in report["scenes"]] == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert [s["image"] for s in report["scenes"]] == [f"scenes/scene_000{i}.jpg" for i in (1, 2, 3)]
    assert probe(run.output_dir / "scenes/scene_0002.jpg").width == 96
    assert run.of("scene_extract.detect")[0].children == []  # no asset to update


def test_clip_generate_from_ranges_and_from_detection(local_worker, roots, clips):
    rel = roots.add(clips.scenes, "s.mp4")
    run = local_worker.run_job(
        "clip_generate",
        {"input": rel, "ranges": [{"start": 0.5, "end": 1.5}, {"start": 2.5, "end": 9}], **FAST},
    )
    assert run.outputs() == ["clips/clip_001.mp4", "clips/clip_002.mp4"]
    assert probe(run.output_dir / "clips/clip_001.mp4").duration_seconds == pytest.approx(1.0, abs=0.1)
    assert probe(run.output_dir / "clips/clip_002.mp4").duration_seconds == pytest.approx(0.5, abs=0.1)
    detected = local_worker.run_job("clip_generate", {"input": rel, "min_clip_seconds": 0.5, **FAST})
    assert [s.task_type for s in detected.stages] == ["clip_generate", "clip_generate.detect"] + [
        "clip_generate.cut"
    ] * 3
    assert len(detected.outputs()) == 3


def test_highlight_picks_the_loud_middle(local_worker, roots, clips):
    rel = roots.add(clips.scenes, "s.mp4")
    run = local_worker.run_job(
        "highlight_generate",
        {
            "input": rel,
            "target_seconds": 1,
            "segment_seconds": 1,
            "weights": {"scene": 0, "motion": 0, "loudness": 1},
            **FAST,
        },
    )
    assert [s.task_type for s in run.stages] == [
        "highlight_generate",
        "highlight_generate.analyze",
        "highlight_generate.render",
    ]
    report = json.loads((run.output_dir / "segments.json").read_text())
    assert [(s["start"], s["duration"]) for s in report["segments"]] == [(1.0, 1.0)]
    assert "no learned model" in report["method"]
    info = probe(run.output_dir / "highlight.mp4")
    assert info.duration_seconds == pytest.approx(1.0, abs=0.1) and info.has_audio


def test_digest_covers_the_video(local_worker, roots, clips):
    rel = roots.add(clips.scenes, "s.mp4")
    run = local_worker.run_job(
        "digest_generate", {"input": rel, "target_seconds": 2, "segment_seconds": 1, **FAST}
    )
    segments = json.loads((run.output_dir / "segments.json").read_text())["segments"]
    assert len(segments) == 2 and segments[0]["start"] < 1.5 <= segments[1]["start"]
    assert probe(run.output_dir / "digest.mp4").duration_seconds == pytest.approx(2.0, abs=0.15)


def test_tag_generation_describes_the_video_by_measurement(local_worker, roots, clips):
    rel = roots.add(clips.scenes, "s.mp4")
    run = local_worker.run_job("tag_generation", {"input": rel})
    report = json.loads((run.output_dir / "tags.json").read_text())
    assert report["tags"][:4] == ["low-resolution", "landscape", "short", "has-audio"]
    assert "not a learned model" in report["method"]
    assert report["measurements"]["cuts"] >= 2


# --- webhook --------------------------------------------------------------------------------------------


def test_webhook_posts_a_signed_summary_and_retries_on_errors(local_worker, settings):
    secret = webhooks.generate_secret()
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_SECRET": secret, "WEBHOOK_ALLOW_PRIVATE": True}
    with Receiver(statuses=[500, 200]) as receiver:
        job = local_worker.stage_of("noop", {}, webhook_url=receiver.url + "/hook")
        job.execute()  # the job completes: its finish queues the terminal webhook
        hook = local_worker.next_stage()
        assert (hook.task_type, hook.job_id) == ("webhook", job.job_id)
        with pytest.raises(RuntimeError, match="500"):
            hook.execute()
        hook = local_worker.again(hook)
        assert hook.attempt == 2 and hook.execute()["status"] == 200
    (_, failed_headers, _), (path, headers, body) = receiver.requests
    assert path == "/hook"
    assert failed_headers["webhook-id"] == headers["webhook-id"]  # stable across retries
    assert headers["webhook-id"] == f"msg_{job.job_id.replace('-', '')}_completed_0"
    webhooks.verify(secret, headers, body)
    envelope = json.loads(body)
    assert (envelope["type"], envelope["data"]["id"], envelope["data"]["status"]) == (
        "job.completed",
        job.job_id,
        "completed",
    )
    assert envelope["timestamp"] == envelope["data"]["finished_at"]


def test_webhook_to_a_private_address_fails_permanently(local_worker, settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": False}
    local_worker.stage_of("noop", {}, webhook_url="http://169.254.169.254/latest").execute()
    hook = local_worker.next_stage()
    assert hook.task_type == "webhook"
    with pytest.raises(PermanentFailure, match="non-public"):
        hook.execute()
    assert task_state(hook.task.id) == "failed"
