"""The job page's bitrate-vs-VMAF chart: one point per rendition, a line through the ladder.

A small server-side SVG like the overview's charts (dashboard/charts.py): no JavaScript to read it.
x is the measured video bitrate (kbit/s, from 0), y the mean VMAF (0..100); each point is labelled
with its rendition name, and its 5th-percentile VMAF is drawn as a whisker below it.
"""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 420, 180
LEFT, RIGHT, TOP, BOTTOM = 40, 16, 10, 28


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
    for i in range(5):
        kbps = top_x * i / 4
        parts.append(
            f'<text class="axis" x="{x(kbps):.1f}" y="{HEIGHT - 12}" text-anchor="middle">{kbps:g}</text>'
        )
    parts.append(f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 1}" text-anchor="end">kbit/s</text>')
    path = " ".join(
        f"{'M' if i == 0 else 'L'}{x(r['bitrate_kbps']):.1f},{y(r['vmaf']):.1f}" for i, r in enumerate(points)
    )
    parts.append(f'<path class="line s-vmaf" d="{path}" fill="none"/>')
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
        parts.append(f'<text class="label" x="{cx + 6:.1f}" y="{cy - 6:.1f}">{name}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))
