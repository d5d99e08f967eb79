"""What the Prometheus and remote-write sources keep of each GPU between ticks, slot by slot:
its holder, when that holder was set, when each holder started, and the GPU's newest sample time.

A slot newer than everything kept (the common case) sets all its GPUs at once; an older one (a
late remote-write sample, a refetched overlap) goes GPU by GPU. The times a whole slot sets wait
until read, and the next such slot of the same GPUs (the next scrape, the next tick) takes their
place: with the fold handing back the very holders mapping while nothing changed
(``cells.HeldMemo``), a steady slot costs no write per GPU.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from gpusteward.domain.models import utc
from gpusteward.integrations.prometheus.cells import Slot
from gpusteward.integrations.prometheus.parse import Holder

_ABSENT = object()  # a GPU with no holder known yet, not even None


class HolderBook:
    """``apply(slot)`` each slot; ``holders``, ``started``, ``holder_at`` and ``last_seen`` as
    the per-GPU rules leave them (tests/integrations/prometheus/test_source_apply.py)."""

    def __init__(self) -> None:
        self.holders: dict[str, Holder | None] = {}
        self.started: dict[str, datetime] = {}
        self._at: dict[str, float] = {}
        self._seen: dict[str, float] = {}
        # At least the newest time in ``holder_at`` and in ``last_seen``: a slot past them
        # sets all its GPUs' entries at once.
        self._holders_upto, self._seen_upto = -math.inf, 0.0
        # Such a slot's times, not yet written (see the module docstring).
        self._at_due: tuple[Mapping[str, Holder | None], float] | None = None
        self._seen_due: tuple[Sequence[str], npt.NDArray[np.float64]] | None = None
        # The holders mapping applied last, while ``holders`` still agrees with all of it.
        self._applied: Mapping[str, Holder | None] | None = None

    @property
    def holder_at(self) -> dict[str, float]:
        """When each GPU's holder was last set (the start of the slot that set it)."""
        if self._at_due is not None:
            holders, start_s = self._at_due
            self._at.update(dict.fromkeys(holders, start_s))
            self._at_due = None
        return self._at

    @property
    def last_seen(self) -> dict[str, float]:
        """Each GPU's newest sample time."""
        if self._seen_due is not None:
            uuids, times = self._seen_due
            self._seen.update(zip(uuids, times.tolist(), strict=True))
            self._seen_due = None
        return self._seen

    def forget(self, uuids: Sequence[str]) -> None:
        """GPUs gone: nothing of them kept."""
        for d in (self.last_seen, self.holders, self.holder_at):
            for uuid in uuids:
                d.pop(uuid, None)
        self._applied = None

    def apply(self, slot: Slot) -> bool:
        """Take in one slot's holders and sample times; True when a holder changed."""
        holders, start_s = slot.holders, slot.start_s
        if start_s >= self._holders_upto:  # slots come in time order: newer than every one kept
            changed = self._apply_newer(holders, start_s)
        else:
            changed, at = False, self.holder_at
            self._applied = None  # holders are changed GPU by GPU
            for uuid, holder in holders.items():
                if start_s >= at.get(uuid, -math.inf):
                    changed = changed or self.holders.get(uuid) != holder
                    self.holders[uuid], at[uuid] = holder, start_s
                    if holder is not None and holder.id not in self.started:
                        self.started[holder.id] = utc(start_s)
        uuids, times = slot.samples.uuids, slot.samples.at_s
        if times.size and times.min() > self._seen_upto:  # every row newer than any seen
            due = self._seen_due
            if due is not None and due[0] != uuids:  # other GPUs: the last ones' times first
                self._seen.update(zip(due[0], due[1].tolist(), strict=True))
            self._seen_due, self._seen_upto = (uuids, times), float(times.max())
        else:
            seen = self.last_seen
            for uuid, t in zip(uuids, times.tolist(), strict=True):
                if t > seen.get(uuid, 0.0):
                    seen[uuid] = t
            self._seen_upto = max(self._seen_upto, float(times.max(initial=0.0)))
        return changed

    def _apply_newer(self, holders: Mapping[str, Holder | None], start_s: float) -> bool:
        """A slot newer than every one kept: its GPUs' holders and times at once."""
        changed = False
        if holders is not self._applied:  # else the fold handed back the mapping applied last
            known, started = self.holders, self.started
            # The cached identities hand back the same Holder object: `is` settles most.
            olds, news = list(map(known.get, holders, itertools.repeat(_ABSENT))), holders.values()
            replaced = any(map(operator.is_not, olds, news))
            changed = replaced and any(
                (None if o is _ABSENT else o) != h for o, h in zip(olds, news, strict=True) if o is not h
            )
            if replaced:  # else every GPU has the very same holder already
                known.update(holders)
            # Every holder it had already was started when it came: only a change brings new ones.
            for h in news if changed else ():
                if h is not None and h.id not in started:
                    started[h.id] = utc(start_s)
            if self._at_due is not None:  # another mapping's GPUs: their times are written first
                self._at.update(dict.fromkeys(self._at_due[0], self._at_due[1]))
            self._applied = holders
        self._at_due, self._holders_upto = (holders, start_s), start_s
        return changed
