"""``gpusteward audit``: recent actions (``audit`` / ``audit list``), ``audit verify`` (walk the
hash chain) and ``audit export --format jsonl|csv`` (every record, for auditors)."""

from __future__ import annotations

import csv
import json
import re
import sys
from contextlib import ExitStack
from enum import StrEnum
from pathlib import Path
from typing import Annotated, TextIO

import typer

from gpusteward.cli import output, views
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.cli.state import ConfigOpt, JsonOpt, open_store, print_json
from gpusteward.store import audit_chain
from gpusteward.store.files import atomic_text

audit_app = typer.Typer(
    help=(
        "What gpusteward did and why. Without a subcommand: recent actions (as `audit list`). "
        "Every audit record carries a SHA-256 over its content and the previous record's hash: "
        "`audit verify` finds the first record changed, inserted or deleted; `audit export` hands "
        "the whole log to auditors."
    ),
    invoke_without_command=True,
)
out = output.console()

LimitOpt = Annotated[int, typer.Option(min=1, max=100_000, help="How many recent actions.")]
WorkloadOpt = Annotated[str | None, typer.Option(help="Only this workload.")]


def _list(config: ConfigOpt, limit: int, workload: str | None, json_out: bool) -> None:
    with exit_on_errors():
        _, store = open_store(config)
        actions = store.actions(limit=limit, workload_id=workload)
    if json_out:
        print_json([views.action_json(a) for a in actions])
        return
    views.print_actions(out, actions)


@audit_app.callback()
def audit(
    ctx: typer.Context,
    config: ConfigOpt = None,
    limit: LimitOpt = 50,
    workload: WorkloadOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List recent actions: when, which workload, which step, and how it ended."""
    if ctx.invoked_subcommand is None:
        _list(config, limit, workload, json_out)


@audit_app.command("list")
def list_(
    config: ConfigOpt = None, limit: LimitOpt = 50, workload: WorkloadOpt = None, json_out: JsonOpt = False
) -> None:
    """List recent actions: when, which workload, which step, and how it ended."""
    _list(config, limit, workload, json_out)


@audit_app.command("verify")
def verify(
    config: ConfigOpt = None,
    expect: Annotated[
        str | None,
        typer.Option(
            help="A record hash noted earlier (e.g. the head printed by a past verify): fail if it is no "
            "longer in the chain, which shows newer records were deleted."
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Walk the audit hash chain and report the first record that was changed, inserted or
    deleted, and any action whose state has no audit record. Exit code 0 when the chain is
    intact and complete, 1 otherwise."""
    if expect is not None:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", expect.strip()):
            # Not a hash at all: "not in the chain" would wrongly blame deleted records.
            fail(f"--expect: not a record hash (64 hex digits, as `audit verify` prints): {expect[:80]!r}")
        expect = expect.strip().lower()
    with exit_on_errors():
        _, store = open_store(config)
        with store.transaction("verify audit chain") as conn:
            report = audit_chain.verify(conn, expect_hash=expect)
    if json_out:
        print_json(report.to_dict())
    else:
        unchained = f", {report.unchained} from before the chain" if report.unchained else ""
        out.print(
            f"{report.records} record(s){unchained}; head seq {report.head_seq} {report.head_hash}",
            highlight=False,
        )
        if report.ok:
            out.print("[green]audit chain intact and complete[/green]")
    if not report.ok:
        if json_out:
            raise typer.Exit(1)
        if report.problem == f"the log is incomplete: {report.missing}":
            fail(f"audit log incomplete: {report.missing} ({report.incomplete} action(s) in all)", 1)
        fail(f"audit chain broken at {report.problem} ({report.problems} problem(s) in all)", 1)


class Format(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"


@audit_app.command("export")
def export(
    config: ConfigOpt = None,
    format_: Annotated[
        Format, typer.Option("--format", help="jsonl (one JSON object a line) or csv.")
    ] = Format.JSONL,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")
    ] = None,
) -> None:
    """Write every audit record, oldest first, with its seq, prev_hash and hash, so an auditor can
    check the chain independently (SHA-256 of the canonical JSON described in store/audit_chain.py)."""
    with exit_on_errors(), ExitStack() as stack:
        _, store = open_store(config)
        conn = stack.enter_context(store.transaction("export audit log"))
        sink: TextIO = (
            # All or nothing: a full disk leaves the old file, not a truncated export.
            stack.enter_context(atomic_text(output, newline="")) if output else sys.stdout
        )
        rows = audit_chain.export_rows(conn)
        n = 0
        if format_ is Format.JSONL:
            for row in rows:
                sink.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
                n += 1
        else:
            fields = ["id", "seq", "at", "event", "workload_id", "payload", "prev_hash", "hash"]
            writer = csv.DictWriter(sink, fieldnames=fields)
            writer.writeheader()
            for row in rows:
                writer.writerow(
                    {**row, "payload": json.dumps(row["payload"], ensure_ascii=False, sort_keys=True)}
                )
                n += 1
    if output is not None:
        out.print(f"{n} audit record(s) written to {output}", highlight=False)
