"""The reference pages are generated from the code: every config key, every command, the API."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import typer
from pydantic import BaseModel

from gpusteward.cli import app
from gpusteward.runtime.config import Settings

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
_spec = importlib.util.spec_from_file_location("docgen", SCRIPTS / "docgen.py")
assert _spec is not None
assert _spec.loader is not None
docgen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docgen)


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += _leaf_keys(ann, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def test_every_config_key_is_documented_with_its_type_default_bounds_and_description():
    page = docgen.config_reference()
    documented = set(re.findall(r"^\| `([^`]+)` \|", page, re.MULTILINE))
    keys = _leaf_keys(Settings)
    assert len(keys) > 100
    assert set(keys) <= documented
    row = next(line for line in page.splitlines() if line.startswith("| `tick_seconds` |"))
    assert row == "| `tick_seconds` | float | `30` | ≥ 1, ≤ 86400 | Seconds between two ticks of the loop. |"
    assert "| `log.format` | `plain` \\| `json` | `'plain'` |" in page


def test_every_command_is_documented_with_its_options():
    page = docgen.cli_reference()
    root = typer.main.get_command(app)
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        assert f"### `gpusteward {name}`" in page
        for sub in getattr(cmd, "commands", {}):
            assert f"#### `gpusteward {name} {sub}`" in page
    assert "`--log-format`" in page
    assert "`--install-completion`" in page


def test_the_api_page_lists_the_openapi_paths():
    page = docgen.api_reference()
    assert "### `GET /api/v1/actions`" in page
    assert "| `before` | query | integer or null |" in page
