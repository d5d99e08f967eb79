"""The showback part of the ledger recorder (``runtime.ledger_recorder``): per day, team, owner,
GPU model and rate, the GPU-hours held (unheld GPUs: "(unallocated)"), used, wasted, reclaimed;
the held hours' spend at the GPU's price, the measured power's cost. Amounts wait here until the
recorder flushes them with the rest of the ledger.

A GPU's rate is its node's: where the cloud instance behind the node is known (``NodeRates``, from
the integration's ``instances``), the instance's lifecycle (on-demand, reserved, spot) and the price
table's price for it; elsewhere the configured ``cost.rate`` and the GPU's own price.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping
from operator import is_, is_not, itemgetter

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.cost import PriceTable, Rate
from gpusteward.analysis.holdings import LAYOUTS, Layout
from gpusteward.domain.cloud import InstanceControl, Lifecycle
from gpusteward.domain.errors import ExecutionError, SourceError
from gpusteward.domain.models import Gpu, Owner, Workload
from gpusteward.domain.records import ShowbackAmounts, ShowbackKey
from gpusteward.policy.instances import match_nodes
from gpusteward.runtime.fresh_use import FreshUse

log = logging.getLogger(__name__)

NOBODY = Owner("(unallocated)")
UNKNOWN_MODEL = "unknown"
#: A GPU's price entry: the Gpu priced, its (model, rate) number, its price per GPU-hour.
_Priced = tuple[Gpu | None, int, float]
_Figures = tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]  # per GPU: (model, rate) number, price
_GPU, _KIND, _PRICE = itemgetter(0), itemgetter(1), itemgetter(2)
#: No entry yet: its Gpu is never the one known (a fresh object), so it is priced.
_UNPRICED: _Priced = (Gpu("-", "-", -1, "-", 0), -1, 0.0)
# Showback amounts in a pending list, in ShowbackAmounts' field order.
HELD, USED, WASTED, RECLAIMED, SPEND, KWH, POWER_COST = range(7)


_RATE_OF: Mapping[Lifecycle, Rate] = {
    Lifecycle.ON_DEMAND: "on-demand",
    Lifecycle.RESERVED: "reserved",
    Lifecycle.SPOT: "spot",
}


def model_of(uuid: str, gpus: Mapping[str, Gpu]) -> str:
    gpu = gpus.get(uuid)
    return gpu.model if gpu is not None and gpu.model else UNKNOWN_MODEL


class NodeRates:
    """Each node's rate, from the lifecycle of the cloud instance behind it (none without
    ``control``). Read once a tick; when the cloud cannot be read, the last map read is kept (a
    node's lifecycle does not change while its instance lives) and the failure is logged once."""

    def __init__(self, control: InstanceControl | None = None) -> None:
        self.control = control
        #: Rate by the cluster's node name; a node not here is priced at the configured rate.
        self.by_node: dict[str, Rate] = {}
        #: A GPU-hour at the instance's own price (its price per hour over its GPUs), where the
        #: cloud gives one: what the team pays and what a stop saves; else the price table's.
        self.gpu_price: dict[str, float] = {}
        self._failing = False

    def refresh(self, node_names: Iterable[str]) -> None:
        if self.control is None:
            return
        try:
            found = self.control.instances()
        except (SourceError, ExecutionError) as e:
            if not self._failing:
                log.warning("showback keeps the last known node rates: cannot read the instances: %s", e)
            self._failing = True
            return
        if self._failing:
            log.info("showback reads the instances' rates again")
        self._failing = False
        matched = match_nodes(found, sorted(set(node_names)))
        self.by_node = {node: _RATE_OF[inst.lifecycle] for node, inst in matched.items()}
        self.gpu_price = {
            node: inst.price_per_hour / inst.gpus
            for node, inst in matched.items()
            if inst.price_per_hour > 0 and inst.gpus > 0
        }

    def price(self, prices: PriceTable, gpu: Gpu | None) -> tuple[Rate, float]:
        """The rate and price of one GPU-hour of ``gpu`` (None: a GPU never described)."""
        if gpu is None:
            return prices.rate, prices.default_per_hour
        rate = self.by_node.get(gpu.node)
        if rate is not None:
            own = self.gpu_price.get(gpu.node)
            return rate, own if own is not None else prices.price(gpu.model, rate)
        return prices.rate, gpu.price_per_hour if gpu.price_per_hour > 0 else prices.price_for(gpu.model)


class ShowbackPending:
    """Showback amounts not yet in the database, as plain lists (one tick adds thousands)."""

    def __init__(self, prices: PriceTable) -> None:
        self.prices = prices
        self._pending: dict[ShowbackKey, list[float]] = {}
        # The same lists by a plain tuple of the key's parts: a dataclass key costs several times
        # as much to build and hash, and a tick looks one up per finding.
        self._by_parts: dict[tuple[str, str, str, str, Rate], list[float]] = {}
        #: Per GPU uuid: the Gpu it was priced as, its (model, rate) number and its price.
        self._priced: dict[str, _Priced] = {}
        self._rates_seen: tuple[object, object] = (None, None)
        #: (model, rate) pairs -> their numbers, in number order.
        self._kinds: dict[tuple[str, Rate], int] = {}
        self._held_by: tuple[Layout, dict[str, int], list[Owner]] | None = None
        self._who_of: tuple[dict[str, int], list[str], npt.NDArray[np.intp]] | None = None
        #: The last tick's GPUs' list, price entries, Gpu objects read, and figures (``_prices``).
        self._prices_of: tuple[list[str], dict[str, _Priced], list[Gpu | None], _Figures] | None = None

    def acc(self, day: str, owner: Owner, model: str, rate: Rate) -> list[float]:
        """The pending amounts of (day, owner, model, rate)."""
        parts = (day, owner.team, owner.user, model, rate)
        acc = self._by_parts.get(parts)
        if acc is None:
            key = ShowbackKey(day, owner.team, owner.user, model, rate, self.prices.currency)
            acc = self._pending.get(key)
            if acc is None:
                acc = self._pending[key] = [0.0] * 7
            self._by_parts[parts] = acc
        return acc

    def add(self, day: str, owner: Owner, model: str, rate: Rate, column: int, amount: float) -> None:
        self.acc(day, owner, model, rate)[column] += amount

    def amounts(self) -> dict[ShowbackKey, ShowbackAmounts]:
        return {k: ShowbackAmounts(*v) for k, v in self._pending.items()}

    def clear(self) -> None:
        """Forget what is pending (once it is in the database: a failed flush keeps it)."""
        self._pending, self._by_parts = {}, {}

    def held(
        self,
        day: str,
        hours: float,
        use: Mapping[str, tuple[float, float | None]],
        workloads: Mapping[str, Workload],
        gpus: Mapping[str, Gpu],
        rates: NodeRates,
    ) -> None:
        """Each GPU in ``use`` (``fresh_use``) was held (by its workload, or by nobody) for
        ``hours``, priced at its node's rate; its measured power is charged too."""
        fresh = FreshUse.of(use)
        uuids = fresh.uuids
        if not uuids:
            return
        holder, owners = self._holders(list(workloads.values()))
        kind, price = self._prices(uuids, gpus, rates)
        # Per GPU its group, (owner, model, rate) as one number; every step below is a C loop.
        who = self._who(holder, uuids)
        util, power = fresh.util, fresh.power  # power NaN: never measured
        kinds = list(self._kinds)  # by number
        groups, first, at = np.unique(who * len(kinds) + kind, return_index=True, return_inverse=True)
        # Sums per group first, multiplied by the hours once; bincount adds in the order of
        # ``use``, as adding GPU by GPU did: the same figures.
        k = groups.size
        count = np.bincount(at, minlength=k)
        util_sum = np.bincount(at, util, k)
        price_sum = np.bincount(at, price, k)
        watts = np.bincount(at, np.where(np.isnan(power), 0.0, power), k)
        for g in np.argsort(first, kind="stable").tolist():  # groups as first seen
            owner, number = divmod(int(groups[g]), len(kinds))
            model, rate = kinds[number]
            out = self.acc(day, owners[owner], model, rate)
            out[HELD] += int(count[g]) * hours
            out[USED] += float(util_sum[g]) / 100 * hours
            out[SPEND] += float(price_sum[g]) * hours
            kwh = float(watts[g]) / 1000 * hours
            out[KWH] += kwh
            out[POWER_COST] += self.prices.energy_cost(kwh)

    def _who(self, holder: dict[str, int], uuids: list[str]) -> npt.NDArray[np.intp]:
        """Each GPU's owner by number; kept while the holders and the GPUs' list are the same
        objects (``UseReader`` hands back the same list while the samples name the same GPUs)."""
        kept = self._who_of
        if kept is not None and kept[0] is holder and kept[1] is uuids:
            return kept[2]
        who = np.fromiter(map(holder.get, uuids, itertools.repeat(0)), np.intp, len(uuids))
        self._who_of = (holder, uuids, who)
        return who

    def _holders(self, workloads: list[Workload]) -> tuple[dict[str, int], list[Owner]]:
        """Each held GPU's owner, by number in the owners' list (0: nobody); a GPU two workloads
        hold is the later one's. Kept while the same workload objects come (``LAYOUTS``)."""
        layout = LAYOUTS.of(workloads)
        if self._held_by is not None and self._held_by[0] is layout:
            return self._held_by[1], self._held_by[2]
        owners: list[Owner] = [NOBODY]
        number: dict[tuple[str, str], int] = {(NOBODY.user, NOBODY.team): 0}
        holder: dict[str, int] = {}
        for w in layout.workloads:
            n = number.setdefault((w.owner.user, w.owner.team), len(owners))
            if n == len(owners):
                owners.append(w.owner)
            holder.update(dict.fromkeys(w.gpu_uuids, n))
        self._held_by = (layout, holder, owners)
        return holder, owners

    def _prices(self, uuids: list[str], gpus: Mapping[str, Gpu], rates: NodeRates) -> _Figures:
        """Each GPU's (model, rate) by number and price, from its price entry, priced again where
        its ``Gpu`` is another object than last time (a GPU is the same object while it is
        unchanged)."""
        priced = self._priced_by(rates)
        known = list(map(gpus.get, uuids))
        kept = self._prices_of
        # The same GPUs' list, entries and Gpu objects as last time: last time's figures.
        if kept is not None and kept[0] is uuids and kept[1] is priced and all(map(is_, known, kept[2])):
            return kept[3]
        hits = list(map(priced.get, uuids, itertools.repeat(_UNPRICED)))
        # Where the entry's Gpu is not the one known now (or there is none): C loops, not a
        # Python step per GPU.
        for i in list(itertools.compress(range(len(uuids)), map(is_not, map(_GPU, hits), known))):
            model, rate, price = self._price_of(known[i], rates)
            kind = self._kinds.setdefault((model, rate), len(self._kinds))
            hits[i] = priced[uuids[i]] = (known[i], kind, price)
        n = len(uuids)
        figures = np.fromiter(map(_KIND, hits), np.intp, n), np.fromiter(map(_PRICE, hits), np.float64, n)
        for column in figures:
            column.flags.writeable = False  # handed out again while the GPUs are unchanged
        self._prices_of = (uuids, priced, known, figures)
        return figures

    def _priced_by(self, rates: NodeRates) -> dict[str, _Priced]:
        """The price entries by GPU uuid, kept while the nodes' rates are the same maps."""
        seen = self._rates_seen
        refreshed = seen[0] is not rates.by_node or seen[1] is not rates.gpu_price
        if refreshed or len(self._priced) > 200_000:  # price again; GPUs gone long ago are dropped
            self._rates_seen, self._priced = (rates.by_node, rates.gpu_price), {}
        return self._priced

    def _price_of(self, gpu: Gpu | None, rates: NodeRates) -> tuple[str, Rate, float]:
        rate, price = rates.price(self.prices, gpu)
        return (gpu.model or UNKNOWN_MODEL) if gpu is not None else UNKNOWN_MODEL, rate, price
