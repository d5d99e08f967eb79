"""What each GPU did since the ledger's last tick: its mean utilisation and power over the samples
newer than that tick, for the ledger's use (``usage_pending``) and showback (``showback_recorder``).

A tick's samples are mostly a ``SampleTable`` (the Prometheus, remote-write and replay sources),
and so is the answer: columns, one row per GPU in the order the samples first name it. Numbering
the samples' GPUs is the costly part (a dictionary step per sample), and the same GPUs come in
the same order tick after tick (a source folds each slot in uuid order), so ``UseReader`` keeps
the last numbering and, while the samples name the same GPUs in the same order, hands back the
same ``uuids`` list: what its readers key their own per-GPU look-ups by.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from operator import attrgetter, itemgetter

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Sample
from gpusteward.domain.sample_table import SampleTable

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
_SAMPLE_FIELDS = attrgetter("gpu_uuid", "at", "gpu_util_pct", "power_w")
_UTIL = itemgetter(0)


class FreshUse(Mapping[str, tuple[float, float | None]]):
    """Per GPU with a fresh utilisation sample: ``util`` (0-100) and ``power`` (watts, NaN where
    never measured), the means of its samples, row ``i`` GPU ``uuids[i]``. As a mapping: uuid ->
    (utilisation, power or None). Immutable by convention."""

    __slots__ = ("_index", "power", "util", "uuids")

    def __init__(self, uuids: list[str], util: FloatArray, power: FloatArray) -> None:
        self.uuids = uuids
        self.util = util
        self.power = power
        self._index: dict[str, int] | None = None

    @classmethod
    def of(cls, use: Mapping[str, tuple[float, float | None]]) -> FreshUse:
        """``use`` as columns (itself if it is some)."""
        if isinstance(use, FreshUse):
            return use
        values = list(use.values())
        util = np.fromiter(map(_UTIL, values), np.float64, len(values))
        power = np.array([np.nan if p is None else p for _, p in values], dtype=np.float64)
        return cls(list(use), util, power)

    def index(self) -> dict[str, int]:
        """Each GPU's row."""
        if self._index is None:
            self._index = dict(zip(self.uuids, itertools.count()))
        return self._index

    def __getitem__(self, uuid: str) -> tuple[float, float | None]:
        i = self.index()[uuid]
        watts = float(self.power[i])
        return float(self.util[i]), None if watts != watts else watts

    def __iter__(self) -> Iterator[str]:
        return iter(self.uuids)

    def __len__(self) -> int:
        return len(self.uuids)

    def __repr__(self) -> str:
        return f"FreshUse({len(self)} GPUs)"


class UseReader:
    """``read(samples, prev)``: the ``FreshUse`` of the samples newer than ``prev``. A GPU sampled
    several times since the last tick (10 s scrapes, a 30 s tick) is held once, not once per
    sample. Keeps the last table's numbering of its GPUs (see the module docstring)."""

    def __init__(self) -> None:
        self._named: list[str] | None = None  # the fresh rows' uuids, as the last table named them
        self._numbering: tuple[list[str], IntArray, FloatArray] | None = None

    def read(self, samples: Sequence[Sample], prev: datetime) -> FreshUse:
        if isinstance(samples, SampleTable):
            return self._table(samples, prev)
        return FreshUse.of(_row_use(samples, prev))

    def _table(self, table: SampleTable, prev: datetime) -> FreshUse:
        """The same figures as ``_row_use`` over the table's rows, summed in the same order."""
        util = table.column("gpu_util_pct")
        if util is None:
            return FreshUse([], np.zeros(0), np.zeros(0))
        rows = np.flatnonzero(~np.isnan(util) & table.newer_than(prev))
        every = rows.size == len(table.uuids)  # no row left out: the uuids as they are
        named = table.uuids if every else list(map(table.uuids.__getitem__, rows.tolist()))
        used = np.clip(util[rows].astype(np.float64), 0.0, 100.0)
        col = table.column("power_w")
        power = np.full(rows.size, np.nan) if col is None else col[rows].astype(np.float64)
        uuids, codes, samples = self._number(named)
        if codes.size == 0 or samples.size == codes.size:  # one sample per GPU since the last tick
            return FreshUse(uuids, used, power)
        # np.bincount adds in row order, as _row_use does: the same sums to the last bit.
        n = len(uuids)
        measured = ~np.isnan(power)
        readings = np.bincount(codes[measured], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0: never measured, NaN
            watts = np.bincount(codes[measured], power[measured], n) / readings
        return FreshUse(uuids, np.bincount(codes, used, n) / samples, watts)

    def _number(self, named: Sequence[str]) -> tuple[list[str], IntArray, FloatArray]:
        """The GPUs as first named, each row's GPU by number and each GPU's samples: the last
        ones while ``named`` is what the last table named (C comparisons, no dictionary)."""
        if self._numbering is not None and self._named == named:
            return self._numbering
        first: dict[str, int] = {}
        at_first = np.fromiter(map(first.setdefault, named, itertools.count()), np.intp, len(named))
        number = np.empty(len(named), dtype=np.intp)
        number[np.fromiter(first.values(), np.intp, len(first))] = np.arange(len(first))
        codes = number[at_first]
        self._named = list(named)
        self._numbering = (list(first), codes, np.bincount(codes, minlength=len(first)).astype(np.float64))
        return self._numbering


def fresh_use(samples: Sequence[Sample], prev: datetime) -> FreshUse:
    """``UseReader().read``: without the numbering kept from a table before."""
    return UseReader().read(samples, prev)


def _row_use(samples: Sequence[Sample], prev: datetime) -> dict[str, tuple[float, float | None]]:
    out: dict[str, tuple[float, float | None]] = {}
    fresh = 0
    for uuid, at, util, power in map(_SAMPLE_FIELDS, samples):
        if util is not None and at > prev:
            out[uuid] = (0.0 if util < 0 else 100.0 if util > 100 else util, power)
            fresh += 1
    return out if fresh == len(out) else _means(samples, prev)


def _means(samples: Sequence[Sample], prev: datetime) -> dict[str, tuple[float, float | None]]:
    sums: dict[str, list[float]] = {}
    for uuid, at, util, power in map(_SAMPLE_FIELDS, samples):
        if util is None or at <= prev:
            continue
        acc = sums.setdefault(uuid, [0.0, 0.0, 0.0, 0.0])
        acc[0] += 0.0 if util < 0 else 100.0 if util > 100 else util
        acc[1] += 1
        if power is not None:
            acc[2] += power
            acc[3] += 1
    return {u: (a[0] / a[1], a[2] / a[3] if a[3] else None) for u, a in sums.items()}
