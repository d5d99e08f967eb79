"""Reference pages generated from the code, so nothing is written twice: every config key (the
pydantic models under ``Settings``), every command (the Click tree Typer builds), the JSON API
(the FastAPI OpenAPI document) and the rule pack's fields. Used by ``mkdocs_hooks.py``;
``python scripts/docgen.py config|cli|api|rules`` prints one page's generated part.
"""

from __future__ import annotations

import sys
import tempfile
import types
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# -- config ------------------------------------------------------------------------------------
def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(names) + (" or none" if type(None) in args else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map {type_name(args[0])} → {type_name(args[1])}" if args else "map"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    if annotation is SecretStr:
        return "secret string"
    return getattr(annotation, "__name__", str(annotation))


def default_of(field: FieldInfo) -> str:
    if field.default_factory is not None:
        if field.default_factory in (list, dict, set, tuple):
            return "`" + repr(field.default_factory()) + "`"
        return "(computed)"
    if field.default is PydanticUndefined:
        return "required"
    value = field.default.value if isinstance(field.default, Enum) else field.default
    return "none" if value is None else f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def bounds_of(field: FieldInfo) -> str:
    out = []
    for m in field.metadata:
        for cls, sign, attr in (
            (at.Gt, ">", "gt"),
            (at.Ge, "≥", "ge"),
            (at.Lt, "<", "lt"),
            (at.Le, "≤", "le"),
            (at.MinLen, "length ≥", "min_length"),
            (at.MaxLen, "length ≤", "max_length"),
        ):
            if isinstance(m, cls):
                out.append(f"{sign} {getattr(m, attr)}")
    return ", ".join(out)


def _rows(model: type[BaseModel], prefix: str) -> tuple[list[str], list[tuple[str, type[BaseModel]]]]:
    rows, nested = [], []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        inner = _model_in(field.annotation)
        if inner is not None:
            nested.append((key, inner))
            continue
        args = get_args(field.annotation)
        for arg in args:  # a list or map of models: documented as `key.*` / `key[]`
            sub = _model_in(arg)
            if sub is not None:
                nested.append((f"{key}.<name>" if get_origin(field.annotation) is dict else f"{key}[]", sub))
        rows.append(
            f"| `{key}` | {type_name(field.annotation)} | {default_of(field)} | {bounds_of(field)} "
            f"| {_cell(field.description or '')} |"
        )
    return rows, nested


def config_reference() -> str:
    from gpusteward.runtime.config import Settings

    return settings_reference(Settings)


def hub_config_reference() -> str:
    from gpusteward.hub.settings import HubSettings

    return settings_reference(HubSettings)


def settings_reference(root: type[BaseModel]) -> str:
    """Every key of a config file's settings model, section by section."""
    out: list[str] = []
    top, sections = _rows(root, "")
    out += [
        "## Top level",
        "",
        "| key | type | default | bounds | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    out += [*top, ""]
    queue = list(sections)
    while queue:
        key, model = queue.pop(0)
        rows, nested = _rows(model, key + ".")
        queue[0:0] = nested  # depth first: a section's subsections follow it
        doc = (model.__doc__ or "").strip()
        out += [f"## `{key}`", ""]
        if doc and not doc.startswith(("Usage docs", "A base class")):
            out += [" ".join(doc.split()), ""]
        if rows:
            out += ["| key | type | default | bounds | description |", "| --- | --- | --- | --- | --- |"]
            out += [*rows, ""]
    return "\n".join(out)


# -- CLI ---------------------------------------------------------------------------------------
def _command_md(cmd: Any, path: list[str], parent: Any) -> list[str]:
    """One command's section. Typer builds the tree with its own copy of Click (typer._click), so
    parameters are told apart by ``param_type_name``, not by Click's classes."""
    ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
    name = " ".join(path)
    out = [f"{'#' * min(len(path) + 1, 4)} `{name}`", ""]
    if cmd.help:
        out += [cmd.help.strip(), ""]
    out += ["```", f"{name} {' '.join(cmd.collect_usage_pieces(ctx))}".rstrip(), "```", ""]
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    if params:
        out += ["| option | type | default | description |", "| --- | --- | --- | --- |"]
        for p in params:
            if p.param_type_name == "argument":
                label = f"`{p.name.upper()}`"
            else:
                label = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
            if p.required:
                label += " (required)"
            default = p.default.value if isinstance(p.default, Enum) else p.default
            shown = "" if default in (None, False, ()) or callable(default) else f"`{default}`"
            kind = p.display_type(ctx).strip("<>")
            out.append(f"| {label} | {_cell(kind)} | {_cell(shown)} | {_cell(p.help or '')} |")
        out.append("")
    for sub_name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not sub.hidden:
            out += _command_md(sub, [*path, sub_name], ctx)
    return out


def cli_reference() -> str:
    import typer

    from gpusteward.cli import app

    return "\n".join(_command_md(typer.main.get_command(app), ["gpusteward"], None))


# -- API ---------------------------------------------------------------------------------------
def openapi_document() -> dict[str, Any]:
    from gpusteward.runtime.build import load_rules
    from gpusteward.runtime.config import load_settings
    from gpusteward.store.db import StateStore
    from gpusteward.web.app import create_web_app

    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(None, store={"url": f"sqlite:///{Path(tmp) / 'docs.db'}"})
        store = StateStore(settings.store.url)
        store.create_schema()
        doc: dict[str, Any] = create_web_app(store, settings, load_rules(settings)).openapi()
        store.close()
    return doc


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return str(schema.get("type", "any"))


def api_reference() -> str:
    doc = openapi_document()
    out = [f"OpenAPI {doc.get('openapi', '')}, {doc['info']['title']} {doc['info'].get('version', '')}.", ""]
    for path, methods in sorted(doc["paths"].items()):
        for method, op in methods.items():
            out += [f"### `{method.upper()} {path}`", ""]
            text = op.get("description") or op.get("summary") or ""
            if text:
                out += [text.strip(), ""]
            params = op.get("parameters", [])
            if params:
                out += [
                    "| parameter | in | type | required | description |",
                    "| --- | --- | --- | --- | --- |",
                ]
                for p in params:
                    schema = p.get("schema", {})
                    kind = " or ".join(_schema_type(s) for s in schema.get("anyOf", [schema]))
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {_cell(kind)} | {'yes' if p.get('required') else ''} "
                        f"| {_cell(p.get('description', ''))} |"
                    )
                out.append("")
            codes = ", ".join(
                f"{c} {_cell(r.get('description', ''))}" for c, r in op.get("responses", {}).items()
            )
            out += [f"Responses: {codes}.", ""]
    return "\n".join(out)


# -- rules -------------------------------------------------------------------------------------
def rule_fields() -> str:
    from gpusteward.analysis.rules import RuleSpec

    rows, _ = _rows(RuleSpec, "")
    return "\n".join(
        ["| field | type | default | bounds | description |", "| --- | --- | --- | --- | --- |", *rows]
    )


def default_pack() -> str:
    from importlib import resources

    text = resources.files("gpusteward.analysis").joinpath("rules/default.yaml").read_text(encoding="utf-8")
    return f'```yaml title="src/gpusteward/analysis/rules/default.yaml"\n{text.rstrip()}\n```'


GENERATORS = {
    "config": config_reference,
    "hub-config": hub_config_reference,
    "cli": cli_reference,
    "api": api_reference,
    "rule-fields": rule_fields,
    "default-pack": default_pack,
}

if __name__ == "__main__":
    print(GENERATORS[sys.argv[1]]())
