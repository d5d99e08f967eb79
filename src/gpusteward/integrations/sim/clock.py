"""A clock that only moves when told to, so a simulated day runs in seconds."""

from __future__ import annotations

from datetime import datetime, timedelta


class SimClock:
    """Implements ``gpusteward.domain.ports.Clock``; ``sleep`` advances time instead of waiting."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self._now = start
        self._mono = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        """Seconds advanced since creation; never decreases, even when ``set`` goes back."""
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("cannot advance by a negative duration")
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def set(self, at: datetime) -> None:
        """Jump to ``at`` (wall time may go back; monotonic time only moves forward)."""
        if at.tzinfo is None:
            raise ValueError("at must be timezone-aware")
        self._mono += max(0.0, (at - self._now).total_seconds())
        self._now = at
