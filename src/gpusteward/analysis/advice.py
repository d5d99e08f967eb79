"""Right-sizing advice: fewer GPUs, a smaller GPU, or a faster input pipeline.

Pure and table-driven: every threshold is a field of ``AdviceThresholds`` (the ``insights``
config section sets them), and each kind of advice is one function over the feature table.
Advice is a ``Finding`` with ``RuleAction.ADVISE``: it reaches owners as a notice and in the
reports, never as an action.

* ``right-size-gpus`` (kind ``overprovisioned``): over the workload's life as gpusteward saw it,
  the GPUs whose mean utilisation stayed under ``used_util_pct`` were not used: "request K".
* ``gpu-too-large`` (kind ``oversized-gpu``): low utilisation and little memory on a big card: a
  MIG slice (the smallest profile that holds its peak memory with headroom) or a smaller GPU.
* ``input-bound`` (kind ``input-bound``): the GPU mostly waits while the holding process keeps
  the host CPU busy: the data loader is the bottleneck.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from gpusteward.analysis.features import FeatureTable
from gpusteward.domain.models import Finding, Gpu, RuleAction, Workload

GIB = 1024.0

#: MIG profiles by card memory (GiB, as NVIDIA names the card): (profile, GiB of memory).
MIG_PROFILES: dict[int, tuple[tuple[str, float], ...]] = {
    40: (("1g.5gb", 5), ("2g.10gb", 10), ("3g.20gb", 20)),  # A100 40GB
    80: (("1g.10gb", 10), ("2g.20gb", 20), ("3g.40gb", 40)),  # A100 80GB, H100 80GB
    94: (("1g.12gb", 12), ("2g.24gb", 24), ("3g.47gb", 47)),  # H100 NVL
    141: (("1g.18gb", 18), ("2g.35gb", 35), ("3g.71gb", 71)),  # H200
}


@dataclass(frozen=True)
class AdviceThresholds:
    # right-size-gpus: over the workload's life
    used_util_pct: float = 5.0
    min_life_hours: float = 2.0
    min_requested: int = 2
    # gpu-too-large
    large_util_pct: float = 20.0
    large_mem_gib: float = 10.0
    large_card_gib: float = 70.0
    #: Memory a MIG slice must have beyond the peak seen.
    mig_headroom: float = 1.25
    # input-bound
    input_busy_pct: float = 40.0
    input_cpu_pct: float = 90.0


@dataclass(frozen=True)
class Lifetime:
    """What gpusteward saw of one workload since it first saw it."""

    workload_id: str
    observed_hours: float
    #: Per GPU uuid, mean utilisation over the observed life (present samples only).
    util_mean: Mapping[str, float]


def _finding(
    rule: str, kind: str, w: Workload, gpus: Sequence[str], now: datetime, message: str, **evidence: float
) -> Finding:
    return Finding(
        rule=rule,
        kind=kind,
        action=RuleAction.ADVISE,
        at=now,
        gpu_uuids=tuple(gpus),
        workload_id=w.id,
        evidence={k: dict.fromkeys(gpus, v) for k, v in evidence.items()},
        wasted_minutes=0.0,
        wasted_gpu_hours=0.0,
        wasted_cost=0.0,
        message=message,
    )


def right_size_gpus(
    workloads: Sequence[Workload],
    lifetimes: Mapping[str, Lifetime],
    gpus: Mapping[str, Gpu],
    now: datetime,
    t: AdviceThresholds,
) -> list[Finding]:
    """Workloads that used fewer GPUs than they requested over their observed life."""
    out = []
    for w in workloads:
        life = lifetimes.get(w.id)
        asked = max(w.gpus_requested, len(w.gpu_uuids))
        if life is None or asked < t.min_requested or life.observed_hours < t.min_life_hours:
            continue
        known = {u: life.util_mean[u] for u in w.gpu_uuids if u in life.util_mean}
        if len(known) < len(w.gpu_uuids):
            continue  # a GPU never measured is not an unused one
        unused = [u for u in w.gpu_uuids if known[u] < t.used_util_pct]
        used = len(w.gpu_uuids) - len(unused)
        if not unused or used == 0:
            continue  # all idle is a zombie or an idle allocation, for the reclaim rules
        hours = life.observed_hours
        price = sum(gpus[u].price_per_hour for u in unused if u in gpus)
        f = _finding(
            "right-size-gpus",
            "overprovisioned",
            w,
            unused,
            now,
            f"{w.name} requested {asked} GPUs but used {used} over {hours:.1f} h "
            f"({len(unused)} averaged under {t.used_util_pct:g}% utilisation): request {used}",
            gpus_requested=float(asked),
            gpus_used=float(used),
            observed_hours=hours,
        )
        out.append(
            replace(
                f, wasted_minutes=hours * 60, wasted_gpu_hours=hours * len(unused), wasted_cost=hours * price
            )
        )
    return out


def mig_profile(card_gib: float, peak_gib: float, headroom: float) -> tuple[str, float] | None:
    """The smallest MIG profile of this card's class (its memory within 8 %; cards without MIG,
    like an L40S, have none) that holds ``peak_gib`` x ``headroom``."""
    classes = [c for c in MIG_PROFILES if abs(card_gib - c) <= 0.08 * c]
    if not classes:
        return None
    for name, gib in MIG_PROFILES[min(classes, key=lambda c: abs(card_gib - c))]:
        if gib >= peak_gib * headroom:
            return name, gib
    return None


def gpu_too_large(table: FeatureTable, now: datetime, t: AdviceThresholds) -> list[Finding]:
    """Workloads whose every GPU is big, lightly used and mostly empty."""
    out = []
    util, mem = table.column("util_max"), table.column("mem_max_mib") / GIB
    card = table.column("memory_total_mib") / GIB
    for i, w in enumerate(table.workloads):
        u, m, c = float(util[i]), float(mem[i]), float(card[i])
        if not (math.isfinite(u) and math.isfinite(m) and math.isfinite(c)):
            continue
        if not (u < t.large_util_pct and m < t.large_mem_gib and c >= t.large_card_gib):
            continue
        mig = mig_profile(c, m, t.mig_headroom)
        fix = (
            f"a MIG slice {mig[0]} ({mig[1]:g} GiB) or a smaller GPU would do"
            if mig
            else "a smaller GPU would do"
        )
        out.append(
            _finding(
                "gpu-too-large",
                "oversized-gpu",
                w,
                w.gpu_uuids,
                now,
                f"{w.name} used at most {m:.1f} GiB and {u:.0f}% utilisation of "
                f"{c:.0f} GiB GPUs over {table.window_s / 60:.0f} min: {fix}",
                util_pct=u,
                mem_peak_gib=m,
                card_gib=c,
            )
        )
    return out


def input_bound(table: FeatureTable, now: datetime, t: AdviceThresholds) -> list[Finding]:
    """Workloads whose GPUs wait (low SM activity, or utilisation where SM activity is not
    measured) while their processes keep the host CPU busy."""
    out = []
    sm, util, cpu = table.column("sm_active_pct"), table.column("util_mean"), table.column("cpu_pct")
    for i, w in enumerate(table.workloads):
        busy = float(sm[i]) if math.isfinite(sm[i]) else float(util[i])
        c = float(cpu[i])
        if not (math.isfinite(busy) and math.isfinite(c)):
            continue
        if not (busy < t.input_busy_pct and c >= t.input_cpu_pct):
            continue
        what = "SM activity" if math.isfinite(sm[i]) else "GPU utilisation"
        out.append(
            _finding(
                "input-bound",
                "input-bound",
                w,
                w.gpu_uuids,
                now,
                f"{w.name} keeps its GPUs at {busy:.0f}% {what} while its processes use {c:.0f}% "
                "CPU: it waits for input. Try more data-loader workers (num_workers), "
                "pin_memory=True, caching or pre-processing the dataset, or faster storage",
                busy_pct=busy,
                cpu_pct=c,
            )
        )
    return out


def advise(
    table: FeatureTable,
    lifetimes: Mapping[str, Lifetime],
    gpus: Mapping[str, Gpu],
    now: datetime,
    thresholds: AdviceThresholds | None = None,
) -> list[Finding]:
    """All right-sizing advice for the workloads of ``table``, sorted by rule and workload."""
    t = thresholds or AdviceThresholds()
    found = [
        *right_size_gpus(table.workloads, lifetimes, gpus, now, t),
        *gpu_too_large(table, now, t),
        *input_bound(table, now, t),
    ]
    return sorted(found, key=lambda f: (f.rule, f.workload_id or ""))
