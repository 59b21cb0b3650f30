"""Reading a media file's metadata with PyAV (no ffprobe needed).

Width and height are the *display* size: a phone video stored 1920x1080 with a 90° display matrix
is reported 1080x1920 and `portrait`, because FFmpeg auto-rotates when it decodes and every size
decision (ladders, grids, orientation filters) is about what the viewer sees.
"""

from __future__ import annotations

import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import av

from media.ffmpeg import input_options

# Playlists, concat lists, manifests and scripts: files that name other files or URLs. Refused as
# inputs by extension here, and by their real format wherever FFmpeg or PyAV opens them (the
# demuxer whitelist of media.ffmpeg), so renaming one to .mp4 does not help.
REFERENCE_EXTENSIONS = frozenset(
    {
        ".m3u",
        ".m3u8",
        ".hls",
        ".ffconcat",
        ".concat",
        ".mpd",
        ".ism",
        ".isml",
        ".f4m",
        ".pls",
        ".xspf",
        ".asx",
        ".wpl",
        ".cue",
        ".sdp",
        ".avs",
        ".vpy",
        ".imf",
        ".xml",
        ".txt",
        ".ffmeta",
    }
)
REFERENCE_KIND = "is a playlist, concat list or other file that refers to other files"
REFERENCE_REFUSAL = f"{REFERENCE_KIND}, which FFmpeg could follow outside the media root; give a media file"


class ProbeError(Exception):
    """The file is missing, unreadable or has no usable stream; `reason` is safe to show."""

    def __init__(self, path: Path | str, reason: str):
        super().__init__(f"cannot probe {Path(path).name}: {reason}")
        self.path = str(path)
        self.reason = reason


# The MediaAsset columns a probe measures (same names on MediaInfo): the library stage copies
# exactly these from a probe, and the admin shows them read-only.
ASSET_FIELDS = (
    "size_bytes",
    "duration_seconds",
    "width",
    "height",
    "fps",
    "video_codec",
    "audio_codec",
    "bitrate",
    "orientation",
    "has_audio",
)


@dataclass(frozen=True)
class MediaInfo:
    path: str
    size_bytes: int
    format_name: str
    duration_seconds: float
    bitrate: int | None
    has_video: bool
    has_audio: bool
    width: int | None
    height: int | None
    fps: float | None
    video_codec: str
    video_profile: str
    pix_fmt: str
    rotation: int
    orientation: str
    audio_codec: str
    sample_rate: int | None
    channels: int | None
    codec_string: str  # RFC 6381 "avc1.64001f" for H.264 (HLS CODECS), else ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def asset_fields(self) -> dict[str, Any]:
        """The MediaAsset columns this probe fills."""
        return {name: getattr(self, name) for name in ASSET_FIELDS}


def orientation_of(width: int | None, height: int | None) -> str:
    if not width or not height:
        return ""
    if width > height:
        return "landscape"
    if height > width:
        return "portrait"
    return "square"


def _avc_codec_string(extradata: bytes | None) -> str:
    # avcC box: version(1)=1, profile_idc, profile_compatibility, level_idc.
    if extradata and len(extradata) >= 4 and extradata[0] == 1:
        return "avc1.%02x%02x%02x" % (extradata[1], extradata[2], extradata[3])
    return ""


def _duration(container: av.container.InputContainer) -> float:
    if container.duration:
        return container.duration / av.time_base
    best = 0.0
    for stream in container.streams:
        if stream.duration and stream.time_base:
            best = max(best, float(stream.duration * stream.time_base))
    return best


def _rotation(container: av.container.InputContainer, stream) -> int:
    """Display rotation in degrees (0, 90, 180, 270). PyAV exposes it on decoded frames only."""
    try:
        for frame in container.decode(stream):
            return int(round(getattr(frame, "rotation", 0) or 0)) % 360
    except (av.error.FFmpegError, StopIteration):
        return 0
    return 0


def _size_of(path: Path) -> int:
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise ProbeError(path, f"file not found or unreadable ({exc.strerror})") from exc
    if size == 0:
        raise ProbeError(path, "file is empty")
    return size


def _video_fields(container: av.container.InputContainer, video) -> dict[str, Any]:
    """MediaInfo's video fields; display size (width and height swapped for a 90° or 270° rotation)."""
    if video is None:
        return {
            "width": None,
            "height": None,
            "fps": None,
            "video_codec": "",
            "video_profile": "",
            "pix_fmt": "",
            "rotation": 0,
            "codec_string": "",
        }
    ctx = video.codec_context
    width, height = ctx.width or None, ctx.height or None
    rate = video.average_rate or video.guessed_rate
    video_codec = ctx.name or ""
    rotation = _rotation(container, video)
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
        "codec_string": _avc_codec_string(ctx.extradata) if video_codec == "h264" else "",
    }


def _audio_fields(audio) -> dict[str, Any]:
    if audio is None:
        return {"audio_codec": "", "sample_rate": None, "channels": None}
    ctx = audio.codec_context
    return {"audio_codec": ctx.name or "", "sample_rate": ctx.sample_rate, "channels": ctx.channels}


def _open(path: Path) -> av.container.InputContainer:
    """Open a user's file with the input whitelists (file protocol, media demuxers only)."""
    try:
        return av.open(str(path), mode="r", metadata_errors="ignore", container_options=input_options())
    except av.error.ValueError as exc:
        # EINVAL from avformat_open_input: the probed demuxer is not on the whitelist.
        raise ProbeError(path, f"not a media file: it {REFERENCE_KIND}") from exc
    except av.error.FFmpegError as exc:
        raise ProbeError(path, f"not a readable media file ({exc})") from exc


def reference_problem(path: Path | str, *, name: str | None = None) -> str | None:
    """Why `path` may not be an input (a playlist or another file that refers to files), or None.

    By extension first, then by the format FFmpeg itself probes (a playlist renamed .mp4 is still
    found when FFmpeg would read it as one). Files FFmpeg cannot read at all are not this check's
    business: the validate stage marks them invalid."""
    path = Path(path)
    if Path(name or path.name).suffix.lower() in REFERENCE_EXTENSIONS:
        return REFERENCE_REFUSAL
    try:
        container = av.open(str(path), mode="r", metadata_errors="ignore", container_options=input_options())
    except av.error.ValueError:
        return REFERENCE_REFUSAL
    except (av.error.FFmpegError, OSError):
        return None
    container.close()
    return None


def probe(path: Path | str, *, name: str | None = None) -> MediaInfo:
    """`name`: the user's file name when `path` is a descriptor's /proc/self/fd path (its extension
    and the messages come from it)."""
    path = Path(path)
    size = _size_of(path)
    if Path(name or path.name).suffix.lower() in REFERENCE_EXTENSIONS:
        raise ProbeError(name or path, f"not a media file: it {REFERENCE_KIND}")
    container = _open(path)
    try:
        video = container.streams.video[0] if container.streams.video else None
        audio = container.streams.audio[0] if container.streams.audio else None
        if video is None and audio is None:
            raise ProbeError(path, "no audio or video stream")
        duration = _duration(container)
        picture = _video_fields(container, video)
        bitrate = container.bit_rate or (int(size * 8 / duration) if duration else None)
        return MediaInfo(
            path=str(path),
            size_bytes=size,
            format_name=container.format.name,
            duration_seconds=round(duration, 3),
            bitrate=int(bitrate) if bitrate else None,
            has_video=video is not None,
            has_audio=audio is not None,
            orientation=orientation_of(picture["width"], picture["height"]),
            **picture,
            **_audio_fields(audio),
        )
    except av.error.FFmpegError as exc:
        raise ProbeError(path, f"not a readable media file ({exc})") from exc
    finally:
        container.close()


def mp4_top_level_boxes(path: Path | str, limit: int = 64) -> list[str]:
    """Names of the top-level ISO-BMFF boxes in order; `moov` before `mdat` means +faststart worked."""
    names = []
    with open(path, "rb") as fh:
        while len(names) < limit:
            header = fh.read(8)
            if len(header) < 8:
                break
            size, kind = struct.unpack(">I4s", header)
            header_len = 8
            if size == 1:  # 64-bit size follows
                size = struct.unpack(">Q", fh.read(8))[0]
                header_len = 16
            names.append(kind.decode("latin-1"))
            if size == 0:  # box extends to end of file
                break
            fh.seek(size - header_len, os.SEEK_CUR)
    return names


def is_faststart(path: Path | str) -> bool:
    boxes = mp4_top_level_boxes(path)
    return "moov" in boxes and "mdat" in boxes and boxes.index("moov") < boxes.index("mdat")
