"""The ``prometheus`` source: dcgm-exporter and friends read through PromQL."""

from gpusteward.integrations.prometheus.client import PrometheusClient
from gpusteward.integrations.prometheus.parse import DEFAULT_SPECS, LabelMap, MetricSpec
from gpusteward.integrations.prometheus.source import PrometheusSource

__all__ = [
    "DEFAULT_SPECS",
    "LabelMap",
    "MetricSpec",
    "PrometheusClient",
    "PrometheusSource",
    "own_metric_name",
]
