"""The replay's scheduler: FIFO with first-fit backfill over the trace's GPUs, stops free GPUs.

The hand-made cluster: three GPUs sampled every minute for 10,000 s. Workload A holds GPU 0 until
3,000 s, B holds GPU 1 until 6,000 s, C holds GPU 2 from 5,000 s on (GPU 2 is free before that).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.integration import BuildContext
from gpusteward.domain.models import Gpu, Owner
from gpusteward.integrations.replay import ReplaySettings, Trace, TraceWorkload
from gpusteward.integrations.replay.build import build
from gpusteward.integrations.replay.pods import (
    FRACTIONAL,
    NEVER_SCHEDULED,
    NO_GPU,
    NO_RUN_TIME,
    QueueJob,
    load_pod_list,
)
from gpusteward.integrations.replay.queue_model import QueueModel
from gpusteward.integrations.sim import SimClock

T0 = 1_700_000_000.0
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "openb_pod_list_days118-120.csv"
#: (gpu, first, last) of A, B, C in seconds after T0.
BOOKINGS = ((0, 0.0, 3000.0), (1, 0.0, 6000.0), (2, 5000.0, 10000.0))


def cluster(model: str = "A100") -> Trace:
    gpus = [Gpu(f"g{g}", "n", g, model, 80 * 1024) for g in range(3)]
    t, gpu, wl, workloads = [], [], [], []
    for i, (g, first, last) in enumerate(BOOKINGS):
        times = (T0 + np.arange(first, last + 1, 60.0)).tolist()
        t += times
        gpu += [g] * len(times)
        wl += [i] * len(times)
        name = "ABC"[i]
        workloads.append(TraceWorkload(name, name, Owner("u"), (g,), times[0], times[0], times[-1]))
    t.append(T0 + 10000.0)  # nobody's sample: the replay's end
    gpu.append(0)
    wl.append(-1)
    return Trace(name="hand", gpus=gpus, t=t, gpu=gpu, util=np.full(len(t), 50.0), wl=wl, workloads=workloads)


JOBS = (
    QueueJob("j1", 2, 0.0, 1000.0),
    QueueJob("j2", 1, 100.0, 4000.0),
    QueueJob("j3", 1, 200.0, 1000.0),
    QueueJob("j4", 1, 300.0, 500.0),
)


def waits(model: QueueModel) -> dict[str, float]:
    return {job.id: start - arrived for arrived, start, job in model.started}


def test_fifo_with_first_fit_backfill_by_hand() -> None:
    model = QueueModel(cluster(), JOBS)
    stats = model.finish()
    # j1 (2 GPUs) waits for two free GPUs: GPU 2 is free only until C books it at 5,000 s, too
    # short for j1's 1,000 s after j4 leaves GPU 0 at 4,500 s, so j1 starts when B ends at 6,000 s.
    # j2 backfills onto GPU 2 at once (100 + 4,000 <= 5,000); j3 takes GPU 0 when A ends (3,000 s),
    # j4 when j3 is done (4,000 s).
    assert waits(model) == {"j1": 6000.0, "j2": 0.0, "j3": 2800.0, "j4": 3700.0}
    assert (stats.started, stats.unstarted) == (4, 0)
    assert sorted(stats.waits_s) == [0.0, 2800.0, 3700.0, 6000.0]
    assert stats.percentile_min(50) == round(np.percentile([0, 2800, 3700, 6000], 50) / 60, 1)


def test_a_stop_frees_gpus_and_a_waiting_job_starts_earlier() -> None:
    trace = cluster()
    released = np.full(3, np.inf)
    released[1] = T0 + 2000.0  # gpusteward stops B at 2,000 s
    model = QueueModel(trace, JOBS, released)
    model.finish()
    # j3 takes B's GPU at once; when A and j3 end at 3,000 s, j1 gets GPUs 0 and 1.
    assert waits(model) == {"j1": 3000.0, "j2": 0.0, "j3": 1800.0, "j4": 3700.0}


def test_the_queue_the_tick_reads() -> None:
    model = QueueModel(cluster(), JOBS, offset_s=1000.0, source_name="replay")
    q = model.queue(datetime.fromtimestamp(T0 + 1000.0 + 2500.0, UTC))
    assert [p.id for p in q.pending] == ["j1", "j3", "j4"]
    assert {p.reason for p in q.pending} == {"Resources"}
    assert q.gpus_waited_for("A100") == 4
    assert q.pending[0].submitted_at == datetime.fromtimestamp(T0 + 1000.0, UTC)
    assert [(s.id, s.waited_s, s.gpus) for s in q.started] == [("j2", 0.0, 1)]
    later = model.queue(datetime.fromtimestamp(T0 + 1000.0 + 3700.0, UTC))
    # j2 started more than an hour before; j3 started at 3,000 s after waiting 2,800 s.
    assert [(s.id, s.waited_s) for s in later.started] == [("j3", 2800.0)]
    assert [p.id for p in later.pending] == ["j1", "j4"]


def test_stops_read_live_between_ticks_match_a_second_pass() -> None:
    trace = cluster()
    released = np.full(3, np.inf)
    live = QueueModel(trace, JOBS, released)
    t = 0.0
    while t <= 10000.0:
        live.queue(datetime.fromtimestamp(T0 + t, UTC))
        if t == 1980.0:
            released[1] = T0 + t  # the stop comes after the tick read the queue, as in a backtest
        t += 60.0
    after = QueueModel(trace, JOBS, released.copy())
    assert live.finish().waits_s == after.finish().waits_s
    # Stopped at 1,980 s: j3 runs on B's GPU until 2,980 s, j4 backfills there until 3,480 s (A still
    # holds GPU 0 at 2,980 s), and then j1 gets GPUs 0 and 1.
    assert waits(live) == {"j1": 3480.0, "j2": 0.0, "j3": 1780.0, "j4": 2680.0}


def test_model_mismatch_and_late_arrivals() -> None:
    jobs = (
        QueueJob("v100", 1, 0.0, 60.0, gpu_models=("V100",)),
        QueueJob("late", 1, 20000.0, 60.0),
        QueueJob("a100", 1, 0.0, 60.0, gpu_models=("V100M16", "A100")),
    )
    trace = cluster()
    model = QueueModel(trace, jobs)
    stats = model.finish()
    assert model.beyond_replay == 1
    assert waits(model) == {"a100": 0.0}
    assert (stats.started, stats.unstarted) == (1, 1)
    # The V100 job waited the whole replay (to the end of its last sample's interval): a lower bound.
    assert sorted(stats.waits_s) == [0.0, trace.end - T0]


def test_pod_list_rows_and_why_some_are_left_out(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p0,1,1,2,1000,,LS,Running,500,2600,600\n"
        "p1,1,1,0,0,,BE,Running,400,900,400\n"
        "p2,1,1,1,460,,LS,Running,700,900,700\n"
        "p3,1,1,1,1000,V100M16|V100M32,BE,Pending,800,,\n"
        "p4,1,1,1,1000,V100M32,,Failed,900,900,900\n"
        "p5,1,1,1,1000,V100M32,,Running,1000,1300,1000\n",
        encoding="utf-8",
    )
    pods = load_pod_list(path, scale=0.5)
    assert pods.rows == 6
    assert pods.skipped == {FRACTIONAL: 1, NEVER_SCHEDULED: 1, NO_GPU: 1, NO_RUN_TIME: 1}
    # Arrivals from the earliest creation time (400 s, p1's) and halved; run times are the pods' own.
    assert pods.jobs == (
        QueueJob("p0", 2, 50.0, 2000.0, "LS"),
        QueueJob("p5", 1, 300.0, 300.0, "default", ("V100M32",)),
    )


def test_pod_list_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("name,num_gpu\np,1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="gpu_milli"):
        load_pod_list(bad)
    with pytest.raises(ConfigError, match="positive"):
        load_pod_list(FIXTURE, scale=0.0)
    cell = tmp_path / "cell.csv"
    cell.write_text(FIXTURE.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    with cell.open("a", encoding="utf-8") as f:
        f.write("p,1,1,one,1000,,LS,Running,0,10,0\n")
    with pytest.raises(ConfigError, match="num_gpu") as e:
        load_pod_list(cell)
    assert e.value.line == 2


def test_the_shipped_pod_list_slice() -> None:
    pods = load_pod_list(FIXTURE)
    assert pods.rows == 784
    assert len(pods.jobs) + sum(pods.skipped.values()) == pods.rows
    assert {j.gpus for j in pods.jobs} <= {1, 2, 4, 8}
    assert min(j.arrival_s for j in pods.jobs) >= 0.0
    assert all(j.duration_s > 0 for j in pods.jobs)


def test_source_replay_with_a_queue_setting(tmp_path: Path) -> None:
    """``source.replay.queue`` gives the built integration a queue read in the shifted time."""
    small = Path(__file__).resolve().parents[2] / "fixtures" / "replay" / "generic_small.csv"
    clock = SimClock(datetime(2030, 1, 1, tzinfo=UTC))
    plain = build(ReplaySettings(trace=small), BuildContext(clock=clock, window_s=600))
    assert plain.queue is None
    cfg = ReplaySettings(trace=small, queue=FIXTURE, queue_scale=0.001)
    integration = build(cfg, BuildContext(clock=clock, window_s=600))
    assert integration.queue is not None
    q = integration.queue(clock.now())
    # 600 s of window before now at scale 0.001: the arrivals of the slice's first 600,000 s.
    jobs = load_pod_list(FIXTURE, scale=0.001).jobs
    due = [j for j in jobs if j.arrival_s < 600.0]
    assert due
    assert len(q.pending) + len(q.started) == len(due)
    assert all(p.submitted_at < clock.now() for p in q.pending)
