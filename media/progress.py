"""FFmpeg `-progress pipe:1` parsing and throttled progress reporting.

FFmpeg writes blocks of `key=value` lines, each block ending with `progress=continue` (or
`progress=end` for the last one). Percent is out_time_us over the duration we expect to produce,
which the caller knows from probing (the source duration, a segment's length, a grid's length...).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProgressSample:
    out_time_seconds: float
    percent: float  # 0..100 of the expected output duration
    speed: float | None  # x realtime
    fps: float | None
    frame: int | None
    eta_seconds: float | None
    done: bool

    def detail(self) -> dict[str, Any]:
        """The JSON-able detail passed with ctx.progress."""
        return {
            "out_time_seconds": round(self.out_time_seconds, 3),
            "speed": self.speed,
            "fps": self.fps,
            "frame": self.frame,
            "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds, 1),
        }


def _float(value: str | None) -> float | None:
    if value is None:
        return None
    value = value.strip().rstrip("x")
    if not value or value.upper() == "N/A":
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number and number not in (float("inf"), float("-inf")) else None


class ProgressParser:
    """Feed it stdout lines; it calls `on_sample` once per completed block."""

    def __init__(
        self,
        duration_seconds: float | None,
        on_sample: Callable[[ProgressSample], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.duration = duration_seconds if duration_seconds and duration_seconds > 0 else None
        self.on_sample = on_sample
        self.samples: list[ProgressSample] = []
        self._block: dict[str, str] = {}
        self._clock = clock
        self._started = clock()
        self.last: ProgressSample | None = None

    def feed(self, line: str) -> ProgressSample | None:
        line = line.strip()
        if "=" not in line:
            return None
        key, _, value = line.partition("=")
        key = key.strip()
        if key != "progress":
            self._block[key] = value.strip()
            return None
        sample = self._sample(done=value.strip() == "end")
        self._block = {}
        self.last = sample
        self.samples.append(sample)
        if self.on_sample is not None:
            self.on_sample(sample)
        return sample

    def _sample(self, done: bool) -> ProgressSample:
        block = self._block
        # out_time_us is the documented key; out_time_ms is (despite its name) also microseconds.
        micros = _float(block.get("out_time_us")) or _float(block.get("out_time_ms"))
        if micros is None and self.last is not None:
            seconds = self.last.out_time_seconds
        else:
            seconds = max(0.0, (micros or 0.0) / 1_000_000)
        speed = _float(block.get("speed"))
        fps = _float(block.get("fps"))
        frame_value = _float(block.get("frame"))
        percent = 0.0
        eta = None
        if done:
            percent = 100.0
            eta = 0.0
        elif self.duration:
            percent = min(99.9, max(0.0, 100.0 * seconds / self.duration))
            remaining = max(0.0, self.duration - seconds)
            if speed and speed > 0:
                eta = remaining / speed
            elif seconds > 0:
                eta = (self._clock() - self._started) * remaining / seconds
        return ProgressSample(
            seconds, percent, speed, fps, int(frame_value) if frame_value is not None else None, eta, done
        )


class ProgressThrottle:
    """Calls `report(percent, detail)` when progress moved `min_step` points or `max_interval` seconds
    passed, whichever comes first, mapping 0..100 into [low, high] so a stage with several FFmpeg
    runs reports one monotonic 0..100."""

    def __init__(
        self,
        report: Callable[[float, dict[str, Any] | None], None],
        *,
        low: float = 0.0,
        high: float = 100.0,
        min_step: float = 5.0,
        max_interval: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.report = report
        self.low, self.high = low, high
        self.min_step, self.max_interval = min_step, max_interval
        self._clock = clock
        # Shared with spans, so sub-ranges and the whole stage throttle against one history.
        self._state: dict[str, Any] = {"percent": None, "time": clock()}

    def span(self, low: float, high: float) -> ProgressThrottle:
        """A throttle for the sub-range [low, high] of this one (in its own 0..100 terms)."""
        width = self.high - self.low
        child = ProgressThrottle(
            self.report,
            low=self.low + width * low / 100.0,
            high=self.low + width * high / 100.0,
            min_step=self.min_step,
            max_interval=self.max_interval,
            clock=self._clock,
        )
        child._state = self._state
        return child

    def update(self, local_percent: float, detail: dict[str, Any] | None = None, force: bool = False) -> bool:
        percent = self.low + (self.high - self.low) * max(0.0, min(100.0, local_percent)) / 100.0
        now = self._clock()
        last = self._state["percent"]
        if last is not None and percent < last:
            percent = last  # never report going backwards
        due = (
            force
            or last is None
            or percent - last >= self.min_step
            or (now - self._state["time"] >= self.max_interval)
        )
        if not due:
            return False
        self.report(round(percent, 2), detail)
        self._state["percent"], self._state["time"] = percent, now
        return True

    def on_sample(self, sample: ProgressSample) -> None:
        self.update(sample.percent, sample.detail(), force=sample.done)
