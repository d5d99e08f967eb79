"""Alert wake-ups, coalesced: at most one early tick per ``min_interval_s``.

Every firing alert used to wake the loop at once, so a noisy (or hostile) sender made the agent
tick hundreds of times a minute. Here the first alert wakes it; alerts in the following
``min_interval_s`` only add their reasons, and one more wake-up carries them all when that time
is over (the regular tick may see them first: the wake then finds nothing new, which is harmless).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Wakeable(Protocol):
    def set(self, reason: str = "") -> None: ...


def _timer(delay_s: float, fn: Callable[[], None]) -> None:
    t = threading.Timer(delay_s, fn)
    t.daemon = True  # never holds the process up at exit
    t.start()


class CoalescedWake:
    """``alert(reason)`` wakes ``wake`` now, or once when the current interval is over."""

    MAX_REASONS = 50

    def __init__(
        self,
        wake: Wakeable,
        min_interval_s: float,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        later: Callable[[float, Callable[[], None]], None] = _timer,
    ) -> None:
        self.wake = wake
        self.min_interval_s = min_interval_s
        self._monotonic = monotonic
        self._later = later
        self._lock = threading.Lock()
        self._held: list[str] = []
        self._dropped = 0
        self._next = float("-inf")  # when the next early tick may start
        self._scheduled = False

    def alert(self, reason: str) -> bool:
        """Note ``reason``; True when the loop was woken now, False when it waits for the interval."""
        with self._lock:
            self._hold(reason)
            now = self._monotonic()
            if now >= self._next:
                self._fire(now)
                return True
            if not self._scheduled:
                self._scheduled = True
                self._later(self._next - now, self._deferred)
            return False

    def _hold(self, reason: str) -> None:
        if reason in self._held:
            return
        if len(self._held) < self.MAX_REASONS:
            self._held.append(reason)
        else:
            self._dropped += 1

    def _fire(self, now: float) -> None:
        reasons, self._held = self._held, []
        if self._dropped:
            reasons.append(f"and {self._dropped} more alert reason(s)")
            self._dropped = 0
        self._next = now + self.min_interval_s
        self.wake.set("; ".join(r for r in reasons if r))

    def _deferred(self) -> None:
        with self._lock:
            self._scheduled = False
            if self._held or self._dropped:
                self._fire(self._monotonic())
