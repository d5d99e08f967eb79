"""A MIG slice or a smaller card for a workload that uses little of its GPU, priced by the cost model.

MIG profiles from NVIDIA's MIG user guide ("Supported MIG Profiles"): a profile takes a share of
the compute (sevenths of the SMs) and of the memory (eighths), with a most-instances count. The
profile names carry the memory in GB; the usable memory is taken as that many GB (a little
under what ``nvidia-smi mig -lgip`` reports, which keeps the fit conservative).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gpusteward.analysis.consolidation.packing import Item, PackSettings
from gpusteward.analysis.consolidation.usage import Usage
from gpusteward.analysis.cost import PriceTable

MONTH_HOURS = 730.0
GB_MIB = 1e9 / 2**20


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_sevenths: int
    memory_eighths: int
    max_instances: int

    @property
    def memory_gb(self) -> float:
        m = re.search(r"\.(\d+)gb", self.name)
        return float(m.group(1)) if m else 0.0

    @property
    def share(self) -> float:
        """The share of the card it takes (and is priced at): the larger of its two shares."""
        return max(self.compute_sevenths / 7.0, self.memory_eighths / 8.0)


def _profiles(mem: tuple[int, int, int, int]) -> tuple[MigProfile, ...]:
    """The six A100/H100/H200 profiles, named by the memory of 1, 2, 4 and 8 eighths."""
    e1, e2, e4, e8 = mem
    return (
        MigProfile(f"1g.{e1}gb", 1, 1, 7),
        MigProfile(f"1g.{e2}gb", 1, 2, 4),
        MigProfile(f"2g.{e2}gb", 2, 2, 3),
        MigProfile(f"3g.{e4}gb", 3, 4, 2),
        MigProfile(f"4g.{e4}gb", 4, 4, 1),
        MigProfile(f"7g.{e8}gb", 7, 8, 1),
    )


#: By a lower-case piece of the model name; the longest match wins (as in the price table).
MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {
    "a100": _profiles((5, 10, 20, 40)),
    "a100-sxm4-80gb": _profiles((10, 20, 40, 80)),
    "a100 80gb": _profiles((10, 20, 40, 80)),
    "a100-pcie-80gb": _profiles((10, 20, 40, 80)),
    "h100": _profiles((10, 20, 40, 80)),
    "h100 nvl": _profiles((12, 24, 47, 94)),
    "h200": _profiles((18, 35, 71, 141)),
}

#: Cards a light service could move to: memory (GB) and rough dense FP16 tensor TFLOPS from the
#: data sheets, to compare how much compute a workload would keep. Advice, not a benchmark.
CARDS: dict[str, tuple[float, float]] = {
    "t4": (16, 65),
    "l4": (24, 121),
    "a10": (24, 125),
    "l40s": (48, 362),
    "a100": (40, 312),
    "a100-sxm4-80gb": (80, 312),
    "h100": (80, 989),
    "h200": (141, 989),
}


def _match(table: dict[str, Any], model: str) -> str | None:
    keys = [k for k in table if k in model.lower()]
    return max(keys, key=len) if keys else None


def mig_profile_for(model: str, peak_mib: float, util_p95: float, margin: float) -> MigProfile | None:
    """The smallest MIG profile of ``model`` holding ``peak_mib`` under (1 - margin) of its memory
    and with the compute share the workload's p95 utilisation of the whole card needs."""
    key = _match(MIG_PROFILES, model)
    if key is None:
        return None
    for p in sorted(MIG_PROFILES[key], key=lambda p: (p.share, p.memory_eighths)):
        if p.compute_sevenths == 7:
            return None  # the whole card: nothing gained
        if peak_mib <= p.memory_gb * GB_MIB * (1 - margin) and util_p95 <= 100.0 * p.compute_sevenths / 7:
            return p
    return None


@dataclass(frozen=True)
class CardAdvice:
    workload: str
    model: str
    per_hour: float
    suggestion: str
    suggestion_per_hour: float
    saving_per_month: float

    def as_dict(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def advise_cards(
    usage: Usage, items: Sequence[Item], prices: PriceTable, cfg: PackSettings
) -> list[CardAdvice]:
    """For each workload alone on its GPU: the cheapest of a MIG slice of its card and a smaller
    card that hold its peak memory (with the margin) and its p95 compute, when cheaper."""
    out = []
    for w, item in enumerate(items):
        u, m = usage.util[w], usage.mem_mib[w]
        if item.pinned or not np.any(~np.isnan(u)) or not np.any(~np.isnan(m)):
            continue
        peak, p95 = float(np.nanmax(m)), float(np.percentile(u[~np.isnan(u)], 95))
        now = prices.price_for(item.gpu_model)
        options: list[tuple[float, str]] = []
        mig = mig_profile_for(item.gpu_model, peak, p95, cfg.memory_margin)
        if mig is not None:
            options.append((now * mig.share, f"MIG {mig.name}"))
        own = _match(CARDS, item.gpu_model)
        if own is not None:
            tflops = CARDS[own][1] * p95 / 100.0
            for card, (mem_gb, card_tflops) in CARDS.items():
                if peak <= mem_gb * GB_MIB * (1 - cfg.memory_margin) and tflops <= card_tflops:
                    options.append((prices.price_for(card), card.upper()))
        if not options:
            continue
        cost, what = min(options)
        if cost < now - 1e-9:
            out.append(CardAdvice(item.id, item.gpu_model, now, what, cost, (now - cost) * MONTH_HOURS))
    return out
