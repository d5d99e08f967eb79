"""``PrometheusSource._apply`` and ``_absorb_gpus``, against the per-GPU rules they keep.

``_apply``: a slot newer than everything kept takes its GPUs' holders and
sample times at once; an older one (a late remote-write sample, a refetched overlap) goes GPU by
GPU. Both must leave the state the per-GPU rules of the reference below leave, in any order."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.domain.models import Gpu, WorkloadKind, utc
from gpusteward.domain.sample_table import SampleTable
from gpusteward.integrations.prometheus.assemble import Assembler
from gpusteward.integrations.prometheus.cells import Slot
from gpusteward.integrations.prometheus.parse import GpuIdentity, Holder
from gpusteward.integrations.prometheus.source import PrometheusSource

UUIDS = [f"GPU-{i}" for i in range(6)]
HOLDERS = [None, *(Holder(WorkloadKind.POD, f"ns/pod-{i}", f"pod-{i}", "ns") for i in range(3))]


class Reference:
    """The rules ``_apply`` keeps, one GPU at a time (as the source did before its fast path)."""

    def __init__(self) -> None:
        self.holders: dict[str, Holder | None] = {}
        self.holder_at: dict[str, float] = {}
        self.started: dict[str, datetime] = {}
        self.last_seen: dict[str, float] = {}

    def apply(self, slot: Slot) -> bool:
        changed = False
        for uuid, holder in slot.holders.items():
            if slot.start_s >= self.holder_at.get(uuid, -math.inf):
                changed = changed or self.holders.get(uuid) != holder
                self.holders[uuid], self.holder_at[uuid] = holder, slot.start_s
                if holder is not None and holder.id not in self.started:
                    self.started[holder.id] = utc(slot.start_s)
        for uuid, t in zip(slot.samples.uuids, slot.samples.at_s.tolist(), strict=True):
            if t > self.last_seen.get(uuid, 0.0):
                self.last_seen[uuid] = t
        return changed


def _copy(h: Holder | None) -> Holder | None:
    """An equal Holder that is another object: equality, not identity, must decide."""
    return None if h is None else Holder(h.kind, h.id, h.name, h.namespace)


slot_st = st.tuples(
    st.integers(0, 8),  # the slot, 10 s each
    st.lists(st.tuples(st.sampled_from(UUIDS), st.sampled_from(HOLDERS), st.booleans()), max_size=6),
    st.lists(st.integers(0, 9), min_size=6, max_size=6),  # each row's second within the slot
    st.one_of(st.none(), st.integers(0, 7)),  # an earlier slot's very mapping and GPUs (HeldMemo's)
    st.booleans(),  # the times read after it (a read writes the times that wait)
)


@settings(max_examples=400, deadline=None)
@given(st.lists(slot_st, max_size=8), st.lists(st.integers(0, 100), max_size=3))
def test_apply_matches_the_per_gpu_rules_in_any_order(slots: list[Any], forgets: list[int]) -> None:
    """Slots in any order, the same mapping again or not, GPUs forgotten between them."""
    src = PrometheusSource(cast(Any, None), interval_s=10, window_s=600)
    ref = Reference()
    earlier: list[Slot] = []
    for n, (k, rows, offsets, again, look) in enumerate(slots):
        start = 1_000_000.0 + 10 * k
        per_gpu = {u: (h, copy) for u, h, copy in rows}  # one row per GPU, as the assembler gives
        uuids = sorted(per_gpu)
        holders = {u: _copy(h) if copy else h for u, (h, copy) in per_gpu.items()}
        if again is not None and earlier:
            last = earlier[again % len(earlier)]
            uuids, holders = list(last.samples.uuids), cast(dict[str, Any], last.holders)
        at = [start + offsets[i] for i in range(len(uuids))]
        slot = Slot(start, SampleTable(uuids, at, {}), holders)
        earlier.append(slot)
        assert src._apply(slot) == ref.apply(slot)
        if n in forgets:  # a GPU silent for a window: forgotten by both
            gone = UUIDS[n % len(UUIDS)]
            src._book.forget([gone])
            for d in (ref.holders, ref.holder_at, ref.last_seen):
                d.pop(gone, None)
        assert src._holders == ref.holders
        assert src._started == ref.started
        if look or n == len(slots) - 1:
            assert src._holder_at == ref.holder_at
            assert src._last_seen == ref.last_seen


def test_a_mapping_applied_again_after_a_change_is_applied_in_full() -> None:
    """The fold hands back the mapping it applied last while nothing changed; a GPU forgotten,
    or a late slot that set another holder, since then: that mapping is applied again in full."""
    src = PrometheusSource(cast(Any, None), interval_s=10, window_s=600)
    held = {"GPU-0": HOLDERS[1], "GPU-1": HOLDERS[2]}
    at = SampleTable(["GPU-0", "GPU-1"], [1_000_001.0, 1_000_001.0], {})
    src._apply(Slot(1_000_000.0, at, held))
    src._book.forget(["GPU-0"])
    src._apply(Slot(1_000_010.0, at, held))
    assert src._holders == held
    late = SampleTable(["GPU-1"], [999_991.0], {})
    assert src._apply(Slot(999_990.0, late, {"GPU-1": HOLDERS[3]})) is False  # older: ignored
    src._holder_at.pop("GPU-1")  # as if never set: the late slot now takes it
    assert src._apply(Slot(999_990.0, late, {"GPU-1": HOLDERS[3]})) is True
    assert src._apply(Slot(1_000_020.0, at, held)) is True
    assert src._holders == held
    assert src._holder_at == {"GPU-0": 1_000_020.0, "GPU-1": 1_000_020.0}


def _absorb_reference(kept: dict[str, Gpu], asm: Assembler) -> None:
    """``_absorb_gpus`` before its fast path: each GPU built, then compared."""
    for uuid in asm.gpus:
        gpu = asm.gpu(uuid)
        old = kept.get(uuid)
        if old is not None and old.memory_total_mib > gpu.memory_total_mib:
            gpu = Gpu(gpu.uuid, gpu.node, gpu.index, gpu.model, old.memory_total_mib)
        kept[uuid] = old if old == gpu else gpu


ident_st = st.tuples(
    st.sampled_from(["", "node-a", "node-b"]),
    st.integers(-1, 1),
    st.sampled_from(["", "H100"]),
    st.sampled_from([None, 0.0, 40960.0, 81559.0]),  # memory total: None = not seen this tick
    st.booleans(),  # a new identity object, where the cached identities would hand back the last
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(UUIDS), ident_st, max_size=6), max_size=6))
def test_absorb_gpus_keeps_the_same_objects_as_building_each(ticks: list[dict[str, Any]]) -> None:
    src = PrometheusSource(cast(Any, None), interval_s=10, window_s=600)
    ref: dict[str, Gpu] = {}
    listed = src._gpu_list()
    made: dict[tuple[str, str, int, str], GpuIdentity] = {}
    for tick in ticks:
        asm = Assembler(src.specs, src.labels, 10.0)
        for uuid, (node, index, model, mem, fresh) in tick.items():
            ident = GpuIdentity(uuid, node, index, model)
            key = (uuid, node, index, model)
            asm.gpus[uuid] = made[key] = ident if fresh or key not in made else made[key]
            if mem is not None:
                asm.mem_total[uuid] = mem
        before = dict(src._gpus)
        src._absorb_gpus(asm)
        _absorb_reference(ref, asm)
        assert src._gpus == ref
        # An unchanged GPU stays the very object it was (the loop prices it once).
        for uuid, gpu in src._gpus.items():
            if uuid in before and before[uuid] == ref[uuid]:
                assert gpu is before[uuid]
        # The observation's GPUs are the same tuple while none changed (the loop skips them).
        unchanged = src._gpus.keys() == before.keys() and all(src._gpus[u] is g for u, g in before.items())
        prev, listed = listed, src._gpu_list()
        assert listed == tuple(ref.values())
        assert (listed is prev) == unchanged


def test_a_gpu_forgotten_leaves_the_observed_gpus() -> None:
    src = PrometheusSource(cast(Any, None), interval_s=10, window_s=600)
    asm = Assembler(src.specs, src.labels, 10.0)
    for uuid in ("GPU-a", "GPU-b"):
        asm.gpus[uuid] = GpuIdentity(uuid, "n1", 0, "H100")
    src._absorb_gpus(asm)
    src._last_seen.update({"GPU-a": 100.0, "GPU-b": 500.0})
    assert [g.uuid for g in src._gpu_list()] == ["GPU-a", "GPU-b"]
    src._forget(before_s=200.0)
    assert [g.uuid for g in src._gpu_list()] == ["GPU-b"]
