"""``gpusteward hub``: the federation hub, its own process and config (``hub.yaml``). It pulls
each member's /api/v1 with a viewer token, keeps it in PostgreSQL and serves the fleet's pages;
it never acts on any cluster."""

from __future__ import annotations

import json
import signal
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from gpusteward.cli import logsetup, output
from gpusteward.cli.exits import err, exit_on_errors
from gpusteward.hub.app import create_hub_app
from gpusteward.hub.loop import HubPuller, hub_leadership
from gpusteward.hub.pull import PullError, client_for, get_json
from gpusteward.hub.settings import HubSettings, load_hub_settings
from gpusteward.hub.store import HubStore
from gpusteward.store.leadership import AlwaysLeader
from gpusteward.web.serve import serve_app
from gpusteward.web.settings import parse_listen

out = output.console()
hub_app = typer.Typer(
    help="The federation hub: one view over several gpusteward agents (read-only; advice only).",
    no_args_is_help=True,
)
ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="The hub's config file (hub.yaml).")]


def _open(config: Path, verbose: bool) -> tuple[HubSettings, HubStore]:
    settings = load_hub_settings(config)
    logsetup.apply(None, verbose=verbose)
    store = HubStore(settings.store_url, settings.store_schema)
    store.upgrade()
    return settings, store


@hub_app.command("run")
def run(
    config: ConfigOpt,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log each pull.")] = False,
    host: Annotated[str | None, typer.Option(help="Address to bind (default: web.listen).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: web.listen).")] = None,
) -> None:
    """Pull every member on an interval (the leader only, when two replicas run) and serve the
    fleet pages: overview, cluster drill-downs, findings, weekly report and showback."""
    with exit_on_errors():
        settings, store = _open(config, verbose)
        puller = HubPuller(settings, store, hub_leadership(settings))
        default_host, default_port = parse_listen(settings.web.listen)
        app = create_hub_app(settings, store)
        bind, at = host or default_host, port if port is not None else default_port
    stop = threading.Event()
    # uvicorn hands SIGTERM/SIGINT back to the handler it found once it has shut down: this one
    # stops the pull thread, which releases the leader's lock, and the process exits 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=puller.run, args=(stop,), name="gpusteward-hub-pull", daemon=True)
    thread.start()
    err.print(
        f"gpusteward hub on http://{bind}:{at}: {len(settings.members)} member(s), schema "
        f"{settings.store_schema}",
        highlight=False,
    )
    try:
        serve_app(
            app,
            bind,
            at,
            log_level="info" if verbose else "warning",
            grace_s=settings.web.shutdown_grace_seconds,
        )
    finally:
        stop.set()
        thread.join(timeout=settings.timeout_seconds + 5)
        store.close()


@hub_app.command("pull")
def pull(
    config: ConfigOpt,
    json_out: Annotated[bool, typer.Option("--json", help="Print {member: pulled} as JSON.")] = False,
) -> None:
    """Pull every member once now and store it (no leader election: run it where no hub runs)."""
    with exit_on_errors():
        settings, store = _open(config, False)
        puller = HubPuller(settings, store, AlwaysLeader())
        done = {m.name: puller.pull_one(m) for m in settings.members}
        store.close()
    if json_out:
        print(json.dumps(done))
    else:
        for name, ok in done.items():
            out.print(f"{name}: {'pulled' if ok else 'NOT pulled (see the log line above)'}", highlight=False)
    if not all(done.values()):
        raise typer.Exit(1)


@hub_app.command("check")
def check(
    config: ConfigOpt,
    json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check the config, the hub's database (and migrate it) and that each member answers with a
    viewer token; exit 1 when a member does not."""
    with exit_on_errors():
        settings, store = _open(config, False)
        store.close()
    results: dict[str, str] = {}
    for m in settings.members:
        try:
            with client_for(m, settings.timeout_seconds) as client:
                me = get_json(client, "/api/v1/me")
                ov = get_json(client, "/api/v1/overview")
            name = ov.get("cluster") or "(unnamed)"
            results[m.name] = f"ok: token {me.get('name')} ({me.get('role')}), cluster {name}"
        except PullError as e:
            results[m.name] = f"FAILED: {e}"
    if json_out:
        print(
            json.dumps(
                {"at": datetime.now(UTC).isoformat(), "schema": settings.store_schema, "members": results}
            )
        )
    else:
        out.print(f"hub database: ok (schema {settings.store_schema})", highlight=False)
        for name, line in results.items():
            out.print(f"{name}: {line}", highlight=False)
    if any(v.startswith("FAILED") for v in results.values()):
        raise typer.Exit(1)
