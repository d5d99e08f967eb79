"""The rules in force, a rule's YAML to edit, the live preview (htmx) and saving (admins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import Response

from gpusteward.domain.errors import ConfigError, RuleError
from gpusteward.domain.yamlload import load_yaml
from gpusteward.store.access import Role
from gpusteward.web import rule_data
from gpusteward.web.auth import read_form
from gpusteward.web.pages.base import back, ctx_of, message, render, who

router = APIRouter(include_in_schema=False)


@router.get("/rules")
def rules(request: Request, note: str = "") -> Response:
    caller = who(request)
    ctx = ctx_of(request)
    rows = [rule_data.rule_row(r) for r in ctx.rules]
    return render(
        request, caller, "rules.html.j2", rows=rows, note=note, rules_file=ctx.settings.web.rules_file
    )


@router.get("/rules/{name}/edit")
def rule_edit(request: Request, name: str) -> Response:
    caller = who(request)
    ctx = ctx_of(request)
    found = [r for r in ctx.rules if r.name == name]
    if not found:
        return message(request, caller, 404, "Not found", f"No rule {name!r}.")
    return render(
        request,
        caller,
        "rule_edit.html.j2",
        name=name,
        text=rule_data.rule_yaml(found[0]),
        rules_file=ctx.settings.web.rules_file,
    )


@router.post("/rules/preview")
async def rule_preview(request: Request) -> Response:
    form = await read_form(request)
    caller = who(request, Role.VIEWER, form)
    ctx = ctx_of(request)
    try:
        compiled, rows = rule_data.preview(form.get("text", ""), ctx.steward(), ctx.now())
    except RuleError as e:
        # 200: htmx swaps in only successful answers; the API answers 422 for the same error.
        return render(request, caller, "_preview.html.j2", error=str(e), rows=[], compiled=[])
    return render(
        request, caller, "_preview.html.j2", error="", rows=rows,
        compiled=[rule_data.rule_row(r) for r in compiled], live=ctx.steward() is not None,
    )  # fmt: skip


@router.post("/rules/save")
async def rule_save(request: Request) -> Response:
    form = await read_form(request)
    caller = who(request, Role.ADMIN, form)
    ctx = ctx_of(request)
    target = ctx.settings.web.rules_file
    if target is None:
        why = "web.rules_file is not set: rules can be previewed here, not saved."
        return message(request, caller, 409, "Not saved", why, "/rules")
    try:
        compiled, _ = rule_data.preview(form.get("text", ""), ctx.steward(), ctx.now())
        _save_rules(target, [r.spec.model_dump(mode="json", exclude_defaults=True) for r in compiled])
    except RuleError as e:
        return message(request, caller, 422, "Not saved", str(e), "/rules")
    names = ", ".join(r.name for r in compiled)
    ctx.store.audit("rules.edited", ctx.now(), None, by=caller.name, rules=names, file=str(target))
    note = f"saved {names} to {target}"
    if target in ctx.settings.rules.files:
        try:
            from gpusteward.runtime.build import load_rules

            new = load_rules(ctx.settings)
        except ConfigError as e:
            note += f"; not in force: {e}"
        else:
            ctx.rules = new
            if ctx.on_rules_saved is not None:
                ctx.on_rules_saved(new)
            note += "; in force from the next tick"
    else:
        note += "; list it under rules.files to use it"
    return back("/rules", note)


def _save_rules(path: Path, specs: list[dict[str, Any]]) -> None:
    """Replace (by name) or add the edited rules in the rule file, keeping its other rules."""
    current: list[dict[str, Any]] = []
    if path.exists():
        try:
            loaded = load_yaml(path).data or {}
        except ConfigError as e:
            raise RuleError(e.problem, path=e.path, line=e.line) from e
        current = list(loaded.get("rules") or []) if isinstance(loaded, dict) else []
    by_name = {s["name"]: s for s in specs}
    merged = [by_name.pop(str(r.get("name")), r) for r in current] + list(by_name.values())
    text = yaml.safe_dump({"rules": merged}, sort_keys=False, allow_unicode=True, width=100)
    from gpusteward.analysis.rules import parse_rule_pack

    parse_rule_pack(text, str(path))  # the whole file must still be valid before it is written
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
