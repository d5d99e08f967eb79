"""Right-sizing advice, table-driven: each row is a workload's behaviour and the advice it gets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.analysis.advice import AdviceThresholds, Lifetime, advise, mig_profile, right_size_gpus
from gpusteward.analysis.features import extract
from gpusteward.domain.models import Gpu, Metric, Owner, RuleAction, Workload, WorkloadKind

from .conftest import NOW


def const(v: float):
    return lambda t, r: np.full(t.size, float(v))


def profile(util: float, mem_gib: float, cpu: float, sm: float | None = None):
    p = {
        Metric.GPU_UTIL: const(util),
        Metric.MEM_USED: const(mem_gib * 1024),
        Metric.PROC_CPU: const(cpu),
    }
    if sm is not None:
        p[Metric.SM_ACTIVE] = const(sm)
    return p


# (name, util %, peak memory GiB, CPU % of a core, SM active % or None, card GiB, expected rules)
WINDOW_CASES = [
    ("small model on an H100", 12, 4, 50, None, 79.6, {"gpu-too-large"}),
    ("small model, busy GPU", 30, 4, 50, None, 79.6, set()),
    ("little use but 12 GiB", 12, 12, 50, None, 79.6, set()),
    ("little use on a 24 GiB card", 12, 4, 50, None, 22.5, set()),
    ("data-loader bound", 25, 30, 180, None, 79.6, {"input-bound"}),
    ("low use, idle CPU too", 25, 30, 20, None, 79.6, set()),
    ("util high, SM low, CPU busy", 95, 30, 150, 20, 79.6, {"input-bound"}),
    ("util high, SM high", 95, 30, 150, 80, 79.6, set()),
    ("both: tiny, starved", 10, 3, 120, None, 139.8, {"gpu-too-large", "input-bound"}),
]


@pytest.mark.parametrize(("name", "util", "mem", "cpu", "sm", "card", "expected"), WINDOW_CASES)
def test_window_advice(cluster, name, util, mem, cpu, sm, card, expected) -> None:
    c = cluster([profile(util, mem, cpu, sm)], memory_gib=card)
    table = extract(c.view(), c.gpus, c.workloads)
    found = advise(table, {}, c.gpus, NOW)
    assert {f.rule for f in found} == expected, [f.message for f in found]
    for f in found:
        assert f.action is RuleAction.ADVISE
        assert f.workload_id == "job-0"
    if "gpu-too-large" in expected:
        msg = next(f.message for f in found if f.rule == "gpu-too-large")
        assert ("1g.18gb" if card > 100 else "1g.10gb") in msg
    if "input-bound" in expected:
        msg = next(f.message for f in found if f.rule == "input-bound")
        assert "num_workers" in msg
        assert "pin_memory" in msg
        assert ("SM activity" in msg) == (sm is not None)


@pytest.mark.parametrize(
    ("card", "peak", "profile"),
    [
        (79.6, 4, "1g.10gb"),
        (79.6, 9, "2g.20gb"),
        (39.4, 3, "1g.5gb"),
        (139.8, 20, "2g.35gb"),
        (79.6, 35, None),
    ],
)
def test_mig_profile_holds_the_peak_with_headroom(card: float, peak: float, profile: str | None) -> None:
    got = mig_profile(card, peak, 1.25)
    assert (got[0] if got else None) == profile


def test_no_mig_on_cards_without_it() -> None:
    assert mig_profile(44.4, 2, 1.25) is None  # an L40S (48 GB) has no MIG


T0 = datetime(2026, 3, 2, tzinfo=UTC)


def job(n_gpus: int, requested: int | None = None) -> Workload:
    return Workload(
        "job-x",
        WorkloadKind.JOB,
        "train",
        Owner("bob", "nlp"),
        requested or n_gpus,
        tuple(f"g{i}" for i in range(n_gpus)),
        T0 - timedelta(hours=10),
    )


# (name, GPUs, requested, per-GPU lifetime utilisation, observed hours, advice expected: K or None)
LIFE_CASES = [
    ("8 asked, 2 used", 8, 8, [90, 85, 1, 0, 0, 2, 0, 0], 5.0, 2),
    ("4 asked, all used", 4, 4, [90, 60, 30, 6], 5.0, None),
    ("too young to tell", 8, 8, [90, 85, 1, 0, 0, 2, 0, 0], 1.0, None),
    ("all idle: a reclaim rule's job", 4, 4, [0, 0, 1, 0], 5.0, None),
    ("single GPU", 1, 1, [1], 5.0, None),
    ("a GPU never measured", 4, 4, [90, 0, 0, None], 5.0, None),
]


@pytest.mark.parametrize(("name", "n", "requested", "utils", "hours", "suggest"), LIFE_CASES)
def test_right_size_over_the_life(name, n, requested, utils, hours, suggest) -> None:
    w = job(n, requested)
    life = Lifetime(w.id, hours, {u: v for u, v in zip(w.gpu_uuids, utils, strict=True) if v is not None})
    gpus = {u: Gpu(u, "n1", i, "A100", 81920, price_per_hour=2.0) for i, u in enumerate(w.gpu_uuids)}
    found = right_size_gpus([w], {w.id: life}, gpus, T0, AdviceThresholds())
    if suggest is None:
        assert found == []
        return
    (f,) = found
    assert f.rule == "right-size-gpus"
    assert f.kind == "overprovisioned"
    assert f.message.endswith(f"request {suggest}")
    unused = n - suggest
    assert len(f.gpu_uuids) == unused
    assert f.wasted_gpu_hours == pytest.approx(unused * hours)
    assert f.wasted_cost == pytest.approx(unused * hours * 2.0)


def test_thresholds_come_from_the_table() -> None:
    w = job(4)
    life = Lifetime(w.id, 3.0, {"g0": 90, "g1": 8, "g2": 8, "g3": 8})
    assert right_size_gpus([w], {w.id: life}, {}, T0, AdviceThresholds()) == []
    (f,) = right_size_gpus([w], {w.id: life}, {}, T0, AdviceThresholds(used_util_pct=10))
    assert f.message.endswith("request 1")
