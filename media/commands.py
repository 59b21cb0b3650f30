"""FFmpeg argument lists for every job type. Lists, never shell strings.

Rules every builder keeps:
- argv starts with `-nostdin -nostats -hide_banner -progress pipe:1 -y`: no terminal interaction,
  machine-readable progress on stdout (parsed by `progress.ProgressParser`), errors on stderr;
- file arguments are absolute paths (`_path` refuses anything else), so FFmpeg can never read one as
  an option or a protocol, whatever the file is called;
- filter graphs are assembled only from numbers and choices that were validated by the params
  models, formatted here; no user string ever reaches a filter graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from media.ffmpeg import VAAPI_DEVICE, ffmpeg_path

COMMON_ARGS = ["-nostdin", "-nostats", "-hide_banner", "-progress", "pipe:1", "-y"]
AUDIO_RATE = 48000

X264_PRESETS = (
    "ultrafast",
    "superfast",
    "veryfast",
    "faster",
    "fast",
    "medium",
    "slow",
    "slower",
    "veryslow",
)
_NVENC_PRESET = {
    "ultrafast": "p1",
    "superfast": "p1",
    "veryfast": "p2",
    "faster": "p3",
    "fast": "p4",
    "medium": "p4",
    "slow": "p5",
    "slower": "p6",
    "veryslow": "p7",
}
_QSV_PRESET = {"ultrafast": "veryfast", "superfast": "veryfast"}
H264_ENCODERS = ("libx264", "h264_nvenc", "h264_qsv", "h264_vaapi", "h264_videotoolbox", "h264_amf")
HEVC_ENCODERS = ("libx265", "hevc_nvenc", "hevc_qsv", "hevc_vaapi", "hevc_videotoolbox", "hevc_amf")
AV1_ENCODERS = ("libaom-av1", "libsvtav1", "av1_nvenc", "av1_qsv", "av1_vaapi", "av1_amf")
SUPPORTED_ENCODERS = H264_ENCODERS + HEVC_ENCODERS + AV1_ENCODERS
SOFTWARE_ENCODERS = ("libx264", "libx265", "libaom-av1", "libsvtav1")
# The CRF scale of each software encoder family: x264/x265 0..51, AV1 encoders 0..63.
MAX_CRF = {"libaom-av1": 63, "libsvtav1": 63}
# libaom's speed (-cpu-used, 0 slowest .. 8 fastest) and SVT-AV1's preset (0..13) for an x264 preset.
_AOM_CPU_USED = {
    "ultrafast": 8,
    "superfast": 8,
    "veryfast": 7,
    "faster": 6,
    "fast": 6,
    "medium": 5,
    "slow": 4,
    "slower": 3,
    "veryslow": 2,
}
_SVT_PRESET = {
    "ultrafast": 12,
    "superfast": 12,
    "veryfast": 10,
    "faster": 9,
    "fast": 8,
    "medium": 7,
    "slow": 5,
    "slower": 4,
    "veryslow": 2,
}


def codec_of_encoder(encoder: str) -> str:
    """h264, hevc or av1 for a supported encoder name."""
    if encoder in HEVC_ENCODERS:
        return "hevc"
    if encoder in AV1_ENCODERS:
        return "av1"
    return "h264"


def _path(path: Path | str) -> str:
    text = str(path)
    if not Path(text).is_absolute():
        raise ValueError(f"FFmpeg file arguments must be absolute paths, got {text!r}")
    return text


def _num(value: float) -> str:
    """A number for a filter graph or option: finite, plain decimal, no exponent."""
    if not math.isfinite(value):
        raise ValueError("non-finite number in an FFmpeg argument")
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _even(value: float) -> int:
    return max(2, int(value) // 2 * 2)


def base_args(ffmpeg: str | None = None, loglevel: str = "warning") -> list[str]:
    return [ffmpeg or ffmpeg_path(), *COMMON_ARGS, "-loglevel", loglevel]


@dataclass(frozen=True)
class VideoEncoding:
    """How to encode video: the encoder (software, or a confirmed hardware one; H.264, HEVC or AV1)
    and its rate control. `crf` is on the encoder's own scale (0..51 x264/x265, 0..63 AV1)."""

    encoder: str = "libx264"
    preset: str = "veryfast"
    crf: int = 23
    maxrate_kbps: int | None = None
    bufsize_kbps: int | None = None
    keyframe_seconds: float | None = None  # force a keyframe every N seconds (HLS segment alignment)

    def __post_init__(self):
        if self.encoder not in SUPPORTED_ENCODERS:
            raise ValueError(f"unsupported encoder {self.encoder!r}")
        if self.preset not in X264_PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}")
        top = MAX_CRF.get(self.encoder, 51)
        if not 0 <= int(self.crf) <= top:
            raise ValueError(f"crf must be 0..{top}")

    @property
    def codec(self) -> str:
        return codec_of_encoder(self.encoder)

    def pre_input_args(self) -> list[str]:
        return ["-vaapi_device", VAAPI_DEVICE] if self.encoder.endswith("_vaapi") else []

    def filter_tail(self) -> str:
        """The last filters of the video chain: the encoder's pixel format (and upload for VAAPI)."""
        return "format=nv12,hwupload" if self.encoder.endswith("_vaapi") else "format=yuv420p"

    def output_args(self) -> list[str]:
        if self.encoder not in H264_ENCODERS:
            return self._hevc_av1_args()
        crf = str(int(self.crf))
        if self.encoder == "libx264":
            args = ["-c:v", "libx264", "-preset", self.preset, "-crf", crf, "-profile:v", "high"]
        elif self.encoder == "h264_nvenc":
            args = [
                "-c:v",
                "h264_nvenc",
                "-preset",
                _NVENC_PRESET[self.preset],
                "-rc",
                "vbr",
                "-cq",
                crf,
                "-b:v",
                "0",
            ]
        elif self.encoder == "h264_qsv":
            args = [
                "-c:v",
                "h264_qsv",
                "-preset",
                _QSV_PRESET.get(self.preset, self.preset),
                "-global_quality",
                crf,
            ]
        elif self.encoder == "h264_vaapi":
            args = ["-c:v", "h264_vaapi", "-rc_mode", "CQP", "-qp", crf]
        elif self.encoder == "h264_videotoolbox":
            args = ["-c:v", "h264_videotoolbox", "-b:v", f"{self.maxrate_kbps or 4000}k"]
        else:  # h264_amf
            args = ["-c:v", "h264_amf", "-rc", "cqp", "-qp_i", crf, "-qp_p", crf]
        if self.maxrate_kbps and self.encoder not in ("h264_vaapi", "h264_amf"):
            args += [
                "-maxrate",
                f"{int(self.maxrate_kbps)}k",
                "-bufsize",
                f"{int(self.bufsize_kbps or 2 * self.maxrate_kbps)}k",
            ]
        if self.keyframe_seconds:
            args += ["-force_key_frames", f"expr:gte(t,n_forced*{_num(self.keyframe_seconds)})"]
            if self.encoder == "libx264":
                args += ["-sc_threshold", "0"]  # no extra scene-cut keyframes between segment boundaries
        return args

    def _keyframe_args(self) -> list[str]:
        if not self.keyframe_seconds:
            return []
        return ["-force_key_frames", f"expr:gte(t,n_forced*{_num(self.keyframe_seconds)})"]

    def _cap_args(self) -> list[str]:
        if not self.maxrate_kbps:
            return []
        bufsize = int(self.bufsize_kbps or 2 * self.maxrate_kbps)
        return ["-maxrate", f"{int(self.maxrate_kbps)}k", "-bufsize", f"{bufsize}k"]

    def _hevc_av1_args(self) -> list[str]:
        """HEVC and AV1: software (libx265, libaom-av1, libsvtav1) or the hardware families'
        encoders with the same rate control as their H.264 siblings. HEVC is tagged `hvc1` (the
        sample entry Apple players require in MP4/fMP4)."""
        crf = str(int(self.crf))
        encoder = self.encoder
        tag = ["-tag:v", "hvc1"] if self.codec == "hevc" else []
        if encoder == "libx265":
            x265 = "log-level=error"
            if self.keyframe_seconds:
                x265 += ":scenecut=0:open-gop=0"  # segment-aligned IDR frames only
            args = ["-c:v", "libx265", "-preset", self.preset, "-crf", crf, "-x265-params", x265]
            args += self._cap_args() + self._keyframe_args()
            if self.keyframe_seconds:
                args += ["-forced-idr", "1"]
            return args + tag
        if encoder == "libaom-av1":
            cpu_used = _AOM_CPU_USED[self.preset]
            usage = "realtime" if cpu_used >= 7 else "good"
            args = ["-c:v", "libaom-av1", "-usage", usage, "-cpu-used", str(cpu_used), "-row-mt", "1"]
            args += ["-crf", crf]
            # Constrained quality: CRF, with the rung's peak as the bitrate ceiling.
            args += ["-b:v", f"{int(self.maxrate_kbps)}k" if self.maxrate_kbps else "0"]
            return args + self._keyframe_args()
        if encoder == "libsvtav1":
            args = ["-c:v", "libsvtav1", "-preset", str(_SVT_PRESET[self.preset]), "-crf", crf]
            if self.maxrate_kbps:
                args += ["-svtav1-params", f"mbr={int(self.maxrate_kbps)}"]
            return args + self._keyframe_args()
        family = encoder.rsplit("_", 1)[1]
        if family == "nvenc":
            args = ["-c:v", encoder, "-preset", _NVENC_PRESET[self.preset], "-rc", "vbr", "-cq", crf]
            args += ["-b:v", "0"] + self._cap_args()
        elif family == "qsv":
            args = ["-c:v", encoder, "-preset", _QSV_PRESET.get(self.preset, self.preset)]
            args += ["-global_quality", crf] + self._cap_args()
        elif family == "vaapi":
            args = ["-c:v", encoder, "-rc_mode", "CQP", "-qp", crf]
        elif family == "videotoolbox":
            args = ["-c:v", encoder, "-b:v", f"{self.maxrate_kbps or 4000}k"]
        else:  # amf
            args = ["-c:v", encoder, "-rc", "cqp", "-qp_i", crf, "-qp_p", crf]
        return args + self._keyframe_args() + tag


def audio_args(kbps: int = 128) -> list[str]:
    return ["-c:a", "aac", "-b:a", f"{int(kbps)}k", "-ac", "2", "-ar", str(AUDIO_RATE)]


def fit_short_side(width: int, height: int, short_side: int) -> tuple[int, int]:
    """Scale (width, height) so the shorter side is `short_side`, keeping the aspect, even sizes."""
    if width >= height:
        return _even(width * short_side / height), _even(short_side)
    return _even(short_side), _even(height * short_side / width)


def _fit_box(width: int, height: int) -> str:
    """Scale into a width x height box keeping the aspect ratio, letterboxed, square pixels."""
    w, h = int(width), int(height)
    return f"scale={w}:{h}:force_original_aspect_ratio=decrease,pad={w}:{h}:(ow-iw)/2:(oh-ih)/2,setsar=1"


# --- single-input encodes ---------------------------------------------------------------------


def encode_video(
    src: Path,
    dst: Path,
    *,
    encoding: VideoEncoding,
    audio_kbps: int = 128,
    size: tuple[int, int] | None = None,
    start: float | None = None,
    duration: float | None = None,
    ffmpeg: str | None = None,
) -> list[str]:
    """Re-encode one input to MP4 (H.264 + AAC, +faststart), optionally scaled and/or trimmed.

    Used by reencode_streaming, transcode renditions and clip cuts. Audio is mapped if present.
    """
    argv = base_args(ffmpeg) + encoding.pre_input_args()
    if start:
        argv += ["-ss", _num(start)]  # input seek: fast, and frame-accurate when re-encoding
    if duration:
        argv += ["-t", _num(duration)]
    argv += ["-i", _path(src)]
    filters = []
    if size is not None:
        filters.append(f"scale={_even(size[0])}:{_even(size[1])}")
    filters.append(encoding.filter_tail())
    argv += ["-map", "0:v:0", "-map", "0:a:0?", "-sn", "-dn", "-vf", ",".join(filters)]
    argv += encoding.output_args() + audio_args(audio_kbps)
    argv += ["-movflags", "+faststart", "-f", "mp4", _path(dst)]
    return argv


def reencode_streaming(
    src: Path,
    dst: Path,
    *,
    encoder: str = "libx264",
    preset: str = "medium",
    crf: int = 23,
    target_bitrate_kbps: int = 2000,
    audio_kbps: int = 128,
    size: tuple[int, int] | None = None,
    ffmpeg: str | None = None,
) -> list[str]:
    """H.264 with maxrate = target bitrate and bufsize = twice that, AAC, +faststart."""
    encoding = VideoEncoding(encoder, preset, crf, target_bitrate_kbps, 2 * target_bitrate_kbps)
    return encode_video(src, dst, encoding=encoding, audio_kbps=audio_kbps, size=size, ffmpeg=ffmpeg)


def rendition(
    src: Path,
    dst: Path,
    *,
    width: int,
    height: int,
    video_bitrate_kbps: int,
    segment_seconds: float,
    encoder: str = "libx264",
    preset: str = "veryfast",
    crf: int = 23,
    audio_kbps: int = 128,
    ffmpeg: str | None = None,
) -> list[str]:
    """One ladder rung: scaled, capped at its bitrate, keyframes every segment for HLS."""
    encoding = VideoEncoding(
        encoder, preset, crf, video_bitrate_kbps, 2 * video_bitrate_kbps, segment_seconds
    )
    return encode_video(
        src, dst, encoding=encoding, audio_kbps=audio_kbps, size=(width, height), ffmpeg=ffmpeg
    )


HLS_STREAMS = {"all": "0", "video": "0:v:0", "audio": "0:a:0"}


def hls_package(
    src: Path,
    out_dir: Path,
    *,
    segment_seconds: float,
    playlist_name: str = "index.m3u8",
    fmp4: bool = False,
    streams: str = "all",
    ffmpeg: str | None = None,
) -> list[str]:
    """Remux (no re-encode) an MP4 rendition into an HLS VOD playlist: MPEG-TS segments, or with
    `fmp4` CMAF segments after an `init.mp4` (what HEVC and AV1 need): `movflags=+cmaf` puts the
    `cmfc` brand in the init segment (media.cmaf.mark_segments brands the segments). `streams`:
    "all", or "video" / "audio" for one track per file (a CMAF track: video renditions and one
    audio rendition, joined by the master playlist's EXT-X-MEDIA group)."""
    out = _path(out_dir)
    if "%" in out:
        raise ValueError("HLS output directory must not contain '%'")  # it would corrupt the segment pattern
    if fmp4:
        segments = ["-hls_segment_options", "movflags=+cmaf", "-hls_segment_type", "fmp4"]
        segments += ["-hls_fmp4_init_filename", "init.mp4", "-hls_segment_filename", f"{out}/seg_%05d.m4s"]
    else:
        segments = ["-hls_segment_type", "mpegts", "-hls_segment_filename", f"{out}/seg_%05d.ts"]
    return base_args(ffmpeg) + [
        "-i",
        _path(src),
        "-map",
        HLS_STREAMS[streams],
        "-c",
        "copy",
        "-f",
        "hls",
        "-hls_time",
        _num(segment_seconds),
        "-hls_playlist_type",
        "vod",
        "-hls_flags",
        "independent_segments",
        *segments,
        f"{out}/{playlist_name}",
    ]


IMAGE_MAX_HEIGHT = 4320  # media.params.MAX_OUTPUT_HEIGHT


def width_within_bounds(width: int) -> str:
    """Scale to `width` keeping the aspect (even sizes), unless that would be taller than
    IMAGE_MAX_HEIGHT: a 16x4320 source scaled to 7680 wide would be two million lines high."""
    return (
        f"scale=w={int(width)}:h={IMAGE_MAX_HEIGHT}:force_original_aspect_ratio=decrease:force_divisible_by=2"
    )


def thumbnail(
    src: Path, dst: Path, *, timestamp: float, width: int, quality: int = 3, ffmpeg: str | None = None
) -> list[str]:
    """One JPEG frame at `timestamp`, scaled to `width` (height keeps the aspect, even)."""
    return base_args(ffmpeg) + [
        "-ss",
        _num(timestamp),
        "-i",
        _path(src),
        "-map",
        "0:v:0",
        "-frames:v",
        "1",
        "-vf",
        width_within_bounds(width),
        "-q:v",
        str(int(quality)),
        "-update",
        "1",
        "-f",
        "image2",
        _path(dst),
    ]


GIF_MAX_HEIGHT = 1920  # a very tall source scaled to the GIF's width stays within this


def _gif_scale(start: float, duration: float, width: int, fps: int) -> tuple[list[str], str]:
    """The input arguments (segment) and the video chain both GIF passes share: the same frames."""
    box = f"scale=w={int(width)}:h={GIF_MAX_HEIGHT}:force_original_aspect_ratio=decrease:flags=lanczos"
    args = ["-ss", _num(start)] if start else []
    return args + ["-t", _num(duration)], f"fps={int(fps)},{box}"


def gif_palette(
    src: Path,
    palette: Path,
    *,
    start: float,
    duration: float,
    width: int,
    fps: int,
    max_colors: int = 256,
    ffmpeg: str | None = None,
) -> list[str]:
    """Pass 1 of a GIF: the segment's palette as a PNG. palettegen keeps a colour histogram, not
    the frames, so memory does not grow with the GIF's length (a one-pass split/palettegen/paletteuse
    graph buffers every frame until the palette is known: 1920 wide, 50 fps, 60 s is ~25 GB)."""
    segment, chain = _gif_scale(start, duration, width, fps)
    graph = f"{chain},palettegen=max_colors={int(max_colors)}"
    return (
        base_args(ffmpeg)
        + segment
        + ["-i", _path(src), "-vf", graph, "-frames:v", "1"]
        + [
            "-update",
            "1",
            "-f",
            "image2",
            _path(palette),
        ]
    )


def gif(
    src: Path,
    dst: Path,
    *,
    palette: Path,
    start: float,
    duration: float,
    width: int,
    fps: int,
    dither: str = "sierra2_4a",
    ffmpeg: str | None = None,
) -> list[str]:
    """Pass 2 of a GIF: the segment mapped onto the palette of pass 1 (`gif_palette`), streaming."""
    if dither not in ("sierra2_4a", "bayer", "floyd_steinberg", "none"):
        raise ValueError(f"unknown dither {dither!r}")
    segment, chain = _gif_scale(start, duration, width, fps)
    graph = f"[0:v]{chain}[x];[x][1:v]paletteuse=dither={dither}[v]"
    argv = base_args(ffmpeg) + segment + ["-i", _path(src), "-i", _path(palette)]
    return argv + ["-filter_complex", graph, "-map", "[v]", "-loop", "0", "-f", "gif", _path(dst)]


# --- multi-input compositions -----------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A piece of a source to concatenate: `duration` seconds from `start`."""

    path: Path
    duration: float
    start: float = 0.0
    has_audio: bool = True


def _stereo(chain_end: str) -> str:
    """The audio every composition encodes: resampled to AUDIO_RATE, float planar stereo."""
    return f"aresample={AUDIO_RATE},aformat=sample_fmts=fltp:channel_layouts=stereo,{chain_end}"


def _graph_output(
    chains: list[str],
    dst: Path,
    *,
    encoding: VideoEncoding,
    with_audio: bool,
    audio_kbps: int,
    length: float | None = None,
) -> list[str]:
    """Everything after the inputs: the filter graph, its [v] (and [a]) outputs, the encoders, the MP4."""
    argv = ["-filter_complex", ";".join(chains), "-map", "[v]"]
    if with_audio:
        argv += ["-map", "[a]"]
    if length is not None:
        argv += ["-t", _num(length)]
    argv += encoding.output_args()
    argv += audio_args(audio_kbps) if with_audio else ["-an"]
    return argv + ["-movflags", "+faststart", "-f", "mp4", _path(dst)]


def _segment_inputs(segments: list[Segment]) -> list[str]:
    argv: list[str] = []
    for seg in segments:
        if seg.start:
            argv += ["-ss", _num(seg.start)]
        argv += ["-t", _num(seg.duration), "-i", _path(seg.path)]
    return argv


def _silence_inputs(segments: list[Segment]) -> tuple[list[str], dict[int, int]]:
    """A generated-silence input of its length for each segment without audio, numbered after the
    segments' own inputs: (the input arguments, {segment index: input index})."""
    argv: list[str] = []
    index: dict[int, int] = {}
    for i, seg in enumerate(segments):
        if not seg.has_audio:
            argv += [
                "-f",
                "lavfi",
                "-t",
                _num(seg.duration),
                "-i",
                f"anullsrc=channel_layout=stereo:sample_rate={AUDIO_RATE}",
            ]
            index[i] = len(segments) + len(index)
    return argv, index


def _concat_chains(
    segments: list[Segment],
    *,
    width: int,
    height: int,
    fps: int,
    encoding: VideoEncoding,
    audio_from: dict[int, int] | None,
) -> list[str]:
    """One video chain per segment (letterboxed, at `fps`) and, when `audio_from` is given, one audio
    chain per segment (from the segment or its silence, cut to its length), then the concat."""
    chains = []
    pads = []
    for i, seg in enumerate(segments):
        chains.append(f"[{i}:v]{_fit_box(width, height)},fps={int(fps)},format=yuv420p[v{i}]")
        pads.append(f"[v{i}]")
        if audio_from is not None:
            dur = _num(seg.duration)
            chains.append(
                f"[{audio_from.get(i, i)}:a]" + _stereo(f"apad=whole_dur={dur},atrim=end={dur}[a{i}]")
            )
            pads.append(f"[a{i}]")
    with_audio = audio_from is not None
    chains.append(
        "".join(pads)
        + f"concat=n={len(segments)}:v=1:a={1 if with_audio else 0}[cv]"
        + ("[a]" if with_audio else "")
    )
    chains.append(f"[cv]{encoding.filter_tail()}[v]")
    return chains


def concat(
    segments: list[Segment],
    dst: Path,
    *,
    width: int,
    height: int,
    fps: int,
    encoding: VideoEncoding,
    audio_kbps: int = 128,
    ffmpeg: str | None = None,
) -> list[str]:
    """Concatenate segments of any sizes, rates and audio layouts into one MP4.

    Each segment is letterboxed into width x height at `fps`; if any segment has audio, the silent
    ones get generated silence of their length so the concat filter sees matching streams.
    Used by compile_random, compile_mega (concat layout), highlight_generate and digest_generate.
    """
    if not segments:
        raise ValueError("concat needs at least one segment")
    any_audio = any(s.has_audio for s in segments)
    argv = base_args(ffmpeg) + encoding.pre_input_args() + _segment_inputs(segments)
    audio_from = None
    if any_audio:
        silence, audio_from = _silence_inputs(segments)
        argv += silence
    chains = _concat_chains(
        segments, width=width, height=height, fps=fps, encoding=encoding, audio_from=audio_from
    )
    return argv + _graph_output(chains, dst, encoding=encoding, with_audio=any_audio, audio_kbps=audio_kbps)


@dataclass(frozen=True)
class GridInput:
    path: Path
    duration: float
    has_audio: bool = True


def grid_layout(count: int, columns: int, cell_width: int, cell_height: int) -> str:
    """xstack layout with absolute pixel offsets, row-major."""
    cells = []
    for i in range(count):
        row, col = divmod(i, columns)
        cells.append(f"{col * int(cell_width)}_{row * int(cell_height)}")
    return "|".join(cells)


def _grid_video_chains(
    count: int,
    *,
    columns: int,
    cell_width: int,
    cell_height: int,
    fps: int,
    encoding: VideoEncoding,
    duration: str,
) -> list[str]:
    """One chain per input, scaled into its cell (frozen on its last frame for "longest"), then
    xstack into the grid (a single input needs no xstack)."""
    chains = []
    for i in range(count):
        chain = f"[{i}:v]{_fit_box(cell_width, cell_height)},fps={int(fps)}"
        if duration == "longest":
            chain += ",tpad=stop_mode=clone:stop=-1"
        chains.append(chain + f"[v{i}]")
    if count == 1:
        chains.append(f"[v0]{encoding.filter_tail()}[v]")
    else:
        layout = grid_layout(count, columns, cell_width, cell_height)
        chains.append(
            "".join(f"[v{i}]" for i in range(count))
            + f"xstack=inputs={count}:layout={layout}:fill=black:shortest=1,"
            f"{encoding.filter_tail()}[v]"
        )
    return chains


def _grid_audio_chain(inputs: list[GridInput], audio: str) -> str | None:
    """The [a] chain for the audio mode ("mix", "first", "none"), or None when there is no audio."""
    sources = [i for i, item in enumerate(inputs) if item.has_audio]
    if audio == "none" or not sources:
        return None
    if audio == "first" or len(sources) == 1:
        return f"[{sources[0]}:a]" + _stereo("apad[a]")
    return (
        "".join(f"[{i}:a]" for i in sources)
        + f"amix=inputs={len(sources)}:duration=longest:normalize=1,"
        + _stereo("apad[a]")
    )


def grid(
    inputs: list[GridInput],
    dst: Path,
    *,
    columns: int,
    cell_width: int,
    cell_height: int,
    fps: int,
    encoding: VideoEncoding,
    duration: str = "shortest",
    audio: str = "mix",
    audio_kbps: int = 128,
    ffmpeg: str | None = None,
) -> list[str]:
    """Inputs tiled in a grid with xstack (compile_quad: 4 inputs, 2 columns; compile_mega: more).

    duration "shortest" stops with the shortest input; "longest" freezes the last frame of shorter
    inputs (tpad) until the longest ends. audio: "mix" (amix of all inputs with audio), "first"
    (the first input that has audio) or "none".
    """
    if len(inputs) < 1:
        raise ValueError("grid needs at least one input")
    if duration not in ("shortest", "longest") or audio not in ("mix", "first", "none"):
        raise ValueError("invalid grid duration or audio mode")
    columns = max(1, min(int(columns), len(inputs)))
    total = (min if duration == "shortest" else max)(i.duration for i in inputs)
    argv = base_args(ffmpeg) + encoding.pre_input_args()
    for item in inputs:
        argv += ["-i", _path(item.path)]
    chains = _grid_video_chains(
        len(inputs),
        columns=columns,
        cell_width=cell_width,
        cell_height=cell_height,
        fps=fps,
        encoding=encoding,
        duration=duration,
    )
    audio_chain = _grid_audio_chain(inputs, audio)
    if audio_chain is not None:
        chains.append(audio_chain)
    # An explicit length makes "longest" (infinite tpad, padded audio) end where it should.
    return argv + _graph_output(
        chains,
        dst,
        encoding=encoding,
        with_audio=audio_chain is not None,
        audio_kbps=audio_kbps,
        length=total,
    )


# --- measurements ------------------------------------------------------------------------------

SCENE_METADATA_FILE = "scenes.txt"
SCENE_IMAGE_PATTERN = "scene_%04d.jpg"
SCORES_FILE = "scene_scores.txt"
LOUDNESS_FILE = "loudness.txt"


def scene_detect(
    src: Path,
    *,
    threshold: float,
    min_scene_seconds: float,
    max_scenes: int,
    thumb_width: int,
    with_images: bool = True,
    ffmpeg: str | None = None,
) -> list[str]:
    """Scene starts with a keyframe JPEG each, in one decoding pass. Run with cwd = the output
    directory: it writes SCENE_METADATA_FILE (pts_time + lavfi.scene_score per selected frame) and,
    with `with_images`, SCENE_IMAGE_PATTERN there. The first frame always starts scene 1; a later
    frame starts a scene when its scene-change score exceeds `threshold` and the current scene is
    at least `min_scene_seconds` long."""
    select = (
        f"select='isnan(prev_selected_t)+gt(scene,{_num(threshold)})"
        f"*gte(t-prev_selected_t,{_num(min_scene_seconds)})'"
    )
    graph = f"{select},metadata=mode=print:file={SCENE_METADATA_FILE}"
    argv = base_args(ffmpeg) + ["-i", _path(src), "-map", "0:v:0", "-an", "-sn"]
    if not with_images:
        return argv + ["-vf", graph, "-f", "null", "-"]
    return argv + [
        "-vf",
        f"{graph},{width_within_bounds(thumb_width)}",
        "-fps_mode",
        "vfr",
        "-frames:v",
        str(int(max_scenes)),
        "-q:v",
        "3",
        "-f",
        "image2",
        SCENE_IMAGE_PATTERN,
    ]


def analyze_signals(src: Path, *, has_audio: bool, fps: float = 10.0, ffmpeg: str | None = None) -> list[str]:
    """Measure per-frame scene-change scores (motion and cuts) on a small, `fps`-sampled picture and,
    if there is audio, momentary loudness (EBU R128, every 100 ms). Run with cwd = the output
    directory: writes SCORES_FILE and LOUDNESS_FILE there; the encoded output is discarded."""
    chains = [
        f"[0:v]fps={_num(fps)},scale=160:-2,select='gte(scene,0)',"
        f"metadata=mode=print:key=lavfi.scene_score:file={SCORES_FILE}[v]"
    ]
    maps = ["-map", "[v]"]
    if has_audio:
        chains.append(
            f"[0:a]ebur128=metadata=1,ametadata=mode=print:key=lavfi.r128.M:file={LOUDNESS_FILE}[a]"
        )
        maps += ["-map", "[a]"]
    return base_args(ffmpeg) + [
        "-i",
        _path(src),
        "-filter_complex",
        ";".join(chains),
        *maps,
        "-f",
        "null",
        "-",
    ]


# --- generated clips (tests, demo seeding) ------------------------------------------------------


def synthetic_clip(
    dst: Path,
    *,
    width: int = 320,
    height: int = 180,
    seconds: float = 2.0,
    fps: int = 25,
    audio: bool = True,
    scenes: bool = False,
    ffmpeg: str | None = None,
) -> list[str]:
    """A synthetic H.264/AAC MP4 from lavfi `testsrc2` + `sine`. With `scenes`, three visually distinct
    parts (testsrc2, smptebars, a solid colour) and loud audio only in the middle part, so scene
    detection and loudness measurements have something to find."""
    size = f"{int(width)}x{int(height)}"
    argv = [ffmpeg or ffmpeg_path(), "-nostdin", "-nostats", "-hide_banner", "-loglevel", "error", "-y"]
    if scenes:
        part = _num(seconds / 3)
        graph = (
            f"testsrc2=size={size}:rate={int(fps)}:duration={part}[a];"
            f"smptebars=size={size}:rate={int(fps)}:duration={part}[b];"
            f"color=c=0x3060c0:size={size}:rate={int(fps)}:duration={part}[c];"
            "[a][b][c]concat=n=3:v=1:a=0[v]"
        )
        maps = ["-map", "[v]"]
        if audio:
            graph += (
                f";sine=frequency=440:sample_rate={AUDIO_RATE}:duration={_num(seconds)},"
                f"volume='if(between(t,{part},{_num(2 * seconds / 3)}),1,0.02)':eval=frame[s]"
            )
            maps += ["-map", "[s]"]
        argv += ["-filter_complex", graph, *maps]
    else:
        argv += ["-f", "lavfi", "-i", f"testsrc2=size={size}:rate={int(fps)}:duration={_num(seconds)}"]
        if audio:
            argv += [
                "-f",
                "lavfi",
                "-i",
                f"sine=frequency=440:sample_rate={AUDIO_RATE}:duration={_num(seconds)}",
            ]
    argv += ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-g", str(int(fps))]
    argv += ["-c:a", "aac", "-b:a", "64k"] if audio else ["-an"]
    return argv + ["-t", _num(seconds), "-movflags", "+faststart", _path(dst)]
