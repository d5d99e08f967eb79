"""Rendering for the CLI: Rich tables for people, plain dicts for ``--json``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from gpusteward.analysis.rules import CompiledRule
from gpusteward.cli import output
from gpusteward.domain.models import Action, ActionStatus, Decision, Finding, Gpu
from gpusteward.runtime.tick_report import TickReport
from gpusteward.scenarios.demo import DemoResult
from gpusteward.store.db import StateStore

_STATUS_STYLE = {
    ActionStatus.SUCCEEDED: "green",
    ActionStatus.FAILED: "red",
    ActionStatus.SKIPPED: "yellow",
    ActionStatus.EXECUTING: "cyan",
    ActionStatus.PLANNED: "cyan",
}


def utcnow() -> datetime:
    return datetime.now(tz=UTC)


def _t(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _gpus(uuids: Sequence[str], gpus: Mapping[str, Gpu] | None = None) -> str:
    names = [gpus[u].display if gpus and u in gpus else u for u in uuids]
    return ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "rule": f.rule,
        "kind": f.kind,
        "action": f.action.value,
        "workload": f.workload_id,
        "gpus": list(f.gpu_uuids),
        "wasted_minutes": round(f.wasted_minutes, 1),
        "wasted_gpu_hours": round(f.wasted_gpu_hours, 3),
        "wasted_cost": round(f.wasted_cost, 2),
        "evidence": {k: dict(v) for k, v in f.evidence.items()},
        "message": f.message,
    }


def decision_json(d: Decision) -> dict[str, Any]:
    return {
        "workload": d.workload_id,
        "at": d.at.isoformat(),
        "level": d.level.label,
        "step": d.step,
        "hold": d.hold.value,
        "rule": d.rule,
        "reason": d.reason,
    }


def action_json(a: Action) -> dict[str, Any]:
    return {
        "id": a.id,
        "key": a.idempotency_key,
        "workload": a.workload_id,
        "level": a.level.label,
        "step": a.step,
        "rule": a.rule,
        "status": a.status.value,
        "dry_run": a.dry_run,
        "created_at": a.created_at.isoformat(),
        "updated_at": a.updated_at.isoformat(),
        "attempts": a.attempts,
        "detail": a.detail,
    }


def report_json(r: TickReport) -> dict[str, Any]:
    return {
        "at": r.at.isoformat(),
        "source_ok": r.source_ok,
        "paused": r.paused,
        "gpus": r.gpus,
        "workloads": r.workloads,
        "stale_gpus": r.stale_gpus,
        "findings": [finding_json(f) for f in r.findings],
        "decisions": [decision_json(d) for d in r.decisions],
        "errors": list(r.errors),
    }


def findings_table(findings: Sequence[Finding], gpus: Mapping[str, Gpu] | None = None) -> Table:
    table = output.table("Findings", "rule", "workload", "GPUs", "for", "wasted", "why")
    for f in findings:
        table.add_row(
            f.rule,
            f.workload_id or "-",
            _gpus(f.gpu_uuids, gpus),
            f"{f.wasted_minutes:.0f} min",
            f"{f.wasted_gpu_hours:.2f} GPU-h / {f.wasted_cost:.2f}",
            f.message,
        )
    return table


def decisions_table(decisions: Sequence[Decision]) -> Table:
    table = output.table("Decisions", "workload", "level", "step", "hold", "reason")
    for d in decisions:
        table.add_row(d.workload_id, d.level.label, d.step or "-", d.hold.value or "-", d.reason)
    return table


def actions_table(actions: Sequence[Action], title: str = "Actions") -> Table:
    table = output.table(title, "time", "workload", "level", "step", "status", "detail")
    for a in actions:
        status = a.status.value + (" (dry-run)" if a.dry_run else "")
        style = _STATUS_STYLE.get(a.status, "")
        table.add_row(
            _t(a.created_at), a.workload_id, a.level.label, a.step, f"[{style}]{status}[/]", a.detail
        )
    return table


def print_scan(console: Console, report: TickReport, gpus: Mapping[str, Gpu]) -> None:
    state = "[red]PAUSED[/]" if report.paused else "dry-run"
    console.print(
        f"scan at {_t(report.at)}: {report.gpus} GPUs, {report.workloads} workloads, "
        f"{report.stale_gpus} without fresh data, mode {state}"
    )
    for e in report.errors:
        console.print(f"[yellow]warning:[/] {e}", highlight=False)
    if not report.findings:
        console.print("No waste found.")
    else:
        console.print(findings_table(report.findings, gpus))
    if report.decisions:
        console.print(decisions_table(report.decisions))


def print_actions(console: Console, actions: Sequence[Action]) -> None:
    if not actions:
        console.print("No actions recorded.")
        return
    console.print(actions_table(actions))


def print_rules(console: Console, rules: Sequence[CompiledRule]) -> None:
    table = output.table("Rules in force", "name", "kind", "action", "scope", "when")
    for r in rules:
        s = r.spec
        table.add_row(s.name, s.kind, s.action.value, s.scope, s.when)
    console.print(table)


def workload_history(store: StateStore, workload_id: str) -> dict[str, Any]:
    """Everything the state store knows about one workload, as plain data."""
    info = store.workload_info(workload_id)
    return {
        "workload": info.to_dict() if info else {"id": workload_id},
        "findings": [e.to_dict() for e in store.findings_for(workload_id)],
        "decisions": [decision_json(d) for d in store.decisions_for(workload_id, limit=1000)],
        "actions": [action_json(a) for a in store.actions(limit=1000, workload_id=workload_id)],
        "notices": [n.to_dict() for n in store.notices(workload_id)],
    }


def print_explain(console: Console, history: Mapping[str, Any]) -> None:
    info = history["workload"] or {}
    console.print(
        f"[bold]{info.get('id', '?')}[/] {info.get('kind', '')} {info.get('name', '')}", highlight=False
    )
    for key in ("user", "team", "gpu_uuids", "started_at", "last_seen_at"):
        if key in info:
            console.print(f"  {key}: {info[key]}", highlight=False)
    findings = history["findings"]
    if findings:
        table = output.table(
            "Evidence (finding episodes)", "rule", "first seen", "last seen", "wasted", "evidence"
        )
        for f in findings:
            evidence = "; ".join(
                f"{expr} = " + ", ".join(f"{v:.1f}" for v in per_gpu.values())
                for expr, per_gpu in (f.get("evidence") or {}).items()
            )
            table.add_row(
                f["rule"],
                str(f.get("first_seen_at", "")),
                str(f.get("last_seen_at", "")),
                f"{f.get('wasted_gpu_hours', 0):.2f} GPU-h / {f.get('wasted_cost', 0):.2f}",
                evidence,
            )
        console.print(table)
    else:
        console.print("No findings recorded.")
    if history["decisions"]:
        table = output.table("Decisions", "time", "level", "step", "hold", "reason")
        for d in history["decisions"]:
            table.add_row(d["at"][:16], d["level"], d["step"] or "-", d["hold"] or "-", d["reason"])
        console.print(table)
    if history["actions"]:
        table = output.table("Actions", "time", "level", "step", "status", "detail")
        for a in history["actions"]:
            table.add_row(a["created_at"][:16], a["level"], a["step"], a["status"], a["detail"])
        console.print(table)


def demo_findings_table(findings: Sequence[Mapping[str, Any]]) -> Table:
    table = output.table(
        "Findings (episodes)", "rule", "workload", "GPUs", "first seen", "last seen", "wasted"
    )
    for f in findings:
        table.add_row(
            f["rule"],
            f["workload_id"],
            str(len(f["gpu_uuids"])),
            _t(f["first_seen_at"]),
            _t(f["last_seen_at"]),
            f"{f['wasted_gpu_hours']:.2f} GPU-h",
        )
    return table


def print_demo(console: Console, result: DemoResult) -> None:
    s = result.summary()
    console.print(
        f"[bold]Simulated cluster[/]: {s['gpus']} GPUs for {s['hours']:g} h, "
        f"{s['workloads']} workloads, mode enforce (against the simulator)"
    )
    console.print(demo_findings_table(result.findings))
    console.print(actions_table(result.stops, title="Stops (L2 and above)"))
    by_level = ", ".join(f"{k}: {v}" for k, v in s["actions_by_level"].items()) or "none"
    cur = s["currency"]
    console.print(f"actions by level: {by_level}")
    console.print(f"waste without gpusteward: {s['waste_gpu_hours']:.1f} GPU-hours")
    console.print(
        f"reclaimed: {s['reclaimed_gpu_hours']:.1f} GPU-hours, "
        f"[bold green]{s['cost_saved']:.2f} {cur}[/] saved"
    )
    console.print(f"protected workloads left alone: {s['protected_untouched']}")
    console.print(f"missed workloads: {len(s['missed_workloads'])}")
    plan = s.get("consolidation")
    if plan:
        console.print(
            f"consolidation plan for the light services: {plan['gpus_before']} GPUs → "
            f"{plan['gpus_after']} (naive packing {plan['naive_gpus_after']}), contention "
            f"{100 * plan['contention_minutes_share']:.1f} % of minutes, "
            f"{plan['memory_violations']:.0f} memory violations, "
            f"{plan['money_per_month']:,.0f} {plan['currency']} a month freed"
        )
    for line in demo_health_queue_lines(s) + demo_cloud_lines(s):
        console.print(line)
    style = "green" if s["false_actions"] == 0 else "bold red"
    console.print(f"[{style}]false actions: {s['false_actions']}[/]")


def _min(v: float | None) -> str:
    return "-" if v is None else f"{v:g} min"


def demo_health_queue_lines(s: Mapping[str, Any]) -> list[str]:
    """Queue time with and without acting, failed GPUs found, and how early degrading ones were."""
    q = s.get("queue_time_p50_min") or {}
    lead = s.get("degrading_lead_time_min")
    return [
        f"queue time p50: {_min(q.get('with_gpusteward'))} with gpusteward, "
        f"{_min(q.get('without'))} without ({q.get('jobs', 0)} jobs submitted)",
        f"failed GPUs flagged: {s.get('failed_gpus_flagged', 0)} of {s.get('failed_gpus', 0)}",
        "degrading GPUs predicted: "
        + ("not before any failure" if lead is None else f"{lead:g} min before failure (median)"),
    ]


def demo_cloud_lines(s: Mapping[str, Any]) -> list[str]:
    """Cloud instances stopped and spot interruptions met with a checkpoint (none without cloud nodes)."""
    fleet = s.get("instances")
    if not fleet:
        return []
    kinds = ", ".join(f"{n} {k}" for k, n in fleet.items())
    cur = s.get("currency", "")
    return [
        f"cloud instances: {kinds}; stopped {s['instances_stopped']}, "
        f"{s['instance_hours_saved']:g} instance-hours saved ({s['instance_cost_saved']:.2f} {cur})",
        f"spot interruptions: {s['interruptions']}, every job checkpointed before the deadline in "
        f"{s['interruptions_checkpointed']}; {s['jobs_resumed_from_checkpoint']} jobs resumed from "
        f"that checkpoint, {s['jobs_lost_progress']} lost progress "
        f"({s['interruption_lost_gpu_hours']:g} GPU-hours of work lost, "
        f"{s.get('interruption_lost_gpu_hours_without', '-')} with no checkpoint signals)",
    ]
