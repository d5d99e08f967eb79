"""gpusteward on a real Prometheus: it finds exactly the planted idle GPUs, through every label variant."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from gpusteward.domain.models import Metric, RuleAction, WorkloadKind, utc
from gpusteward.integrations.prometheus.client import ClientOptions, PrometheusClient
from gpusteward.integrations.prometheus.localserver import LocalPrometheus, Series
from gpusteward.integrations.prometheus.source import PrometheusSource
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings
from gpusteward.runtime.loop import Steward
from gpusteward.runtime.tick_report import TickReport

MakeSettings = Callable[..., Settings]


def _steward(settings: Settings, at: float) -> tuple[Steward, SimClock]:
    clock = SimClock(utc(at))
    steward, _ = build_steward(settings, clock=clock)
    return steward, clock


def _wasteful(report: TickReport) -> tuple[set[str], set[str]]:
    found = [f for f in report.findings if f.action is RuleAction.RECLAIM]
    return {f.workload_id for f in found if f.workload_id}, {u for f in found for u in f.gpu_uuids}


def test_finds_exactly_the_planted_idle_gpus(
    cluster_prom: LocalPrometheus,
    prom_settings: MakeSettings,
    end_s: float,
    expected: tuple[set[str], set[str]],
) -> None:
    steward, _ = _steward(prom_settings(cluster_prom.url), end_s + 5)
    report = steward.tick()
    assert report.source_ok, report.errors
    workloads, gpus = _wasteful(report)
    assert workloads == expected[0]
    assert gpus == expected[1]
    # the stale GPU is held, known, and stale: never in a finding
    assert report.stale_gpus >= 1
    assert "GPU-l1" in steward.gpus


def test_every_label_variant_maps_gpus_and_holders(
    cluster_prom: LocalPrometheus, prom_settings: MakeSettings, end_s: float
) -> None:
    steward, _ = _steward(prom_settings(cluster_prom.url), end_s + 5)
    steward.tick()
    gpus, held = steward.gpus, steward.workloads
    # the MIG parent is replaced by its instances; GR_ENGINE_ACTIVE stands in for GPU_UTIL
    assert "GPU-f0" not in gpus
    assert gpus["GPU-f0/1"].model == "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    assert gpus["GPU-f0/1"].memory_total_mib == pytest.approx(40_960)
    # hostname, Hostname and instance (port cut) all name the node
    assert (gpus["GPU-a1"].node, gpus["GPU-b1"].node, gpus["GPU-h1"].node) == ("node-a", "node-b", "node-h1")
    assert gpus["GPU-a1"].model == "Tesla T4"  # the real scrape's modelName
    assert gpus["GPU-h1"].memory_total_mib == pytest.approx(40_960)  # bytes → MiB
    # holders: pods (three label spellings), DCGM hpc_job and jobstats jobid as jobs
    assert held["pod/ml/notebook-a"].owner.team == "ml"
    assert held["pod/research/train-b"].ref["container"] == "main"
    assert held["pod/team-c/svc-c"].gpu_uuids == ("GPU-c1",)
    assert held["job/4242"].kind is WorkloadKind.JOB
    assert held["job/771"].gpu_uuids == ("GPU-h1",)
    assert held["pod/ml/multi"].gpu_uuids == ("GPU-m1", "GPU-m2")
    assert held["pod/ml/multi"].gpus_requested == 2
    # the GPU handed over ten minutes ago belongs to its new pod only
    assert held["pod/ml/new-n"].gpu_uuids == ("GPU-n1",)
    assert "pod/ml/old-n" not in held
    # gpusteward's own exporter: holders from its per-process series (pod, Slurm job)
    assert held["pod/ops/agent-i"].gpu_uuids == ("GPU-i1",)
    assert held["job/9001"].gpu_uuids == ("GPU-i2",)
    assert gpus["GPU-i1"].memory_total_mib == pytest.approx(40_960)
    # empty pod labels and the exporter's own pod hold nothing
    holders = {u for w in held.values() for u in w.gpu_uuids}
    assert {"GPU-d1", "GPU-e1", "GPU-k1"}.isdisjoint(holders)
    assert not any("dcgm-exporter" in w for w in held)
    # nvidia_gpu_exporter's 0-1 ratio is read as percent
    view = steward.window.view(utc(end_s + 5))
    k1 = view.index_of("GPU-k1")
    assert k1 is not None
    assert 1.0 <= view.last(Metric.GPU_UTIL)[k1] <= 3.0


def test_incremental_ticks_use_real_sample_times(
    cluster_prom: LocalPrometheus,
    prom_settings: MakeSettings,
    end_s: float,
    expected: tuple[set[str], set[str]],
) -> None:
    """Start 15 minutes before the data ends, then tick every 30 s: each tick reads only what is new."""
    start = end_s - 900 + 5
    source = PrometheusSource(
        PrometheusClient(ClientOptions(cluster_prom.url)), interval_s=30, window_s=3600, overlap_s=30
    )
    history = source.history(utc(start - 3600), utc(start), 30)
    assert history
    assert all(o.at <= utc(start) for o in history)
    t = start
    spans = []
    while t <= end_s + 5:
        obs = source.observe(utc(t))
        times = {s.at.timestamp() for s in obs.samples}
        assert all(x % 10 == 0 for x in times)  # scrape times, not the query's
        assert all(t - 30 - 30 - 1 <= x <= t for x in times)  # only the new span (plus overlap)
        spans.append(len(obs.samples))
        t += 30
    assert max(spans) <= 2 * 30  # about one slot per GPU per tick
    # and the steward built on the same server comes to the same conclusion this way
    steward, clock = _steward(prom_settings(cluster_prom.url), start)
    while clock.now() <= utc(end_s + 5):
        report = steward.tick()
        clock.advance(30)
    assert _wasteful(report) == expected


def test_sharded_fetch_gives_the_same_answer(
    cluster_prom: LocalPrometheus,
    prom_settings: MakeSettings,
    end_s: float,
    expected: tuple[set[str], set[str]],
) -> None:
    plain, _ = _steward(prom_settings(cluster_prom.url), end_s + 5)
    plain.tick()
    # 1000 samples per query forces uuid shards for the backfill
    steward, _ = _steward(prom_settings(cluster_prom.url, max_samples_per_query=1000), end_s + 5)
    report = steward.tick()
    assert report.source_ok
    assert _wasteful(report) == expected
    sharded, unsharded = steward.source, plain.source
    assert isinstance(sharded, PrometheusSource)
    assert isinstance(unsharded, PrometheusSource)
    assert sharded.queries > 2 * unsharded.queries


def test_a_server_refusing_big_queries_gets_smaller_ones(
    prom_factory: Callable[..., LocalPrometheus],
    cluster_data: list[Series],
    end_s: float,
    prom_settings: MakeSettings,
    expected: tuple[set[str], set[str]],
) -> None:
    prom = prom_factory(cluster_data, "--query.max-samples=1500", name="small")
    steward, _ = _steward(prom_settings(prom.url), end_s + 5)
    report = steward.tick()
    assert report.source_ok, report.errors
    assert _wasteful(report) == expected
    assert isinstance(steward.source, PrometheusSource)
    assert steward.source.shards > 1  # the server did refuse, and the source split


def test_history_of_an_empty_span_is_empty(cluster_prom: LocalPrometheus) -> None:
    source = PrometheusSource(PrometheusClient(ClientOptions(cluster_prom.url)), interval_s=30, window_s=3600)
    now = utc(1_000_000)
    assert source.history(now, now + timedelta(seconds=10), 30) == []
