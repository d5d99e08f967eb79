"""The member side the hub reads: ``GET /api/v1/fleet`` and the cluster name in
``/api/v1/overview``, on a steward that ran the simulated cluster (tests/web's demo)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.web.conftest import Demo, bearer, run_demo

from gpusteward.web.app import create_web_app


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    d = run_demo(tmp_path_factory.mktemp("member") / "state.db")
    d.settings.web.cluster_name = "alpha"
    return d


@pytest.fixture
def client(demo: Demo) -> Iterator[TestClient]:
    with TestClient(demo.app()) as c:
        yield c


def test_fleet_counts_gpus_per_model_and_lists_the_queue(demo: Demo, client: TestClient) -> None:
    got = client.get("/api/v1/fleet", headers=bearer(demo.tokens["viewer"]))
    assert got.status_code == 200
    body = got.json()
    assert body["cluster"] == "alpha"
    assert body["live"] is True
    gpus = demo.steward.gpus
    held = {u for w in demo.steward.workloads.values() for u in w.gpu_uuids}
    (model,) = body["models"]
    assert model["gpus"] == len(gpus)
    assert model["free_gpus"] == len(set(gpus) - held)
    assert model["free_gpus"] <= model["idle_gpus"] <= model["gpus"]
    queue = demo.steward.queues.latest
    assert body["queue_read"] is (queue is not None)
    assert [j["id"] for j in body["waiting"]] == [j.id for j in (queue.pending if queue else ())]
    assert set(body["health"]) == {"ok", "throttled", "degrading", "failed"}


def test_fleet_needs_a_token_and_says_unknown_without_a_loop(demo: Demo) -> None:
    with TestClient(create_web_app(demo.store, demo.settings, demo.steward.rules, clock=demo.clock)) as c:
        assert c.get("/api/v1/fleet").status_code == 401
        body = c.get("/api/v1/fleet", headers=bearer(demo.tokens["viewer"])).json()
    assert body["live"] is False
    assert body["models"] == []  # unknown, not zero GPUs
    assert body["queue_read"] is False
    assert body["health"]["ok"] is None


def test_overview_names_the_cluster(demo: Demo, client: TestClient, tmp_path: Path) -> None:
    assert client.get("/api/v1/overview", headers=bearer(demo.tokens["viewer"])).json()["cluster"] == "alpha"
