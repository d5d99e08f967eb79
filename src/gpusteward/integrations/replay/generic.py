"""The generic trace format: a long table, one row per GPU per sample (CSV, or Parquet with pyarrow).

Required columns: ``timestamp`` (epoch seconds or RFC 3339; no offset means UTC), ``gpu`` (a
unique id), ``util_pct``, and ``mem_used_mib`` or ``mem_used_bytes``. Optional: ``node``,
``mem_total_mib``, ``power_w``, ``sm_active`` (a 0-1 ratio as DCGM reports it; a column with a
value above 1 is read as percent), ``workload``, ``owner``, ``team``, ``class`` (the workload's
class: service, batch, interactive or unknown; see ``domain.classes``), ``gpu_model``,
``workload_started_at`` (and ``gpus_requested``, where the trace knows more GPUs were asked for
than it shows). An empty cell is a missing value. Without a ``workload`` column each
GPU is one workload; with one, an empty cell means nobody held the GPU at that sample.

``parse_long_table`` is pure (columns in, ``Trace`` out); ``load_generic`` reads the file.
"""

from __future__ import annotations

import csv
import difflib
import importlib
import logging
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import Gpu, Owner
from gpusteward.integrations.replay.trace import (
    MAX_GPUS,
    Trace,
    TraceWorkload,
    span_problem,
    time_problem,
)

log = logging.getLogger(__name__)

REQUIRED = ("timestamp", "gpu", "util_pct")
MEMORY = ("mem_used_mib", "mem_used_bytes")
OPTIONAL = (
    "node",
    "mem_total_mib",
    "power_w",
    "sm_active",
    "workload",
    "owner",
    "team",
    "gpu_model",
    "class",
    "workload_started_at",
    "gpus_requested",
)
KNOWN = (*REQUIRED, *MEMORY, *OPTIONAL)
#: The first data row's line in a CSV file (the header is line 1).
FIRST_LINE = 2

Columns = Mapping[str, Sequence[Any]]


def _text(v: Any) -> str:
    return "" if v is None else str(v).strip()


def parse_time(value: Any) -> float | None:
    """Epoch seconds from epoch seconds, an RFC 3339 string or a datetime; None when empty.
    Raises ValueError on anything else."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, int | float):
        return None if math.isnan(value) else float(value)
    text = str(value).strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    at = datetime.fromisoformat(text)
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def _times(
    values: Sequence[Any], column: str, path: str, first_line: int, required: bool
) -> npt.NDArray[np.float64]:
    cache: dict[str | int | float, float | None] = {}  # traces repeat each timestamp per GPU
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        key = v if isinstance(v, str | int | float) else None
        if key is not None and key in cache:
            hit = cache[key]
        else:
            try:
                hit = parse_time(v)
            except (ValueError, OverflowError) as e:
                raise ConfigError(
                    f"{column}: not epoch seconds or RFC 3339: {_text(v)[:40]!r}",
                    path=path,
                    line=first_line + i,
                ) from e
            if hit is not None and (problem := time_problem(hit)):
                raise ConfigError(f"{column}: {problem}", path=path, line=first_line + i)
            if key is not None:
                cache[key] = hit
        if hit is None and required:
            raise ConfigError(f"{column}: empty", path=path, line=first_line + i)
        out[i] = np.nan if hit is None else hit
    return out


def _numbers(values: Sequence[Any], column: str, path: str, first_line: int) -> npt.NDArray[np.float64]:
    """Floats, NaN for empty cells; a cell that is not a number is an error naming its line."""
    cells = ["nan" if v is None or (isinstance(v, str) and not v.strip()) else v for v in values]
    try:
        return np.asarray(cells, dtype=np.float64)
    except (TypeError, ValueError):
        for i, v in enumerate(cells):
            try:
                float(v)
            except (TypeError, ValueError) as e:
                raise ConfigError(
                    f"{column}: not a number: {_text(v)[:40]!r}", path=path, line=first_line + i
                ) from e
        raise  # pragma: no cover - numpy refused what float() accepts


def _within(
    values: npt.NDArray[np.float64], column: str, lo: float, hi: float | None, path: str, first_line: int
) -> None:
    """Readings outside what the metric can be (negative utilisation, over 100 %, infinities)
    are an error naming the line: counted as they are, a negative reading would be waste."""
    bad = ~np.isnan(values) & (
        (values < lo) | ~np.isfinite(values) | ((values > hi) if hi is not None else False)
    )
    if bad.any():
        i = int(np.argmax(bad))
        limits = f"{lo:g} to {hi:g}" if hi is not None else f"at least {lo:g}"
        raise ConfigError(f"{column}: {values[i]:g} is not {limits}", path=path, line=first_line + i)


def _check_columns(names: Sequence[str], path: str) -> None:
    missing = [c for c in REQUIRED if c not in names]
    if not any(m in names for m in MEMORY):
        missing.append(" or ".join(MEMORY))
    for name in names:
        if name not in KNOWN:
            close = difflib.get_close_matches(name, KNOWN, n=1, cutoff=0.8)
            if close:
                raise ConfigError(f"unknown column {name!r}: did you mean {close[0]!r}?", path=path, line=1)
            log.warning("%s: column %r is not part of the trace format and is ignored", path, name)
    if missing:
        raise ConfigError(f"missing column(s): {', '.join(missing)}", path=path, line=1)


def _first_per_group(group: npt.NDArray[np.intp], values: Sequence[str], n: int) -> list[str]:
    """Per group 0..n-1, the first non-empty value in row order ("" when none)."""
    out = [""] * n
    rows = [i for i, v in enumerate(values) if v and group[i] >= 0]
    if rows:
        idx = np.asarray(rows, dtype=np.intp)
        groups, first = np.unique(group[idx], return_index=True)
        for g, i in zip(groups.tolist(), idx[first].tolist(), strict=True):
            out[g] = values[i]
    return out


def parse_long_table(
    columns: Columns, *, path: str = "<table>", gpu_model: str = "", first_line: int = FIRST_LINE
) -> Trace:
    """A ``Trace`` from the columns of a long table (see the module docstring)."""
    _check_columns(list(columns), path)
    n = len(columns["timestamp"])
    if any(len(columns[c]) != n for c in columns if c in KNOWN):
        raise ConfigError("columns of different lengths", path=path)
    if n == 0:
        raise ConfigError("the trace has no rows", path=path, line=first_line)
    t = _times(columns["timestamp"], "timestamp", path, first_line, required=True)
    if problem := span_problem(float(t.min()), float(t.max())):
        raise ConfigError(problem, path=path, line=first_line + int(np.argmax(t)))
    gpu_ids = [_text(v) for v in columns["gpu"]]
    if not all(gpu_ids):
        raise ConfigError("gpu: empty", path=path, line=first_line + gpu_ids.index(""))
    uniq, gpu = np.unique(np.asarray(gpu_ids, dtype=object), return_inverse=True)
    gpu = gpu.astype(np.intp)

    def num(name: str, scale: float = 1.0) -> npt.NDArray[np.float64] | None:
        if name not in columns:
            return None
        return _numbers(columns[name], name, path, first_line) * scale

    util = num("util_pct")
    assert util is not None
    _within(util, "util_pct", 0.0, 100.0, path, first_line)
    mem = num("mem_used_mib") if "mem_used_mib" in columns else num("mem_used_bytes", 1 / 2**20)
    if mem is not None:
        _within(
            mem,
            "mem_used_mib" if "mem_used_mib" in columns else "mem_used_bytes",
            0.0,
            None,
            path,
            first_line,
        )
    sm = num("sm_active")
    if sm is not None and not np.nanmax(sm, initial=0.0) > 1.0:
        sm = sm * 100.0  # a DCGM ratio

    # Duplicate (gpu, timestamp) rows: the last one wins.
    order = np.lexsort((np.arange(n), t, gpu))
    dup = np.zeros(n, dtype=np.bool_)
    dup[order[:-1]] = (gpu[order[1:]] == gpu[order[:-1]]) & (t[order[1:]] == t[order[:-1]])
    keep = ~dup

    texts = {
        c: [_text(v) for v in columns[c]]
        for c in ("node", "gpu_model", "workload", "owner", "team", "class")
        if c in columns
    }
    n_gpus = len(uniq)
    nodes = _first_per_group(gpu, texts["node"], n_gpus) if "node" in texts else [""] * n_gpus
    models = _first_per_group(gpu, texts["gpu_model"], n_gpus) if "gpu_model" in texts else [""] * n_gpus
    totals = np.full(n_gpus, np.nan)
    mem_total = num("mem_total_mib")
    if mem_total is not None:
        have = np.flatnonzero(~np.isnan(mem_total))[::-1]  # reversed: the first value is written last
        totals[gpu[have]] = mem_total[have]
    per_node: dict[str, int] = {}
    gpus = []
    for i, uid in enumerate(uniq.tolist()):
        node = nodes[i] or "replay"
        index = per_node[node] = per_node.get(node, -1) + 1
        total = 0.0 if math.isnan(totals[i]) else float(totals[i])
        gpus.append(
            Gpu(uuid=uid, node=node, index=index, model=models[i] or gpu_model, memory_total_mib=total)
        )

    if "workload" in texts:
        names = np.asarray(texts["workload"], dtype=object)
        held = names != ""
        wl = np.full(n, -1, dtype=np.intp)
        wl_names, inv = np.unique(names[held], return_inverse=True)
        wl[held] = inv
        wl_ids = [str(x) for x in wl_names.tolist()]
    else:
        wl = gpu.copy()
        wl_ids = [str(x) for x in uniq.tolist()]
    wl[dup] = -1  # a dropped duplicate must not stretch a workload
    started = (
        _times(columns["workload_started_at"], "workload_started_at", path, first_line, required=False)
        if "workload_started_at" in columns
        else None
    )
    requested = num("gpus_requested")
    if requested is not None:
        bad = ~np.isnan(requested) & ~((requested >= 0) & (requested <= MAX_GPUS))
        if bad.any():
            i = int(np.argmax(bad))
            raise ConfigError(f"gpus_requested: not 0 to {MAX_GPUS}", path=path, line=first_line + i)
    workloads, wl = _workloads(wl, wl_ids, gpu, t, started, requested, texts)
    return Trace(
        name=Path(path).name,
        gpus=gpus,
        t=t[keep],
        gpu=gpu[keep],
        util=util[keep],
        mem=None if mem is None else mem[keep],
        power=None if (p := num("power_w")) is None else p[keep],
        sm=None if sm is None else sm[keep],
        wl=wl[keep],
        workloads=workloads,
    )


def _workloads(
    wl: npt.NDArray[np.intp],
    ids: Sequence[str],
    gpu: npt.NDArray[np.intp],
    t: npt.NDArray[np.float64],
    started: npt.NDArray[np.float64] | None,
    requested: npt.NDArray[np.float64] | None,
    texts: Mapping[str, Sequence[str]],
) -> tuple[list[TraceWorkload], npt.NDArray[np.intp]]:
    """The workload table, and ``wl`` renumbered when a workload had no row left."""
    n = len(ids)
    held = wl >= 0
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, wl[held], t[held])
    np.maximum.at(last, wl[held], t[held])
    start = first.copy()
    if started is not None:  # the column, where given, says when it started
        ok = held & ~np.isnan(started)
        given = np.full(n, np.inf)
        np.minimum.at(given, wl[ok], started[ok])
        start = np.where(np.isfinite(given), given, first)
    asked = np.zeros(n)
    if requested is not None:
        ok = held & ~np.isnan(requested)
        np.maximum.at(asked, wl[ok], requested[ok])
    stride = int(gpu.max()) + 1
    gpu_sets: list[list[int]] = [[] for _ in range(n)]
    for pair in np.unique(wl[held].astype(np.int64) * stride + gpu[held]).tolist():
        gpu_sets[pair // stride].append(pair % stride)
    owners = _first_per_group(wl, texts["owner"], n) if "owner" in texts else [""] * n
    teams = _first_per_group(wl, texts["team"], n) if "team" in texts else [""] * n
    classes = _first_per_group(wl, texts["class"], n) if "class" in texts else [""] * n
    kept = [i for i in range(n) if gpu_sets[i]]  # a workload only in dropped duplicates is gone
    out = [
        TraceWorkload(
            id=ids[i],
            name=ids[i],
            owner=Owner(owners[i] or "unknown", teams[i]),
            gpus=tuple(gpu_sets[i]),
            started_at=float(start[i]),
            first_t=float(first[i]),
            last_t=float(last[i]),
            gpus_requested=int(asked[i]),
            workload_class=classes[i].strip().lower(),
        )
        for i in kept
    ]
    if len(kept) == n:
        return out, wl
    remap = np.full(n, -1, dtype=np.intp)
    remap[kept] = np.arange(len(kept))
    renumbered = wl.copy()
    renumbered[held] = remap[wl[held]]
    return out, renumbered


def read_csv_columns(path: str | Path) -> dict[str, list[str]]:
    """The columns of a CSV file with a header row, as strings."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise ConfigError("empty file: expected a header row", path=str(p), line=1)
            names = [h.strip() for h in header]
            cols: list[list[str]] = [[] for _ in names]
            for line, row in enumerate(reader, start=FIRST_LINE):
                if len(row) != len(names):
                    if not row:
                        continue
                    raise ConfigError(
                        f"{len(row)} fields, the header has {len(names)}", path=str(p), line=line
                    )
                for col, v in zip(cols, row, strict=True):
                    col.append(v)
    except OSError as e:
        raise ConfigError(f"cannot read trace: {e.strerror or e}", path=str(p)) from e
    except (csv.Error, UnicodeDecodeError) as e:
        raise ConfigError(f"not a CSV file: {e}", path=str(p)) from e
    return dict(zip(names, cols, strict=True))


def read_parquet_columns(path: str | Path) -> dict[str, list[Any]]:
    """The columns of a Parquet file; needs the optional ``pyarrow`` (``pip install gpusteward[parquet]``)."""
    try:
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError as e:
        raise ConfigError(
            "reading Parquet needs pyarrow: pip install 'gpusteward[parquet]' (or convert to CSV)",
            path=str(path),
        ) from e
    try:
        table = pq.read_table(str(path))
    except (OSError, ValueError) as e:  # pyarrow's errors derive from these
        raise ConfigError(f"cannot read Parquet: {e}", path=str(path)) from e
    data: dict[str, list[Any]] = table.to_pydict()
    return data


def load_generic(path: str | Path, *, gpu_model: str = "") -> Trace:
    """A generic trace from CSV or (by its ``.parquet``/``.pq`` suffix) Parquet."""
    p = Path(path)
    parquet = p.suffix.lower() in (".parquet", ".pq")
    columns: Columns = read_parquet_columns(p) if parquet else read_csv_columns(p)
    return parse_long_table(columns, path=str(p), gpu_model=gpu_model)
