"""Looking ahead and back in a trace: busy runs, idle runs, ends, totals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpusteward.domain.models import Gpu, Owner
from gpusteward.integrations.replay import Trace, TraceWorkload


def trace(util: dict[int, list[float | None]], *, wl_of: dict[int, int] | None = None) -> Trace:
    """GPU g's samples one a minute from t=0; None is a missing row (a gap); workload per GPU."""
    wl_of = wl_of if wl_of is not None else dict.fromkeys(util, 0)
    t, gpu, u, wl = [], [], [], []
    for g, values in util.items():
        for k, v in enumerate(values):
            if v is not None:
                t.append(60.0 * k)
                gpu.append(g)
                u.append(v)
                wl.append(wl_of[g])
    n_wl = max(wl_of.values()) + 1
    ts = np.asarray(t)
    workloads = [
        TraceWorkload(
            f"w{i}",
            f"w{i}",
            Owner("u"),
            tuple(g for g in util if wl_of[g] == i),
            0.0,
            float(ts[np.asarray(wl) == i].min()),
            float(ts[np.asarray(wl) == i].max()),
        )
        for i in range(n_wl)
    ]
    gpus = [Gpu(f"g{g}", "n", g, "", 0) for g in range(max(util) + 1)]
    return Trace(name="t", gpus=gpus, t=t, gpu=gpu, util=u, wl=wl, workloads=workloads)


IDLE, BUSY, NAN = 0.0, 50.0, math.nan


@pytest.mark.parametrize(
    ("values", "at", "expected"),
    [
        ([IDLE] * 3 + [BUSY] * 5 + [IDLE] * 2, 60.0, 180.0),  # 5 busy minutes: busy again at minute 3
        ([IDLE] * 3 + [BUSY] * 4 + [IDLE] * 2, 60.0, None),  # 4 minutes is a blip
        ([IDLE] * 3 + [BUSY] * 5, 240.0, None),  # only what comes after the action counts
        ([IDLE] * 3 + [BUSY, BUSY, NAN, BUSY, BUSY, BUSY], 60.0, 180.0),  # a missing value does not break it
        ([IDLE] * 3 + [BUSY, BUSY, None, None, None, None, BUSY, BUSY, BUSY], 60.0, None),  # a gap does
        ([IDLE] * 3 + [BUSY, BUSY, IDLE, BUSY, BUSY, BUSY], 60.0, None),  # an idle sample does
        ([IDLE] * 3 + [9.9] * 6, 60.0, None),  # under 10 % is not busy
        ([IDLE] * 3 + [10.0] * 6, 60.0, 180.0),
    ],
)
def test_busy_again_after(values: list[float | None], at: float, expected: float | None) -> None:
    assert trace({0: values}).busy_again_after(0, at) == expected


def test_busy_again_on_any_gpu_of_the_workload_but_not_on_another_workloads() -> None:
    tr = trace({0: [IDLE] * 8, 1: [IDLE, IDLE] + [BUSY] * 6, 2: [BUSY] * 8}, wl_of={0: 0, 1: 0, 2: 1})
    assert tr.busy_again_after(0, 0.0) == 120.0
    tr = trace({0: [IDLE] * 8, 1: [BUSY] * 8}, wl_of={0: 0, 1: 1})
    assert tr.busy_again_after(0, 0.0) is None
    assert tr.busy_again_after(1, 0.0) == 60.0


def test_idle_since_is_when_the_last_gpu_went_idle() -> None:
    tr = trace({0: [BUSY, IDLE, IDLE, IDLE, IDLE], 1: [BUSY, BUSY, BUSY, IDLE, IDLE]})
    assert tr.idle_since(0, 240.0) == 180.0  # GPU 1's last busy sample ends at minute 3
    assert tr.idle_since(0, 120.0) == 120.0  # GPU 1 is still busy at minute 2: not idle yet
    assert trace({0: [IDLE] * 4}).idle_since(0, 180.0) == 0.0  # never busy: since its first sample


def test_ends_totals_and_running() -> None:
    tr = trace({0: [IDLE, IDLE, None, None, None, None, BUSY, NAN], 1: [IDLE, BUSY]}, wl_of={0: 0, 1: 1})
    assert tr.interval_s == 60
    assert tr.end_of(0) == 480.0  # last sample at minute 7, one interval
    assert tr.end_of(1) == 120.0
    # idle: GPU 0 minutes 0, 1 (the gap after minute 1 is not counted), GPU 1 minute 0
    assert tr.idle_gpu_hours() == pytest.approx(3 / 60)
    assert tr.held_gpu_hours() == pytest.approx(5 / 60)  # NaN samples are not held time either
    assert list(tr.running(30.0)) == [0, 1]
    assert list(tr.running(200.0)) == [0]
    assert tr.any_running_between(400, 500)  # workload 0 runs to its last row (minute 7)
    assert not tr.any_running_between(421, 500)
    rows = tr.rows_between(0.0, 60.0)
    assert list(tr.t[rows]) == [60.0, 60.0]
    assert tr.next_time_after(60.0) == 360.0
    assert tr.next_time_after(420.0) is None


def test_trace_validates_its_tables() -> None:
    gpus = [Gpu("g0", "n", 0, "", 0)]
    w = [TraceWorkload("w", "w", Owner("u"), (0,), 0.0, 0.0, 0.0)]
    with pytest.raises(ValueError, match="GPU index"):
        Trace(name="t", gpus=gpus, t=[0.0], gpu=[1], util=[1.0], wl=[0], workloads=w)
    with pytest.raises(ValueError, match="workload index"):
        Trace(name="t", gpus=gpus, t=[0.0], gpu=[0], util=[1.0], wl=[3], workloads=w)
    with pytest.raises(ValueError, match="2 values for 1 rows"):
        Trace(name="t", gpus=gpus, t=[0.0], gpu=[0, 0], util=[1.0], wl=[0], workloads=w)
    tr = Trace(name="t", gpus=gpus, t=[0.0], gpu=[0], util=[1.0], wl=[0], workloads=w)
    priced = tr.with_gpus([Gpu("g0", "n", 0, "", 0, price_per_hour=2.0)])
    assert priced.gpus[0].price_per_hour == 2.0
    assert tr.gpus[0].price_per_hour == 0.0
    with pytest.raises(ValueError, match="keeps the GPUs"):
        tr.with_gpus([Gpu("other", "n", 0, "", 0)])
