"""``ShowbackPending.held`` (numpy sums per owner, model and rate) gives exactly what adding
GPU by GPU gives: a GPU held by its workload's owner, a GPU two workloads hold by the later
one's, a free GPU by "(unallocated)", each at its node's price, power charged where measured.
Over ticks whose workloads and GPUs change (a changed GPU is priced again)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.cloud import Instance, Lifecycle
from gpusteward.domain.models import Gpu, Owner, Workload, WorkloadKind
from gpusteward.runtime.fresh_use import FreshUse
from gpusteward.runtime.showback_recorder import (
    HELD,
    KWH,
    NOBODY,
    POWER_COST,
    SPEND,
    UNKNOWN_MODEL,
    USED,
    NodeRates,
    ShowbackPending,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
UUIDS = [f"GPU-{i}" for i in range(6)]
PRICES = PriceTable(rate="reserved", electricity_per_kwh=0.17, per_model={"l4": 0.81})
MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA L4", ""]
OWNERS = [Owner("ana", "nlp"), Owner("bo", "nlp"), Owner("cy", "vision")]


def reference(
    p: ShowbackPending,
    day: str,
    hours: float,
    use: Mapping[str, tuple[float, float | None]],
    workloads: Mapping[str, Workload],
    gpus: Mapping[str, Gpu],
    rates: NodeRates,
) -> None:
    """GPU by GPU, in the order of ``use``, as ``held`` did before it summed in numpy."""
    holder: dict[str, Owner] = {}
    for w in workloads.values():
        holder.update(dict.fromkeys(w.gpu_uuids, w.owner))
    sums: dict[tuple[str, str, str, str], list[Any]] = {}
    for uuid, (util, power) in use.items():
        gpu = gpus.get(uuid)
        rate, price = rates.price(PRICES, gpu)
        model = (gpu.model or UNKNOWN_MODEL) if gpu is not None else UNKNOWN_MODEL
        owner = holder.get(uuid, NOBODY)
        acc = sums.setdefault((owner.user, owner.team, model, rate), [owner, 0.0, 0.0, 0.0, 0.0])
        acc[1] += 1.0
        acc[2] += util
        acc[3] += price
        if power is not None:
            acc[4] += power
    for (_, _, model, rate), (owner, count, util_sum, price_sum, watts) in sums.items():
        out = p.acc(day, owner, model, rate)
        out[HELD] += count * hours
        out[USED] += util_sum / 100 * hours
        out[SPEND] += price_sum * hours
        kwh = watts / 1000 * hours
        out[KWH] += kwh
        out[POWER_COST] += PRICES.energy_cost(kwh)


def _gpu(uuid: str, model: int, price: float) -> Gpu:
    return Gpu(uuid, f"node-{uuid[-1]}", int(uuid[-1]), MODELS[model], 81559, price_per_hour=price)


gpu_maps = st.fixed_dictionaries(
    {},
    optional={u: st.builds(_gpu, st.just(u), st.integers(0, 2), st.sampled_from([0.0, 2.5])) for u in UUIDS},
)
workload_maps = st.lists(
    st.builds(
        lambda i, gpus, owner: Workload(f"w{i}", WorkloadKind.POD, f"w{i}", OWNERS[owner], 1, gpus, T0),
        st.integers(0, 4),
        st.lists(st.sampled_from(UUIDS), max_size=3, unique=True).map(tuple),
        st.integers(0, 2),
    ),
    max_size=4,
).map(lambda ws: {w.id: w for w in ws})
uses = st.dictionaries(
    st.sampled_from(UUIDS),
    st.tuples(st.floats(0, 100), st.one_of(st.none(), st.floats(0, 700))),
)
ticks = st.lists(
    st.tuples(
        st.booleans(),
        workload_maps,
        st.booleans(),
        gpu_maps,
        uses,
        st.sampled_from([1 / 120, 0.5]),
        st.booleans(),  # the same GPUs' list as the tick before, other figures (UseReader's case)
    ),
    min_size=1,
    max_size=6,
)


@given(ticks)
@settings(max_examples=300, deadline=None)
def test_held_is_adding_gpu_by_gpu(tick_list: list[Any]) -> None:
    got, want = ShowbackPending(PRICES), ShowbackPending(PRICES)
    rates = NodeRates()
    workloads: dict[str, Workload] = {}
    gpus: dict[str, Gpu] = {}
    last: FreshUse | None = None
    for new_workloads, fresh_workloads, new_gpus, fresh_gpus, drawn, hours, same_gpus in tick_list:
        if new_workloads:
            workloads = fresh_workloads
        if new_gpus:  # the source's GPUs changed: new objects, perhaps another model or price
            gpus = fresh_gpus
        use = FreshUse.of(drawn)
        if same_gpus and last is not None:
            use = FreshUse(last.uuids, last.util[::-1] / 2, last.power[::-1])
        last = use
        got.held("2026-03-01", hours, use, workloads, gpus, rates)
        reference(want, "2026-03-01", hours, dict(use), workloads, gpus, rates)
        assert got.amounts() == want.amounts()
        assert list(got.amounts()) == list(want.amounts())  # the same rows, in the same order


class _Cloud:
    """Implements ``InstanceControl``'s reads: one instance per node, at a price set per call."""

    name = "test"

    def __init__(self) -> None:
        self.price = 8.0

    def instances(self) -> Mapping[str, Instance]:
        return {
            f"node-{k}": Instance(f"i-{k}", f"node-{k}", "p5", Lifecycle.SPOT, "running", T0, 2, self.price)
            for k in range(3)
        }

    def instance(self, instance_id: str) -> Instance | None:
        return None


def test_the_same_gpus_are_priced_again_when_their_nodes_rates_change() -> None:
    """The same GPUs' list and Gpu objects, but the cloud's prices changed between the ticks."""
    cloud = _Cloud()
    got, want = ShowbackPending(PRICES), ShowbackPending(PRICES)
    rates, gpus = NodeRates(cloud), {u: _gpu(u, 0, 0.0) for u in UUIDS}
    use = FreshUse.of(dict.fromkeys(UUIDS, (50.0, None)))
    for price in (8.0, 12.0):
        cloud.price = price
        rates.refresh(g.node for g in gpus.values())
        got.held("2026-03-01", 0.5, use, {}, gpus, rates)
        reference(want, "2026-03-01", 0.5, dict(use), {}, gpus, rates)
        assert got.amounts() == want.amounts()
