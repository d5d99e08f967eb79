"""Each GPU's name in messages (``node-3/gpu5``), remembered by object from one tick to the next.

A message's ``{gpu}`` names every GPU a finding tripped on: ~15,000 a tick at 100,000 GPUs, where
formatting each name again took ~4 ms. ``Gpu`` is frozen and the runtime hands back the same
object while nothing about a GPU changes, so a name is kept per object. Each entry holds its
``Gpu``, so no other object can take its ``id`` while the entry lives. The kept names are dropped
once they outnumber twice the fleet (a source that builds new objects every tick), so memory
follows the fleet, not its history.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence

from gpusteward.domain.models import Gpu


class GpuNames:
    """``of(uuids, gpus, fleet)``: each GPU's ``display``, formatted only for objects not seen before."""

    def __init__(self) -> None:
        # One (names, objects) pair, replaced whole when dropped: a reader on another thread
        # (the web's rule preview) finds a name only after the object that keeps its id unique.
        self._kept: tuple[dict[int, str], dict[int, Gpu]] = ({}, {})
        #: Names formatted afresh over this memo's life (tests read it).
        self.computed = 0

    def of(self, uuids: Sequence[str], gpus: Sequence[Gpu | None], fleet: int) -> list[str]:
        """Per position, ``gpus[i].display``, or ``uuids[i]`` where the GPU is unknown (None).
        ``fleet``: how many GPUs the caller knows, which bounds what is kept."""
        names, objects = self._kept
        keys = list(map(id, gpus))
        out: list[str | None] = list(map(names.get, keys))
        if not any(map(operator.is_, out, itertools.repeat(None))):
            return out  # type: ignore[return-value]  # every name was kept
        if len(names) > 2 * fleet:
            names, objects = {}, {}
            self._kept = (names, objects)
        for i in [i for i, name in enumerate(out) if name is None]:
            g = gpus[i]
            if g is None:
                out[i] = uuids[i]
                continue
            objects[keys[i]] = g  # first: a name is only ever read beside its object
            names[keys[i]] = out[i] = g.display
            self.computed += 1
        return out  # type: ignore[return-value]  # every None was replaced


#: The memo messages use: one per process, shared by every tick.
NAMES = GpuNames()
