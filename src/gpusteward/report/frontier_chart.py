"""The sweep's frontier as inline SVG: reclaimed GPU-hours across, false kills up, every point a
dot and the frontier joined by a line. Each dot carries ``data-label``, ``data-x`` and ``data-y``."""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from gpusteward.report.charts import _FONT, PALETTE, _attrs, _empty, _open, fmt, nice_max

#: (label, reclaimed GPU-hours, false kills, on the frontier)
Dot = tuple[str, float, float, bool]


def frontier_chart(dots: Sequence[Dot], *, title: str, width: int = 640, height: int = 360) -> str:
    if not dots:
        return _empty("frontier", title, width, height)
    left, right, top, bottom = 56, 16, 28, 44
    mid = 'text-anchor="middle"'
    plot_w, plot_h = width - left - right, height - top - bottom
    x_max = nice_max(max(d[1] for d in dots))
    y_max = nice_max(max(d[2] for d in dots))

    def xy(x: float, y: float) -> tuple[float, float]:
        return left + plot_w * x / x_max, top + plot_h - plot_h * y / y_max

    parts = _open("frontier", title, width, height)
    for i in range(6):
        gx, gy = left + plot_w * i / 5, top + plot_h - plot_h * i / 5
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{gy:.1f}" y2="{gy:.1f}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{left - 4}" y="{gy + 4:.1f}" text-anchor="end" {_FONT}>{fmt(y_max * i / 5)}</text>'
        )
        parts.append(f'<text x="{gx:.1f}" y="{top + plot_h + 14}" {mid} {_FONT}>{fmt(x_max * i / 5)}</text>')
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 8}" {mid} {_FONT}>reclaimed GPU-hours</text>'
    )
    ym = f"{top + plot_h / 2:.1f}"
    parts.append(f'<text x="12" y="{ym}" {_FONT} transform="rotate(-90 12 {ym})" {mid}>false kills</text>')
    line = sorted((d for d in dots if d[3]), key=lambda d: d[1])
    if len(line) > 1:
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(d[1], d[2]) for d in line))
        parts.append(f'<polyline class="frontier" points="{pts}" fill="none" stroke="{PALETTE[3]}"/>')
    for label, x, y, on in dots:
        cx, cy = xy(x, y)
        colour = PALETTE[3] if on else PALETTE[0]
        tip = f"{label}: {fmt(x)} GPU-h, {fmt(y)} false kills" + (" (frontier)" if on else "")
        data = _attrs(data_label=label, data_x=round(x, 4), data_y=y, data_frontier=on)
        parts.append(
            f'<circle class="point" {data} cx="{cx:.1f}" cy="{cy:.1f}" r="{5 if on else 3.5}" '
            f'fill="{colour}"><title>{escape(tip)}</title></circle>'
        )
    return "\n".join([*parts, "</svg>"])
