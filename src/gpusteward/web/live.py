"""Live data for the web app: a steward whose window holds the last minutes of every GPU.

``run --web`` hands the loop's own steward (``Attached``). ``serve`` runs beside a loop in
another process, so ``Probe`` fills a window of its own from the source's history (the
simulator, Prometheus range queries) at most once per tick interval. It only observes: it
never ticks, decides or acts, and writes nothing to the state store.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Protocol

from gpusteward.domain.errors import StewardError
from gpusteward.domain.ports import Clock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings
from gpusteward.runtime.loop import Steward
from gpusteward.store.db import StateStore

log = logging.getLogger(__name__)


class Live(Protocol):
    #: Why there is no live data (shown on the pages), or "".
    error: str

    def steward(self) -> Steward | None: ...


class Attached:
    """The running loop's steward (``run --web``): read-only use from the web thread."""

    error = ""

    def __init__(self, steward: Steward) -> None:
        self._steward = steward

    def steward(self) -> Steward | None:
        return self._steward


class Nothing:
    """No live data (tests, or a source without history)."""

    def __init__(self, error: str = "no live data: start with `gpusteward run --web`") -> None:
        self.error = error

    def steward(self) -> Steward | None:
        return None


class Probe:
    """A window of its own, filled from the configured source's history, refreshed lazily."""

    def __init__(self, settings: Settings, store: StateStore, clock: Clock) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.error = ""
        self._lock = threading.Lock()
        self._steward: Steward | None = None
        self._at: datetime | None = None

    def steward(self) -> Steward | None:
        now = self.clock.now()
        refresh = timedelta(seconds=self.settings.tick_seconds)
        with self._lock:
            if self._at is not None and now - self._at < refresh:
                return self._steward
            self._at = now
            try:
                steward, adapters = build_steward(
                    self.settings, clock=self.clock, store=self.store, backfill=False
                )
                start = now - timedelta(minutes=self.settings.store.window_minutes)
                for obs in adapters.history(start, now, self.settings.tick_seconds):
                    steward.workloads = steward.ingest(obs)
            except StewardError as e:
                self.error = f"no live data from source {self.settings.source.name}: {e}"
                log.warning("%s", self.error)
                self._steward = None
                return None
            self.error = ""
            self._steward = steward
            return steward
