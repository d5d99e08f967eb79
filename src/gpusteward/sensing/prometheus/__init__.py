"""The ``prometheus`` source: dcgm-exporter and friends read through PromQL."""

from gpusteward.sensing.prometheus.client import PrometheusClient
from gpusteward.sensing.prometheus.parse import DEFAULT_SPECS, LabelMap, MetricSpec
from gpusteward.sensing.prometheus.source import PrometheusSource

__all__ = [
    "DEFAULT_SPECS",
    "LabelMap",
    "MetricSpec",
    "PrometheusClient",
    "PrometheusSource",
    "own_metric_name",
]
