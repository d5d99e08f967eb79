"""Rules are data: YAML rule packs validated by pydantic and compiled to vectorised closures.

A rule file is ``rules: [ {name, kind, when, ...}, ... ]``. Every problem, from a
misspelt key to an unknown function in ``when:``, is a ``RuleError`` naming the file,
the line and the rule.

The rule's *window* is the longest look-back in its ``when`` expression (a duration
such as ``30m``, or N minutes in ``below_for(...) >= N``). The engine judges a GPU only
if every metric the rule reads covers at least ``min_coverage`` of that window.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpusteward.analysis.expr import Expr, compile_expr, format_duration
from gpusteward.domain.errors import ConfigError, RuleError
from gpusteward.domain.models import Metric, RuleAction
from gpusteward.domain.yamlload import YamlDoc, config_error, load_yaml, parse_yaml

#: What a rule's ``message`` may mention; the engine fills each in per finding.
PLACEHOLDERS: Mapping[str, str] = {
    "rule": "the rule's name",
    "kind": "the rule's kind",
    "workload": "the workload's name",
    "workload_id": "the workload's id",
    "owner": "the owner's user name",
    "team": "the owner's team",
    "gpu": "the tripping GPUs as node/gpuN, comma-separated",
    "node": "the node(s) of the tripping GPUs",
    "gpus": "how many GPUs tripped",
    "held": "how many GPUs the workload holds",
    "requested": "how many GPUs the workload requested",
    "busy": "how many of the workload's GPUs did not trip",
    "suggest_gpus": "the right size for the workload: busy GPUs, at least 1",
    "util": "the highest mean GPU utilisation (%) over the rule's window among the tripping GPUs",
    "mem_gib": "the GPU memory the tripping GPUs hold, in GiB",
    "minutes": "how long the waste has lasted, in minutes",
    "window": "the rule's window, e.g. 30m",
    "gpu_hours": "GPU-hours wasted",
    "cost": "money wasted",
    "evidence": "the values the rule's busy_share, zero_for, watched_for and below_for read, in words",
    "class": "the workload's class (service, batch, interactive, unknown)",
    "xid": "the newest Xid of the rule's window (at least 30 min) and its meaning, or 'no Xid'",
}


class RuleSpec(BaseModel):
    """One rule as written in a rule pack."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)
    #: The kind of waste (``zombie``, ``idle``, ...): what notices and reports group by.
    kind: str = Field(min_length=1, max_length=100)
    description: str = ""
    action: RuleAction = RuleAction.RECLAIM
    #: ``gpu``: judged per GPU. ``workload``: may use ``share()``/``count()`` over its GPUs.
    scope: Literal["gpu", "workload"] = "gpu"
    when: str
    #: Minimum share of the rule's window each read metric must cover for a GPU to be judged.
    min_coverage: float = Field(default=0.8, ge=0.0, le=1.0)
    #: Gpu-scope reclaim rules: a workload is reported only when all of its GPUs trip.
    require_all_gpus: bool = True
    #: Expression for how long the waste has lasted, in minutes; default: the window.
    waste_minutes: str | None = None
    #: Template with ``{placeholders}`` (see ``PLACEHOLDERS``).
    message: str = ""
    enabled: bool = True
    #: ``false``: an owner's snooze does not hold this rule's findings (admins decide which).
    snoozable: bool = True
    #: Workload classes the rule judges (service, batch, interactive, unknown); empty: all.
    classes: list[Literal["service", "batch", "interactive", "unknown"]] = Field(default_factory=list)


class RulePack(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[RuleSpec]

    @field_validator("rules")
    @classmethod
    def _unique_names(cls, rules: list[RuleSpec]) -> list[RuleSpec]:
        seen: set[str] = set()
        for r in rules:
            if r.name in seen:
                raise ValueError(f"duplicate rule name '{r.name}'")
            seen.add(r.name)
        return rules


@dataclass(frozen=True)
class CompiledRule:
    spec: RuleSpec
    when: Expr
    waste: Expr | None
    #: The placeholders the message uses.
    message_fields: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def action(self) -> RuleAction:
        return self.spec.action

    @property
    def window_s(self) -> float:
        return self.when.window_s

    @property
    def metrics(self) -> frozenset[Metric]:
        """The metrics whose coverage gates this rule."""
        return self.when.metrics


def check_template(template: str) -> frozenset[str]:
    """The placeholders of a message template: only plain ``{name}`` ones from
    ``PLACEHOLDERS``, no attribute access, no format specs."""
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as e:
        raise RuleError(f"bad message template: {e}") from None
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in PLACEHOLDERS:
            known = ", ".join(PLACEHOLDERS)
            raise RuleError(f"unknown placeholder {{{name}}} in message (known: {known})")
        if spec or conversion:
            raise RuleError(f"placeholder {{{name}}} may not have a format spec or conversion")
    return frozenset(name for _, name, _, _ in fields if name)


def _compile(spec: RuleSpec, fail: Callable[[str, RuleError], RuleError]) -> CompiledRule:
    try:
        when = compile_expr(spec.when, scope=spec.scope, kind="bool")
    except RuleError as e:
        raise fail("when", e) from e
    waste = None
    if spec.waste_minutes is not None:
        try:
            waste = compile_expr(spec.waste_minutes, scope=spec.scope, kind="num")
        except RuleError as e:
            raise fail("waste_minutes", e) from e
    try:
        fields = check_template(spec.message)
    except RuleError as e:
        raise fail("message", e) from e
    return CompiledRule(spec=spec, when=when, waste=waste, message_fields=fields)


def compile_rule(spec: RuleSpec) -> CompiledRule:
    def fail(what: str, e: RuleError) -> RuleError:
        return RuleError(f"rule '{spec.name}': {what}: {e.problem}")

    return _compile(spec, fail)


def compile_rules(pack: RulePack, *, window_s: float | None = None) -> list[CompiledRule]:
    """The enabled rules, compiled. With ``window_s`` (the window store's), a rule that
    looks back further than the store keeps is an error: it could never trip."""
    out = [compile_rule(r) for r in pack.rules if r.enabled]
    if window_s is not None:
        for rule in out:
            if rule.window_s > window_s + 1e-9:
                raise RuleError(
                    f"rule '{rule.name}' looks back {format_duration(rule.window_s)} but the window "
                    f"store keeps only {format_duration(window_s)}: raise the window or shorten the rule"
                )
    return out


def _rule_name(doc: YamlDoc, index: int) -> str | None:
    rules = doc.data.get("rules") if isinstance(doc.data, dict) else None
    if isinstance(rules, list) and 0 <= index < len(rules) and isinstance(rules[index], dict):
        name = rules[index].get("name")
        return str(name) if name is not None else None
    return None


def _precheck(doc: YamlDoc, raw: Any) -> None:
    """Misspelt keys and duplicate names, reported before pydantic would report their
    consequences ("field required" for the key the typo was meant to be)."""
    if not isinstance(raw, dict):
        return
    for key in raw:
        if key not in RulePack.model_fields:
            raise RuleError(
                f"{key}: unknown key (check the spelling)", path=doc.path, line=doc.line_of((key,))
            )
    rules = raw.get("rules")
    if not isinstance(rules, list):
        return
    seen: set[str] = set()
    for i, r in enumerate(rules):
        if not isinstance(r, dict):
            continue
        name = r.get("name")
        for key in r:
            if key not in RuleSpec.model_fields:
                line = doc.line_of(("rules", i, key))
                who = f"rule '{name}': " if name is not None else ""
                raise RuleError(
                    f"{who}rules.{i}.{key}: unknown key (check the spelling)", path=doc.path, line=line
                )
        if isinstance(name, str) and name in seen:
            line = doc.line_of(("rules", i, "name"))
            raise RuleError(f"rule '{name}': duplicate rule name", path=doc.path, line=line)
        if isinstance(name, str):
            seen.add(name)


def _from_doc(doc: YamlDoc) -> RulePack:
    if doc.data is None:
        raise RuleError("empty rule file: expected 'rules:'", path=doc.path, line=1)
    raw: Any = doc.data
    _precheck(doc, raw)
    try:
        pack = RulePack.model_validate(raw)
    except ValidationError as e:
        err = config_error(e, doc, cls=RuleError)
        loc = e.errors()[0]["loc"]
        name = (
            _rule_name(doc, loc[1])
            if len(loc) > 1 and loc[0] == "rules" and isinstance(loc[1], int)
            else None
        )
        problem = f"rule '{name}': {err.problem}" if name else err.problem
        raise RuleError(problem, path=doc.path, line=err.line) from e
    for i, spec in enumerate(pack.rules):

        def fail(what: str, e: RuleError, i: int = i, name: str = spec.name) -> RuleError:
            line = doc.line_of(("rules", i, what))
            return RuleError(f"rule '{name}': {what}: {e.problem}", path=doc.path, line=line)

        _compile(spec, fail)
    return pack


def parse_rule_pack(text: str, path: str = "<string>") -> RulePack:
    """Parse and check a rule pack (expressions included); errors name file and line."""
    try:
        doc = parse_yaml(text, path)
    except ConfigError as e:
        raise RuleError(e.problem, path=e.path, line=e.line) from e
    return _from_doc(doc)


def load_rule_pack(path: str | Path) -> RulePack:
    try:
        doc = load_yaml(path)
    except ConfigError as e:
        raise RuleError(e.problem, path=e.path, line=e.line) from e
    return _from_doc(doc)


DEFAULT_PACK = "rules/default.yaml"


def default_rule_pack() -> RulePack:
    """The rule pack shipped inside the package."""
    text = resources.files("gpusteward.analysis").joinpath(DEFAULT_PACK).read_text(encoding="utf-8")
    return parse_rule_pack(text, f"gpusteward/analysis/{DEFAULT_PACK}")
