"""The split plan on real generated clips: exact frame ranges that cover every frame once,
boundaries snapped to a hard cut within the window, and sources that cannot be planned exactly
(variable frame rate, no video) refused with the reason."""

from fractions import Fraction

import av
import pytest

from media.split.plan import Chunk, SplitImpossible, SplitPlan, nominal_boundaries, plan_split
from media.split.scenes import strongest_cut
from media.split.timeline import read_timeline
from tests.kit.media import run_all, split_source


@pytest.fixture(scope="module")
def sources(tmp_path_factory, ffmpeg):
    out = tmp_path_factory.mktemp("split_plan")
    paths = {
        "cut": out / "cut.mp4",  # 4 s at 25 fps, hard cut at frame 57 (2.28 s)
        "ntsc": out / "ntsc.mp4",  # 3 s at 29.97 fps with audio
        "vfr": out / "vfr.mp4",
        "audio_only": out / "audio_only.m4a",
    }
    run_all(
        [
            split_source(paths["cut"], seconds=4.0, cut_at=2.28, ffmpeg=ffmpeg),
            split_source(paths["ntsc"], fps="30000/1001", seconds=3.0, audio_seconds=3.0, ffmpeg=ffmpeg),
            # Frames 0..9, then every third frame: timestamps off any constant grid.
            [ffmpeg, "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i"]
            + ["testsrc2=size=160x90:rate=25:duration=2", "-vf", "select='lt(n\\,10)+not(mod(n\\,3))'"]
            + ["-fps_mode", "vfr", "-c:v", "libx264", "-preset", "ultrafast", str(paths["vfr"])],
            [ffmpeg, "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i"]
            + ["sine=duration=1", "-c:a", "aac", str(paths["audio_only"])],
        ]
    )
    return paths


def decoded_frames(path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def assert_covers_every_frame_once(plan: SplitPlan, frame_count: int):
    assert plan.frame_count == frame_count
    assert plan.chunks[0].first_frame == 0 and plan.chunks[-1].last_frame == frame_count - 1
    for before, after in zip(plan.chunks, plan.chunks[1:], strict=False):
        assert after.first_frame == before.last_frame + 1
        assert after.start_seconds == before.end_seconds
    assert [c.index for c in plan.chunks] == list(range(len(plan.chunks)))
    assert sum(c.frames for c in plan.chunks) == frame_count


def test_the_plan_covers_every_decoded_frame_once_at_29_97(sources):
    plan = plan_split(sources["ntsc"], chunk_seconds=1.0)
    assert plan.fps == Fraction(30000, 1001)
    assert_covers_every_frame_once(plan, decoded_frames(sources["ntsc"]))
    assert len(plan.chunks) == 3  # 90 frames, at most 30 (1.001 s) each: evenly 30 + 30 + 30
    assert all(c.frames <= 30 for c in plan.chunks)
    second = plan.chunks[1]
    assert (second.first_frame, second.start_seconds, second.end_seconds) == (30, 1.001, 2.002)
    # Decoding starts on a keyframe at or before the chunk (the source has one every 40 frames).
    assert second.seek_seconds == 0.0 and plan.chunks[2].seek_seconds == pytest.approx(
        40 * 1001 / 30000, abs=1e-6
    )


def test_a_source_shorter_than_one_chunk_is_one_chunk(sources):
    plan = plan_split(sources["ntsc"], chunk_seconds=30)
    assert [c.to_dict() for c in plan.chunks] == [
        {"index": 0, "first_frame": 0, "last_frame": 89, "start_seconds": 0.0, "end_seconds": 3.003}
    ]


def test_a_boundary_moves_to_the_hard_cut_within_the_window(sources):
    assert nominal_boundaries(100, 50) == [0, 50, 100]
    plan = plan_split(sources["cut"], chunk_seconds=2.0)  # window: a quarter chunk, 12 frames
    assert [(c.first_frame, c.last_frame) for c in plan.chunks] == [(0, 56), (57, 99)]
    assert plan.scene_cuts == [57]
    assert_covers_every_frame_once(plan, 100)
    unsnapped = plan_split(sources["cut"], chunk_seconds=2.0, scene_window_seconds=0)
    assert [(c.first_frame, c.last_frame) for c in unsnapped.chunks] == [(0, 49), (50, 99)]
    # A window that does not reach the cut finds nothing: the boundary stays.
    timeline = read_timeline(sources["cut"])
    assert strongest_cut(sources["cut"], timeline, (45, 55)) is None
    assert strongest_cut(sources["cut"], timeline, (40, 60)) == 57


def test_the_plan_serialises_for_the_job_detail_and_round_trips(sources):
    plan = plan_split(sources["cut"], chunk_seconds=2.0)
    shown = plan.to_dict()
    assert set(shown) == {"mode", "reason", "chunks"} and shown["mode"] == "chunks"
    assert "1 boundary(ies) on a scene cut" in shown["reason"]
    assert set(shown["chunks"][0]) == {"index", "first_frame", "last_frame", "start_seconds", "end_seconds"}
    assert SplitPlan.from_state(plan.to_state()) == plan
    assert Chunk.from_state(plan.chunks[1].to_state()).frames == 43


def test_variable_frame_rate_is_refused_with_the_reason(sources):
    with pytest.raises(SplitImpossible, match=r"variable frame rate: frame \d+ is shown at"):
        plan_split(sources["vfr"], chunk_seconds=1.0)


def test_a_file_without_video_cannot_be_split(sources, tmp_path):
    with pytest.raises(SplitImpossible, match="no video stream"):
        plan_split(sources["audio_only"], chunk_seconds=1.0)
    (tmp_path / "junk.mp4").write_bytes(b"not a video")
    with pytest.raises(SplitImpossible, match="cannot read"):
        plan_split(tmp_path / "junk.mp4", chunk_seconds=1.0)
