"""FFmpeg -progress parsing and throttled reporting."""

import subprocess

import pytest

from media import commands
from media.progress import ProgressParser, ProgressThrottle

BLOCK = """frame=50
fps=25.00
stream_0_0_q=28.0
bitrate= 512.0kbits/s
total_size=65536
out_time_us=1000000
out_time_ms=1000000
out_time=00:00:01.000000
dup_frames=0
drop_frames=0
speed=2.00x
progress=continue"""


def test_it_parses_a_block_into_a_sample():
    samples = []
    parser = ProgressParser(4.0, samples.append)
    for line in BLOCK.splitlines():
        parser.feed(line)
    [sample] = samples
    assert sample.out_time_seconds == 1.0
    assert sample.percent == 25.0
    assert sample.speed == 2.0 and sample.fps == 25.0 and sample.frame == 50
    assert sample.eta_seconds == pytest.approx(1.5)  # 3 s of media left at 2x
    assert not sample.done


def test_it_reads_na_values_as_unknown_and_the_end_block_as_done():
    parser = ProgressParser(2.0)
    for line in ["out_time_us=N/A", "speed=N/A", "progress=continue", "out_time_us=2000000", "progress=end"]:
        parser.feed(line)
    first, last = parser.samples
    assert first.percent == 0.0 and first.speed is None
    assert last.done and last.percent == 100.0 and last.eta_seconds == 0.0


def test_unknown_duration_reports_zero_until_the_end():
    parser = ProgressParser(None)
    parser.feed("out_time_us=5000000")
    assert parser.feed("progress=continue").percent == 0.0


def test_throttle_reports_every_5_percent_or_2_seconds():
    now = [0.0]
    reported = []
    throttle = ProgressThrottle(lambda p, d: reported.append(p), clock=lambda: now[0])
    for percent in (0, 1, 2, 4.9, 5.1, 6, 11):
        throttle.update(percent)
    assert reported == [0, 5.1, 11]
    now[0] = 2.5
    throttle.update(11.5)  # little progress, but 2 s passed
    assert reported[-1] == 11.5
    throttle.update(3)  # never goes backwards
    assert reported[-1] == 11.5


def test_spans_map_into_a_sub_range_and_share_history():
    reported = []
    throttle = ProgressThrottle(lambda p, d: reported.append(p), clock=lambda: 0.0)
    first, second = throttle.span(0, 50), throttle.span(50, 100)
    first.update(100, force=True)
    second.update(0)  # 50 again: not a 5-point step
    second.update(50, force=True)
    assert reported == [50.0, 75.0]


def test_progress_from_a_real_ffmpeg_run(clips, tmp_path):
    argv = commands.reencode_streaming(clips.landscape, tmp_path / "out.mp4", preset="ultrafast")
    assert argv[1:7] == ["-nostdin", "-nostats", "-hide_banner", "-progress", "pipe:1", "-y"]
    parser = ProgressParser(3.0)
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    for line in proc.stdout.splitlines():
        parser.feed(line)
    assert parser.samples, proc.stdout
    assert parser.samples[-1].done and parser.samples[-1].percent == 100.0
    assert parser.samples[-1].out_time_seconds == pytest.approx(3.0, abs=0.1)
    percents = [s.percent for s in parser.samples]
    assert percents == sorted(percents)
