"""The ``forecast:`` and ``insights:`` config sections (tidal scaling; anomalies and advice)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpusteward.analysis.advice import AdviceThresholds
from gpusteward.analysis.anomaly import AnomalySettings
from gpusteward.analysis.tide import PoolLimits


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class PoolSettings(_Section):
    """One pool whose replicas follow the forecast tide."""

    name: str = Field(
        min_length=1,
        description="The pool: GPUs whose `pool` is this name make its demand; the scaler knows it by "
        "this name (kubernetes: <namespace>/deployment/<name>).",
    )
    workloads: list[str] = Field(
        default_factory=list,
        description="Workload id prefixes whose GPUs make this pool's demand, wherever they run (an "
        "inference Deployment: k8s:<namespace>/deployment/<name>). Empty: GPUs whose pool is the name.",
    )
    scaler: str = Field("sim", description="Which PoolScaler sets its replicas: sim, or kubernetes.")
    demand: Literal["busy", "held"] = Field(
        "busy",
        description="busy: the pool's GPUs' mean utilisation summed (two at 50 % are one GPU of "
        "demand); held: GPUs held by workloads.",
    )
    gpus_per_replica: float = Field(1.0, gt=0, le=100_000, description="GPUs one replica (or node) brings.")
    min_replicas: int = Field(1, ge=0, le=1_000_000, description="Never fewer replicas than this.")
    max_replicas: int | None = Field(
        None, ge=1, le=1_000_000, description="Never more replicas than this (none: no cap)."
    )
    slo_headroom: float = Field(
        0.2, ge=0, lt=1, description="Share of capacity kept free; scaling down never eats into it."
    )
    prewarm_minutes: float = Field(
        15, ge=0, le=10080, description="How long a new replica takes to serve: scale-ups start this early."
    )
    history_csv: Path | None = Field(
        None, description="A demand CSV (time + column) to start the history from (e.g. a Prometheus export)."
    )
    history_column: str | None = Field(None, description="Its value column (default: demand or value).")

    def limits(self, replan_minutes: float) -> PoolLimits:
        return PoolLimits(
            gpus_per_replica=self.gpus_per_replica,
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            slo_headroom=self.slo_headroom,
            prewarm_minutes=self.prewarm_minutes,
            replan_minutes=replan_minutes,
        )

    @model_validator(mode="after")
    def _bounds(self) -> PoolSettings:
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError("max_replicas is below min_replicas")
        return self


class ForecastSettings(_Section):
    """Demand forecasts per pool and tidal scaling (needs `pip install 'gpusteward[forecast]'`)."""

    enabled: bool = Field(
        False, description="Forecast pool demand and plan replicas every plan_every_minutes."
    )
    bucket_minutes: float = Field(
        15, gt=0, le=60, description="History is kept and forecast in buckets of this."
    )
    horizon_hours: float = Field(6, ge=1, le=24, description="How far ahead to forecast (2-6 h is useful).")
    seasonality: Literal["auto", "none", "daily", "daily+weekly"] = Field(
        "auto", description="auto: the one that forecast the last two days best."
    )
    refit_hours: float = Field(
        24, gt=0, le=8760, description="Refit the model this often; in between it is re-run."
    )
    band_level: float = Field(0.9, gt=0, lt=1, description="Share of outcomes the prediction band holds.")
    simulations: int = Field(200, ge=20, le=5000, description="Sample paths behind the band.")
    low_load_share: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="Low-load windows: where the band stays under this share of the peak "
        "(the forecast's or last week's).",
    )
    plan_every_minutes: float = Field(
        15, gt=0, le=10080, description="How often replicas are planned and set."
    )
    cooldown_minutes: float = Field(
        30, ge=0, le=10080, description="Least time between two scalings of one pool."
    )
    history_dir: Path | None = Field(
        None, description="Where per-pool demand rollups are kept across restarts (none: memory only)."
    )
    history_days: float = Field(35, gt=1, le=3660, description="History kept per pool.")
    pools: list[PoolSettings] = Field(default_factory=list, description="The pools to scale with the tide.")


class AdviceSettings(_Section):
    """Right-sizing thresholds (see analysis/advice.py)."""

    used_util_pct: float = Field(
        5, ge=0, le=100, description="A GPU averaging under this over its life is unused."
    )
    min_life_hours: float = Field(
        2, ge=0, le=87600, description="Advise on GPU count only after this much observed life."
    )
    min_requested: int = Field(
        2, ge=1, le=100_000, description="Advise on GPU count only for workloads asking this many."
    )
    large_util_pct: float = Field(20, ge=0, le=100, description="GPU too large: utilisation under this ...")
    large_mem_gib: float = Field(10, ge=0, le=1_000_000, description="... and peak memory under this ...")
    large_card_gib: float = Field(
        70, ge=0, le=1_000_000, description="... on cards with at least this much memory."
    )
    input_busy_pct: float = Field(40, ge=0, le=100, description="Input-bound: SM activity under this ...")
    input_cpu_pct: float = Field(
        90, ge=0, le=100_000, description="... while the processes use this much CPU (% of a core)."
    )

    def thresholds(self) -> AdviceThresholds:
        return AdviceThresholds(**self.model_dump())


class InsightsSettings(_Section):
    """Anomaly detection and right-sizing advice (needs `pip install 'gpusteward[forecast]'` for
    anomalies; advice needs nothing extra)."""

    enabled: bool = Field(
        False,
        description="Look for anomalies and right-sizing advice every every_minutes; owners get one "
        "advice notice per episode (off by default: it adds notices to run, scan and backtest).",
    )
    every_minutes: float = Field(
        15, gt=0, le=10080, description="How often; findings hold until the next run."
    )
    window_minutes: float = Field(
        60, gt=0, le=10080, description="Look-back of the features (capped at store.window_minutes)."
    )
    anomalies: bool = Field(True, description="Run the IsolationForest over per-workload features.")
    contamination: float = Field(0.02, gt=0, le=0.5, description="Share of workloads that may be isolated.")
    min_workloads: int = Field(
        12, ge=2, le=1_000_000, description="Fewer workloads than this: no anomaly is judged."
    )
    min_z: float = Field(
        4.0, gt=0, le=1000, description="Robust z-score a feature needs to be named as a reason."
    )
    advice: AdviceSettings = Field(default_factory=AdviceSettings)

    def anomaly(self) -> AnomalySettings:
        return AnomalySettings(
            contamination=self.contamination, min_workloads=self.min_workloads, min_z=self.min_z
        )
