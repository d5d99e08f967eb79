"""The ``{evidence}`` of a finding in words: each value a rule read, per finding.

"busy 2.1 % of the last 3.5h, watched 3.5h, at 0 % for 12 min, P(busy again within 6h)
<= 0.8 % (upper 95 % bound, 31 gaps)". A multi-GPU finding quotes the value least in favour
of stopping: its busiest GPU's share, memory, CPU and requests, its shortest runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.aggregates import Aggregate, EvalContext, format_duration
from gpusteward.domain.health import XIDS
from gpusteward.domain.models import HEALTH_METRICS, Metric

#: Aggregates worth quoting whatever their metric, and how each reads.
_QUOTED = ("busy_share", "watched_for", "zero_for", "below_for", *("fleet_idle_share", "p_busy_again"))
#: Metrics whose plain aggregates (mean, min, max, last) are quoted: memory held or
#: released, the holder's CPU, requests served.
_METRICS = {
    Metric.MEM_USED: "GPU memory",
    Metric.PROC_CPU: "process CPU",
    Metric.REQUESTS: "requests",
    # GPU health (issue 16): what the health rules read, each a count or a 0/1 flag.
    Metric.XID_FATAL: "fatal Xid",
    Metric.ECC_DBE: "double-bit ECC errors",
    Metric.ECC_SBE: "single-bit ECC errors",
    Metric.RETIRED_PAGES: "retired pages / remapped rows",
    Metric.REMAP_FAILURE: "row-remap failure",
    Metric.THROTTLED: "clock slowdown",
    Metric.PCIE_REPLAY: "PCIe replays",
    Metric.TEMP: "temperature",
}
#: Trend aggregates (analysis/trends.py), quoted for whichever metric they read.
_TRENDS = ("increase", "slope")
#: Reduced over a finding's GPUs with fmin (the others with fmax, NaN skipped).
_SHORTEST = ("watched_for", "zero_for", "below_for", "fleet_idle_share", "idle_gaps")


def _hours(minutes: float) -> str:
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def _metric_value(m: Metric, v: float) -> str:
    if m is Metric.TEMP:
        return f"{v:.0f} °C"
    if m in HEALTH_METRICS:
        return f"{v:g}"
    if m is Metric.MEM_USED:
        return f"{v / 1024:.1f} GiB" if v >= 1024 else f"{v:.0f} MiB" + (" (released)" if v == 0 else "")
    if m is Metric.PROC_CPU:
        return f"{v:.0f} % of a core"
    return f"{v:.3g}/s"


def _phrase(agg: Aggregate, v: float, cls: str, gaps: float) -> str:
    if v != v:
        return "" if agg.metric in _METRICS or agg.func in _TRENDS else f"{agg.func} unknown"
    f = agg.func
    if f == "busy_share":
        x, d = agg.args
        return f"busy (>= {x:g} %) {100 * v:.1f} % of the last {format_duration(d)}"
    if f == "watched_for":
        return f"watched {_hours(v)}"
    if f == "zero_for":
        return f"at 0 % for {_hours(v)}"
    if f == "below_for":
        return f"under {agg.args[0]:g} % for {_hours(v)}"
    if f == "fleet_idle_share":
        c, d = agg.args
        who = cls if c < 0 else agg.text.split("(")[1].split(",")[0]
        when = f"for the last {format_duration(d)}" if d > 0 else "now"
        return f"{100 * v:.0f} % of {who} GPUs idle {when}"
    if f in ("p_busy_again", "p_busy_again_upper"):
        within = f"P(busy again within {format_duration(agg.args[0])})"
        based = f"{gaps:.0f} gaps" if gaps == gaps else "gaps unknown"
        if f == "p_busy_again":
            return f"{within} ~ {100 * v:.1f} % ({based})"
        return f"{within} <= {100 * v:.1f} % (upper 95 % bound, {based})"
    if f == "idle_gaps":
        return f"{v:.0f} idle gaps seen"
    name = _METRICS.get(agg.metric, agg.metric.value)
    if f == "increase":
        return f"{name} +{v:g} over {format_duration(agg.args[0])}"
    if f == "slope":
        unit = " °C" if agg.metric is Metric.TEMP else ""
        return f"{name} {v:+.3g}{unit}/h over {format_duration(agg.args[0])}"
    if agg.metric is Metric.THROTTLED and f == "mean":
        return f"{name} {100 * v:.0f} % of the last {format_duration(agg.args[0])}"
    what = {"last": "now", "mean": "mean", "max": "max", "min": "min"}[f]
    over = f" over {format_duration(agg.args[0])}" if agg.args else ""
    return f"{_METRICS[agg.metric]} {what} {_metric_value(agg.metric, v)}{over}"


def _quoted(agg: Aggregate, funcs: set[str]) -> bool:
    if agg.func in _QUOTED or agg.func in _TRENDS or agg.func == "p_busy_again_upper":
        return True
    if agg.func == "idle_gaps":  # said with the chance when the rule reads one
        return not funcs & {"p_busy_again", "p_busy_again_upper"}
    return agg.metric in _METRICS and agg.func in ("last", "mean", "max", "min")


def evidence_texts(
    aggregates: Sequence[Aggregate],
    ctx: EvalContext,
    tp: npt.NDArray[np.intp],
    starts: npt.NDArray[np.intp],
    classes: Sequence[str] = (),
) -> list[str]:
    """One text per finding (findings are the runs of ``tp`` starting at ``starts``);
    ``classes`` names each finding's workload class."""
    parts: list[list[str]] = [[] for _ in range(starts.size)]
    funcs = {a.func for a in aggregates}
    cls = list(classes) or ["its class's"] * starts.size
    for agg in aggregates:
        if not _quoted(agg, funcs):
            continue
        vals = ctx.aggregate(agg)[tp]
        # fmax/fmin skip NaN: the present GPUs speak; all missing stays NaN ("unknown").
        reduce = np.fmin if agg.func in _SHORTEST else np.fmax
        gaps: list[float] = [np.nan] * starts.size
        if agg.func.startswith("p_busy_again"):
            g = ctx.aggregate(Aggregate("idle_gaps", agg.metric, agg.args))[tp]
            gaps = np.fmin.reduceat(g, starts).tolist()
        values = reduce.reduceat(vals, starts).tolist()
        for out, v, c, n in zip(parts, values, cls, gaps, strict=True):
            out.append(_phrase(agg, v, c, n))
    return [", ".join(x for x in p if x) or "-" for p in parts]


#: How far back ``{xid}`` looks for an Xid at least: a health rule reading only counters
#: (window 0) still names the Xid that came with the fault.
XID_LOOKBACK_S = 1800.0


def xid_texts(
    ctx: EvalContext, tp: npt.NDArray[np.intp], starts: npt.NDArray[np.intp], window_s: float
) -> list[str]:
    """``Xid 79 (GPU has fallen off the bus)`` per finding: the highest code among its GPUs
    over the window (fatal ones are listed first if any is), or ``no Xid``."""
    code = ctx.aggregate(Aggregate("max", Metric.XID, (window_s,)))[tp]
    fatal = ctx.aggregate(Aggregate("max", Metric.XID_FATAL, (window_s,)))[tp]
    out = []
    for lo, hi in zip(starts.tolist(), [*starts.tolist()[1:], tp.size], strict=True):
        codes = [int(c) for c in code[lo:hi].tolist() if c == c and c > 0]
        if not codes:
            out.append("no Xid")
            continue
        bad = [
            int(c)
            for c, f in zip(code[lo:hi].tolist(), fatal[lo:hi].tolist(), strict=True)
            if f > 0 and c > 0
        ]
        c = max(bad or codes)
        x = XIDS.get(c)
        out.append(f"Xid {c} ({x.meaning})" if x is not None else f"Xid {c}")
    return out
