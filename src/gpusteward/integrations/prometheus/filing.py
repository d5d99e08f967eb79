"""What each series is, worked out once and kept across ticks: a series comes back with the same
labels every scrape (remote write: the same encoded bytes), so its GPU, holder and metric are
found once, not once per tick.

``Identities.identify`` answers the GPU and holder a label set names; ``Identities.filing`` adds
the metric and what the assembler does with the series' points (``Filing``), kept per encoded
key. The assembler files a whole remote-write drain from those at numpy speed when every key is
known (``assemble.Assembler.add_batch``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpusteward.integrations.prometheus.parse import (
    HOLDER,
    INFO,
    GpuIdentity,
    Holder,
    LabelMap,
    MetricSpec,
    identify_gpu,
    identify_holder,
)

#: ``Filing.kind``: the series names no metric read or no GPU; names both but has nothing to
#: fold (info, a process outside any pod or job); has points to fold.
NOT_OURS, NOTHING_TO_FOLD, FOLDS = range(3)


@dataclass(frozen=True, slots=True)
class Filing:
    """What filing one series means, whatever its points."""

    kind: int
    ident: GpuIdentity | None = None
    field: str = ""
    scale: float = 1.0
    holder: Holder | None = None
    #: The identity names a model and an index: no other series of its GPU adds to it.
    complete: bool = False


_NOT_OURS = Filing(NOT_OURS)


class Identities:
    """The GPU and holder each label set names, and each encoded key's ``Filing``. Emptied when
    it grows past ``max_entries`` (pods come and go; the next tick identifies what is still
    there)."""

    def __init__(self, max_entries: int = 1_000_000) -> None:
        self.max_entries = max_entries
        self._known: dict[bytes | frozenset[tuple[str, str]], tuple[GpuIdentity | None, Holder | None]] = {}
        self._filings: dict[bytes, Filing] = {}
        self._specs: Mapping[str, MetricSpec] | None = None  # what the filings were made for

    def identify(
        self,
        labels: Mapping[str, str],
        lm: LabelMap,
        ignore_pods: re.Pattern[str] | None,
        key: bytes | None = None,
    ) -> tuple[GpuIdentity | None, Holder | None]:
        """``key``: the labels as one bytes, the same every time they come (remote write's
        encoded labels); by default the whole label set, metric name included."""
        known_key: bytes | frozenset[tuple[str, str]] = frozenset(labels.items()) if key is None else key
        known = self._known.get(known_key)
        if known is None:
            if len(self._known) >= self.max_entries:
                self._known.clear()
            gpu_id = identify_gpu(labels, lm)
            holder = identify_holder(labels, lm, ignore_pods) if gpu_id else None
            known = self._known[known_key] = (gpu_id, holder)
        return known

    def filing(
        self,
        labels: Mapping[str, str],
        name: str,
        specs: Mapping[str, MetricSpec],
        lm: LabelMap,
        ignore_pods: re.Pattern[str] | None,
        key: bytes | None = None,
    ) -> Filing:
        """How series ``name`` with ``labels`` is filed (kept by ``key`` when one is given)."""
        if key is not None:
            known = self.known(specs).get(key)
            if known is not None:
                return known
        spec = specs.get(name)
        ident, holder = (None, None) if spec is None else self.identify(labels, lm, ignore_pods, key)
        if spec is None or ident is None:
            out = _NOT_OURS
        else:
            folds = spec.field != INFO and not (spec.field == HOLDER and holder is None)
            complete = bool(ident.model) and ident.index >= 0
            kind = FOLDS if folds else NOTHING_TO_FOLD
            out = Filing(kind, ident, spec.field, spec.scale, holder, complete)
        if key is not None:
            if len(self._filings) >= self.max_entries:
                self._filings.clear()
            self._filings[key] = out
        return out

    def known(self, specs: Mapping[str, MetricSpec]) -> dict[bytes, Filing]:
        """The filings kept, by key (emptied first if they were made for other specs)."""
        if specs is not self._specs:
            self._filings, self._specs = {}, specs
        return self._filings

    def __len__(self) -> int:
        return len(self._known)
