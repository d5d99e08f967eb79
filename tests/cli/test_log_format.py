"""`--log-format json` and `log.format: json`: the agent's log lines on stderr are JSON objects."""

from __future__ import annotations

import json
import logging

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.runtime.logs import configure_logging

runner = CliRunner()

CONFIG = """\
source:
  name: sim
  sim: {scenario: small, history_hours: 0}
tick_seconds: 1
"""


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", f"sqlite:///{tmp_path / 'state.db'}")
    f = tmp_path / "gpusteward.yaml"
    f.write_text(CONFIG)
    yield f
    configure_logging("plain", logging.WARNING)  # what the next test expects


def _json_lines(stderr: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_the_global_option_makes_every_log_line_json(config):
    result = runner.invoke(app, ["--log-format", "json", "run", "-c", str(config), "--max-ticks", "1", "-v"])
    assert result.exit_code == 0, result.output
    lines = _json_lines(result.stderr)
    assert lines, result.stderr
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    summary = next(line for line in lines if str(line["message"]).startswith("tick:"))
    assert summary["tick"], summary  # the driver's summary line carries the tick's id
    # No plain log line slipped through beside them (the two status lines are not log lines).
    plain = [line for line in result.stderr.splitlines() if " INFO " in line or " WARNING " in line]
    assert plain == []


def test_the_config_chooses_json_and_the_option_wins_over_it(config):
    config.write_text(CONFIG + "log: {format: json}\n")
    result = runner.invoke(app, ["run", "-c", str(config), "--max-ticks", "1", "-v"])
    assert result.exit_code == 0, result.output
    assert _json_lines(result.stderr)
    result = runner.invoke(app, ["--log-format", "plain", "run", "-c", str(config), "--max-ticks", "1", "-v"])
    assert result.exit_code == 0, result.output
    assert _json_lines(result.stderr) == []
    assert " INFO gpusteward" in result.stderr


def test_an_unknown_format_is_refused(config):
    result = runner.invoke(app, ["--log-format", "xml", "demo"])
    assert result.exit_code == 2
    config.write_text(CONFIG + "log: {format: xml}\n")
    result = runner.invoke(app, ["scan", "-c", str(config)])
    assert result.exit_code == 2
    assert "log.format" in result.stderr
