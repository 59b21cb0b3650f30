"""Server-side SVG charts for the overview: no chart framework, no JavaScript needed to read them.

`queries.samples(hours)` gives one row per minute (written by the workers' sampling loop). Rows
are put into fixed buckets covering the whole window, so a minute nobody sampled shows as a gap in
the depth lines and as zero throughput. Colours come from CSS classes (`s-<series>`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 10, 24
# (window hours) -> (bucket minutes, minutes between x labels); `resolution` gives the same for any
# window, including the fitted default (the span of the samples, up to FIT_MAX_MINUTES).
RESOLUTION = {1: (1, 10), 3: (2, 30), 6: (5, 60), 12: (10, 120), 24: (15, 180), 48: (30, 360)}
BUCKET_MINUTES = (1, 2, 5, 10, 15, 30, 60)
LABEL_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720)
MAX_BUCKETS, MAX_LABELS = 96, 8
FIT_MINUTES = (5, 10, 15, 30, 60, 120, 180, 360)
FIT_MAX_MINUTES = FIT_MINUTES[-1]
THROUGHPUT = ("completed", "failed")
DEPTH = ("pending", "running", "retry_wait", "paused")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Series:
    name: str
    values: list[float | None]


@dataclass
class Window:
    start: datetime
    bucket: timedelta
    count: int
    label_every: timedelta

    def time(self, index: int) -> datetime:
        return self.start + index * self.bucket


def resolution(minutes: int) -> tuple[int, int]:
    """(bucket minutes, minutes between x labels) for a window: at most 96 buckets, 8 labels."""
    bucket = next((b for b in BUCKET_MINUTES if minutes / b <= MAX_BUCKETS), BUCKET_MINUTES[-1])
    label = next((m for m in LABEL_MINUTES if minutes / m <= MAX_LABELS), LABEL_MINUTES[-1])
    return bucket, label


def fitted_minutes(oldest: datetime | None, now: datetime) -> int:
    """The default window: the smallest of 5 min … 6 h that holds every sample since `oldest`
    (plus a minute), so a fresh install's first minutes fill the chart instead of a sliver of it."""
    span = 0 if oldest is None else (now - oldest).total_seconds() / 60 + 1
    return next((m for m in FIT_MINUTES if m >= span), FIT_MAX_MINUTES)


def window(hours: int, now: datetime) -> Window:
    return window_minutes(hours * 60, now)


def window_minutes(minutes: int, now: datetime) -> Window:
    bucket_minutes, label_minutes = resolution(minutes)
    bucket = timedelta(minutes=bucket_minutes)
    end = now.replace(second=0, microsecond=0)
    end -= timedelta(minutes=end.minute % bucket_minutes)
    count = max(1, minutes // bucket_minutes)
    start = end - (count - 1) * bucket
    return Window(start, bucket, count, timedelta(minutes=label_minutes))


def window_label(minutes: int) -> str:
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h"


def bucketize(rows: list[dict], win: Window) -> dict[str, list[float | None]]:
    """Throughput series summed per bucket (missing = 0); depth series the bucket's busiest sample
    (missing = None): whole jobs, never an average such as 3.5."""
    sums = {name: [0.0] * win.count for name in THROUGHPUT}
    depth = {name: [[] for _ in range(win.count)] for name in DEPTH}
    for row in rows:
        index = int((row["at"] - win.start) // win.bucket)
        if not 0 <= index < win.count:
            continue
        for name in THROUGHPUT:
            sums[name][index] += row.get(name) or 0
        for name in DEPTH:
            depth[name][index].append(row.get(name) or 0)
    result: dict[str, list[float | None]] = dict(sums)
    for name, buckets in depth.items():
        result[name] = [max(b) if b else None for b in buckets]
    return result


def nice_max(value: float) -> float:
    """The smallest 1/2/5 x 10^n at or above value (at least 4, so small counts get integer ticks)."""
    if value <= 4:
        return 4
    exponent = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * exponent >= value:
            return factor * exponent
    return 10 * exponent


def divisions(top: float) -> int:
    """4 or 5 gridline steps, whichever gives round tick values (5 -> 1s, 20 -> 5s, 25 -> 5s)."""
    for count in (5, 4):
        step = top / count
        mantissa = step / 10 ** math.floor(math.log10(step))
        if any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5)):
            return count
    return 4


def _x(win: Window, index: float) -> float:
    return LEFT + (WIDTH - LEFT - RIGHT) * index / max(win.count, 1)


def _y(value: float, top: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - value / top)


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _frame(win: Window, top: float, title: str) -> list[str]:
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]
    steps = divisions(top)
    for i in range(steps + 1):
        value = top * i / steps
        y = _y(value, top)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="ylab" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(value)}</text>'
        )
    # x labels at round times (every label_every), in UTC
    step = win.label_every
    first = win.start + (-(win.start - EPOCH) % step)
    moment = first
    while moment <= win.time(win.count - 1):
        index = (moment - win.start) / win.bucket
        x = _x(win, index + 0.5)
        parts.append(
            f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM + 4}"/>'
        )
        parts.append(
            f'<text class="xlab" x="{x:.1f}" y="{HEIGHT - 6}" text-anchor="middle">{moment:%H:%M}</text>'
        )
        moment += step
    parts.append(
        f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}"/>'
    )
    return parts


def stacked_bars(win: Window, series: list[Series], title: str) -> SafeString:
    totals = [sum(s.values[i] or 0 for s in series) for i in range(win.count)]
    top = nice_max(max(totals, default=0))
    parts = _frame(win, top, title)
    slot = (WIDTH - LEFT - RIGHT) / max(win.count, 1)
    width = max(1.0, slot * 0.8)
    for i in range(win.count):
        if not totals[i]:
            continue
        base = 0.0
        x = _x(win, i) + (slot - width) / 2
        tip = f"{win.time(i):%H:%M} UTC: " + ", ".join(f"{_num(s.values[i] or 0)} {s.name}" for s in series)
        parts.append(f"<g><title>{escape(tip)}</title>")
        for s in series:
            value = s.values[i] or 0
            if value:
                y0, y1 = _y(base, top), _y(base + value, top)
                parts.append(
                    f'<rect class="s-{s.name}" x="{x:.1f}" y="{y1:.1f}" width="{width:.1f}" height="{y0 - y1:.1f}"/>'
                )
                base += value
        parts.append("</g>")
    parts.append("</svg>")
    return mark_safe("".join(parts))


def lines(win: Window, series: list[Series], title: str) -> SafeString:
    top = nice_max(max((v for s in series for v in s.values if v is not None), default=0))
    parts = _frame(win, top, title)
    for s in series:
        path, pen_down = [], False
        for i, value in enumerate(s.values):
            if value is None:
                pen_down = False
                continue
            path.append(f"{'L' if pen_down else 'M'}{_x(win, i + 0.5):.1f} {_y(value, top):.1f}")
            pen_down = True
        if path:
            parts.append(
                f'<path class="line s-{s.name}" d="{" ".join(path)}"><title>{escape(s.name)}</title></path>'
            )
        # A sample with no neighbour draws no line: mark it with a dot so it is seen.
        for i, value in enumerate(s.values):
            alone = (i == 0 or s.values[i - 1] is None) and (
                i + 1 == len(s.values) or s.values[i + 1] is None
            )
            if value is not None and alone:
                parts.append(
                    f'<circle class="dot s-{s.name}" cx="{_x(win, i + 0.5):.1f}" cy="{_y(value, top):.1f}" r="2.5">'
                    f"<title>{escape(s.name)}: {_num(value)}</title></circle>"
                )
    parts.append("</svg>")
    return mark_safe("".join(parts))


def overview_charts(rows: list[dict], minutes: int, now: datetime) -> dict[str, SafeString | bool]:
    win = window_minutes(minutes, now)
    data = bucketize(rows, win)
    bucket = int(win.bucket.total_seconds() // 60)
    per = "minute" if bucket == 1 else f"{bucket} minutes"
    last = window_label(minutes)
    return {
        "throughput": stacked_bars(
            win, [Series(name, data[name]) for name in THROUGHPUT], f"Jobs finished per {per}, last {last}"
        ),
        "depth": lines(win, [Series(name, data[name]) for name in DEPTH], f"Jobs by state, last {last}"),
        "bucket_label": per,
        "has_samples": bool(rows),
        "sample_count": len(rows),
    }
