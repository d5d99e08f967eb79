"""``gpusteward showback``: a month per team, its rows as CSV and JSON, a FOCUS file, closing a
month, budgets; bad input exits 2; on a real SQLite file."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.domain.records import ShowbackAmounts, ShowbackKey
from gpusteward.store.db import StateStore

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def cfg(tmp_path: Path) -> str:
    f = tmp_path / "c.yaml"
    f.write_text(
        f"store:\n  url: sqlite:///{tmp_path / 'state.db'}\n"
        "cost:\n  currency: EUR\n"
        "showback:\n  billing_account_id: acme-ml\n"
        "budgets:\n  teams:\n    vision: {amount: 100}\n    nlp: {amount: 40, unit: gpu_hours}\n"
    )
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    store.create_schema()

    def k(day: str, team: str, user: str, model: str) -> ShowbackKey:
        return ShowbackKey(day, team, user, model, "on-demand", "EUR")

    store.ledger.add(
        {},
        {},
        showback={
            k("2026-11-02", "vision", "alice", "NVIDIA H100"): ShowbackAmounts(10, 5, 2, 1, 30.0, 4.0, 0.5),
            k("2026-11-03", "vision", "bob", "NVIDIA H100"): ShowbackAmounts(4, 4, 0, 0, 12.0),
            k("2026-11-03", "nlp", "carol", "NVIDIA L4"): ShowbackAmounts(20, 2, 12, 0, 14.0),
            k("2026-12-01", "nlp", "carol", "NVIDIA L4"): ShowbackAmounts(1, 1, 0, 0, 0.7),
        },
    )
    store.close()
    return str(f)


def test_the_month_per_team(cfg: str) -> None:
    code, out = invoke("showback", "--month", "2026-11", "-c", cfg)
    assert code == 0, out
    assert "Showback 2026-11, EUR" in out
    vision = next(line for line in out.splitlines() if "vision" in line)
    assert "14.0" in vision  # held GPU-hours
    assert "42.50" in vision  # 30 + 12 spend + 0.5 power


def test_json_has_the_api_shape_and_csv_the_same_rows(cfg: str) -> None:
    code, out = invoke("showback", "--month", "2026-11", "--format", "json", "-c", cfg)
    assert code == 0, out
    doc = json.loads(out)
    assert (doc["month"], doc["closed"], doc["currency"]) == ("2026-11", False, "EUR")
    assert len(doc["rows"]) == 3
    assert set(doc["rows"][0]) == {
        "day", "team", "user", "gpu_model", "rate", "held_gpu_hours", "used_gpu_hours",
        "wasted_gpu_hours", "reclaimed_gpu_hours", "spend", "power_cost",
    }  # fmt: skip
    code, out = invoke("showback", "--month", "2026-11", "--format", "csv", "--team", "nlp", "-c", cfg)
    assert code == 0, out
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["user"], float(r["spend"])) for r in rows] == [("carol", 14.0)]


def test_focus_file_for_finance(cfg: str, tmp_path: Path) -> None:
    target = tmp_path / "nov.csv"
    code, out = invoke("showback", "-m", "2026-11", "-f", "focus", "-o", str(target), "-c", cfg)
    assert code == 0, out
    rows = list(csv.DictReader(target.open(encoding="utf-8")))
    assert {r["BillingAccountId"] for r in rows} == {"acme-ml"}
    assert {r["BillingCurrency"] for r in rows} == {"EUR"}
    gpu = [r for r in rows if r["PricingUnit"] == "GPU-Hours"]
    assert sorted((r["SubAccountId"], r["ChargePeriodStart"]) for r in gpu) == [
        ("nlp", "2026-11-03T00:00:00Z"),
        ("vision", "2026-11-02T00:00:00Z"),
        ("vision", "2026-11-03T00:00:00Z"),
    ]
    assert sum(float(r["BilledCost"]) for r in rows) == pytest.approx(30 + 12 + 14 + 0.5)


def test_close_freezes_a_month_once_and_refuses_one_not_over(cfg: str) -> None:
    assert invoke("showback", "close", "--month", "2026-11", "-c", cfg) == (0, "2026-11 closed\n")
    assert invoke("showback", "close", "--month", "2026-11", "-c", cfg) == (0, "2026-11 was closed already\n")
    code, out = invoke("showback", "--month", "2026-11", "--json", "-c", cfg)
    assert json.loads(out)["closed"] is True
    code, out = invoke("showback", "close", "--month", "2999-01", "-c", cfg)
    assert code == 2
    assert "has not ended" in out


def test_budgets_and_bad_input(cfg: str) -> None:
    code, out = invoke("showback", "budgets", "--month", "2026-11", "--json", "-c", cfg)
    assert code == 0, out
    by_team = {b["team"]: b for b in json.loads(out)}
    assert by_team["vision"]["spent"] == pytest.approx(42.5)
    assert by_team["nlp"]["spent"] == pytest.approx(20)  # GPU-hours held
    assert by_team["nlp"]["share"] == pytest.approx(0.5)
    code, out = invoke("showback", "--month", "11/2026", "-c", cfg)
    assert code == 2
    assert "YYYY-MM" in out
    code, out = invoke("showback", "--format", "xlsx", "-c", cfg)
    assert code == 2
    assert "choose table, csv, json or focus" in out
