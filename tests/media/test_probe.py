"""Probing with PyAV."""

import pytest

from media.probe import ProbeError, is_faststart, mp4_top_level_boxes, probe


def test_it_probes_a_landscape_clip_with_audio(clips):
    info = probe(clips.landscape)
    assert (info.width, info.height, info.orientation) == (320, 180, "landscape")
    assert info.duration_seconds == pytest.approx(3.0, abs=0.05)
    assert info.fps == 25.0
    assert (info.video_codec, info.audio_codec, info.has_audio) == ("h264", "aac", True)
    assert info.bitrate and info.size_bytes == clips.landscape.stat().st_size
    assert info.codec_string.startswith("avc1.")
    assert info.asset_fields()["orientation"] == "landscape"


def test_it_tells_portrait_from_landscape_and_a_silent_clip(clips):
    assert probe(clips.portrait).orientation == "portrait"
    silent = probe(clips.silent)
    assert silent.has_audio is False and silent.audio_codec == "" and silent.sample_rate is None


def test_display_rotation_makes_it_portrait(clips):
    info = probe(clips.rotated)
    assert info.rotation in (90, 270)
    assert (info.width, info.height, info.orientation) == (180, 320, "portrait")


@pytest.mark.parametrize(
    "content, reason", [(b"", "empty"), (b"not a video at all" * 100, "not a readable media file")]
)
def test_unreadable_files_raise_a_clear_error(tmp_path, content, reason):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(content)
    with pytest.raises(ProbeError) as info:
        probe(bad)
    assert reason in info.value.reason and "bad.mp4" in str(info.value)


def test_a_missing_file_is_a_probe_error(tmp_path):
    with pytest.raises(ProbeError, match="not found"):
        probe(tmp_path / "missing.mp4")


def test_it_sees_the_moov_box_before_mdat(clips):
    boxes = mp4_top_level_boxes(clips.landscape)
    assert boxes[0] == "ftyp" and is_faststart(clips.landscape)
