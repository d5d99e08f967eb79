"""``gpusteward serve`` (the web admin and its JSON API), ``gpusteward token`` (API tokens), and
the web app ``run --web`` serves beside the loop."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpusteward.cli import logsetup, output
from gpusteward.cli.exits import err, exit_on_errors, fail
from gpusteward.domain.ports import SystemClock
from gpusteward.runtime.build import load_rules
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.loop import Steward
from gpusteward.store.access import AccessStore, Role
from gpusteward.store.db import StateStore
from gpusteward.web.app import create_web_app, signing_key
from gpusteward.web.live import Attached, Probe
from gpusteward.web.serve import serve_app
from gpusteward.web.settings import parse_listen
from gpusteward.web.workers import serve_workers

out = output.console()
token_app = typer.Typer(
    help="API tokens for the web admin and its JSON API. Roles: viewer (read), operator (+ approve, "
    "snooze, pause), admin (+ edit rules). Tokens are stored hashed (SHA-256); each is shown once.",
    no_args_is_help=True,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Config file (YAML): the state database and the `web:` section."),
]


def _now() -> datetime:
    return datetime.now(tz=UTC)


def _store(settings: Settings) -> StateStore:
    store = StateStore(settings.store.url)
    store.create_schema()
    return store


def serve(
    config: ConfigOpt = None,
    host: Annotated[
        str | None, typer.Option(help="Address to bind (default: from web.listen, 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: from web.listen, 8080).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log each request.")] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            min=1,
            max=64,
            help="Processes that answer requests (default: web.workers, 1). One per core for a busy "
            "admin: one process runs one request's Python at a time.",
        ),
    ] = None,
) -> None:
    """Serve the web admin: overview charts, findings, workloads, actions and audit (searchable,
    exportable), approvals, rules with a live preview, and pause/resume; the JSON API under
    /api/v1 (OpenAPI at /api/v1/openapi.json).

    It reads the state database the loop writes (run `gpusteward run` beside it, or use
    `gpusteward run --web` for both in one process). Log in with a token from
    `gpusteward token create`. With `--workers 4`, four processes answer on the same port.
    """
    with exit_on_errors():
        settings = load_settings(config)
        logsetup.apply(settings, verbose=verbose)
        default_host, default_port = parse_listen(settings.web.listen)
        store = _store(settings)
        rules = load_rules(settings)  # a bad rule pack exits here (2), not in a crashing worker
        processes = workers or settings.web.workers
        if processes > 1:
            # Made here, before the workers start, so they all read one key (none races to make it).
            signing_key(settings, AccessStore(store))
            app = None
        else:
            app = create_web_app(store, settings, rules, live=Probe(settings, store, SystemClock()))
        bind, at = host or default_host, port if port is not None else default_port
        if not AccessStore(store).tokens():
            err.print("no API tokens yet: make one with `gpusteward token create --role admin --name you`")
        across = f", {processes} processes" if processes > 1 else ""
        err.print(f"gpusteward web admin on http://{bind}:{at} (state {store.url}{across})", highlight=False)
    grace = settings.web.shutdown_grace_seconds
    if app is None:
        store.close()
        serve_workers(config, bind, at, processes, verbose=verbose, grace_s=grace)
    else:
        serve_app(app, bind, at, log_level="info" if verbose else "warning", grace_s=grace)


def web_for_run(settings: Settings, store: StateStore) -> Any:
    """The ``web`` hook of ``run_with_server``: the web admin over the loop's own steward, with
    the loop's /metrics, /healthz and Alertmanager receiver mounted under it."""

    def build(steward: Steward, server_app: Any) -> Any:
        def swap_rules(rules: list[Any]) -> None:
            steward.rules = rules  # the loop reads its rules afresh each tick

        return create_web_app(
            store,
            settings,
            steward.rules,
            live=Attached(steward),
            clock=steward.clock,
            mount=server_app,
            on_rules_saved=swap_rules,
        )

    return build


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option("--name", "-n", help="Who or what uses the token (unique).")],
    role: Annotated[str, typer.Option("--role", "-r", help="viewer, operator or admin.")] = "viewer",
    config: ConfigOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print {name, role, token} as JSON.")] = False,
) -> None:
    """Make an API token and print it once (it is stored only as a hash)."""
    with exit_on_errors():
        if role not in {r.value for r in Role}:
            fail(f"--role must be one of {', '.join(r.value for r in Role)}, not {role!r}")
        rec, token = AccessStore(_store(load_settings(config))).create_token(name, role, at=_now())
    if json_out:
        print(json.dumps({"name": rec.name, "role": rec.role.value, "token": token}))
        return
    out.print(f"token for {rec.name} ({rec.role.value}); it is shown only now:", highlight=False)
    print(token)


@token_app.command("list")
def token_list(
    config: ConfigOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the tokens (names, roles, when last used; never the tokens themselves)."""
    with exit_on_errors():
        tokens = AccessStore(_store(load_settings(config))).tokens()
    if json_out:
        print(json.dumps([t.to_dict() for t in tokens], default=str, indent=2))
        return
    table = Table("name", "role", "created", "last used", "revoked")
    for t in tokens:
        table.add_row(
            t.name,
            t.role.value,
            f"{t.created_at:%Y-%m-%d %H:%M}",
            f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "-",
            f"{t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "",
        )
    out.print(table)


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str, typer.Argument(help="The token's name.")],
    config: ConfigOpt = None,
    by: Annotated[str, typer.Option(help="Who revokes (kept in the audit log).")] = "cli",
) -> None:
    """Revoke a token: its API calls and page sessions stop working at once."""
    with exit_on_errors():
        AccessStore(_store(load_settings(config))).revoke(name, by=by, at=_now())
    out.print(f"revoked {name}", highlight=False)
