"""Demand: jobs waiting for free GPUs set the ladder's pace for idle holders of that model. Pure.

The scheduler integrations read their queues into a ``Queue`` each tick (issue 16). For a
workload, what counts is the pending jobs held back by GPUs being taken (``GPU_WAIT_REASONS``)
that want a model it holds: the more GPUs they wait for, the shorter the waits between its
ladder steps, down to ``demand.min_factor`` at ``demand.full_at_gpus``. A queue that was read and
holds nobody for the model may slow the ladder (``demand.max_factor``); a queue not read at all
(no scheduler, or it failed this tick) leaves the pace alone: unknown is not "nobody waits".

Only the waits between steps change: the ladder still takes every step in order, one per tick,
and the startup grace, protection, approvals, scopes and budgets are checked as before.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from gpusteward.domain.classes import workload_class
from gpusteward.domain.models import Gpu, Workload
from gpusteward.domain.queue import Queue, same_model
from gpusteward.policy.settings import DemandSettings, LadderSettings


@dataclass(frozen=True, slots=True)
class Demand:
    """What waits for the GPU model a workload holds, and the pace that sets."""

    #: The held GPUs' model (``Gpu.model``).
    model: str
    #: Pending jobs waiting for free GPUs of that model, and the GPUs they ask for.
    jobs: int
    gpus: int
    #: Ladder waits are multiplied by this: below 1 faster, above 1 slower.
    factor: float


def factor(gpus_waited: int | None, settings: DemandSettings) -> float:
    """The waits' multiplier for ``gpus_waited`` (None: no queue read): 1.0 down to ``min_factor``
    linearly up to ``full_at_gpus``; ``max_factor`` when a queue says nobody waits."""
    if gpus_waited is None:
        return 1.0
    if gpus_waited <= 0:
        return settings.max_factor
    share = min(gpus_waited, settings.full_at_gpus) / settings.full_at_gpus
    return 1.0 - (1.0 - settings.min_factor) * share


def demand_for(
    w: Workload, queue: Queue | None, gpus: Mapping[str, Gpu], settings: DemandSettings
) -> Demand | None:
    """The demand for the model ``w`` holds (the most waited-for one if it holds several), or
    None when no queue was read, none of its GPUs is known or its class is not paced."""
    if queue is None:  # asked for every planned workload each tick: settled before its GPUs are looked at
        return None
    models = sorted({gpus[u].model for u in w.gpu_uuids if u in gpus})
    if not models or workload_class(w) not in settings.classes:
        return None
    waiting = [p for p in queue.pending if p.waits_for_gpus and p.gpus > 0]
    best: Demand | None = None
    for model in models:
        jobs = [p for p in waiting if same_model(p.gpu_model, model)]
        n = sum(p.gpus for p in jobs)
        if best is None or n > best.gpus:
            best = Demand(model, len(jobs), n, factor(n, settings))
    return best


def paced(timings: LadderSettings, multiplier: float) -> LadderSettings:
    """``timings`` with the waits between steps times ``multiplier``."""
    if multiplier == 1.0:
        return timings
    return timings.model_copy(
        update={
            "warn_again_after_minutes": timings.warn_again_after_minutes * multiplier,
            "graceful_stop_after_minutes": timings.graceful_stop_after_minutes * multiplier,
            "force_after_minutes": timings.force_after_minutes * multiplier,
        }
    )


def short_model(model: str) -> str:
    """``H100 80GB HBM3`` for ``NVIDIA H100 80GB HBM3``: how people call it."""
    return re.sub(r"^(nvidia|tesla)[\s_-]+", "", model.strip(), flags=re.IGNORECASE) or model


def sentence(d: Demand | None, reclaim: str, *, slowed: bool) -> str:
    """Why the ladder moves at its pace, for the decision reason and the owner's notice.
    ``reclaim`` is when the graceful stop comes (``ladder.when``), or "" when none is planned."""
    if d is None:
        return ""
    name = short_model(d.model)
    if d.gpus > 0:
        jobs = f"{d.jobs} job{'s' if d.jobs != 1 else ''} {'are' if d.jobs != 1 else 'is'}"
        out = f" {jobs} waiting for {d.gpus} free {name} GPU{'s' if d.gpus != 1 else ''}"
        if slowed:
            out += ", but the ladder keeps its slower pace after a suspected false kill"
        elif d.factor < 1:
            out += f", so the ladder moves {1 / d.factor:.3g}x faster"
        return out + (f"; your idle {name} will be reclaimed {reclaim}." if reclaim else ".")
    if d.factor > 1:
        return f" Nobody is waiting for {name} GPUs, so the ladder moves {d.factor:.3g}x slower."
    return ""


@dataclass(frozen=True, slots=True)
class Said:
    """A demand sentence read back from a decision's reason, for the notice templates (which
    word it in each language): who waits, for what, and when the stop comes (None: not planned)."""

    jobs: int
    gpus: int
    model: str
    reclaim_at: datetime | None


# The inverse of ``sentence`` (and of ``ladder.when``'s ``at HH:MM UTC[ on YYYY-MM-DD]``).
_SAID = re.compile(
    r"(?P<jobs>\d+) jobs? (?:are|is) waiting for (?P<gpus>\d+) free (?P<model>.+?) GPUs?"
    r"(?:, [^;]*?)?(?:; your idle .+? will be reclaimed in \d+ min, at (?P<hm>\d\d:\d\d) UTC"
    r"(?: on (?P<day>\d{4}-\d\d-\d\d))?)?\.(?:\s|$)"
)


def said(reason: str, at: datetime) -> Said | None:
    """The demand ``sentence`` in ``reason`` (a decision made at ``at``), or None."""
    m = _SAID.search(reason)
    if m is None:
        return None
    when = None
    if m["hm"]:
        day = m["day"] or at.astimezone(UTC).strftime("%Y-%m-%d")
        when = datetime.fromisoformat(f"{day}T{m['hm']}:00+00:00")
    return Said(int(m["jobs"]), int(m["gpus"]), m["model"], when)
