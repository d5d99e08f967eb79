"""Request counters of inference servers, read from a real Prometheus: a pod's request rate
lands on its GPUs as ``requests_per_s``; a pod without such a counter keeps it missing."""

from __future__ import annotations

import pytest

from gpusteward.domain.models import utc
from gpusteward.integrations.prometheus.client import ClientOptions, PrometheusClient
from gpusteward.integrations.prometheus.localserver import Series
from gpusteward.integrations.prometheus.source import PrometheusSource

from .conftest import StartProm, _dcgm

STEP_S = 10


def _served(end_s: float) -> list[Series]:
    """Three idle-looking GPUs (util 1 %): one held by a vLLM pod still answering 0.5 requests
    a second, one by a Triton pod whose counter stopped rising, one by a pod with no counter."""
    times = [end_s - i * STEP_S for i in range(60, -1, -1)]
    out: list[Series] = []
    for name, pod in (("GPU-r1", "llm"), ("GPU-r2", "triton"), ("GPU-r3", "plain")):
        labels = {k: v for k, v in _dcgm(name, "node-r", 0, pod=pod, namespace="serve").items() if v}
        out.append(("DCGM_FI_DEV_GPU_UTIL", labels, [(t, 1.0) for t in times]))
        out.append(("DCGM_FI_DEV_FB_USED", labels, [(t, 20_000.0) for t in times]))
    pod = {"pod": "llm", "namespace": "serve", "model_name": "m"}
    start = times[0]
    out.append(("vllm:request_success_total", pod, [(t, 100 + 0.5 * (t - start)) for t in times]))
    out.append(
        ("nv_inference_request_success", {"pod": "triton", "namespace": "serve", "model": "x"},
         [(t, 42.0) for t in times])
    )  # fmt: skip
    return out


@pytest.mark.usefixtures("need_prom")
def test_a_pods_request_rate_lands_on_its_gpu(prom_factory: StartProm, end_s: float) -> None:
    prom = prom_factory(_served(end_s), name="requests")
    source = PrometheusSource(PrometheusClient(ClientOptions(prom.url)), interval_s=30, window_s=3600)
    obs = source.observe(utc(end_s + 1))
    assert not obs.errors
    newest: dict[str, float | None] = {}
    for s in sorted(obs.samples, key=lambda s: s.at):
        newest[s.gpu_uuid] = s.requests_per_s
    assert newest["GPU-r1"] == pytest.approx(0.5, rel=0.05)  # still serving: not idle
    assert newest["GPU-r2"] == 0.0  # the counter stands still: no traffic
    assert newest["GPU-r3"] is None  # no request metric is not zero requests


@pytest.mark.usefixtures("need_prom")
def test_request_metrics_can_be_turned_off(prom_factory: StartProm, end_s: float) -> None:
    prom = prom_factory(_served(end_s), name="requests-off")
    client = PrometheusClient(ClientOptions(prom.url))
    source = PrometheusSource(client, interval_s=30, window_s=3600, request_metrics=())
    obs = source.observe(utc(end_s + 1))
    assert all(s.requests_per_s is None for s in obs.samples)
