"""Reading a media file's metadata with PyAV (no ffprobe needed), in a process of its own.

PyAV never decodes a user's file in the calling process (a web process, a worker): `probe` and
`reference_problem` start media/probe_child.py in media.sandbox's box (scrubbed environment, the
stages' memory limit JETENCODE_FFMPEG_MEMORY_MB, a time limit JETENCODE_PROBE_TIMEOUT_SECONDS) and
read its one JSON answer. A file opened by descriptor is handed over as that descriptor
(`/proc/self/fd/N` in the child), never by name.

Width and height are the *display* size: a phone video stored 1920x1080 with a 90° display matrix
is reported 1080x1920 and `portrait`, because FFmpeg auto-rotates when it decodes and every size
decision (ladders, grids, orientation filters) is about what the viewer sees.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from media import sandbox
from media.ffmpeg import INPUT_FORMATS, INPUT_PROTOCOLS
from media.probe_child import avc_codec_string as _avc_codec_string  # noqa: F401 - media.hls reads it

CHILD = Path(__file__).with_name("probe_child.py")

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


def _size_of(path: Path | str | None, fd: int | None, shown: str) -> int:
    try:
        size = os.fstat(fd).st_size if fd is not None else os.stat(path).st_size
    except OSError as exc:
        raise ProbeError(shown, f"file not found or unreadable ({exc.strerror})") from exc
    if size == 0:
        raise ProbeError(shown, "file is empty")
    return size


def probe_timeout() -> float:
    return float(getattr(settings, "JETENCODE", {}).get("PROBE_TIMEOUT_SECONDS", 60))


def _run_child(mode: str, paths: list[str], fds: list[int], shown: str) -> dict[str, Any]:
    """Run the probe child on `paths` (`/proc/self/fd/N` for the open descriptors `fds`); its JSON answer."""
    box = [str(os.getpid()), str(sandbox.memory_limit_bytes())]  # the child enters the box itself
    argv = [sys.executable, "-I", str(CHILD), *box, mode, ",".join(INPUT_FORMATS), INPUT_PROTOCOLS, *paths]
    child = subprocess.Popen(
        argv,
        env=sandbox.minimal_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        pass_fds=tuple(fds),
    )
    try:
        out, _err = child.communicate(timeout=probe_timeout())
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise ProbeError(shown, f"probing took longer than {probe_timeout():.0f} s") from None
    try:
        answer = json.loads(out.decode("utf-8", "replace")) if child.returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        # Killed (by the memory limit's failed allocation, a crash in a decoder) or garbled.
        raise ProbeError(shown, f"the file could not be probed within the limits (exit {child.returncode})")
    return answer


def _fd_path(path: Path | str, fd: int | None) -> str:
    return f"/proc/self/fd/{fd}" if fd is not None else str(path)


def reference_problems(fds: list[int], names: list[str]) -> list[str | None]:
    """`reference_problem` for several open descriptors, in one probe process."""
    problems: list[str | None] = [
        REFERENCE_REFUSAL if Path(name).suffix.lower() in REFERENCE_EXTENSIONS else None for name in names
    ]
    ask = [index for index, problem in enumerate(problems) if problem is None]
    if not ask:
        return problems
    chosen = [fds[index] for index in ask]
    try:
        answer = _run_child("reference", [_fd_path(None, fd) for fd in chosen], chosen, names[ask[0]])
    except ProbeError:
        return problems  # not this check's business: the validate stage and the stages say why
    for index, refused in zip(ask, answer.get("references") or [], strict=False):
        problems[index] = REFERENCE_REFUSAL if refused else None
    return problems


def reference_problem(
    path: Path | str | None = None, *, name: str | None = None, fd: int | None = None
) -> str | None:
    """Why `path` may not be an input (a playlist or another file that refers to files), or None.

    By extension first, then by the format FFmpeg itself probes (a playlist renamed .mp4 is still
    found when FFmpeg would read it as one). Files FFmpeg cannot read at all are not this check's
    business: the validate stage marks them invalid."""
    shown = name or Path(str(path)).name
    if Path(shown).suffix.lower() in REFERENCE_EXTENSIONS:
        return REFERENCE_REFUSAL
    try:
        answer = _run_child("reference", [_fd_path(path, fd)], [fd] if fd is not None else [], shown)
    except ProbeError:
        return None  # not this check's business: the validate stage and the stages say why
    return REFERENCE_REFUSAL if any(answer.get("references") or []) else None


def probe(path: Path | str | None = None, *, name: str | None = None, fd: int | None = None) -> MediaInfo:
    """Measure a media file in a probe process. `fd`: an open descriptor to measure instead of
    `path` (media.paths.open_media_file); `name`: the user's file name (its extension and the
    messages come from it)."""
    shown = name or Path(str(path)).name
    size = _size_of(path, fd, shown)
    if Path(shown).suffix.lower() in REFERENCE_EXTENSIONS:
        raise ProbeError(shown, f"not a media file: it {REFERENCE_KIND}")
    answer = _run_child("probe", [_fd_path(path, fd)], [fd] if fd is not None else [], shown)
    if "fields" not in answer:
        reason = f"not a media file: it {REFERENCE_KIND}" if answer.get("reference") else answer.get("error")
        raise ProbeError(shown, str(reason or "not a readable media file"))
    fields = dict(answer["fields"])
    duration = float(fields["duration_seconds"] or 0)
    bitrate = fields.pop("container_bit_rate", None) or (int(size * 8 / duration) if duration else None)
    return MediaInfo(
        path=str(path) if fd is None else shown,
        size_bytes=size,
        bitrate=int(bitrate) if bitrate else None,
        orientation=orientation_of(fields.get("width"), fields.get("height")),
        **fields,
    )


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
