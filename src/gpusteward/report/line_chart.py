"""A line chart as inline SVG for time series (the bar charts come from ``analysis.charts``).

Same conventions as the report's charts: ``data-chart``, a ``<title>``, and each point a circle
with ``data-label``/``data-value`` so a test or a screen reader can read what is drawn. A gap
(None) breaks the line: missing data is never drawn as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

from gpusteward.report.charts import PALETTE, fmt, nice_max

_FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def line_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    unit: str = "",
    y_max: float | None = None,
    width: int = 640,
    height: int = 240,
) -> str:
    """One line per series over the x ``labels``; ``y_max`` fixes the scale (100 for percent)."""
    names = list(series)
    if any(len(series[n]) != len(labels) for n in names):
        raise ValueError("every series needs one value per label")
    values = [v for n in names for v in series[n] if v is not None and math.isfinite(v)]
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="line" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{escape(title)}</title>",
        f'<text x="8" y="16" {_FONT} font-weight="bold">{escape(title)}</text>',
    ]
    if not labels or not values:
        head.append(f'<text x="{width // 2}" y="{height // 2}" text-anchor="middle" {_FONT}>no data</text>')
        return "\n".join([*head, "</svg>"])
    left, right, top, bottom = 48, 12, 28 + 14 * (len(names) > 1), 32
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = y_max if y_max else nice_max(max(values))
    parts = head
    for i in range(5):
        tick = top_value * i / 4
        y = top + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        label = f"{fmt(tick)}{unit if unit == '%' else ''}"
        parts.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>{escape(label)}</text>')
    step = plot_w / max(1, len(labels) - 1)
    every = max(1, math.ceil(len(labels) / (plot_w / 60)))
    for i, text in enumerate(labels):
        if i % every == 0 or i == len(labels) - 1:
            x = left + i * step
            parts.append(
                f'<text x="{x:.1f}" y="{height - 12}" text-anchor="middle" {_FONT}>{escape(text)}</text>'
            )
    for si, name in enumerate(names):
        colour = PALETTE[si % len(PALETTE)]
        runs: list[list[tuple[float, float]]] = [[]]
        for i, v in enumerate(series[name]):
            if v is None or not math.isfinite(v):
                runs.append([])
                continue
            y = top + plot_h - plot_h * min(max(v, 0.0), top_value) / top_value
            runs[-1].append((left + i * step, y))
            tip = escape(f"{labels[i]} · {name}: {fmt(v)} {unit}".strip())
            attrs = (
                f"data-series={quoteattr(name)} data-label={quoteattr(labels[i])} "
                f"data-value={quoteattr(str(round(v, 4)))}"
            )
            parts.append(
                f'<circle class="point" {attrs} cx="{left + i * step:.1f}" cy="{y:.1f}" r="2.5" '
                f'fill="{colour}"><title>{tip}</title></circle>'
            )
        for run in runs:
            if len(run) > 1:
                pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
                parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>')
        if len(names) > 1:
            x = left + si * 130
            parts.append(f'<rect x="{x}" y="22" width="10" height="10" fill="{colour}"/>')
            parts.append(f'<text x="{x + 14}" y="31" {_FONT}>{escape(name[:18])}</text>')
    return "\n".join([*parts, "</svg>"])
