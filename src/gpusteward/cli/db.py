"""``gpusteward db upgrade|current``: the state database's schema (Alembic migrations)."""

from __future__ import annotations

import typer

from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors
from gpusteward.cli.state import ConfigOpt, JsonOpt, print_json
from gpusteward.runtime.config import load_settings
from gpusteward.store import schema
from gpusteward.store.db import StateStore

db_app = typer.Typer(
    help=(
        "The state database's schema, managed by Alembic migrations on SQLite and PostgreSQL "
        "(store.url). Every command migrates on start; `db upgrade` does it on purpose, e.g. "
        "before rolling out a new version to several replicas."
    ),
    no_args_is_help=True,
)
out = output.console()


def _revision(store: StateStore) -> str | None:
    with store.transaction("read schema revision") as conn:
        return schema.current(conn)


@db_app.command("upgrade")
def upgrade(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Migrate the state database to the newest schema. A database made before migrations
    existed is adopted: missing tables and columns are added and its audit log is chained."""
    with exit_on_errors():
        store = StateStore(load_settings(config).store.url)
        before = _revision(store)
        store.create_schema()
        after = _revision(store)
    if json_out:
        print_json({"url": store.url, "from": before, "to": after})
        return
    what = "already at" if before == after else f"{before or 'unversioned'} →"
    out.print(f"{store.url}: {what} {after}", highlight=False)


@db_app.command("current")
def current(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Show the schema revision of the state database and the newest this version knows."""
    with exit_on_errors():
        store = StateStore(load_settings(config).store.url)
        rev = _revision(store)
    if json_out:
        print_json({"url": store.url, "current": rev, "head": schema.head()})
        return
    state = "up to date" if rev == schema.head() else "run `gpusteward db upgrade`"
    out.print(f"{store.url}: {rev or 'unversioned'} (newest {schema.head()}: {state})", highlight=False)
