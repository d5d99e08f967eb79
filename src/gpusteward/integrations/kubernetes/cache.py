"""An informer-style cache: list once, then watch from that resourceVersion, re-list on resync.

A daemon thread lists the objects, then watches with ``timeout_seconds`` equal to the resync
period; when a watch ends it re-lists if the resync is due (a full list replaces the cache,
so a missed delete cannot linger), else resumes from the last resourceVersion seen (bookmarks
included). A 410 Gone re-lists at once; any other failure backs off (1 s doubling to 30 s) and
marks the cache unhealthy until a list or watch succeeds again, so the source refuses to
report pods it may no longer see rightly: no data is not idleness.

The official client's ``SharedInformer`` only exists in its newest releases and gives no
"synced" or "healthy" signal, which the source needs; the watch itself is the client's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpusteward.domain.errors import SourceError
from gpusteward.domain.ports import Clock, SystemClock
from gpusteward.integrations.kubernetes.kubeapi import JsonObj, Reply, WatchExpired

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 30.0


def uid_key(obj: Mapping[str, Any]) -> str:
    m = obj.get("metadata") or {}
    return str(m.get("uid") or f"{m.get('namespace', '')}/{m.get('name', '')}")


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class WatchCache:
    """The objects of one resource, kept current by a background list + watch."""

    def __init__(
        self,
        what: str,
        list_fn: Callable[[], Reply],
        watch_fn: Callable[[str, int], Iterator[JsonObj]],
        *,
        resync_s: float,
        clock: Clock | None = None,
    ) -> None:
        self.what = what
        self._list = list_fn
        self._watch = watch_fn
        self.resync_s = resync_s
        self.clock = clock or SystemClock()
        self._objects: dict[str, JsonObj] = {}
        self._rv = ""
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._synced = False
        self._error = ""
        #: Counters, for tests and metrics.
        self.lists = 0
        self.watches = 0

    # -- reading ------------------------------------------------------------------------

    def snapshot(self) -> list[JsonObj]:
        with self._lock:
            return list(self._objects.values())

    @property
    def resource_version(self) -> str:
        with self._lock:
            return self._rv

    def check(self, wait_s: float) -> None:
        """Raise ``SourceError`` unless the cache holds a current view (waits for the first list)."""
        with self._lock:
            if not self._synced:
                self._lock.wait_for(lambda: self._synced or bool(self._error), timeout=wait_s)
            if not self._synced:
                raise SourceError(f"kubernetes {self.what}: not listed yet: {self._error or 'waiting'}")
            if self._error:
                raise SourceError(f"kubernetes {self.what}: watch failing: {self._error}")

    def wait_for(self, predicate: Callable[[list[JsonObj]], bool], timeout_s: float) -> bool:
        """Until ``predicate(objects)`` holds (tests, and ``restore``'s wait for the effect)."""
        with self._lock:
            return self._lock.wait_for(lambda: predicate(list(self._objects.values())), timeout=timeout_s)

    # -- the loop -----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.what}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # A daemon thread: it ends at its next event or its watch's server timeout. Waiting for
        # that would hold up shutdown for nothing.
        self._thread = None

    def relist(self) -> None:
        reply = self._list()
        if not reply.ok:
            raise SourceError(f"list {self.what}: HTTP {reply.status}: {reply.message}")
        items = [i for i in reply.body.get("items") or [] if isinstance(i, dict)]
        rv = str((reply.body.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            self._objects = {uid_key(i): i for i in items}
            self._rv = rv
            self._synced = True
            self._error = ""
            self.lists += 1
            self._lock.notify_all()

    def _apply(self, event: JsonObj) -> None:
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            return
        with self._lock:
            rv = _rv(obj)
            if rv:
                self._rv = rv
            if kind in ("ADDED", "MODIFIED"):
                self._objects[uid_key(obj)] = obj
            elif kind == "DELETED":
                self._objects.pop(uid_key(obj), None)
            self._error = ""
            self._lock.notify_all()

    def _fail(self, error: str) -> None:
        with self._lock:
            self._error = error
            self._lock.notify_all()

    def _run(self) -> None:
        backoff = 1.0
        need_list = True
        last_list = 0.0
        while not self._stop.is_set():
            try:
                if need_list or self.clock.monotonic() - last_list >= self.resync_s:
                    self.relist()
                    need_list, last_list = False, self.clock.monotonic()
                with self._lock:
                    self.watches += 1
                    rv = self._rv
                # The server ends the watch at the resync time even when nothing happens.
                left = self.resync_s - (self.clock.monotonic() - last_list)
                for event in self._watch(rv, max(1, int(left))):
                    if self._stop.is_set():
                        return
                    if event.get("type") == "ERROR":
                        raise SourceError(f"watch {self.what}: {event.get('object')}")
                    self._apply(event)
                backoff = 1.0
            except WatchExpired as e:
                log.info("kubernetes %s: %s; listing again", self.what, e)
                need_list = True
            except SourceError as e:
                log.warning("kubernetes %s: %s; retrying in %.0f s", self.what, e, backoff)
                self._fail(str(e))
                need_list = True
                self._stop.wait(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
            except Exception as e:  # a bug must not kill the thread silently
                log.exception("kubernetes %s: watch loop failed", self.what)
                self._fail(f"{type(e).__name__}: {e}")
                need_list = True
                self._stop.wait(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
