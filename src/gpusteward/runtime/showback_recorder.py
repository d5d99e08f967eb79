"""The showback part of the ledger recorder (``runtime.ledger_recorder``): per day, team, owner,
GPU model and rate, the GPU-hours held (unheld GPUs: "(unallocated)"), used, wasted, reclaimed;
the held hours' spend at the GPU's price, the measured power's cost. Amounts wait here until the
recorder flushes them with the rest of the ledger."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from operator import attrgetter

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.models import Gpu, Observation, Owner, Workload
from gpusteward.domain.records import ShowbackAmounts, ShowbackKey

NOBODY = Owner("(unallocated)")
UNKNOWN_MODEL = "unknown"
_SAMPLE_FIELDS = attrgetter("gpu_uuid", "at", "gpu_util_pct", "power_w")
# Showback amounts in a pending list, in ShowbackAmounts' field order.
HELD, USED, WASTED, RECLAIMED, SPEND, KWH, POWER_COST = range(7)


def model_of(uuid: str, gpus: Mapping[str, Gpu]) -> str:
    gpu = gpus.get(uuid)
    return gpu.model if gpu is not None and gpu.model else UNKNOWN_MODEL


class ShowbackPending:
    """Showback amounts not yet in the database, as plain lists (one tick adds thousands)."""

    def __init__(self, prices: PriceTable) -> None:
        self.prices = prices
        self._pending: dict[ShowbackKey, list[float]] = {}

    def acc(self, day: str, owner: Owner, model: str) -> list[float]:
        """The pending amounts of (day, owner, model) at the configured rate."""
        key = ShowbackKey(day, owner.team, owner.user, model, self.prices.rate, self.prices.currency)
        acc = self._pending.get(key)
        if acc is None:
            acc = self._pending[key] = [0.0] * 7
        return acc

    def add(self, day: str, owner: Owner, model: str, column: int, amount: float) -> None:
        self.acc(day, owner, model)[column] += amount

    def amounts(self) -> dict[ShowbackKey, ShowbackAmounts]:
        return {k: ShowbackAmounts(*v) for k, v in self._pending.items()}

    def clear(self) -> None:
        """Forget what is pending (once it is in the database: a failed flush keeps it)."""
        self._pending = {}

    def held(
        self,
        day: str,
        hours: float,
        prev: datetime,
        obs: Observation,
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
    ) -> None:
        """Each GPU with a utilisation sample newer than ``prev`` was held (by its workload, or by
        nobody) for ``hours``, priced at its rate; its measured power is charged too."""
        # Owners by number (an int hashes in C, an Owner in Python): a tick sees 10,000s of GPUs.
        owners: list[Owner] = [NOBODY]
        number: dict[tuple[str, str], int] = {(NOBODY.user, NOBODY.team): 0}
        holder: dict[str, int] = {}
        for w in workloads.values():
            n = number.setdefault((w.owner.user, w.owner.team), len(owners))
            if n == len(owners):
                owners.append(w.owner)
            holder.update(dict.fromkeys(w.gpu_uuids, n))
        find, default_price = gpus.get, self.prices.default_per_hour
        # Sums per (owner, model) first, multiplied by the hours once.
        sums: dict[tuple[int, str], list[float]] = {}
        for uuid, at, util, power in map(_SAMPLE_FIELDS, obs.samples):
            if util is None or at <= prev:
                continue  # no data this tick is not use
            gpu = find(uuid)
            if gpu is None:
                model, price = UNKNOWN_MODEL, default_price
            else:
                model, price = gpu.model or UNKNOWN_MODEL, gpu.price_per_hour
                if price <= 0:
                    price = self.prices.price_for(gpu.model)
            key = (holder.get(uuid, 0), model)
            acc = sums.get(key)
            if acc is None:
                acc = sums[key] = [0.0, 0.0, 0.0, 0.0]
            acc[0] += 1.0
            acc[1] += 0.0 if util < 0 else 100.0 if util > 100 else util
            acc[2] += price
            if power is not None:
                acc[3] += power
        for (who, model), (count, util_sum, price_sum, watts) in sums.items():
            out = self.acc(day, owners[who], model)
            out[HELD] += count * hours
            out[USED] += util_sum / 100 * hours
            out[SPEND] += price_sum * hours
            kwh = watts / 1000 * hours
            out[KWH] += kwh
            out[POWER_COST] += self.prices.energy_cost(kwh)
