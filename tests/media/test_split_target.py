"""Per-chunk CRF search for a VMAF target, on real encodes: an easy shot gets a higher CRF (fewer
bits) than a hard one, within the probe budget, the chosen probe is the chunk's exact encode, and
chunks at different CRFs stitch into exactly their own frames."""

import subprocess

import pytest

from media import commands
from media.split.encode import Rung
from media.split.plan import plan_split
from media.split.stitch import packet_count, stitch_argv, verify_chunks
from media.split.target import PROBES, next_probe, search_chunk_crf
from tests.kit.media import frame_hashes, run_all, split_source


def test_the_next_probe_interpolates_inside_a_bracket_and_bisects_without_one():
    assert next_probe({24: 95.0, 32: 89.0}, 93.0, 16, 40) == 27  # 24 + 2/6 of 8
    assert next_probe({28: 90.0}, 93.0, 16, 40) == 21  # no bracket: bisection towards the low end
    assert next_probe({28: 95.0}, 93.0, 16, 40) == 34
    assert next_probe({27: 94.0, 28: 92.0}, 93.0, 16, 40) is None  # neighbours: the answer is 27
    assert next_probe({40: 99.0}, 93.0, 16, 40) is None  # the top of the range already reaches it


@pytest.fixture(scope="module")
def source(tmp_path_factory, ffmpeg):
    path = tmp_path_factory.mktemp("split_target") / "source.mp4"
    # 1 s of moving test pattern, then 1 s of static bars.
    run_all([split_source(path, seconds=2.0, size="160x90", cut_at=1.0, ffmpeg=ffmpeg)])
    return path


def test_each_chunk_finds_its_own_crf_and_the_static_shot_gets_the_higher_one(source, tmp_path):
    plan = plan_split(source, chunk_seconds=1.0)
    assert [(c.first_frame, c.last_frame) for c in plan.chunks] == [(0, 24), (25, 49)]
    rung = Rung(commands.VideoEncoding("libx264", "veryfast", 30, 1000, 2000, keyframe_seconds=1.0), 160, 90)
    target = 93.0
    choices = [
        search_chunk_crf(
            source, chunk, plan, rung, target, work_dir=tmp_path, source_size=(160, 90), n_subsample=2
        )
        for chunk in plan.chunks
    ]
    moving, static = choices
    for choice, chunk in zip(choices, plan.chunks, strict=True):
        assert 1 <= len(choice.probes) <= PROBES
        assert choice.reached and choice.vmaf >= target
        assert {"crf": choice.crf, "vmaf": choice.vmaf} in choice.probes
        # No probe at a higher CRF reached the target.
        assert all(p["vmaf"] < target for p in choice.probes if p["crf"] > choice.crf)
        assert packet_count(choice.file) == chunk.frames
    assert static.crf > moving.crf
    # Chunks at different CRFs (different parameter sets) join by copying into exactly their frames.
    files = [choice.file for choice in choices]
    assert verify_chunks(files, plan) == []
    stitched = tmp_path / "stitched.mp4"
    argv = stitch_argv(files, None, stitched, list_file=tmp_path / "list.txt", plan=plan)
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    assert frame_hashes(stitched) == [h for f in files for h in frame_hashes(f)]
