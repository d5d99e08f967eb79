"""The loop around the tick: tick every interval until stopped, woken early by a receiver.

SIGTERM lets the current tick finish, then the loop exits (and leadership is released so the
other replica takes over at once). A tick that fails as a whole (the database is down) is
retried with exponential backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpusteward.domain.errors import ConfigError
from gpusteward.runtime.logs import log_context, new_tick_id
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.tick_report import TickReport

log = logging.getLogger(__name__)


class StopFlag:
    """Set by SIGTERM/SIGINT; the loop finishes its tick and returns."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self, *_: object) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        return self._event.wait(seconds)


class Wake:
    """Lets another thread (the Alertmanager receiver) start the next tick at once."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reasons: list[str] = []

    def set(self, reason: str = "") -> None:
        with self._lock:
            self._reasons = [*self._reasons[-99:], reason]
        self._event.set()

    def take(self) -> list[str]:
        """The reasons given since the last call; clears the wake-up."""
        with self._lock:
            reasons, self._reasons = self._reasons, []
            self._event.clear()
        return reasons

    def wait(self, seconds: float, stop: StopFlag) -> bool:
        """Until woken (True), stopped or ``seconds`` passed. Polls ``stop``: a signal
        handler sets it without waking this event."""
        deadline = time.monotonic() + seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._event.wait(min(left, 0.2)):
                return True
        return False


def run_forever(
    steward: Steward,
    interval_s: float,
    stop: StopFlag,
    *,
    max_ticks: int | None = None,
    real_sleep: bool = True,
    wake: Wake | None = None,
    on_tick: Callable[[Steward, TickReport, float], None] | None = None,
) -> int:
    """Tick every ``interval_s`` until ``stop`` is set; returns the number of ticks run.

    ``wake`` starts the next tick early; ``on_tick(steward, report, seconds)`` runs after
    each tick on this thread (metrics)."""
    ticks = 0
    failures = 0
    while not stop.is_set() and (max_ticks is None or ticks < max_ticks):
        started = steward.clock.monotonic()
        reasons = wake.take() if wake is not None else []
        if reasons:
            log.info("tick now: %s", "; ".join(r for r in reasons if r)[:500])
        # The tick's id on its summary and failure lines too, not only on those inside the tick.
        with log_context(tick=new_tick_id()):
            try:
                report = steward.tick()
                log.info(
                    "tick: %d gpus, %d workloads, %d findings, %d actions%s",
                    report.gpus,
                    report.workloads,
                    len(report.findings),
                    len(report.actions),
                    " (paused)" if report.paused else "",
                )
                if on_tick is not None:
                    on_tick(steward, report, steward.clock.monotonic() - started)
                failures = 0
            except ConfigError:
                raise  # the settings cannot work (a window too large for memory): retrying cannot help
            except Exception:
                # A tick that fails as a whole (the database is down, say): no action ran without its
                # record; retry after 2, 4, 8 … intervals, at most backoff_max_s.
                failures += 1
                log.exception("tick failed (%d in a row)", failures)
        ticks += 1
        wait = interval_s
        if failures:
            wait = min(max(interval_s, steward.backoff_max_s), interval_s * 2.0 ** min(failures, 16))
        remaining = wait - (steward.clock.monotonic() - started)
        if remaining > 0 and (max_ticks is None or ticks < max_ticks):
            if real_sleep and wake is not None:
                wake.wait(remaining, stop)
            elif real_sleep:
                stop.wait(remaining)
            else:
                steward.clock.sleep(remaining)
    try:
        steward.settle()  # before leadership goes: the ledger's pending amounts
    except Exception:
        log.exception("the ledger's amounts since its last write are lost: not written on stopping")
    if steward.leadership is not None:
        try:
            steward.leadership.release()  # the other replica takes over at once
        except Exception:
            log.exception("could not release %s leadership", steward.leadership.name)
    return ticks
