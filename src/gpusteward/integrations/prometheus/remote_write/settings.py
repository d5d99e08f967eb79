"""The ``source.remote_write`` config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gpusteward.integrations.prometheus.settings import PrometheusSourceSettings

MIB = 1024 * 1024


class RemoteWriteSettings(BaseModel):
    """Receive dcgm-exporter (and friends) samples by Prometheus remote write on the web server's
    ``POST /api/v1/write`` (``gpusteward run --web``), instead of querying for them."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_body_bytes: int = Field(
        32 * MIB, ge=1024, le=1024 * MIB, description="Largest request body taken; larger is answered 413."
    )
    max_decoded_bytes: int = Field(
        256 * MIB,
        ge=1024,
        le=4096 * MIB,
        description="Largest decompressed request (snappy declares it first); larger is answered 413.",
    )
    max_buffered_samples: int = Field(
        5_000_000,
        ge=1000,
        le=1_000_000_000,
        description="Samples waiting for the next tick; a request past this is answered 429 (the "
        "sender retries it after Retry-After).",
    )
    retry_after_seconds: int = Field(5, ge=1, le=3600, description="The Retry-After of a 429.")
    backfill: bool = Field(
        False,
        description="Fill the window at start-up from the Prometheus at `prometheus.url` (range "
        "queries, as source prometheus does); else it fills from the writes.",
    )
    prometheus: PrometheusSourceSettings = Field(
        default_factory=PrometheusSourceSettings,
        description="How series become GPUs, samples and workloads (metrics, labels, "
        "disabled_metrics, exporter_pod_regex, default_class), as for source prometheus; its "
        "server (url, credentials) is only read for the backfill. request_metrics are not read.",
    )
