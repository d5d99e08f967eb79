"""Benchmark: a month of state at N GPUs in PostgreSQL, and the reading pages under load.

**State.** The real agent (sim source, ``default`` scenario: 64 GPUs, enforce mode, 60 s ticks)
runs ``--calib-hours`` of simulated time into a fresh PostgreSQL schema through the real store:
its finding episodes, decisions, actions, approvals, notices, audit log, workload snapshots,
ledger and queue waits. Those rows are then copied inside PostgreSQL (``INSERT ... SELECT``)
until they stand for ``--gpus`` GPUs over ``--days``: ``ceil(gpus / 64)`` clusters side by side,
each copy with its own workload ids, users and keys (a suffix), repeated period after period with
every timestamp shifted. Episodes still open are closed in every period but the last, as a
running agent would have closed them. The ``default`` scenario is wasteful on purpose (zombies,
idle notebooks), so the row rates are on the high side of a real cluster's. ``db_bytes_per_month``
is ``pg_total_relation_size`` (heap, indexes, TOAST) over gpusteward's tables: the empty schema
plus the rows' share scaled to 30 days.

**Pages.** ``gpusteward serve`` over that schema (no loop attached) in a child process on
loopback, in ``--workers`` processes (1 by default); ``--readers`` concurrent httpx clients send
``--requests`` requests in all, round robin over the findings, actions and audit pages and their
``/api/v1`` twins, each with a viewer's bearer token. Baseline, interleaved in the same stream:
``/api/v1/me`` (same app, same auth, no query). Meanwhile a writer makes one write every
``--writes-every`` seconds (10 by default, three times as often as a 30 s tick writes), so that the
read cache (``web.read_cache``) starts over as it would beside a running loop. Prints ``p95_ms``
(all six), per path, ``ratio_p95_over_baseline`` and ``writes``; then the same load again with the
read cache off: ``no_cache_p95_ms`` and ``ratio_p95_no_cache_over_cache`` (``--no-no-cache-run``
skips it). Target: p95 at most 300 ms. Then the overview's figures (``/``: money over the
whole ledger and the last 14 days, the last day's actions) are computed in process with the clock
at the newest action: ``overview_ms``.

    python bench/web.py --json                                   # quick: 640 GPUs, 1 day
    python bench/web.py --gpus 10000 --days 30 --readers 20 --requests 2000 --json
    python bench/web.py --schema bench_web_<id> --workers 2 --json  # serve --workers 2
    python bench/web.py --gpus 10000 --days 30 --keep           # keep the schema for EXPLAIN
    python bench/web.py --schema bench_web_<id> --json           # the load test again over it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, String, Text, create_engine, func, select, text

from gpusteward.integrations.prometheus.localserver import free_port
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.notify import MemoryNotifier
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.store.db import StateStore
from gpusteward.store.dbschema import UTCDateTime, actions_t, md

PG_SERVER = os.environ.get("GPUSTEWARD_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
SIM_GPUS = 64  # the default scenario's cluster
TICK_S = 60
TARGET_P95_MS = 300.0
PATHS = ("/findings", "/actions", "/audit", "/api/v1/findings", "/api/v1/actions", "/api/v1/audit")
BASELINE = "/api/v1/me"
#: Live state, keys and secrets: not history, so not copied.
NOT_COPIED = {"settings", "ladders", "api_tokens", "used_links", "snoozes"}
#: Columns that name a workload, a user or a unique key: each copy gets its own (``#k``).
SUFFIXED = {"workload_id", "subject", "idempotency_key", "dedup_key", "job_id", "key", "user_name"}


@contextmanager
def fresh_schema(keep: bool = False) -> Iterator[str]:
    """A new schema, dropped afterwards unless ``keep`` (to EXPLAIN the pages' queries on its data)."""
    admin = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    name = f"bench_web_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {name}"))
    try:
        yield name
    finally:
        if keep:
            print(f"kept schema {name}", file=sys.stderr)
        else:
            with admin.connect() as conn:
                conn.execute(text(f"DROP SCHEMA {name} CASCADE"))
        admin.dispose()


def schema_url(schema: str) -> str:
    return f"{PG_SERVER}?options=-csearch_path%3D{schema}"


def bench_config(schema: str, *, read_cache: bool = True) -> dict[str, Any]:
    """The agent's config: the calibration's overrides, and the served config file's contents."""
    return {
        "mode": "enforce",
        "tick_seconds": TICK_S,
        "source": {"name": "sim", "sim": {"scenario": "default", "history_hours": 0}},
        "store": {"url": schema_url(schema)},
        "web": {"secret_key": "bench-signing-key-0123456789abcdef", "read_cache": read_cache},
    }


def bench_settings(schema: str) -> Settings:
    return load_settings(None, **bench_config(schema))


def calibrate(schema: str, hours: float) -> str:
    """The real agent for ``hours`` of simulated time; returns a viewer token for the pages."""
    from gpusteward.store.access import AccessStore

    clock = SimClock(DEFAULT_START)
    steward, _ = build_steward(bench_settings(schema), clock=clock, notifier=MemoryNotifier())
    for _ in range(round(hours * 3600 / TICK_S)):
        steward.tick()
        clock.advance(TICK_S)
    token = AccessStore(steward.store).create_token("bench-viewer", "viewer", at=clock.now())[1]
    steward.store.close()
    return token


def _copy_expr(table: str, column: Any) -> str | None:
    """The SQL that makes copy ``k`` of a seed row's column (None: let the database fill it)."""
    name = column.name
    q = f'"{name}"'
    period = "(k / CAST(:per AS integer))"
    shift = f"make_interval(secs => {period} * CAST(:secs AS double precision))"
    if name == "id" and column.primary_key and column.autoincrement is not False and table != "workloads":
        return None
    if name == "ended_at":  # closed by the next period, as the running agent would have
        closed = f"CASE WHEN {period} < CAST(:last AS integer) THEN coalesce({q}, last_seen_at) ELSE {q} END"
        return f"({closed}) + {shift}"
    if isinstance(column.type, UTCDateTime):
        return f"{q} + {shift}"
    if name == "day":
        return f"to_char({q}::date + {shift}, 'YYYY-MM-DD')"
    if name == "seq":
        return f"{q} + k * CAST(:seqspan AS integer)"
    if (name in SUFFIXED or (table == "workloads" and name == "id")) and isinstance(
        column.type, String | Text
    ):
        return f"{q} || '#' || k"
    return q


def scale_up(engine: Engine, copies: int, per: int, hours: float, periods: int) -> dict[str, int]:
    """Copies 1..copies-1 of every history table's rows (copy 0 is the calibration itself)."""
    rows: dict[str, int] = {}
    with engine.begin() as conn:
        seqspan = (conn.execute(text("SELECT max(seq) FROM audit_log")).scalar() or 0) + 1
    for table in md.sorted_tables:
        if table.name in NOT_COPIED:
            continue
        exprs = [(c.name, e) for c in table.columns if (e := _copy_expr(table.name, c)) is not None]
        cols = ", ".join(f'"{n}"' for n, _ in exprs)
        select = ", ".join(e for _, e in exprs)
        with engine.begin() as conn:
            conn.execute(text(f'CREATE TEMP TABLE seed AS SELECT * FROM "{table.name}"'))
            for k0 in range(1, copies, 500):
                conn.execute(
                    text(
                        f'INSERT INTO "{table.name}" ({cols}) SELECT {select} '
                        "FROM seed, generate_series(CAST(:k0 AS integer), CAST(:k1 AS integer)) AS k"
                    ),
                    {
                        "k0": k0,
                        "k1": min(k0 + 499, copies - 1),
                        "per": per,
                        "secs": hours * 3600,
                        "last": periods - 1,
                        "seqspan": seqspan,
                    },
                )
            conn.execute(text("DROP TABLE seed"))
            rows[table.name] = int(conn.execute(text(f'SELECT count(*) FROM "{table.name}"')).scalar() or 0)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    return rows


def db_bytes(engine: Engine, schema: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = :s AND c.relkind = 'r'"
                ),
                {"s": schema},
            ).scalar()
            or 0
        )


def serve(
    schema: str, workers: int, cfg: Path, *, read_cache: bool = True
) -> tuple[subprocess.Popen[str], str]:
    """``gpusteward serve`` over the schema in a child process, as an admin would start it."""
    cfg.write_text(json.dumps(bench_config(schema, read_cache=read_cache)))  # YAML is a superset of JSON
    port = free_port()
    cmd = [sys.executable, "-m", "gpusteward", "serve", "-c", str(cfg), "--port", str(port)]
    child = subprocess.Popen([*cmd, "--workers", str(workers)], stdout=subprocess.DEVNULL, text=True)
    return child, f"http://127.0.0.1:{port}"


def _answers(base: str, token: str) -> bool:
    try:
        return httpx.get(f"{base}{BASELINE}", headers={"authorization": f"Bearer {token}"}).status_code == 200
    except httpx.TransportError:
        return False


async def load(base: str, token: str, readers: int, requests: int) -> dict[str, list[float]]:
    """``requests`` GETs by ``readers`` concurrent clients, round robin over the paths and the baseline."""
    order = [*PATHS, BASELINE]
    queue: asyncio.Queue[str] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(order[i % len(order)])
    times: dict[str, list[float]] = {p: [] for p in order}
    headers = {"authorization": f"Bearer {token}"}

    async def reader() -> None:
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
            while not queue.empty():
                path = queue.get_nowait()
                t = time.perf_counter()
                resp = await client.get(path)
                elapsed = (time.perf_counter() - t) * 1000
                if resp.status_code != 200:
                    raise RuntimeError(f"{path}: HTTP {resp.status_code}: {resp.text[:200]}")
                times[path].append(elapsed)

    await asyncio.gather(*(reader() for _ in range(readers)))
    return times


def p95(values: list[float]) -> float:
    return (
        round(statistics.quantiles(values, n=20, method="inclusive")[-1], 1) if len(values) > 1 else values[0]
    )


class Writer:
    """What the loop does to the database once a tick: one write every ``every_s`` seconds (an
    audit record through the store), so that the read cache starts over as it would live."""

    def __init__(self, schema: str, every_s: float) -> None:
        self.every_s, self.writes = every_s, 0
        self._store = StateStore(schema_url(schema))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._store.audit("bench.tick", SimClock(DEFAULT_START).now(), None, writes=self.writes)
            self.writes += 1

    def __enter__(self) -> Writer:
        if self.every_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._store.close()


def overview_at_end(schema: str, repeats: int = 3) -> dict[str, Any]:
    """The overview's figures (``overview_data.overview``, without a live window) with the clock
    at the newest action, as a console opened at the end of that month computes them. Timed in
    process: ``serve`` runs on this machine's clock, months after the simulated month, where the
    last day and the last 14 days hold nothing."""
    from gpusteward.web.overview_data import overview

    store = StateStore(schema_url(schema))
    with store.transaction("newest action") as conn:
        end = conn.execute(select(func.max(actions_t.c.created_at))).scalar_one()
    settings = bench_settings(schema)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        figures = overview(
            store, None, end, currency=settings.cost.currency, dry_run=False, policy=settings.policy
        )
        times.append((time.perf_counter() - t) * 1000)
    store.close()
    return {
        "overview_at": end.isoformat(),
        "overview_ms": round(statistics.median(times), 1),
        "overview_actions_24h": sum(figures["actions_24h"].values()),
    }


def load_test(
    schema: str, token: str, args: argparse.Namespace, *, read_cache: bool
) -> tuple[dict[str, list[float]], int]:
    """Serve, warm up, then the timed requests while the writer writes: times per path, writes."""
    with tempfile.TemporaryDirectory() as tmp:
        child, base = serve(schema, args.workers, Path(tmp) / "bench.yaml", read_cache=read_cache)
        try:
            deadline = time.monotonic() + 120
            while not _answers(base, token):
                if child.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gpusteward serve did not answer on {base} (exit {child.poll()})")
                time.sleep(0.2)
            # Warm-up: every path once per worker process.
            asyncio.run(load(base, token, args.readers, min((len(PATHS) + 1) * args.workers, args.requests)))
            with Writer(schema, args.writes_every) as writer:
                times = asyncio.run(load(base, token, args.readers, args.requests))
        finally:
            child.send_signal(signal.SIGTERM)
            child.wait(timeout=60)
    return times, writer.writes


def pages(schema: str, token: str, args: argparse.Namespace) -> dict[str, Any]:
    """The load test with the read cache (the figures), then without it (the comparison)."""
    times, writes = load_test(schema, token, args, read_cache=True)
    pages_ms = [t for p in PATHS for t in times[p]]
    overall = p95(pages_ms)
    base_p95 = p95(times[BASELINE])
    out: dict[str, Any] = {
        "workers": args.workers,
        "readers": args.readers,
        "requests": sum(len(v) for v in times.values()),
        "writes_every_s": args.writes_every,
        "writes": writes,
        "p95_ms": overall,
        "p95_ms_by_path": {p: p95(times[p]) for p in PATHS},
        "median_ms": round(statistics.median(pages_ms), 1),
        "baseline_path": BASELINE,
        "baseline_p95_ms": base_p95,
        "ratio_p95_over_baseline": round(overall / base_p95, 2),
        "p95_target_ms": TARGET_P95_MS,
        "p95_within_target": overall <= TARGET_P95_MS,
        **overview_at_end(schema),
    }
    if args.no_cache_run:
        off, off_writes = load_test(schema, token, args, read_cache=False)
        off_ms = [t for p in PATHS for t in off[p]]
        out |= {
            "no_cache_p95_ms": p95(off_ms),
            "no_cache_median_ms": round(statistics.median(off_ms), 1),
            "no_cache_baseline_p95_ms": p95(off[BASELINE]),
            "no_cache_writes": off_writes,
            "ratio_p95_no_cache_over_cache": round(p95(off_ms) / overall, 2),
        }
    return out


def reread(schema: str, args: argparse.Namespace) -> dict[str, Any]:
    """The load test alone over a kept schema (after an index or a query changed)."""
    from gpusteward.store.access import AccessStore

    store = StateStore(schema_url(schema))
    token = AccessStore(store).create_token(
        f"bench-viewer-{uuid.uuid4().hex[:6]}", "viewer", at=SimClock(DEFAULT_START).now()
    )[1]
    store.close()
    found = pages(schema, token, args)
    out: dict[str, Any] = {"schema": schema, **found}
    print(json.dumps(out))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=640)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--calib-hours", type=float, default=24.0, help="simulated hours the real agent runs")
    ap.add_argument("--readers", type=int, default=20, help="concurrent clients")
    ap.add_argument("--requests", type=int, default=700, help="requests in all")
    ap.add_argument("--json", action="store_true", help="print only the JSON object")
    ap.add_argument("--keep", action="store_true", help="keep the schema afterwards (its name on stderr)")
    ap.add_argument("--schema", help="only the pages, over a schema an earlier --keep run left")
    ap.add_argument("--workers", type=int, default=1, help="gpusteward serve --workers (processes)")
    ap.add_argument(
        "--writes-every",
        type=float,
        default=10.0,
        help="seconds between the writes made during the load (a tick's; 0: none)",
    )
    ap.add_argument(
        "--no-cache-run",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the load again with web.read_cache off, for the comparison",
    )
    args = ap.parse_args(argv)
    if args.schema:
        return reread(args.schema, args)
    per = math.ceil(args.gpus / SIM_GPUS)
    periods = max(1, round(args.days * 24 / args.calib_hours))
    out: dict[str, Any] = {"gpus": args.gpus, "days": args.days, "copies": per * periods}
    with fresh_schema(args.keep) as schema:
        engine = create_engine(schema_url(schema))
        StateStore(schema_url(schema)).create_schema()
        empty = db_bytes(engine, schema)  # tables and indexes with no rows: not per month
        t = time.perf_counter()
        token = calibrate(schema, args.calib_hours)
        calib_bytes = db_bytes(engine, schema)
        out["calibration_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        out["rows"] = scale_up(engine, per * periods, per, args.calib_hours, periods)
        out["scale_up_s"] = round(time.perf_counter() - t, 1)
        size = db_bytes(engine, schema)
        engine.dispose()
        out["db_bytes"] = size
        out["db_bytes_empty"] = empty
        out["db_bytes_per_month"] = round(empty + (size - empty) * 30 / (periods * args.calib_hours / 24))
        out["calibration_db_bytes"] = calib_bytes
        out.update(pages(schema, token, args))
    if not args.json:
        print(
            f"{args.gpus} GPUs x {args.days:g} days: {sum(out['rows'].values()):,} rows, "
            f"{out['db_bytes'] / 2**20:.1f} MiB ({out['db_bytes_per_month'] / 2**30:.2f} GiB per month)\n"
            f"{out['readers']} readers, {out['requests']} requests: p95 {out['p95_ms']} ms "
            f"(baseline {BASELINE} {out['baseline_p95_ms']} ms, x{out['ratio_p95_over_baseline']}; "
            f"target {TARGET_P95_MS:g} ms)"
        )
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
