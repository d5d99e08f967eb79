"""The remote-write source's fold: each drain becomes slots as the ``Assembler`` makes them, but
nothing is worked out again from tick to tick.

The receiver numbers its series and keeps the numbers from drain to drain (``Batch.numbers``),
so what each series is (its GPU, field, scale and holder) is kept here by that number, as
arrays, and the GPUs keep their numbers and uuid order too. A tick then only gathers: a fold of
the drain at numpy speed, with Python only for series and GPUs not seen before. When the
receiver numbers its series again (it forgets the silent ones every ``forget_after_s / 4``),
the next drain says so (``Batch.epoch``) and this starts over.

Each tick ``gpus`` holds only the GPUs the book must take in: new ones, those whose identity or
memory total changed, and those the book forgot (``forgotten``) and now hears from again.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from gpusteward.integrations.prometheus.assemble import GpuView, merged, valid_readings
from gpusteward.integrations.prometheus.cells import Filed, HeldMemo, Numbering, Slot, fold
from gpusteward.integrations.prometheus.filing import FOLDS
from gpusteward.integrations.prometheus.parse import HOLDER, INFO, GpuIdentity, Holder
from gpusteward.integrations.prometheus.remote_write.receiver import Batch

IntArray = npt.NDArray[np.intp]


class Fold(GpuView):
    """Folds remote-write drains into slots, keeping what each series and GPU is between ticks.

    The same slots, holders, identities and memory totals as an ``Assembler`` given the drain.
    """

    def _begin(self) -> None:
        self._fields = sorted({s.field for s in self.specs.values()} - {HOLDER, INFO})
        self._field_of = {f: i for i, f in enumerate(self._fields)}
        self._held = HeldMemo()  # the holders' mappings, the same objects from tick to tick
        self._start(-1)

    def _start(self, epoch: int) -> None:
        self._epoch = epoch
        # Per receiver number: whether it was worked out, its GPU's number (-1: it names no
        # metric read or no GPU), whether it has points to fold, its field (-1: it names only a
        # holder), scale, whether it names a holder, whether its identity is complete (names a
        # model and an index), its identity's number and its holder.
        self._known = np.zeros(0, dtype=np.bool_)
        self._gpu = np.zeros(0, dtype=np.intp)
        self._folds = np.zeros(0, dtype=np.bool_)
        self._field = np.zeros(0, dtype=np.intp)
        self._scale = np.zeros(0)
        self._names = np.zeros(0, dtype=np.bool_)
        self._complete = np.zeros(0, dtype=np.bool_)
        self._ident = np.zeros(0, dtype=np.intp)
        self._holder: list[Holder | None] = []
        # Identities by number (equal identities share one: the book tells them by ``is``), and
        # the numbers of those that name a MIG parent.
        self._idents: list[GpuIdentity] = []
        self._instances: list[int] = []
        self._ident_number: dict[GpuIdentity, int] = {}
        # Per GPU number: its uuid, the identity the book was last given (-1: none, or the book
        # forgot it) and the largest memory total read.
        self._uuids: list[str] = []
        self._gpu_number: dict[str, int] = {}
        self._numbering: Numbering | None = None
        self._given = np.zeros(0, dtype=np.intp)
        self._mem = np.zeros(0)

    def take(self, batch: Batch) -> list[Slot]:
        """The slots of one drain, oldest first; ``gpus`` and ``mem_total`` then hold what the
        book must take in."""
        if batch.epoch != self._epoch:
            self._start(batch.epoch)
        self.gpus, self.mem_total = {}, {}
        nums = batch.numbers
        if not nums.size:
            return []
        self._grow(int(nums.max()) + 1)
        fresh = np.flatnonzero(~self._known[nums])
        if fresh.size:
            self._work_out(batch, fresh)
        gpu = self._gpu[nums]
        seen, idents = self._identities_seen(gpu, nums)
        dropped = self._mig_parents(seen, idents)
        counts = np.diff(batch.bounds)
        point_series = np.repeat(np.arange(nums.size), counts)
        points = np.repeat(self._folds[nums], counts)
        filed = Filed(
            point_series[points],
            batch.t_s[points],
            valid_readings(batch.values[points]),
            gpu,
            self._field[nums],
            self._scale[nums],
            self._names[nums],
        )
        if self._numbering is None:
            self._numbering = Numbering.of(self._uuids)
        holder = self._holder
        slots, (mem_gpus, totals) = fold(
            filed,
            self._fields,
            self._numbering,
            dropped,
            lambda sids: list(map(holder.__getitem__, nums[sids].tolist())),
            self.interval_s,
            self._held,
        )
        self._hand_over(seen, idents, dropped, mem_gpus, totals)
        return slots

    def forgotten(self, uuids: Iterable[str]) -> None:
        """The book forgot these GPUs: each is handed over again if it comes back, with only
        the memory totals read from then on."""
        for uuid in uuids:
            g = self._gpu_number.get(uuid)
            if g is not None and self._given[g] >= 0:
                self._given[g], self._mem[g] = -1, 0.0

    def _grow(self, n: int) -> None:
        """Room for receiver numbers below ``n``."""
        extra = n - self._known.size
        if extra <= 0:
            return
        extra = max(extra, self._known.size, 1024)  # doubling: a few copies, however many come
        self._known = np.append(self._known, np.zeros(extra, dtype=np.bool_))
        self._gpu = np.append(self._gpu, np.full(extra, -1, dtype=np.intp))
        self._folds = np.append(self._folds, np.zeros(extra, dtype=np.bool_))
        self._field = np.append(self._field, np.full(extra, -1, dtype=np.intp))
        self._scale = np.append(self._scale, np.ones(extra))
        self._names = np.append(self._names, np.zeros(extra, dtype=np.bool_))
        self._complete = np.append(self._complete, np.zeros(extra, dtype=np.bool_))
        self._ident = np.append(self._ident, np.full(extra, -1, dtype=np.intp))
        self._holder.extend([None] * extra)

    def _work_out(self, batch: Batch, fresh: IntArray) -> None:
        """What the series at batch positions ``fresh`` are (the first drain: all of them)."""
        nums, ours = batch.numbers[fresh], []
        rows: list[tuple[int, bool, int, float, bool, bool, int]] = []
        for r in nums.tolist():
            labels = batch.labels_of[r]
            f = self._seen.filing(
                labels, labels.get("__name__", ""), self.specs, self.lm, self.ignore_pods, batch.key_of[r]
            )
            if f.ident is not None:
                ours.append(r)
                self._holder[r] = f.holder
                rows.append(
                    (
                        self._number_gpu(f.ident.uuid),
                        f.kind == FOLDS,
                        self._field_of.get(f.field, -1),
                        f.scale,
                        f.holder is not None,
                        f.complete,
                        self._number_ident(f.ident),
                    )
                )
        self._known[nums] = True
        if ours:
            gpu, folds, field, scale, names, complete, ident = zip(*rows, strict=True)
            self._gpu[ours], self._folds[ours], self._field[ours] = gpu, folds, field
            self._scale[ours], self._names[ours], self._complete[ours] = scale, names, complete
            self._ident[ours] = ident
        added = len(self._uuids) - self._given.size
        if added:
            self._given = np.append(self._given, np.full(added, -1, dtype=np.intp))
            self._mem = np.append(self._mem, np.zeros(added))

    def _number_gpu(self, uuid: str) -> int:
        g = self._gpu_number.get(uuid)
        if g is None:
            g = self._gpu_number[uuid] = len(self._uuids)
            self._uuids.append(uuid)
            self._numbering = None
        return g

    def _number_ident(self, ident: GpuIdentity) -> int:
        n = self._ident_number.get(ident)
        if n is None:
            n = self._ident_number[ident] = len(self._idents)
            self._idents.append(ident)
            if ident.parent:
                self._instances.append(n)
        return n

    def _identities_seen(self, gpu: IntArray, nums: IntArray) -> tuple[IntArray, IntArray]:
        """The GPUs this drain names, as first named, and each one's identity's number: that of
        its first series, blanks filled as the ``Assembler`` fills them where it lacks a model
        or an index."""
        ours = np.flatnonzero(gpu >= 0)
        numbers, first = np.unique(gpu[ours], return_index=True)
        by_first = np.argsort(first, kind="stable")
        seen, first = numbers[by_first], ours[first[by_first]]
        idents = self._ident[nums[first]]
        lacking = np.flatnonzero(~self._complete[nums[first]])
        if lacking.size:  # each such GPU's series in drain order, merged one after another
            series = ours[np.argsort(gpu[ours], kind="stable")]
            bounds = np.searchsorted(gpu[series], seen[lacking])
            for i, lo in zip(lacking.tolist(), bounds.tolist(), strict=True):
                ident = None
                for k in series[lo:].tolist():
                    if gpu[k] != seen[i]:
                        break
                    ident = merged(ident, self._idents[int(self._ident[nums[k]])])
                assert ident is not None
                idents[i] = self._number_ident(ident)
        return seen, idents

    def _mig_parents(self, seen: IntArray, idents: IntArray) -> npt.NDArray[np.bool_]:
        """Per GPU number: a MIG parent named by an instance seen in this drain."""
        dropped = np.zeros(len(self._uuids), dtype=np.bool_)
        if self._instances:
            for n in np.intersect1d(idents, self._instances).tolist():
                if (p := self._gpu_number.get(self._idents[n].parent)) is not None:
                    dropped[p] = True
        return dropped

    def _hand_over(
        self,
        seen: IntArray,
        idents: IntArray,
        dropped: npt.NDArray[np.bool_],
        mem_gpus: IntArray,
        totals: npt.NDArray[np.float64],
    ) -> None:
        """``gpus`` and ``mem_total``: the GPUs seen whose identity the book was not given, or
        whose memory total grew; in the order first seen."""
        before = self._mem[seen]
        np.fmax.at(self._mem, mem_gpus, totals)
        hand = ~dropped[seen] & ((idents != self._given[seen]) | (self._mem[seen] > before))
        for g, n in zip(seen[hand].tolist(), idents[hand].tolist(), strict=True):
            uuid = self._uuids[g]
            self.gpus[uuid] = self._idents[n]
            if self._mem[g] > 0:
                self.mem_total[uuid] = float(self._mem[g])
        self._given[seen[hand]] = idents[hand]
