"""``gpusteward parked``: the nodes gpusteward has parked (L4), from the action record."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors
from gpusteward.cli.state import ConfigOpt, JsonOpt, open_store, print_json
from gpusteward.domain.models import Action, ActionStatus
from gpusteward.store.db import StateStore

out = output.console()
_STEPS = ("park-node", "unpark-node")
_SCAN = 100_000


def parked_nodes(store: StateStore, *, dry_run: bool = False) -> list[Action]:
    """Each node's last successful park that no later unpark undid (dry-run: the previewed parks)."""
    last: dict[str, Action] = {}
    for a in store.actions(limit=_SCAN):
        if a.workload_id.startswith("node:") and a.step in _STEPS and a.dry_run == dry_run:
            done = ActionStatus.SKIPPED if dry_run else ActionStatus.SUCCEEDED
            if a.status is done:
                last[a.workload_id] = a
    return [a for _, a in sorted(last.items()) if a.step == "park-node"]


def _row(a: Action) -> dict[str, Any]:
    return {
        "node": a.workload_id.removeprefix("node:"),
        "parked_at": a.updated_at.isoformat(),
        "gpus": len(a.gpu_uuids),
        "action_id": a.id,
        "idempotency_key": a.idempotency_key,
        "dry_run": a.dry_run,
        "detail": a.detail,
    }


def parked(config: ConfigOpt = None, json_out: JsonOpt = False) -> None:
    """List the nodes gpusteward parked (cordoned on Kubernetes, drained on Slurm) and not yet
    unparked, from its action record. In dry-run mode: the parks it would have made. Unparking is
    automatic (window end, demand back); `gpusteward audit` shows each step with its reason."""
    with exit_on_errors():
        settings, store = open_store(config)
        rows = [_row(a) for a in parked_nodes(store, dry_run=settings.dry_run)]
    if json_out:
        print_json(rows)
        return
    if not rows:
        out.print("no node is parked" + (" (dry-run: none would be)" if settings.dry_run else ""))
        return
    table = Table(title="parked nodes" + (" (dry-run: would park)" if settings.dry_run else ""))
    for col in ("node", "since (UTC)", "GPUs", "action", "detail"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["node"], r["parked_at"][:16], str(r["gpus"]), str(r["action_id"]), r["detail"])
    out.print(table)
