"""Playlists and concat lists cannot make FFmpeg or PyAV read outside the media root.

An HLS playlist (or an ffconcat list) under the media root names files by absolute path; FFmpeg
would follow them anywhere on the worker. They are refused at submission (by extension, and by the
format FFmpeg probes for a renamed one), and every FFmpeg and PyAV open of a user's file runs with
a protocol whitelist (file) and a demuxer whitelist without playlist or concat demuxers.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from media import ffmpeg as ff
from media.probe import ProbeError, probe, reference_problem
from tests.kit.matrix import counts
from workers import processes

pytestmark = pytest.mark.django_db


@pytest.fixture
def secret_ts(tmp_path) -> Path:
    """A real MPEG-TS clip outside the media root: what a playlist would smuggle out."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    path = outside / "other-jobs-output.ts"
    subprocess.run(
        [ff.ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"]
        + ["testsrc2=size=64x64:rate=5:duration=2", "-c:v", "mpeg2video", "-f", "mpegts", str(path)],
        check=True,
        timeout=60,
    )
    return path


@pytest.fixture
def real_clip(tmp_path) -> Path:
    path = tmp_path / "real.mp4"
    subprocess.run(
        [ff.ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"]
        + ["testsrc2=size=64x64:rate=5:duration=1", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(path)],
        check=True,
        timeout=60,
    )
    return path


def _hls(target: Path) -> str:
    return f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:2,\nfile:{target}\n#EXT-X-ENDLIST\n"


def _ffconcat(target: Path) -> str:
    return f"ffconcat version 1.0\nfile {target}\n"


@pytest.fixture
def playlists(hostile_media, secret_ts) -> dict[str, Path]:
    files = {
        "videos/evil.m3u8": _hls(secret_ts),
        "videos/evil.ffconcat": _ffconcat(secret_ts),
        # Renamed: only the format FFmpeg probes from the content gives it away.
        "videos/renamed-concat.mp4": _ffconcat(secret_ts),
    }
    for rel, text in files.items():
        (hostile_media / rel).write_text(text)
    return {rel: hostile_media / rel for rel in files}


@pytest.mark.parametrize("rel", ["videos/evil.m3u8", "videos/evil.ffconcat", "videos/renamed-concat.mp4"])
def test_a_playlist_input_is_refused_at_submission_naming_the_field(operator_api, playlists, rel):
    before = counts()
    response = operator_api.request(
        "post", "/v2/jobs", {"type": "thumbnail_generate", "params": {"input": rel}}
    )
    assert response.status_code == 422, response.content[:300]
    body = response.json()
    assert [e["field"] for e in body["errors"]] == ["params.input"], body
    assert "playlist" in body["errors"][0]["message"], body
    assert counts() == before


def test_a_playlist_among_several_inputs_is_refused_naming_its_index(operator_api, playlists, real_clip):
    (playlists["videos/evil.m3u8"].parent / "real.mp4").write_bytes(real_clip.read_bytes())
    inputs = ["videos/real.mp4", "videos/real.mp4", "videos/evil.m3u8", "videos/real.mp4"]
    response = operator_api.request(
        "post", "/v2/jobs", {"type": "compile_quad", "params": {"inputs": inputs}}
    )
    assert response.status_code == 422, response.content[:300]
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["params.inputs"], errors
    assert "inputs[2]" in errors[0]["message"] and "playlist" in errors[0]["message"], errors


def test_a_real_media_file_is_not_a_reference(real_clip):
    assert reference_problem(real_clip) is None
    assert probe(real_clip).has_video


def test_pyav_refuses_to_open_playlists(playlists):
    for path in playlists.values():
        assert reference_problem(path), path
        with pytest.raises(ProbeError, match="refers to other files"):
            probe(path)


@pytest.mark.parametrize("rel", ["videos/evil.m3u8", "videos/evil.ffconcat", "videos/renamed-concat.mp4"])
def test_ffmpeg_with_the_workers_options_does_not_read_what_a_playlist_names(playlists, tmp_path, rel):
    out = tmp_path / "copy.ts"
    argv = [ff.ffmpeg_path(), "-nostdin", "-hide_banner", "-y", "-i", str(playlists[rel])]
    argv += ["-c", "copy", "-f", "mpegts", str(out)]
    group = processes.start(argv, cwd=tmp_path)
    _stdout, stderr = group.popen.communicate(timeout=60)
    processes.forget_if_finished(group)
    assert group.popen.returncode != 0
    assert b"not on whitelist" in stderr, stderr[-500:]
    assert not out.exists() or out.stat().st_size == 0


def test_guard_inputs_covers_every_file_input_but_not_lavfi():
    argv = ["ffmpeg", "-y", "-i", "/m/a.mp4", "-t", "2", "-i", "/m/b.mp4"]
    argv += ["-f", "lavfi", "-i", "anullsrc", "-map", "0", "/o/out.mp4"]
    guarded = ff.guard_inputs(argv)
    assert guarded.count("-protocol_whitelist") == 2
    assert guarded[guarded.index("/m/a.mp4") - 5 : guarded.index("/m/a.mp4") - 1] == ff.input_args()
    lavfi = guarded.index("anullsrc")
    assert guarded[lavfi - 3 : lavfi] == ["-f", "lavfi", "-i"]
    assert "-protocol_whitelist" not in guarded[guarded.index("/m/b.mp4") : lavfi]
    assert ff.guard_inputs(guarded) == guarded  # idempotent
