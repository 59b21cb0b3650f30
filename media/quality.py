"""Measured quality: VMAF, PSNR and SSIM of an encode against its source, and the per-title CRF search.

How a rendition is measured (docs/media.md, "Measured quality"):
- the rendition is decoded and scaled back up (bicubic) to the source's display size, the source is
  decoded as is, both are converted to 8-bit 4:2:0 and their timestamps start at zero (when frames
  are selected, the kept ones are renumbered on both sides: `RENUMBER`);
- the reference is the *reference sample* when there is one: exactly the source frames that will be
  scored, written losslessly by one software rendition encode, which decodes the whole source anyway
  (`reference_sample_output`); else the source itself, decoded again;
- one FFmpeg run per job reads the reference once and runs one `libvmaf` instance per rendition
  (libvmaf 2.3.0 in the shipped static build, model `vmaf_v0.6.1`), scoring every `n_subsample`-th
  frame (only the scored frames and their neighbours reach libvmaf: `subsample_select`); PSNR and SSIM, when asked for, are libvmaf's `psnr` (luma `psnr_y`)
  and `float_ssim` features in the same pass, on the same frames;
- the per-frame JSON log is read and pooled here: `vmaf` is the mean of the frame scores, `vmaf_p5`
  their 5th percentile (the bad moments a mean hides). libvmaf's own `pooled_metrics` are *not* used:
  with frame subsampling, 2.3.0 pools over the wrong frames (DECISIONS, "VMAF pitfall").

`bitrate_kbps` is measured from the file: the video stream's packet bytes over its duration.
"""

from __future__ import annotations

import array
import json
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from media.commands import _num, _path, base_args

VMAF_MODEL = "vmaf_v0.6.1"
METRICS = ("vmaf", "psnr", "ssim")
# Subsampling: about this many frames scored per rendition, but never fewer than one frame every
# two seconds (n_subsample <= 2 x fps), so it only matters below ~50 s of video. 24 rather than 12:
# the per-frame VMAF of an encode varies by a few points within each GOP, and the mean of 12 frames
# strayed up to 1 point from the every-frame mean on the test clips, 24 about 0.5 (docs/media.md,
# "Measured quality"). bench/quality.py measures what it costs (docs/benchmarks.md).
VMAF_SAMPLE_FRAMES = 24
# How much a stride's distance from the wanted one (|log ratio|) weighs against its GOP discrepancy.
STRIDE_DISTANCE_WEIGHT = 0.3
MAX_SECONDS_BETWEEN_SCORED = 2
VMAF_THREADS = 2
# A rendition "reaches" target_vmaf when its full measured VMAF is at least target - this.
TARGET_TOLERANCE = 1.0


class QualityGateFailed(Exception):
    """A rendition measured below min_vmaf."""


def frame_count(seconds: float, fps: float | None) -> int:
    """The frames in `seconds` of video at `fps` (25 when the probe found no frame rate): what the
    subsampling and the reference sample are planned from."""
    return int(seconds * (fps or 25))


def n_subsample_for(
    frames: int, fps: float | None, override: int | None = None, gop_frames: int | None = None
) -> int:
    """Score one frame in N: `override` when given, else about VMAF_SAMPLE_FRAMES frames, at least
    one every MAX_SECONDS_BETWEEN_SCORED seconds, with N chosen by `unaligned_stride` so that the
    scored frames never line up with the GOP (`gop_frames`; unknown: 2 s of frames, whose
    divisors include the 1 s GOP) or an encoder's mini-GOP."""
    if override:
        return max(1, int(override))
    wanted = max(1, math.ceil(max(frames, 1) / VMAF_SAMPLE_FRAMES))
    cap = max(1, int(round((fps or 25) * MAX_SECONDS_BETWEEN_SCORED)))
    gop = int(gop_frames) if gop_frames else 2 * max(1, int(round(fps or 25)))
    return unaligned_stride(min(wanted, cap), cap, frames, gop)


def unaligned_stride(wanted: int, cap: int, frames: int, gop: int) -> int:
    """The stride closest to `wanted` (at most `cap`) whose scored frames 0, N, 2N... fall evenly on
    the positions of a GOP. A stride sharing a factor with the GOP revisits the same few positions
    (N = GOP scores only keyframes: +2 VMAF on a real 720p HEVC ladder, +4 to +11 on the test
    clips, where a keyframe reads far above the frames before the next one). So N is coprime with
    the GOP, odd and not a multiple of 3 (B-pyramids and AV1's altref intervals repeat every 2, 4,
    8, 16 or 3, 6 frames), and among those the one whose GOP positions have the lowest discrepancy
    (`gop_discrepancy`), traded against straying from `wanted` (which sets the cost)."""
    if wanted < 3 or gop < 2:
        return wanted
    candidates = [n for n in range(3, min(cap, 2 * wanted) + 1) if n % 2 and n % 3 and math.gcd(n, gop) == 1]
    if not candidates:
        return wanted
    return min(
        candidates,
        key=lambda n: gop_discrepancy(n, frames, gop) + STRIDE_DISTANCE_WEIGHT * abs(math.log(n / wanted)),
    )


def gop_discrepancy(stride: int, frames: int, gop: int) -> float:
    """How unevenly frames 0, stride, 2 x stride... below `frames` cover the positions of a GOP:
    the star discrepancy of their positions (k x stride mod gop) / gop, 0 for perfectly even, 1
    when they all fall on one position."""
    positions = sorted((k % gop) / gop for k in range(0, max(frames, 1), stride))
    count = len(positions)
    return 1 / (2 * count) + max(abs(x - (2 * i + 1) / (2 * count)) for i, x in enumerate(positions))


def libvmaf_features(metrics: list[str] | tuple[str, ...]) -> str:
    features = []
    if "psnr" in metrics:
        features.append("name=psnr")
    if "ssim" in metrics:
        features.append("name=float_ssim")
    return "|".join(features)


def _check_log_path(log_path: Path) -> str:
    # log_path is an absolute workspace path that we built; the filter's option syntax makes ':',
    # '\\' and "'" special, so refuse them rather than escape.
    log = _path(log_path)
    if any(c in log for c in ":\\'[],;"):
        raise ValueError("VMAF log path must not contain filter-graph metacharacters")
    return log


def subsample_select(n_subsample: int) -> str:
    """A `select` expression that keeps, for every N-th frame k, the frames k-1, k and k+1 (and
    frames 0 and 1): libvmaf's motion feature of a frame compares it with its neighbours, so with
    these triplets and libvmaf's own `n_subsample=3` every N-th frame is scored exactly as
    `n_subsample=N` on the whole stream would score it, while the other frames are neither scaled
    nor handed to libvmaf (about 40 % of the CPU of measuring on this machine)."""
    n = int(n_subsample)
    return f"select='lt(n\\,2)+gte(n\\,{n - 1})*lt(mod(n+1\\,{n})\\,3)'"


def _select_prefix(n_subsample: int) -> str:
    """The `select` filter (with its trailing comma) that keeps the frames to score, or nothing when
    every frame (n_subsample 1) or every other frame (2) is scored: libvmaf then subsamples itself."""
    n = max(1, int(n_subsample))
    return subsample_select(n) + "," if n >= 3 else ""


# Frames kept by the select are renumbered 0, 1, 2... at 1/25 s so that libvmaf's framesync pairs
# the k-th kept frame of the reference with the k-th of each distorted video. The time base is set
# first: `setpts=N/(25*TB)` in a coarse time base (1/24, 1/60) rounds two frames onto one timestamp
# or off the 1/25 grid. Without a select (n_subsample < 3) frames keep their timestamps, as before.
RENUMBER = "settb=1/25,setpts=N"


def _kept_and_renumbered(n_subsample: int) -> str:
    """The select and the renumbering, with a trailing comma; nothing below n_subsample 3."""
    select = _select_prefix(n_subsample)
    return f"{select}{RENUMBER}," if select else ""


def kept_frames(frames: int, n_subsample: int) -> int:
    """How many of `frames` frames `_select_prefix` keeps: all of them below n_subsample 3, else
    frames 0 and 1 and each k-1, k, k+1 around every n-th frame k."""
    n = max(1, int(n_subsample))
    if n < 3:
        return max(0, frames)
    kept = min(max(0, frames), 2)
    for k in range(n, frames + 1, n):
        kept += sum(1 for f in (k - 1, k, k + 1) if f < frames)
    return kept


# The reference sample (docs/media.md, "The reference sample"): written only when frames are
# selected (n_subsample >= 3) and its raw size (8-bit 4:2:0, what a lossless codec stays under) is
# at most this. 1 GiB covers ~8 minutes of 720p or ~4 of 1080p at 25 fps and the default
# subsampling (3 frames every 2 s); above it the workspace would hold gigabytes for a file that
# only saves decoding, and the source is decoded instead.
REFERENCE_SAMPLE = "quality/reference.mkv"
REFERENCE_SAMPLE_MAX_BYTES = 1 << 30


def reference_sample_bytes(frames: int, n_subsample: int, width: int, height: int) -> int:
    """The raw size of the frames a reference sample holds: an upper bound of the file's size."""
    plane = int(width) * int(height)
    chroma = 2 * ((int(width) + 1) // 2) * ((int(height) + 1) // 2)
    return kept_frames(frames, n_subsample) * (plane + chroma)


def reference_sample_output(dst: Path, *, n_subsample: int, width: int, height: int) -> list[str]:
    """Arguments that give an encode of the source a second output: the frames measuring will score
    (the same select, 8-bit 4:2:0, renumbered), lossless, in Matroska (NUT would do as well, but
    it is not on the input whitelist, media.ffmpeg.INPUT_FORMATS). Each frame is written once
    (`-fps_mode passthrough`: no frame rate conversion). UT Video costs about a quarter of FFV1's
    CPU to write and read back (0.2 against 0.7 CPU-s for 35 frames of 720p) but needs even sizes
    in 4:2:0; FFV1 takes the odd ones. Only with a select (n_subsample >= 3): Matroska keeps
    millisecond timestamps, which only renumbered frames survive exactly."""
    if int(n_subsample) < 3:
        raise ValueError("a reference sample needs n_subsample >= 3")
    codec = ["-c:v", "utvideo"] if int(width) % 2 == 0 and int(height) % 2 == 0 else ["-c:v", "ffv1"]
    chain = f"setpts=PTS-STARTPTS,{_kept_and_renumbered(n_subsample)}format=yuv420p"
    return ["-map", "0:v:0", "-vf", chain, "-fps_mode", "passthrough", *codec, "-f", "matroska", _path(dst)]


def measure_argv(
    reference: Path,
    scored: list[tuple[Path, Path]],
    *,
    width: int,
    height: int,
    metrics: list[str] | tuple[str, ...] = ("vmaf",),
    n_subsample: int = 1,
    threads: int = VMAF_THREADS,
    reference_is_sample: bool = False,
    ffmpeg: str | None = None,
) -> list[str]:
    """One FFmpeg run scoring every (distorted, log_path) of `scored` against `reference`: the
    reference is read once; each distorted video has a filter graph of its own (FFmpeg runs each
    graph in its own thread), is scaled to width x height (the reference's display size) and gets
    its own libvmaf instance, whose per-frame log is written as JSON to its log_path.
    `reference_is_sample`: the reference is a reference sample, already only the frames to score."""
    if not scored:
        raise ValueError("nothing to score")
    argv = base_args(ffmpeg) + ["-i", _path(reference)]
    for distorted, _ in scored:
        argv += ["-i", _path(distorted)]
    n = max(1, int(n_subsample))
    kept, vmaf_n = _kept_and_renumbered(n), (3 if n >= 3 else n)
    if reference_is_sample and not kept:
        raise ValueError("a reference sample needs n_subsample >= 3")
    reference_chain = f"{RENUMBER}," if reference_is_sample else f"setpts=PTS-STARTPTS,{kept}"
    features = libvmaf_features(metrics)
    for i, (_, log_path) in enumerate(scored):
        options = [
            f"model=version={VMAF_MODEL}",
            f"n_subsample={vmaf_n}",
            f"n_threads={int(threads)}",
            "log_fmt=json",
            f"log_path={_check_log_path(log_path)}",
        ]
        if features:
            options.append(f"feature={features}")
        graph = (
            f"[0:v:0]{reference_chain}format=yuv420p[r{i}];"
            f"[{i + 1}:v:0]setpts=PTS-STARTPTS,{kept}"
            f"scale={int(width)}:{int(height)}:flags=bicubic,format=yuv420p[d{i}];"
            f"[d{i}][r{i}]libvmaf={':'.join(options)}[o{i}]"
        )
        argv += ["-filter_complex", graph]
    for i in range(len(scored)):
        argv += ["-map", f"[o{i}]", "-f", "null", "-"]
    return argv


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of `values` (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Scores:
    frames: int  # frames scored
    vmaf: float | None
    vmaf_p5: float | None
    psnr_db: float | None
    ssim: float | None
    libvmaf_version: str

    def as_dict(self, metrics: list[str] | tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {"frames_scored": self.frames}
        if "vmaf" in metrics:
            out["vmaf"] = _round(self.vmaf, 3)
            out["vmaf_p5"] = _round(self.vmaf_p5, 3)
        if "psnr" in metrics:
            out["psnr_db"] = _round(self.psnr_db, 3)
        if "ssim" in metrics:
            out["ssim"] = _round(self.ssim, 5)
        return out


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


# parse_log reads the log as a stream: one frame object at a time, never the whole file (a ten-hour
# 60 fps source scored frame by frame is a multi-gigabyte log). Means are exact over every frame;
# the 5th percentile is exact up to MAX_PERCENTILE_FRAMES scored frames and, beyond, taken from a
# uniform sample of that many (a fixed seed: the same log gives the same figure).
MAX_PERCENTILE_FRAMES = 50_000
LOG_CHUNK_CHARS = 64 * 1024
MAX_FRAME_CHARS = 1024 * 1024  # one frame's JSON object; a larger one is not libvmaf's log
_LOG_VERSION = re.compile(r'"version"\s*:\s*"([^"]{0,64})"')


class _Pool:
    """Running sums and a bounded sample of one metric."""

    def __init__(self, keep: int, seed: int):
        self.count, self.total = 0, 0.0
        self.sample: array.array = array.array("d")
        self.keep, self.random = keep, random.Random(seed)

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if len(self.sample) < self.keep:
            self.sample.append(value)
        else:  # reservoir sampling (Algorithm R)
            slot = self.random.randrange(self.count)
            if slot < self.keep:
                self.sample[slot] = value

    def mean(self) -> float | None:
        return self.total / self.count if self.count else None


def _log_frames(text) -> tuple[str, Iterator[dict]]:
    """(libvmaf's version, an iterator over the log's frame objects), reading `text` in chunks."""
    buffer = ""
    while (start := buffer.find('"frames"')) < 0:
        chunk = text.read(LOG_CHUNK_CHARS)
        if not chunk:
            raise ValueError("libvmaf scored no frames")
        buffer += chunk
        if len(buffer) > MAX_FRAME_CHARS:
            raise ValueError("not a libvmaf log (no frames near its start)")
    found = _LOG_VERSION.search(buffer[:start])
    return (found.group(1) if found else "unknown"), _frame_objects(text, buffer[start + len('"frames"') :])


def _frame_objects(text, buffer: str) -> Iterator[dict]:
    decoder, position, opened = json.JSONDecoder(), 0, False
    while True:
        while position < len(buffer) and buffer[position] in " \t\r\n,:" + ("" if opened else "["):
            opened = opened or buffer[position] == "["
            position += 1
        if opened and buffer.startswith("]", position):
            return
        try:
            frame, end = decoder.raw_decode(buffer, position) if position < len(buffer) else (None, 0)
        except ValueError:
            frame = None
        if frame is not None and opened:
            yield frame
            buffer, position = buffer[end:], 0
            continue
        chunk = text.read(LOG_CHUNK_CHARS)
        if not chunk or len(buffer) - position > MAX_FRAME_CHARS:
            raise ValueError("the libvmaf log is truncated or malformed")
        buffer = buffer[position:] + chunk
        position = 0


def parse_log(log_path: Path) -> Scores:
    """Pool libvmaf's per-frame JSON log (see the module docstring for why not its pooled figures),
    read as a stream within a fixed memory bound (MAX_PERCENTILE_FRAMES, the comment above)."""
    # Only VMAF has a percentile: PSNR and SSIM keep their sums.
    vmaf, psnr, ssim = _Pool(MAX_PERCENTILE_FRAMES, 1), _Pool(0, 2), _Pool(0, 3)
    frames = 0
    with open(log_path, encoding="utf-8", errors="replace") as text:
        version, objects = _log_frames(text)
        for frame in objects:
            metrics = frame.get("metrics", {}) if isinstance(frame, dict) else {}
            frames += 1
            if "vmaf" in metrics:
                vmaf.add(float(metrics["vmaf"]))
            # Identical frames give an infinite PSNR, which libvmaf caps (60 dB for 8-bit); keep it finite.
            if "psnr_y" in metrics and math.isfinite(float(metrics["psnr_y"])):
                psnr.add(float(metrics["psnr_y"]))
            if "float_ssim" in metrics:
                ssim.add(float(metrics["float_ssim"]))
    if not frames:
        raise ValueError("libvmaf scored no frames")
    return Scores(
        frames=frames,
        vmaf=vmaf.mean(),
        vmaf_p5=percentile(list(vmaf.sample), 5) if vmaf.count else None,
        psnr_db=psnr.mean(),
        ssim=ssim.mean(),
        libvmaf_version=version,
    )


def video_bitrate_kbps(path: Path) -> float:
    """The video stream's bitrate, measured: its packet bytes x 8 over its duration, in kbit/s."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        total = 0
        first = last = None
        for packet in container.demux(stream):
            if packet.size == 0 or packet.pts is None:
                continue
            total += packet.size
            end = packet.pts + (packet.duration or 0)
            first = packet.pts if first is None else min(first, packet.pts)
            last = end if last is None else max(last, end)
        seconds = float((last - first) * stream.time_base) if first is not None and last is not None else 0.0
        if seconds <= 0 and container.duration:
            seconds = container.duration / av.time_base
    return round(total * 8 / seconds / 1000, 1) if seconds > 0 else 0.0


def settings_record(
    metrics: list[str], n_subsample: int, libvmaf_version: str, ffmpeg_version: str, reference: str = "source"
) -> dict:
    """What quality.json says about how it was measured. `reference`: "sample" (the reference sample
    a rendition encode wrote) or "source" (the source decoded again); the scores are the same."""
    return {
        "metrics": list(metrics),
        "vmaf_model": VMAF_MODEL,
        "libvmaf_version": libvmaf_version,
        "ffmpeg_version": ffmpeg_version,
        "n_subsample": n_subsample,
        "reference": reference,
        "scaling": "rendition upscaled (bicubic) to the source display size; both as yuv420p",
        "pooling": "vmaf: mean of frame scores; vmaf_p5: 5th percentile of frame scores",
        "psnr": "libvmaf psnr_y (luma), mean over scored frames" if "psnr" in metrics else None,
        "ssim": "libvmaf float_ssim (luma), mean over scored frames" if "ssim" in metrics else None,
    }


def gate_failure(rendition: dict, min_vmaf: float | None) -> str | None:
    """The error of a rendition below the gate, or None."""
    vmaf = rendition.get("vmaf")
    if min_vmaf is None or vmaf is None or vmaf >= min_vmaf:
        return None
    return (
        f"quality gate: rendition {rendition['name']} measured VMAF {vmaf:.2f}, "
        f"below min_vmaf {float(min_vmaf):g}"
    )


# --- per-title CRF search ----------------------------------------------------------------------

# CRF range searched per encoder family (x264/x265 scale 0..51, AV1 0..63). Lower is better.
CRF_RANGE = {"h264": (16, 40), "hevc": (18, 42), "av1": (20, 56)}
MAX_PROBES = 5  # probe encodes per rung, at most
# Probes score every 5th sample frame (30 of 6 s at 25 fps): with the default ~12 frames a probe's
# VMAF moved by half a point between neighbouring CRFs' noise, and the search chose one CRF too low.
SEARCH_SUBSAMPLE = 5
SAMPLE_COUNT = 3
SAMPLE_SECONDS = 2.0
# Aim this far above the target on the samples. Measured on the bench's 20 s clips, samples
# under-predict the whole by about half a point, so no margin is needed (TARGET_TOLERANCE covers the rest).
SEARCH_MARGIN = 0.0


def sample_windows(duration: float) -> list[tuple[float, float]]:
    """(start, seconds) of the samples the CRF search encodes: SAMPLE_COUNT windows of
    SAMPLE_SECONDS spread over the middle of the source, or the whole source when it is short."""
    if duration <= SAMPLE_COUNT * SAMPLE_SECONDS * 1.5:
        return [(0.0, duration)]
    step = duration / (SAMPLE_COUNT + 1)
    return [(round(step * (i + 1) - SAMPLE_SECONDS / 2, 3), SAMPLE_SECONDS) for i in range(SAMPLE_COUNT)]


def sample_reference_argv(
    src: Path,
    dst: Path,
    windows: list[tuple[float, float]],
    fps: float | None = None,
    ffmpeg: str | None = None,
):
    """The samples concatenated into one lossless (x264 qp 0) clip at the source size: the reference
    every probe encode is encoded from and scored against. `fps` keeps the source's frame rate
    (after `select` FFmpeg no longer knows it, and rate control depends on it)."""
    argv = base_args(ffmpeg) + ["-i", _path(src)]
    if len(windows) == 1 and windows[0][0] == 0:
        graph = "[0:v:0]format=yuv420p,setpts=PTS-STARTPTS[v]"
    else:
        keep = "+".join(f"between(t\\,{_num(a)}\\,{_num(a + d)})" for a, d in windows)
        graph = f"[0:v:0]select='{keep}',setpts=N/FRAME_RATE/TB,format=yuv420p[v]"
    return argv + [
        "-filter_complex",
        graph,
        "-map",
        "[v]",
        "-an",
        *(["-r", _num(round(float(fps), 3))] if fps else []),
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-qp",
        "0",
        "-f",
        "mp4",
        _path(dst),
    ]


def next_crf(tried: dict[int, float], target: float, low: int, high: int) -> int | None:
    """Bisection over [low, high] for the highest CRF whose sample VMAF is >= target (VMAF falls as
    CRF rises). `tried` maps CRF -> sample VMAF. None when the answer is known."""
    good = [c for c, v in tried.items() if v >= target]
    bad = [c for c, v in tried.items() if v < target]
    lo = max(good) if good else low - 1  # highest known good
    hi = min(bad) if bad else high + 1  # lowest known bad
    if hi - lo <= 1:
        return None
    candidate = max(low, min(high, (lo + hi) // 2))
    return None if candidate in tried else candidate


def chosen_crf(tried: dict[int, float], target: float, low: int) -> tuple[int, bool]:
    """(CRF to encode with, reachable): the highest CRF that reached the target on the samples, else
    the best-quality CRF tried (the rung is flagged: it cannot reach the target)."""
    good = [c for c, v in tried.items() if v >= target]
    if good:
        return max(good), True
    return (min(tried) if tried else low), False


# --- reading and listing -----------------------------------------------------------------------

QUALITY_TASK_TYPES = ("transcode.quality", "reencode_streaming.quality", "transcode.split_quality")


def job_quality(job_id, execution_id: int | None = None) -> dict | None:
    """The job's measured quality (what quality.json holds), from its quality stage's result in the
    current execution; None until that stage has measured."""
    from scheduler.models import JobSchedule, QueueTask

    if execution_id is None:
        execution_id = (
            JobSchedule.objects.filter(job_id=job_id).values_list("execution_id", flat=True).first()
        )
        if execution_id is None:
            return None
    result = (
        QueueTask.objects.filter(
            job_id=job_id, execution_id=execution_id, task_type__in=QUALITY_TASK_TYPES, state="completed"
        )
        .order_by("-id")
        .values_list("result", flat=True)
        .first()
    )
    if not isinstance(result, dict):
        return None
    return result.get("quality")


def live_worker_catalogs(stale_seconds: float) -> list[dict]:
    """The capability catalogs of active workers that heartbeat within `stale_seconds`."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import QueueWorker

    since = timezone.now() - timedelta(seconds=stale_seconds)
    rows = QueueWorker.objects.filter(last_heartbeat_at__gte=since, left_at__isnull=True, lifecycle="active")
    return [dict(r.capabilities or {}) for r in rows.only("capabilities")]


VMAF_BUCKETS = [20, 40, 60, 70, 80, 85, 90, 93, 95, 97, 99, 100]
VMAF_WINDOW_HOURS = 24


def vmaf_by_rung(hours: int = VMAF_WINDOW_HOURS) -> dict[str, list[float]]:
    """Measured VMAF of transcode renditions scored in the last `hours`, by rung name ("720p").
    Rung names are <height>p, so the label set stays small (reencode_streaming's file stems are left
    out for that reason)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT r ->> 'name', (r ->> 'vmaf')::float8
              FROM queue_tasks t,
                   jsonb_array_elements(coalesce(t.result -> 'quality' -> 'renditions', '[]'::jsonb)) r
             WHERE t.task_type = 'transcode.quality' AND t.state = 'completed'
               AND t.finished_at > now() - make_interval(hours => %s)
               AND jsonb_typeof(r -> 'vmaf') = 'number'
            """,
            [int(hours)],
        )
        rows = cursor.fetchall()
    by_rung: dict[str, list[float]] = {}
    for name, vmaf in rows:
        if isinstance(name, str) and name.endswith("p") and name[:-1].isdigit():
            by_rung.setdefault(name, []).append(float(vmaf))
    return by_rung
