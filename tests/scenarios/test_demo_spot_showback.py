"""End to end through ``build_steward``: the demo's nodes run on simulated cloud instances (on-demand,
reserved and spot); the ledger recorder reads them and writes each GPU's showback at its node's
rate, and the report's Spot savings section adds them up against on-demand."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import pytest

from gpusteward.report import write_reports
from gpusteward.runtime.config import Settings
from gpusteward.scenarios.demo import run_demo
from gpusteward.store.db import StateStore


def test_the_demo_prices_showback_at_each_nodes_instance_rate(tmp_path: Path) -> None:
    result = run_demo(hours=3, state_dir=tmp_path)
    lifecycles = result.cloud["instances"]
    assert isinstance(lifecycles, dict)
    store = StateStore(f"sqlite:///{tmp_path / 'demo.db'}")
    try:
        rows = store.ledger.showback(date(2026, 1, 1), date(2026, 2, 1))
        prices = Settings().cost
        held: dict[str, float] = {}
        for r in rows:
            held[r.key.rate] = held.get(r.key.rate, 0.0) + r.amounts.held_gpu_hours
            assert r.amounts.spend == pytest.approx(
                r.amounts.held_gpu_hours * prices.price(r.key.gpu_model, r.key.rate)  # type: ignore[arg-type]
            )
        # Every lifecycle the simulated cloud drew holds GPU-hours under its own rate.
        assert {rate for rate, hours in held.items() if hours > 0} == {k for k, n in lifecycles.items() if n}
        out = tmp_path / "r"
        write_reports(store, out, period="day", end=None, currency="USD", rate="on-demand", prices=prices)
        page = (out / "index.html").read_text()
        total = re.search(r'id="spot-total" data-who="all" data-spot-gpu-hours="([^"]*)"', page)
        assert total is not None
        assert float(total.group(1)) == pytest.approx(held["spot"], abs=0.01)
    finally:
        store.close()
