"""Stage handlers run through a real in-process StageContext (tests/media/localctx.py) on real clips.

These need no database: inputs are paths under a private media root. Library stages (which use
MediaAsset) are in test_library_handlers.py.
"""

import json
import os
import subprocess
import threading
import time

import pytest

from media import commands
from media.probe import is_faststart, probe
from tests.media.localctx import LocalContext, run_job, run_stage
from tests.media.receiver import Receiver
from workers.stages import HANDLERS
from workers.stages.base import PermanentFailure, StageCancelled

FAST = {"preset": "ultrafast"}


def job(media_env, job_type, params, **kwargs):
    return run_job(
        job_type, params, workspace=media_env.workspace(), output_root=media_env.output_root, **kwargs
    )


def test_every_job_type_stage_has_a_handler():
    from media.jobtypes import JOB_TYPES

    for jt in JOB_TYPES.values():
        for task_type in jt.stages:
            assert task_type in HANDLERS, task_type
    assert "webhook" in HANDLERS


# --- noop --------------------------------------------------------------------------------------------


def test_noop_sleeps_reports_progress_and_spawns_children(tmp_path):
    ctx = LocalContext("noop", workspace=tmp_path, job_params={"seconds": 0.3, "children": 3})
    started = time.monotonic()
    result = run_stage(ctx)
    assert time.monotonic() - started >= 0.3
    assert result["children"] == 3 and ctx.progress_calls[-1][1] == 100.0
    assert [c.task_type for c in ctx.children] == ["noop"] * 3
    assert all(c.payload == {"seconds": 0.3, "children": 0} and c.placement == "job" for c in ctx.children)
    child = LocalContext(
        "noop",
        workspace=tmp_path,
        job_type="noop",
        payload=ctx.children[0].payload,
        job_params={"seconds": 0.3, "children": 3, "fail_attempts": 5},
    )
    assert run_stage(child)["children"] == 0  # the child's payload wins over the job's params


def test_noop_fails_its_first_attempts(tmp_path):
    for attempt in (1, 2):
        with pytest.raises(RuntimeError, match="on purpose"):
            run_stage(
                LocalContext("noop", workspace=tmp_path, job_params={"fail_attempts": 2}, attempt=attempt)
            )
    assert (
        run_stage(LocalContext("noop", workspace=tmp_path, job_params={"fail_attempts": 2}, attempt=3))[
            "attempt"
        ]
        == 3
    )


def test_noop_notices_cancellation_quickly(tmp_path):
    ctx = LocalContext("noop", workspace=tmp_path, job_params={"seconds": 30, "children": 2})
    threading.Timer(0.2, ctx.cancel_event.set).start()
    started = time.monotonic()
    with pytest.raises(StageCancelled):
        run_stage(ctx)
    assert time.monotonic() - started < 1.0
    assert ctx.children == []


# --- transcode -------------------------------------------------------------------------------------


def test_transcode_end_to_end(media_env):
    rel = media_env.add(media_env.clips.landscape, "videos/landscape.mp4")
    run = job(
        media_env,
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
        "transcode.package",
        "transcode.upload",
    ]
    dispatch = run.stages[0].ctx
    assert [c.payload["name"] for c in dispatch.children[:2]] == [
        "180p",
        "144p",
    ]  # 720p dropped: above the source
    package = dispatch.children[3]
    assert (
        package.task_type == "transcode.package"
        and package.wait_for_siblings
        and package.pool == "background"
    )
    assert all(not c.wait_for_siblings for c in dispatch.children[:3])
    assert all(
        c.resource_category == "cpu" and c.vram_mb == 0 and c.timeout_seconds == 600
        for c in dispatch.children
    )
    assert run.of("transcode.package")[0].ctx.children[0].pool == "background"

    outputs = run.outputs()
    for name in (
        "renditions/180p.mp4",
        "renditions/144p.mp4",
        "hls/master.m3u8",
        "hls/180p/index.m3u8",
        "hls/144p/index.m3u8",
        "thumbnail.jpg",
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

    upload = run.of("transcode.upload")[0].ctx
    specs = {s.name: s for s in upload.published}
    assert (
        specs["renditions/180p.mp4"].kind == "video" and specs["renditions/180p.mp4"].metadata["width"] == 320
    )
    assert specs["hls/master.m3u8"].kind == "playlist"
    # Every FFmpeg stage logged its command line and reported progress up to 100.
    rendition = run.of("transcode.rendition")[0].ctx
    assert any("-progress pipe:1" in line for line in rendition.logs)
    assert rendition.progress_calls and rendition.progress_calls[-1][1] == 100.0
    for record in run.stages:
        assert not list(record.ctx.workspace.rglob("*.partial*")), record.task_type


def test_transcode_portrait_default_ladder_is_capped_at_the_source(media_env):
    rel = media_env.add(media_env.clips.portrait, "p.mp4")
    ctx = LocalContext("transcode", workspace=media_env.workspace(), job_params={"input": rel})
    result = run_stage(ctx)
    assert [(r["name"], r["resolution"]) for r in result["ladder"]] == [("180p", "180x320")]


def test_transcode_on_a_gpu_worker_uses_the_hardware_encoder_and_gpu_category(media_env):
    rel = media_env.add(media_env.clips.landscape, "a.mp4")
    ctx = LocalContext(
        "transcode",
        workspace=media_env.workspace(),
        job_params={"input": rel},
        capabilities={"encoders": ["libx264", "h264_nvenc"], "hardware_encoders": ["h264_nvenc"]},
    )
    run_stage(ctx)
    rendition = ctx.children[0]
    assert (rendition.resource_category, rendition.vram_mb, rendition.payload["encoder"]) == (
        "gpu_encode",
        4000,
        "h264_nvenc",
    )
    assert ctx.children[1].resource_category == "cpu"  # the thumbnail is plain FFmpeg
    ctx_cpu = LocalContext(
        "transcode",
        workspace=media_env.workspace("w2"),
        job_params={"input": rel},
        job_hardware="cpu",
        capabilities=ctx.capabilities,
    )
    run_stage(ctx_cpu)
    assert (
        ctx_cpu.children[0].resource_category == "cpu" and ctx_cpu.children[0].payload["encoder"] == "libx264"
    )


def test_cancelling_a_running_rendition_kills_ffmpeg_and_publishes_nothing(media_env, ffmpeg, tmp_path):
    long_clip = tmp_path / "long.mp4"
    subprocess.run(
        commands.synthetic_clip(long_clip, width=640, height=360, seconds=10, ffmpeg=ffmpeg), check=True
    )
    ws = media_env.workspace()
    (ws / "input").mkdir()
    os.link(long_clip, ws / "input" / "source.mp4")
    ctx = LocalContext(
        "transcode.rendition",
        workspace=ws,
        job_type="transcode",
        payload={
            "input": "input/source.mp4",
            "name": "360p",
            "width": 640,
            "height": 360,
            "video_bitrate_kbps": 800,
            "segment_seconds": 4,
            "encoder": "libx264",
            "preset": "veryslow",
            "crf": 18,
            "audio_bitrate_kbps": 128,
            "duration": 10.0,
        },
    )
    original_progress = ctx.progress

    def cancel_on_first_progress(percent, detail=None):
        original_progress(percent, detail)
        ctx.cancel_event.set()

    ctx.progress = cancel_on_first_progress
    with pytest.raises(StageCancelled):
        run_stage(ctx)
    [pid] = ctx.pids
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the process group was killed (and reaped)
    assert ctx.published == [] and ctx.children == []
    assert not (ws / "renditions" / "360p.mp4").exists()


def test_the_worker_checks_the_input_path_again(media_env, tmp_path):
    rel = media_env.add(media_env.clips.landscape, "videos/a.mp4")
    # Accepted at submission; then the file is replaced by a symlink that escapes the media root.
    os.unlink(media_env.media_root / rel)
    secret = tmp_path / "secret.mp4"
    secret.write_bytes(b"x")
    os.symlink(secret, media_env.media_root / rel)
    for job_type in ("transcode", "thumbnail_generate", "reencode_streaming"):
        with pytest.raises(PermanentFailure, match="outside the media root"):
            run_stage(
                LocalContext(job_type, workspace=media_env.workspace(job_type), job_params={"input": rel})
            )
    with pytest.raises(PermanentFailure, match="params.input"):
        run_stage(
            LocalContext("transcode", workspace=media_env.workspace(), job_params={"input": "../etc/passwd"})
        )


def test_an_unreadable_input_fails_permanently(media_env):
    (media_env.media_root / "bad.mp4").write_bytes(b"garbage" * 100)
    with pytest.raises(PermanentFailure, match="not a readable media file"):
        run_stage(LocalContext("transcode", workspace=media_env.workspace(), job_params={"input": "bad.mp4"}))


# --- encode, compile ---------------------------------------------------------------------------------


def test_reencode_streaming_encode_stage(media_env):
    rel = media_env.add(media_env.clips.portrait, "inbox/My Clip!.mp4")
    ws = media_env.workspace()
    dispatch = LocalContext(
        "reencode_streaming",
        workspace=ws,
        job_params={"input": rel, "target_bitrate_kbps": 400, "max_height": 144, **FAST},
    )
    run_stage(dispatch)
    [encode] = dispatch.children
    assert encode.payload["size"] == [144, 256] and encode.payload["output_name"] == "My_Clip.mp4"
    ctx = LocalContext(
        encode.task_type,
        workspace=ws,
        job_type="reencode_streaming",
        job_id=dispatch.job_id,
        payload=encode.payload,
    )
    result = run_stage(ctx)
    [out] = ctx.finish(media_env.output_root)
    info = probe(out)
    assert (info.width, info.height, info.video_codec, info.audio_codec) == (144, 256, "h264", "aac")
    assert is_faststart(out) and result["library_path"].startswith("playback/My_Clip-")
    [register] = ctx.children
    assert register.task_type == "library.register" and (ws / register.payload["source"]).exists()


def test_thumbnail_generate(media_env):
    rel = media_env.add(media_env.clips.landscape, "a.mp4")
    run = job(media_env, "thumbnail_generate", {"input": rel, "width": 200})
    assert run.outputs() == ["thumbnail.jpg"]
    assert run.stages[0].result["timestamp"] == 0.75  # 25 % of 3 s
    assert probe(run.output_dir / "thumbnail.jpg").width == 200


def test_compile_gif(media_env):
    rel = media_env.add(media_env.clips.landscape, "a.mp4")
    run = job(media_env, "compile_gif", {"input": rel, "start": 2.0, "duration": 5, "width": 100, "fps": 10})
    info = probe(run.output_dir / "clip.gif")
    assert (info.video_codec, info.width) == ("gif", 100)
    assert run.stages[0].result["duration"] == 1.0  # clamped to the end of the video


def test_compile_quad(media_env):
    c = media_env.clips
    inputs = [
        media_env.add(p, f"q/{i}.mp4") for i, p in enumerate([c.landscape, c.portrait, c.silent, c.scenes])
    ]
    run = job(media_env, "compile_quad", {"inputs": inputs, "cell_width": 160, "cell_height": 90, **FAST})
    assert [s.task_type for s in run.stages] == ["compile_quad", "compile_quad.render"]
    info = probe(run.output_dir / "quad.mp4")
    assert (info.width, info.height, info.has_audio) == (320, 180, True)
    assert info.duration_seconds == pytest.approx(2.0, abs=0.1)
    assert json.loads((run.output_dir / "sources.json").read_text())["sources"][0]["path"] == "q/0.mp4"


@pytest.mark.parametrize("layout, size, duration", [("grid", (480, 180), 3.0), ("concat", (320, 180), 7.0)])
def test_compile_mega(media_env, layout, size, duration):
    c = media_env.clips
    inputs = [media_env.add(p, f"m/{i}.mp4") for i, p in enumerate([c.landscape, c.portrait, c.silent])]
    run = job(
        media_env,
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


def test_scene_extract(media_env):
    rel = media_env.add(media_env.clips.scenes, "s.mp4")
    run = job(media_env, "scene_extract", {"input": rel, "min_scene_seconds": 0.5, "thumbnail_width": 96})
    report = json.loads((run.output_dir / "scenes.json").read_text())
    assert [(s["start"], s["end"]) for s in report["scenes"]] == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert [s["image"] for s in report["scenes"]] == [f"scenes/scene_000{i}.jpg" for i in (1, 2, 3)]
    assert probe(run.output_dir / "scenes/scene_0002.jpg").width == 96
    assert run.of("scene_extract.detect")[0].ctx.children == []  # no asset to update


def test_clip_generate_from_ranges_and_from_detection(media_env):
    rel = media_env.add(media_env.clips.scenes, "s.mp4")
    run = job(
        media_env,
        "clip_generate",
        {"input": rel, "ranges": [{"start": 0.5, "end": 1.5}, {"start": 2.5, "end": 9}], **FAST},
    )
    assert run.outputs() == ["clips/clip_001.mp4", "clips/clip_002.mp4"]
    assert probe(run.output_dir / "clips/clip_001.mp4").duration_seconds == pytest.approx(1.0, abs=0.1)
    assert probe(run.output_dir / "clips/clip_002.mp4").duration_seconds == pytest.approx(0.5, abs=0.1)
    detected = job(media_env, "clip_generate", {"input": rel, "min_clip_seconds": 0.5, **FAST})
    assert [s.task_type for s in detected.stages] == ["clip_generate", "clip_generate.detect"] + [
        "clip_generate.cut"
    ] * 3
    assert len(detected.outputs()) == 3


def test_highlight_picks_the_loud_middle(media_env):
    rel = media_env.add(media_env.clips.scenes, "s.mp4")
    run = job(
        media_env,
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


def test_digest_covers_the_video(media_env):
    rel = media_env.add(media_env.clips.scenes, "s.mp4")
    run = job(media_env, "digest_generate", {"input": rel, "target_seconds": 2, "segment_seconds": 1, **FAST})
    segments = json.loads((run.output_dir / "segments.json").read_text())["segments"]
    assert len(segments) == 2 and segments[0]["start"] < 1.5 <= segments[1]["start"]
    assert probe(run.output_dir / "digest.mp4").duration_seconds == pytest.approx(2.0, abs=0.15)


def test_tag_generation(media_env):
    rel = media_env.add(media_env.clips.scenes, "s.mp4")
    run = job(media_env, "tag_generation", {"input": rel})
    report = json.loads((run.output_dir / "tags.json").read_text())
    assert report["tags"][:4] == ["low-resolution", "landscape", "short", "has-audio"]
    assert "not a learned model" in report["method"]
    assert report["measurements"]["cuts"] >= 2


# --- webhook --------------------------------------------------------------------------------------------


def test_webhook_posts_a_signed_summary_and_retries_on_errors(tmp_path, settings):
    from media import webhooks

    secret = webhooks.generate_secret()
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_SECRET": secret, "WEBHOOK_ALLOW_PRIVATE": True}
    payload = {
        "event": "job.completed",
        "webhook_id": "msg_stable",
        "job": {"id": "j1", "status": "completed"},
        "occurred_at": "2026-01-01T00:00:00+00:00",
    }
    with Receiver(status=500) as failing:
        ctx = LocalContext(
            "webhook", workspace=tmp_path, job_type="noop", payload={**payload, "url": failing.url}
        )
        with pytest.raises(RuntimeError, match="500"):
            run_stage(ctx)
    with Receiver() as receiver:
        ctx = LocalContext(
            "webhook",
            workspace=tmp_path,
            job_type="noop",
            payload={**payload, "url": receiver.url},
            attempt=2,
        )
        assert run_stage(ctx)["status"] == 200
    (_, failed_headers, _), (_, headers, body) = failing.requests[0], receiver.requests[0]
    assert failed_headers["webhook-id"] == headers["webhook-id"] == "msg_stable"  # stable across retries
    webhooks.verify(secret, headers, body)
    assert json.loads(body) == {
        "type": "job.completed",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "data": {"id": "j1", "status": "completed"},
    }


def test_webhook_to_a_private_address_fails_permanently(tmp_path, settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": False}
    ctx = LocalContext(
        "webhook",
        workspace=tmp_path,
        job_type="noop",
        payload={"url": "http://169.254.169.254/latest", "event": "job.failed", "job": {"id": "x"}},
    )
    with pytest.raises(PermanentFailure, match="non-public"):
        run_stage(ctx)
