"""Pure parsers for Slurm's text outputs: ``scontrol --oneliner --details show job`` (the fallback
where ``--json`` is unavailable; the only text that carries per-node GPU indices), ``sacct
--parsable2`` (typical runtimes) and Slurm's durations.

scontrol prints local times without an offset, so the caller passes the controller's time zone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, tzinfo

from gpusteward.integrations.slurm.gres import (
    array_task_count,
    expand_hostlist,
    gpus_of,
    pending_reason,
    tres_gpu_count,
    tres_gpu_type,
)
from gpusteward.integrations.slurm.model import JobView, SacctRecord, SacctStart, SlurmJob
from gpusteward.integrations.slurm.parse_json import merge_het

_UNSET = frozenset({"", "(null)", "n/a", "none", "unknown"})
# A key starts a new field: ``JobId=``, ``AllocNode:Sid=``, ``CPUs/Task=``. Hyphens are not
# allowed, so a comment such as ``gpusteward:exclude-until=...`` stays inside Comment.
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_duration_minutes(text: str) -> float | None:
    """Slurm durations in minutes: ``30``, ``30:00``, ``1:30:00``, ``2-00``, ``2-12:00``,
    ``2-12:00:00``, ``12:34.567``; None for ``UNLIMITED``, ``Partition_Limit``, blanks and
    anything unreadable or not finite (``1e999``, ``1:xx``)."""
    try:
        minutes = _duration_minutes(text)
    except ValueError:
        return None
    return minutes if minutes is not None and math.isfinite(minutes) else None


def _duration_minutes(text: str) -> float | None:
    t = text.strip()
    if not t or not t[0].isdigit():
        return None
    days = 0.0
    if "-" in t:
        d, _, t = t.partition("-")
        days = float(d)
        parts = t.split(":")
        # days-hours[:minutes[:seconds]]
        h = float(parts[0]) if parts[0] else 0.0
        m = float(parts[1]) if len(parts) > 1 else 0.0
        s = float(parts[2]) if len(parts) > 2 else 0.0
        return days * 1440 + h * 60 + m + s / 60
    parts = t.split(":")
    if len(parts) == 1:
        return float(parts[0])
    if len(parts) == 2:
        return float(parts[0]) + float(parts[1]) / 60
    return float(parts[0]) * 60 + float(parts[1]) + float(parts[2]) / 60


def _fields(line: str) -> list[tuple[str, str]]:
    keys = list(_KEY.finditer(line))
    out = []
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out.append((m.group(1), line[m.end() : end].strip()))
    return out


def _value(text: str) -> str:
    return "" if text.strip().lower() in _UNSET else text.strip()


def _time(text: str, tz: tzinfo) -> datetime | None:
    if _value(text) == "":
        return None
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=tz)
    except ValueError:
        return None


def _user(text: str) -> str:
    """``alice(1001)`` → ``alice``."""
    return text.split("(", 1)[0].strip()


def parse_scontrol_job(line: str, tz: tzinfo) -> tuple[SlurmJob, str | None]:
    """One line of ``scontrol -o -d show job``: the job and its het leader id (None if not het)."""
    fields = _fields(line)
    one: dict[str, str] = {}
    node_gres: list[tuple[str, str]] = []
    pending_nodes: str | None = None
    for key, value in fields:
        if key == "Nodes":  # per-node detail groups: Nodes=gpu[1-2] CPU_IDs=.. Mem=.. GRES=..
            pending_nodes = value
        elif key == "GRES" and pending_nodes is not None:
            node_gres.append((pending_nodes, value))
            pending_nodes = None
        else:
            one.setdefault(key, value)
    if "JobId" not in one or not one["JobId"].isdigit():
        raise ValueError(f"no JobId in {line[:120]!r}")
    job_id = one["JobId"]
    array_job, array_task = _value(one.get("ArrayJobId", "")), _value(one.get("ArrayTaskId", ""))
    display = f"{array_job}_{array_task}" if array_job and array_task.isdigit() else job_id
    nodes_text = _value(one.get("NodeList", ""))
    nodes = expand_hostlist(nodes_text) if nodes_text else []
    indices: dict[str, tuple[int, ...]] = {}
    count, gtype = 0, ""
    for group, gres in node_gres:
        for node in expand_hostlist(group) if _value(group) else []:
            for g in gpus_of(gres) if _value(gres) else []:
                count += g.count
                gtype = gtype or g.type
                if g.indices is not None:
                    indices[node] = tuple(sorted(set(indices.get(node, ()) + g.indices)))
    pending = one.get("JobState") == "PENDING"
    if not count:
        per_node = tres_gpu_count(one.get("TresPerNode", ""))
        asked = len(nodes) or (int(one["NumNodes"]) if pending and one.get("NumNodes", "").isdigit() else 1)
        count = (
            tres_gpu_count(one.get("TRES", ""))
            or tres_gpu_count(one.get("TresPerJob", ""))
            or (per_node * max(1, asked) if per_node else 0)
        )
    if not gtype:
        gtype = next(
            (
                t
                for k in ("TresPerJob", "TresPerNode", "TresPerSocket", "TresPerTask", "TRES")
                if (t := tres_gpu_type(one.get(k, "")))
            ),
            "",
        )
    array = _value(one.get("ArrayTaskId", ""))
    limit = parse_duration_minutes(one.get("TimeLimit", ""))
    job = SlurmJob(
        job_id=job_id,
        display_id=display,
        name=one.get("JobName", ""),
        user=_user(one.get("UserId", "")),
        account=_value(one.get("Account", "")),
        partition=_value(one.get("Partition", "")),
        qos=_value(one.get("QOS", "")),
        states=frozenset(s for s in _value(one.get("JobState", "")).upper().split("+") if s),
        started_at=_time(one.get("StartTime", ""), tz) if not pending else None,
        time_limit_minutes=int(limit) if limit is not None else None,
        nodes=tuple(nodes),
        gpu_indices=indices,
        gpu_count=count,
        gpu_type=gtype,
        comment=_value(one.get("Comment", "")),
        requeue=one.get("Requeue", "0").strip() == "1",
        submitted_at=_time(one.get("SubmitTime", ""), tz),
        reason=pending_reason(one.get("Reason", "")) if pending else "",
        array_tasks=array_task_count(array) if pending and not array.isdigit() else 1,
    )
    het = _value(one.get("HetJobId", ""))
    return job, het or None


def parse_scontrol_jobs(text: str, tz: tzinfo) -> tuple[JobView, list[str]]:
    """Every job of ``scontrol --oneliner --details show job`` (``No jobs in the system`` → none)."""
    plain: list[SlurmJob] = []
    het: dict[str, list[SlurmJob]] = {}
    problems: list[str] = []
    for line in text.splitlines():
        if not line.strip().startswith("JobId="):
            continue
        try:
            job, het_id = parse_scontrol_job(line, tz)
        except ValueError as e:
            problems.append(f"slurm job line unreadable: {e}")
            continue
        if het_id:
            het.setdefault(het_id, []).append(job)
        else:
            plain.append(job)
    jobs = plain + [merge_het(parts, leader) for leader, parts in het.items()]
    return JobView(jobs=tuple(jobs), version="", format="text"), problems


#: The sacct columns gpusteward asks for, in order.
SACCT_FIELDS = ("JobID", "User", "Account", "Partition", "State", "Elapsed", "Timelimit")


def _sacct_rows(
    text: str, fields: Sequence[str], delimiter: str, required: Sequence[str], problems: list[str]
) -> Iterator[tuple[int, Callable[[str], str]]]:
    """Each allocation line (steps such as ``123.batch`` left out) of ``sacct --parsable(2)
    --noheader --format=<fields>`` as (line number, cell by lower-case field name: "" where
    absent); a line short of fields goes to ``problems``."""
    col: Mapping[str, int] = {f.lower(): i for i, f in enumerate(fields)}
    missing = [f for f in required if f.lower() not in col]
    if missing:
        raise ValueError(f"sacct fields lack {', '.join(missing)}")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split(delimiter)
        if len(cells) < len(fields):
            problems.append(f"sacct line {n}: {len(cells)} fields, expected {len(fields)}")
            continue

        def cell(name: str, cells: list[str] = cells) -> str:
            return cells[col[name]].strip() if name in col else ""

        if "." in cell("jobid"):  # a step (123.batch, 123.0): its allocation line says it all
            continue
        yield n, cell


def parse_sacct(
    text: str, fields: Sequence[str] = SACCT_FIELDS, delimiter: str = "|"
) -> tuple[list[SacctRecord], list[str]]:
    """Allocations (not steps) from ``sacct --parsable2 --noheader --format=<fields>`` (or
    ``--parsable``, with its trailing delimiter). Returns records and unreadable lines."""
    records: list[SacctRecord] = []
    problems: list[str] = []
    for n, cell in _sacct_rows(text, fields, delimiter, ("JobID", "User", "State", "Elapsed"), problems):
        elapsed = parse_duration_minutes(cell("elapsed"))
        if elapsed is None:
            problems.append(f"sacct line {n}: elapsed {cell('elapsed')!r} unreadable")
            continue
        limit = parse_duration_minutes(cell("timelimit"))
        records.append(
            SacctRecord(
                job_id=cell("jobid"),
                user=cell("user"),
                account=cell("account"),
                partition=cell("partition"),
                state=cell("state").split(" ", 1)[0].upper(),
                elapsed_minutes=elapsed,
                time_limit_minutes=int(limit) if limit is not None else None,
            )
        )
    return records, problems


#: The sacct columns read for queue times, in order.
START_FIELDS = ("JobID", "Partition", "Submit", "Start", "AllocTRES")


def parse_sacct_starts(
    text: str, tz: tzinfo, fields: Sequence[str] = START_FIELDS, delimiter: str = "|"
) -> tuple[list[SacctStart], list[str]]:
    """Started allocations (not steps) with their submit and start times, and unreadable lines.
    Jobs that never started (``Start`` ``None`` / ``Unknown``) are left out; they waited, but
    did not finish waiting."""
    out: list[SacctStart] = []
    problems: list[str] = []
    for n, cell in _sacct_rows(text, fields, delimiter, ("JobID", "Submit", "Start"), problems):
        submitted, started = _time(cell("submit"), tz), _time(cell("start"), tz)
        if started is None:
            continue
        if submitted is None:
            problems.append(f"sacct line {n}: submit time {cell('submit')!r} unreadable")
            continue
        gpus = tres_gpu_count(cell("alloctres")) or 0
        out.append(SacctStart(cell("jobid"), cell("partition"), submitted, started, gpus))
    return out, problems
