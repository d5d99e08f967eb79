"""The overview's "GPU health" and "Queue" boxes as plain data (issue 16).

Health: each GPU's state from the open, fresh health findings (``action: repair``) the loop
stored, worst first (``policy.health.gpu_health``); GPUs with health readings in the live window
and no finding are ``ok``. Without live data the ``ok`` count is unknown (None), never 0.
Queue: the figures of the queue the loop read last (``analysis.queue_figures``); None when no
queue was read (unknown, not "nobody waits").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from gpusteward.analysis.queue_figures import queue_figures
from gpusteward.domain.health import Health
from gpusteward.domain.models import Finding, Gpu
from gpusteward.domain.queue import Queue
from gpusteward.policy.health import gpu_health, health_of
from gpusteward.runtime.health_step import with_health_data
from gpusteward.runtime.loop import Steward
from gpusteward.store.db import StateStore
from gpusteward.web.data import gpu_name

#: The states whose GPUs the box lists one by one (the others are only counted).
LISTED = (Health.FAILED, Health.DEGRADING)


def health(store: StateStore, steward: Steward | None, now: datetime, *, fresh: timedelta) -> dict[str, Any]:
    """Counts per state (every state present) and the failed / degrading GPUs with the finding's
    message and who holds them."""
    findings = [
        e.finding
        for e in store.open_findings()
        if health_of(e.finding) is not None and now - e.last_seen_at <= fresh
    ]
    with_data = (
        with_health_data(steward.window.view(now)) if steward is not None and len(steward.window) else []
    )
    states = gpu_health(findings, with_data)
    counts: dict[str, int | None] = {h.value: 0 for h in Health}
    counts.update(Counter(s.value for s in states.values()))
    if steward is None:
        counts[Health.OK.value] = None  # no live window: which GPUs are fine is not known
    gpus: Mapping[str, Gpu] = steward.gpus if steward is not None else {}
    rows = []
    for uuid, state in states.items():
        if state not in LISTED:
            continue
        f = _worst(findings, uuid, state)
        rows.append({"state": state.value, "uuid": uuid, **_where(gpus, uuid), **_finding(store, f)})
    rows.sort(key=lambda r: (LISTED.index(Health(r["state"])), r["node"], r["gpu"]))
    return {"counts": counts, "gpus": rows}


def _worst(findings: list[Finding], uuid: str, state: Health) -> Finding | None:
    return next((f for f in findings if uuid in f.gpu_uuids and health_of(f) is state), None)


def _where(gpus: Mapping[str, Gpu], uuid: str) -> dict[str, str]:
    g = gpus.get(uuid)
    return {"node": g.node if g else "", "gpu": gpu_name(gpus, uuid), "model": g.model if g else ""}


def _finding(store: StateStore, f: Finding | None) -> dict[str, str]:
    if f is None:
        return {"rule": "", "message": "", "workload_id": "", "holder": ""}
    holder = ""
    if f.workload_id is not None:
        rec = store.workload_info(f.workload_id)
        holder = (rec.owner.user + (f" ({rec.owner.team})" if rec.owner.team else "")) if rec else ""
    return {"rule": f.rule, "message": f.message, "workload_id": f.workload_id or "", "holder": holder}


def queue(q: Queue | None) -> dict[str, Any] | None:
    """Jobs waiting, GPUs waited for by model, queue time p50/p95 overall and per queue."""
    if q is None:
        return None
    fig = queue_figures(q)
    return {
        "at": q.at,
        "jobs_waiting": fig.total.jobs,
        "jobs_waiting_for_gpus": fig.total.gpu_jobs,
        "gpus_waited_for": fig.total.gpus,
        "by_model": [
            {"model": m or "any", "jobs": w.gpu_jobs, "gpus": w.gpus}
            for m, w in fig.by_model.items()
            if w.gpus
        ],
        "started": fig.time.started,
        "p50_s": fig.time.p50_s,
        "p95_s": fig.time.p95_s,
        "by_queue": [
            {
                "queue": name,
                "jobs": fig.by_queue[name].jobs if name in fig.by_queue else 0,
                "gpus": fig.by_queue[name].gpus if name in fig.by_queue else 0,
                "p50_s": fig.time_by_queue[name].p50_s if name in fig.time_by_queue else None,
                "p95_s": fig.time_by_queue[name].p95_s if name in fig.time_by_queue else None,
            }
            for name in sorted(set(fig.by_queue) | set(fig.time_by_queue))
        ],
    }


def latest_queue(steward: Steward | None) -> Queue | None:
    """The queue the loop read at its last tick (None: no loop here, or no queue read)."""
    return steward.queues.latest if steward is not None else None
