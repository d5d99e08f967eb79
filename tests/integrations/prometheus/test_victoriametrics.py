"""The same planted cluster, served by a real VictoriaMetrics: gpusteward finds the same idle GPUs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from gpusteward.domain.models import RuleAction, utc
from gpusteward.integrations.prometheus.localserver import Series, free_port
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.config import Settings


def _exposition(series: list[Series]) -> str:
    """Prometheus text with millisecond timestamps, as VictoriaMetrics' import takes it."""
    out = []
    for name, labels, points in series:
        lbl = ",".join(f'{k}="{v}"' for k, v in labels.items())
        out.extend(f"{name}{{{lbl}}} {v:g} {int(t * 1000)}" for t, v in points)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def vm(tmp_path_factory: pytest.TempPathFactory, cluster_data: list[Series]) -> Iterator[str]:
    binary = shutil.which("victoria-metrics")
    if binary is None:
        msg = "victoria-metrics not installed (apt-get install victoria-metrics)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    work = tmp_path_factory.mktemp("vm")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (work / "vm.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"-storageDataPath={work / 'data'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60  # hang guard
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((work / "vm.log").read_text()[-2000:])
            time.sleep(0.1)
        resp = httpx.post(f"{url}/api/v1/import/prometheus", content=_exposition(cluster_data), timeout=60)
        assert resp.status_code == 204, resp.text
        httpx.get(f"{url}/internal/force_flush", timeout=30)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_victoriametrics_gives_the_same_findings(
    vm: str, prom_settings: Callable[..., Settings], end_s: float, expected: tuple[set[str], set[str]]
) -> None:
    clock = SimClock(utc(end_s + 5))
    steward, _ = build_steward(prom_settings(vm), clock=clock)
    report = steward.tick()
    assert report.source_ok, report.errors
    found = [f for f in report.findings if f.action is RuleAction.RECLAIM]
    assert {f.workload_id for f in found} == expected[0]
    assert {u for f in found for u in f.gpu_uuids} == expected[1]
    assert steward.workloads["pod/ml/new-n"].gpu_uuids == ("GPU-n1",)
