"""The overview's "GPU health" and "Queue" boxes (issue 16), page and JSON, from hand-made
findings, GPUs and a queue: exact counts, the failed / degrading GPUs with node, message and
holder, and hostile names shown as text."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpusteward.domain.models import (
    Finding,
    Gpu,
    Observation,
    Owner,
    RuleAction,
    Sample,
    Workload,
    WorkloadKind,
)
from gpusteward.domain.queue import PendingJob, Queue, StartedWait
from gpusteward.integrations.sim import DEFAULT_START, SimClock
from gpusteward.runtime.build import build_steward
from gpusteward.runtime.loop import Steward
from gpusteward.store.access import AccessStore
from gpusteward.web.app import create_web_app
from gpusteward.web.live import Attached, Nothing

from .conftest import bearer, demo_settings

HOSTILE_NODE = '<script>alert("node")</script>'
HOSTILE_USER = "<b>eve</b>"
HOSTILE_MSG = "<img src=x onerror=alert(1)> Xid 79: GPU has fallen off the bus"
T = DEFAULT_START + timedelta(hours=1)


@dataclass
class Built:
    steward: Steward
    client: TestClient
    token: str


def _gpu(i: int, node: str) -> Gpu:
    return Gpu(f"GPU-{i}", node, i, "H100", 81559.0)


def _finding(rule: str, uuid: str, workload: str | None, message: str) -> Finding:
    return Finding(rule, "health", RuleAction.REPAIR, T, (uuid,), workload, {}, 0.0, 0.0, 0.0, message)


def _seed(steward: Steward) -> None:
    gpus = (_gpu(0, HOSTILE_NODE), _gpu(1, "n2"), _gpu(2, "n2"), _gpu(3, "n3"), _gpu(4, "n3"))
    # GPU-4's source reads no health metric: it has no state at all.
    samples = (
        *(Sample(g.uuid, T, gpu_util_pct=1.0, ecc_sbe_count=0.0) for g in gpus[:4]),
        Sample("GPU-4", T, gpu_util_pct=1.0),
    )
    job = Workload("job-7", WorkloadKind.JOB, "train", Owner(HOSTILE_USER, "vision"), 1, ("GPU-0",), T)
    steward.ingest(Observation(T, gpus, samples, (job,)))
    store = steward.store
    store.remember_workloads([job], T)
    # GPU-3 failed once, an hour ago: that episode is no longer fresh, so GPU-3 counts as ok.
    store.record_findings([_finding("gpu-failed", "GPU-3", None, "old")], T - timedelta(hours=1))
    store.record_findings(
        [
            _finding("gpu-failed", "GPU-0", "job-7", HOSTILE_MSG),
            _finding("gpu-degrading", "GPU-0", "job-7", "rising corrected ECC"),  # the worst wins
            _finding("gpu-degrading", "GPU-1", None, "GPU-1: 40 PCIe replays in 1 h"),
            _finding("gpu-throttled", "GPU-2", None, "GPU-2 throttled"),
        ],
        T,
    )


QUEUE = Queue(
    T,
    pending=(
        PendingJob("1", "gpu", 2, T, "Resources", gpu_model="H100"),
        PendingJob("2", "gpu", 4, T, "Priority", gpu_model="H100"),  # waits, not for GPUs
        PendingJob("3", "<i>dbg</i>", 1, T, "Resources"),
    ),
    # overall p50 of 60, 120, 600, 7200 s: 360 s (6 min); p95: 600 + 0.85 * 6600 = 6210 s
    started=(
        StartedWait("a", "gpu", 60, T),
        StartedWait("b", "gpu", 120, T),
        StartedWait("c", "gpu", 600, T),
        StartedWait("d", "<i>dbg</i>", 7200, T),
    ),
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    db: Path = tmp_path_factory.mktemp("health") / "state.db"
    settings = demo_settings(db)
    clock = SimClock(T)
    steward, _ = build_steward(settings, clock=clock)
    _seed(steward)
    steward.queues.latest = QUEUE
    token = AccessStore(steward.store).create_token("viewer-1", "viewer", at=T)[1]
    app = create_web_app(steward.store, settings, steward.rules, live=Attached(steward), clock=clock)
    with TestClient(app) as c:
        yield Built(steward, c, token)


def test_health_counts_and_listed_gpus_in_the_json(built: Built) -> None:
    ov = built.client.get("/api/v1/overview", headers=bearer(built.token)).json()
    assert ov["health"]["counts"] == {"ok": 1, "throttled": 1, "degrading": 1, "failed": 1}
    assert ov["health"]["gpus"] == [
        {
            "state": "failed",
            "uuid": "GPU-0",
            "node": HOSTILE_NODE,
            "gpu": f"{HOSTILE_NODE}/gpu0",
            "model": "H100",
            "rule": "gpu-failed",
            "message": HOSTILE_MSG,
            "workload_id": "job-7",
            "holder": f"{HOSTILE_USER} (vision)",
        },
        {
            "state": "degrading",
            "uuid": "GPU-1",
            "node": "n2",
            "gpu": "n2/gpu1",
            "model": "H100",
            "rule": "gpu-degrading",
            "message": "GPU-1: 40 PCIe replays in 1 h",
            "workload_id": "",
            "holder": "",
        },
    ]


def test_queue_figures_in_the_json(built: Built) -> None:
    q = built.client.get("/api/v1/overview", headers=bearer(built.token)).json()["queue"]
    assert (q["jobs_waiting"], q["jobs_waiting_for_gpus"], q["gpus_waited_for"]) == (3, 2, 3)
    assert q["by_model"] == [{"model": "any", "jobs": 1, "gpus": 1}, {"model": "H100", "jobs": 1, "gpus": 2}]
    assert (q["started"], q["p50_s"]) == (4, 360.0)
    assert q["p95_s"] == pytest.approx(6210.0)
    assert q["by_queue"] == [
        {"queue": "<i>dbg</i>", "jobs": 1, "gpus": 1, "p50_s": 7200.0, "p95_s": 7200.0},
        {"queue": "gpu", "jobs": 2, "gpus": 2, "p50_s": 120.0, "p95_s": pytest.approx(552.0)},
    ]


def test_the_page_shows_both_boxes_with_hostile_names_as_text(built: Built) -> None:
    page = built.client.get("/", headers=bearer(built.token)).text
    for state, n in (("ok", 1), ("throttled", 1), ("degrading", 1), ("failed", 1)):
        assert f'<span id="health-{state}">{n} {state}</span>' in page
    assert '<span id="jobs-waiting">3</span>' in page
    assert '<span id="gpus-waited-for">3</span>' in page
    assert "(1 any, 2 H100)" in page
    assert '<span id="queue-p50">6 min</span>' in page
    assert '<span id="queue-p95">1.7 h</span>' in page  # 6210 s
    assert (
        '<td data-label="holder"><a href="/workloads/job-7">&lt;b&gt;eve&lt;/b&gt; (vision)</a></td>' in page
    )
    for raw in (HOSTILE_NODE, HOSTILE_USER, "<img src=x", "<i>dbg</i>"):
        assert raw not in page
    assert "&lt;script&gt;alert(&#34;node&#34;)&lt;/script&gt;/gpu0" in page
    assert "&lt;img src=x onerror=alert(1)&gt; Xid 79" in page
    assert "&lt;i&gt;dbg&lt;/i&gt;" in page


def test_an_unread_queue_and_no_live_data_say_unknown(built: Built) -> None:
    app = create_web_app(
        built.steward.store,
        demo_settings(Path("/nonexistent")),
        built.steward.rules,
        live=Nothing(),
        clock=SimClock(T),
    )
    with TestClient(app) as c:
        ov = c.get("/api/v1/overview", headers=bearer(built.token)).json()
        page = c.get("/", headers=bearer(built.token)).text
    assert ov["queue"] is None
    # The findings are in the store; which GPUs are fine needs the live window.
    assert ov["health"]["counts"] == {"ok": None, "throttled": 1, "degrading": 1, "failed": 1}
    assert '<span id="health-ok">? ok</span>' in page
    assert "No queue read" in page
