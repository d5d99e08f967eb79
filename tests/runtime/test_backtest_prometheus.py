"""`backtest --source prometheus --from --to` against a real Prometheus on 127.0.0.1: the scripted
scenario, served as dcgm-exporter series, is judged as its CSV is."""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpusteward.domain.models import utc
from gpusteward.integrations.prometheus.localserver import (
    LocalPrometheus,
    Series,
    binaries,
    write_openmetrics,
)
from gpusteward.integrations.replay import load_trace
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.scenarios.backtest import history_trace, run_backtest
from gpusteward.scenarios.scoring import Scoring

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "scenario_6h.csv"
T0 = 1741046400  # the scenario's first sample


def scenario_series(shift: float) -> list[Series]:
    """The scenario as DCGM_FI_DEV_GPU_UTIL / FB_USED / FB_FREE series, pods as holders."""
    with SCENARIO.open() as f:
        rows = list(csv.DictReader(f))
    per_node: dict[str, list[str]] = {}  # GPUs numbered per node, as dcgm-exporter's `gpu` label
    for row in rows:
        if row["gpu"] not in per_node.setdefault(row["node"], []):
            per_node[row["node"]].append(row["gpu"])
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    labels: dict[str, dict[str, str]] = {}
    for row in rows:
        gpu, node = row["gpu"], row["node"]
        labels[gpu] = {
            "UUID": gpu,
            "Hostname": node,
            "gpu": str(per_node[node].index(gpu)),
            "modelName": row["gpu_model"],
            "pod": row["workload"],
            "namespace": row["team"],
            "container": "main",
        }
        t, mem = float(row["timestamp"]) + shift, float(row["mem_used_mib"])
        points.setdefault(("DCGM_FI_DEV_GPU_UTIL", gpu), []).append((t, float(row["util_pct"])))
        points.setdefault(("DCGM_FI_DEV_FB_USED", gpu), []).append((t, mem))
        points.setdefault(("DCGM_FI_DEV_FB_FREE", gpu), []).append((t, 81559 - mem))
    return [(name, labels[gpu], pts) for (name, gpu), pts in points.items()]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalPrometheus, float]]:
    if binaries() is None:
        msg = "prometheus/promtool not installed (apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    # Recent data (the scenario shifted to end two minutes ago), so no retention drops it.
    end = math.floor((time.time() - 120) / 60) * 60
    shift = end - (T0 + 359 * 60)
    work = tmp_path_factory.mktemp("prom")
    om = work / "scenario.om"
    with om.open("w") as f:
        write_openmetrics(f, scenario_series(shift))
    prom = LocalPrometheus(work, om)
    prom.start()
    yield prom, shift
    prom.stop()


def unbudgeted(**extra: object) -> Settings:
    return load_settings(None, policy={"budget": {"max_gpu_share_per_hour": 1.0}}, **extra)


def test_a_prometheus_range_backtests_like_the_trace_file(prometheus: tuple[LocalPrometheus, float]) -> None:
    prom, shift = prometheus
    # The scenario is a batch cluster; neither the series nor the trace made of them say so.
    source = {"name": "prometheus", "prometheus": {"url": prom.url}, "replay": {"default_class": "batch"}}
    settings = unbudgeted(tick_seconds=60, source=source)
    start, end = utc(T0 + shift), utc(T0 + shift + 360 * 60)
    trace = history_trace(settings, "prometheus", start, end, 60)
    assert len(trace.gpus) == 8
    assert {w.id for w in trace.workloads} == {
        f"pod/{team}/{pod}"
        for pod, team in [
            ("train-1", "vision"),
            ("idle-1", "nlp"),
            ("pause-1", "nlp"),
            ("zombie-1", "nlp"),
            ("over-1", "vision"),
        ]
    }
    # The scenario's zombie idles at exactly 1 %: scored from 2 %, as in test_backtest.py.
    scoring = Scoring(busy_pct=2.0)
    via_prometheus = run_backtest(trace, settings, scoring=scoring)
    via_csv = run_backtest(load_trace(SCENARIO), settings, scoring=scoring)
    stopped = {j.stop.workload_id.rsplit("/", 1)[-1] for j in via_prometheus.stops}
    assert stopped == {j.stop.workload_id for j in via_csv.stops} == {"idle-1", "zombie-1", "pause-1"}
    assert [w.rsplit("/", 1)[-1] for w in via_prometheus.summary["regret_workloads"]] == ["pause-1"]
    # The same history, read two ways: the same idle time and about the same reclaimed hours
    # (Prometheus dates each sample at the start of its step: a minute earlier).
    p, c = via_prometheus.summary, via_csv.summary
    assert p["waste_gpu_hours"] == pytest.approx(c["waste_gpu_hours"], abs=0.2)
    assert p["reclaimed_gpu_hours"] == pytest.approx(c["reclaimed_gpu_hours"], abs=0.2)
