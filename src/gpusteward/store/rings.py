"""What a ``WindowView`` reads of the ``WindowStore`` it views, as a Protocol: the view and the
store then need not import each other."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import Metric
from gpusteward.store.block_sums import BlockSums
from gpusteward.store.slot_marks import NewestMarks, OldestMarks


class Rings(Protocol):
    """What a view reads of ``store.window.WindowStore`` (a Protocol, so the two modules do not
    import each other)."""

    interval_s: float
    window_s: float
    n_slots: int
    _rings: dict[Metric, npt.NDArray[np.float32]]
    #: Per GPU index, the first slot of its current holder's history (NO_SLOT: never changed):
    #: the store keeps no value older than it.
    _since: npt.NDArray[np.int64]
    marks: NewestMarks
    oldest: OldestMarks
    sums: BlockSums

    @property
    def uuids(self) -> tuple[str, ...]: ...

    @property
    def head_slot(self) -> int | None: ...

    def index_of(self, uuid: str) -> int | None: ...

    def lookup(self, uuids: list[str]) -> npt.NDArray[np.intp]: ...

    def holds_data(self, m: Metric) -> bool: ...

    def slot_of(self, at: datetime) -> int: ...
