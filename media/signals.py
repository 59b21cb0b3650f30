"""Measured signals, and what highlight, digest, scene and tag jobs decide from them.

Everything here is arithmetic on numbers FFmpeg measured (`commands.analyze_signals`,
`commands.scene_detect`): per-frame scene-change scores (how different a frame is from the
previous one: cuts score high, motion scores moderately, a still picture scores ~0) and EBU R128
momentary loudness. There is no learned model: tags and highlights are measurements, and the docs
say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from media.probe import MediaInfo

SILENCE_LUFS = -70.0  # R128 gating floor: quieter than this counts as silence


def parse_metadata_print(path: Path, key: str) -> list[tuple[float, float]]:
    """(pts_time, value) pairs from a `metadata=mode=print:file=...` dump."""
    samples: list[tuple[float, float]] = []
    current_time: float | None = None
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return samples
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("frame:"):
            current_time = None
            for token in line.split():
                if token.startswith("pts_time:"):
                    try:
                        current_time = float(token.split(":", 1)[1])
                    except ValueError:
                        current_time = None
        elif current_time is not None and line.startswith(key + "="):
            try:
                value = float(line.split("=", 1)[1])
            except ValueError:
                continue
            if math.isfinite(value):
                samples.append((current_time, value))
    return samples


@dataclass
class Signals:
    duration: float
    motion: list[float]  # per second: mean scene-change score, 0..1
    cuts: list[int]  # per second: frames whose score exceeds the cut threshold
    loudness: list[float | None]  # per second: mean momentary loudness in LUFS; None if no audio
    has_audio: bool = False
    summary: dict = field(default_factory=dict)


def _bucket(duration: float) -> int:
    return max(1, math.ceil(duration))


def build_signals(
    duration: float,
    scene_scores: list[tuple[float, float]],
    loudness: list[tuple[float, float]],
    *,
    threshold: float,
    has_audio: bool,
) -> Signals:
    seconds = _bucket(duration)
    motion_sum = [0.0] * seconds
    motion_n = [0] * seconds
    cuts = [0] * seconds
    for t, score in scene_scores:
        i = min(seconds - 1, max(0, int(t)))
        motion_sum[i] += score
        motion_n[i] += 1
        if score > threshold:
            cuts[i] += 1
    motion = [motion_sum[i] / motion_n[i] if motion_n[i] else 0.0 for i in range(seconds)]
    loud: list[float | None] = [None] * seconds
    if has_audio:
        loud_sum = [0.0] * seconds
        loud_n = [0] * seconds
        for t, lufs in loudness:
            i = min(seconds - 1, max(0, int(t)))
            loud_sum[i] += max(SILENCE_LUFS, lufs)
            loud_n[i] += 1
        loud = [loud_sum[i] / loud_n[i] if loud_n[i] else SILENCE_LUFS for i in range(seconds)]
    signals = Signals(duration, motion, cuts, loud, has_audio)
    measured = [v for v in loud if v is not None]
    signals.summary = {
        "seconds": seconds,
        "mean_motion": round(sum(motion) / seconds, 5),
        "cuts": sum(cuts),
        "cuts_per_minute": round(sum(cuts) * 60.0 / max(duration, 1e-6), 3),
        "mean_loudness_lufs": round(sum(measured) / len(measured), 2) if measured else None,
        "max_loudness_lufs": round(max(measured), 2) if measured else None,
    }
    return signals


def _normalise(values: list[float]) -> list[float]:
    top = max(values) if values else 0.0
    return [v / top for v in values] if top > 0 else [0.0 for _ in values]


def per_second_score(signals: Signals, *, scene: float, motion: float, loudness: float) -> list[float]:
    """Weighted sum of each signal normalised to 0..1 over the video."""
    n_cuts = _normalise([float(c) for c in signals.cuts])
    n_motion = _normalise(signals.motion)
    if signals.has_audio:
        n_loud = _normalise(
            [(v - SILENCE_LUFS) / -SILENCE_LUFS if v is not None else 0.0 for v in signals.loudness]
        )
    else:
        n_loud = [0.0] * len(signals.motion)
    total = scene + motion + loudness
    return [
        (scene * c + motion * m + loudness * a) / total
        for c, m, a in zip(n_cuts, n_motion, n_loud, strict=True)
    ]


def _window_score(per_second: list[float], start: float, length: float) -> float:
    first = int(start)
    last = max(first + 1, math.ceil(start + length))
    window = per_second[first:last]
    return sum(window) / len(window) if window else 0.0


def candidates(per_second: list[float], duration: float, segment: float) -> list[tuple[float, float]]:
    """(start, score) of every segment-long window, stepping by half a segment."""
    step = max(0.25, segment / 2)
    result = []
    start = 0.0
    while start + segment <= duration + 1e-6:
        result.append((round(start, 3), _window_score(per_second, start, segment)))
        start += step
    if not result:
        result.append((0.0, _window_score(per_second, 0.0, duration)))
    return result


def pick_highlights(
    per_second: list[float], duration: float, segment: float, target: float
) -> list[tuple[float, float]]:
    """The highest-scoring non-overlapping segments until `target` seconds, in playback order."""
    if target >= duration or segment >= duration:
        return [(0.0, round(duration, 3))]
    chosen: list[tuple[float, float]] = []
    total = 0.0
    # Ties go to the earlier segment so the choice is deterministic.
    for start, _score in sorted(candidates(per_second, duration, segment), key=lambda c: (-c[1], c[0])):
        if total >= target - 1e-6:
            break
        if any(start < s + d and s < start + segment for s, d in chosen):
            continue
        length = min(segment, target - total)
        chosen.append((start, round(length, 3)))
        total += length
    return sorted(chosen)


def pick_digest(
    per_second: list[float], duration: float, segment: float, target: float
) -> list[tuple[float, float]]:
    """One best segment from each of k equal parts of the video (k = target / segment): coverage
    of the whole video rather than only its most intense moments."""
    if target >= duration or segment >= duration:
        return [(0.0, round(duration, 3))]
    parts = max(1, min(int(target // segment), int(duration // segment)))
    part_length = duration / parts
    chosen = []
    for k in range(parts):
        low, high = k * part_length, (k + 1) * part_length
        inside = [
            (s, sc)
            for s, sc in candidates(per_second, duration, segment)
            if s >= low - 1e-6 and s + segment <= high + 1e-6
        ]
        if inside:
            start = max(inside, key=lambda c: (c[1], -c[0]))[0]
        else:
            start = max(0.0, min(low, duration - segment))
        chosen.append((round(start, 3), round(segment, 3)))
    return chosen


def scenes_from_detection(samples: list[tuple[float, float]], duration: float) -> list[dict]:
    """Scene list from scene_detect's metadata: each selected frame starts a scene."""
    starts = sorted({round(t, 3) for t, _ in samples} | ({0.0} if not samples else set()))
    scores = {round(t, 3): s for t, s in samples}
    scenes = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else round(duration, 3)
        if end - start <= 0:
            continue
        scenes.append(
            {
                "index": i + 1,
                "start": start,
                "end": end,
                "duration": round(end - start, 3),
                "score": round(scores.get(start, 0.0), 4),
            }
        )
    return scenes


def measured_tags(info: MediaInfo, signals: Signals | None) -> tuple[list[str], dict]:
    """Tags from measurements only (see module docstring). Returns (tags, the measurements used)."""
    tags: list[str] = []
    short_side = min(info.width or 0, info.height or 0)
    if short_side >= 2160:
        tags.append("4k")
    elif short_side >= 1080:
        tags.append("full-hd")
    elif short_side >= 720:
        tags.append("hd")
    elif short_side >= 480:
        tags.append("sd")
    elif short_side:
        tags.append("low-resolution")
    if info.orientation:
        tags.append(info.orientation)
    if info.duration_seconds < 60:
        tags.append("short")
    elif info.duration_seconds < 600:
        tags.append("medium-length")
    else:
        tags.append("long")
    if info.fps and info.fps >= 48:
        tags.append("high-frame-rate")
    measurements: dict = {
        "short_side": short_side,
        "duration_seconds": info.duration_seconds,
        "fps": info.fps,
    }
    mean_loudness = signals.summary.get("mean_loudness_lufs") if signals else None
    if not info.has_audio:
        tags.append("silent")
    elif mean_loudness is not None and mean_loudness <= -50:
        tags.append("silent")
    else:
        tags.append("has-audio")
    if signals is not None:
        measurements.update(signals.summary)
        cpm = signals.summary["cuts_per_minute"]
        tags.append("few-scenes" if cpm < 2 else "some-scenes" if cpm < 12 else "many-scenes")
        motion = signals.summary["mean_motion"]
        tags.append("low-motion" if motion < 0.02 else "moderate-motion" if motion < 0.1 else "high-motion")
    return tags, measurements
