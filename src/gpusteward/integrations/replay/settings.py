"""The ``source.replay`` settings section."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ReplaySettings(BaseModel):
    """Where the trace is and how to play it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    trace: Path | None = Field(
        None, description="Trace file (CSV or Parquet long table, Philly windows, Helios sequence)."
    )
    format: Literal["auto", "generic", "philly", "helios"] = Field(
        "auto", description="Trace format; auto tells them apart by their header."
    )
    align: Literal["now", "trace"] = Field(
        "now",
        description="now: shift the trace so that it starts one window before the agent does "
        "(run, scan); trace: keep its own times (the clock must be set to them, as backtest does).",
    )
    gpu_model: str = Field(
        "", description="GPU model for traces that do not name one (prices GPU-hours; e.g. H100)."
    )
    queue: Path | None = Field(
        None,
        description="Pod list of arriving jobs (Alibaba openb_pod_list format) that wait for the "
        "trace's GPUs: the replay gets a queue, and a backtest reports queue times with and "
        "without gpusteward.",
    )
    queue_scale: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="Multiplies the pod list's arrival times, not its run times: 1/k fits k days "
        "of pods into one day of replay and asks k times as much of the cluster at once.",
    )
    default_class: Literal["unknown", "batch", "service", "interactive"] = Field(
        "unknown",
        description="What a workload is when the trace has no class column: unknown is judged by "
        "behaviour alone (the safe default); batch, service or interactive for a cluster that runs "
        "only that kind of work. A gpusteward.io/class label on the workload still wins.",
    )
