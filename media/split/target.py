"""Per-chunk CRF search for a VMAF target, in the manner of Av1an's target quality.

Each chunk searches its own CRF on itself, so easy shots get fewer bits than hard ones. Bounded:
at most `probes` encodes of the chunk (default 4, as Av1an), each at the rung's own settings (so the
chosen probe's file is the chunk's final encode), scored on every `n_subsample`-th frame
(default 4: Av1an's fastest probing rate) and pooled on the 1st percentile of the scored frames
(Av1an's default `percentile=1`): a chunk reaches the target when its worst moments do, not just
its mean. The next CRF is interpolated between the closest probes either side of the target
(linear in CRF; VMAF falls as CRF rises), bisection when there is no bracket yet; the answer is
the highest CRF probed whose score reached the target (media.quality.chosen_crf).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from media.commands import MAX_CRF
from media.ffmpeg import guard_inputs
from media.quality import CRF_RANGE, chosen_crf, next_crf, percentile
from media.split.encode import Rung, rendition_argv
from media.split.plan import Chunk, SplitPlan
from media.split.pooling import chunk_frame_scores, chunk_measure_argv

PROBES = 4
PROBE_SUBSAMPLE = 4
PROBE_PERCENTILE = 1.0


class CrfChoice(NamedTuple):
    crf: int
    vmaf: float  # the chosen probe's pooled score (PROBE_PERCENTILE of its scored frames)
    probes: list[dict]  # [{"crf", "vmaf"}] in probing order
    reached: bool  # False: even the best CRF probed stayed below the target
    file: Path  # the chosen probe's encode: the chunk at `crf`, ready to stitch


def next_probe(tried: dict[int, float], target: float, low: int, high: int) -> int | None:
    """The next CRF to probe, or None when the answer is known: interpolated between the nearest
    probes either side of the target when there are both, else media.quality.next_crf's bisection."""
    good = [c for c, v in tried.items() if v >= target]
    bad = [c for c, v in tried.items() if v < target]
    if good and bad:
        lo, hi = max(good), min(bad)
        if hi - lo <= 1:
            return None
        v_lo, v_hi = tried[lo], tried[hi]
        guess = lo + (v_lo - target) * (hi - lo) / (v_lo - v_hi) if v_lo != v_hi else (lo + hi) / 2
        candidate = min(hi - 1, max(lo + 1, round(guess)))
        return None if candidate in tried else candidate
    return next_crf(tried, target, low, high)


def crf_bounds(rung: Rung) -> tuple[int, int]:
    low, high = CRF_RANGE[rung.encoding.codec]
    return low, min(high, MAX_CRF.get(rung.encoding.encoder, 51))


def probe_files(chunk: Chunk, crf: int, work_dir: Path) -> tuple[Path, Path]:
    """(the probe's encode, its VMAF log) in `work_dir`."""
    stem = Path(work_dir) / f"chunk{chunk.index:05d}_crf{int(crf)}"
    return stem.with_suffix(".mp4"), stem.with_suffix(".json")


def probe_argvs(
    source: Path,
    chunk: Chunk,
    plan: SplitPlan,
    rung: Rung,
    crf: int,
    work_dir: Path,
    *,
    source_size: tuple[int, int],
    n_subsample: int = PROBE_SUBSAMPLE,
    threads: int | None = None,
    ffmpeg: str | None = None,
) -> list[list[str]]:
    """The two FFmpeg runs of one probe, in order: encode the chunk at `crf` (the rung's settings
    otherwise), then score it against the source's same frames."""
    encode, log = probe_files(chunk, crf, work_dir)
    probe_rung = replace(rung, encoding=replace(rung.encoding, crf=int(crf)))
    width, height = source_size
    return [
        rendition_argv(source, chunk, plan.fps, probe_rung, encode, threads=threads, ffmpeg=ffmpeg),
        chunk_measure_argv(
            source,
            chunk,
            plan,
            [(encode, log)],
            width=width,
            height=height,
            n_subsample=n_subsample,
            ffmpeg=ffmpeg,
        ),
    ]


def probe_score(
    log: Path,
    chunk: Chunk,
    plan: SplitPlan,
    n_subsample: int = PROBE_SUBSAMPLE,
    pool: float = PROBE_PERCENTILE,
) -> float:
    """A probe's pooled score: the `pool` percentile of the chunk's scored frames."""
    return percentile(chunk_frame_scores(log, chunk, plan, n_subsample), pool)


def choice(tried: dict[int, float], target: float, rung: Rung, chunk: Chunk, work_dir: Path) -> CrfChoice:
    """The search's answer from its probes (media.quality.chosen_crf)."""
    best, reached = chosen_crf(tried, target, crf_bounds(rung)[0])
    return CrfChoice(
        crf=best,
        vmaf=round(tried[best], 3),
        probes=[{"crf": c, "vmaf": round(v, 3)} for c, v in tried.items()],
        reached=reached,
        file=probe_files(chunk, best, work_dir)[0],
    )


def run_ffmpeg(argv: list[str]) -> None:
    """The default runner (tests, tools): a worker stage passes its own, which fences, reports
    progress and kills the process group on cancel."""
    proc = subprocess.run(guard_inputs(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"CRF probe failed: {proc.stderr.strip()[-500:]}")


def search_chunk_crf(
    source: Path,
    chunk: Chunk,
    plan: SplitPlan,
    rung: Rung,
    target_vmaf: float,
    *,
    work_dir: Path,
    source_size: tuple[int, int],
    probes: int = PROBES,
    n_subsample: int = PROBE_SUBSAMPLE,
    pool_percentile: float = PROBE_PERCENTILE,
    threads: int | None = None,
    ffmpeg: str | None = None,
    run: Callable[[list[str]], None] = run_ffmpeg,
) -> CrfChoice:
    """Search the chunk's CRF for `target_vmaf`, first probing the rung's own CRF. `source_size`:
    the source's display size, which renditions are scaled back to for scoring; `run` runs one
    FFmpeg argv (raising on failure)."""
    low, high = crf_bounds(rung)
    tried: dict[int, float] = {}
    crf: int | None = min(high, max(low, int(rung.encoding.crf)))
    while crf is not None and len(tried) < max(1, probes):
        for argv in probe_argvs(
            source,
            chunk,
            plan,
            rung,
            crf,
            work_dir,
            source_size=source_size,
            n_subsample=n_subsample,
            threads=threads,
            ffmpeg=ffmpeg,
        ):
            run(argv)
        log = probe_files(chunk, crf, work_dir)[1]
        tried[crf] = probe_score(log, chunk, plan, n_subsample, pool_percentile)
        crf = next_probe(tried, target_vmaf, low, high)
    return choice(tried, target_vmaf, rung, chunk, work_dir)
