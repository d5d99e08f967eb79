"""The soak benchmark at a small size: two simulated days on PostgreSQL with every kind of fault.
No timing is asserted; the figures that must hold are about losing and repeating nothing."""

from __future__ import annotations

import json

import pytest


def test_two_days_with_faults_lose_and_repeat_nothing(
    load_bench, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = load_bench("soak").main(["--days", "2", "--tick", "600", "--json"])
    assert json.loads(capsys.readouterr().out) == out
    assert [f["kind"] for f in out["faults"]] == ["source-down", "db-locked", "disk-full", "clock-step"] * 2
    assert out["failed_ticks"] > 0  # the faults were felt
    assert out["faults_logged"], out["faults"]
    assert out["faults_recovered"], out["faults"]
    assert out["actions"] > 0  # it acted: the checks below are about something
    assert out["duplicate_keys"] == 0
    assert out["duplicate_steps"] == 0
    assert out["audit_ok"], out["audit_problem"]
    assert out["rss_growth_mb"] < 25  # day 2 against day 1, same process
