"""`gpusteward consolidate plan` and `backtest` on a cut of the shipped serving trace."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app

runner = CliRunner()
TRACE = Path(__file__).resolve().parents[1] / "fixtures/traces/gentd26_pods_dev_half.csv.gz"


@pytest.fixture
def cut(tmp_path: Path) -> Path:
    """The first 10 pods, first 4 hours, with two teams (a generic trace's team column)."""
    with gzip.open(TRACE, "rt", encoding="utf-8") as f:
        header, *rows = f.read().splitlines()
    start = float(rows[0].split(",")[0])
    pods = sorted({r.split(",")[2] for r in rows})[:10]
    team = {p: ("vision" if i % 2 else "search") for i, p in enumerate(pods)}
    kept = [
        f"{r},{team[r.split(',')[2]]}"
        for r in rows
        if r.split(",")[2] in team and float(r.split(",")[0]) - start <= 4 * 3600
    ]
    path = tmp_path / "cut.csv"
    path.write_text("\n".join([header + ",team", *kept]) + "\n", encoding="utf-8")
    return path


def test_plan_json_groups_within_teams_and_writes_a_chart(cut: Path, tmp_path: Path) -> None:
    svg = tmp_path / "plan.svg"
    res = runner.invoke(
        app,
        [
            "consolidate",
            "plan",
            "--trace",
            str(cut),
            "--gpu-model",
            "A100-SXM4-80GB",
            "--json",
            "--svg",
            str(svg),
        ],
    )
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["gpus_before"] == 10
    assert plan["gpus_after"] < 10
    assert plan["by_team"]["search"]["now"] == plan["by_team"]["vision"]["now"] == 5
    assert plan["money_per_month"] > 0
    rows = cut.read_text().splitlines()[1:]
    team = {r.split(",")[2]: r.split(",")[-1] for r in rows}
    for g in plan["groups"]:
        assert len({team[m] for m in g["members"]}) == 1  # one team per GPU by default
        assert g["peak_memory_gib"] <= 72.0
        # Slurm and plain servers get the group as advice (sharding / MPS gres, MPS daemon).
        n = len(g["members"])
        assert f"Count>={n}" in g["advice"]["slurm"]
        assert "--gres=mps:" in g["advice"]["slurm"]
        assert "CUDA_VISIBLE_DEVICES" in g["advice"]["server"]
    assert "GPUs now and after" in svg.read_text()
    text = runner.invoke(app, ["consolidate", "plan", "--trace", str(cut)])
    assert "Slurm: --gres=shard:1" in text.output
    assert "plain servers:" in text.output
    # Allowing the teams to mix never needs more GPUs.
    mixed = runner.invoke(app, ["consolidate", "plan", "--trace", str(cut), "--mix-team", "*", "--json"])
    assert json.loads(mixed.stdout)["gpus_after"] <= plan["gpus_after"]


def test_backtest_table_and_json_agree(cut: Path) -> None:
    args = ["consolidate", "backtest", "--trace", str(cut), "--plan-hours", "2"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["gpus_before"] == 10
    assert got["memory_violations"] == 0
    assert got["gpus_after"] <= got["naive_gpus_after"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0
    assert f"{got['gpus_after']} of 10" in table.stdout
    assert f"{got['naive_gpus_after']} of 10" in table.stdout


def test_backtest_refuses_a_plan_longer_than_the_trace(cut: Path) -> None:
    res = runner.invoke(app, ["consolidate", "backtest", "--trace", str(cut), "--plan-hours", "10"])
    assert res.exit_code == 2
    assert "nothing to replay" in res.output
