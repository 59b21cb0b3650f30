"""Every job type end to end through one real worker process (concurrency 2), real FFmpeg.

Why one module-scoped run: transactional tests flush every table afterwards, the worker's
registration included, and a worker whose session row is gone exits ("uid taken over"). So the
`run` fixture starts one worker, submits every job type through `create_job` (the same path as
the API), waits until everything — webhooks included — has finished, records what the database
says (jobs, tasks, stage logs, fenced finishes, outputs, library assets), drains the worker and
flushes the database. Each test then checks one job type against that record and against the
published files themselves, probed again here.

Submission happens in two phases: the scans first, then the jobs that need their results
(`compile_random` picks validated library assets; `thumbnail_generate`, `tag_generation` and
`move_to_library` take a `video_id`).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from media import webhooks
from media.models import MediaAsset
from media.probe import MediaInfo, is_faststart, probe
from media.submission import create_job
from scheduler.models import JobOutput
from tests.kit.db import database_url, one, sql
from tests.kit.media import SIGNED_LOCAL_WEBHOOKS, WEBHOOK_SECRET, Clips, MediaRoots
from tests.kit.waiting import wait_for
from tests.kit.web import Receiver
from tests.kit.workers import Workers, processes_mentioning, worker_environment

# No django_db marker on these tests: they read the record the module fixture took (the fixture
# opens the database itself and flushes it when done), so a flush after each of them would only add
# a second or two apiece on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

UID = "e2e-media"
FAST = {"preset": "ultrafast"}
HOOK_PATH = "/hooks/jetencode"


def lay_out_media(roots: MediaRoots, clips: Clips) -> None:
    for name in ("landscape", "portrait", "silent", "scenes"):
        roots.add(getattr(clips, name), f"src/{name}.mp4")
    # What `scan` finds: four videos (one in a subdirectory), a broken one, and a file that is no video.
    roots.add(clips.landscape, "videos/landscape.mp4")
    roots.add(clips.portrait, "videos/portrait.mp4")
    roots.add(clips.silent, "videos/silent.mp4")
    roots.add(clips.scenes, "videos/sub/scenes.mp4")
    (roots.media / "videos/broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypisom" + b"not really a video" * 64)
    (roots.media / "videos/notes.txt").write_text("not a video\n")
    roots.add(clips.landscape, "public/incoming.mp4")
    roots.add(clips.landscape, "loose/clip.mp4")


def phase_one() -> dict[str, dict]:
    quad = [f"src/{name}.mp4" for name in ("landscape", "portrait", "silent", "scenes")]
    return {
        "scan": {"directory": "videos"},
        "public_scan": {},
        "validate": {"input": "loose/clip.mp4"},
        "transcode": {
            "input": "src/landscape.mp4",
            # 360p is above the 180p source and must be dropped.
            "ladder": [{"height": 360}, {"height": 180}, {"height": 144}],
            "segment_seconds": 1,
            "thumbnail_width": 160,
            **FAST,
        },
        "reencode_streaming": {
            "input": "src/landscape.mp4",
            "max_height": 144,
            "target_bitrate_kbps": 400,
            **FAST,
        },
        "compile_quad": {"inputs": quad, "cell_width": 160, "cell_height": 90, "fps": 15, **FAST},
        "compile_mega": {
            "inputs": [quad[0], quad[2], quad[3]],
            "cell_width": 160,
            "cell_height": 90,
            "fps": 15,
            **FAST,
        },
        "compile_gif": {"input": "src/landscape.mp4", "start": 0.5, "duration": 1, "width": 160, "fps": 8},
        "scene_extract": {"input": "src/scenes.mp4", "min_scene_seconds": 0.5, "thumbnail_width": 96},
        "clip_generate": {
            "input": "src/scenes.mp4",
            "ranges": [{"start": 0, "end": 1}, {"start": 1.5, "end": 2.5}],
            **FAST,
        },
        "highlight_generate": {"input": "src/scenes.mp4", "target_seconds": 2, "segment_seconds": 1, **FAST},
        "digest_generate": {"input": "src/scenes.mp4", "target_seconds": 2, "segment_seconds": 1, **FAST},
    }


def phase_two(asset_ids: dict[str, str]) -> dict[str, dict]:
    return {
        "compile_random": {
            "directory": "videos",
            "orientation": "landscape",
            "count": 2,
            "seed": 7,
            "width": 320,
            "height": 180,
            "fps": 15,
            **FAST,
        },
        "thumbnail_generate": {"video_id": asset_ids["videos/landscape.mp4"], "width": 160},
        "tag_generation": {"video_id": asset_ids["videos/sub/scenes.mp4"]},
        "move_to_library": {
            "video_id": asset_ids["public/incoming.mp4"],
            "target_directory": "library/moved",
        },
    }


JOB_TYPES = [*phase_one(), "compile_random", "thumbnail_generate", "tag_generation", "move_to_library"]


# --- the shared run ------------------------------------------------------------------------------


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


@dataclass
class JobRun:
    id: str
    type: str
    status: str
    progress: int
    last_error: str | None
    execution_id: int
    tasks: list[dict[str, Any]]
    outputs: list[dict[str, Any]]

    def stages(self) -> Counter:
        return Counter(t["task_type"] for t in self.tasks)

    def task(self, task_type: str) -> dict[str, Any]:
        (task,) = [t for t in self.tasks if t["task_type"] == task_type]
        return task

    def output(self, name: str) -> dict[str, Any]:
        (output,) = [o for o in self.outputs if o["name"] == name]
        return output

    def describe(self) -> str:
        lines = [f"{self.type} {self.id}: {self.status} {self.progress}% error={self.last_error!r}"]
        for t in self.tasks:
            lines.append(
                f"  task {t['id']} {t['task_type']} {t['state']} attempt {t['attempt']} "
                f"failure={(t['last_failure'] or '')[-800:]!r}"
            )
            lines += [f"    | {line}" for line in t["logs"][-8:]]
        return "\n".join(lines)


@dataclass
class Run:
    roots: MediaRoots
    jobs: dict[str, JobRun]
    assets: dict[str, dict[str, Any]]  # by path
    webhooks: list[tuple[str, dict[str, str], bytes]]
    worker_exit: int | None
    leftover_processes: list[str]
    worker_log: str
    seconds: float
    notes: list[str] = field(default_factory=list)


def snapshot_job(job_id) -> JobRun:
    status, progress, last_error, job_type = sql(
        "SELECT status, progress, last_error, type FROM jobs WHERE id = %s", [job_id]
    )[0]
    columns = [
        "id",
        "execution_id",
        "task_type",
        "state",
        "attempt",
        "last_failure",
        "result",
        "claimed_by",
        "finishes",
        "logs",
    ]
    rows = sql(
        "SELECT t.id, t.execution_id, t.task_type, t.state, t.attempt, t.last_failure, t.result, t.claimed_by, "
        "  (SELECT count(*) FROM queue_fence_audit a "
        "    WHERE a.task_id = t.id AND a.operation = 'finish' AND a.accepted), "
        "  ARRAY(SELECT l.message FROM queue_task_logs l WHERE l.task_id = t.id ORDER BY l.id) "
        "FROM queue_tasks t WHERE t.job_id = %s ORDER BY t.id",
        [job_id],
    )
    tasks = [dict(zip(columns, row, strict=True)) for row in rows]
    for task in tasks:
        task["result"] = _json(task["result"])
    outputs = list(
        JobOutput.objects.filter(job_id=job_id)
        .order_by("name")
        .values("name", "kind", "size_bytes", "metadata", "execution_id", "task_id", "storage_url")
    )
    return JobRun(
        str(job_id),
        job_type,
        status,
        progress,
        last_error,
        one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job_id]),
        tasks,
        outputs,
    )


def all_done(job_ids) -> bool:
    """Every job terminal and nothing left to run for them (terminal webhooks included)."""
    ids = list(job_ids)
    return not one(
        "SELECT (SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status NOT IN ('completed', 'failed', 'cancelled'))"
        " + (SELECT count(*) FROM queue_tasks WHERE job_id = ANY(%s) AND state IN ('pending', 'running', 'retry_wait'))",
        [ids, ids],
    )


def submit(job_type: str, params: dict, **extra) -> uuid.UUID:
    return create_job(None, {"type": job_type, "params": params, **extra}).id


@pytest.fixture(scope="module")
def run(tmp_path_factory, clips, django_db_setup, django_db_blocker) -> Run:
    base = tmp_path_factory.mktemp("e2e-types")
    roots = MediaRoots.under(base)
    lay_out_media(roots, clips)
    with (
        django_db_blocker.unblock(),
        roots.settings(WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_SECRET=WEBHOOK_SECRET),
        Receiver() as receiver,
    ):
        env = worker_environment(database_url(), base, **roots.environment(), **SIGNED_LOCAL_WEBHOOKS)
        workers = Workers(env, base / "logs")
        try:
            # What tests/conftest.py's autouse fixture does before each database test.
            sql(
                "INSERT INTO queue_scheduler_state (id, rebalances, updated_at) VALUES (1, 0, now()) "
                "ON CONFLICT DO NOTHING"
            )
            worker = workers.start(UID, "--concurrency", "2")
            started = time.monotonic()
            ids = {job_type: submit(job_type, params) for job_type, params in phase_one().items()}
            wait_for(lambda: all_done([ids["scan"], ids["public_scan"]]), 120, "the scans", workers=[worker])
            asset_ids = {a.path: str(a.id) for a in MediaAsset.objects.all()}
            for job_type, params in phase_two(asset_ids).items():
                hook = {"webhook_url": receiver.url + HOOK_PATH} if job_type == "thumbnail_generate" else {}
                ids[job_type] = submit(job_type, params, **hook)
            notes = []
            try:
                wait_for(lambda: all_done(ids.values()), 200, "every job", interval=0.25, workers=[worker])
            except AssertionError as exc:  # record what happened; the tests report it per job type
                notes.append(str(exc))
            seconds = time.monotonic() - started
            jobs = {job_type: snapshot_job(job_id) for job_type, job_id in ids.items()}
            assets = {a["path"]: a for a in MediaAsset.objects.values()}
            try:
                exit_code = worker.drain()
            except AssertionError as exc:  # did not exit in time: reported by the drain test
                exit_code = None
                notes.append(str(exc))
            leftovers = [" ".join(p.cmdline()) for p in processes_mentioning(roots.workspace, roots.outputs)]
            return Run(
                roots,
                jobs,
                assets,
                list(receiver.requests),
                exit_code,
                leftovers,
                worker.output(),
                seconds,
                notes,
            )
        finally:
            workers.stop_all()
            call_command("flush", interactive=False, verbosity=0)


# --- checks shared by every type ----------------------------------------------------------------


def close(actual: float, expected: float, tolerance: float) -> bool:
    return abs(float(actual) - expected) <= tolerance


def probed(run: Run, job: JobRun, name: str) -> MediaInfo:
    return probe(run.roots.job_outputs(job.id) / name)


def check_completed(run: Run, job: JobRun) -> None:
    context = job.describe() + ("\n" + "\n".join(run.notes) if run.notes else "")
    assert job.status == "completed", context
    assert job.progress == 100, context
    assert not job.last_error, context
    for task in job.tasks:
        assert task["state"] == "completed", context
        assert task["finishes"] == 1, (
            f"task {task['id']} {task['task_type']}: {task['finishes']} accepted finishes"
        )
        assert task["claimed_by"] == UID
        assert task["logs"], f"task {task['id']} {task['task_type']} wrote no stage log"
        assert task["execution_id"] == job.execution_id == 1


def check_outputs(run: Run, job: JobRun, expected_names: set[str] | None = None) -> dict[str, dict]:
    """Each JobOutput row is a file under OUTPUT_ROOT/<job id>/ of the recorded size, with metadata;
    nothing else is in that directory (no temporary names left behind)."""
    names = [o["name"] for o in job.outputs]
    assert len(names) == len(set(names))
    on_disk = run.roots.published_files(job.id) if run.roots.job_outputs(job.id).exists() else []
    assert on_disk == sorted(names), "files under OUTPUT_ROOT/<job id>/ differ from job_outputs"
    if expected_names is not None:
        assert set(names) == expected_names
    for output in job.outputs:
        path = run.roots.job_outputs(job.id) / output["name"]
        meta = output["metadata"]
        assert output["execution_id"] == job.execution_id
        assert output["size_bytes"] == path.stat().st_size == meta["size_bytes"] > 0, output
        assert output["storage_url"], output
        if output["kind"] == "video":
            assert meta["video_codec"] == "h264" and meta["width"] and meta["height"], output
            assert meta["duration_seconds"] > 0, output
        elif output["kind"] == "image" and not output["name"].startswith("scenes/"):
            # (scene keyframes are published unprobed: there may be a thousand of them)
            assert meta["width"] and meta["height"], output
    return {o["name"]: o for o in job.outputs}


def check_video(
    info: MediaInfo, *, size: tuple[int, int], duration: float, audio: bool = True, tolerance: float = 0.3
) -> None:
    assert (info.video_codec, info.width, info.height, info.pix_fmt) == ("h264", *size, "yuv420p"), info
    assert close(info.duration_seconds, duration, tolerance), info
    assert info.audio_codec == ("aac" if audio else ""), info


def check_matches_metadata(output: dict, info: MediaInfo) -> None:
    meta = output["metadata"]
    for key in ("width", "height", "video_codec", "audio_codec", "duration_seconds"):
        assert meta[key] == getattr(info, key), (key, meta, info)


# --- per type -----------------------------------------------------------------------------------


def check_transcode(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter(
        {
            "transcode": 1,
            "transcode.rendition": 2,
            "transcode.thumbnail": 1,
            "transcode.quality": 1,
            "transcode.package": 1,
            "transcode.upload": 1,
        }
    )
    outputs = check_outputs(run, job)
    names = set(outputs)
    assert {
        "renditions/180p.mp4",
        "renditions/144p.mp4",
        "hls/master.m3u8",
        "hls/180p/index.m3u8",
        "hls/144p/index.m3u8",
        "thumbnail.jpg",
        "quality.json",
    } <= names
    assert not any("360p" in name for name in names), "a rung above the source was produced"
    upload = job.task("transcode.upload")
    assert {o["task_id"] for o in job.outputs} == {upload["id"]}, "only the upload stage publishes"
    for name, size in (("180p", (320, 180)), ("144p", (256, 144))):
        info = probed(run, job, f"renditions/{name}.mp4")
        check_video(info, size=size, duration=3.0)
        check_matches_metadata(outputs[f"renditions/{name}.mp4"], info)
        assert is_faststart(run.roots.job_outputs(job.id) / f"renditions/{name}.mp4")
        playlist = (run.roots.job_outputs(job.id) / f"hls/{name}/index.m3u8").read_text()
        segments = re.findall(r"^(seg_\d+\.ts)$", playlist, re.M)
        assert segments and all(f"hls/{name}/{s}" in names for s in segments), playlist
        total = sum(float(x) for x in re.findall(r"#EXTINF:([\d.]+)", playlist))
        assert close(total, 3.0, 0.3), playlist
        assert "#EXT-X-ENDLIST" in playlist
    master = (run.roots.job_outputs(job.id) / "hls/master.m3u8").read_text()
    assert master.count("#EXT-X-STREAM-INF") == 2, master
    assert "RESOLUTION=320x180" in master and "RESOLUTION=256x144" in master, master
    assert re.search(r'CODECS="avc1\.[0-9a-fA-F]{6},mp4a\.40\.2"', master), master
    assert "180p/index.m3u8" in master.splitlines() and "144p/index.m3u8" in master.splitlines()
    thumb = probed(run, job, "thumbnail.jpg")
    assert (thumb.video_codec, thumb.width, thumb.height) == ("mjpeg", 160, 90), thumb


def _asset(run: Run, path: str) -> dict:
    assert path in run.assets, sorted(run.assets)
    return run.assets[path]


def check_scan(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"scan": 1, "validate": 5})
    check_outputs(run, job, set())
    assert job.task("scan")["result"] == {"files_found": 5, "assets_created": 5, "validations": 5}
    expected = {
        "videos/landscape.mp4": (320, 180, "landscape", True, 3.0),
        "videos/portrait.mp4": (180, 320, "portrait", True, 2.0),
        "videos/silent.mp4": (320, 180, "landscape", False, 2.0),
        "videos/sub/scenes.mp4": (320, 180, "landscape", True, 3.0),
    }
    for path, (width, height, orientation, has_audio, duration) in expected.items():
        asset = _asset(run, path)
        assert asset["valid"] is True and asset["directory"] == "videos", asset
        assert (asset["width"], asset["height"], asset["orientation"], asset["has_audio"]) == (
            width,
            height,
            orientation,
            has_audio,
        ), asset
        assert close(asset["duration_seconds"], duration, 0.2) and asset["video_codec"] == "h264", asset
        assert asset["validated_at"] is not None
    broken = _asset(run, "videos/broken.mp4")
    assert broken["valid"] is False and broken["invalid_reason"], broken
    assert "videos/notes.txt" not in run.assets


def check_public_scan(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"public_scan": 1, "validate": 1})
    check_outputs(run, job, set())
    assert job.task("public_scan")["result"]["assets_created"] == 1
    validated = job.task("validate")["result"]
    assert validated["path"] == "public/incoming.mp4" and validated["valid"] is True, validated
    # move_to_library (phase two) moved that asset on afterwards; it is the same row.
    (asset,) = [a for a in run.assets.values() if str(a["id"]) == validated["video_id"]]
    assert asset["valid"] is True and asset["width"] == 320, asset


def check_validate(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"validate": 1})
    check_outputs(run, job, set())
    asset = _asset(run, "loose/clip.mp4")
    source = probe(run.roots.media / "loose/clip.mp4")
    assert asset["valid"] is True and asset["invalid_reason"] == "", asset
    assert asset["directory"] == "loose"
    for key in (
        "width",
        "height",
        "fps",
        "video_codec",
        "audio_codec",
        "bitrate",
        "orientation",
        "has_audio",
        "size_bytes",
        "duration_seconds",
    ):
        assert asset[key] == getattr(source, key), (key, asset)
    assert (asset["width"], asset["height"], asset["fps"]) == (320, 180, 25.0)


def check_reencode_streaming(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter(
        {
            "reencode_streaming": 1,
            "reencode_streaming.encode": 1,
            "reencode_streaming.quality": 1,
            "library.register": 1,
        }
    )
    # The thumbnail is the library asset's (issue 35: the asset a job makes has one).
    outputs = check_outputs(run, job, {"landscape.mp4", "quality.json", "thumbnail.jpg"})
    path = run.roots.job_outputs(job.id) / "landscape.mp4"
    info = probe(path)
    check_video(info, size=(256, 144), duration=3.0)
    check_matches_metadata(outputs["landscape.mp4"], info)
    assert is_faststart(path), "moov must come before mdat"
    library_path = f"playback/landscape-{job.id[:8]}.mp4"
    asset = _asset(run, library_path)
    assert (run.roots.media / library_path).read_bytes() == path.read_bytes()
    assert (
        asset["valid"] is True and str(asset["source_job_id"]) == job.id and asset["directory"] == "playback"
    )
    assert asset["thumbnail"] == f"{job.id}/thumbnail.jpg"
    assert (asset["width"], asset["height"], asset["video_codec"], asset["audio_codec"]) == (
        256,
        144,
        "h264",
        "aac",
    )


def check_thumbnail_generate(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"thumbnail_generate": 1, "library.update": 1, "webhook": 1})
    outputs = check_outputs(run, job, {"thumbnail.jpg"})
    info = probed(run, job, "thumbnail.jpg")
    assert (info.video_codec, info.width, info.height) == ("mjpeg", 160, 90), info
    assert outputs["thumbnail.jpg"]["kind"] == "image"
    assert close(outputs["thumbnail.jpg"]["metadata"]["timestamp"], 0.75, 0.01)  # 25 % of 3 s
    assert _asset(run, "videos/landscape.mp4")["thumbnail"] == f"{job.id}/thumbnail.jpg"


def check_compile_random(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"compile_random": 1, "compile_random.render": 1})
    outputs = check_outputs(run, job, {"compilation.mp4", "sources.json"})
    manifest = json.loads((run.roots.job_outputs(job.id) / "sources.json").read_text())
    chosen = [s["path"] for s in manifest["sources"]]
    landscape = {"videos/landscape.mp4", "videos/silent.mp4", "videos/sub/scenes.mp4"}
    assert len(chosen) == 2 and set(chosen) <= landscape, chosen  # valid, landscape, from `videos`
    assert all(s["video_id"] for s in manifest["sources"])
    info = probed(run, job, "compilation.mp4")
    check_video(
        info, size=(320, 180), duration=sum(s["duration"] for s in manifest["sources"]), tolerance=0.4
    )
    check_matches_metadata(outputs["compilation.mp4"], info)


def check_compile_quad(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"compile_quad": 1, "compile_quad.render": 1})
    outputs = check_outputs(run, job, {"quad.mp4", "sources.json"})
    info = probed(run, job, "quad.mp4")
    check_video(info, size=(320, 180), duration=2.0)  # 2x2 cells of 160x90; the shortest input is 2 s
    check_matches_metadata(outputs["quad.mp4"], info)
    manifest = json.loads((run.roots.job_outputs(job.id) / "sources.json").read_text())
    assert [s["path"] for s in manifest["sources"]] == [
        f"src/{n}.mp4" for n in ("landscape", "portrait", "silent", "scenes")
    ]


def check_compile_mega(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"compile_mega": 1, "compile_mega.render": 1})
    outputs = check_outputs(run, job, {"mega.mp4", "sources.json"})
    info = probed(run, job, "mega.mp4")
    check_video(info, size=(320, 180), duration=2.0)  # 3 inputs: 2 columns x 2 rows of 160x90
    check_matches_metadata(outputs["mega.mp4"], info)


def check_compile_gif(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"compile_gif": 1})
    check_outputs(run, job, {"clip.gif"})
    info = probed(run, job, "clip.gif")
    assert (info.video_codec, info.width, info.height) == ("gif", 160, 90), info
    assert close(info.duration_seconds, 1.0, 0.2), info


def check_move_to_library(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"move_to_library": 1})
    check_outputs(run, job, set())
    assert not (run.roots.media / "public/incoming.mp4").exists()
    assert (run.roots.media / "library/moved/incoming.mp4").is_file()
    asset = _asset(run, "library/moved/incoming.mp4")
    assert asset["directory"] == "library/moved" and asset["valid"] is True
    assert "public/incoming.mp4" not in run.assets


def check_scene_extract(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"scene_extract": 1, "scene_extract.detect": 1})
    outputs = check_outputs(run, job)
    scenes = json.loads((run.roots.job_outputs(job.id) / "scenes.json").read_text())["scenes"]
    assert 2 <= len(scenes) <= 4, scenes  # testsrc2 | smptebars | a solid colour
    assert scenes[0]["start"] == 0 and close(scenes[-1]["end"], 3.0, 0.2), scenes
    starts = [s["start"] for s in scenes]
    assert starts == sorted(starts)
    for scene in scenes:
        assert scene["image"] in outputs, scene
        image = probed(run, job, scene["image"])
        assert (image.video_codec, image.width) == ("mjpeg", 96), image
    assert set(outputs) == {"scenes.json"} | {s["image"] for s in scenes}


def check_clip_generate(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"clip_generate": 1, "clip_generate.cut": 2})
    outputs = check_outputs(run, job, {"clips/clip_001.mp4", "clips/clip_002.mp4"})
    for name, start in (("clips/clip_001.mp4", 0.0), ("clips/clip_002.mp4", 1.5)):
        info = probed(run, job, name)
        check_video(info, size=(320, 180), duration=1.0, tolerance=0.15)
        check_matches_metadata(outputs[name], info)
        assert outputs[name]["metadata"]["start"] == start


def _check_summary(run: Run, job: JobRun, name: str) -> None:
    kind = job.type
    assert job.stages() == Counter({kind: 1, f"{kind}.analyze": 1, f"{kind}.render": 1})
    outputs = check_outputs(run, job, {name, "segments.json"})
    report = json.loads((run.roots.job_outputs(job.id) / "segments.json").read_text())
    assert "measured" in report["method"] and report["measurements"], report
    total = sum(s["duration"] for s in report["segments"])
    assert close(total, 2.0, 0.01), report
    info = probed(run, job, name)
    check_video(info, size=(320, 180), duration=total, tolerance=0.3)
    check_matches_metadata(outputs[name], info)


def check_highlight_generate(run: Run, job: JobRun) -> None:
    _check_summary(run, job, "highlight.mp4")


def check_digest_generate(run: Run, job: JobRun) -> None:
    _check_summary(run, job, "digest.mp4")


def check_tag_generation(run: Run, job: JobRun) -> None:
    assert job.stages() == Counter({"tag_generation": 1, "tag_generation.analyze": 1, "library.update": 1})
    check_outputs(run, job, {"tags.json"})
    report = json.loads((run.roots.job_outputs(job.id) / "tags.json").read_text())
    assert {"low-resolution", "landscape", "short", "has-audio"} <= set(report["tags"]), report
    assert "not a learned model" in report["method"]
    assert _asset(run, "videos/sub/scenes.mp4")["tags"] == report["tags"]


CHECKS = {
    "transcode": check_transcode,
    "scan": check_scan,
    "public_scan": check_public_scan,
    "validate": check_validate,
    "reencode_streaming": check_reencode_streaming,
    "thumbnail_generate": check_thumbnail_generate,
    "compile_random": check_compile_random,
    "compile_quad": check_compile_quad,
    "compile_mega": check_compile_mega,
    "compile_gif": check_compile_gif,
    "move_to_library": check_move_to_library,
    "scene_extract": check_scene_extract,
    "clip_generate": check_clip_generate,
    "highlight_generate": check_highlight_generate,
    "digest_generate": check_digest_generate,
    "tag_generation": check_tag_generation,
}


@pytest.mark.parametrize("job_type", JOB_TYPES)
def test_each_job_type_completes_and_publishes_what_it_promises(run, job_type):
    job = run.jobs[job_type]
    assert job.type == job_type
    check_completed(run, job)
    CHECKS[job_type](run, job)


def test_every_job_type_is_covered():
    from media.jobtypes import JOB_TYPES as REGISTERED

    assert set(REGISTERED) - {"noop"} == set(JOB_TYPES)


def test_the_terminal_webhook_reaches_the_receiver_signed(run):
    """The thumbnail job's terminal webhook reached the local receiver, signed with the worker's
    JETENCODE_WEBHOOK_SECRET per Standard Webhooks."""
    job = run.jobs["thumbnail_generate"]
    assert len(run.webhooks) == 1, run.webhooks
    path, headers, body = run.webhooks[0]
    assert path == HOOK_PATH
    webhooks.verify(WEBHOOK_SECRET, headers, body)  # raises on a bad or stale signature
    assert headers["webhook-signature"].startswith("v1,") and headers["webhook-id"].startswith("msg_")
    assert headers["content-type"] == "application/json"
    envelope = json.loads(body)
    assert envelope["type"] == "job.completed"
    data = envelope["data"]
    assert (data["id"], data["type"], data["status"], data["progress"]) == (
        job.id,
        "thumbnail_generate",
        "completed",
        100,
    )
    assert [o["name"] for o in data["outputs"]] == ["thumbnail.jpg"]
    assert job.task("webhook")["result"]["webhook_id"] == headers["webhook-id"]
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(WEBHOOK_SECRET, headers, body.replace(b"completed", b"failed"))
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(webhooks.generate_secret(), headers, body)


def test_the_worker_drains_and_leaves_nothing_running(run):
    assert run.worker_exit == 0, "\n".join(run.notes) or run.worker_log[-4000:]
    assert run.leftover_processes == []
    problems = [line for line in run.worker_log.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not problems, run.worker_log[-6000:]
    print(f"\nevery job type through one worker (concurrency 2): {run.seconds:.1f}s")


def test_published_outputs_never_escape_their_job_directory(run):
    tops = {p.name for p in run.roots.outputs.iterdir()}
    assert tops <= {job.id for job in run.jobs.values()}, tops
    assert not [p for p in Path(run.roots.outputs).rglob(".*")], "temporary names left in the output root"
