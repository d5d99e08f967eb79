"""Config loading: defaults, the environment over the file, and errors that name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.runtime.config import load_settings

EXAMPLE = Path(__file__).parents[2] / "examples" / "gpusteward.yaml"


def test_defaults_are_dry_run_on_the_simulator():
    s = load_settings(None)
    assert s.mode == "dry-run"
    assert s.dry_run
    assert s.source.name == "sim"
    assert s.tick_seconds == 30


def test_the_documented_example_loads():
    s = load_settings(EXAMPLE)
    assert s.mode == "dry-run"
    assert s.policy.ladder.graceful_stop_after_minutes == 30
    assert s.cost.currency == "USD"


def test_environment_overrides_the_file(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("mode: dry-run\ntick_seconds: 10\nstore:\n  window_minutes: 45\n")
    monkeypatch.setenv("GPUSTEWARD_MODE", "enforce")
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", "sqlite:///x.db")
    s = load_settings(f)
    assert s.mode == "enforce"
    assert s.store.url == "sqlite:///x.db"
    assert s.store.window_minutes == 45  # the file's other keys in that section survive
    assert s.tick_seconds == 10


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("mode: dry-run\ntick_secnds: 10\n", 2, "tick_secnds: unknown key"),
        (
            "mode: dry-run\npolicy:\n  ladder:\n    warn_again_after_minutes: soon\n",
            4,
            "warn_again_after_minutes",
        ),
        ("source:\n  name: sim\n  sim:\n    nodes: 0\n", 4, "source.sim.nodes"),
        ("mode: dry-run\ntick_seconds: 30\n  store: x\n", 3, "invalid YAML"),
        ("- just\n- a list\n", 1, "mapping"),
        ("mode: sometimes\n", 1, "mode"),
    ],
)
def test_invalid_config_names_file_line_and_problem(tmp_path, text, line, words):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_settings(f)
    assert e.value.path == str(f)
    assert e.value.line == line
    assert words in str(e.value)
    assert str(e.value).startswith(f"{f}:{line}: ")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "nope.yaml")


def test_rule_files_are_relative_to_the_config(tmp_path):
    (tmp_path / "conf").mkdir()
    f = tmp_path / "conf" / "c.yaml"
    f.write_text("rules:\n  files: [extra.yaml]\n")
    assert load_settings(f).rules.files == [tmp_path / "conf" / "extra.yaml"]
