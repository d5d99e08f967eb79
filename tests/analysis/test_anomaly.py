"""Anomaly detection finds planted leaks, stalls and power mismatches, and names why."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from gpusteward.analysis.anomaly import AnomalySettings, AnomalyUnavailable, detect, unusual_features
from gpusteward.analysis.features import extract
from gpusteward.domain.models import Metric, RuleAction

from .conftest import NOW, inference, training

pytest.importorskip("sklearn")


def leak():
    p = training()
    p[Metric.MEM_USED] = lambda t, r: 20_000 + 50.0 * t  # 3,000 MiB per hour
    return p


def stall():
    p = training()
    # 10 minutes of every 25 at zero: a loader that hangs and recovers
    p[Metric.GPU_UTIL] = lambda t, r: np.where(t % 25 < 10, 0.0, r.normal(88, 4, t.size))
    return p


def hot_idle():
    p = inference()
    p[Metric.GPU_UTIL] = lambda t, r: r.normal(8, 2, t.size)
    p[Metric.POWER] = lambda t, r: r.normal(420, 5, t.size)  # full power at 8 %: a spinning kernel
    return p


def population(planted):
    profiles = [training() if k % 3 else inference() for k in range(45)]
    for k, p in planted.items():
        profiles[k] = p
    return profiles


def test_planted_leak_stall_and_power_mismatch_are_found_with_their_reasons(cluster) -> None:
    c = cluster(population({5: leak(), 17: stall(), 30: hot_idle()}))
    table = extract(c.view(), c.gpus, c.workloads)
    assert len(table.workloads) == 45
    result = detect(table, NOW, AnomalySettings(contamination=0.08))
    by_id = {f.workload_id: f for f in result.findings}
    assert set(by_id) == {"job-5", "job-17", "job-30"}
    assert unusual_features(by_id["job-5"])[0] == "mem_slope_mib_per_h"
    assert by_id["job-5"].evidence["mem_slope_mib_per_h"]["GPU-005-0"] == pytest.approx(3000, rel=0.01)
    assert {"stall_share", "util_var"} & set(unusual_features(by_id["job-17"]))
    assert "power_residual_w" in unusual_features(by_id["job-30"])
    for f in result.findings:
        assert f.kind == "anomaly"
        assert f.action is RuleAction.ADVISE
        assert f.wasted_gpu_hours == 0
        assert f.wasted_cost == 0
        assert "typical" in f.message


def test_a_uniform_cluster_has_no_anomaly(cluster) -> None:
    c = cluster(population({}), seed=4)
    result = detect(extract(c.view(), c.gpus, c.workloads), NOW)
    # The forest isolates a few at random; none is far enough from the median on any feature.
    assert result.findings == ()


def test_too_few_workloads_judge_nothing(cluster) -> None:
    c = cluster([training() for _ in range(5)] + [leak()])
    result = detect(extract(c.view(), c.gpus, c.workloads), NOW)
    assert result.findings == ()
    assert "need 12" in result.note


def test_missing_data_is_not_an_anomaly(cluster) -> None:
    profiles = population({})
    blind = training()
    blind[Metric.GPU_UTIL] = lambda t, r: np.where(t > 20, np.nan, 90.0)  # no data for 40 min
    profiles[3] = blind
    c = cluster(profiles)
    table = extract(c.view(), c.gpus, c.workloads)
    assert "job-3" not in {w.id for w in table.workloads}  # coverage too low: not judged at all


def test_without_scikit_learn_the_error_says_what_to_install(cluster, monkeypatch) -> None:
    c = cluster(population({}))
    table = extract(c.view(), c.gpus, c.workloads)
    monkeypatch.setitem(sys.modules, "sklearn.ensemble", None)
    with pytest.raises(AnomalyUnavailable, match="gpusteward\\[forecast\\]"):
        detect(table, NOW)
