"""hub.yaml: PostgreSQL required, unique member names, unknown keys, all as ConfigErrors naming
the file and line; `gpusteward hub check` exits 2 on them."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli.main import app
from gpusteward.domain.errors import ConfigError
from gpusteward.hub.pull import months_to_pull
from gpusteward.hub.settings import load_hub_settings
from gpusteward.integrations.prometheus.localserver import free_port

GOOD = """\
store_url: postgresql+psycopg://hub@db.example/hub
members:
  - name: alpha
    url: https://alpha.example:8080
    token: gst_alpha
    ca_file: certs/alpha.pem
    teams: [nlp, vision]
  - name: beta
    url: http://beta.example:8080
    token: gst_beta
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hub.yaml"
    path.write_text(text)
    return path


def _ca(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "alpha.pem").write_text("-----BEGIN CERTIFICATE-----\n")


def test_a_good_file_loads_with_paths_relative_to_it(tmp_path: Path) -> None:
    _ca(tmp_path)
    s = load_hub_settings(_write(tmp_path, GOOD))
    assert [m.name for m in s.members] == ["alpha", "beta"]
    assert s.members[0].ca_file == tmp_path / "certs" / "alpha.pem"
    assert s.members[0].token.get_secret_value() == "gst_alpha"
    assert "gst_alpha" not in repr(s)  # a secret never shows in logs
    assert s.store_schema == "gpusteward_hub"
    assert s.members[1].pages_url == "http://beta.example:8080"


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        (GOOD.replace("postgresql+psycopg://hub@db.example/hub", "sqlite:///hub.db"), 1, "needs PostgreSQL"),
        (GOOD.replace("name: beta", "name: alpha"), None, "given twice"),
        (GOOD.replace("    teams: [nlp, vision]", "    teamz: [nlp]"), 7, "unknown key"),
        (GOOD.replace("https://alpha.example:8080", "alpha.example"), 4, "members.0.url"),
        (GOOD + "interval_seconds: 0\n", 11, "interval_seconds"),
        (GOOD.replace("certs/alpha.pem", "certs/missing.pem"), 6, "members.0.ca_file: no such file"),
    ],
)
def test_bad_files_name_the_line(tmp_path: Path, text: str, line: int | None, needle: str) -> None:
    _ca(tmp_path)
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_hub_settings(path)
    assert needle in str(e.value)
    assert str(path) in str(e.value)
    if line is not None:
        assert f":{line}" in str(e.value)


def test_hub_check_exits_2_on_a_bad_config(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("postgresql+psycopg://hub@db.example/hub", "sqlite:///x.db"))
    got = CliRunner().invoke(app, ["hub", "check", "-c", str(path)])
    assert got.exit_code == 2
    assert "needs PostgreSQL" in got.output


def test_the_shipped_example_loads() -> None:
    example = Path(__file__).parents[2] / "examples" / "hub.yaml"
    s = load_hub_settings(example)
    assert [m.name for m in s.members] == ["alpha", "beta"]
    assert s.members[1].pages_url == "https://gpusteward.beta.example"


def test_the_error_names_file_line_and_key(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("    teams: [nlp, vision]", "    teamz: [nlp]"))
    with pytest.raises(ConfigError) as e:
        load_hub_settings(path)
    assert str(e.value) == f"{path}:7: members.0.teamz: unknown key (check the spelling)"


def test_hub_check_says_when_the_hubs_database_does_not_answer(tmp_path: Path) -> None:
    _ca(tmp_path)
    dead = f"postgresql+psycopg://hub@127.0.0.1:{free_port()}/hub?connect_timeout=5"
    path = _write(tmp_path, GOOD.replace("postgresql+psycopg://hub@db.example/hub", dead))
    got = CliRunner().invoke(app, ["hub", "check", "-c", str(path)])
    assert got.exit_code == 1
    assert "hub store: migrate failed" in got.output


@pytest.mark.parametrize(
    ("today", "months"),
    [(date(2026, 1, 15), ["2025-12", "2026-01"]), (date(2026, 11, 30), ["2026-10", "2026-11"])],
)
def test_showback_months_pulled(today: date, months: list[str]) -> None:
    assert months_to_pull(today) == months
