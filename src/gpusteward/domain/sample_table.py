"""Samples as columns: what a source that reads arrays (a trace, a remote-write batch) hands over
without building one ``Sample`` object per GPU per slot.

A ``SampleTable`` is a ``Sequence[Sample]``, so any consumer can read it row by row (the rows
are built on first use); the tick's hot consumers (the window's ingest, the ledger's use and
power) read its columns instead. Row ``i`` is GPU ``uuids[i]`` at ``at_s[i]`` (epoch seconds),
its fields in ``columns`` by ``Sample`` field name: NaN there is ``None`` in the row (the
source could not measure it), and a field with no column is ``None`` in every row.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Sample, utc

FloatArray = npt.NDArray[np.floating]
_A = TypeVar("_A", bound=npt.NDArray[Any])
#: ``Sample``'s measured fields, in its order (after ``gpu_uuid`` and ``at``).
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Sample))[2:]


class SampleTable(Sequence[Sample]):
    """Rows of samples held as columns (see the module docstring). Immutable by convention: the
    arrays are made read-only."""

    __slots__ = ("_rows", "_times", "at_s", "columns", "uuids")

    def __init__(
        self, uuids: Sequence[str], at_s: npt.ArrayLike, columns: Mapping[str, npt.ArrayLike]
    ) -> None:
        n = len(uuids)
        self.uuids: Sequence[str] = uuids
        self.at_s: npt.NDArray[np.float64] = _frozen(np.asarray(at_s, dtype=np.float64))
        if self.at_s.shape != (n,):
            raise ValueError(f"at_s has shape {self.at_s.shape}, expected ({n},)")
        cols: dict[str, FloatArray] = {}
        for name, values in columns.items():
            if name not in FIELDS:
                raise ValueError(f"{name!r} is not a Sample field (one of {', '.join(FIELDS)})")
            arr = np.asarray(values)
            if arr.dtype.kind != "f":
                arr = arr.astype(np.float64)
            if arr.shape != (n,):
                raise ValueError(f"column {name} has shape {arr.shape}, expected ({n},)")
            cols[name] = _frozen(arr)
        self.columns: Mapping[str, FloatArray] = cols
        self._rows: tuple[Sample, ...] | None = None
        self._times: tuple[list[datetime], npt.NDArray[np.intp]] | None = None

    @classmethod
    def of(cls, samples: Sequence[Sample]) -> SampleTable:
        """``samples`` as a table: itself if it is one, else its columns (a field no sample has
        gets no column)."""
        if isinstance(samples, SampleTable):
            return samples
        rows = tuple(samples)
        columns: dict[str, FloatArray] = {}
        for name in FIELDS:
            vals = [getattr(s, name) for s in rows]
            if vals.count(None) < len(vals):
                columns[name] = np.array([np.nan if v is None else v for v in vals], dtype=np.float64)
        table = cls([s.gpu_uuid for s in rows], [s.at.timestamp() for s in rows], columns)
        table._rows = rows
        return table

    @classmethod
    def concat(cls, tables: Sequence[SampleTable]) -> SampleTable:
        """The rows of ``tables``, in order (a field missing from one is NaN in its rows)."""
        if len(tables) == 1:
            return tables[0]
        names = list(dict.fromkeys(k for t in tables for k in t.columns))
        columns = {
            k: np.concatenate([t.columns.get(k, np.full(len(t), np.nan)) for t in tables]) for k in names
        }
        uuids = [u for t in tables for u in t.uuids]
        return cls(uuids, np.concatenate([t.at_s for t in tables]) if tables else [], columns)

    def column(self, name: str) -> FloatArray | None:
        """The values of field ``name`` (NaN: not measured), or None where no row has one."""
        return self.columns.get(name)

    def times(self) -> tuple[list[datetime], npt.NDArray[np.intp]]:
        """The distinct times of the rows as their ``Sample.at``, and each row's index into them
        (a table's rows mostly share a few times: each is converted once, then kept)."""
        if self._times is None:
            distinct, inverse = np.unique(self.at_s, return_inverse=True)
            self._times = [utc(t) for t in distinct.tolist()], inverse.reshape(-1).astype(np.intp)
        return self._times

    def newer_than(self, prev: datetime) -> npt.NDArray[np.bool_]:
        """Which rows are newer than ``prev``, compared as their ``Sample.at`` would be."""
        times, inverse = self.times()
        return np.array([t > prev for t in times], dtype=np.bool_)[inverse]

    def latest(self, name: str) -> dict[str, float]:
        """Per GPU, the value of field ``name`` in its last row that has one (as
        ``{s.gpu_uuid: v for s in rows if v is not None}`` would give)."""
        col = self.columns.get(name)
        if col is None:
            return {}
        has = np.flatnonzero(~np.isnan(col))
        return dict(zip(map(self.uuids.__getitem__, has.tolist()), col[has].tolist(), strict=True))

    def rows(self) -> tuple[Sample, ...]:
        """Every row as a ``Sample``, built once."""
        if self._rows is None:
            n = len(self)
            # Every field in Sample's order, positionally (keywords cost more per row); tolist()
            # gives Python floats and NaN becomes None (v != v only for NaN).
            values = [
                itertools.repeat(None, n)
                if (c := self.columns.get(k)) is None
                else [None if v != v else v for v in c.tolist()]
                for k in FIELDS
            ]
            times, inverse = self.times()
            self._rows = tuple(map(Sample, self.uuids, map(times.__getitem__, inverse.tolist()), *values))
        return self._rows

    def __len__(self) -> int:
        return len(self.uuids)

    @overload
    def __getitem__(self, i: int) -> Sample: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Sample]: ...
    def __getitem__(self, i: int | slice) -> Sample | Sequence[Sample]:
        return self.rows()[i]

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.rows())

    def __repr__(self) -> str:
        return f"SampleTable({len(self)} rows, columns {sorted(self.columns)})"


def latest(samples: Sequence[Sample], name: str) -> dict[str, float]:
    """Per GPU, the value of field ``name`` in its last sample that has one."""
    if isinstance(samples, SampleTable):
        return samples.latest(name)
    out: dict[str, float] = {}
    for s in samples:
        v = getattr(s, name)
        if v is not None:
            out[s.gpu_uuid] = v
    return out


def _frozen(a: _A) -> _A:
    """A read-only view of ``a`` (the caller's own array stays as it was)."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a
