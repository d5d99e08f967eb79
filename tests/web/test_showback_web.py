"""Showback on the web: /api/v1/showback answers the shape the hub pulls (the same as
``gpusteward showback --format json``), the exports download as CSV, budgets come with their
forecast, bad input is refused; and the Showback page in headless Chromium (Debian's, through
Playwright) against uvicorn on loopback shows the simulated run's ledger: per-team figures equal
to the API's, both stacked charts drawn."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpusteward.cli import app as cli_app
from gpusteward.domain.records import ShowbackAmounts, ShowbackKey
from gpusteward.integrations.sim import SimClock
from gpusteward.runtime.config import load_settings
from gpusteward.store.access import AccessStore
from gpusteward.store.db import StateStore
from gpusteward.web.app import create_web_app

from .conftest import Demo, bearer

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CHROMIUM = os.environ.get("GPUSTEWARD_CHROMIUM", "/usr/bin/chromium")
CONFIG = """\
store: {{url: "sqlite:///{db}"}}
web: {{secret_key: test-signing-key-0123456789abcdef}}
budgets:
  teams:
    vision: {{amount: 60}}
"""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, TestClient, dict[str, str]]]:
    config = tmp_path / "gpusteward.yaml"
    config.write_text(CONFIG.format(db=tmp_path / "state.db"))
    settings = load_settings(str(config))
    store = StateStore(settings.store.url)
    store.create_schema()
    k = ShowbackKey("2026-11-02", "vision", "alice", "NVIDIA H100", "on-demand", "USD")
    store.ledger.add({}, {}, showback={k: ShowbackAmounts(10, 5, 2, 1, 30.0, 4.0, 0.5)})
    k2 = ShowbackKey("2026-12-01", "vision", "alice", "NVIDIA H100", "on-demand", "USD")
    store.ledger.add({}, {}, showback={k2: ShowbackAmounts(6, 6, 0, 0, 18.0)})
    store.ledger.close_month("2026-11", T0)
    access = AccessStore(store)
    tokens = {r: access.create_token(f"{r}-1", r, at=T0)[1] for r in ("viewer", "admin")}
    with TestClient(create_web_app(store, settings, [], clock=SimClock(T0))) as client:
        yield config, client, tokens
    store.close()


def test_the_api_answers_the_hubs_shape_and_the_clis_json(
    world: tuple[Path, TestClient, dict[str, str]],
) -> None:
    config, client, tokens = world
    resp = client.get("/api/v1/showback?month=2026-11", headers=bearer(tokens["viewer"]))
    assert resp.status_code == 200
    doc = resp.json()
    assert doc == {
        "month": "2026-11",
        "closed": True,
        "currency": "USD",
        "rows": [
            {"day": "2026-11-02", "team": "vision", "user": "alice", "gpu_model": "NVIDIA H100",
             "rate": "on-demand", "held_gpu_hours": 10.0, "used_gpu_hours": 5.0, "wasted_gpu_hours": 2.0,
             "reclaimed_gpu_hours": 1.0, "spend": 30.0, "power_cost": 0.5}
        ],
    }  # fmt: skip
    result = CliRunner().invoke(cli_app, ["showback", "-m", "2026-11", "--json", "-c", str(config)])
    assert json.loads(result.stdout) == doc
    # No month: this month (the app's clock), still open.
    now = client.get("/api/v1/showback", headers=bearer(tokens["viewer"])).json()
    assert (now["month"], now["closed"], len(now["rows"])) == ("2026-12", False, 1)


def test_exports_budgets_and_refusals(world: tuple[Path, TestClient, dict[str, str]]) -> None:
    _, client, tokens = world
    viewer = bearer(tokens["viewer"])
    focus = client.get("/api/v1/showback/export?month=2026-11&format=focus", headers=viewer)
    assert focus.status_code == 200
    assert focus.headers["content-type"].startswith("text/csv")
    assert 'filename="showback-2026-11-focus.csv"' in focus.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(focus.text)))
    assert sorted(float(r["BilledCost"]) for r in rows) == [0.5, 30.0]
    plain = client.get("/api/v1/showback/export?month=2026-11&format=csv", headers=viewer)
    assert [r["spend"] for r in csv.DictReader(io.StringIO(plain.text))] == ["30.0"]
    # Budgets: 18 of 60 spent by Dec 1, 09:00 (0.375 days): 48 a day, out on Dec 2.
    [vision] = client.get("/api/v1/showback/budgets", headers=viewer).json()
    assert vision["spent"] == pytest.approx(18)
    assert vision["burn_per_day"] == pytest.approx(48)
    assert vision["runout_day"] == "2026-12-02"
    for bad in ("2026-13", "11-2026", "2026-1", "<script>"):
        assert client.get("/api/v1/showback", params={"month": bad}, headers=viewer).status_code == 422
    assert client.get("/api/v1/showback/export?format=xlsx", headers=viewer).status_code == 422
    assert client.get("/api/v1/showback?month=2026-11").status_code == 401


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not shutil.which(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def test_the_showback_page_in_a_browser(demo: Demo, served: str, browser: Any, artifacts: Path) -> None:
    month = demo.clock.now().strftime("%Y-%m")
    with TestClient(demo.app()) as c:
        api = c.get(f"/api/v1/showback?month={month}", headers=bearer(demo.tokens["viewer"])).json()
    cost: dict[str, float] = defaultdict(float)
    for r in api["rows"]:
        cost[r["team"] or "(unallocated)"] += r["spend"] + r["power_cost"]
    assert cost, "the simulated run should have written showback rows"

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(served + "/login")
    page.fill("#token", demo.tokens["viewer"])
    page.click("#login")
    page.wait_for_url(served + "/")
    page.click("nav >> text=Showback")
    page.wait_for_selector("#teams tbody tr.team-row")
    assert page.url.startswith(served + "/showback")
    shown = {
        row.get_attribute("data-team"): float(row.locator("td.total").inner_text().replace(",", ""))
        for row in page.locator("#teams tbody tr.team-row").all()
    }
    assert shown == {team: round(v, 2) for team, v in cost.items()}
    # Both stacked charts drawn: a bar per team (and per day with cost) with its total.
    assert page.locator("#chart-daily svg rect.bar").count() >= len(cost)
    assert page.locator("#chart-hours svg rect.bar").count() == 2 * len(cost)
    box = page.locator("#chart-daily svg").bounding_box()
    assert box is not None
    assert box["width"] > 200
    page.screenshot(path=str(artifacts / "showback.png"), full_page=True)
    page.click("#previous-month")
    page.wait_for_selector("#teams")
    assert "No showback rows" in page.inner_text("#teams")
    page.close()
