"""SenseTime Helios cluster series (``S-Lab-System-Group/HeliosArtifact``, MIT).

``cluster_sequence_vc.csv`` has one row per minute for one virtual cluster: ``time,
total_gpu_num, running_gpu_num, ...``. It records *allocation*, not utilisation (its
``gpu_utilization`` is allocated / total). The replay makes ``total_gpu_num`` GPUs, 8 per node,
of which the first ``running_gpu_num`` are held each minute; each unbroken stretch of a GPU
being held is one workload. Utilisation and memory are unknown (None): a backtest on it shows
allocation over time and never judges a GPU idle, because no data is not idleness.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import Gpu, Owner
from gpusteward.integrations.replay.trace import (
    MAX_GPUS,
    Trace,
    TraceWorkload,
    span_problem,
    time_problem,
)

REQUIRED = ("time", "total_gpu_num", "running_gpu_num")
GPUS_PER_NODE = 8
#: The held matrix is minutes x GPUs booleans: bound it (a year of minutes on 2,000 GPUs).
MAX_CELLS = 1_100_000_000


def vc_name(path: str) -> str:
    """The virtual cluster from a file name like ``earth_vc3sl_cluster_sequence...``."""
    m = re.search(r"(?:^|_)(vc[A-Za-z0-9]+)(?:_|$)", Path(path).stem)
    return m.group(1) if m else "helios"


def parse_helios(rows: Sequence[Sequence[str]], *, path: str = "<helios>", gpu_model: str = "") -> Trace:
    """A ``Trace`` from the rows of a Helios cluster sequence (header row first)."""
    if not rows:
        raise ConfigError("empty file", path=path, line=1)
    header = [h.strip() for h in rows[0]]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise ConfigError(f"not a Helios cluster sequence: missing {', '.join(missing)}", path=path, line=1)
    ti, ni, ri = (header.index(c) for c in REQUIRED)
    times, totals, running = [], [], []
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            at = datetime.fromisoformat(row[ti]).replace(tzinfo=UTC).timestamp()
            total, run = int(float(row[ni])), int(float(row[ri]))
        except (ValueError, IndexError, OverflowError) as e:
            raise ConfigError(f"bad row: {e}", path=path, line=line) from e
        if problem := time_problem(at):
            raise ConfigError(f"time: {problem}", path=path, line=line)
        if not 0 <= total <= MAX_GPUS:
            raise ConfigError(f"total_gpu_num: not 0 to {MAX_GPUS}", path=path, line=line)
        times.append(at)
        totals.append(total)
        running.append(run)
    if not times:
        raise ConfigError("no rows", path=path)
    t = np.asarray(times)
    if np.any(np.diff(t) <= 0):
        raise ConfigError("times must increase row by row", path=path)
    if problem := span_problem(float(t[0]), float(t[-1])):
        raise ConfigError(problem, path=path)
    n = max(totals)
    if n * len(t) > MAX_CELLS:
        raise ConfigError(f"{len(t)} rows of up to {n} GPUs: too large to replay", path=path)
    held = (
        np.arange(n)[None, :] < np.minimum(np.asarray(running), np.asarray(totals))[:, None]
    )  # (minutes, gpus)
    starts = held & ~np.vstack([np.zeros((1, n), dtype=np.bool_), held[:-1]])
    ends = held & ~np.vstack([held[1:], np.zeros((1, n), dtype=np.bool_)])
    # Number stretches GPU by GPU: GPU j's k-th stretch is workload offset[j] + k.
    per_gpu = starts.sum(axis=0)
    offset = np.concatenate([[0], np.cumsum(per_gpu)[:-1]])
    label = np.cumsum(starts, axis=0) - 1 + offset[None, :]
    k_idx, g_idx = np.nonzero(held)  # row-major: time-sorted
    wl = label[k_idx, g_idx]
    vc = vc_name(path)
    first_k = np.empty(int(per_gpu.sum()), dtype=np.intp)
    last_k = np.empty_like(first_k)
    sk, sg = np.nonzero(starts)
    first_k[label[sk, sg]] = sk
    ek, eg = np.nonzero(ends)
    last_k[label[ek, eg]] = ek
    gpu_of = np.empty_like(first_k)
    gpu_of[label[sk, sg]] = sg
    workloads = [
        TraceWorkload(
            id=f"{vc}-gpu{int(g)}-{int(t[f])}",
            name=f"{vc} allocation on gpu{int(g)}",
            owner=Owner(vc, vc),
            gpus=(int(g),),
            started_at=float(t[f]),
            first_t=float(t[f]),
            last_t=float(t[last]),
        )
        for g, f, last in zip(gpu_of.tolist(), first_k.tolist(), last_k.tolist(), strict=True)
    ]
    gpus = [
        Gpu(uuid=f"{vc}-gpu{j}", node=f"{vc}-n{j // GPUS_PER_NODE}", index=j % GPUS_PER_NODE, model=gpu_model,
            memory_total_mib=0.0)
        for j in range(n)
    ]  # fmt: skip
    nan = np.full(k_idx.size, np.nan, dtype=np.float32)
    return Trace(
        name=Path(path).name,
        gpus=gpus,
        t=t[k_idx],
        gpu=g_idx,
        util=nan,
        mem=nan,
        wl=wl,
        workloads=workloads,
        interval_s=float(np.median(np.diff(t))) if t.size > 1 else 60.0,
        presorted=True,
    )


def load_helios(path: str | Path, *, gpu_model: str = "") -> Trace:
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise ConfigError(f"cannot read trace: {e.strerror or e}", path=str(p)) from e
    except (csv.Error, UnicodeDecodeError) as e:
        raise ConfigError(f"not a CSV file: {e}", path=str(p)) from e
    return parse_helios(rows, path=str(p), gpu_model=gpu_model)
