"""A batch of per-workload usage amounts as the rows the ledger's upsert writes.

The recorder hands every running workload's use to the ledger each flush (25,000 rows at
100,000 GPUs). Built as ``UsageKey``/``UsageAmounts`` objects only to be taken apart again into
the upsert's tuples, they cost more than the upsert's own Python work; ``UsageRows`` carries
the tuples and is read as the port's mapping only where one is wanted (the memory store).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gpusteward.domain.records import UsageAmounts, UsageKey

#: day, workload id, user, team, GPUs requested, GPUs held, held GPU-hours, busy GPU-hours,
#: GPUs advised idle: the key's fields, then the amounts', in order.
UsageRow = tuple[str, str, str, str, int, int, float, float, int]


def usage_row(key: UsageKey, a: UsageAmounts) -> UsageRow:
    """One (day, workload)'s key and amounts as a row (``UsageRows`` reads rows back as these)."""
    return (
        key.day,
        key.workload_id,
        a.user,
        a.team,
        a.gpus_requested,
        a.gpus_held,
        a.held_gpu_hours,
        a.busy_gpu_hours,
        a.advise_idle_gpus,
    )


class UsageRows(Mapping[UsageKey, UsageAmounts]):
    """``rows``, one per (day, workload): read as a mapping, each row is its key and amounts."""

    def __init__(self, rows: list[UsageRow]) -> None:
        self.rows = rows
        self._mapping: dict[UsageKey, UsageAmounts] | None = None

    def _as_mapping(self) -> dict[UsageKey, UsageAmounts]:
        if self._mapping is None:
            self._mapping = {UsageKey(r[0], r[1]): UsageAmounts(*r[2:]) for r in self.rows}
        return self._mapping

    def __getitem__(self, key: UsageKey) -> UsageAmounts:
        return self._as_mapping()[key]

    def __iter__(self) -> Iterator[UsageKey]:
        return iter(self._as_mapping())

    def __len__(self) -> int:
        return len(self.rows)
