"""Rules as plain data: a row per rule, a rule's YAML to edit, and the live preview of a pack."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpusteward.analysis.rules import CompiledRule, compile_rules, parse_rule_pack
from gpusteward.runtime.loop import Steward
from gpusteward.web.data import gpu_name


def rule_row(r: CompiledRule) -> dict[str, Any]:
    s = r.spec
    return {
        "name": s.name,
        "kind": s.kind,
        "action": s.action.value,
        "scope": s.scope,
        "when": s.when,
        "window_minutes": round(r.window_s / 60, 1),
        "enabled": s.enabled,
        "description": s.description.strip(),
        "message": s.message,
        "min_coverage": s.min_coverage,
    }


def rule_yaml(r: CompiledRule) -> str:
    import yaml  # PyYAML: a core dependency

    data = r.spec.model_dump(mode="json", exclude_defaults=True)
    data = {"name": r.spec.name, "kind": r.spec.kind, **data}
    text: str = yaml.safe_dump({"rules": [data]}, sort_keys=False, allow_unicode=True, width=100)
    return text


def preview(
    text: str, steward: Steward | None, now: datetime
) -> tuple[list[CompiledRule], list[dict[str, Any]]]:
    """Validate a rule pack (raises ``RuleError`` with the line) and what it flags right now in
    the live window (empty without one)."""
    pack = parse_rule_pack(text, "<edited rule>")
    window_s = steward.window.window_s if steward is not None else None
    rules = compile_rules(pack, window_s=window_s)
    if steward is None:
        return rules, []
    result = steward.analyse(now, rules)
    workloads = steward.workloads
    rows = []
    for f in result.findings:
        w = workloads.get(f.workload_id or "")
        rows.append(
            {
                "rule": f.rule,
                "kind": f.kind,
                "workload_id": f.workload_id,
                "user": w.owner.user if w else "",
                "team": w.owner.team if w else "",
                "gpus": [gpu_name(steward.gpus, u) for u in f.gpu_uuids],
                "wasted_minutes": round(f.wasted_minutes, 1),
                "wasted_cost": round(f.wasted_cost, 2),
                "message": f.message,
            }
        )
    return rules, rows
