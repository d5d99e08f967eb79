"""Pool demand history: what the forecasts learn from.

Two ways in: a CSV of demand over time (the Helios cluster sequence, or any ``time,<column>``
table), and gpusteward's own rollups: every tick adds each pool's demand to a bucket, and
finished buckets are appended to ``<history_dir>/pool-<name>.csv`` so that a restarted agent
keeps its history (and the file is the same CSV shape ``gpusteward forecast --trace`` reads).
"""

from __future__ import annotations

import csv
import gzip
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from gpusteward.analysis.forecast import Series, bucket
from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import Gpu, Metric, Observation, Workload, utc
from gpusteward.domain.sample_table import latest
from gpusteward.store.window import WindowView

TIME_COLUMNS = ("time", "timestamp", "ts")
#: Value columns tried in order when none is named: Helios' allocation, then generic names.
VALUE_COLUMNS = ("running_gpu_num", "demand", "value")


def parse_time(text: str) -> float:
    """Epoch seconds, or an ISO 8601 / RFC 3339 time (no offset means UTC)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


@dataclass(frozen=True)
class DemandTable:
    times_s: np.ndarray
    values: np.ndarray
    column: str
    path: str


def load_demand_csv(path: str | Path, column: str | None = None) -> DemandTable:
    """``time`` (or ``timestamp``) and one numeric column of a CSV (``.csv.gz`` too). An empty
    cell is missing data. Bad input is a ``ConfigError`` naming the file, the line and the problem."""
    name = str(path)
    try:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt", newline="", encoding="utf-8") as fh:
            rows = csv.reader(fh)
            header = [h.strip() for h in next(rows, [])]
            if not header:
                raise ConfigError("empty file", path=name, line=1)
            tcol = next((c for c in TIME_COLUMNS if c in header), None)
            if tcol is None:
                raise ConfigError(f"no time column (one of {', '.join(TIME_COLUMNS)})", path=name, line=1)
            vcol = column or next((c for c in VALUE_COLUMNS if c in header), None)
            if vcol is None or vcol not in header:
                want = f"column {vcol!r}" if vcol else f"a value column ({', '.join(VALUE_COLUMNS)})"
                raise ConfigError(f"no {want}; columns: {', '.join(header)}", path=name, line=1)
            ti, vi = header.index(tcol), header.index(vcol)
            times: list[float] = []
            values: list[float] = []
            for line, row in enumerate(rows, start=2):
                if not row:
                    continue
                try:
                    times.append(parse_time(row[ti]))
                    cell = row[vi].strip()
                    values.append(float(cell) if cell else math.nan)
                except (ValueError, IndexError) as e:
                    raise ConfigError(f"bad row: {e}", path=name, line=line) from e
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path=name) from e
    if not times:
        raise ConfigError("no rows", path=name)
    return DemandTable(np.asarray(times), np.asarray(values), vcol, name)


#: Pool name → workload id prefixes whose GPUs make that pool's demand (an inference
#: Deployment ``k8s:ml/deployment/llm`` is a pool of its own, whatever its GPUs' node pool).
Members = Mapping[str, Sequence[str]]


def held_pools(
    workloads: Iterable[Workload], gpus: Mapping[str, Gpu], members: Members | None = None
) -> dict[str, str]:
    """Held GPU uuid → the pool its demand counts in: the first pool listing a prefix of its
    workload's id, else the GPU's own ``pool``."""
    out: dict[str, str] = {}
    for w in workloads:
        named = next((p for p, prefixes in (members or {}).items() if w.id.startswith(tuple(prefixes))), None)
        for u in w.gpu_uuids:
            if u in gpus:
                out[u] = named or gpus[u].pool
    return out


def pool_demand(
    view: WindowView,
    gpus: Mapping[str, Gpu],
    workloads: Iterable[Workload],
    *,
    measure: str = "busy",
    window_s: float = 300.0,
    members: Members | None = None,
) -> dict[str, float]:
    """Each pool's demand now, in GPUs: ``busy`` sums the held GPUs' mean utilisation over the last
    ``window_s`` (two GPUs at 50 % are one GPU of demand); ``held`` counts the GPUs held. A GPU
    without data adds nothing (a pool with no data at all is left out: no data is not zero).
    ``members`` makes pools of workloads (see ``held_pools``)."""
    held = held_pools(workloads, gpus, members)
    # Every pool the cluster has starts at 0: nothing held is no demand.
    out = {g.pool: 0.0 for g in gpus.values()} | dict.fromkeys(members or {}, 0.0)
    if measure == "held":
        for pool in held.values():
            out[pool] += 1.0
        return out
    util = view.mean(Metric.GPU_UTIL, window_s)
    unmeasured: set[str] = set()
    measured: set[str] = set()
    for u, pool in held.items():
        i = view.index_of(u)
        if i is None or not math.isfinite(util[i]):
            unmeasured.add(pool)
            continue
        measured.add(pool)
        out[pool] += min(100.0, float(util[i])) / 100.0
    for pool in unmeasured - measured:
        del out[pool]  # GPUs held and none measured: unknown, not zero
    return out


def observation_demand(
    obs: Observation, *, measure: str = "busy", members: Members | None = None
) -> dict[str, float]:
    """Each pool's demand in one observation (a source's history), as ``pool_demand`` counts it."""
    gpus = {g.uuid: g for g in obs.gpus}
    util = latest(obs.samples, "gpu_util_pct")
    out = {g.pool: 0.0 for g in obs.gpus} | dict.fromkeys(members or {}, 0.0)
    seen: dict[str, bool] = {}
    for u, pool in held_pools(obs.workloads, gpus, members).items():
        if measure == "held":
            out[pool] += 1.0
            continue
        v = util.get(u)
        seen.setdefault(pool, False)
        if v is not None and math.isfinite(v):
            seen[pool] = True
            out[pool] += min(100.0, v) / 100.0
    for pool, measured in seen.items():
        if not measured:
            del out[pool]  # GPUs held and none measured: unknown, not zero
    return out


def _slug(pool: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", pool).strip("-.") or "pool"


@dataclass
class DemandHistory:
    """Per pool, the mean demand per ``step_s`` bucket over the last ``max_days``."""

    step_s: float = 900.0
    max_days: float = 35.0
    directory: Path | None = None
    _sums: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    _written: dict[str, int] = field(default_factory=dict)

    def add(self, pool: str, at_s: float, value: float) -> None:
        if not math.isfinite(value):
            return
        b = math.floor(at_s / self.step_s)
        acc = self._sums.setdefault(pool, {}).setdefault(b, [0.0, 0.0])
        acc[0] += value
        acc[1] += 1.0

    def extend(self, pool: str, times_s: Iterable[float], values: Iterable[float]) -> None:
        for t, v in zip(times_s, values, strict=True):
            self.add(pool, float(t), float(v))

    @property
    def pools(self) -> list[str]:
        return sorted(self._sums)

    def series(self, pool: str, *, until_s: float | None = None) -> Series:
        """The pool's buckets up to (not including) the one holding ``until_s``: a bucket still
        filling would read as a drop in demand."""
        buckets = self._sums.get(pool, {})
        last = math.floor(until_s / self.step_s) if until_s is not None else None
        keys = sorted(k for k in buckets if last is None or k < last)
        if not keys:
            return Series(0.0, self.step_s, np.empty(0))
        t = np.asarray(keys, dtype=np.float64) * self.step_s
        v = np.asarray([buckets[k][0] / buckets[k][1] for k in keys])
        return bucket(t, v, self.step_s)

    def prune(self, now_s: float, pool: str | None = None) -> None:
        """Forget buckets older than ``max_days`` (of one pool, or of all)."""
        oldest = math.floor((now_s - self.max_days * 86_400) / self.step_s)
        for name, buckets in self._sums.items():
            if pool is None or name == pool:
                for k in [k for k in buckets if k < oldest]:
                    del buckets[k]

    # -- persistence: one append-only CSV per pool ---------------------------------------------
    def load(self) -> None:
        """Read back what earlier runs wrote to ``directory`` (nothing when unset or absent)."""
        if self.directory is None or not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("pool-*.csv")):
            with path.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.reader(fh))
            if not rows or rows[0][:3] != ["time", "pool", "demand"]:
                raise ConfigError("not a gpusteward demand file (time,pool,demand)", path=str(path), line=1)
            for line, row in enumerate(rows[1:], start=2):
                try:
                    t, pool, v = parse_time(row[0]), row[1], float(row[2])
                except (ValueError, IndexError) as e:
                    raise ConfigError(f"bad row: {e}", path=str(path), line=line) from e
                self.add(pool, t, v)
                self._written[pool] = max(self._written.get(pool, -(2**62)), math.floor(t / self.step_s))

    def flush(self, now_s: float) -> int:
        """Append every finished bucket not yet written; returns how many rows were written."""
        if self.directory is None:
            return 0
        self.directory.mkdir(parents=True, exist_ok=True)
        current = math.floor(now_s / self.step_s)
        written = 0
        for pool, buckets in self._sums.items():
            done = self._written.get(pool, -(2**62))
            todo = sorted(k for k in buckets if done < k < current)
            if not todo:
                continue
            path = self.directory / f"pool-{_slug(pool)}.csv"
            new = not path.exists()
            with path.open("a", newline="", encoding="utf-8") as fh:
                w = csv.writer(fh)
                if new:
                    w.writerow(["time", "pool", "demand"])
                for k in todo:
                    s, c = buckets[k]
                    w.writerow([utc(k * self.step_s).isoformat(), pool, f"{s / c:.4f}"])
            self._written[pool] = todo[-1]
            written += len(todo)
        return written
