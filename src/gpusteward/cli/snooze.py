"""``gpusteward snooze WORKLOAD --hours H --reason R`` and ``gpusteward unsnooze WORKLOAD``."""

from __future__ import annotations

from typing import Annotated

import typer

from gpusteward.cli import output
from gpusteward.cli.exits import exit_on_errors, fail
from gpusteward.cli.state import ByOpt, ConfigOpt, JsonOpt, open_store, print_json, who
from gpusteward.cli.views import utcnow
from gpusteward.runtime.build import load_rules
from gpusteward.runtime.owner_controls import snooze_workload

out = output.console()


def snooze(
    workload: Annotated[str, typer.Argument(help="The workload's id (see `gpusteward explain`).")],
    hours: Annotated[float, typer.Option(help="How long; at most policy.snooze.max_hours (24 h).")],
    reason: Annotated[str, typer.Option(help="Why (the owner's words; kept in the audit log).")],
    config: ConfigOpt = None,
    by: ByOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Leave a running workload alone for a while: its findings are recorded, nothing is done,
    and its ladder starts again from a first warning when the snooze ends. Rules admins marked
    `snoozable: false` are not held by a snooze (the command refuses while one has a finding)."""
    with exit_on_errors():
        settings, store = open_store(config)
        record = snooze_workload(
            store,
            settings.policy,
            load_rules(settings),
            workload,
            hours=hours,
            by=by or who(),
            reason=reason,
            now=utcnow(),
        )
    if json_out:
        print_json(record.to_dict())
        return
    out.print(f"{workload} snoozed until {record.until:%Y-%m-%d %H:%M} UTC", highlight=False)


def unsnooze(
    workload: Annotated[str, typer.Argument(help="The workload's id.")],
    config: ConfigOpt = None,
    by: ByOpt = None,
) -> None:
    """End a workload's snooze now."""
    with exit_on_errors():
        _, store = open_store(config)
        ended = store.unsnooze(workload, by=by or who(), at=utcnow())
    if not ended:
        fail(f"{workload} has no snooze in force", 1)
    out.print(f"{workload}: snooze ended", highlight=False)
