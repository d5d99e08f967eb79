"""The cycle collector held off while a tick runs.

A tick makes one short-lived object per sample, series, GPU and row (about 100,000 at 10,000
GPUs), and they all live until the tick ends. With the collector on, CPython's young
collections run every 700 allocations, find them alive, promote them, and that promotion starts
a full collection of the whole heap (the source's label caches, the workloads, the database
layer) about once a tick: 250-300 ms of a 10,000-GPU tick spent proving that live objects are
alive. Held off, the collector runs once after the tick, over what is left, on the first
allocation after it. Reference counting frees everything else as before; only garbage in
cycles waits, for one tick.
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
