"""What the pages read from the store, kept while the database's state is unchanged.

Twenty people opening the findings page during an incident ask the same questions of a state
that changes once a tick. Each request reads the database's stamp once (``store.stamp``: one
short query); a listing read under the same stamp is answered from memory, and a new stamp
drops everything read under the old one. Nothing is ever served stale: any write, by the loop,
another replica or this server, changes the stamp. Where the database has no stamp (SQLite),
every read goes to the store.

Only what the store answers is kept (listings, facets, the pause flag, the caller's token),
never what depends on the live inventory: that is added per request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar

from fastapi import Request

T = TypeVar("T")

#: Answers kept for one stamp at most (distinct pages and filters asked between two writes). A
#: page is up to 200 rows: this bounds the cache to some tens of MB when a crawler pages through
#: the audit log between two ticks; past it, answers are read and not kept.
MAX_ENTRIES = 128


class ReadCache:
    """Thread-safe; ``stamp`` is ``store.stamp.stamper``'s function, or None (no cache)."""

    def __init__(self, stamp: Callable[[], str] | None, *, max_entries: int = MAX_ENTRIES) -> None:
        self._stamp = stamp
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._at: str | None = None  # the stamp what is kept was read under
        self._at_seq = -1  # and when it was read, in the order of ``view`` calls
        self._seq = 0
        self._kept: dict[Hashable, Future[Any]] = {}  # done, or being read
        self.hits = self.misses = 0

    def view_for(self, request: Request) -> Reads:
        """The request's view, made on first use (kept in its state, which middleware shares).
        A request that may write reads the store throughout: what it shows after its own write
        must include it, and its stamp was read before."""
        view: Reads | None = getattr(request.state, "reads", None)
        if view is None or view._cache is not self:
            safe = request.method in ("GET", "HEAD")
            view = request.state.reads = self.view() if safe else Reads(self, None, 0)
        return view

    def view(self) -> Reads:
        """The reads of one request: the stamp is read once, here."""
        if self._stamp is None:
            return Reads(self, None, 0)
        stamp = self._stamp()
        with self._lock:
            self._seq += 1
            return Reads(self, stamp, self._seq)

    def _get(self, stamp: str | None, seq: int, key: Hashable, compute: Callable[[], T]) -> T:
        if stamp is None:
            return compute()
        with self._lock:
            if stamp != self._at and seq > self._at_seq:  # a write since: start over
                self._at, self._at_seq, self._kept = stamp, seq, {}
            # A request that read an older stamp answers from the store and keeps nothing.
            current = stamp == self._at
            found = self._kept.get(key) if current else None
            if found is None:
                self.misses += 1
                mine: Future[Any] = Future()
                if current and len(self._kept) < self.max_entries:
                    self._kept[key] = mine
            else:
                self.hits += 1
        if found is not None:
            # Kept, or being read by another request: after a write, twenty readers of the same
            # page wait for one read instead of making twenty.
            try:
                kept: T = found.result()
            except Exception:  # that read failed: this request tries its own (and its own error)
                return compute()
            return kept
        try:
            value = compute()
        except BaseException as e:
            mine.set_exception(e)
            with self._lock:
                if self._kept.get(key) is mine:
                    del self._kept[key]
            raise
        mine.set_result(value)
        return value


class Reads:
    """One request's view: ``get(key, compute)`` answers from what was read under its stamp."""

    def __init__(self, cache: ReadCache, stamp: str | None, seq: int) -> None:
        self._cache = cache
        self.stamp = stamp
        self._seq = seq

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``'s answer, kept for ``key`` until the state changes. It is shared between
        requests: callers must not change it."""
        return self._cache._get(self.stamp, self._seq, key, compute)


#: Every read goes to the store (tests, and callers outside a request).
DIRECT = ReadCache(None).view()


def reads_of(request: Request) -> Reads:
    """The request's view of the web app's cache (``WebContext.reads``, the auth's)."""
    cache: ReadCache = request.app.state.web.reads
    return cache.view_for(request)
