"""``gpusteward rollout status|promote|appeal|false-kills``: the staged roll-out by scope and its
live safety figures."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.cli.state import ByOpt, ConfigOpt, JsonOpt, open_store, print_json, who
from gpusteward.cli.views import utcnow
from gpusteward.domain.errors import ControlError
from gpusteward.policy.rollout import to_json
from gpusteward.runtime.rollout import RolloutBook, ScopeStatus

rollout_app = typer.Typer(
    help=(
        "Staged roll-out by scope (policy.scopes): observe (recorded, nobody told) → notify "
        "(warnings only) → enforce (the ladder up to the scope's max_level). A stage set by "
        "`rollout promote` overrides the scope's configured mode until that mode is changed in "
        "the config."
    ),
    no_args_is_help=True,
)
fk_app = typer.Typer(
    help="Suspected false kills: stops whose owner resubmitted, restored or appealed within "
    "policy.rollout.false_kill_horizon_hours. Until settled, the scope's ladder runs slower.",
    invoke_without_command=True,
)
rollout_app.add_typer(fk_app, name="false-kills")
out = output.console()


def _row(s: ScopeStatus) -> dict[str, Any]:
    return s.row()


@rollout_app.command("status")
def status(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """Per scope: its stage and days in it, findings, what enforce would have done, suspected
    false kills, appeals, and whether it meets policy.rollout.promote_when."""
    with exit_on_errors():
        settings, store = open_store(config)
        rows = [_row(s) for s in RolloutBook(store, settings.policy).readiness(utcnow()).values()]
    if json_out:
        print_json(rows)
        return
    table = Table(title="Roll-out by scope")
    for col in (
        "scope",
        "stage",
        "days",
        "findings",
        "enforce would have",
        "false kills",
        "appeals",
        "promote?",
    ):
        table.add_column(col)
    for r in rows:
        would = ", ".join(f"{k} {v}" for k, v in sorted(r["enforce_would_have"].items())) or "-"
        ready = "yes" if r["ready_to_promote"] else f"no: {r['criteria']}"
        slow = f" (ladder x{r['slowdown']:g})" if r["slowdown"] > 1 else ""
        table.add_row(
            r["scope"], r["stage"] + slow, f"{r['days']:.1f}", str(r["findings"]), would,
            str(r["false_kills"]), str(r["appeals"]), ready,
        )  # fmt: skip
    out.print(table)


@rollout_app.command("promote")
def promote(
    scope: Annotated[str, typer.Argument(help="The scope's name (`rollout status` lists them).")],
    config: ConfigOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Promote without the criteria (needs --reason).")
    ] = False,
    reason: Annotated[str, typer.Option(help="Why (kept in the audit log; required with --force).")] = "",
    by: ByOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Move SCOPE one stage on (observe → notify → enforce), audited. Refused (exit 1, audited
    too) when it does not meet policy.rollout.promote_when, unless --force --reason. The new stage
    overrides the configured mode until that mode is changed in the config."""
    if force and not reason.strip():
        fail("--force needs --reason", 2)
    with exit_on_errors():
        settings, store = open_store(config)
        book = RolloutBook(store, settings.policy)
        try:
            done = book.promote(scope, utcnow(), by=by or who(), force=force, reason=reason)
        except ControlError as e:
            if json_out:
                print_json({"scope": scope, "promoted": False, "error": str(e)})
                raise typer.Exit(1) from e
            fail(str(e), 1)
    if json_out:
        print_json({**_row(done), "promoted": True})
        return
    out.print(f"scope {done.name} is now in {done.stage.value}", highlight=False)


@rollout_app.command("appeal")
def appeal(
    workload: Annotated[
        str, typer.Argument(help="The stopped workload's id (as `gpusteward audit` names it).")
    ],
    reason: Annotated[str, typer.Option(help="The owner's words (kept in the audit log).")] = "",
    config: ConfigOpt = None,
    by: ByOpt = None,
) -> None:
    """Record an owner's appeal against a stop: within the horizon it makes the stop a suspected
    false kill at the agent's next tick."""
    with exit_on_errors():
        settings, store = open_store(config)
        RolloutBook(store, settings.policy).appeal(workload, by=by or who(), reason=reason, now=utcnow())
    out.print(f"appeal recorded for {workload}", highlight=False)


@fk_app.callback()
def false_kills(ctx: typer.Context, config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """List suspected false kills, per scope, rule and class."""
    if ctx.invoked_subcommand is not None:
        return
    with exit_on_errors():
        settings, store = open_store(config)
        book = RolloutBook(store, settings.policy)
        watch = book.watch()
        fks = book.false_kills(watch)
    if json_out:
        print_json(
            {
                "false_kills": to_json(fks),
                "reclaim": {k: {"attempted": v[0], "freed": v[1]} for k, v in watch.reclaim.items()},
            }
        )
        return
    table = Table(title="Suspected false kills")
    for col in ("id", "status", "workload", "scope", "rule", "class", "stopped", "why"):
        table.add_column(col)
    for f in fks:
        table.add_row(
            str(f.id),
            f.status,
            f.workload_id,
            f.scope,
            f.rule,
            f.cls,
            f"{f.stopped_at:%Y-%m-%d %H:%M}",
            f.why,
        )
    out.print(table if fks else "no suspected false kills")


def _verdict(fk_id: int, *, confirm: bool, config: Any, by: str | None, reason: str) -> None:
    with exit_on_errors():
        settings, store = open_store(config)
        try:
            fk = RolloutBook(store, settings.policy).verdict(
                fk_id, confirm=confirm, by=by or who(), reason=reason, now=utcnow()
            )
        except ControlError as e:
            fail(str(e), 1)
    out.print(f"false kill {fk.id} ({fk.workload_id}) {fk.status}", highlight=False)


IdArg = Annotated[int, typer.Argument(min=1, max=2**63 - 1, help="The id `rollout false-kills` shows.")]


@fk_app.command("confirm")
def confirm(fk_id: IdArg, config: ConfigOpt = None, by: ByOpt = None, reason: str = "") -> None:
    """It was a false kill: it counts against the scope's promotion; the slowdown ends."""
    _verdict(fk_id, confirm=True, config=config, by=by, reason=reason)


@fk_app.command("dismiss")
def dismiss(
    fk_id: IdArg,
    reason: Annotated[str, typer.Option(help="Why it was not a false kill (required).")],
    config: ConfigOpt = None,
    by: ByOpt = None,
) -> None:
    """It was not a false kill: it no longer counts; the slowdown ends."""
    _verdict(fk_id, confirm=False, config=config, by=by, reason=reason)
