"""The consolidation planner, table-driven on synthetic services whose bursts are laid out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from gpusteward.analysis.consolidation import (
    Item,
    PackSettings,
    Usage,
    burst_cooccurrence,
    plan_naive,
    plan_time_aware,
    profiles,
    replay,
    to_grid,
)
from gpusteward.analysis.consolidation.mig import advise_cards, mig_profile_for
from gpusteward.analysis.cost import PriceTable

BINS = 120
GIB = 1024.0


def burst(at: list[tuple[int, int]], high: float = 80.0, low: float = 2.0) -> np.ndarray:
    u = np.full(BINS, low)
    for lo, hi in at:
        u[lo:hi] = high
    return u


def usage(rows: dict[str, tuple[np.ndarray, float]]) -> Usage:
    """Services by id: a utilisation series and a flat memory (GiB)."""
    ids = tuple(rows)
    util = np.stack([rows[i][0] for i in ids])
    mem = np.stack([np.full(BINS, rows[i][1] * GIB) for i in ids])
    return Usage(ids, 0.0, 60.0, util, mem)


def together(plan_groups: list[tuple[str, ...]], a: str, b: str) -> bool:
    return any(a in g and b in g for g in plan_groups)


EVEN = [(k, k + 10) for k in range(0, BINS, 40)]  # busy 0-10, 40-50, 80-90
ODD = [(k + 20, k + 30) for k in range(0, BINS, 40)]  # busy 20-30, 60-70, 100-110


@pytest.mark.parametrize(
    ("case", "a", "b", "share"),
    [
        ("bursts never coincide", EVEN, ODD, True),
        ("bursts coincide", EVEN, EVEN, False),
        ("bursts overlap by half", EVEN, [(lo + 5, hi + 5) for lo, hi in EVEN], False),
    ],
)
def test_time_aware_shares_only_services_whose_bursts_do_not_coincide(
    case: str, a: list[tuple[int, int]], b: list[tuple[int, int]], share: bool
) -> None:
    u = usage({"a": (burst(a), 10.0), "b": (burst(b), 10.0)})
    items = [Item("a"), Item("b")]
    plan = plan_time_aware(u, items, PackSettings())
    assert together([g.members for g in plan.groups], "a", "b") is share, case
    # The naive baseline adds p95s (80 + 80 > 100): it never puts two bursty services together.
    assert not together([g.members for g in plan_naive(u, items, PackSettings()).groups], "a", "b")


@pytest.mark.parametrize("mem_gib", [(30.0, 30.0, 30.0), (50.0, 25.0, 10.0), (71.0, 1.0, 1.0)])
def test_memory_is_never_oversubscribed(mem_gib: tuple[float, float, float]) -> None:
    rng = np.random.default_rng(3)
    rows = {f"s{i}": (rng.uniform(0, 20, BINS), m) for i, m in enumerate(mem_gib)}
    u = usage(rows)
    cfg = PackSettings(gpu_memory_mib=80 * GIB, memory_margin=0.1)
    for plan in (
        plan_time_aware(u, [Item(i) for i in rows], cfg),
        plan_naive(u, [Item(i) for i in rows], cfg),
    ):
        for g in plan.groups:
            assert sum(rows[m][1] for m in g.members) * GIB <= cfg.memory_limit_mib
        assert plan.gpus_after == (2 if sum(mem_gib) > 72 else 1)


def test_a_memory_spike_counts_against_the_usual_level_of_the_others() -> None:
    """Two services at 30 GiB each whose 45 GiB spikes never met in the history: the spike of
    one on top of the other's usual level (75 GiB) would not fit under 72, so they do not share."""
    a, b = np.full(BINS, 30 * GIB), np.full(BINS, 30 * GIB)
    a[10], b[50] = 45 * GIB, 45 * GIB
    u = Usage(("a", "b"), 0.0, 60.0, np.full((2, BINS), 5.0), np.stack([a, b]))
    cfg = PackSettings(gpu_memory_mib=80 * GIB, memory_margin=0.1, memory_quantile=95)
    assert plan_time_aware(u, [Item("a"), Item("b")], cfg).gpus_after == 2
    assert plan_time_aware(u, [Item("a"), Item("b")], PackSettings(gpu_memory_mib=120 * GIB)).gpus_after == 1


@pytest.mark.parametrize(
    ("items", "apart"),
    [
        ([Item("a", pinned=True), Item("b")], True),
        ([Item("a", team="x"), Item("b", team="y")], True),
        ([Item("a", team="x"), Item("b", team="x")], False),
        ([Item("a", anti_affinity=frozenset({"svc"})), Item("b", anti_affinity=frozenset({"svc"}))], True),
        ([Item("a", anti_affinity=frozenset({"p"})), Item("b", anti_affinity=frozenset({"q"}))], False),
        ([Item("a", gpu_model="A100"), Item("b", gpu_model="H100")], True),
    ],
)
def test_constraints_keep_workloads_apart(items: list[Item], apart: bool) -> None:
    u = usage({"a": (burst([]), 5.0), "b": (burst([]), 5.0)})
    plan = plan_time_aware(u, items, PackSettings())
    assert together([g.members for g in plan.groups], "a", "b") is not apart
    if items[0].pinned:
        assert "a" in plan.kept


def test_teams_may_mix_when_allowed() -> None:
    u = usage({"a": (burst([]), 5.0), "b": (burst([]), 5.0)})
    items = [Item("a", team="x"), Item("b", team="y")]
    assert plan_time_aware(u, items, PackSettings(mixing_teams=frozenset({"x", "y"}))).gpus_after == 1
    assert plan_time_aware(u, items, PackSettings(mixing_teams=frozenset({"x"}))).gpus_after == 2


def test_contention_bound_lets_rare_overlaps_through() -> None:
    a = burst([(0, 10)])
    b = burst([(9, 20)])  # one minute of 120 bins overlaps: 0.83 %
    u = usage({"a": (a, 5.0), "b": (b, 5.0)})
    items = [Item("a"), Item("b")]
    assert plan_time_aware(u, items, PackSettings(contention_share_max=0.005)).gpus_after == 2
    plan = plan_time_aware(u, items, PackSettings(contention_share_max=0.01))
    assert plan.gpus_after == 1
    assert plan.groups[0].contention_share == pytest.approx(1 / BINS)


def test_replay_counts_contention_and_memory_on_later_history() -> None:
    plan_u = usage({"a": (burst(EVEN), 40.0), "b": (burst(ODD), 30.0)})
    plan = plan_time_aware(plan_u, [Item("a"), Item("b")], PackSettings())
    assert plan.gpus_after == 1
    # Later the bursts meet for 10 minutes, and memory grows past the card in 5 of them.
    later = usage({"a": (burst(EVEN), 40.0), "b": (burst(EVEN[:1]), 30.0)})
    later.mem_mib[1, :5] = 45 * GIB
    r = replay(plan, later, gpu_memory_mib=80 * GIB)
    assert (r.gpus_before, r.gpus_after) == (2, 1)
    assert r.contention_minutes == 10
    assert r.memory_violation_minutes == 5
    assert r.contention_share == pytest.approx(10 / BINS)


def test_grid_keeps_the_peak_and_bridges_a_missed_bin() -> None:
    t = np.array([0.0, 30.0, 130.0, 400.0])  # bins 0, 0, 2, 6: bin 1 bridged, bins 4-5 a gap
    u = to_grid(
        t,
        [0, 0, 0, 0],
        [5.0, 50.0, 7.0, 9.0],
        [1.0, 2.0, 3.0, 4.0],
        ("a",),
        start=0.0,
        end=480.0,
        fill_bins=1,
    )
    assert u.util[0].tolist()[:4] == [50.0, 50.0, 7.0, 7.0]
    assert np.isnan(u.util[0, 4])
    assert u.util[0, 6] == 9.0


def test_profiles_and_cooccurrence_see_bursts_by_hour() -> None:
    u = usage({"a": (burst(EVEN), 10.0), "b": (burst(ODD), 10.0), "c": (burst(EVEN), 10.0)})
    p = {x.id: x for x in profiles(u)}
    assert p["a"].bursts == 3
    assert p["a"].burst_minutes_p50 == 10.0
    assert p["a"].busy_share == pytest.approx(30 / BINS)
    assert p["a"].util_by_hour[0, 2] == 80.0  # the max of hour 0 (minutes 0-59)
    assert np.isnan(p["a"].util_by_hour[5, 0])  # an hour the history does not cover
    lift = burst_cooccurrence(u)
    assert lift[0, 1] == 0.0  # a and b are never busy together
    assert lift[0, 2] == pytest.approx(BINS / 30)  # a and c always are


@pytest.mark.parametrize(
    ("model", "peak_gib", "p95", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", 8.0, 10.0, "1g.10gb"),
        ("NVIDIA A100-SXM4-80GB", 8.0, 20.0, "2g.20gb"),  # 1/7 of the SMs is too little compute
        ("NVIDIA A100-SXM4-80GB", 30.0, 20.0, "3g.40gb"),
        ("NVIDIA A100-SXM4-80GB", 47.0, 20.0, None),  # over 40 GB with the margin: the whole card
        ("NVIDIA H200", 25.0, 10.0, "1g.35gb"),
        ("Tesla T4", 2.0, 1.0, None),  # no MIG
    ],
)
def test_mig_profile_fits_memory_and_compute(
    model: str, peak_gib: float, p95: float, expected: str | None
) -> None:
    got = mig_profile_for(model, peak_gib * GIB, p95, 0.1)
    assert (got.name if got else None) == expected


def test_card_advice_is_priced_and_cheaper() -> None:
    u = usage({"a": (np.full(BINS, 5.0), 6.0), "b": (np.full(BINS, 90.0), 70.0)})
    items = [Item("a", gpu_model="NVIDIA A100-SXM4-80GB"), Item("b", gpu_model="NVIDIA A100-SXM4-80GB")]
    prices = PriceTable()
    advice = advise_cards(u, items, prices, PackSettings())
    assert [a.workload for a in advice] == ["a"]  # b needs its whole card
    a = advice[0]
    assert a.suggestion_per_hour < a.per_hour == prices.price_for("NVIDIA A100-SXM4-80GB")
    assert a.saving_per_month == pytest.approx((a.per_hour - a.suggestion_per_hour) * 730)
