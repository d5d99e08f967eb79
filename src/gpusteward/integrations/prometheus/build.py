"""``source: prometheus`` → a ``PrometheusSource`` and its start-up history. It observes only:
executors come from the systems that own the workloads (Slurm, Kubernetes)."""

from __future__ import annotations

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import BuildContext, Integration
from gpusteward.integrations.prometheus.client import ClientOptions, PrometheusClient
from gpusteward.integrations.prometheus.parse import DEFAULT_SPECS, LabelMap, MetricSpec
from gpusteward.integrations.prometheus.settings import PrometheusSourceSettings
from gpusteward.integrations.prometheus.source import PrometheusSource


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


def build_source(cfg: PrometheusSourceSettings, ctx: BuildContext) -> PrometheusSource:
    specs = {k: v for k, v in DEFAULT_SPECS.items() if k not in set(cfg.disabled_metrics)}
    specs.update({k: MetricSpec(v.field, v.scale) for k, v in cfg.metrics.items()})
    return PrometheusSource(
        PrometheusClient(client_options(cfg)),
        interval_s=ctx.tick_s,
        window_s=ctx.window_s,
        specs=specs,
        labels=LabelMap().with_overrides(cfg.labels),
        max_samples_per_query=cfg.max_samples_per_query,
        overlap_s=cfg.fetch_overlap_seconds,
        step_s=cfg.query_step_seconds,
        selector=cfg.selector,
        exporter_pod_regex=cfg.exporter_pod_regex or None,
        default_class=cfg.default_class,
        request_metrics=cfg.request_metrics,
    )


def build(cfg: PrometheusSourceSettings, ctx: BuildContext) -> Integration:
    source = build_source(cfg, ctx)
    return Integration(name="prometheus", source=source, history=source.history)
