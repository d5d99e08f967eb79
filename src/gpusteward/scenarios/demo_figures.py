"""The demo's issue-16 figures: queue time with and without gpusteward acting, and how the
failing GPUs were found (``gpu-failed``) and predicted (``gpu-degrading``), scored against
the simulator's ground truth."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpusteward.analysis.queue_figures import wait_minutes
from gpusteward.domain.records import FindingEpisode
from gpusteward.integrations.sim import SimCluster

#: The health rules' names (analysis/rules/default.yaml); findings are read by name only.
FAILED_RULE = "gpu-failed"
DEGRADING_RULE = "gpu-degrading"


def untouched(cluster: SimCluster) -> SimCluster:
    """The same cluster (seed, size, scenario, failing GPUs) that nobody acts on: the counterfactual."""
    return SimCluster(
        nodes=cluster.nodes,
        gpus_per_node=cluster.gpus_per_node,
        seed=cluster.seed,
        start=cluster.start,
        gpu_model=cluster.gpus[0].model,
        memory_total_mib=cluster.memory_total_mib,
        scenario=cluster.scenario,
        source_name=cluster.source_name,
        failing_gpus=len(cluster.health.faults),
        throttling_gpus=len(cluster.health.throttles),
    )


def queue_figures(cluster: SimCluster, until: datetime) -> dict[str, Any]:
    """Median queue time of the jobs submitted during the run, with gpusteward (this run) and
    without (the same seed's cluster advanced with no action); jobs still waiting at the end
    count with the time they have waited so far."""
    other = untouched(cluster)
    acted = cluster.queue_waits(cluster.start, until)
    alone = other.queue_waits(cluster.start, until)
    return {
        "with_gpusteward": wait_minutes(acted, 50),
        "without": wait_minutes(alone, 50),
        "jobs": len(acted),
        "still_waiting": {
            "with_gpusteward": len(cluster.queue(until).pending),
            "without": len(other.queue(until).pending),
        },
    }


def health_figures(
    cluster: SimCluster, episodes: Sequence[FindingEpisode], until: datetime
) -> dict[str, Any]:
    """Per failed GPU: whether a ``gpu-failed`` finding named it, and how long before the failure
    a ``gpu-degrading`` one first did (None where it did not fire before the failure)."""
    rows: list[dict[str, Any]] = []
    leads: list[float] = []
    for f in cluster.failures(until):
        on_gpu = [e for e in episodes if f.gpu_uuid in e.finding.gpu_uuids]
        flagged = any(e.finding.rule == FAILED_RULE for e in on_gpu)
        early = [
            e.first_seen_at
            for e in on_gpu
            if e.finding.rule == DEGRADING_RULE and e.first_seen_at <= f.failed_at
        ]
        lead = (f.failed_at - min(early)).total_seconds() / 60.0 if early else None
        if lead is not None:
            leads.append(lead)
        rows.append(
            {
                "gpu": f.gpu_uuid,
                "xid": f.xid,
                "failed_at": f.failed_at.isoformat(),
                "degrading_from": f.degrading_from.isoformat(),
                "stuck_workload": f.stuck_workload,
                "flagged": flagged,
                "lead_time_min": None if lead is None else round(lead, 1),
            }
        )
    return {
        "failed_gpus": len(rows),
        "failed_gpus_flagged": sum(1 for r in rows if r["flagged"]),
        "degrading_lead_time_min": round(statistics.median(leads), 1) if leads else None,
        "gpu_failures": rows,
    }
