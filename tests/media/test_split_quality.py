"""Quality of a split rendition: per-chunk scores pooled from per-frame VMAF, against the same
rung encoded unsplit, and against libvmaf run directly on the stitched file (an independent
command line built here)."""

import re
import subprocess

import pytest

from media import commands, quality
from media.ffmpeg import guard_inputs
from media.split.encode import Rung, rendition_argv
from media.split.plan import plan_split
from media.split.pooling import chunk_frame_scores, chunk_measure_argv, frame_scores, pool
from media.split.stitch import stitch_argv
from tests.kit.media import run_all, split_source

SIZE = (320, 180)


def run(argv):
    """Run FFmpeg as a worker does: file inputs get the input whitelists (media.ffmpeg.guard_inputs)."""
    proc = subprocess.run(
        guard_inputs(argv), capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def libvmaf_directly(ffmpeg, distorted, reference) -> float:
    """libvmaf on every frame, its own printed pooled score (right without subsampling)."""
    proc = subprocess.run(
        [ffmpeg, "-hide_banner", "-nostdin", "-i", str(distorted), "-i", str(reference)]
        + ["-lavfi", "[0:v][1:v]libvmaf", "-f", "null", "-"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return float(re.search(r"VMAF score: ([\d.]+)", proc.stderr).group(1))


@pytest.fixture(scope="module")
def source(tmp_path_factory, ffmpeg):
    path = tmp_path_factory.mktemp("split_quality") / "source.mp4"
    run_all([split_source(path, seconds=4.0, size="320x180", cut_at=2.3, ffmpeg=ffmpeg)])
    return path


def test_pooled_vmaf_and_bitrate_of_a_split_encode_match_the_unsplit_encode(source, ffmpeg, tmp_path):
    # Boundaries on the rung's keyframe grid: chunk starts add no keyframe the unsplit encode lacks.
    plan = plan_split(source, chunk_seconds=1.0, keyframe_seconds=1.0)
    # x264 medium: at veryfast (10-frame lookahead) the static bars after the cut lose 2 VMAF
    # points in the last 1 s chunk of this tiny clip (0.7 over the clip); at medium -0.2.
    encoding = commands.VideoEncoding("libx264", "medium", 26, 800, 1600, keyframe_seconds=1.0)
    unsplit = tmp_path / "unsplit.mp4"
    run(commands.encode_video(source, unsplit, encoding=encoding, size=SIZE))
    chunk_files, chunk_scores = [], []
    for chunk in plan.chunks:
        out = tmp_path / f"chunk{chunk.index}.mp4"
        run(rendition_argv(source, chunk, plan.fps, Rung(encoding, *SIZE), out))
        log = tmp_path / f"chunk{chunk.index}.json"
        run(chunk_measure_argv(source, chunk, plan, [(out, log)], width=SIZE[0], height=SIZE[1]))
        scores = chunk_frame_scores(log, chunk, plan)
        assert len(scores) == chunk.frames
        chunk_files.append(out)
        chunk_scores.append(scores)
    stitched = tmp_path / "stitched.mp4"
    run(stitch_argv(chunk_files, None, stitched, list_file=tmp_path / "list.txt", plan=plan))
    pooled = pool(chunk_scores)

    unsplit_log = tmp_path / "unsplit.json"
    run(quality.measure_argv(source, [(unsplit, unsplit_log)], width=SIZE[0], height=SIZE[1]))
    whole = frame_scores(unsplit_log)
    unsplit_mean, unsplit_p1 = sum(whole) / len(whole), quality.percentile(whole, 1)
    split_kbps = quality.video_bitrate_kbps(stitched)
    unsplit_kbps = quality.video_bitrate_kbps(unsplit)
    print(
        f"split {pooled} {split_kbps} kbps; unsplit vmaf {unsplit_mean:.3f} p1 {unsplit_p1:.3f} {unsplit_kbps} kbps"
    )
    assert abs(pooled["vmaf"] - unsplit_mean) <= 0.5
    assert abs(pooled["vmaf_p1"] - unsplit_p1) <= 2
    assert abs(split_kbps - unsplit_kbps) <= 0.03 * unsplit_kbps
    # The chunks were scored against the right source frames: libvmaf on the whole stitched file
    # agrees (a reference one frame off would cost many points on this moving picture).
    assert abs(pooled["vmaf"] - libvmaf_directly(ffmpeg, stitched, source)) <= 0.5
    assert [seam["index"] for seam in pooled["seams"]] == [1, 2, 3]
    assert [c.first_frame for c in plan.chunks] == [0, 25, 50, 75]


def test_pooling_takes_percentiles_over_every_frame_and_reports_each_seam():
    chunks = [[90.0] * 10, [80.0, 95.0, 95.0, 95.0, 95.0], [95.0] * 5]
    pooled = pool(chunks, seam_frames=2)
    assert pooled["vmaf"] == pytest.approx((900 + 80 + 4 * 95 + 5 * 95) / 20, abs=1e-3)
    assert pooled["vmaf_p1"] == pytest.approx(quality.percentile([s for c in chunks for s in c], 1), abs=1e-3)
    assert pooled["seams"] == [
        {"index": 1, "vmaf_min": 80.0, "vmaf_mean": 88.75},
        {"index": 2, "vmaf_min": 95.0, "vmaf_mean": 95.0},
    ]
    with pytest.raises(ValueError):
        pool([[90.0], []])


# ---- where each chunk is measured (workers/stages/split.py, split_quality.py) ----------------------


def _stitched(measured: set[int]):
    """A stitch's payload, what it hands on, and the accepted chunk results it used: the chunks in
    `measured` measured themselves after encoding."""
    chunks = [
        {
            "index": i,
            "first_frame": 25 * i,
            "last_frame": 25 * i + 24,
            "start_seconds": i,
            "end_seconds": i + 1,
        }
        for i in range(3)
    ]
    p = {"plan": {"chunks": chunks, "fps": "25", "frame_count": 75}, "renditions": [{"name": "180p"}]}
    after = {"source": "src/a.mp4", "metrics": ["vmaf"], "n_subsample": 1, "source_width": 320}
    after |= {"source_height": 180, "min_vmaf": None, "package": {"duration": 3.0}}
    results = {
        i: {
            "index": i,
            "files": {"180p": f"chunks/{i:05d}/t{10 + i}a1/180p.mp4"},
            "crf": {"180p": 23},
            **(
                {"quality": {"scores": f"chunks/{i:05d}/t{10 + i}a1/scores.json", "libvmaf_version": "3"}}
                if i in measured
                else {}
            ),
        }
        for i in range(3)
    }
    return p, after, results


def test_the_stitch_measures_only_the_chunks_that_did_not_measure_themselves():
    from workers.stages.split_quality import quality_children

    p, after, results = _stitched(measured={0, 2})  # chunk 1: a GPU chunk, measured after the stitch
    *measuring, pooling = quality_children(p, after, {"renditions": {}}, results)
    assert [(s.task_type, s.payload["chunk"]["index"], s.payload["files"]) for s in measuring] == [
        ("transcode.chunk_quality", 1, results[1]["files"])
    ]
    assert pooling.task_type == "transcode.split_quality" and pooling.wait_for_siblings
    assert pooling.payload["chunk_files"] == {"1": results[1]["files"]}
    assert pooling.payload["chunk_measured"] == {
        str(i): {"scores": results[i]["quality"]["scores"], "libvmaf_version": "3"} for i in (0, 2)
    }

    p, after, results = _stitched(measured={0, 1, 2})
    (pooling,) = quality_children(p, after, {"renditions": {}}, results)
    assert not pooling.wait_for_siblings and pooling.payload["chunk_files"] == {}
    assert sorted(pooling.payload["chunk_measured"]) == ["0", "1", "2"]


def test_only_a_cpu_chunk_measures_itself():
    from media.jobtypes import ResourceChoice
    from workers.stages.split import own_measuring

    cpu = ResourceChoice("cpu", 0, False, "libx264", "")
    gpu = ResourceChoice("gpu_encode", 1024, True, "h264_nvenc", "")
    after = {"metrics": ["vmaf", "psnr"], "n_subsample": 2}
    assert own_measuring(after, cpu) == {"metrics": ["vmaf", "psnr"], "n_subsample": 2}
    assert own_measuring(after, gpu) is None  # libvmaf would hold the GPU slot and its VRAM
    assert own_measuring({"metrics": [], "n_subsample": 1}, cpu) is None
