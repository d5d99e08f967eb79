"""The ``source.prometheus`` config section."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from gpusteward.integrations.prometheus.parse import FIELDS, REQUEST_COUNTERS, LabelMap


class MetricOverride(BaseModel):
    """An extra (or renamed) exporter metric: which field it feeds and by what factor."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    field: str = Field(
        description="gpu_util_pct, mem_used_mib, ..., mem_total_mib, gr_engine_pct; health: xid_code, "
        "ecc_dbe_count, ecc_sbe_count, retired_pages (or retired_sbe_pages + retired_dbe_pages, "
        "remapped_rows_correctable + remapped_rows_uncorrectable), row_remap_failure, retired_pending, "
        "throttled (or clock_event_reasons, a bitmask), pcie_replay_count."
    )
    scale: float = Field(
        1.0, ge=-1e12, le=1e12, description="Multiplier into the field's unit (1/1048576 for bytes → MiB)."
    )

    @field_validator("field")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in FIELDS:
            raise ValueError(f"unknown field {v!r}; one of {', '.join(sorted(FIELDS))}")
        return v


class PrometheusSourceSettings(BaseModel):
    """Read dcgm-exporter (and jobstats, nvidia_gpu_exporter) metrics from Prometheus or VictoriaMetrics."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    url: str = Field("http://127.0.0.1:9090", description="Base URL of the Prometheus HTTP API.")
    bearer_token: SecretStr | None = Field(None, description="Sent as `Authorization: Bearer ...`.")
    bearer_token_file: Path | None = Field(None, description="File holding the bearer token (read at start).")
    username: str | None = Field(None, description="Basic-auth user.")
    password: SecretStr | None = Field(None, description="Basic-auth password.")
    tls_verify: bool = Field(True, description="Verify the server's TLS certificate.")
    ca_file: Path | None = Field(None, description="CA bundle to verify the server with.")
    timeout_seconds: float = Field(10, gt=0, le=3600, description="Longest wait for one query's answer.")
    connect_timeout_seconds: float = Field(3, gt=0, le=600, description="Longest wait to connect.")
    max_samples_per_query: int = Field(
        5_000_000,
        ge=1000,
        le=1_000_000_000,
        description="Split queries by GPU so that none loads more samples (keep under query.max-samples).",
    )
    query_step_seconds: float | None = Field(
        None,
        ge=1,
        le=86400,
        description="Step of the start-up range queries; default tick_seconds (one per window slot).",
    )
    fetch_overlap_seconds: float = Field(
        15,
        ge=0,
        le=86400,
        description="Each tick re-reads this much before the last fetch, for late-ingested samples.",
    )
    selector: str = Field(
        "", description='Extra label matchers added to every query, e.g. `cluster="a"` (no braces).'
    )
    metrics: dict[str, MetricOverride] = Field(
        default_factory=dict, description="Extra exporter metrics, or new units for known ones."
    )
    request_metrics: list[str] = Field(
        default_factory=lambda: list(REQUEST_COUNTERS),
        max_length=50,
        description="Request counters of inference servers, per pod (vLLM, Triton, Knative/KServe): "
        "their rate becomes the holder's requests_per_s, evidence that a service still serves. "
        "Empty: not read.",
    )
    default_class: Literal["unknown", "batch", "service", "interactive"] = Field(
        "unknown",
        description="What a pod is when nothing says (the series carry no owner kind): unknown is judged by "
        "behaviour alone (the safe default); batch, service or interactive for a cluster that runs "
        "only that kind of work. A gpusteward.io/class label on the workload still wins.",
    )
    disabled_metrics: list[str] = Field(default_factory=list, description="Known metrics not to read.")
    labels: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Label names to try per role (uuid, node, index, model, mig_instance, mig_profile, "
        "pod, namespace, container, job, user), replacing the built-in lists.",
    )
    exporter_pod_regex: str = Field(
        "(nvidia-)?dcgm-exporter.*",
        description="Pods matching this are the exporter itself (`pod` without honor_labels): never holders.",
    )

    @field_validator("labels")
    @classmethod
    def _roles(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        LabelMap().with_overrides(v)
        return v
