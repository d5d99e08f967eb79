"""The order a sender's series last came in, so that a request of series met before is read
without a look-up per series.

A Prometheus sends each shard's series in the same order scrape after scrape; only where its
requests are cut moves. So once a request's first series is found, the series that followed it
last time are the guess for the ones that follow it now. A guess is checked, not trusted: the
series' bytes must start with the guessed series' encoded labels and be exactly that long
before their sample (``walk._known`` checked the sample). A key is only ever learnt from a
request that was looked up, so a guess that holds is the very look-up it saves: the same bytes.

What it saves, per series: cutting its key out as new bytes, hashing them, and a probe of a
dict of every series (at 100,000 GPUs a miss in the CPU's caches nearly every time). Where the
guess fails the request is looked up as before and its order learnt.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.intp]
#: A series to skip (its metric is not read), and one whose fate is not known (no sample).
SKIP, UNKNOWN = -1, -2
#: Entries at most (about 100 bytes each, the keys shared with the receiver's): twice the
#: series a receiver skips at most, then a new order starts.
LIMIT = 2_000_000
#: Series per run under which a request counts as not in order: a run costs about what a
#: look-up of 30 series does.
_SERIES_PER_RUN = 32


class SeriesOrder:
    """Series in the order they last came, each with the receiver's number in ``epoch`` (or
    ``SKIP``). Written by the receiver under its lock; read by decodes on any thread: a reader
    sees the entries before ``len(keys)``, whose other columns are written first."""

    def __init__(self, epoch: int, limit: int = LIMIT) -> None:
        self.epoch = epoch
        self.limit = limit
        self.keys: list[bytes] = []
        self.numbers = np.empty(1024, dtype=np.intp)
        self.sizes = np.empty(1024, dtype=np.intp)
        self.at: dict[bytes, int] = {}  # each key's latest place in ``keys``

    def follow(self, series: list[bytes], cuts: IntArray) -> tuple[IntArray, list[bytes]] | None:
        """Each series' number (or ``SKIP``) and its key, if each run of the request is where
        the order puts it (``cuts``: each series' length before its sample); else None."""
        n = len(series)
        size = len(self.keys)  # first: the entries before it are complete
        keys, numbers, sizes, at = self.keys, self.numbers, self.sizes, self.at
        found = np.empty(n, dtype=np.intp)
        labels: list[bytes] = []
        k, runs = 0, 0
        while k < n:
            runs += 1
            start = at.get(series[k][: int(cuts[k])], size)
            m = min(n - k, size - start)
            if m <= 0 or runs > 4 + n // _SERIES_PER_RUN:
                return None
            guess = keys[start : start + m]
            same = sizes[start : start + m] == cuts[k : k + m]
            same &= np.fromiter(map(bytes.startswith, series[k : k + m], guess), dtype=np.bool_, count=m)
            # The first holds (its key was found whole), so each run moves on.
            j = m if same.all() else int(np.argmin(same))
            found[k : k + j] = numbers[start : start + j]
            labels += guess[:j]
            k += j
        if (found == UNKNOWN).any():
            return None
        return found, labels

    def full(self, n: int) -> bool:
        """No room for ``n`` more (a sender whose order keeps changing): the receiver starts a new
        order rather than clear this one under a reader."""
        return len(self.keys) + n > self.limit

    def learn(self, keys: list[bytes], numbers: IntArray) -> None:
        """Keys as a request brought them, and their numbers (``SKIP``, ``UNKNOWN``) now."""
        n, size = len(keys), len(self.keys)
        if size + n > self.numbers.size:  # new arrays: a reader keeps the ones it took
            grow = max(2 * self.numbers.size, size + n)
            self.numbers = np.concatenate([self.numbers[:size], np.empty(grow - size, dtype=np.intp)])
            self.sizes = np.concatenate([self.sizes[:size], np.empty(grow - size, dtype=np.intp)])
        self.numbers[size : size + n] = numbers
        self.sizes[size : size + n] = np.fromiter(map(len, keys), dtype=np.intp, count=n)
        self.at.update(zip(keys, range(size, size + n), strict=True))
        self.keys += keys  # last: what readers go by
