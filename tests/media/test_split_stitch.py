"""Split, encode per chunk, stitch: the stitched rendition is exactly what one unsplit encode makes.

Real FFmpeg on tiny generated sources made to be hard to split (tests/kit/media.split_source:
B-frames, open GOPs, keyframes every 40 frames so chunks start mid-GOP), for H.264, HEVC and AV1
at 25 and 29.97 fps, without audio, with audio and with audio longer than the video. Each case is
checked against the same rung encoded unsplit by media.commands.encode_video, on timestamps (the
same ticks), frame count, keyframes, a clean decode that gives exactly the chunks' own pictures,
and A/V sync at the end.
"""

import subprocess
from fractions import Fraction

import av
import pytest

from media import commands
from media.ffmpeg import guard_inputs
from media.split.audio import audio_argv
from media.split.encode import Rung, chunk_argv, keyframe_frames, rendition_argv
from media.split.plan import plan_split
from media.split.stitch import ChunkMismatch, packet_count, stitch_argv, verify_chunks
from tests.kit.media import frame_hashes, run_all, split_source

AUDIO_FRAME = Fraction(1024, 48000)  # one AAC frame
SECONDS = 2.8  # 70 and 84 frames: 29.97 fps chunks of 28 frames are not whole milliseconds
CRF = {"libx264": 28, "libx265": 30, "libaom-av1": 40}
PRESET = {"libx264": "veryfast", "libx265": "veryfast", "libaom-av1": "ultrafast"}  # B-frames; AV1 fastest
# (encoder, frame rate, audio): every codec at both rates, the audio modes spread over them.
CASES = [
    ("libx264", "25", "same"),
    ("libx264", "30000/1001", "longer"),
    ("libx265", "25", "none"),
    ("libx265", "30000/1001", "same"),
    ("libaom-av1", "25", "longer"),
    ("libaom-av1", "30000/1001", "none"),
]
AUDIO_SECONDS = {"none": None, "same": SECONDS, "longer": SECONDS + 0.7}


def case_id(case) -> str:
    encoder, fps, audio = case
    return f"{encoder}-{'29.97' if fps != '25' else '25'}fps-audio_{audio}"


@pytest.fixture(scope="module")
def sources(tmp_path_factory, ffmpeg):
    out = tmp_path_factory.mktemp("split_sources")
    paths = {}
    argvs = []
    for fps in ("25", "30000/1001"):
        for audio, audio_seconds in AUDIO_SECONDS.items():
            path = out / f"src_{fps.replace('/', '_')}_{audio}.mp4"
            paths[(fps, audio)] = path
            argvs.append(
                split_source(path, fps=fps, seconds=SECONDS, audio_seconds=audio_seconds, ffmpeg=ffmpeg)
            )
    run_all(argvs)
    return paths


def run(argv):
    """Run FFmpeg as a worker does: file inputs get the input whitelists (media.ffmpeg.guard_inputs)."""
    proc = subprocess.run(
        guard_inputs(argv), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def video_packets(path):
    """[(pts, dts, keyframe)] in decode order, and the stream's time base."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        packets = [(p.pts, p.dts, p.is_keyframe) for p in container.demux(stream) if p.size]
        return packets, Fraction(stream.time_base)


def stream_end(path, kind: str) -> Fraction:
    """Where the stream's last packet ends, in seconds (presentation time)."""
    with av.open(str(path)) as container:
        stream = getattr(container.streams, kind)[0]
        ends = [p.pts + (p.duration or 0) for p in container.demux(stream) if p.size]
        return max(ends) * Fraction(stream.time_base)


def decode_errors(ffmpeg, path) -> str:
    """What a full decode prints at -v error (FFmpeg can exit 0 on a broken join)."""
    proc = subprocess.run(
        [ffmpeg, "-nostdin", "-v", "error", "-i", str(path), "-f", "null", "-"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.stderr + ("" if proc.returncode == 0 else f"exit {proc.returncode}")


def rungs_for(encoder):
    encoding = commands.VideoEncoding(encoder, PRESET[encoder], CRF[encoder], 400, 800, keyframe_seconds=1.0)
    return [Rung(encoding, 160, 90), Rung(encoding, 96, 54)]


def split_encode(source, plan, rungs, work):
    """Every chunk in one run for all rungs; the audio once; each rung stitched. {rung: mp4}."""
    files = {r: [] for r in range(len(rungs))}
    for chunk in plan.chunks:
        outputs = [work / f"chunk{chunk.index:03d}_r{r}.mp4" for r in range(len(rungs))]
        run(chunk_argv(source, chunk, plan.fps, rungs, outputs))
        for r, out in enumerate(outputs):
            files[r].append(out)
    return files


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_stitched_rendition_is_exactly_the_unsplit_encode(case, sources, ffmpeg, tmp_path):
    encoder, fps, audio_mode = case
    source = sources[(fps, audio_mode)]
    plan = plan_split(source, chunk_seconds=1.0)
    assert len(plan.chunks) == 3
    rungs = rungs_for(encoder)
    files = split_encode(source, plan, rungs, tmp_path)
    audio = None
    if audio_mode != "none":
        audio = tmp_path / "audio.m4a"
        run(audio_argv(source, audio))
    unsplit = tmp_path / "unsplit.mp4"
    run(commands.encode_video(source, unsplit, encoding=rungs[0].encoding, size=(160, 90)))

    for r in range(len(rungs)):
        assert verify_chunks(files[r], plan) == []
        out = tmp_path / f"stitched_r{r}.mp4"
        run(stitch_argv(files[r], audio, out, list_file=tmp_path / f"list_r{r}.txt", plan=plan))
        assert decode_errors(ffmpeg, out) == ""
        # The join decodes to exactly the chunks' own pictures, frame for frame.
        assert frame_hashes(out, ffmpeg) == [h for f in files[r] for h in frame_hashes(f, ffmpeg)]
        packets, time_base = video_packets(out)
        assert len(packets) == plan.frame_count
        dts = [p[1] for p in packets]
        assert all(a < b for a, b in zip(dts, dts[1:], strict=False)), "decode timestamps must increase"
        pts = sorted(p[0] for p in packets)
        frame = 1 / plan.fps
        assert {b - a for a, b in zip(pts, pts[1:], strict=False)} == {frame / time_base}
        keyframe_times = {p[0] * time_base for p in packets if p[2]}
        assert {c.first_frame * frame for c in plan.chunks} <= keyframe_times
        assert abs(stream_end(out, "video") - plan.frame_count * frame) < frame
        if r == 0:
            # The same ticks as the unsplit encode, frame for frame, and the same keyframes.
            unsplit_packets, unsplit_base = video_packets(unsplit)
            assert unsplit_base == time_base
            assert sorted(p[0] for p in unsplit_packets) == pts
            assert {p[0] * time_base for p in unsplit_packets if p[2]} <= keyframe_times
        if audio is not None:
            # Audio as long as in the unsplit encode (longer than the video when the source's is),
            # and in sync with the video at the end within one audio frame.
            gap = stream_end(out, "audio") - stream_end(out, "video")
            unsplit_gap = stream_end(unsplit, "audio") - stream_end(unsplit, "video")
            assert abs(gap - unsplit_gap) <= AUDIO_FRAME
            assert abs(stream_end(out, "audio") - Fraction(AUDIO_SECONDS[audio_mode])) <= AUDIO_FRAME
    with av.open(str(tmp_path / "stitched_r0.mp4")) as container:
        assert len(container.streams.audio) == (0 if audio is None else 1)


def test_a_tampered_chunk_is_reported_and_a_per_rendition_encode_is_exact(sources, ffmpeg, tmp_path):
    source = sources[("25", "same")]
    plan = plan_split(source, chunk_seconds=1.0)
    rung = rungs_for("libx264")[0]
    files = []
    for chunk in plan.chunks:
        out = tmp_path / f"chunk{chunk.index}.mp4"
        run(rendition_argv(source, chunk, plan.fps, rung, out))  # the per-rendition layout
        files.append(out)
    assert [packet_count(f) for f in files] == [c.frames for c in plan.chunks] == [23, 24, 23]
    assert verify_chunks(files, plan) == []
    # Chunk 1 loses its last frame (copied, so still a valid file).
    short = tmp_path / "short.mp4"
    run(
        [
            ffmpeg,
            "-nostdin",
            "-v",
            "error",
            "-y",
            "-i",
            str(files[1]),
            "-c",
            "copy",
            "-frames:v",
            "23",
            str(short),
        ]
    )
    missing = tmp_path / "missing.mp4"
    reported = verify_chunks([files[0], short, missing], plan)
    assert reported[0] == ChunkMismatch(index=1, expected=24, got=23)
    assert (reported[1].index, reported[1].got, reported[1].reason[:10]) == (2, -1, "unreadable")
    assert len(reported) == 2
    # Another encoder's chunk (other parameter sets) would decode wrongly once joined.
    other = tmp_path / "other.mp4"
    run(rendition_argv(source, plan.chunks[2], plan.fps, rungs_for("libx265")[0], other))
    assert verify_chunks([files[0], files[1], other], plan) == [
        ChunkMismatch(index=2, expected=23, got=23, reason="codec parameters differ from chunk 0")
    ]


def test_keyframes_follow_the_source_grid_within_each_chunk():
    from media.split.plan import Chunk

    chunk = Chunk(index=1, first_frame=57, last_frame=130, start_seconds=0, end_seconds=0)
    # 25 fps, a keyframe every 2 s: source frames 100 (4 s) and 150 (out of range); plus the first.
    assert keyframe_frames(chunk, Fraction(25), 2.0) == [0, 43]
    # 29.97 fps, every second: the first frame at or after 2 s, 3 s, 4 s is 60, 90, 120.
    assert keyframe_frames(chunk, Fraction(30000, 1001), 1.0) == [0, 3, 33, 63]
    assert keyframe_frames(chunk, Fraction(25), None) == [0]


def test_the_concat_list_places_every_chunk_on_its_exact_tick_however_many_there_are(tmp_path):
    from media.split.stitch import concat_list

    fps = Fraction(30000, 1001)
    frames = [899] * 240  # a two-hour film in 30 s chunks at 29.97 fps
    files = [tmp_path / f"c{i}.mp4" for i in range(240)]
    text = concat_list(files, frames, fps)
    durations = [
        int(line.split()[1].removesuffix("us")) for line in text.splitlines() if line.startswith("duration")
    ]
    starts = [sum(durations[:i]) for i in range(len(durations) + 1)]
    # Each start, as FFmpeg rescales it to the 1/30000 time base, is the exact tick of its frame.
    for i, start_us in enumerate(starts):
        exact_ticks = Fraction(sum(frames[:i]) * 1001)
        assert abs(Fraction(start_us, 10**6) * 30000 - exact_ticks) < Fraction(1, 30)
    # Each file's own duration, rounded alone, would drift by 80 us (2.4 ticks) by the end.
    alone = round(Fraction(899) / fps * 10**6) * 240
    assert abs(Fraction(alone, 10**6) * 30000 - sum(frames) * 1001) > 2
    assert "file '" + str(files[0]) + "'" in text


def audio_packets(path):
    with av.open(str(path)) as container:
        return [(p.pts, p.duration) for p in container.demux(container.streams.audio[0]) if p.size]


def test_video_that_starts_after_the_audio_keeps_its_offset(ffmpeg, tmp_path):
    video, audio_only, source = tmp_path / "v.mp4", tmp_path / "a.m4a", tmp_path / "offset.mp4"
    run_all([split_source(video, seconds=2.0, ffmpeg=ffmpeg)])
    run(
        [ffmpeg, "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=duration=2.5:sample_rate=48000"]
        + ["-c:a", "aac", str(audio_only)]
    )
    run(
        [
            ffmpeg,
            "-nostdin",
            "-v",
            "error",
            "-y",
            "-itsoffset",
            "0.2",
            "-i",
            str(video),
            "-i",
            str(audio_only),
        ]
        + ["-map", "0:v", "-map", "1:a", "-c", "copy", str(source)]
    )
    plan = plan_split(source, chunk_seconds=1.0)
    assert plan.chunks[0].video_offset == 0.2
    rung = rungs_for("libx264")[0]
    files = []
    for chunk in plan.chunks:
        files.append(tmp_path / f"chunk{chunk.index}.mp4")
        run(rendition_argv(source, chunk, plan.fps, rung, files[-1]))
    run(audio_argv(source, tmp_path / "audio.m4a"))
    out = tmp_path / "stitched.mp4"
    run(stitch_argv(files, tmp_path / "audio.m4a", out, list_file=tmp_path / "list.txt", plan=plan))
    unsplit = tmp_path / "unsplit.mp4"
    run(commands.encode_video(source, unsplit, encoding=rung.encoding, size=(160, 90)))
    assert decode_errors(ffmpeg, out) == ""
    packets, time_base = video_packets(out)
    assert len(packets) == plan.frame_count == 50
    assert min(p[0] for p in packets) * time_base == Fraction(1, 5)  # where the source's video starts
    assert audio_packets(out) == audio_packets(unsplit)  # the audio as the unsplit encode has it
    # The unsplit encode pads the start with copies of the first frame (constant frame rate from
    # 0); both end together with the audio.
    assert stream_end(out, "video") == stream_end(unsplit, "video") == Fraction(11, 5)


@pytest.mark.parametrize("encoder", ["libx264", "libx265", "libaom-av1"])
def test_a_chunk_encode_held_to_one_thread_is_still_exact(encoder, sources, tmp_path):
    source = sources[("25", "none")]
    plan = plan_split(source, chunk_seconds=1.0)
    chunk = plan.chunks[1]
    outputs = [tmp_path / "a.mp4", tmp_path / "b.mp4"]
    argv = chunk_argv(source, chunk, plan.fps, rungs_for(encoder), outputs, threads=1)
    assert argv.count("-threads") == 3  # the decoder and each encoder
    if encoder == "libx265":
        assert "pools=1:frame-threads=1" in argv[argv.index("-x265-params") + 1]
    run(argv)
    assert [packet_count(out) for out in outputs] == [chunk.frames, chunk.frames]
