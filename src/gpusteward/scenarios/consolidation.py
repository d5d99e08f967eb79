"""Consolidation on a trace: plan from its first part, replay the rest co-located, against the
naive first-fit measured on the same data. Shared by ``gpusteward consolidate`` and the bench."""

from __future__ import annotations

import gzip
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpusteward.analysis.consolidation import (
    Item,
    PackSettings,
    Plan,
    Replay,
    Usage,
    plan_naive,
    plan_time_aware,
    replay,
    to_grid,
)
from gpusteward.analysis.consolidation.mig import advise_cards
from gpusteward.analysis.cost import PriceTable
from gpusteward.integrations.replay import Trace, load_trace

#: Hours in an average month, for money per month.
MONTH_HOURS = 730.0


def read_trace(path: Path, *, gpu_model: str = "") -> Trace:
    """A trace file, gzipped or not."""
    if path.suffix != ".gz":
        return load_trace(path, gpu_model=gpu_model)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        with gzip.open(path, "rb") as src, plain.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        return load_trace(plain, gpu_model=gpu_model)


def usage_of(trace: Trace, *, step_s: float = 60.0) -> tuple[Usage, list[Item]]:
    """The trace's single-GPU workloads on a grid, and an item for each (its team, its GPU's model).
    A workload on several GPUs is left out: it needs its GPUs whole."""
    single = [w for w, wl in enumerate(trace.workloads) if len(wl.gpus) == 1]
    ids = tuple(trace.workloads[w].id for w in single)
    pos = {w: i for i, w in enumerate(single)}
    remap = [pos.get(w, -1) for w in range(len(trace.workloads))] + [-1]
    wl = [remap[w] for w in trace.wl.tolist()]
    usage = to_grid(trace.t, wl, trace.util, trace.mem, ids, start=trace.start, end=trace.end, step_s=step_s)
    items = [
        Item(
            id=trace.workloads[w].id,
            team=trace.workloads[w].owner.team,
            gpu_model=trace.gpus[trace.workloads[w].gpus[0]].model,
        )
        for w in single
    ]
    return usage, items


@dataclass(frozen=True)
class Backtest:
    plan: Plan
    naive: Plan
    replayed: Replay
    naive_replayed: Replay
    plan_hours: float
    replay_hours: float


def backtest(usage: Usage, items: list[Item], cfg: PackSettings, *, plan_hours: float) -> Backtest:
    """Plan (both ways) from the first ``plan_hours``, replay the rest."""
    history = usage.between(0.0, plan_hours * 3600.0)
    rest = usage.between(plan_hours * 3600.0, usage.bins * usage.step_s)
    plan, naive = plan_time_aware(history, items, cfg), plan_naive(history, items, cfg)
    return Backtest(
        plan,
        naive,
        replay(plan, rest, gpu_memory_mib=cfg.gpu_memory_mib, util_limit_pct=cfg.util_limit_pct),
        replay(naive, rest, gpu_memory_mib=cfg.gpu_memory_mib, util_limit_pct=cfg.util_limit_pct),
        plan_hours,
        rest.bins * rest.step_s / 3600.0,
    )


def backtest_summary(bt: Backtest) -> dict[str, Any]:
    r, n = bt.replayed, bt.naive_replayed
    return {
        "gpus_before": r.gpus_before,
        "gpus_after": r.gpus_after,
        "saved_share": round(r.saved_share, 4),
        "contention_minutes_share": round(r.contention_share, 6),
        "contention_minutes": round(r.contention_minutes, 1),
        "memory_violations": round(r.memory_violation_minutes, 1),
        "peak_memory_share": round(r.peak_memory_share, 4),
        "naive_gpus_after": n.gpus_after,
        "naive_saved_share": round(n.saved_share, 4),
        "naive_contention_minutes_share": round(n.contention_share, 6),
        "naive_memory_violations": round(n.memory_violation_minutes, 1),
        "gpus_after_over_naive": round(r.gpus_after / n.gpus_after, 4) if n.gpus_after else None,
        "plan_hours": round(bt.plan_hours, 2),
        "replay_hours": round(bt.replay_hours, 2),
    }


def advice(members: int, mode: str) -> dict[str, str]:
    """How each kind of system would run one shared group: Kubernetes through the move (the
    device plugin's resource), Slurm and plain servers as advice to apply by hand."""
    share = max(1, 100 // members)
    return {
        "kubernetes": "nvidia.com/gpu.shared: 1 per workload (time-slicing) via `consolidation.enabled`",
        "slurm": (
            f"--gres=shard:1 each (GresTypes=shard, Count>={members} in gres.conf) or "
            f"--gres=mps:{share} each (GresTypes=mps)"
        ),
        "server": (
            f"one GPU in CUDA_VISIBLE_DEVICES for all {members}; "
            + (
                f"nvidia-cuda-mps-control -d, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={share}"
                if mode == "mps"
                else "time-sliced by the driver (no setup)"
            )
        ),
    }


def plan_summary(
    plan: Plan, items: list[Item], prices: PriceTable, cfg: PackSettings, *, usage: Usage | None = None
) -> dict[str, Any]:
    """The plan as JSON: groups, GPUs freed, money per month, GPUs now and after by team."""
    model = {i.id: i.gpu_model for i in items}
    team = {i.id: i.team for i in items}
    freed_cost = sum(prices.price_for(model[g.members[0]]) * (len(g.members) - 1) for g in plan.groups)
    by_team: dict[str, list[int]] = {}
    for g in plan.groups:
        t = team[g.members[0]] or "(no team)"
        now_after = by_team.setdefault(t, [0, 0])
        now_after[0] += len(g.members)
        now_after[1] += 1
    out: dict[str, Any] = {
        "method": plan.method,
        "gpus_before": plan.gpus_before,
        "gpus_after": plan.gpus_after,
        "gpus_freed": plan.gpus_before - plan.gpus_after,
        "money_per_month": round(freed_cost * MONTH_HOURS, 2),
        "currency": prices.currency,
        "groups": [
            {
                "members": list(g.members),
                "mode": g.mode,
                "contention_share": round(g.contention_share, 6),
                "peak_memory_gib": round(g.peak_memory_mib / 1024, 2),
                "advice": advice(len(g.members), g.mode),
            }
            for g in plan.groups
            if len(g.members) > 1
        ],
        "kept": plan.kept,
        "by_team": {t: {"now": v[0], "after": v[1]} for t, v in sorted(by_team.items())},
    }
    if usage is not None:
        alone = {g.members[0] for g in plan.groups if len(g.members) == 1}
        out["cards"] = [a.as_dict() for a in advise_cards(usage, items, prices, cfg) if a.workload in alone]
    return out
