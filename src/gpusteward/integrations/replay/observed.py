"""A ``Trace`` from observations another source made (its start-up history over a time range),
so any source that can look back (Prometheus) can be backtested like a trace file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import Observation
from gpusteward.integrations.replay.generic import parse_long_table
from gpusteward.integrations.replay.trace import Trace


def trace_from_observations(observations: Sequence[Observation], *, name: str = "history") -> Trace:
    """One row per sample; each sample's workload is the one holding its GPU in that observation."""
    cols: dict[str, list[Any]] = {
        c: []
        for c in (
            "timestamp",
            "gpu",
            "node",
            "gpu_model",
            "mem_total_mib",
            "util_pct",
            "mem_used_mib",
            "power_w",
            "sm_active",
            "workload",
            "owner",
            "team",
            "workload_started_at",
            "gpus_requested",
        )
    }
    for obs in observations:
        gpus = {g.uuid: g for g in obs.gpus}
        holders = {u: w for w in obs.workloads for u in w.gpu_uuids}
        for s in obs.samples:
            g, w = gpus.get(s.gpu_uuid), holders.get(s.gpu_uuid)
            cols["timestamp"].append(s.at.timestamp())
            cols["gpu"].append(s.gpu_uuid)
            cols["node"].append(g.node if g else "")
            cols["gpu_model"].append(g.model if g else "")
            cols["mem_total_mib"].append(g.memory_total_mib if g and g.memory_total_mib > 0 else None)
            cols["util_pct"].append(s.gpu_util_pct)
            cols["mem_used_mib"].append(s.mem_used_mib)
            cols["power_w"].append(s.power_w)
            # The long table takes SM activity as DCGM's ratio.
            cols["sm_active"].append(None if s.sm_active_pct is None else s.sm_active_pct / 100)
            cols["workload"].append(w.id if w else "")
            cols["owner"].append(w.owner.user if w else "")
            cols["team"].append(w.owner.team if w else "")
            cols["workload_started_at"].append(w.started_at if w else None)
            cols["gpus_requested"].append(w.gpus_requested if w else None)
    if not cols["timestamp"]:
        raise ConfigError(f"{name}: the source returned no samples for that time range")
    return parse_long_table(cols, path=name)
