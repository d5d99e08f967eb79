"""``source: prometheus`` → a ``PrometheusSource`` and its start-up history."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.ports import Clock
from gpusteward.runtime.adapters import Adapters
from gpusteward.sensing.prometheus.client import ClientOptions, PrometheusClient
from gpusteward.sensing.prometheus.parse import DEFAULT_SPECS, LabelMap, MetricSpec
from gpusteward.sensing.prometheus.settings import PrometheusSourceSettings
from gpusteward.sensing.prometheus.source import PrometheusSource

if TYPE_CHECKING:
    from gpusteward.runtime.config import Settings


def client_options(cfg: PrometheusSourceSettings) -> ClientOptions:
    token = cfg.bearer_token.get_secret_value() if cfg.bearer_token else None
    if cfg.bearer_token_file is not None:
        try:
            token = cfg.bearer_token_file.read_text().strip()
        except OSError as e:
            raise ConfigError(f"source.prometheus.bearer_token_file: {e}") from e
    return ClientOptions(
        url=cfg.url,
        bearer_token=token,
        username=cfg.username,
        password=cfg.password.get_secret_value() if cfg.password else None,
        verify=cfg.ca_file if cfg.tls_verify and cfg.ca_file else cfg.tls_verify,
        timeout_s=cfg.timeout_seconds,
        connect_timeout_s=cfg.connect_timeout_seconds,
    )


def build_source(settings: Settings) -> PrometheusSource:
    cfg = settings.source.prometheus
    specs = {k: v for k, v in DEFAULT_SPECS.items() if k not in set(cfg.disabled_metrics)}
    specs.update({k: MetricSpec(v.field, v.scale) for k, v in cfg.metrics.items()})
    return PrometheusSource(
        PrometheusClient(client_options(cfg)),
        interval_s=settings.tick_seconds,
        window_s=settings.store.window_minutes * 60,
        specs=specs,
        labels=LabelMap().with_overrides(cfg.labels),
        max_samples_per_query=cfg.max_samples_per_query,
        overlap_s=cfg.fetch_overlap_seconds,
        step_s=cfg.query_step_seconds,
        selector=cfg.selector,
        exporter_pod_regex=cfg.exporter_pod_regex or None,
    )


def prometheus_adapters(settings: Settings, clock: Clock) -> Adapters:
    """Observe only: executors come from the sources that own the workloads (Slurm, Kubernetes)."""

    source = build_source(settings)
    return Adapters(source=source, executors=[], history=source.history)
