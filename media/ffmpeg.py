"""Finding FFmpeg and learning what this machine's FFmpeg can encode.

Lookup order: JETENCODE_FFMPEG, then `ffmpeg` on PATH, then the static binary shipped by
imageio-ffmpeg, so a fresh machine needs no system FFmpeg.

A hardware encoder listed by `ffmpeg -encoders` is only *compiled in*; whether the machine has the
device (and driver) is another matter. Each one is confirmed with a one-second test encode before it
appears in `hardware_encoders`, which is what the scheduler and the stage handlers trust.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from django.conf import settings

# Name suffixes of FFmpeg's hardware encoder wrappers.
HARDWARE_SUFFIXES = (
    "_nvenc",
    "_qsv",
    "_vaapi",
    "_videotoolbox",
    "_amf",
    "_v4l2m2m",
    "_mf",
    "_omx",
    "_rkmpp",
    "_vulkan",
)
# Only these are used by the handlers (all output is H.264); the others are listed for the catalog.
H264_HARDWARE_PREFERENCE = ("h264_nvenc", "h264_qsv", "h264_vaapi", "h264_videotoolbox", "h264_amf")
TEST_ENCODE_TIMEOUT = 30.0
VAAPI_DEVICE = "/dev/dri/renderD128"

# --- what FFmpeg and PyAV may open on a user's input -----------------------------------------------
# An input under the media root is a media file. FFmpeg's demuxers for playlists, concat lists,
# manifests and scripts (hls, concat, dash, imf, webm_dash_manifest, avisynth, vapoursynth, ...) follow
# the references inside the file, to absolute `file:` paths anywhere on the worker or to URLs, so
# they are not on this list: a file that probes as one of them fails to open ("Format not on
# whitelist"). Every demuxer below holds its media itself (mov's external data references stay off:
# FFmpeg's `enable_drefs` defaults to false). Names are FFmpeg's demuxer names, comma-separated
# aliases included (mov's is "mov,mp4,m4a,3gp,3g2,mj2").
INPUT_FORMATS = (
    "mov,mp4,m4a,3gp,3g2,mj2",
    "matroska,webm",
    "avi",
    "mpegts",
    "mpeg",
    "mpegvideo",
    "asf",
    "flv",
    "ogg",
    "m4v",
    "h264",
    "hevc",
    "wav",
    "w64",
    "aiff",
    "mp3",
    "aac",
    "ac3",
    "eac3",
    "flac",
    "image2",
    "jpeg_pipe",
    "png_pipe",
    "webp_pipe",
    "bmp_pipe",
    "gif",
)
# Only local files: no http, tcp, data:, subfile, concat:, pipe: ... on an input.
INPUT_PROTOCOLS = "file"


class FFmpegNotFound(RuntimeError):
    pass


def input_options() -> dict[str, str]:
    """The AVFormatContext options every user input is opened with (PyAV's `container_options`)."""
    return {"protocol_whitelist": INPUT_PROTOCOLS, "format_whitelist": ",".join(INPUT_FORMATS)}


def input_args() -> list[str]:
    """The same options as FFmpeg per-input arguments (they apply to the next `-i`)."""
    return [arg for name, value in input_options().items() for arg in (f"-{name}", value)]


def guard_inputs(argv: list[str]) -> list[str]:
    """`argv` with the input whitelists in front of every file input (`-i`). Synthetic `-f lavfi`
    inputs (test patterns, silence) are left alone; an input that already carries a whitelist
    keeps its own. Idempotent."""
    out: list[str] = []
    since_last_input: list[str] = []  # the arguments that apply to the next input
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "-i" and index + 1 < len(argv):
            forced = _option_value(since_last_input, "-f")
            if forced != "lavfi" and "-format_whitelist" not in since_last_input:
                out += input_args()
            out += [arg, argv[index + 1]]
            since_last_input = []
            index += 2
            continue
        out.append(arg)
        since_last_input.append(arg)
        index += 1
    return out


def _option_value(args: list[str], name: str) -> str | None:
    value = None
    for position, arg in enumerate(args[:-1]):
        if arg == name:
            value = args[position + 1]
    return value


HARDWARE_OPTIONS = frozenset(
    {"-hwaccel", "-hwaccel_device", "-init_hw_device", "-filter_hw_device", "-vaapi_device"}
)


def uses_hardware(argv: list[str]) -> bool:
    """argv opens a GPU or other hardware device (an encoder wrapper, hwaccel, hwupload). CUDA and
    the VA/QSV drivers reserve address space far beyond what they use, so such a process cannot run
    under an address-space limit (workers/processes.py leaves it unlimited)."""
    for arg in map(str, argv):
        if arg in HARDWARE_OPTIONS or arg.endswith(HARDWARE_SUFFIXES) or "hwupload" in arg or "_cuda" in arg:
            return True
    return False


def is_ffmpeg(argv: list[str]) -> bool:
    """argv runs this machine's FFmpeg (the configured binary, or any program named ffmpeg*)."""
    if not argv:
        return False
    program = str(argv[0])
    if Path(program).name.startswith("ffmpeg"):
        return True
    try:
        return Path(program).resolve() == Path(ffmpeg_path()).resolve()
    except (FFmpegNotFound, OSError):
        return False


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def ffmpeg_path() -> str:
    """Absolute path of the FFmpeg binary to run. Raises FFmpegNotFound with what was tried."""
    configured = getattr(settings, "FFMPEG_BINARY", "") or ""
    if configured:
        found = configured if os.sep in configured else shutil.which(configured)
        if found and _executable(found):
            return str(Path(found).resolve())
        # A configured binary that is missing is a deployment mistake: say so instead of silently
        # falling back to a different FFmpeg than the operator asked for.
        raise FFmpegNotFound(f"JETENCODE_FFMPEG={configured!r} is not an executable file")
    on_path = shutil.which("ffmpeg")
    if on_path:
        return str(Path(on_path).resolve())
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except Exception as exc:  # imageio raises RuntimeError when its binary is absent
        raise FFmpegNotFound(
            "no FFmpeg found: set JETENCODE_FFMPEG, install ffmpeg on PATH, or install imageio-ffmpeg"
        ) from exc


def ffprobe_path() -> str | None:
    """ffprobe is optional (probing uses PyAV): next to the chosen ffmpeg, else on PATH."""
    try:
        sibling = Path(ffmpeg_path()).with_name("ffprobe")
    except FFmpegNotFound:
        sibling = None
    if sibling is not None and _executable(str(sibling)):
        return str(sibling)
    return shutil.which("ffprobe")


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
    )


def ffmpeg_version(ffmpeg: str | None = None) -> str:
    proc = _run([ffmpeg or ffmpeg_path(), "-hide_banner", "-version"], timeout=15)
    match = re.match(r"ffmpeg version (\S+)", proc.stdout)
    return match.group(1) if match else "unknown"


def parse_encoders(text: str) -> list[dict[str, str]]:
    """Parse `ffmpeg -hide_banner -encoders`: lines like ' V....D libx264  libx264 H.264 ...'."""
    encoders = []
    past_legend = False
    for line in text.splitlines():
        if line.strip().startswith("------"):
            past_legend = True
            continue
        if not past_legend:
            continue
        match = re.match(r"^\s*([VAS])([A-Z.]{5})\s+(\S+)\s*(.*)$", line)
        if match:
            kind = {"V": "video", "A": "audio", "S": "subtitle"}[match.group(1)]
            encoders.append({"name": match.group(3), "type": kind, "description": match.group(4).strip()})
    return encoders


def parse_hwaccels(text: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].lower().startswith("hardware acceleration methods"):
        lines = lines[1:]
    return lines


def is_hardware_encoder(name: str) -> bool:
    return name.endswith(HARDWARE_SUFFIXES)


def confirmation_argv(ffmpeg: str, encoder: str) -> list[str]:
    """One second of lavfi test pattern through `encoder`, discarded. The pixel format and device
    setup differ by family; VAAPI needs frames uploaded to the device."""
    argv = [ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error"]
    if encoder.endswith("_vaapi"):
        argv += ["-vaapi_device", VAAPI_DEVICE]
    argv += ["-f", "lavfi", "-i", "testsrc2=size=256x144:rate=25:duration=1"]
    if encoder.endswith("_vaapi"):
        argv += ["-vf", "format=nv12,hwupload"]
    elif encoder.endswith(("_qsv", "_nvenc", "_amf", "_v4l2m2m", "_mf")):
        argv += ["-pix_fmt", "nv12"]
    else:
        argv += ["-pix_fmt", "yuv420p"]
    argv += ["-frames:v", "25", "-c:v", encoder, "-f", "null", "-"]
    return argv


def confirm_encoder(ffmpeg: str, encoder: str) -> bool:
    try:
        proc = _run(confirmation_argv(ffmpeg, encoder), timeout=TEST_ENCODE_TIMEOUT)
    except (subprocess.TimeoutExpired, OSError):
        return False
    return proc.returncode == 0


def build_catalog(ffmpeg: str | None = None) -> dict[str, Any]:
    """Probe FFmpeg now (uncached). Hardware encoders are confirmed in parallel threads, because a
    missing device can take seconds to time out and a machine may list a dozen wrappers."""
    ffmpeg = ffmpeg or ffmpeg_path()
    encoders = parse_encoders(_run([ffmpeg, "-hide_banner", "-encoders"], timeout=30).stdout)
    hwaccels = parse_hwaccels(_run([ffmpeg, "-hide_banner", "-hwaccels"], timeout=30).stdout)
    candidates = [e["name"] for e in encoders if e["type"] == "video" and is_hardware_encoder(e["name"])]
    confirmed: dict[str, bool] = {}

    def check(name: str) -> None:
        confirmed[name] = confirm_encoder(ffmpeg, name)

    threads = [threading.Thread(target=check, args=(name,), daemon=True) for name in candidates]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TEST_ENCODE_TIMEOUT + 5)
    return {
        "ffmpeg": ffmpeg,
        "ffprobe": ffprobe_path(),
        "version": ffmpeg_version(ffmpeg),
        "encoders": sorted(e["name"] for e in encoders),
        "hardware_encoders": sorted(name for name in candidates if confirmed.get(name)),
        "hardware_encoders_unconfirmed": sorted(name for name in candidates if not confirmed.get(name)),
        "hwaccels": hwaccels,
    }


@functools.cache
def _cached_catalog(ffmpeg: str) -> dict[str, Any]:
    return build_catalog(ffmpeg)


def encoder_catalog(refresh: bool = False) -> dict[str, Any]:
    """The worker's capability catalog, computed once per process (per FFmpeg binary).

    {"ffmpeg": path, "ffprobe": path | None, "version": str, "encoders": [names],
     "hardware_encoders": [confirmed names], "hardware_encoders_unconfirmed": [...], "hwaccels": [...]}
    """
    ffmpeg = ffmpeg_path()
    if refresh:
        _cached_catalog.cache_clear()
    # A copy, so a caller mutating its dict cannot change what the next caller sees.
    catalog = _cached_catalog(ffmpeg)
    return {key: (list(value) if isinstance(value, list) else value) for key, value in catalog.items()}


def preferred_h264_hardware_encoder(catalog: dict[str, Any] | None) -> str | None:
    """The first confirmed H.264 hardware encoder in the catalog, or None."""
    confirmed = set((catalog or {}).get("hardware_encoders") or [])
    for name in H264_HARDWARE_PREFERENCE:
        if name in confirmed:
            return name
    return None


# --- encoder selection by codec (quality lane) ----------------------------------------------------

CODECS = ("h264", "hevc", "av1")
# Hardware encoders per codec, in preference order; only confirmed ones (catalog "hardware_encoders")
# are ever chosen.
HARDWARE_PREFERENCE = {
    "h264": H264_HARDWARE_PREFERENCE,
    "hevc": ("hevc_nvenc", "hevc_qsv", "hevc_vaapi", "hevc_videotoolbox", "hevc_amf"),
    "av1": ("av1_nvenc", "av1_qsv", "av1_vaapi", "av1_amf"),
}
# Software encoders per codec, in preference order (the first the catalog lists is used).
SOFTWARE_PREFERENCE = {
    "h264": ("libx264",),
    "hevc": ("libx265",),
    "av1": ("libsvtav1", "libaom-av1"),
}


def preferred_hardware_encoder(codec: str, catalog: dict[str, Any] | None) -> str | None:
    """The first confirmed hardware encoder for `codec` in the catalog, or None."""
    confirmed = set((catalog or {}).get("hardware_encoders") or [])
    return next((name for name in HARDWARE_PREFERENCE.get(codec, ()) if name in confirmed), None)


def software_encoder(codec: str, catalog: dict[str, Any] | None) -> str | None:
    """The software encoder for `codec` this catalog's FFmpeg has. A catalog without an encoder list
    (an older worker) is assumed to be the shipped static build: libx264, libx265, libaom-av1."""
    listed = (catalog or {}).get("encoders")
    for name in SOFTWARE_PREFERENCE.get(codec, ()):
        if not listed or name in listed:
            if listed or name != "libsvtav1":
                return name
    return None


def select_encoder(codec: str, catalog: dict[str, Any] | None, hardware: str) -> tuple[str | None, bool]:
    """(encoder, is_hardware) for one rendition: a confirmed hardware encoder when `hardware` is
    auto or gpu and the catalog has one, else the software encoder (None when there is none)."""
    if hardware in ("auto", "gpu"):
        hw = preferred_hardware_encoder(codec, catalog)
        if hw is not None:
            return hw, True
    return software_encoder(codec, catalog), False
