"""Cross-cluster advice, pure: waits in one cluster against idle GPUs of the same model in
another that the same team may use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpusteward.hub.advice import advise, idle, shared_teams, short_model

T0 = datetime(2026, 11, 2, tzinfo=UTC)
A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"


def _waits(cluster: str, model: str, hours: list[float]) -> list[dict[str, Any]]:
    return [
        {"cluster": cluster, "job_id": f"{cluster}-{i}", "gpu_model": model, "gpus": 2, "waited_s": h * 3600}
        for i, h in enumerate(hours)
    ]


def _idle(cluster: str, model: str, counts: list[int], step_h: float = 1.0) -> list[dict[str, Any]]:
    return [
        {"cluster": cluster, "model": model, "at": T0 + timedelta(hours=k * step_h), "idle_gpus": n}
        for k, n in enumerate(counts)
    ]


def _advise(
    waits: list[dict[str, Any]], samples: list[dict[str, Any]], teams: dict[str, list[str]] | None = None
):  # type: ignore[no-untyped-def]
    until = T0 + timedelta(hours=5)
    return advise(waits, samples, teams or {}, until, min_wait_s=1800, min_idle_hours=1.0, max_gap_s=2 * 3600)


def test_the_figures_of_one_piece_of_advice() -> None:
    waits = _waits("alpha", A100, [1.0, 3.2, 5.0])
    samples = _idle("beta", A100, [20, 22, 0, 24, 22])  # 4 of 5 hourly samples idle
    (a,) = _advise(waits, samples)
    assert (
        a.row()["text"]
        == "cluster alpha: 3 jobs waited 3.2 h p50 for A100; cluster beta had 22 idle A100 for 4.0 h"
    )
    assert (a.waiting.gpus, a.idle.idle_hours) == (6, 4.0)


def test_no_advice_for_another_model_the_same_cluster_or_short_waits() -> None:
    samples = _idle("beta", H100, [8, 8, 8]) + _idle("alpha", A100, [8, 8, 8])
    assert _advise(_waits("alpha", A100, [4.0]), samples) == []
    assert _advise(_waits("beta", H100, [0.2, 0.3]), samples) == []  # p50 18 min < 30 min


def test_a_job_for_any_model_can_take_any_idle_model() -> None:
    (a,) = _advise(_waits("alpha", "", [2.0]), _idle("beta", H100, [4, 4, 4]))
    assert "for any GPU" in a.text
    assert "idle H100" in a.text


def test_teams_limit_which_cluster_is_suggested() -> None:
    waits, samples = _waits("alpha", A100, [2.0]), _idle("beta", A100, [4, 4, 4])
    assert _advise(waits, samples, {"alpha": ["nlp"], "beta": ["vision"]}) == []
    (a,) = _advise(waits, samples, {"alpha": ["nlp", "vision"], "beta": ["vision"]})
    assert a.teams == ("vision",)


def test_a_gap_in_the_samples_counts_no_more_than_max_gap() -> None:
    samples = [
        {"cluster": "b", "model": A100, "at": T0, "idle_gpus": 5},
        {"cluster": "b", "model": A100, "at": T0 + timedelta(hours=8), "idle_gpus": 5},
    ]
    (got,) = idle(samples, T0 + timedelta(hours=9), max_gap_s=3600)
    assert got.idle_hours == pytest.approx(2.0)  # 1 h counted after each sample, not the 8 h gap


@pytest.mark.parametrize(
    ("a", "b", "want"), [([], [], ()), (["x"], [], ("x",)), (["x"], ["y"], None), (["x", "y"], ["y"], ("y",))]
)
def test_shared_teams(a: list[str], b: list[str], want: tuple[str, ...] | None) -> None:
    assert shared_teams(a, b) == want


def test_short_model() -> None:
    assert short_model(A100) == "A100"
    assert short_model(H100) == "H100"
    assert short_model("L4") == "L4"
