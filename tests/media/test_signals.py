"""Segment selection and tags from measured signals (pure arithmetic)."""

from media import signals
from media.probe import MediaInfo


def info(**overrides) -> MediaInfo:
    base = dict(
        path="x.mp4",
        size_bytes=1,
        format_name="mp4",
        duration_seconds=30.0,
        bitrate=1,
        has_video=True,
        has_audio=True,
        width=1920,
        height=1080,
        fps=30.0,
        video_codec="h264",
        video_profile="High",
        pix_fmt="yuv420p",
        rotation=0,
        orientation="landscape",
        audio_codec="aac",
        sample_rate=48000,
        channels=2,
        codec_string="avc1.640028",
    )
    return MediaInfo(**{**base, **overrides})


def test_it_parses_ffmpeg_metadata_print_output_skipping_nan(tmp_path):
    dump = tmp_path / "m.txt"
    dump.write_text(
        "frame:0    pts:0       pts_time:0\nlavfi.scene_score=0.000000\n"
        "frame:1    pts:12800   pts_time:1.5\nlavfi.scene_score=0.72\nother=1\n"
        "frame:2    pts:1   pts_time:2\nlavfi.scene_score=nan\n"
    )
    assert signals.parse_metadata_print(dump, "lavfi.scene_score") == [(0.0, 0.0), (1.5, 0.72)]
    assert signals.parse_metadata_print(tmp_path / "missing.txt", "k") == []


def test_highlights_pick_the_loudest_busiest_seconds_in_order():
    scores = [(t / 10, 0.0) for t in range(100)] + [(6.5, 0.9)]  # a cut at 6.5 s
    loud = [(t / 10, -60.0 if not 60 <= t < 80 else -10.0) for t in range(100)]
    measured = signals.build_signals(10.0, scores, loud, threshold=0.3, has_audio=True)
    per_second = signals.per_second_score(measured, scene=1, motion=1, loudness=1)
    picked = signals.pick_highlights(per_second, 10.0, 2.0, 2.0)
    assert picked == [(6.0, 2.0)]
    assert signals.pick_highlights(per_second, 10.0, 2.0, 20.0) == [(0.0, 10.0)]  # target >= duration


def test_digest_covers_the_whole_video():
    per_second = [0.0] * 20
    per_second[3] = per_second[15] = 1.0
    picked = signals.pick_digest(per_second, 20.0, 2.0, 4.0)
    assert len(picked) == 2
    assert picked[0][0] < 10 <= picked[1][0]
    assert any(s <= 3 < s + d for s, d in picked) and any(s <= 15 < s + d for s, d in picked)


def test_scenes_run_from_cut_to_cut_or_cover_the_whole_video():
    scenes = signals.scenes_from_detection([(0.0, 0.0), (1.0, 0.7), (2.0, 0.5)], 3.0)
    assert [(s["start"], s["end"]) for s in scenes] == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]
    assert signals.scenes_from_detection([], 4.0) == [
        {"index": 1, "start": 0.0, "end": 4.0, "duration": 4.0, "score": 0.0}
    ]


def test_tags_are_measurements():
    quiet = signals.build_signals(
        30.0, [(t, 0.0) for t in range(30)], [(t, -80.0) for t in range(30)], threshold=0.3, has_audio=True
    )
    tags, measured = signals.measured_tags(info(), quiet)
    assert tags == ["full-hd", "landscape", "short", "silent", "few-scenes", "low-motion"]
    assert measured["cuts"] == 0
    busy = signals.build_signals(700.0, [(t, 0.5) for t in range(700)], [], threshold=0.3, has_audio=False)
    tags, _ = signals.measured_tags(
        info(
            width=720, height=1280, orientation="portrait", duration_seconds=700.0, has_audio=False, fps=60.0
        ),
        busy,
    )
    assert tags == ["hd", "portrait", "long", "high-frame-rate", "silent", "many-scenes", "high-motion"]
