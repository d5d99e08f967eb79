"""Rules that could never judge, or that judge everything, are refused when they are loaded:
a look-back longer than the window store keeps (the rule never trips) and numbers that are not
finite (``util < 1e999`` flags every busy GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.analysis.expr import compile_expr
from gpusteward.cli import app
from gpusteward.domain.errors import RuleError
from gpusteward.runtime.build import load_rules
from gpusteward.runtime.config import load_settings

LONG_RULE = """rules:
  - name: idle-two-hours
    kind: idle
    description: idle for two hours
    action: reclaim
    when: mean(gpu_util_pct, 2h) < 5
    message: idle
"""


@pytest.mark.parametrize("literal", ["1e999", "-1e999", "9" * 400, "1e308 * 10", "-1e308 - 1e308"])
def test_numbers_that_are_not_finite_are_refused(literal: str) -> None:
    with pytest.raises(RuleError, match="numbers must be finite"):
        compile_expr(f"mean(gpu_util_pct, 30m) < {literal}")


def test_large_finite_numbers_still_compile() -> None:
    assert compile_expr("mean(gpu_util_pct, 30m) < 1e308").window_s == 1800


def test_a_rule_looking_back_further_than_the_window_is_refused_by_name(tmp_path: Path) -> None:
    rules = tmp_path / "long.yaml"
    rules.write_text(LONG_RULE)
    short = load_settings(
        None, rules={"use_default_pack": False, "files": [rules]}, store={"window_minutes": 60}
    )
    with pytest.raises(
        RuleError, match=r"rule 'idle-two-hours' looks back 2h but the window store keeps only 1h"
    ):
        load_rules(short)
    enough = load_settings(
        None, rules={"use_default_pack": False, "files": [rules]}, store={"window_minutes": 120}
    )
    assert [r.name for r in load_rules(enough)] == ["idle-two-hours"]


def test_the_default_pack_fits_the_default_and_documented_windows() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "gpusteward.yaml"
    assert load_rules(load_settings(None))
    assert load_rules(load_settings(example))


def test_scan_with_too_short_a_window_exits_2_naming_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setenv("COLUMNS", "300")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("store:\n  window_minutes: 60\n")
    result = CliRunner().invoke(app, ["scan", "-c", str(cfg)])
    assert result.exit_code == 2
    assert "rule 'quiet-service' looks back 210m but the window store keeps only 1h" in result.output
