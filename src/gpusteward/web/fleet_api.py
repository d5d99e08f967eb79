"""``GET /api/v1/fleet``: what a federation hub (``gpusteward hub``) needs from a member beyond
the overview, read-only, for a viewer.

* ``cluster``: ``web.cluster_name`` (the hub keys a member's figures by it).
* ``models``: per GPU model, the GPUs the loop sees, how many no workload holds (``free_gpus``)
  and how many are idle (``idle_gpus``: free ones plus those in a fresh reclaim finding). Without
  a live loop (``gpusteward serve`` on a state file) the list is empty and ``live`` false: unknown,
  never zero.
* ``waiting``: the jobs the scheduler's queue showed at the last tick, with the GPU model they
  ask for and how long they have waited so far (``queue_read`` false: no queue was read).
* ``health``: GPUs per health state (``ok`` is null without a live window).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gpusteward.domain.queue import Queue
from gpusteward.runtime.loop import Steward
from gpusteward.web import health_data, overview_data
from gpusteward.web.api import caller, ctx_of
from gpusteward.web.data import json_response

router = APIRouter(prefix="/api/v1", tags=["gpusteward"])

#: The most waiting jobs one answer lists (a queue longer than this is cut, and says so).
MAX_WAITING = 2000


def models(steward: Steward | None, idle: set[str]) -> list[dict[str, Any]]:
    """Per GPU model: GPUs seen, free (held by no workload) and idle (free or reclaimable)."""
    if steward is None:
        return []
    held = {u for w in steward.workloads.values() for u in w.gpu_uuids}
    total: Counter[str] = Counter()
    free: Counter[str] = Counter()
    idle_by: Counter[str] = Counter()
    for uuid, gpu in steward.gpus.items():
        total[gpu.model] += 1
        if uuid not in held:
            free[gpu.model] += 1
        if uuid not in held or uuid in idle:
            idle_by[gpu.model] += 1
    return [
        {"model": m, "gpus": total[m], "free_gpus": free[m], "idle_gpus": idle_by[m]} for m in sorted(total)
    ]


def waiting(queue: Queue | None, now: datetime) -> list[dict[str, Any]]:
    if queue is None:
        return []
    return [
        {
            "id": j.id,
            "queue": j.queue,
            "user": j.user,
            "gpus": j.gpus,
            "gpu_model": j.gpu_model,
            "reason": j.reason,
            "waits_for_gpus": j.waits_for_gpus,
            "submitted_at": j.submitted_at,
            "waited_s": round(max(0.0, (now - j.submitted_at).total_seconds()), 1),
        }
        for j in queue.pending[:MAX_WAITING]
    ]


@router.get("/fleet", summary="For a federation hub: GPUs per model, idle ones, the waiting jobs, health")
def fleet(request: Request) -> Response:
    caller(request)
    ctx = ctx_of(request)
    now, steward = ctx.now(), ctx.steward()
    idle, _ = overview_data.idle_now(ctx.store, now)
    queue = health_data.latest_queue(steward)
    return json_response(
        {
            "cluster": ctx.settings.web.cluster_name,
            "at": now,
            "source": ctx.settings.source.name,
            "mode": "dry-run" if ctx.dry_run else "enforce",
            "live": steward is not None,
            "currency": ctx.settings.cost.currency,
            "models": models(steward, idle),
            "queue_read": queue is not None,
            "waiting_cut": queue is not None and len(queue.pending) > MAX_WAITING,
            "waiting": waiting(queue, now),
            "health": health_data.health(ctx.store, steward, now, fresh=overview_data.FRESH)["counts"],
        }
    )
