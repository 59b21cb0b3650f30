"""The probe itself: PyAV opens one user file and measures it. Runs in a process of its own.

Started by media.probe as `python -I media/probe_child.py PARENT_PID LIMIT_BYTES MODE FORMATS
PROTOCOLS PATH...` inside media.sandbox's box (scrubbed environment, the stages' memory limit, a time
limit, dies with its parent). The child puts itself in the box (`_enter_box`, before PyAV is
imported) rather than the parent between fork and exec: the parent may be a threaded gunicorn
worker, where running Python code in a forked child (preexec_fn) can deadlock. So decoding a hostile or huge file (an 8000x8000 PNG costs ~200 MiB per open) happens
where there is no DATABASE_URL, no S3 key and no web or worker heap to grow.

It imports nothing of the project (`-I`: the standard library and site-packages only) and prints
one JSON object on stdout:
  probe      {"fields": {...MediaInfo fields but path and size...}} | {"error": "...", "reference": bool}
             (one PATH)
  reference  {"references": [bool, ...]} (one per PATH)
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
SIGKILL = 9


def avc_codec_string(extradata: bytes | None) -> str:
    """RFC 6381 `avc1.PPCCLL` from an avcC box: version(1)=1, profile_idc, compatibility, level_idc."""
    if extradata and len(extradata) >= 4 and extradata[0] == 1:
        return "avc1.%02x%02x%02x" % (extradata[1], extradata[2], extradata[3])
    return ""


def _duration(av, container) -> float:
    if container.duration:
        return container.duration / av.time_base
    best = 0.0
    for stream in container.streams:
        if stream.duration and stream.time_base:
            best = max(best, float(stream.duration * stream.time_base))
    return best


def _rotation(av, container, stream) -> int:
    """Display rotation in degrees (0, 90, 180, 270). PyAV exposes it on decoded frames only."""
    try:
        for frame in container.decode(stream):
            return int(round(getattr(frame, "rotation", 0) or 0)) % 360
    except (av.error.FFmpegError, StopIteration):
        return 0
    return 0


NO_VIDEO = {
    "width": None,
    "height": None,
    "fps": None,
    "video_codec": "",
    "video_profile": "",
    "pix_fmt": "",
    "rotation": 0,
    "codec_string": "",
}


def _video_fields(av, container, video) -> dict[str, Any]:
    """Display size: width and height swapped for a 90° or 270° rotation."""
    if video is None:
        return dict(NO_VIDEO)
    ctx = video.codec_context
    width, height = ctx.width or None, ctx.height or None
    rate = video.average_rate or video.guessed_rate
    video_codec = ctx.name or ""
    rotation = _rotation(av, container, video)
    if rotation in (90, 270) and width and height:
        width, height = height, width
    return {
        "width": width,
        "height": height,
        "fps": round(float(rate), 3) if rate else None,
        "video_codec": video_codec,
        "video_profile": video.profile or "",
        "pix_fmt": ctx.pix_fmt or "",
        "rotation": rotation,
        "codec_string": avc_codec_string(ctx.extradata) if video_codec == "h264" else "",
    }


def _audio_fields(audio) -> dict[str, Any]:
    if audio is None:
        return {"audio_codec": "", "sample_rate": None, "channels": None}
    ctx = audio.codec_context
    return {"audio_codec": ctx.name or "", "sample_rate": ctx.sample_rate, "channels": ctx.channels}


def _measure(av, container) -> dict[str, Any]:
    video = container.streams.video[0] if container.streams.video else None
    audio = container.streams.audio[0] if container.streams.audio else None
    if video is None and audio is None:
        return {"error": "no audio or video stream", "reference": False}
    duration = _duration(av, container)
    return {
        "fields": {
            "format_name": container.format.name,
            "duration_seconds": round(duration, 3),
            "container_bit_rate": container.bit_rate or None,
            "has_video": video is not None,
            "has_audio": audio is not None,
            **_video_fields(av, container, video),
            **_audio_fields(audio),
        }
    }


def _reason(exc: Exception) -> str:
    """FFmpeg's words without the file name (a /proc/self/fd or workspace path says nothing useful
    to the user, and is a path a viewer must not see)."""
    return str(getattr(exc, "strerror", None) or exc.__class__.__name__)


def run(mode: str, path: str, formats: str, protocols: str) -> dict[str, Any]:
    import av

    options = {"protocol_whitelist": protocols, "format_whitelist": formats}
    if mode == "reference":
        # Only the demuxer matters: no decoder may open, so nothing is decoded (a huge picture
        # costs nothing here; measuring it is the validate stage's business).
        options["codec_whitelist"] = "none"
    try:
        container = av.open(path, mode="r", metadata_errors="ignore", container_options=options)
    except av.error.ValueError:
        # EINVAL from avformat_open_input: the probed demuxer is not on the whitelist.
        return {"reference": True, "error": "not on the whitelist"}
    except (av.error.FFmpegError, OSError) as exc:
        return {"reference": False, "error": f"not a readable media file ({_reason(exc)})"}
    try:
        if mode == "reference":
            return {"reference": False}
        return _measure(av, container)
    except av.error.FFmpegError as exc:
        return {"reference": False, "error": f"not a readable media file ({_reason(exc)})"}
    finally:
        container.close()


def _enter_box(parent_pid: int, limit_bytes: int) -> None:
    """Die with the parent (Linux), and cap the address space before anything is decoded."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(111)
    if limit_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def main(argv: list[str]) -> int:
    parent_pid, limit_bytes, mode, formats, protocols, *paths = argv
    _enter_box(int(parent_pid), int(limit_bytes))
    try:
        if mode == "reference":
            answer = {"references": [bool(run(mode, p, formats, protocols).get("reference")) for p in paths]}
        else:
            answer = run(mode, paths[0], formats, protocols)
    except MemoryError:
        answer = {"reference": False, "error": "decoding it needs more memory than the limit allows"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
