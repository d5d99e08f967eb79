"""What every interruption watch shares: poll no more often than asked, and after a failure wait
(doubling, up to a limit) with one clear log line, returning nothing meanwhile: a watch that
cannot read its endpoint reports no notice, so nothing is acted on from what it could not see."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from datetime import datetime

from gpusteward.domain.cloud import InterruptionNotice
from gpusteward.domain.ports import Clock

log = logging.getLogger(__name__)


class WatchFailed(Exception):
    """One poll could not read its endpoint (its message says which and why)."""


class PollingWatch(ABC):
    """Implements ``InterruptionWatch``: rate limit and backoff around ``read``."""

    #: Where its notices come from (``InterruptionNotice.via``).
    via: str = ""

    def __init__(self, clock: Clock, *, poll_s: float, backoff_max_s: float) -> None:
        self.clock = clock
        self.poll_s = poll_s
        self.backoff_max_s = backoff_max_s
        self.failures = 0
        self._next_at = float("-inf")

    def poll(self, now: datetime) -> list[InterruptionNotice]:
        mono = self.clock.monotonic()
        if mono < self._next_at:
            return []
        try:
            notices = self.read(now)
        except WatchFailed as e:
            self.failures += 1
            wait = min(self.backoff_max_s, self.poll_s * 2.0 ** min(self.failures, 16))
            self._next_at = mono + wait
            log.warning("interruption watch %s: %s; nothing acted on, next try in %.0f s", self.via, e, wait)
            return []
        if self.failures:
            log.info("interruption watch %s answers again after %d failure(s)", self.via, self.failures)
        self.failures = 0
        self._next_at = mono + self.poll_s
        return notices

    @abstractmethod
    def read(self, now: datetime) -> list[InterruptionNotice]:
        """The notices in force now; ``WatchFailed`` when the endpoint cannot be read."""


class Watches:
    """Several watches as one (the node's metadata service and the cluster's queue)."""

    def __init__(self, *watches: PollingWatch) -> None:
        self.watches = watches

    def poll(self, now: datetime) -> list[InterruptionNotice]:
        return [n for w in self.watches for n in w.poll(now)]
