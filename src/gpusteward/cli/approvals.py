"""``gpusteward approvals list|approve ID|reject ID --reason``: the queue of steps that wait
for a person (``policy.approval``: L3 and L4 by default)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors
from gpusteward.cli.state import ByOpt, ConfigOpt, JsonOpt, open_store, print_json, who
from gpusteward.cli.views import utcnow
from gpusteward.domain.models import ApprovalStatus
from gpusteward.runtime.owner_controls import decide_approval
from gpusteward.store.controls import ApprovalRecord

approvals_app = typer.Typer(
    help=(
        "Steps that wait for an admin's approval (policy.approval.min_level, L3 and L4 by default). "
        "A request expires after policy.approval.expire_hours (2 h); an expired approval never runs, "
        "and the step is asked again while the waste holds. A rejected step is not asked again "
        "during that waste episode."
    ),
    no_args_is_help=True,
)
out = output.console()


def _t(at: object) -> str:
    return "" if at is None else f"{at:%Y-%m-%d %H:%M}"


def _table(records: list[ApprovalRecord]) -> Table:
    table = Table(title="Approval requests")
    for col in ("id", "status", "workload", "step", "level", "requested", "expires", "decided by", "why"):
        table.add_column(col)
    for r in records:
        table.add_row(
            str(r.id),
            r.status.value + (" (dry-run)" if r.dry_run else ""),
            r.workload_id,
            r.step,
            r.level.label,
            _t(r.requested_at),
            _t(r.expires_at),
            r.decided_by,
            r.decision_reason or r.reason[:80],
        )
    return table


@approvals_app.command("list")
def list_(
    config: ConfigOpt = None,
    status: Annotated[
        str, typer.Option(help="pending, approved, rejected, expired, used, or all.")
    ] = "pending",
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="How many recent requests.")] = 100,
    json_out: JsonOpt = False,
) -> None:
    """List approval requests (pending ones by default), oldest first."""
    with exit_on_errors():
        wanted = None if status == "all" else _status(status)
        _, store = open_store(config)
        store.expire_approvals(utcnow())
        records = store.approvals(wanted, limit=limit)
    if json_out:
        print_json([r.to_dict() for r in records])
        return
    out.print(_table(records) if records else "no approval requests")


def _status(text: str) -> ApprovalStatus:
    try:
        return ApprovalStatus(text)
    except ValueError:
        names = ", ".join(s.value for s in ApprovalStatus)
        raise typer.BadParameter(f"{text!r}: one of {names}, or all", param_hint="--status") from None


def _decide(
    config: ConfigOpt, approval_id: int, *, approve: bool, by: str | None, reason: str, json_out: bool
) -> None:
    with exit_on_errors():
        _, store = open_store(config)
        record = decide_approval(
            store, approval_id, approve=approve, by=by or who(), reason=reason, now=utcnow()
        )
    if json_out:
        print_json(record.to_dict())
        return
    verb = (
        "approved: it runs at the next tick" if approve else "rejected: not asked again in this waste episode"
    )
    out.print(f"request {record.id} ({record.step} of {record.workload_id}) {verb}", highlight=False)


@approvals_app.command("approve")
def approve(
    approval_id: Annotated[
        int, typer.Argument(min=1, max=2**63 - 1, help="The request's id (from `approvals list`).")
    ],
    config: ConfigOpt = None,
    by: ByOpt = None,
    reason: Annotated[str, typer.Option(help="Why (kept in the audit log).")] = "",
    json_out: JsonOpt = False,
) -> None:
    """Approve a pending request: the step runs at the next tick, if it still applies."""
    _decide(config, approval_id, approve=True, by=by, reason=reason, json_out=json_out)


@approvals_app.command("reject")
def reject(
    approval_id: Annotated[
        int, typer.Argument(min=1, max=2**63 - 1, help="The request's id (from `approvals list`).")
    ],
    reason: Annotated[str, typer.Option(help="Why (required; the audit log keeps it).")],
    config: ConfigOpt = None,
    by: ByOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Reject a pending request: the step does not run, and is not asked again in this episode."""
    _decide(config, approval_id, approve=False, by=by, reason=reason, json_out=json_out)
