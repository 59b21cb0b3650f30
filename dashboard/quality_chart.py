"""The job page's bitrate-vs-VMAF chart: one point per rendition, a line through the ladder.

A small server-side SVG like the overview's charts (dashboard/charts.py): no JavaScript to read it.
x is the measured video bitrate (kbit/s, from 0), y the mean VMAF (0..100); each point is labelled
with its rendition name, and its 5th-percentile VMAF is drawn as a whisker below it.
"""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from dashboard.charts import divisions

WIDTH, HEIGHT = 420, 180
LEFT, RIGHT, TOP, BOTTOM = 40, 16, 10, 40
# A label's box, estimated from its length (10 px text: about 6 px a character, 12 px tall).
CHAR_WIDTH, LABEL_HEIGHT = 6.0, 12.0


def _nice(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= value."""
    for magnitude in (1, 10, 100, 1000, 10000, 100000):
        for step in (1, 2, 2.5, 5):
            if step * magnitude >= value:
                return float(step * magnitude)
    return float(value)


def bitrate_vmaf_chart(quality: dict | None) -> SafeString | None:
    """The SVG, or None when no rendition has both a bitrate and a VMAF."""
    points = [
        r
        for r in (quality or {}).get("renditions") or []
        if r.get("vmaf") is not None and r.get("bitrate_kbps") is not None
    ]
    if not points:
        return None
    points.sort(key=lambda r: r["bitrate_kbps"])
    top_x = _nice(max(r["bitrate_kbps"] for r in points) * 1.1 or 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(kbps: float) -> float:
        return LEFT + plot_w * kbps / top_x

    def y(vmaf: float) -> float:
        return TOP + plot_h * (1 - max(0.0, min(100.0, vmaf)) / 100)

    parts = [
        f'<svg class="chart quality-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        'aria-label="Bitrate against VMAF per rendition">'
    ]
    for vmaf in (0, 25, 50, 75, 100):
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(vmaf):.1f}" y2="{y(vmaf):.1f}"/>'
        )
        parts.append(
            f'<text class="axis" x="{LEFT - 6}" y="{y(vmaf) + 4:.1f}" text-anchor="end">{vmaf}</text>'
        )
    steps = divisions(top_x)  # round tick values: 250 kbit/s in steps of 50, not of 62.5
    for i in range(steps + 1):
        kbps = top_x * i / steps
        parts.append(
            f'<text class="axis" x="{x(kbps):.1f}" y="{HEIGHT - 24}" text-anchor="middle">{kbps:g}</text>'
        )
    # The unit on a line of its own under the tick values, so it never runs into the last one.
    parts.append(
        f'<text class="axis" x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle">bitrate, kbit/s</text>'
    )
    path = " ".join(
        f"{'M' if i == 0 else 'L'}{x(r['bitrate_kbps']):.1f},{y(r['vmaf']):.1f}" for i, r in enumerate(points)
    )
    parts.append(f'<path class="line s-vmaf" d="{path}" fill="none"/>')
    taken: list[tuple[float, float, float, float]] = []
    for r in points:
        cx, cy = x(r["bitrate_kbps"]), y(r["vmaf"])
        if r.get("vmaf_p5") is not None:
            parts.append(
                f'<line class="whisker" x1="{cx:.1f}" x2="{cx:.1f}" y1="{cy:.1f}" y2="{y(r["vmaf_p5"]):.1f}"/>'
            )
        name = escape(str(r.get("name", "")))
        parts.append(
            f'<circle class="point s-vmaf" cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" data-rendition="{name}">'
            f"<title>{name}: VMAF {r['vmaf']:.1f} at {r['bitrate_kbps']:g} kbit/s</title></circle>"
        )
        lx, ly, anchor = _label_place(cx, cy, len(name), taken)
        parts.append(f'<text class="label" x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">{name}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _label_place(
    cx: float, cy: float, chars: int, taken: list[tuple[float, float, float, float]]
) -> tuple[float, float, str]:
    """Where a point's label goes: above-right, below-right, above-left or below-left of the point,
    the first that stays inside the chart and clear of the labels already placed (else the first
    inside). The chosen box is added to `taken`."""
    width = chars * CHAR_WIDTH
    candidates = []
    for dy in (-6.0, 6.0 + LABEL_HEIGHT - 2):
        for side in ("start", "end"):
            lx = cx + 6 if side == "start" else cx - 6
            left = lx if side == "start" else lx - width
            box = (left, cy + dy - LABEL_HEIGHT + 2, left + width, cy + dy + 2)
            candidates.append((lx, cy + dy, side, box))
    inside = [
        c
        for c in candidates
        if c[3][0] >= 0 and c[3][2] <= WIDTH and c[3][1] >= 0 and c[3][3] <= HEIGHT - BOTTOM
    ]
    pool = inside or candidates
    lx, ly, side, box = next((c for c in pool if not any(_overlaps(c[3], t) for t in taken)), pool[0])
    taken.append(box)
    return lx, ly, side
