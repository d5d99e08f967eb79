"""Per-workload features from the window: what anomaly detection and right-sizing advice read.

Pure: a ``WindowView`` plus GPUs and workloads in, a table out. Each feature is computed per GPU
from the window's vectorised aggregates, then reduced over the workload's GPUs. A GPU without
fresh data covering ``min_coverage`` of the window gives no features, and a workload with such a
GPU is left out entirely: no data is not idleness, nor anything else.

Features (per GPU, over the window):

* ``util_mean``           mean GPU utilisation, %
* ``util_var``            variance of the 5-minute means of utilisation: a job that keeps
                          starting and stopping varies, a steady one does not
* ``stall_share``         share of samples under 1 % utilisation (periodic stalls)
* ``mem_slope_mib_per_h`` least-squares slope of GPU memory used: a leak grows
* ``power_residual_w``    measured power less what GPUs of the same model draw at that
                          utilisation (a fit across the cluster): power without work, or work
                          without power, is a mismatch
* ``cpu_pct``             CPU of the holding process(es), % of one core
* ``io_mb_per_s``         PCIe traffic host to GPU, MB/s
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Gpu, Metric, Workload
from gpusteward.store.window import WindowView

FloatArray = npt.NDArray[np.float64]

#: Features the anomaly detector uses, in column order.
ANOMALY_FEATURES = (
    "util_mean",
    "util_var",
    "stall_share",
    "mem_slope_mib_per_h",
    "power_residual_w",
    "cpu_pct",
    "io_mb_per_s",
)
#: How a feature is reduced over a workload's GPUs.
_REDUCE = {"mem_slope_mib_per_h": "max", "mem_max_mib": "max", "memory_total_mib": "min", "util_max": "max"}
BLOCK_S = 300.0
STALL_BELOW_PCT = 1.0


@dataclass(frozen=True)
class FeatureTable:
    """One row per judged workload; NaN where a metric is not measured (no power sensor, say)."""

    workloads: tuple[Workload, ...]
    names: tuple[str, ...]
    values: FloatArray  # (workloads, names)
    #: Per feature, per GPU uuid: the per-GPU values behind the row (for evidence).
    per_gpu: Mapping[str, Mapping[str, float]]
    window_s: float

    def column(self, name: str) -> FloatArray:
        out: FloatArray = self.values[:, self.names.index(name)]
        return out

    def row(self, i: int) -> dict[str, float]:
        return dict(zip(self.names, self.values[i].tolist(), strict=True))


def _block_variance(view: WindowView, m: Metric, window_s: float) -> FloatArray:
    """Variance of the block means of ``m`` over the window, per GPU, from the view's public
    aggregates: the sum over the last k blocks is mean x coverage x slots, so differences of
    consecutive cumulative sums are the blocks' sums (the memoised counts are shared)."""
    k = max(1, int(window_s // BLOCK_S))
    sums, counts = [np.zeros(view.n_gpus)], [np.zeros(view.n_gpus)]
    for j in range(1, k + 1):
        d = j * BLOCK_S
        n = np.nan_to_num(view.coverage(m, d)) * view.slots_in(d)
        sums.append(np.nan_to_num(view.mean(m, d)) * n)
        counts.append(n)
    s, c = np.diff(np.asarray(sums), axis=0), np.diff(np.asarray(counts), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(c > 0.5, s / np.maximum(c, 1e-9), np.nan)
    have = np.sum(np.isfinite(means), axis=0)
    out = np.full(view.n_gpus, np.nan)
    ok = have >= 3
    if ok.any():
        out[ok] = np.nanvar(means[:, ok], axis=0)
    return out


def _power_residual(power: FloatArray, util: FloatArray, models: Sequence[str]) -> FloatArray:
    """Power less a least-squares line power = a + b * util fitted per GPU model across the
    cluster (at least 5 GPUs with both values; otherwise unknown)."""
    out = np.full(power.size, np.nan)
    arr = np.asarray(models, dtype=object)
    for model in set(models):
        sel = np.flatnonzero((arr == model) & np.isfinite(power) & np.isfinite(util))
        if sel.size < 5 or np.ptp(util[sel]) < 1e-6:
            continue
        b, a = np.polyfit(util[sel], power[sel], 1)
        out[sel] = power[sel] - (a + b * util[sel])
    return out


def extract(
    view: WindowView,
    gpus: Mapping[str, Gpu],
    workloads: Sequence[Workload],
    *,
    window_s: float = 3600.0,
    min_coverage: float = 0.8,
    stale_after_s: float = 180.0,
) -> FeatureTable:
    """Features of every workload whose GPUs all have fresh data covering the window."""
    window_s = min(window_s, view.window_s)
    per_gpu_cols = _per_gpu(view, gpus, window_s)
    names = (*ANOMALY_FEATURES, "util_max", "mem_max_mib", "memory_total_mib", "sm_active_pct")
    cov = view.coverage(Metric.GPU_UTIL, window_s)
    age = view.age_s()
    rows: list[list[float]] = []
    kept: list[Workload] = []
    per_gpu: dict[str, dict[str, float]] = {n: {} for n in names}
    for w in workloads:
        idx = [view.index_of(u) for u in w.gpu_uuids]
        if not idx or any(i is None for i in idx):
            continue
        ii = np.asarray(idx, dtype=np.intp)
        if not (np.all(cov[ii] >= min_coverage - 1e-9) and np.all(age[ii] <= stale_after_s)):
            continue
        row = []
        for n in names:
            col = per_gpu_cols[n][ii]
            for u, v in zip(w.gpu_uuids, col.tolist(), strict=True):
                if v == v:
                    per_gpu[n][u] = v
            how = _REDUCE.get(n, "mean")
            finite = col[np.isfinite(col)]
            if finite.size == 0:
                row.append(math.nan)
            else:
                pick = finite.max() if how == "max" else finite.min() if how == "min" else finite.mean()
                row.append(float(pick))
        rows.append(row)
        kept.append(w)
    values = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(names))
    return FeatureTable(tuple(kept), names, values, per_gpu, window_s)


def _per_gpu(view: WindowView, gpus: Mapping[str, Gpu], window_s: float) -> dict[str, FloatArray]:
    util = view.mean(Metric.GPU_UTIL, window_s)
    models = [gpus[u].model if u in gpus else "" for u in view.uuids]
    mem_total = np.asarray(
        [gpus[u].memory_total_mib if u in gpus else math.nan for u in view.uuids], dtype=np.float64
    )

    def mean(m: Metric) -> FloatArray:
        return view.mean(m, window_s) if m in view.metrics else np.full(view.n_gpus, np.nan)

    with np.errstate(invalid="ignore"):
        return {
            "util_mean": util,
            "util_var": _block_variance(view, Metric.GPU_UTIL, window_s),
            "stall_share": view.fraction_below(Metric.GPU_UTIL, STALL_BELOW_PCT, window_s),
            "mem_slope_mib_per_h": (
                view.slope(Metric.MEM_USED, window_s) * 60.0
                if Metric.MEM_USED in view.metrics
                else np.full(view.n_gpus, np.nan)
            ),
            "power_residual_w": _power_residual(mean(Metric.POWER), util, models),
            "cpu_pct": mean(Metric.PROC_CPU),
            "io_mb_per_s": mean(Metric.PCIE_RX) / 1e6,
            "util_max": util,
            "mem_max_mib": (
                view.max(Metric.MEM_USED, window_s)
                if Metric.MEM_USED in view.metrics
                else np.full(view.n_gpus, np.nan)
            ),
            "memory_total_mib": mem_total,
            "sm_active_pct": mean(Metric.SM_ACTIVE),
        }
