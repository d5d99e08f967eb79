"""Microsoft Philly per-job GPU windows (``weifanjiang/DRE``'s cut of the Philly trace, CC-BY-4.0).

``philly_gpu_util_per_job_minute_windows.csv`` has one row per GPU of a job, ``jobid, name
(machine_gpuN), machine_type, trace, -10 ... 3``: the GPU's utilisation (%) each minute from 10
minutes before the job's start to 3 minutes after (an empty cell is a missing sample). The start
time, user and virtual cluster come from ``sampled_jobs.json`` beside it. Minutes before the start
belong to whoever held the GPU then (unknown: unheld here); minutes 0-3 to the job. Times are read
as UTC. There is no GPU memory in this trace (None, never 0).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpusteward.domain.errors import ConfigError
from gpusteward.integrations.replay.generic import parse_long_table
from gpusteward.integrations.replay.trace import Trace

HEADER = ("jobid", "name", "machine_type", "trace")
JOBS_FILE = "sampled_jobs.json"


def _minute_floor(text: str) -> float:
    at = datetime.fromisoformat(text).replace(tzinfo=UTC)
    return at.replace(second=0, microsecond=0).timestamp()


def parse_philly(
    rows: Sequence[Sequence[str]],
    jobs: Sequence[Mapping[str, Any]],
    *,
    path: str = "<philly>",
    gpu_model: str = "",
) -> Trace:
    """A ``Trace`` from the windows CSV (header row first) and the parsed ``sampled_jobs.json``."""
    if not rows or tuple(c.strip() for c in rows[0][:4]) != HEADER:
        raise ConfigError(
            f"not a Philly window file: expected the header {', '.join(HEADER)}, -10 ... 3", path=path, line=1
        )
    try:
        minutes = [int(c) for c in rows[0][4:]]
    except ValueError as e:
        raise ConfigError(f"minute columns must be integers: {e}", path=path, line=1) from e
    by_id: dict[str, Mapping[str, Any]] = {}
    for entry in jobs:
        try:
            by_id[str(entry["jobid"])] = entry
        except (KeyError, TypeError) as e:
            raise ConfigError(f"{JOBS_FILE}: a job without a jobid: {e}") from e
    before: dict[str, list[Any]] = {c: [] for c in ("timestamp", "gpu", "node", "util_pct", "mem_used_mib")}
    during: dict[str, list[Any]] = {
        c: [] for c in (*before, "workload", "owner", "team", "workload_started_at", "gpus_requested")
    }
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        job = by_id.get(row[0])
        if job is None or len(row) != len(rows[0]):
            raise ConfigError(
                f"job {row[0]!r} is not in {JOBS_FILE} or the row is short", path=path, line=line
            )
        try:
            t0 = _minute_floor(str(job["start_time"]))
            requested = sum(len(d["gpus"]) for d in job["detail"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{JOBS_FILE}: job {row[0]}: bad start_time or detail: {e}") from e
        node = row[1].rsplit("_", 1)[0]
        for minute, value in zip(minutes, row[4:], strict=True):
            # Rows before the start go first: where a GPU's minute is in two windows, the job's wins.
            cols = during if minute >= 0 else before
            cols["timestamp"].append(t0 + 60 * minute)
            cols["gpu"].append(row[1])
            cols["node"].append(node)
            cols["util_pct"].append(value)
            cols["mem_used_mib"].append(None)
            if minute >= 0:
                cols["workload"].append(row[0])
                cols["owner"].append(str(job.get("user", "")))
                cols["team"].append(str(job.get("vc", "")))
                cols["workload_started_at"].append(
                    datetime.fromisoformat(str(job["start_time"])).replace(tzinfo=UTC)
                )
                cols["gpus_requested"].append(requested)
    if not during["timestamp"]:
        raise ConfigError("no job rows", path=path)
    n_before = len(before["timestamp"])
    columns = {c: before.get(c, [None] * n_before) + during[c] for c in during}
    try:
        return parse_long_table(columns, path=path, gpu_model=gpu_model)
    except ConfigError as e:  # its row numbers are not the file's lines
        raise ConfigError(e.problem, path=path) from e


def load_philly(path: str | Path, jobs_path: str | Path | None = None, *, gpu_model: str = "") -> Trace:
    """Read the windows CSV and ``sampled_jobs.json`` (beside it unless ``jobs_path`` says)."""
    p = Path(path)
    jp = Path(jobs_path) if jobs_path is not None else p.with_name(JOBS_FILE)
    try:
        with p.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        jobs = json.loads(jp.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(
            f"cannot read the Philly trace: {e.strerror or e}", path=str(e.filename or p)
        ) from e
    except (csv.Error, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot parse the Philly trace: {e}", path=str(p)) from e
    if not isinstance(jobs, list):
        raise ConfigError("expected a list of jobs", path=str(jp), line=1)
    return parse_philly(rows, jobs, path=str(p), gpu_model=gpu_model)
