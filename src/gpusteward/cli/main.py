"""The ``gpusteward`` commands. The CLI package is the only place that prints."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpusteward import __version__
from gpusteward.analysis.rules import compile_rules, load_rule_pack
from gpusteward.cli import logsetup, output, views
from gpusteward.cli.approvals import approvals_app
from gpusteward.cli.audit import audit_app
from gpusteward.cli.backtest import backtest as backtest_command
from gpusteward.cli.consolidate import consolidate_app
from gpusteward.cli.db import db_app
from gpusteward.cli.exits import err, exit_on_errors, fail
from gpusteward.cli.exporter import exporter as exporter_command
from gpusteward.cli.forecast import advise_command, forecast_command
from gpusteward.cli.hub import hub_app
from gpusteward.cli.init import init as init_command
from gpusteward.cli.kubernetes import restore as restore_command
from gpusteward.cli.logsetup import LogFormatOpt
from gpusteward.cli.parked import parked as parked_command
from gpusteward.cli.report import report as report_command
from gpusteward.cli.rollout import rollout_app
from gpusteward.cli.showback import showback_app
from gpusteward.cli.slurm import slurm_app
from gpusteward.cli.snooze import snooze as snooze_command
from gpusteward.cli.snooze import unsnooze as unsnooze_command
from gpusteward.cli.web import serve as serve_command
from gpusteward.cli.web import token_app, web_for_run
from gpusteward.runtime.build import build_steward, load_rules
from gpusteward.runtime.config import Settings, load_settings
from gpusteward.runtime.driver import StopFlag
from gpusteward.scenarios import demo as demo_mod
from gpusteward.store.db import StateStore
from gpusteward.store.probe import check_writable
from gpusteward.store.writer_lock import hold_writer_lock
from gpusteward.web.serve import run_with_server

app = typer.Typer(
    help=(
        "gpusteward watches every GPU, finds the ones that burn money without doing work, "
        "and gives them back safely: notify → checkpoint-then-stop → force, dry-run by default.\n\n"
        "Start with `gpusteward demo` (a simulated 64-GPU cluster for 24 h), then "
        "`gpusteward scan` to see what it would do on your source."
    ),
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell (docs: CLI).
    add_completion=True,
    pretty_exceptions_enable=False,
    # Markdown: docstrings wrap to the terminal (a single line break is not a new line).
    rich_markup_mode="markdown",
)
rules_app = typer.Typer(help="Work with rule packs (YAML files of waste rules).", no_args_is_help=True)
# Help panels, in the order `gpusteward --help` shows them (commands are registered at the end).
START = "Start here"
LOOK = "Look and explain"
CONTROL = "Control what it does"
SETUP = "Set up"

out = output.console()

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Config file (YAML). Without it: built-in defaults and GPUSTEWARD_* env."
    ),
]
SourceOpt = Annotated[
    str | None, typer.Option("--source", "-s", help="Override the configured source (e.g. sim).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object for scripts instead of tables.")]


def _print_version(value: bool) -> None:
    if value:
        print(f"gpusteward {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    log_format: Annotated[
        LogFormatOpt | None,
        typer.Option(
            "--log-format",
            help="plain or json (one object per line, for Loki/ELK). Default: the config's log.format, "
            "else plain.",
        ),
    ] = None,
) -> None:
    """Options for every command."""
    ctx.call_on_close(logsetup.choose(log_format))


def _settings(config: Path | None, **overrides: Any) -> Settings:
    return load_settings(config, **overrides)


def _store(settings: Settings) -> StateStore:
    store = StateStore(settings.store.url)
    store.create_schema()
    return store


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


@app.command(rich_help_panel=START)
def demo(
    hours: Annotated[float, typer.Option(help="Simulated hours to run.")] = 24.0,
    nodes: Annotated[int, typer.Option(help="Simulated nodes.")] = 8,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    seed: Annotated[int, typer.Option(help="Simulator seed: same seed, same day.")] = 42,
    tick_seconds: Annotated[float, typer.Option(help="Simulated seconds between ticks.")] = 60.0,
    cloud_nodes: Annotated[
        bool,
        typer.Option(
            "--cloud-nodes/--no-cloud-nodes",
            help="Nodes on simulated cloud instances: some spot, interrupted; idle ones stoppable.",
        ),
    ] = True,
    json_out: JsonOpt = False,
) -> None:
    """Run the whole loop on the built-in simulated cluster, in enforce mode against the simulator.

    A simulated day finishes in seconds. It reports what was found, every action by level,
    the GPU-hours and money reclaimed, and `false actions` (stops of workloads the simulator
    knows were productive, which must be 0).
    """
    with exit_on_errors():
        total = max(1, int(hours * 3600 / tick_seconds))
        with _progress(disable=json_out) as advance:
            result = demo_mod.run_demo(
                hours=hours,
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                seed=seed,
                tick_seconds=tick_seconds,
                on_tick=lambda done: advance(done, total),
                cloud_nodes=cloud_nodes,
            )
    if json_out:
        _print_json(result.summary())
        return
    views.print_demo(out, result)


@contextmanager
def _progress(*, disable: bool) -> Iterator[Callable[[int, int], None]]:
    progress = Progress(
        TextColumn("simulating"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} ticks"),
        TimeElapsedColumn(),
        console=err,
        disable=disable,
        transient=True,
    )
    task = progress.add_task("sim", total=None)

    def advance(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    with progress:
        yield advance


@app.command(rich_help_panel=START)
def run(
    config: ConfigOpt = None,
    source: SourceOpt = None,
    enforce: Annotated[bool, typer.Option("--enforce", help="Act for real (default: dry-run).")] = False,
    max_ticks: Annotated[
        int | None, typer.Option(help="Stop after this many ticks (default: run until SIGTERM).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every tick.")] = False,
    listen: Annotated[
        str | None,
        typer.Option(
            help="Serve /metrics and the Alertmanager receiver (POST /api/v1/alertmanager) on HOST:PORT "
            "(default: server.listen; none when unset)."
        ),
    ] = None,
    web: Annotated[
        bool,
        typer.Option(
            "--web",
            help="Also serve the web admin and its JSON API beside the loop, on --listen, server.listen "
            "or web.listen (log in with a token from `gpusteward token create`).",
        ),
    ] = False,
) -> None:
    """Run the loop continuously: a tick every `tick_seconds` (default 30 s).

    Dry-run unless --enforce is given or the config says `mode: enforce`. SIGTERM or Ctrl-C
    finishes the current tick and exits. `gpusteward pause` stops all actions from the next tick.
    """
    with exit_on_errors():
        settings = _settings(config, **({"mode": "enforce"} if enforce else {}))
        logsetup.apply(settings, verbose=verbose)
        # Held until this process ends: a second `run` on the same SQLite file stops here.
        writer = hold_writer_lock(settings.store.url)
        steward, _ = build_steward(settings, source_name=source)
        store = steward.store
        assert isinstance(store, StateStore)  # built from store.url
        check_writable(store)  # a read-only database: one line now, not a traceback a tick
        stop = StopFlag()
        signal.signal(signal.SIGTERM, stop.set)
        signal.signal(signal.SIGINT, stop.set)
        err.print(
            f"gpusteward running: source={steward.source.name} mode={settings.mode} "
            f"tick={settings.tick_seconds:g}s state={settings.store.url}",
            highlight=False,
        )
        ticks = run_with_server(
            steward,
            settings,
            stop,
            listen=listen,
            max_ticks=max_ticks,
            web=web_for_run(settings, store) if web else None,
        )
        err.print(f"stopped after {ticks} tick(s)")
        if writer is not None:
            writer.release()


@app.command(rich_help_panel=START)
def scan(config: ConfigOpt = None, source: SourceOpt = None, json_out: JsonOpt = False) -> None:
    """Run one tick and show the findings and what would be done (always dry-run)."""
    with exit_on_errors():
        settings = _settings(config, mode="dry-run")
        logsetup.apply(settings)
        steward, _ = build_steward(settings, source_name=source)
        report = steward.tick()
    if json_out:
        _print_json(views.report_json(report))
        return
    views.print_scan(out, report, steward.gpus)


@app.command(rich_help_panel=LOOK)
def explain(
    workload: Annotated[str, typer.Argument(help="Workload id, or a unique part of it.")],
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show the evidence and the decision history of one workload."""
    with exit_on_errors():
        store = _store(_settings(config))
        matches = [w.id for w in store.find_workloads(workload)]
        exact = [m for m in matches if m == workload]
        if exact:
            matches = exact
        if not matches:
            fail(f"no workload matches {workload!r} in {store.url}", 1)
        if len(matches) > 1:
            fail(f"{workload!r} matches {len(matches)} workloads: {', '.join(matches[:10])}", 1)
        history = views.workload_history(store, matches[0])
    if json_out:
        _print_json(history)
        return
    views.print_explain(out, history)


@app.command(rich_help_panel=CONTROL)
def pause(
    config: ConfigOpt = None,
    reason: Annotated[str, typer.Option(help="Why (kept in the audit log).")] = "",
    by: Annotated[str, typer.Option(help="Who pauses.")] = "cli",
) -> None:
    """Flip the global kill switch: no action is taken from the next tick on."""
    _set_paused(config, True, reason, by)


@app.command(rich_help_panel=CONTROL)
def resume(
    config: ConfigOpt = None,
    reason: Annotated[str, typer.Option(help="Why (kept in the audit log).")] = "",
    by: Annotated[str, typer.Option(help="Who resumes.")] = "cli",
) -> None:
    """Release the kill switch: ladders continue from where they were."""
    _set_paused(config, False, reason, by)


def _set_paused(config: Path | None, paused: bool, reason: str, by: str) -> None:
    with exit_on_errors():
        settings = _settings(config)
        store = _store(settings)
        store.set_paused(paused, by=by, reason=reason, at=views.utcnow())
    out.print("paused: no actions until `gpusteward resume`" if paused else "resumed", highlight=False)


@rules_app.command("check")
def rules_check(file: Annotated[Path, typer.Argument(help="Rule pack (YAML) to validate.")]) -> None:
    """Validate and compile a rule pack; exit 2 naming the file, line and problem when it is wrong."""
    with exit_on_errors():
        pack = load_rule_pack(file)
        compiled = compile_rules(pack)
    out.print(f"{file}: {len(compiled)} rule(s) OK: {', '.join(r.name for r in pack.rules)}", highlight=False)


@rules_app.command("show")
def rules_show(config: ConfigOpt = None) -> None:
    """List the rules in force (default pack plus configured files)."""
    with exit_on_errors():
        rules = load_rules(_settings(config))
    views.print_rules(out, rules)


def main() -> None:
    app()


# Registered after the commands defined above, so each panel lists its commands in this order.
app.command("serve", rich_help_panel=START)(serve_command)
app.add_typer(audit_app, name="audit", rich_help_panel=LOOK)
app.command("report", rich_help_panel=LOOK)(report_command)
app.command("advise", rich_help_panel=LOOK)(advise_command)
app.command("forecast", rich_help_panel=LOOK)(forecast_command)
app.command("backtest", rich_help_panel=LOOK)(backtest_command)
app.command("parked", rich_help_panel=LOOK)(parked_command)
app.add_typer(consolidate_app, name="consolidate", rich_help_panel=LOOK)
app.add_typer(showback_app, name="showback", rich_help_panel=LOOK)
app.add_typer(approvals_app, name="approvals", rich_help_panel=CONTROL)
app.add_typer(rollout_app, name="rollout", rich_help_panel=CONTROL)
app.command("snooze", rich_help_panel=CONTROL)(snooze_command)
app.command("unsnooze", rich_help_panel=CONTROL)(unsnooze_command)
app.command("restore", rich_help_panel=CONTROL)(restore_command)
app.command("init", rich_help_panel=SETUP)(init_command)
app.add_typer(rules_app, name="rules", rich_help_panel=SETUP)
app.add_typer(db_app, name="db", rich_help_panel=SETUP)
app.add_typer(token_app, name="token", rich_help_panel=SETUP)
app.add_typer(hub_app, name="hub", rich_help_panel=SETUP)
app.command("exporter", rich_help_panel=SETUP)(exporter_command)
app.add_typer(slurm_app, name="slurm", rich_help_panel=SETUP)
