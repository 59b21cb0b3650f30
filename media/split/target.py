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
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from media.commands import MAX_CRF
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


def _probe(
    source: Path, chunk: Chunk, plan: SplitPlan, rung: Rung, crf: int, work: Path, options: dict
) -> float:
    """Encode the chunk at `crf` and score it: its pooled (low-percentile) VMAF."""
    encode = work / f"chunk{chunk.index:05d}_crf{crf}.mp4"
    log = work / f"chunk{chunk.index:05d}_crf{crf}.json"
    probe_rung = replace(rung, encoding=replace(rung.encoding, crf=crf))
    ffmpeg, threads, n = options["ffmpeg"], options["threads"], options["n_subsample"]
    _run(rendition_argv(source, chunk, plan.fps, probe_rung, encode, threads=threads, ffmpeg=ffmpeg))
    width, height = options["size"]
    argv = chunk_measure_argv(
        source, chunk, plan, [(encode, log)], width=width, height=height, n_subsample=n, ffmpeg=ffmpeg
    )
    _run(argv)
    return percentile(chunk_frame_scores(log, chunk, plan, n), options["percentile"])


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=3600)
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
) -> CrfChoice:
    """Search the chunk's CRF for `target_vmaf`, first probing the rung's own CRF. `source_size`:
    the source's display size, which renditions are scaled back to for scoring."""
    low, high = crf_bounds(rung)
    options = {
        "ffmpeg": ffmpeg,
        "threads": threads,
        "n_subsample": n_subsample,
        "size": source_size,
        "percentile": pool_percentile,
    }
    tried: dict[int, float] = {}
    crf: int | None = min(high, max(low, int(rung.encoding.crf)))
    while crf is not None and len(tried) < max(1, probes):
        tried[crf] = _probe(Path(source), chunk, plan, rung, crf, Path(work_dir), options)
        crf = next_probe(tried, target_vmaf, low, high)
    best, reached = chosen_crf(tried, target_vmaf, low)
    return CrfChoice(
        crf=best,
        vmaf=round(tried[best], 3),
        probes=[{"crf": c, "vmaf": round(v, 3)} for c, v in tried.items()],
        reached=reached,
        file=Path(work_dir) / f"chunk{chunk.index:05d}_crf{best}.mp4",
    )
