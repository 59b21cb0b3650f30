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

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from media.commands import _num, _path, base_args

VMAF_MODEL = "vmaf_v0.6.1"
METRICS = ("vmaf", "psnr", "ssim")
# Subsampling: about this many frames scored per rendition, but never fewer than one frame every
# two seconds (n_subsample <= 2 x fps). bench/quality.py measures what it costs (docs/benchmarks.md).
VMAF_SAMPLE_FRAMES = 12
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


def n_subsample_for(frames: int, fps: float | None, override: int | None = None) -> int:
    """Score every Nth frame: `override` when given, else about VMAF_SAMPLE_FRAMES frames, capped so
    at least one frame every MAX_SECONDS_BETWEEN_SCORED seconds is scored."""
    if override:
        return max(1, int(override))
    wanted = max(1, math.ceil(max(frames, 1) / VMAF_SAMPLE_FRAMES))
    cap = max(1, int(round((fps or 25) * MAX_SECONDS_BETWEEN_SCORED)))
    return min(wanted, cap)


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


def parse_log(log_path: Path) -> Scores:
    """Pool libvmaf's per-frame JSON log (see the module docstring for why not its pooled figures)."""
    data = json.loads(Path(log_path).read_text())
    frames = [f.get("metrics", {}) for f in data.get("frames", [])]
    if not frames:
        raise ValueError("libvmaf scored no frames")
    vmaf = [float(f["vmaf"]) for f in frames if "vmaf" in f]
    # Identical frames give an infinite PSNR, which libvmaf caps (60 dB for 8-bit); keep it finite.
    psnr = [float(f["psnr_y"]) for f in frames if "psnr_y" in f and math.isfinite(float(f["psnr_y"]))]
    ssim = [float(f["float_ssim"]) for f in frames if "float_ssim" in f]
    return Scores(
        frames=len(frames),
        vmaf=_mean(vmaf),
        vmaf_p5=percentile(vmaf, 5) if vmaf else None,
        psnr_db=_mean(psnr),
        ssim=_mean(ssim),
        libvmaf_version=str(data.get("version") or "unknown"),
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
