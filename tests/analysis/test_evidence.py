"""The long-window evidence (``busy_share``, ``zero_for``, ``watched_for``) on hand-made windows,
and the default rules' per-class behaviour through the engine.

Windows are one sample a minute, the last one at ``NOW``; ``None`` is a lost scrape.
Expected values are counted by hand from the series in each row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpusteward.analysis.aggregates import EvalContext
from gpusteward.analysis.engine import AnalysisInput, analyse
from gpusteward.analysis.expr import compile_expr
from gpusteward.analysis.rules import compile_rules, default_rule_pack
from gpusteward.domain.models import Gpu, Owner, Sample, Workload, WorkloadKind
from gpusteward.store.window import WindowStore

NOW = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
Series = Sequence[float | None]


def store_of(
    series: dict[str, Series], *, window_min: int = 60, holders: dict[str, Sequence[str]] | None = None
) -> WindowStore:
    """One sample a minute per GPU, each series ending at NOW; ``holders`` per minute (default "w")."""
    store = WindowStore(window_s=window_min * 60, interval_s=60)
    n = max(len(s) for s in series.values())
    for k in range(n):
        t = NOW - timedelta(minutes=n - 1 - k)
        samples, held = [], {}
        for uuid, s in series.items():
            i = k - (n - len(s))  # shorter series start later
            if i < 0:
                continue
            held[uuid] = holders[uuid][i] if holders and uuid in holders else "w"
            if s[i] is not None:
                samples.append(Sample(uuid, t, gpu_util_pct=s[i], mem_used_mib=30000.0))
        store.ingest(t, samples, held)
    return store


def value(expr: str, series: Series, **kw: object) -> float:
    store = store_of({"g": series}, **kw)  # type: ignore[arg-type]
    view = store.view(NOW)
    idx = view.indices_of(["g"])
    ctx = EvalContext(view, idx, np.zeros(1, np.intp), np.ones(1), {})
    return float(compile_expr(expr, kind="num").evaluate_num(ctx)[0])


@pytest.mark.parametrize(
    ("case", "series", "expected"),
    [
        ("idle throughout", [0.0] * 20, 0.0),
        ("one busy sample in the last ten", [50.0] * 10 + [7.0] + [0.0] * 9, 0.1),
        ("busy before the window does not count", [90.0] * 10 + [0.0] * 10, 0.0),
        ("busy throughout", [3.0] * 20, 1.0),
        ("under the 1 % bar is not busy", [0.5] * 20, 0.0),
        ("exactly 1 % is busy", [0.0] * 18 + [1.0, 1.0], 0.2),
        (
            "lost scrapes count as neither",
            [0.0] * 10 + [2.0, None, None, None, None, 0.0, 0.0, 0.0, 0.0, 0.0],
            1 / 6,
        ),
        ("nothing present in the window: unknown", [0.0] * 10 + [None] * 10, math.nan),
    ],
)
def test_busy_share(case: str, series: Series, expected: float) -> None:
    got = value("busy_share(gpu_util_pct, 1, 10m)", series)
    assert got == pytest.approx(expected, nan_ok=True), case


@pytest.mark.parametrize(
    ("case", "series", "expected"),
    [
        ("busy, then 30 min at zero", [50.0] * 5 + [0.0] * 30, 30.0),
        ("a lost scrape does not end the run", [50.0] * 5 + [0.0] * 10 + [None] * 5 + [0.0] * 15, 30.0),
        ("0.4 % now: not zero", [0.0] * 30 + [0.4], 0.0),
        ("0.5 % for 10 min ends a zero run", [0.0] * 10 + [0.5] * 10, 0.0),
        ("zero since the first sample (20 samples: 20 min)", [0.0] * 20, 20.0),
        ("one stray request 12 min ago", [0.0] * 40 + [3.0] + [0.0] * 12, 12.0),
        ("no data: unknown", [None] * 10, math.nan),
    ],
)
def test_zero_for(case: str, series: Series, expected: float) -> None:
    assert value("zero_for(gpu_util_pct)", series) == pytest.approx(expected, nan_ok=True), case


def test_zero_for_is_stricter_than_below_for() -> None:
    series = [0.0] * 10 + [0.5] * 10
    assert value("zero_for(gpu_util_pct)", series) == 0.0
    assert value("below_for(gpu_util_pct, 1)", series) == 20.0


@pytest.mark.parametrize(
    ("case", "series", "holders", "expected"),
    [
        ("20 samples", [1.0] * 20, None, 20.0),
        ("first samples lost", [None] * 5 + [1.0] * 15, None, 15.0),
        ("lost in the middle: still watched", [1.0] * 5 + [None] * 5 + [1.0] * 5, None, 15.0),
        ("a new holder starts from nothing", [1.0] * 40, ["a"] * 30 + ["b"] * 10, 10.0),
        ("capped by the window (60 min)", [1.0] * 90, None, 60.0),
        ("no data: unknown", [None] * 10, None, math.nan),
    ],
)
def test_watched_for(case: str, series: Series, holders: list[str] | None, expected: float) -> None:
    got = value("watched_for(gpu_util_pct)", series, holders={"g": holders} if holders else None)
    assert got == pytest.approx(expected, nan_ok=True), case


# -- the default rules, per class, through the engine ---------------------------------------

RULES = compile_rules(default_rule_pack(), window_s=4 * 3600)


def workload(cls_ref: dict[str, str], name: str) -> Workload:
    return Workload(
        "w",
        WorkloadKind.POD if "namespace" in cls_ref else WorkloadKind.JOB,
        name,
        Owner("alice", "ml"),
        1,
        ("g",),
        NOW - timedelta(hours=10),
        ref=cls_ref,
    )


SERVICE = {"kind": "Deployment", "namespace": "ml"}
NOTEBOOK = {"kind": "Notebook", "namespace": "ml"}
TRAINING = {"job_id": "42", "partition": "gpu"}


def bursts(hours: float, every_min: int, burst_min: int, util: float) -> list[float | None]:
    """A service's day: ``burst_min`` at ``util`` every ``every_min``, zero between."""
    return [util if k % every_min < burst_min else 0.0 for k in range(int(hours * 60))]


def drizzle(minutes: int, every_min: int) -> list[float | None]:
    """Evening quiet: a stray request (one busy sample) every ``every_min`` minutes."""
    return [4.0 if k % every_min == every_min - 1 else 0.0 for k in range(minutes)]


def reclaim_rules(series: Series, ref: dict[str, str], mem: float = 30000.0, cpu: float = 30.0) -> set[str]:
    store = WindowStore(window_s=4 * 3600, interval_s=60)
    n = len(series)
    for k, u in enumerate(series):
        t = NOW - timedelta(minutes=n - 1 - k)
        s = [] if u is None else [Sample("g", t, gpu_util_pct=u, mem_used_mib=mem, proc_cpu_pct=cpu)]
        store.ingest(t, s, {"g": "w"})
    gpu = Gpu("g", "n1", 0, "A100", 81920.0, price_per_hour=2.0)
    inp = AnalysisInput(
        view=store.view(NOW),
        gpus={"g": gpu},
        workloads=[workload(ref, "jupyter" if ref is NOTEBOOK else "x")],
        now=NOW,
    )
    return {f.rule for f in analyse(RULES, inp).findings if f.action.value == "reclaim"}


@pytest.mark.parametrize(
    ("case", "series", "ref", "mem", "cpu", "expected"),
    [
        # Services: a gap between bursts is normal; hours of near-silence are not.
        (
            "service between bursts: 50 min since the last",
            bursts(4, 60, 10, 40.0)[:-50] + [0.0] * 50,
            SERVICE,
            30000.0,
            30.0,
            set(),
        ),
        (
            "service with hourly bursts, 1 in 20 lost",
            [None if k % 20 == 0 else u for k, u in enumerate(bursts(5, 60, 10, 40.0))],
            SERVICE,
            30000.0,
            30.0,
            set(),
        ),
        (
            "service gone quiet: a stray request every 40 min for 4 h",
            bursts(2, 60, 10, 40.0) + drizzle(240, 40),
            SERVICE,
            30000.0,
            30.0,
            {"quiet-service"},
        ),
        (
            "service at exactly zero for 95 min (watched 2 h only)",
            bursts(0.5, 30, 10, 40.0) + [0.0] * 95,
            SERVICE,
            30000.0,
            30.0,
            {"quiet-service"},
        ),
        ("service quiet 3 h, watched 3 h: too soon to tell", drizzle(180, 30), SERVICE, 30000.0, 30.0, set()),
        # Training: a crash that keeps its memory is reclaimed (batch rules, not the service rule).
        (
            "crashed training holding 38 GiB for 40 min",
            [90.0] * 60 + [0.0] * 40,
            TRAINING,
            38000.0,
            0.5,
            {"zombie", "idle-allocation", "stalled"},
        ),
        ("training with a 4-min checkpoint now", [90.0] * 96 + [0.0] * 4, TRAINING, 38000.0, 100.0, set()),
        # Notebooks: overnight is culled, lunch is not.
        (
            "notebook idle overnight (8 h)",
            [40.0] * 60 + [1.0] * 480,
            NOTEBOOK,
            8000.0,
            1.0,
            {"idle-notebook"},
        ),
        ("notebook idle 40 min over lunch", [40.0] * 120 + [1.0] * 40, NOTEBOOK, 8000.0, 5.0, set()),
        (
            "notebook at exactly 0 % for 40 min, kernel CPU flat: a person at lunch",
            [40.0] * 120 + [0.0] * 40,
            NOTEBOOK,
            8000.0,
            0.5,
            set(),
        ),
    ],
)
def test_default_rules_by_class(
    case: str, series: Series, ref: dict[str, str], mem: float, cpu: float, expected: set[str]
) -> None:
    assert reclaim_rules(series, ref, mem, cpu) == expected, case


@pytest.mark.parametrize(
    ("case", "requests", "expected"),
    [
        ("no request metric: the GPU's own evidence decides", None, {"quiet-service"}),
        ("the counter stands still: nobody asks", 0.0, {"quiet-service"}),
        ("requests still answered from a warm cache", 0.2, set()),
    ],
)
def test_a_service_that_still_answers_requests_is_not_quiet(
    case: str, requests: float | None, expected: set[str]
) -> None:
    # Four hours at exactly 0 % on the GPU: quiet by every GPU measure.
    store = WindowStore(window_s=4 * 3600, interval_s=60)
    for k in range(240):
        t = NOW - timedelta(minutes=239 - k)
        sample = Sample("g", t, gpu_util_pct=0.0, mem_used_mib=30000.0, requests_per_s=requests)
        store.ingest(t, [sample], {"g": "w"})
    inp = AnalysisInput(
        view=store.view(NOW),
        gpus={"g": Gpu("g", "n1", 0, "A100", 81920.0, price_per_hour=2.0)},
        workloads=[workload(SERVICE, "llm")],
        now=NOW,
    )
    found = {f.rule for f in analyse(RULES, inp).findings if f.action.value == "reclaim"}
    assert found == expected, case
