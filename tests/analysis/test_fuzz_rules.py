"""Fuzzing the rule language: any expression text and any rule pack, however mangled, is a
``RuleError`` (or compiles), never a Python exception from the parser, pydantic or numpy."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpusteward.analysis.expr import (
    AGGREGATES,
    GPU_ATTRIBUTES,
    GROUP_FUNCTIONS,
    WORKLOAD_ATTRIBUTES,
    compile_expr,
)
from gpusteward.analysis.rules import compile_rules, parse_rule_pack
from gpusteward.domain.errors import RuleError
from gpusteward.domain.models import Metric

METRICS = [m.value for m in Metric]
NAMES = [*METRICS, *AGGREGATES, *GROUP_FUNCTIONS, *GPU_ATTRIBUTES, *WORKLOAD_ATTRIBUTES, "x", "__import__"]
TOKENS = [
    *NAMES,
    *"()[]{},.:;+-*/%<>=!~&|^@'\"\\",
    "and", "or", "not", "if", "else", "lambda", "in", "is", "**", "//", "==", "<=", ">=", "!=",
    "0", "1", "5", "30m", "2h", "10s", "1.5m", "0m", "1e999", "9" * 400, "1e308", "nan", "inf",
    "True", "None", "'s'", "0x1f", "1_000", "1j", " ", "  ",
]  # fmt: skip

# A grammar close enough to the real language that many draws get past the parser.
_num = st.sampled_from(["0", "5", "1024", "30m", "2h", "0.5", "1e308", "-1", "9" * 30, "0s"])
_metric = st.sampled_from([*METRICS, "bogus"])


def _agg(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    def call(fn: str, metric: str, args: list[str]) -> str:
        return f"{fn}({', '.join([metric, *args])})"

    return st.builds(call, st.sampled_from(list(AGGREGATES)), _metric, st.lists(children, max_size=3))


_numeric = st.recursive(
    st.one_of(_num, st.sampled_from(list(GPU_ATTRIBUTES + WORKLOAD_ATTRIBUTES))),
    lambda kids: st.one_of(
        _agg(kids),
        st.builds(lambda a, op, b: f"({a} {op} {b})", kids, st.sampled_from("+-*/"), kids),
        st.builds(lambda a: f"-{a}", kids),
    ),
    max_leaves=8,
)
_cond = st.recursive(
    st.builds(
        lambda a, op, b: f"{a} {op} {b}",
        _numeric,
        st.sampled_from(["<", "<=", ">", ">=", "==", "!=", "in", "is"]),
        _numeric,
    ),
    lambda kids: st.one_of(
        st.builds(lambda a, op, b: f"({a}) {op} ({b})", kids, st.sampled_from(["and", "or"]), kids),
        st.builds(lambda a: f"not ({a})", kids),
        st.builds(lambda f, a: f"{f}({a}) > 0", st.sampled_from(GROUP_FUNCTIONS), kids),
    ),
    max_leaves=6,
)


def _compile_or_rule_error(text: str, scope: Any, kind: Any) -> None:
    with contextlib.suppress(RuleError):
        compile_expr(text, scope=scope, kind=kind)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(TOKENS), max_size=25).map(" ".join),
    st.sampled_from(["gpu", "workload"]),
    st.sampled_from(["bool", "num"]),
)
@example("(" * 500 + "1" + ")" * 500, "gpu", "num")
@example("mean(gpu_util_pct, " + "9" * 400 + "m) < 5", "gpu", "bool")
@example("below_for(gpu_util_pct, 5) >= 1e308", "gpu", "bool")
def test_fuzz_token_soup_only_rule_errors(text: str, scope: Any, kind: Any) -> None:
    _compile_or_rule_error(text, scope, kind)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60), st.sampled_from(["gpu", "workload"]))
def test_fuzz_any_text_only_rule_errors(text: str, scope: Any) -> None:
    _compile_or_rule_error(text, scope, "bool")


@settings(max_examples=250, deadline=None)
@given(st.one_of(_cond, _numeric), st.sampled_from(["gpu", "workload"]), st.sampled_from(["bool", "num"]))
def test_fuzz_grammar_only_rule_errors(text: str, scope: Any, kind: Any) -> None:
    _compile_or_rule_error(text, scope, kind)


_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    ),
    lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=8), kids, max_size=3)
    ),
    max_leaves=6,
)
_field_values: dict[str, st.SearchStrategy[Any]] = {
    "name": st.one_of(st.sampled_from(["idle", "r-1", "r.2", "", "-x", "a" * 101]), _json),
    "kind": st.one_of(st.sampled_from(["idle", "zombie", ""]), _json),
    "description": _json,
    "action": st.one_of(st.sampled_from(["reclaim", "notify", "right_size", "nope"]), _json),
    "scope": st.one_of(st.sampled_from(["gpu", "workload", "node"]), _json),
    "when": st.one_of(_cond, _json),
    "min_coverage": st.one_of(st.sampled_from([0, 0.5, 1, 1.5, -1]), _json),
    "require_all_gpus": _json,
    "waste_minutes": st.one_of(_numeric, _json),
    "message": st.one_of(
        st.sampled_from(["{gpu} idle", "{nope}", "{gpu!r}", "{gpu:>5}", "{", "}", "{0}"]), _json
    ),
    "enabled": _json,
    "snoozable": _json,
    "classes": st.one_of(st.lists(st.sampled_from(["service", "batch", "bogus"]), max_size=3), _json),
    "whenn": _json,
}
_rule = st.fixed_dictionaries(
    {"name": _field_values["name"], "when": _field_values["when"], "kind": _field_values["kind"]},
    optional={k: v for k, v in _field_values.items() if k not in ("name", "when", "kind")},
)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.fixed_dictionaries({"rules": st.lists(st.one_of(_rule, _json), max_size=4)}),
        st.dictionaries(st.sampled_from(["rules", "rule", "version"]), _json, max_size=2),
        _json,
    ),
    st.none() | st.floats(min_value=60, max_value=86400),
)
@example({"rules": [{"name": "a", "kind": "k", "when": "mean(gpu_util_pct, 30m) < 5"}] * 2}, None)
@example({"rules": [{"name": "a", "kind": "k", "when": "1 < 2", "message": "{gpu.__class__}"}]}, None)
def test_fuzz_rule_packs_only_rule_errors(doc: Any, window_s: float | None) -> None:
    # JSON is YAML: the pack goes through the same loader a rule file or the web editor does.
    text = json.dumps(doc)
    try:
        pack = parse_rule_pack(text, "fuzz.yaml")
    except RuleError:
        return
    with contextlib.suppress(RuleError):
        compile_rules(pack, window_s=window_s)
