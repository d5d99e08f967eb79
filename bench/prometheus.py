"""Benchmark: the default rules as PromQL in Prometheus vs gpusteward's tick over the same data.

Backfills a real local Prometheus (``promtool tsdb create-blocks-from openmetrics``) with
1 h of DCGM-like data at 10 s for N GPUs, every one held by a pod (5 % of them zombies:
under 5 % utilisation holding 20 GiB), then times, in the same run:

(a) Prometheus evaluating the zombie rule as PromQL
    ``avg_over_time(DCGM_FI_DEV_GPU_UTIL[30m]) < 5 and avg_over_time(DCGM_FI_DEV_FB_USED[30m]) > 1024``
    (``promql_ms``), and the default pack's other rules too (``promql_pack_ms``);
(b) gpusteward's analysis tick (the whole default pack) over the same data, already in its
    window store after the start-up backfill;
(c) gpusteward's incremental fetch of one tick (30 s of new samples, plus the overlap);
(d) a whole tick through remote write (``tick_ms``): the tick's new samples (3 scrapes of both
    metrics for every GPU), encoded beforehand as a Prometheus sends them (one sample per
    series entry, 2,000 per request), decoded and buffered by the receiver, then the loop's
    tick: drain, window, analysis of the whole pack and decisions. The remote-write source
    takes over the pull source's GPUs and holders, as after its start-up backfill. The mean
    of whole rounds of the ledger's writes (every ``store.ledger_flush_seconds``, 10 ticks by
    default: ``tick_max_ms`` is the tick that writes), beside their median; of a tick,
    ``remote_write_receive_ms`` is the receive and ``remote_write_observe_ms`` the source's
    part (drain, fold and the GPUs' and holders' bookkeeping), medians.

Both must name the same zombie GPUs. Needs Debian's ``prometheus`` package; (d) the
``remote-write`` extra.

    python bench/prometheus.py --gpus 10000 --json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from gpusteward.domain.models import Observation, RuleAction, utc
from gpusteward.integrations.prometheus.localserver import LocalPrometheus
from gpusteward.integrations.prometheus.remote_write import Receiver, RemoteWriteSource, encode
from gpusteward.integrations.prometheus.source import PrometheusSource
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime import collector
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import load_settings
from gpusteward.runtime.loop import Steward

SCRAPE_S, HOUR_S, TICK_S = 10, 3600, 30
ZOMBIE_SHARE = 0.05
PROMQL = "avg_over_time(DCGM_FI_DEV_GPU_UTIL[30m]) < 5 and avg_over_time(DCGM_FI_DEV_FB_USED[30m]) > 1024"
#: The rest of the default pack as PromQL (stalled needs process CPU, which DCGM lacks).
PROMQL_MORE = {
    "idle-allocation": "max_over_time(DCGM_FI_DEV_GPU_UTIL[30m]) < 10",
    "overprovisioned": "(count by (namespace, pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[60m]) < 5)"
    " / count by (namespace, pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[60m]))) >= 0.5 < 1",
}


def write_data(path: Path, n: int, end_s: int, seed: int = 0) -> tuple[int, set[str]]:
    """OpenMetrics for ``n`` GPUs over the hour before ``end_s``; returns (samples, zombie uuids)."""
    rng = np.random.default_rng(seed)
    times = np.arange(end_s - HOUR_S, end_s + 1, SCRAPE_S)
    zombie = rng.random(n) < ZOMBIE_SHARE
    uuids = [f"GPU-{i:08x}-bench" for i in range(n)]
    samples = 0
    with path.open("w") as f:
        for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
            f.write(f"# TYPE {metric} gauge\n")
            for i, uuid in enumerate(uuids):
                if metric == "DCGM_FI_DEV_GPU_UTIL":
                    vals = rng.uniform(0, 3, len(times)) if zombie[i] else rng.uniform(40, 100, len(times))
                else:
                    vals = np.full(len(times), 20480.0 if zombie[i] else 60000.0)
                head = (
                    f'{metric}{{UUID="{uuid}",Hostname="node-{i // 8:05d}",gpu="{i % 8}",'
                    f'modelName="NVIDIA H100 80GB HBM3",pod="job-{i // 4}",namespace="team-{i % 13}"}} '
                )
                f.write(
                    "".join(
                        f"{head}{v:.1f} {t}\n" for v, t in zip(vals.tolist(), times.tolist(), strict=True)
                    )
                )
                samples += len(times)
        f.write("# EOF\n")
    return samples, {u for u, z in zip(uuids, zombie.tolist(), strict=True) if z}


#: Prometheus' queue_config.max_samples_per_send in recent releases (one sample per series entry).
SAMPLES_PER_SEND = 2000


def tick_bodies(n: int, zombies: set[str], start_s: int, seed: int) -> list[bytes]:
    """Remote-write bodies with the scrapes in (start_s, start_s + TICK_S], labels as in the data."""
    rng = np.random.default_rng(seed)
    entries: list[tuple[dict[str, str], list[tuple[int, float]]]] = []
    for t in range(start_s + SCRAPE_S, start_s + TICK_S + 1, SCRAPE_S):
        for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
            for i in range(n):
                uuid = f"GPU-{i:08x}-bench"
                if metric == "DCGM_FI_DEV_GPU_UTIL":
                    v = float(rng.uniform(0, 3) if uuid in zombies else rng.uniform(40, 100))
                else:
                    v = 20480.0 if uuid in zombies else 60000.0
                labels = {
                    "__name__": metric,
                    "UUID": uuid,
                    "Hostname": f"node-{i // 8:05d}",
                    "gpu": str(i % 8),
                    "modelName": "NVIDIA H100 80GB HBM3",
                    "pod": f"job-{i // 4}",
                    "namespace": f"team-{i % 13}",
                }
                entries.append((labels, [(t * 1000, round(v, 1))]))
    return [encode(entries[k : k + SAMPLES_PER_SEND]) for k in range(0, len(entries), SAMPLES_PER_SEND)]


def remote_write_ticks(
    steward: Steward, clock: SimClock, book: PrometheusSource, n: int, zombies: set[str], repeats: int
) -> dict[str, Any]:
    """(d): whole ticks, each after its new samples arrived by remote write: at least
    ``repeats``, and whole rounds of the ledger's writes (``store.ledger_flush_seconds``), so
    that the mean carries the write at its share."""
    receiver = Receiver(
        book.specs, max_samples=10 * n * 2 * TICK_S // SCRAPE_S + 1, clock=lambda: clock.now().timestamp()
    )
    source = steward.source = RemoteWriteSource(receiver, book)
    observes: list[float] = []  # the source's part of each tick: drain, fold, the book
    observe = source.observe

    def timed_observe(now: datetime) -> Observation:
        t0 = time.perf_counter()
        try:
            return observe(now)
        finally:
            observes.append((time.perf_counter() - t0) * 1000)

    source.observe = timed_observe  # type: ignore[method-assign]
    assert steward.ledger is not None
    cycle = max(1, math.ceil(steward.ledger.flush_every_s / TICK_S))
    ticks, receives, found = [], [], set()
    # The first tick is not timed: the remote-write source takes the GPUs and holders over.
    for k in range(math.ceil(repeats / cycle) * cycle + 1):
        bodies = tick_bodies(n, zombies, int(clock.now().timestamp()), seed=1000 + k)
        clock.advance(TICK_S)
        t0 = time.perf_counter()
        for body in bodies:
            receiver.receive(body)
        t1 = time.perf_counter()
        report = steward.tick()
        t2 = time.perf_counter()
        if k > 0:
            ticks.append((t2 - t0) * 1000)
            receives.append((t1 - t0) * 1000)
        found = {u for f in report.findings if f.rule == "zombie" for u in f.gpu_uuids}
    return {
        "tick_ms": round(statistics.mean(ticks), 2),
        "tick_median_ms": round(statistics.median(ticks), 2),
        "tick_max_ms": round(max(ticks), 2),
        "ticks": len(ticks),
        "ledger_flush_seconds": steward.ledger.flush_every_s,
        "remote_write_receive_ms": round(statistics.median(receives), 2),
        "remote_write_observe_ms": round(statistics.median(observes[1:]), 2),
        "remote_write_requests_per_tick": len(bodies),
        "remote_write_body_kib": round(sum(map(len, bodies)) / len(bodies) / 1024, 1),
        "zombies_remote_write": len(found),
        "agree_remote_write": found == zombies,
    }


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def run(n: int, repeats: int, workdir: Path) -> dict[str, Any]:
    end_s = math.floor((time.time() - 120) / TICK_S) * TICK_S
    t0 = time.perf_counter()
    samples, zombies = write_data(workdir / "data.om", n, end_s)
    generate_s = time.perf_counter() - t0
    prom = LocalPrometheus(workdir / "prom", workdir / "data.om")
    t0 = time.perf_counter()
    prom.start()
    promtool_s = time.perf_counter() - t0
    try:
        # (a) PromQL, after one warm-up so both sides read warm data
        def promql(expr: str = PROMQL) -> list[dict[str, Any]]:
            resp = httpx.post(
                f"{prom.url}/api/v1/query", data={"query": expr, "time": str(end_s)}, timeout=600
            )
            result: list[dict[str, Any]] = resp.json()["data"]["result"]
            return result

        promql_found = {r["metric"]["UUID"] for r in promql()}
        promql_ms = median_ms(promql, repeats)
        pack_ms = promql_ms
        for expr in PROMQL_MORE.values():
            promql(expr)
            pack_ms += median_ms(lambda e=expr: promql(e), repeats)  # type: ignore[misc]

        # gpusteward: start two ticks before the data ends, backfill, then tick to the end
        settings = load_settings(
            None,
            tick_seconds=TICK_S,
            # The planted GPUs are held by pods whose owner kind the series do not carry: batch work.
            source={
                "name": "prometheus",
                "prometheus": {"url": prom.url, "timeout_seconds": 600, "default_class": "batch"},
            },
            # 4 h: the default pack's longest rule reads 3.5 h (a shorter window is refused).
            store={"url": f"sqlite:///{workdir / 'state.db'}", "window_minutes": 240},
        )
        clock = SimClock(utc(end_s - 2 * TICK_S))
        t0 = time.perf_counter()
        steward, _ = build_steward(settings, clock=clock)
        backfill_s = time.perf_counter() - t0
        source = steward.source
        assert isinstance(source, PrometheusSource)
        fetch_times = []
        for _ in range(3):  # (c) each tick's fetch of what is new
            t0 = time.perf_counter()
            obs = source.observe(clock.now())
            fetch_times.append((time.perf_counter() - t0) * 1000)
            steward.ingest(obs)
            clock.advance(TICK_S)
        report = steward.tick()  # one whole tick at the end, to set the workloads
        now = utc(end_s)

        def analysis() -> object:  # (b) a fresh view each time: nothing memoised
            store = steward.window  # and told its newest slot was written, as by a tick's ingest
            for m in store.metrics:
                store.marks.written(m, store.head_slot or 0)
            return steward.analyse(now)

        analysis()
        analysis_ms = median_ms(analysis, repeats)
        found = {u for f in report.findings if f.rule == "zombie" for u in f.gpu_uuids}
        reclaim = {u for f in report.findings if f.action is RuleAction.RECLAIM for u in f.gpu_uuids}
        with collector.settled():  # as `gpusteward run` does once start-up is over
            rw = remote_write_ticks(steward, clock, source, n, zombies, repeats)
    finally:
        prom.stop()
    # Ratios are taken from the figures as printed, so a reader can check them from the output.
    promql_ms, analysis_ms, pack_ms = round(promql_ms, 2), round(analysis_ms, 2), round(pack_ms, 2)
    return {
        "gpus": n,
        "samples": samples,
        "promql_ms": promql_ms,
        "analysis_ms": analysis_ms,
        "fetch_ms": round(statistics.median(fetch_times), 2),
        "ratio_promql_over_analysis": round(promql_ms / analysis_ms, 1),
        "promql_pack_ms": pack_ms,
        "ratio_promql_pack_over_analysis": round(pack_ms / analysis_ms, 1),
        "backfill_s": round(backfill_s, 2),
        "promtool_and_start_s": round(promtool_s, 2),
        "generate_s": round(generate_s, 2),
        "zombies_planted": len(zombies),
        "zombies_promql": len(promql_found),
        "zombies_gpusteward": len(found),
        "reclaim_gpus": len(reclaim),
        "agree": promql_found == found == zombies,
        "source_queries": source.queries,
        **rw,
        "ratio_promql_pack_over_tick": round(pack_ms / rw["tick_ms"], 2),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the data here (default: a temp dir)")
    args = ap.parse_args(argv)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        out = run(args.gpus, args.repeats, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="gpusteward-bench-") as d:
            out = run(args.gpus, args.repeats, Path(d))
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>28}: {v}")
        print(f"analysis is {out['ratio_promql_over_analysis']}x faster than PromQL over the same data")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
