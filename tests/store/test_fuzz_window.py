"""Stateful fuzzing of the window store: random ticks, late samples, missing readings and GPUs
changing hands, checked after every step against a plain model: a GPU's window shows only samples
of its current holder from inside the window, and a missing reading is NaN, never 0.
``below_for_s``, ``watched_s`` and ``last``, whose newest and oldest slots the store keeps from
one look to the next (``NewestMarks``, ``OldestMarks``), are checked at random steps against the
same model, so that several ticks pass between looks; so are the mean, coverage, share below,
minimum and count, which read whole blocks of slots the store keeps between looks (``BlockSums``,
here of 3 slots so that a 10-slot window spans several)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpusteward.domain.models import Metric, Sample
from gpusteward.store.block_sums import BlockSums
from gpusteward.store.window import WindowStore

INTERVAL = 60.0
SLOTS = 10
GPUS = ["g0", "g1", "g2"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
UTIL = Metric.GPU_UTIL
THRESHOLD = 50.0


class WindowMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = WindowStore(SLOTS * INTERVAL, INTERVAL, metrics=(UTIL,))
        self.store.sums = BlockSums(block_slots=3)
        self.slot = 0
        self.holder: dict[str, str | None] = dict.fromkeys(GPUS)
        self.since: dict[str, int] = dict.fromkeys(GPUS, -(10**9))
        self.model: dict[str, dict[int, float]] = {g: {} for g in GPUS}

    @rule(
        step=st.integers(0, 12),
        samples=st.lists(
            st.tuples(st.sampled_from(GPUS), st.integers(0, 12), st.none() | st.floats(0, 100)), max_size=5
        ),
        holders=st.dictionaries(st.sampled_from(GPUS), st.sampled_from(["", "a", "b"]), max_size=3),
    )
    def tick(self, step: int, samples: list[tuple[str, int, float | None]], holders: dict[str, str]) -> None:
        self.slot += step
        now = T0 + timedelta(seconds=self.slot * INTERVAL)
        for g, h in holders.items():
            if self.holder[g] is not None and self.holder[g] != h:
                self.model[g].clear()
                self.since[g] = self.slot
            self.holder[g] = h
        for g, late, value in samples:
            s = self.slot - late
            if s > self.slot - SLOTS and s >= self.since[g]:
                if value is None:
                    self.model[g].pop(s, None)  # an unmeasured reading overwrites with NaN
                else:
                    self.model[g][s] = float(value)
        batch = [
            Sample(g, now - timedelta(seconds=late * INTERVAL), gpu_util_pct=v) for g, late, v in samples
        ]
        self.store.ingest(now, batch, holders or None)

    @rule()
    def below_for_matches_model(self) -> None:
        now_s = self.slot * INTERVAL
        view = self.store.view(T0 + timedelta(seconds=now_s))
        got = view.below_for_s(UTIL, THRESHOLD)
        watched, last = view.watched_s(UTIL), view.last(UTIL)
        for g in GPUS:
            i = view.index_of(g)
            kept = {s: v for s, v in self.model[g].items() if s > self.slot - SLOTS}
            if i is None or not kept:
                assert i is None or (math.isnan(got[i]) and math.isnan(watched[i])), (g, got[i], watched[i])
                assert i is None or math.isnan(last[i]), (g, last[i])
                continue
            assert float(last[i]) == float(np.float32(kept[max(kept)])), (g, last[i], kept)
            # Watched since the start of the oldest sample's interval (of its current holder).
            oldest = now_s - (min(kept) * INTERVAL - INTERVAL)
            assert math.isclose(float(watched[i]), max(oldest, 0.0), abs_tol=1e-6), (g, watched[i], kept)
            at_least = [s for s, v in kept.items() if v >= THRESHOLD]
            if at_least and max(at_least) == max(kept):
                want = 0.0
            elif at_least:
                want = now_s - max(at_least) * INTERVAL
            else:  # never at or above it: since the start of the oldest sample's interval
                want = now_s - (min(kept) * INTERVAL - INTERVAL)
            assert math.isclose(float(got[i]), max(want, 0.0), abs_tol=1e-6), (g, got[i], want, kept)

    @rule(slots=st.integers(1, SLOTS + 3), x=st.sampled_from([THRESHOLD, 0.5, 100.0]))
    def block_aggregates_match_model(self, slots: int, x: float) -> None:
        view = self.store.view(T0 + timedelta(seconds=self.slot * INTERVAL))
        d = slots * INTERVAL
        mean, cover, below = view.mean(UTIL, d), view.coverage(UTIL, d), view.fraction_below(UTIL, x, d)
        low = view.min(UTIL, d)
        for g in GPUS:
            i = view.index_of(g)
            if i is None:
                continue
            kept = [v for s, v in self.model[g].items() if s > self.slot - min(slots, SLOTS)]
            assert math.isclose(float(cover[i]), len(kept) / slots), (g, cover[i], kept, slots)
            if not kept:
                assert all(math.isnan(a[i]) for a in (mean, below, low)), g
                continue
            # The ring holds float32: compare with the model's values as stored.
            f32 = [float(np.float32(v)) for v in kept]
            assert math.isclose(float(mean[i]), math.fsum(f32) / len(f32), rel_tol=1e-9, abs_tol=1e-9)
            assert float(below[i]) == sum(v < x for v in f32) / len(f32), (g, below[i], kept, x)
            assert float(low[i]) == min(f32), (g, low[i], kept)

    @invariant()
    def window_matches_model(self) -> None:
        view = self.store.view(T0 + timedelta(seconds=self.slot * INTERVAL))
        got = view.max(UTIL, SLOTS * INTERVAL)
        for g in GPUS:
            i = view.index_of(g)
            if i is None:
                assert not self.model[g]
                continue
            kept = [v for s, v in self.model[g].items() if s > self.slot - SLOTS]
            if kept:
                assert math.isclose(float(got[i]), max(kept), rel_tol=1e-6, abs_tol=1e-4), (g, got[i], kept)
            else:
                assert math.isnan(got[i]), (g, got[i])  # missing is NaN, never 0


WindowMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
test_window_store_state_machine = WindowMachine.TestCase
