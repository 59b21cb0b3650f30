"""Every argv builder, run for real on the generated clips, its output probed."""

import subprocess

import pytest

from media import commands
from media.probe import is_faststart, probe
from media.signals import parse_metadata_print

FAST = commands.VideoEncoding(preset="ultrafast")


def run(argv, cwd=None):
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert argv[1:7] == commands.COMMON_ARGS
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "progress=end" in proc.stdout
    return proc


def test_relative_paths_are_refused(tmp_path):
    with pytest.raises(ValueError, match="absolute"):
        commands.thumbnail("in.mp4", tmp_path / "x.jpg", timestamp=0, width=10)


def test_reencode_streaming_is_h264_aac_faststart_with_rate_caps(clips, tmp_path):
    out = tmp_path / "out.mp4"
    argv = commands.reencode_streaming(
        clips.landscape, out, preset="ultrafast", crf=30, target_bitrate_kbps=300
    )
    for pair in (["-maxrate", "300k"], ["-bufsize", "600k"], ["-b:a", "128k"], ["-movflags", "+faststart"]):
        assert any(argv[i : i + 2] == pair for i in range(len(argv)))
    run(argv)
    info = probe(out)
    assert (info.video_codec, info.audio_codec, info.width, info.height) == ("h264", "aac", 320, 180)
    assert info.duration_seconds == pytest.approx(3.0, abs=0.1)
    assert is_faststart(out)


def test_reencode_of_a_silent_clip_has_no_audio_and_scales(clips, tmp_path):
    out = tmp_path / "out.mp4"
    run(commands.reencode_streaming(clips.silent, out, preset="ultrafast", size=(160, 90)))
    info = probe(out)
    assert (info.width, info.height, info.has_audio) == (160, 90, False)


def test_rendition_has_keyframes_on_segment_boundaries_and_packages_to_hls(clips, tmp_path):
    mp4 = tmp_path / "180p.mp4"
    w, h = commands.fit_short_side(180, 320, 144)
    assert (w, h) == (144, 256)
    run(
        commands.rendition(
            clips.portrait,
            mp4,
            width=w,
            height=h,
            video_bitrate_kbps=300,
            segment_seconds=1,
            preset="ultrafast",
        )
    )
    assert (probe(mp4).width, probe(mp4).height) == (144, 256)
    hls = tmp_path / "hls"
    hls.mkdir()
    run(commands.hls_package(mp4, hls, segment_seconds=1))
    playlist = (hls / "index.m3u8").read_text()
    assert "#EXT-X-PLAYLIST-TYPE:VOD" in playlist and "#EXT-X-ENDLIST" in playlist
    segments = sorted(hls.glob("seg_*.ts"))
    assert len(segments) == 2  # 2 s at 1 s segments: keyframes were forced on the boundaries
    assert all(s.name in playlist for s in segments)


def test_thumbnail_at_a_timestamp_scaled_to_width(clips, tmp_path):
    out = tmp_path / "t.jpg"
    run(commands.thumbnail(clips.landscape, out, timestamp=0.75, width=160))
    info = probe(out)
    assert (info.video_codec, info.width, info.height) == ("mjpeg", 160, 90)


def test_gif_uses_a_palette_of_the_requested_colours(clips, tmp_path):
    out, palette = tmp_path / "c.gif", tmp_path / "palette.png"
    shape = {"start": 0.5, "duration": 1.0, "width": 120, "fps": 10}
    argv = commands.gif_palette(clips.landscape, palette, max_colors=64, **shape)
    assert "palettegen=max_colors=64" in argv[argv.index("-vf") + 1]
    run(argv)
    run(commands.gif(clips.landscape, out, palette=palette, **shape))
    info = probe(out)
    assert (info.video_codec, info.width) == ("gif", 120)
    assert info.duration_seconds == pytest.approx(1.0, abs=0.15)


def test_concat_mixes_sizes_orientations_and_silence(clips, tmp_path):
    out = tmp_path / "cat.mp4"
    segments = [
        commands.Segment(clips.landscape, 1.0, 0.5, True),
        commands.Segment(clips.silent, 1.0, 0, False),
        commands.Segment(clips.portrait, 1.5, 0, True),
    ]
    run(commands.concat(segments, out, width=320, height=180, fps=25, encoding=FAST))
    info = probe(out)
    assert (info.width, info.height, info.has_audio, info.fps) == (320, 180, True, 25.0)
    assert info.duration_seconds == pytest.approx(3.5, abs=0.15)
    assert is_faststart(out)


def test_concat_of_silent_segments_has_no_audio(clips, tmp_path):
    out = tmp_path / "cat.mp4"
    run(
        commands.concat(
            [commands.Segment(clips.silent, 1.0, has_audio=False)] * 2,
            out,
            width=160,
            height=90,
            fps=25,
            encoding=FAST,
        )
    )
    assert probe(out).has_audio is False


def test_quad_grid_tiles_four_inputs_with_xstack(clips, tmp_path):
    out = tmp_path / "quad.mp4"
    inputs = [
        commands.GridInput(clips.landscape, 3.0, True),
        commands.GridInput(clips.portrait, 2.0, True),
        commands.GridInput(clips.silent, 2.0, False),
        commands.GridInput(clips.scenes, 3.0, True),
    ]
    argv = commands.grid(inputs, out, columns=2, cell_width=160, cell_height=90, fps=25, encoding=FAST)
    assert "xstack=inputs=4:layout=0_0|160_0|0_90|160_90" in argv[argv.index("-filter_complex") + 1]
    run(argv)
    info = probe(out)
    assert (info.width, info.height, info.has_audio) == (320, 180, True)
    assert info.duration_seconds == pytest.approx(2.0, abs=0.1)  # shortest


def test_mega_grid_longest_with_empty_cells(clips, tmp_path):
    out = tmp_path / "mega.mp4"
    inputs = [
        commands.GridInput(clips.landscape, 3.0, True),
        commands.GridInput(clips.portrait, 2.0, True),
        commands.GridInput(clips.silent, 2.0, False),
    ]
    run(
        commands.grid(
            inputs,
            out,
            columns=2,
            cell_width=160,
            cell_height=90,
            fps=25,
            encoding=FAST,
            duration="longest",
            audio="first",
        )
    )
    info = probe(out)
    assert (info.width, info.height) == (320, 180)
    assert info.duration_seconds == pytest.approx(3.0, abs=0.1)


def test_scene_detection_finds_the_cuts(clips, tmp_path):
    argv = commands.scene_detect(
        clips.scenes, threshold=0.3, min_scene_seconds=0.5, max_scenes=10, thumb_width=160
    )
    run(argv, cwd=tmp_path)
    starts = [
        t for t, _ in parse_metadata_print(tmp_path / commands.SCENE_METADATA_FILE, "lavfi.scene_score")
    ]
    assert starts == pytest.approx([0.0, 1.0, 2.0], abs=0.05)
    images = sorted(tmp_path.glob("scene_*.jpg"))
    assert len(images) == 3 and probe(images[0]).width == 160


def test_signal_analysis_measures_the_cuts_and_the_loud_middle(clips, tmp_path):
    run(commands.analyze_signals(clips.scenes, has_audio=True), cwd=tmp_path)
    scores = parse_metadata_print(tmp_path / commands.SCORES_FILE, "lavfi.scene_score")
    loudness = parse_metadata_print(tmp_path / commands.LOUDNESS_FILE, "lavfi.r128.M")
    assert len(scores) == pytest.approx(30, abs=2)  # 3 s at 10 fps
    assert max(s for _, s in scores) > 0.3  # the cuts
    loud_middle = [v for t, v in loudness if 1.5 <= t < 2.0]
    quiet_end = [v for t, v in loudness if 2.6 <= t]
    assert min(loud_middle) > max(quiet_end) + 10


def test_hardware_encoders_build_their_own_arguments():
    nvenc = commands.VideoEncoding("h264_nvenc", "medium", 23, 2000, 4000).output_args()
    assert nvenc[:4] == ["-c:v", "h264_nvenc", "-preset", "p4"] and "-maxrate" in nvenc
    vaapi = commands.VideoEncoding("h264_vaapi")
    assert vaapi.pre_input_args() == ["-vaapi_device", "/dev/dri/renderD128"]
    assert vaapi.filter_tail() == "format=nv12,hwupload"
    with pytest.raises(ValueError):
        commands.VideoEncoding("h264_magic")
    with pytest.raises(ValueError):
        commands.VideoEncoding(preset="ludicrous")
