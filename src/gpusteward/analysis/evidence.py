"""The ``{evidence}`` of a finding in words: each long-window value a rule read, per finding.

"busy 2.1 % of the last 3.5h, watched 3.5h, at 0 % for 12 min". A multi-GPU finding quotes
its busiest GPU's share and its shortest runs: the values least in favour of stopping.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.aggregates import Aggregate, EvalContext, format_duration

#: Aggregates worth quoting, and how each reads.
_QUOTED = ("busy_share", "watched_for", "zero_for", "below_for")


def _hours(minutes: float) -> str:
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def _phrase(agg: Aggregate, v: float) -> str:
    if v != v:
        return f"{agg.func} unknown"
    if agg.func == "busy_share":
        x, d = agg.args
        return f"busy (>= {x:g} %) {100 * v:.1f} % of the last {format_duration(d)}"
    if agg.func == "watched_for":
        return f"watched {_hours(v)}"
    if agg.func == "zero_for":
        return f"at 0 % for {_hours(v)}"
    return f"under {agg.args[0]:g} % for {_hours(v)}"


def evidence_texts(
    aggregates: Sequence[Aggregate],
    ctx: EvalContext,
    tp: npt.NDArray[np.intp],
    starts: npt.NDArray[np.intp],
) -> list[str]:
    """One text per finding (findings are the runs of ``tp`` starting at ``starts``)."""
    parts: list[list[str]] = [[] for _ in range(starts.size)]
    for agg in aggregates:
        if agg.func not in _QUOTED:
            continue
        vals = ctx.aggregate(agg)[tp]
        # fmax/fmin skip NaN: the present GPUs speak; all missing stays NaN ("unknown").
        reduce = np.fmax if agg.func == "busy_share" else np.fmin
        for out, v in zip(parts, reduce.reduceat(vals, starts).tolist(), strict=True):
            out.append(_phrase(agg, v))
    return [", ".join(p) or "-" for p in parts]
