"""The demo's issue-16 figures: queue time with and without gpusteward acting, and how the
failing GPUs were found (``gpu-failed``) and predicted (``gpu-degrading``), scored against
the simulator's ground truth; and issue 18's: cloud instances stopped and spot interruptions
met with a checkpoint, from the simulator's own record of its instances."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpusteward.analysis.queue_figures import wait_minutes
from gpusteward.domain.integration import Integration
from gpusteward.domain.records import FindingEpisode
from gpusteward.integrations.sim import SimCluster
from gpusteward.integrations.sim.cloud import SimInstanceControl
from gpusteward.integrations.sim.spot import SimInterruptions

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


def counterfactual(
    cluster: SimCluster, interruptions: SimInterruptions | None = None
) -> tuple[SimCluster, SimInterruptions | None]:
    """The cluster nobody acts on, its spot nodes (if any) taken on the same schedule."""
    other = untouched(cluster)
    if interruptions is None:
        return other, None
    return other, interruptions.like(interruptions.cloud.like(other))


def queue_figures(cluster: SimCluster, until: datetime, other: SimCluster | None = None) -> dict[str, Any]:
    """Median queue time of the jobs submitted during the run, with gpusteward (this run) and
    without (``other``: by default the same seed's cluster advanced with no action); jobs still
    waiting at the end count with the time they have waited so far."""
    other = other or untouched(cluster)
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


def cloud_figures(
    integration: Integration, until: datetime, without: SimInterruptions | None = None
) -> dict[str, Any]:
    """Instances stopped and the instance-hours they stayed stopped; spot interruptions and how
    many had every workload on the node checkpointed before the instance was taken, and the work
    lost (``without``: on the counterfactual cluster, where nobody sends a signal). Empty when
    the simulated nodes run on no cloud instances."""
    control, watch = integration.instances, integration.interruptions
    if not isinstance(control, SimInstanceControl) or not isinstance(watch, SimInterruptions):
        return {}
    fleet: dict[str, int] = {}
    for instance in control.instances().values():
        fleet[instance.lifecycle.value] = fleet.get(instance.lifecycle.value, 0) + 1
    out = {"instances": dict(sorted(fleet.items())), **control.cloud.figures(until), **watch.figures(until)}
    if without is not None:
        out["interruption_lost_gpu_hours_without"] = without.figures(until)["interruption_lost_gpu_hours"]
    return out
