"""The backtest's queue figures: the same arrivals with gpusteward acting and without.

With a pod list (``--queue``), the replay gets a scheduler (``integrations/replay/queue_model``)
that the tick reads as the cluster's queue, so demand paces the ladder as with a real scheduler.
After the run the queue times are compared with a second pass of the scheduler over the same
arrivals with no stops, where GPUs free up only when the trace's own workloads end.
"""

from __future__ import annotations

from typing import Any

from gpusteward.integrations.replay.pods import PodList
from gpusteward.integrations.replay.queue_model import QueueModel


def queue_figures(acted: QueueModel, pods: PodList) -> dict[str, Any]:
    """Summary keys: p50/p95 queue time (min) and jobs started/unstarted, with and without
    gpusteward; jobs still waiting at the end count with the time they waited so far."""
    end = acted.trace.end
    with_ = acted.finish(end)
    alone = QueueModel(acted.trace, pods.jobs, offset_s=acted.offset_s).finish(end)

    def both(f: Any) -> dict[str, Any]:
        return {"with_gpusteward": f(with_), "without": f(alone)}

    return {
        "queue_time_p50_min": both(lambda s: s.percentile_min(50)),
        "queue_time_p95_min": both(lambda s: s.percentile_min(95)),
        "queue_jobs": {
            "arrived": len(acted.arrivals),
            "started": both(lambda s: s.started),
            "unstarted": both(lambda s: s.unstarted),
            "after_replay_end": acted.beyond_replay,
            "skipped_rows": pods.skipped,
        },
    }


def queue_line(summary: dict[str, Any]) -> str | None:
    """One line for the text output, or None for a backtest without a queue."""
    if "queue_jobs" not in summary:
        return None
    p50, p95, jobs = summary["queue_time_p50_min"], summary["queue_time_p95_min"], summary["queue_jobs"]

    def m(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    return (
        f"queue time p50/p95 (min): {m(p50['with_gpusteward'])}/{m(p95['with_gpusteward'])} with "
        f"gpusteward, {m(p50['without'])}/{m(p95['without'])} without; {jobs['arrived']} jobs, "
        f"{jobs['started']['with_gpusteward']} started ({jobs['started']['without']} without)"
    )
