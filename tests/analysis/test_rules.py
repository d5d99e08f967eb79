"""Rule packs: the default pack, and errors that name the file, the line and the rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusteward.analysis.rules import (
    RulePack,
    RuleSpec,
    check_template,
    compile_rules,
    default_rule_pack,
    load_rule_pack,
    parse_rule_pack,
)
from gpusteward.domain.errors import ConfigError, RuleError
from gpusteward.domain.models import Metric, RuleAction


def test_default_pack_ships_and_compiles() -> None:
    rules = {r.name: r for r in compile_rules(default_rule_pack())}
    assert set(rules) == {
        "zombie",
        "idle-allocation",
        "quiet-service",
        "idle-notebook",
        "overprovisioned",
        "stalled",
        "gpu-failed",
        "gpu-degrading",
        "gpu-throttled",
    }
    assert {r.name: r.kind for r in rules.values()} == {
        "zombie": "zombie",
        "idle-allocation": "idle",
        "quiet-service": "idle",
        "idle-notebook": "idle",
        "overprovisioned": "overprovisioned",
        "stalled": "stalled",
        "gpu-failed": "health",
        "gpu-degrading": "health",
        "gpu-throttled": "health",
    }
    assert rules["overprovisioned"].action is RuleAction.ADVISE
    assert {n for n, r in rules.items() if r.action is RuleAction.REPAIR} == {
        "gpu-failed",
        "gpu-degrading",
        "gpu-throttled",
    }
    assert rules["overprovisioned"].spec.scope == "workload"
    assert all(
        r.action is RuleAction.RECLAIM
        for n, r in rules.items()
        if n != "overprovisioned" and not n.startswith("gpu-")
    )
    assert rules["zombie"].window_s == 1800
    assert rules["idle-allocation"].window_s == 1800
    assert rules["overprovisioned"].window_s == 3600
    assert rules["stalled"].window_s == 600
    assert rules["quiet-service"].window_s == 210 * 60
    # Each class has its own rules: a service waiting for requests is never a zombie.
    assert rules["zombie"].spec.classes == ["batch"]
    assert rules["quiet-service"].spec.classes == ["service", "unknown"]
    assert rules["idle-notebook"].spec.classes == ["interactive"]
    assert rules["stalled"].metrics == {Metric.GPU_UTIL, Metric.PROC_CPU, Metric.MEM_USED}


def test_window_too_short_for_a_rule_is_an_error() -> None:
    pack = default_rule_pack()
    with pytest.raises(RuleError, match="'quiet-service' looks back 210m"):
        compile_rules(pack, window_s=3600)
    assert len(compile_rules(pack, window_s=4 * 3600)) == 9


def test_disabled_rules_are_checked_but_not_compiled() -> None:
    text = "rules:\n  - {name: a, kind: idle, when: 'max(gpu_util_pct, 1m) < 1', enabled: false}\n"
    assert compile_rules(parse_rule_pack(text)) == []
    with pytest.raises(RuleError, match="unknown function"):
        parse_rule_pack(text.replace("max(", "maxx("))


GOOD = """\
rules:
  - name: first
    kind: idle
    when: max(gpu_util_pct, 10m) < 1
  - name: second
    kind: zombie
    action: reclaim
    when: >
      mean(gpu_util_pct, 30m) < 5
      and last(mem_used_mib) > 1024
    message: "{gpu} idle"
"""


@pytest.mark.parametrize(
    ("old", "new", "line", "fragment"),
    [
        ("    when: max", "    wehn: max", 4, "rule 'first': rules.0.wehn: unknown key"),
        (
            "max(gpu_util_pct, 10m) < 1",
            "max(gpu_util_pct, 10m) < fooo",
            4,
            "rule 'first': when: unknown name",
        ),
        ("and last(mem_used_mib)", "and lst(mem_used_mib)", 8, "rule 'second': when: unknown function"),
        ("  - name: second", "  - name: first", 5, "rule 'first': duplicate rule name"),
        ("action: reclaim", "action: destroy", 7, "rule 'second': rules.1.action: Input should be"),
        (
            "    kind: idle\n",
            "    kind: idle\n    min_coverage: 1.5\n",
            4,
            "rule 'first': rules.0.min_coverage",
        ),
        ("    kind: idle\n", "    kind: idle\n    scope: node\n", 4, "rules.0.scope"),
        ("    when: max(gpu_util_pct, 10m) < 1\n", "", 2, "rule 'first': rules.0.when: Field required"),
        (
            '"{gpu} idle"',
            '"{gpu} idle for {hours}"',
            11,
            "rule 'second': message: unknown placeholder {hours}",
        ),
        (
            "    kind: idle\n",
            "    kind: idle\n    waste_minutes: below_for(gpu_util_pct)\n",
            4,
            "waste_minutes",
        ),
        ("    kind: idle\n", "    kind: idle\n    scope: gpu\n", None, ""),
        ("max(gpu_util_pct, 10m) < 1", "share(max(gpu_util_pct, 10m) < 1) > 0", 4, "scope: workload"),
        ("rules:", "rule:", 1, "rule: unknown key"),
        ("  - name: second", "  - name: [second]", 5, "rules.1.name: Input should be a valid string"),
        ("  - name: first", "  - name: first\n  bad: [", 3, "invalid YAML"),
    ],
)
def test_errors_name_file_line_and_rule(old: str, new: str, line: int | None, fragment: str) -> None:
    text = GOOD.replace(old, new, 1)
    assert text != GOOD
    if line is None:
        assert len(parse_rule_pack(text, "pack.yaml").rules) == 2
        return
    with pytest.raises(RuleError) as caught:
        parse_rule_pack(text, "pack.yaml")
    err = caught.value
    assert isinstance(err, ConfigError)
    assert err.path == "pack.yaml"
    assert err.line == line, str(err)
    assert str(err).startswith(f"pack.yaml:{line}: ")
    assert fragment in str(err)


@pytest.mark.parametrize("text", ["", "# nothing\n", "rules: 3\n", "- a\n- b\n"])
def test_not_a_rule_pack(text: str) -> None:
    with pytest.raises(RuleError):
        parse_rule_pack(text, "x.yaml")


def test_load_from_a_file_names_it(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(GOOD.replace("    when: max", "    wehn: max"), encoding="utf-8")
    with pytest.raises(RuleError, match=r"mine\.yaml:4: "):
        load_rule_pack(path)
    path.write_text(GOOD, encoding="utf-8")
    assert [r.name for r in load_rule_pack(path).rules] == ["first", "second"]
    with pytest.raises(RuleError, match="cannot read"):
        load_rule_pack(tmp_path / "missing.yaml")


def test_pack_built_in_code_is_validated_too() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        RulePack(
            rules=[RuleSpec(name="a", kind="k", when="1 < 2"), RuleSpec(name="a", kind="k", when="1 < 2")]
        )
    pack = RulePack(rules=[RuleSpec(name="a", kind="k", when="1 <")])
    with pytest.raises(RuleError, match="rule 'a': when: syntax error"):
        compile_rules(pack)


@pytest.mark.parametrize(
    ("template", "ok"),
    [
        ("{gpu} at {util}% for {minutes} min, {mem_gib} GiB", True),
        ("no placeholders, {{literal braces}}", True),
        ("{gpu.__class__}", False),
        ("{gpu[0]}", False),
        ("{util:.1f}", False),
        ("{gpu!r}", False),
        ("{unknown}", False),
        ("{gpu", False),
    ],
)
def test_message_templates(template: str, ok: bool) -> None:
    if ok:
        check_template(template)
    else:
        with pytest.raises(RuleError):
            check_template(template)
