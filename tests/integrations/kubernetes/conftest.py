"""Fixtures: the fake API server on loopback, a client of the official library pointed at it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from k8s_cluster import scenario
from k8s_fakeapi import FakeApiServer, FakeCluster

pytest.importorskip("kubernetes")


def client_for(url: str, agent: str = "gpusteward-test") -> Any:
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = url
    api = client.ApiClient(cfg)
    api.user_agent = agent
    return api


@pytest.fixture
def cluster() -> FakeCluster:
    return scenario()


@pytest.fixture
def server(cluster: FakeCluster) -> Iterator[FakeApiServer]:
    srv = FakeApiServer(cluster).start()
    yield srv
    srv.stop()


@pytest.fixture
def api_client(server: FakeApiServer) -> Iterator[Any]:
    c = client_for(server.url)
    yield c
    c.close()


class ScriptedMetrics:
    """A metric ``Source`` whose GPUs carry pod/namespace holders, built with the prometheus
    source's own ``build_workloads`` (what dcgm-exporter's labels become). ``util[uuid]`` is
    the utilisation each GPU reports; ``holders[uuid]`` = (namespace, pod)."""

    name = "scripted-metrics"

    def __init__(
        self, holders: dict[str, tuple[str, str]], util: dict[str, float], node: dict[str, str]
    ) -> None:
        self.holders = holders
        self.util = util
        self.node = node
        self.fail: str | None = None

    def observe(self, now: Any) -> Any:
        from gpusteward.domain.errors import SourceError
        from gpusteward.domain.models import Gpu, Observation, Sample, WorkloadKind
        from gpusteward.integrations.prometheus.parse import Holder
        from gpusteward.integrations.prometheus.workloads import build_workloads

        if self.fail:
            raise SourceError(self.fail)
        gpus = tuple(
            Gpu(u, self.node[u], i, "NVIDIA A100-SXM4-80GB", 81920.0) for i, u in enumerate(sorted(self.util))
        )
        samples = tuple(
            Sample(u, now, gpu_util_pct=self.util[u], mem_used_mib=20000.0, power_w=90.0, proc_cpu_pct=1.0)
            for u in sorted(self.util)
        )
        holders = {
            u: Holder(WorkloadKind.POD, f"pod/{ns}/{pod}", pod, ns, "main")
            for u, (ns, pod) in self.holders.items()
        }
        started = {h.id: now for h in holders.values()}
        return Observation(now, gpus, samples, build_workloads(holders, started, self.node))

    def close(self) -> None:
        """Nothing to release."""


SCENARIO_GPUS = {
    "GPU-nb": (("ml", "alice-nb-0"), 0.0, "gpu-node-1"),
    "GPU-llm-a": (("ml", "llm-serve-5d4ddc985d-fpddz"), 85.0, "gpu-node-2"),
    "GPU-llm-b": (("ml", "llm-serve-5d4ddc985d-x7k2q"), 70.0, "gpu-node-2"),
    "GPU-idle": (("ml", "idle-pod"), 0.0, "gpu-node-1"),
    "GPU-prot": (("ml", "protected-pod"), 0.0, "gpu-node-1"),
    "GPU-ks": (("kube-system", "gpu-feature-discovery-x"), 0.0, "gpu-node-2"),
    "GPU-agent": (("gpusteward", "agent-debug"), 0.0, "gpu-node-2"),
}


@pytest.fixture
def metrics() -> ScriptedMetrics:
    return ScriptedMetrics(
        {u: h for u, (h, _, _) in SCENARIO_GPUS.items()},
        {u: x for u, (_, x, _) in SCENARIO_GPUS.items()},
        {u: n for u, (_, _, n) in SCENARIO_GPUS.items()},
    )
