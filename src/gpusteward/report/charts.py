"""Small charts as inline SVG: vertical bars (grouped series) and horizontal bars. Pure: data in,
markup out; no plotting library. Each bar carries ``data-label`` and ``data-value`` (the number it
draws) and a ``<title>`` tooltip, so a report can be checked by machine and read with a screen reader.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

#: Series colours (colour-blind safe, Okabe-Ito).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
_FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above ``value`` (1 for nothing to show)."""
    if not value > 0 or math.isinf(value):
        return 1.0
    exp = 10.0 ** math.floor(math.log10(value))
    return next(step * exp for step in (1.0, 2.0, 2.5, 5.0, 10.0) if value <= step * exp * (1 + 1e-9))


def fmt(value: float) -> str:
    """A short number for an axis or a tooltip: 1234 → 1,234; 0.25 → 0.25; 2.0 → 2."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _attrs(**kw: object) -> str:
    return " ".join(f"{k.replace('_', '-')}={quoteattr(str(v))}" for k, v in kw.items())


def _open(kind: str, title: str, width: int, height: int) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{kind}" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{escape(title)}</title>",
        f'<text x="8" y="16" {_FONT} font-weight="bold">{escape(title)}</text>',
    ]


def _empty(kind: str, title: str, width: int, height: int) -> str:
    parts = _open(kind, title, width, height)
    parts.append(f'<text x="{width // 2}" y="{height // 2}" text-anchor="middle" {_FONT}>no data</text>')
    return "\n".join([*parts, "</svg>"])


def _series_names(categories: Sequence[str], series: Mapping[str, Sequence[float]]) -> list[str]:
    """The series' names, once each has one value per category."""
    names = list(series)
    if any(len(series[n]) != len(categories) for n in names):
        raise ValueError("every series needs one value per category")
    return names


def bar_chart(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    unit: str = "",
    width: int = 640,
    height: int = 260,
) -> str:
    """Vertical bars: one group per category, one bar per series, a y axis with 5 gridlines."""
    names = _series_names(categories, series)
    values = [v for n in names for v in series[n]]
    if not categories or not names or not any(v > 0 for v in values):
        return _empty("bar", title, width, height)
    left, right, top, bottom = 56, 12, 28 + 14 * (len(names) > 1), 40
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = nice_max(max(values))
    parts = _open("bar", title, width, height)
    for i in range(6):  # gridlines and y labels
        v = top_value * i / 5
        y = top + plot_h - plot_h * i / 5
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>{escape(fmt(v))}</text>'
        )
    if unit:
        mid = f"{top + plot_h / 2:.1f}"
        parts.append(
            f'<text x="8" y="{mid}" {_FONT} transform="rotate(-90 8 {mid})" '
            f'text-anchor="middle">{escape(unit)}</text>'
        )
    group = plot_w / len(categories)
    bar = max(1.0, group * 0.8 / len(names))
    label_every = max(1, math.ceil(len(categories) / (plot_w / 48)))
    for ci, cat in enumerate(categories):
        x0 = left + ci * group + group * 0.1
        for si, name in enumerate(names):
            v = float(series[name][ci])
            h = plot_h * max(0.0, v) / top_value
            tip = f"{cat} · {name}: {fmt(v)} {unit}".strip()
            parts.append(
                f'<rect class="bar" {_attrs(data_series=name, data_label=cat, data_value=round(v, 4))} '
                f'x="{x0 + si * bar:.1f}" y="{top + plot_h - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[si % len(PALETTE)]}"><title>{escape(tip)}</title></rect>'
            )
        if ci % label_every == 0:
            cx = left + ci * group + group / 2
            y = top + plot_h + 14
            parts.append(f'<text x="{cx:.1f}" y="{y}" text-anchor="middle" {_FONT}>{escape(cat)}</text>')
    if len(names) > 1:
        for si, name in enumerate(names):
            x = left + si * 140
            parts.append(f'<rect x="{x}" y="22" width="10" height="10" fill="{PALETTE[si % len(PALETTE)]}"/>')
            parts.append(f'<text x="{x + 14}" y="31" {_FONT}>{escape(name)}</text>')
    return "\n".join([*parts, "</svg>"])


def hbar_chart(
    labels: Sequence[str], values: Sequence[float], *, title: str, unit: str = "", width: int = 640
) -> str:
    """Horizontal bars, one per label, longest first as given, each with its value at its end."""
    if len(labels) != len(values):
        raise ValueError("one value per label")
    if not labels or not any(v > 0 for v in values):
        return _empty("hbar", title, width, 80)
    row, top, left, right = 22, 28, 160, 70
    height = top + row * len(labels) + 8
    top_value = nice_max(max(values))
    parts = _open("hbar", title, width, height)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + i * row
        w = (width - left - right) * max(0.0, float(value)) / top_value
        short = label if len(label) <= 24 else label[:23] + "…"
        tip = f"{label}: {fmt(value)} {unit}".strip()
        parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" {_FONT}>{escape(short)}</text>')
        parts.append(
            f'<rect class="bar" {_attrs(data_label=label, data_value=round(float(value), 4))} x="{left}" '
            f'y="{y + 3}" width="{w:.1f}" height="{row - 6}" fill="{PALETTE[0]}">'
            f"<title>{escape(tip)}</title></rect>"
        )
        parts.append(
            f'<text x="{left + w + 4:.1f}" y="{y + 14}" {_FONT}>{escape(fmt(value))} {escape(unit)}</text>'
        )
    return "\n".join([*parts, "</svg>"])


def stacked_bar_chart(
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    title: str,
    unit: str = "",
    width: int = 640,
    height: int = 260,
) -> str:
    """Vertical bars, one per category, each stacked from its series' values (negative ones count
    as 0), with the category's total in its tooltip and ``data-total``."""
    names = _series_names(categories, series)
    totals = [sum(max(0.0, float(series[n][ci])) for n in names) for ci in range(len(categories))]
    if not categories or not names or not any(t > 0 for t in totals):
        return _empty("stacked", title, width, height)
    left, right, top, bottom = 56, 12, 28 + 14 * ((len(names) - 1) // 4 + 1), 40
    plot_w, plot_h = width - left - right, height - top - bottom
    top_value = nice_max(max(totals))
    parts = _open("stacked", title, width, height)
    for i in range(6):
        v = top_value * i / 5
        y = top + plot_h - plot_h * i / 5
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" {_FONT}>{escape(fmt(v))}</text>'
        )
    group = plot_w / len(categories)
    bar = max(1.0, group * 0.8)
    label_every = max(1, math.ceil(len(categories) / (plot_w / 48)))
    for ci, cat in enumerate(categories):
        x = left + ci * group + group * 0.1
        base = float(top + plot_h)
        for si, name in enumerate(names):
            v = max(0.0, float(series[name][ci]))
            h = plot_h * v / top_value
            base -= h
            tip = f"{cat} · {name}: {fmt(v)} {unit} (of {fmt(totals[ci])})".strip()
            data = _attrs(
                data_series=name, data_label=cat, data_value=round(v, 4), data_total=round(totals[ci], 4)
            )
            parts.append(
                f'<rect class="bar" {data} x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[si % len(PALETTE)]}"><title>{escape(tip)}</title></rect>'
            )
        if ci % label_every == 0:
            cx, cy = left + ci * group + group / 2, top + plot_h + 14
            parts.append(f'<text x="{cx:.1f}" y="{cy}" text-anchor="middle" {_FONT}>{escape(cat)}</text>')
    for si, name in enumerate(names):  # the legend, four to a line
        x, y = left + (si % 4) * 140, 22 + 14 * (si // 4)
        parts.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{PALETTE[si % len(PALETTE)]}"/>')
        parts.append(f'<text x="{x + 14}" y="{y + 9}" {_FONT}>{escape(name)}</text>')
    if unit:
        mid = f"{top + plot_h / 2:.1f}"
        turn = f'transform="rotate(-90 8 {mid})" text-anchor="middle"'
        parts.append(f'<text x="8" y="{mid}" {_FONT} {turn}>{escape(unit)}</text>')
    return "\n".join([*parts, "</svg>"])
