"""Benchmark: one analysis tick of the default rule pack over N GPUs.

Builds a 30-minute window at 10 s (180 samples per GPU) with a realistic mix of
workloads (busy training with checkpoint dips, inference, idle allocations, zombies,
partly idle multi-GPU jobs, stalled jobs, models still loading, missing samples, stale
GPUs), then times

* the engine: ``store.view(now)`` + ``analyse()`` of live ticks, median of the repeats: the
  store is filled up to ``repeats + 1`` slots before now, and each tick first ingests its new
  slot (not timed), as a live one does, so what the store keeps between ticks is used and
  renewed as it is live, at every phase of a kept block (16 repeats: all of them); the last
  tick is at now, over exactly the scenario's 180 slots, and
* a baseline: a straightforward per-GPU Python loop computing the same rule conditions
  over the same data. At large N it runs on a prefix of the workloads and is scaled
  linearly (the output says so); both must agree on what trips.

    python bench/engine.py --gpus 100000 --json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt

from gpusteward.analysis.engine import AnalysisInput, AnalysisResult, analyse
from gpusteward.analysis.rules import compile_rules, default_rule_pack
from gpusteward.domain.models import Gpu, Metric, Owner, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

WINDOW_S, INTERVAL_S, SLOTS = 1800.0, 10.0, 180
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)  # a slot boundary: the window is exactly 180 slots
METRICS = (Metric.GPU_UTIL, Metric.MEM_USED, Metric.PROC_CPU)
STALE_AFTER_S = 120.0
F32 = npt.NDArray[np.float32]

# Share of workloads per behaviour; sizes are drawn from 1/2/4/8 GPUs.
MIX = {
    "training": 0.66,
    "inference": 0.12,
    "idle": 0.06,
    "zombie": 0.04,
    "partly-idle": 0.05,
    "stalled": 0.01,
    "loading": 0.03,
    "stale": 0.03,
}


@dataclass
class Scenario:
    store: WindowStore
    gpus: dict[str, Gpu]
    workloads: list[Workload]
    index: dict[str, int]
    util: F32  # (SLOTS, N), oldest first; NaN = no sample
    mem: F32
    cpu: F32


def build(n_gpus: int, seed: int = 0, held_back: int = 0) -> Scenario:
    """The scenario's 180 slots ending at NOW. The store holds them up to ``held_back`` slots
    before NOW (the window then starts with copies of the first slots): ``tick`` ingests the rest."""
    rng = np.random.default_rng(seed)
    shape = (SLOTS, n_gpus)
    util = np.clip(rng.normal(88, 8, shape), 0, 100).astype(np.float32)
    mem = np.full(shape, 60000, dtype=np.float32)
    cpu = np.clip(rng.normal(100, 20, shape), 0, None).astype(np.float32)
    uuids = [f"GPU-{i:08x}" for i in range(n_gpus)]
    workloads: list[Workload] = []
    kinds = list(MIX)
    probs = np.array([MIX[k] for k in kinds])
    start = 0
    while start < n_gpus:
        size = min(int(rng.choice([1, 2, 4, 8], p=[0.4, 0.2, 0.2, 0.2])), n_gpus - start)
        cols = slice(start, start + size)
        kind = kinds[int(rng.choice(len(kinds), p=probs / probs.sum()))]
        if kind == "training":  # a checkpoint dip: 0 % for 4 minutes somewhere
            at = int(rng.integers(0, SLOTS - 24))
            util[at : at + 24, cols] = 0
        elif kind == "inference":
            util[:, cols] = rng.uniform(8, 50, (SLOTS, size))
            mem[:, cols], cpu[:, cols] = 30000, 20
        elif kind in ("idle", "zombie"):
            util[:, cols] = rng.uniform(0, 3, (SLOTS, size))
            mem[:, cols] = 400 if kind == "idle" else 38000
            cpu[:, cols] = 0.5
        elif kind == "partly-idle" and size > 1:
            idle = slice(start + size // 4, start + size)
            util[:, idle], mem[:, idle], cpu[:, idle] = (
                rng.uniform(0, 2, (SLOTS, size - size // 4)),
                2048,
                0.5,
            )
        elif kind == "stalled":
            util[-72:, cols], cpu[-72:, cols] = 0, 0.3
        elif kind == "loading":  # started 8 minutes ago: no history before
            util[:-48, cols] = mem[:-48, cols] = cpu[:-48, cols] = np.nan
            util[-48:, cols] = 0
        elif kind == "stale":  # the node stopped reporting 5 minutes ago
            util[-30:, cols] = mem[-30:, cols] = cpu[-30:, cols] = np.nan
        age = 8 if kind == "loading" else float(rng.uniform(40, 600))
        workloads.append(
            Workload(
                id=f"job-{len(workloads)}",
                kind=WorkloadKind.JOB,
                name=f"{kind}-{len(workloads)}",
                owner=Owner(f"user{len(workloads) % 97}", f"team{len(workloads) % 13}"),
                gpus_requested=size,
                gpu_uuids=tuple(uuids[cols]),
                started_at=NOW - timedelta(minutes=age),
            )
        )
        start += size
    for m in (util, mem, cpu):  # scrape misses: 2 % of samples
        m[rng.random(shape) < 0.02] = np.nan
    store = WindowStore(WINDOW_S, INTERVAL_S, metrics=METRICS, capacity=n_gpus)
    store.register(uuids)
    for k in range(-held_back, SLOTS - held_back):
        _ingest(store, util, mem, cpu, k)
    gpus = {
        u: Gpu(u, node=f"node-{i // 8}", index=i % 8, model="NVIDIA H100 80GB HBM3", memory_total_mib=81559,
               price_per_hour=3.0)
        for i, u in enumerate(uuids)
    }  # fmt: skip
    return Scenario(store, gpus, workloads, {u: i for i, u in enumerate(uuids)}, util, mem, cpu)


# --- the baseline: plain Python over plain lists ---------------------------------------


def _present(xs: Sequence[float]) -> list[float]:
    return [x for x in xs if not math.isnan(x)]


def _gpu_trips(util: list[float], mem: list[float], cpu: list[float]) -> dict[str, bool]:
    """Which default rules' GPU conditions hold, coverage gates included."""
    now = (SLOTS - 1) * INTERVAL_S  # times relative to the oldest slot's start
    u30, m30 = _present(util), _present(mem)
    u10, c10, m10 = _present(util[-60:]), _present(cpu[-60:]), _present(mem[-60:])
    out = {"zombie": False, "idle-allocation": False, "stalled": False}
    if len(u30) >= 0.8 * SLOTS and len(m30) >= 0.8 * SLOTS:
        out["zombie"] = sum(u30) / len(u30) < 5 and m30[-1] > 1024
    if len(u30) >= 0.8 * SLOTS and u30[-1] < 10:
        busy = [k for k, x in enumerate(util) if not math.isnan(x) and x >= 10]
        oldest = next(k for k, x in enumerate(util) if not math.isnan(x))
        since = busy[-1] * INTERVAL_S if busy else oldest * INTERVAL_S - INTERVAL_S
        out["idle-allocation"] = (now - since) / 60 >= 30
    if min(len(u10), len(c10), len(m10)) >= 0.8 * 60:
        out["stalled"] = max(u10) <= 0 and max(c10) < 2 and m10[-1] > 1024
    # overprovisioned looks back 60 min: a 30-min window never covers 80 % of it.
    return out


def _fresh(util: list[float], mem: list[float], cpu: list[float]) -> bool:
    newest = max(
        (k for k in range(SLOTS) if any(not math.isnan(s[k]) for s in (util, mem, cpu))), default=None
    )
    return newest is not None and (SLOTS - 1 - newest) * INTERVAL_S <= STALE_AFTER_S


def baseline(
    sc: Scenario, max_gpus: int
) -> tuple[float, set[tuple[str, str, tuple[str, ...]]], set[str], int]:
    """The loop's time scaled to all GPUs, its findings, the workloads and GPUs it covered."""
    found: set[tuple[str, str, tuple[str, ...]]] = set()
    covered: set[str] = set()
    n = 0
    t0 = time.perf_counter()
    for w in sc.workloads:
        if n >= max_gpus:
            break
        tripped: dict[str, list[str]] = {"zombie": [], "idle-allocation": [], "stalled": []}
        for u in w.gpu_uuids:
            i = sc.index[u]
            util, mem, cpu = sc.util[:, i].tolist(), sc.mem[:, i].tolist(), sc.cpu[:, i].tolist()
            if not _fresh(util, mem, cpu):
                continue
            for rule, hit in _gpu_trips(util, mem, cpu).items():
                if hit:
                    tripped[rule].append(u)
        for rule, uuids in tripped.items():
            if uuids and len(uuids) == len(w.gpu_uuids):  # require_all_gpus
                found.add((rule, w.id, tuple(uuids)))
        covered.add(w.id)
        n += len(w.gpu_uuids)
    elapsed = time.perf_counter() - t0
    return elapsed * len(sc.gpus) / max(n, 1), found, covered, n


# --- the engine ---------------------------------------------------------------------


def _ingest(store: WindowStore, util: F32, mem: F32, cpu: F32, k: int) -> datetime:
    """Slot ``k`` of the scenario (0..179, the last at NOW) at its time; before the scenario
    (k < 0) its first slots mirrored, so the window is as full as the scenario's."""
    t = NOW - timedelta(seconds=INTERVAL_S * (SLOTS - 1 - k))
    row = k if k >= 0 else -k - 1
    store.ingest_arrays(t, {Metric.GPU_UTIL: util[row], Metric.MEM_USED: mem[row], Metric.PROC_CPU: cpu[row]})
    return t


def tick(sc: Scenario, repeats: int) -> tuple[float, AnalysisResult]:
    rules = compile_rules(default_rule_pack())
    times, result = [], None
    for i in range(repeats + 1):  # the first run warms caches and the allocator: not timed
        # A live tick: its new slot is ingested (not timed), then the window is viewed and analysed.
        now = _ingest(sc.store, sc.util, sc.mem, sc.cpu, SLOTS - 1 - repeats + i)
        t0 = time.perf_counter()
        view = sc.store.view(now)
        result = analyse(rules, AnalysisInput(view, sc.gpus, sc.workloads, now, STALE_AFTER_S))
        if i:
            times.append(time.perf_counter() - t0)
    assert result is not None
    return statistics.median(times), result


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=10000)
    ap.add_argument(
        "--repeats", type=int, default=16, help="timed live ticks (16: every phase of a kept block)"
    )
    ap.add_argument("--baseline-gpus", type=int, default=5000, help="run the loop on about this many GPUs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not 1 <= args.repeats < SLOTS:
        ap.error(f"--repeats must be 1..{SLOTS - 1}")
    sc = build(args.gpus, args.seed, held_back=args.repeats + 1)
    tick_s, result = tick(sc, args.repeats)
    base_s, base_found, covered, base_n = baseline(sc, args.baseline_gpus)
    engine_found = {
        (f.rule, f.workload_id or "", f.gpu_uuids)
        for f in result.findings
        if f.workload_id in covered and f.rule != "overprovisioned"
    }
    advice = [f for f in result.findings if f.rule == "overprovisioned"]
    ring, kept = sc.store.bytes_per_gpu_per_metric, sc.store.kept_bytes_per_gpu_per_metric
    out: dict[str, object] = {
        "gpus": args.gpus,
        "tick_ms": round(tick_s * 1e3, 2),
        "baseline_ms": round(base_s * 1e3, 2),
        "ratio": round(base_s / tick_s, 1),
        # The window per GPU per metric (issue 20 target: <= 2 KiB): its float32 rings and what
        # views keep between ticks (block reductions, newest marks), as after the last tick.
        "bytes_per_gpu_metric": round(ring + kept),
        "ring_bytes_per_gpu_metric": ring,
        "kept_bytes_per_gpu_metric": round(kept),
        "window_bytes_per_gpu": ring,  # the older name of the rings' figure
        "baseline_gpus": base_n,
        "baseline_scaled": base_n < args.gpus,
        "agree": engine_found == base_found and not advice,
        "findings": len(result.findings),
    }
    if args.json:
        print(json.dumps(out))
    else:
        scaled = f" (measured on {base_n} GPUs, scaled linearly)" if out["baseline_scaled"] else ""
        print(f"GPUs                  {args.gpus}")
        print(
            f"window                30 min at 10 s, {out['bytes_per_gpu_metric']} B per GPU per metric "
            f"({ring} in the rings, {out['kept_bytes_per_gpu_metric']} kept between ticks)"
        )
        print(f"engine tick           {out['tick_ms']} ms (median of {args.repeats})")
        print(f"per-GPU Python loop   {out['baseline_ms']} ms{scaled}")
        print(f"speed-up              {out['ratio']}x")
        print(f"findings              {out['findings']}, stale GPUs {len(result.stale_gpus)}")
        print(f"methods agree         {out['agree']}")
    return out


if __name__ == "__main__":
    sys.exit(0 if main()["agree"] else 1)
