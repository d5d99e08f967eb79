"""What the owner/admin control commands share: options, opening the state store, JSON output."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from gpusteward.runtime.config import Settings, load_settings
from gpusteward.store.db import StateStore

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Config file (YAML). Without it: built-in defaults and GPUSTEWARD_* env."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of tables.")]


def who() -> str:
    """The default ``--by``: the user running the command."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "cli"


ByOpt = Annotated[str | None, typer.Option("--by", help="Who does this (default: your user name).")]


def open_store(config: Path | None) -> tuple[Settings, StateStore]:
    """The settings and the state store they name, migrated to the newest schema."""
    settings = load_settings(config)
    store = StateStore(settings.store.url)
    store.create_schema()
    return settings, store


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))
