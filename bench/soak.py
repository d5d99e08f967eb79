"""Soak: a simulated week of the real tick on PostgreSQL, with faults injected on a schedule.

The clock is simulated (a week runs in minutes); the database, the store, the window, the rules,
the policy and the runner are the real ones. Faults, each for a stretch of simulated time:

* ``source-down``: the source raises ``SourceError`` (its GPUs go stale; nothing is acted on);
* ``db-locked``: another session holds ``LOCK TABLE actions`` and the agent's writes time out;
* ``disk-full``: every store write fails with ``StoreError`` (injected at the store boundary:
  a real full disk cannot be made here without root on the database server);
* ``clock-step``: the wall clock jumps forward (NTP), the monotonic clock does not.

Checked at the end: the audit chain intact and complete, no idempotency key twice, no step twice
for a workload episode, every fault seen in the log and followed by a good tick (recovered), and
the resident memory after day 1 against the end (``rss_growth_mb``). Prints JSON with ``--json``.
The baseline for the memory figure is measured in the same run: RSS at the end of day 1.

    python bench/soak.py --days 7 --json            # the full week
    python bench/soak.py --days 1 --tick 300 --json # what the test suite runs
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import create_engine, text

from gpusteward.domain.errors import SourceError, StoreError
from gpusteward.domain.models import Observation
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.store import audit_chain

PG_SERVER = os.environ.get("GPUSTEWARD_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
#: Faults by simulated hour of each day: (start hour, hours, kind).
SCHEDULE = (
    (3.0, 0.5, "source-down"),
    (9.0, 0.25, "db-locked"),
    (14.0, 0.25, "disk-full"),
    (20.0, 0.0, "clock-step"),
)
WRITES = ("audit", "record_findings", "record_decisions", "update_ladders", "remember_workloads")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:  # noqa: PTH123 - a proc file, read once
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1_048_576


class _Faulty:
    """Wraps the source: down while ``down`` is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.down = False

    def observe(self, now: Any) -> Observation:
        if self.down:
            raise SourceError("soak: source down (injected)")
        obs: Observation = self.inner.observe(now)
        return obs

    def close(self) -> None:
        self.inner.close()


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage()[:200])


@dataclass
class SoakResult:
    days: float
    ticks: int = 0
    failed_ticks: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)
    actions: int = 0
    duplicate_keys: int = 0
    duplicate_steps: int = 0
    audit_ok: bool = False
    audit_problem: str = ""
    rss_day1_mb: float = 0.0
    rss_end_mb: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "ticks": self.ticks,
            "failed_ticks": self.failed_ticks,
            "faults": self.faults,
            "faults_recovered": all(f["recovered"] for f in self.faults),
            "faults_logged": all(f["logged"] for f in self.faults),
            "actions": self.actions,
            "duplicate_keys": self.duplicate_keys,
            "duplicate_steps": self.duplicate_steps,
            "audit_ok": self.audit_ok,
            "audit_problem": self.audit_problem,
            "rss_day1_mb": round(self.rss_day1_mb, 1),
            "rss_end_mb": round(self.rss_end_mb, 1),
            "rss_growth_mb": round(self.rss_end_mb - self.rss_day1_mb, 1),
        }


@contextmanager
def _schema() -> Iterator[str]:
    admin = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    name = f"soak_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {name}"))
    try:
        yield name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA {name} CASCADE"))
        admin.dispose()


def soak(days: float, tick_s: float) -> SoakResult:
    result = SoakResult(days=days)
    with _schema() as schema:
        # Writers give up after a second instead of waiting out a held lock.
        url = f"{PG_SERVER}?options=-csearch_path%3D{schema}%20-clock_timeout%3D1000"
        settings = load_settings(
            None,
            mode="enforce",
            tick_seconds=tick_s,
            source={"name": "sim", "sim": {"scenario": "small", "history_hours": 0}},
            store={"url": url},
        )
        clock = SimClock(DEFAULT_START)
        steward, _ = build_steward(settings, clock=clock, notifier=MemoryNotifier())
        steward.guard_clock_jumps = True  # as with the system clock: a wall-clock step is noticed
        faulty = _Faulty(steward.source)
        steward.source = faulty
        log = _Counter()
        logging.getLogger("gpusteward").addHandler(log)
        try:
            _drive(steward, clock, faulty, log, url, schema, days, tick_s, result)
        finally:
            logging.getLogger("gpusteward").removeHandler(log)
        _check(steward, result)
        steward.store.close()
    return result


def _drive(
    steward: Any, clock: SimClock, faulty: _Faulty, log: _Counter, url: str, schema: str,
    days: float, tick_s: float, result: SoakResult,
) -> None:  # fmt: skip
    start = clock.now()
    end = start + timedelta(days=days)
    locker = create_engine(url.split("?")[0] + f"?options=-csearch_path%3D{schema}")
    held: Any = None
    real_writes = {name: getattr(steward.store, name) for name in WRITES}
    active: dict[str, Any] = {}
    while clock.now() < end:
        at_h = (clock.now() - start).total_seconds() / 3600
        day_h = at_h % 24
        for begin, hours, kind in SCHEDULE:
            on = begin <= day_h < begin + max(hours, tick_s / 3600)
            if on and kind not in active:
                active[kind] = {"kind": kind, "at_hour": round(at_h, 2), "logged": False, "recovered": False}
                result.faults.append(active[kind])
                log.messages.clear()
                if kind == "source-down":
                    faulty.down = True
                elif kind == "db-locked":
                    held = locker.connect()
                    held.execute(text("LOCK TABLE actions IN ACCESS EXCLUSIVE MODE"))
                elif kind == "disk-full":
                    for name in WRITES:
                        setattr(steward.store, name, _failing(name))
                elif kind == "clock-step":
                    clock._now += timedelta(minutes=10)  # wall time only: an NTP step
            elif not on and kind in active:
                fault = active.pop(kind)
                fault["logged"] = fault["logged"] or bool(log.messages)
                fault["pending_recovery"] = True
                if kind == "source-down":
                    faulty.down = False
                elif kind == "db-locked" and held is not None:
                    held.rollback()
                    held.close()
                    held = None
                elif kind == "disk-full":
                    for name, fn in real_writes.items():
                        setattr(steward.store, name, fn)
        try:
            report = steward.tick()
            result.ticks += 1
            if not report.source_ok and "source-down" in active:
                active["source-down"]["logged"] = True
            for f in result.faults:
                if f.pop("pending_recovery", False):
                    f["recovered"] = report.source_ok
        except (StoreError, SourceError) as e:
            result.failed_ticks += 1
            for f in active.values():
                f["logged"] = True
            logging.getLogger("gpusteward.soak").warning("tick failed: %s", e)
        if result.rss_day1_mb == 0.0 and at_h >= 24:
            result.rss_day1_mb = rss_mb()
        clock.advance(tick_s)
    if held is not None:
        held.close()
    locker.dispose()
    result.rss_end_mb = rss_mb()
    if result.rss_day1_mb == 0.0:
        result.rss_day1_mb = result.rss_end_mb


def _failing(name: str) -> Any:
    def fail(*_: Any, **__: Any) -> Any:
        raise StoreError(f"{name}: could not write (injected: no space left on device)")

    return fail


def _check(steward: Any, result: SoakResult) -> None:
    actions = steward.store.actions(limit=1_000_000)
    result.actions = len(actions)
    keys = Counter(a.idempotency_key for a in actions)
    result.duplicate_keys = sum(n - 1 for n in keys.values() if n > 1)
    steps = Counter((a.workload_id, a.idempotency_key.rsplit(":", 1)[0], a.step) for a in actions)
    result.duplicate_steps = sum(n - 1 for n in steps.values() if n > 1)
    with steward.store.transaction("verify audit chain") as conn:
        report = audit_chain.verify(conn)
    result.audit_ok = report.ok
    result.audit_problem = report.problem or ""


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=7.0, help="simulated days (default 7)")
    ap.add_argument("--tick", type=float, default=120.0, help="tick interval in simulated seconds")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    out = soak(args.days, args.tick).to_dict()
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return out


if __name__ == "__main__":
    sys.exit(0 if main()["audit_ok"] else 1)
