"""Pure parsers for ``squeue --json`` and ``scontrol show job --json`` (Slurm 21.08 through 25.11).

The shapes differ by version: plain numbers (openapi v0.0.37/38) or ``{set, infinite, number}``
objects (v0.0.39+), ``job_state`` as a string or a list of flags, ``job_resources`` nodes as a
string, a list of ``nodename``s or ``nodes.allocation[].name``. A payload from a Slurm outside the
known range is refused: misreading a job table could stop the wrong job.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpusteward.domain.errors import SourceError
from gpusteward.domain.models import utc
from gpusteward.integrations.slurm.gres import (
    array_task_count,
    expand_hostlist,
    gpus_of,
    pending_reason,
    tres_gpu_count,
    tres_gpu_type,
)
from gpusteward.integrations.slurm.model import JobView, SlurmJob

#: Slurm releases whose JSON this module knows (inclusive).
OLDEST, NEWEST = (21, 8), (25, 11)
#: OpenAPI plugin / data_parser versions of those releases.
KNOWN_PARSERS = frozenset(f"v0.0.{n}" for n in range(37, 45))
#: ESLURM_INVALID_JOB_ID: asking for a job that has left the controller is not a failure.
_INVALID_JOB_ID = 2017
#: Above this a 32-bit count is one of Slurm's NO_VAL / INFINITE markers.
_NO_VAL = 0xFFFFFFF0


def _num(value: Any) -> int | None:
    """A number in any of the shapes: ``5``, ``null``, ``{"set": true, "infinite": false, "number": 5}``."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):  # JSON's Infinity, 1e999, NaN
        return None
    if isinstance(value, int | float):
        n = int(value)
        return None if n >= _NO_VAL else n
    if isinstance(value, str) and value.strip().isdigit():
        return _num(int(value))
    return None


def _map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is an object, else empty: a field of the wrong shape reads as absent."""
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _version(meta: Mapping[str, Any]) -> tuple[tuple[int, int] | None, str]:
    """(major, minor) and the release text, from ``meta.Slurm`` (≤23.02) or ``meta.slurm``."""
    info = _map(meta.get("slurm") or meta.get("Slurm"))
    version = _map(info.get("version"))
    major, minor = _num(version.get("major")), _num(version.get("minor"))
    release = _str(info.get("release"))
    if major is None or minor is None:
        return None, release
    return (major, minor), release or f"{major}.{minor:02d}"


def _parser_version(meta: Mapping[str, Any]) -> str:
    plugin = _map(meta.get("plugin"))
    for key in ("data_parser", "type"):
        m = re.search(r"v\d+\.\d+\.\d+", _str(plugin.get(key)))
        if m:
            return m.group(0)
    return ""


def check_version(meta: Any) -> str:
    """The Slurm release of a payload, or ``SourceError`` when it is not one this parser knows."""
    meta = meta if isinstance(meta, Mapping) else {}
    version, release = _version(meta)
    parser = _parser_version(meta)
    if version is not None and OLDEST <= version <= NEWEST:
        return release
    if version is None and parser in KNOWN_PARSERS:
        return parser
    what = f"Slurm {release}" if release else "an unknown Slurm"
    if parser:
        what += f" (JSON {parser})"
    raise SourceError(
        f"squeue --json: {what} is not supported (known: Slurm {OLDEST[0]}.{OLDEST[1]:02d} to "
        f"{NEWEST[0]}.{NEWEST[1]:02d}); set source.slurm.format: text to read scontrol's text instead"
    )


def _errors(payload: Mapping[str, Any]) -> list[str]:
    """Errors the command reported inside an exit-0 payload (22.05 does this when the controller is down)."""
    out = []
    raw = payload.get("errors")
    for e in raw if isinstance(raw, list) else [raw] if raw else []:  # a lone error is still one
        if not isinstance(e, Mapping):
            out.append(str(e))
            continue
        if _num(e.get("error_number")) == _INVALID_JOB_ID or "invalid job id" in _str(e.get("error")).lower():
            continue
        parts = [_str(e.get("description")), _str(e.get("error")), _str(e.get("source"))]
        out.append(" / ".join(p for p in parts if p) or json.dumps(e)[:200])
    return out


def _states(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(s.strip().upper() for s in value.split(",") if s.strip())
    if isinstance(value, Sequence):
        return frozenset(_str(s).upper() for s in value if _str(s))
    return frozenset()


def _alloc_nodes(job: Mapping[str, Any]) -> list[str]:
    """Allocated nodes in Slurm's order (the order of ``gres_detail``)."""
    res = job.get("job_resources") or {}
    nodes = res.get("nodes") if isinstance(res, Mapping) else None
    if isinstance(nodes, Mapping):  # 24.11+: nodes.allocation[].name
        names = [_str(a.get("name")) for a in nodes.get("allocation") or [] if isinstance(a, Mapping)]
        if names and all(names):
            return names
        nodes = nodes.get("list")
    allocated = res.get("allocated_nodes") if isinstance(res, Mapping) else None
    if isinstance(allocated, Sequence) and allocated and not isinstance(allocated, str):
        names = [_str(a.get("nodename")) for a in allocated if isinstance(a, Mapping)]
        if names and all(names):
            return names
    text = _str(nodes) or _str(job.get("nodes"))
    return expand_hostlist(text) if text else []


#: Where a job's GPU request is written (its model, for a pending job that has no allocation).
_REQUESTS = ("tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task", "tres_req_str")


def _gpu_request(job: Mapping[str, Any], node_count: int) -> int:
    """GPUs asked for, when no allocation says: per job, per node × nodes, per task × tasks."""
    for key, times in (
        ("tres_per_job", 1),
        ("tres_per_node", max(1, node_count)),
        ("tres_per_socket", max(1, node_count)),
        ("tres_per_task", max(1, _num(job.get("tasks")) or 1)),
    ):
        n = tres_gpu_count(_str(job.get(key)))
        if n:
            return n * times
    return tres_gpu_count(_str(job.get("tres_req_str"))) or 0


def parse_job(job: Mapping[str, Any], cluster: str = "") -> SlurmJob:
    """One job object of the ``jobs`` array. Raises ``ValueError`` / ``KeyError`` when malformed."""
    job_id = _num(job["job_id"])
    if job_id is None:
        raise ValueError(f"job without a job_id: {str(dict(job))[:120]}")
    array_job, array_task = _num(job.get("array_job_id")), _num(job.get("array_task_id"))
    display = f"{array_job}_{array_task}" if array_job and array_task is not None else str(job_id)
    nodes = _alloc_nodes(job)
    details = [_str(d) for d in job.get("gres_detail") or []]
    indices: dict[str, tuple[int, ...]] = {}
    count, gtype = 0, ""
    for node, detail in zip(nodes, details, strict=False):
        for g in gpus_of(detail):
            count += g.count
            gtype = gtype or g.type
            if g.indices is not None:
                indices[node] = tuple(sorted(set(indices.get(node, ()) + g.indices)))
    states = _states(job.get("job_state"))
    pending = "PENDING" in states
    if not count:
        # A pending job has no nodes yet: per-node requests count the nodes it asks for.
        asked = len(nodes) or (_num(job.get("node_count")) if pending else 0) or 0
        count = tres_gpu_count(_str(job.get("tres_alloc_str"))) or _gpu_request(job, asked)
    if not gtype:
        gtype = next(
            (t for k in _REQUESTS if (t := tres_gpu_type(_str(job.get(k))))),
            "",
        )
    # A pending job's start_time is the scheduler's guess, not a start.
    start = None if pending else _num(job.get("start_time"))
    submit = _num(job.get("submit_time"))
    return SlurmJob(
        job_id=str(job_id),
        display_id=display,
        name=_str(job.get("name")),
        user=_str(job.get("user_name")) or str(_num(job.get("user_id")) or ""),
        account=_str(job.get("account")),
        partition=_str(job.get("partition")),
        qos=_str(job.get("qos")),
        states=states,
        started_at=utc(start) if start and start > 0 else None,  # 0 or below: not started
        time_limit_minutes=_num(job.get("time_limit")),
        nodes=tuple(nodes),
        gpu_indices=indices,
        gpu_count=count,
        gpu_type=gtype,
        comment=_str(job.get("comment")),
        requeue=bool(job.get("requeue")),
        cluster=_str(job.get("cluster")) or cluster,
        submitted_at=utc(submit) if submit and submit > 0 else None,
        reason=pending_reason(_str(job.get("state_reason"))) if pending else "",
        array_tasks=array_task_count(_str(job.get("array_task_string"))) if pending else 1,
    )


def merge_het(parts: Sequence[SlurmJob], leader_id: str) -> SlurmJob:
    """The parts of a het job as one job: the leader's identity, every part's nodes and GPUs."""
    leader = next((p for p in parts if p.job_id == leader_id), parts[0])
    nodes = list(dict.fromkeys(n for p in parts for n in p.nodes))
    indices: dict[str, tuple[int, ...]] = {}
    for p in parts:
        for node, idx in p.gpu_indices.items():
            indices[node] = tuple(sorted(set(indices.get(node, ()) + idx)))
    starts = [p.started_at for p in parts if p.started_at is not None]
    submits = [p.submitted_at for p in parts if p.submitted_at is not None]
    return SlurmJob(
        job_id=leader_id,
        display_id=leader_id,
        name=leader.name,
        user=leader.user,
        account=leader.account,
        partition=leader.partition,
        qos=leader.qos,
        states=leader.states,
        started_at=min(starts) if starts else None,
        time_limit_minutes=leader.time_limit_minutes,
        nodes=tuple(nodes),
        gpu_indices=indices,
        gpu_count=sum(p.gpu_count for p in parts),
        gpu_type=next((p.gpu_type for p in parts if p.gpu_type), ""),
        comment=leader.comment,
        requeue=leader.requeue,
        cluster=leader.cluster,
        het_parts=tuple(sorted((p.job_id for p in parts), key=int)),
        submitted_at=min(submits) if submits else None,
        reason=leader.reason or next((p.reason for p in parts if p.reason), ""),
    )


def parse_jobs_json(text: str) -> tuple[JobView, list[str]]:
    """The job table of a ``squeue --json`` / ``scontrol show job --json`` payload, and per-job problems.

    Raises ``SourceError`` when the payload is not JSON, is of an unknown version, or carries
    errors (Slurm 22.05 exits 0 with an ``errors`` entry and no jobs when the controller is down).
    """
    try:
        payload = json.loads(text)
    except ValueError as e:
        raise SourceError(f"squeue --json: not JSON ({e}): {text[:120]!r}") from e
    except RecursionError:
        raise SourceError(f"squeue --json: JSON nested too deeply: {text[:120]!r}") from None
    if not isinstance(payload, Mapping) or not isinstance(payload.get("jobs", []), list):
        raise SourceError(f"squeue --json: no jobs array in {text[:120]!r}")
    release = check_version(payload.get("meta"))
    errors = _errors(payload)
    if errors:
        raise SourceError(f"squeue --json reported: {'; '.join(errors)[:300]}")
    meta = _map(payload.get("meta"))
    cluster = _str(_map(meta.get("slurm") or meta.get("Slurm")).get("cluster"))
    problems: list[str] = []
    plain: list[SlurmJob] = []
    het: dict[str, list[SlurmJob]] = {}
    for raw in payload.get("jobs") or []:
        try:
            job = parse_job(raw, cluster)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            ident = raw.get("job_id", "?") if isinstance(raw, Mapping) else "?"
            problems.append(f"slurm job {ident}: unreadable ({type(e).__name__}: {e})")
            continue
        het_id = _num(raw.get("het_job_id"))  # raw is a Mapping: parse_job read it
        if het_id:
            het.setdefault(str(het_id), []).append(job)
        else:
            plain.append(job)
    jobs = plain + [merge_het(parts, leader) for leader, parts in het.items()]
    return JobView(jobs=tuple(jobs), version=release, format="json", cluster=cluster), problems
