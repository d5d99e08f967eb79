"""The cycle collector held off while a tick runs.

A tick makes one short-lived object per sample, series, GPU and row (about 100,000 at 10,000
GPUs), and they all live until the tick ends. With the collector on, CPython's young
collections run every 700 allocations, find them alive, promote them, and that promotion starts
a full collection of the whole heap (the source's label caches, the workloads, the database
layer) about once a tick: 250-300 ms of a 10,000-GPU tick spent proving that live objects are
alive. Held off, the collector runs once after the tick, over what is left, on the first
allocation after it. Reference counting frees everything else as before; only garbage in
cycles waits, for one tick.

That collection still scans the whole heap, most of it made at start-up and alive for good;
``settled`` freezes that part once the loop is about to start.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def held_off() -> Iterator[None]:
    """Automatic cycle collection off inside; as it was on exit (a caller that turned it off
    itself keeps it off)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def freeze_start_up() -> None:
    """After start-up: one full collection, then what survived it (modules, settings, a
    backfill's caches, a replayed trace) is frozen, so that later collections scan only
    what the loop made since. At 10,000 GPUs a full collection of the start-up heap cost
    250-300 ms, and it still ran about once a tick, right after it."""
    gc.collect()
    gc.freeze()


@contextmanager
def settled() -> Iterator[None]:
    """``freeze_start_up``, unfrozen on exit (a test process, a backtest in a sweep, gets its
    heap back as it was)."""
    freeze_start_up()
    try:
        yield
    finally:
        gc.unfreeze()
