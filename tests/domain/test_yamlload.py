"""Hostile and careless YAML: every document the project loads (config, rules, the web's rule
editor) goes through ``parse_yaml``, which must refuse these with a line, quickly and in bounded
memory, and never raise anything but ``ConfigError``."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.yamlload import MAX_YAML_BYTES, MAX_YAML_DEPTH, load_yaml, parse_yaml

BILLION_LAUGHS = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi", strict=True)]
)


@pytest.mark.parametrize(
    ("text", "problem", "line"),
    [
        (BILLION_LAUGHS, "anchors", 1),  # refused at the first anchor, before any expansion
        ("a: &a [*a]", "anchors", 1),
        ("x: 1\ny: *x", "aliases", 2),
        ("base: {a: 1}\nother:\n  <<: {b: 2}\n", "merge keys", 3),
        ("? {a: 1}\n: v\n", "plain value", 1),
        ("? [1, 2]\n: v\n", "plain value", 1),
        ("n: " + "9" * 310, "64 bits", 1),
        ("n: -9223372036854775809", "64 bits", 1),
        ("x: .nan", "finite", 1),
        ("x: .inf", "finite", 1),
        ("x: 1.0e+999", "finite", 1),
        ("protect:\n  users: [a]\nmode: dry-run\nprotect:\n  users: []\n", "duplicate key 'protect'", 4),
        ("mode: dry-run\nmode: enforce\n", "first on line 1", 2),
        ("rules:\n- name: r\n  when: a\n  when: b\n", "duplicate key 'when'", 4),
        ("[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1), "deeper", 1),
    ],
)
def test_hostile_documents_are_refused_with_a_line(text: str, problem: str, line: int) -> None:
    with pytest.raises(ConfigError) as e:
        parse_yaml(text, "cfg.yaml")
    assert problem in e.value.problem
    assert e.value.line == line
    assert str(e.value).startswith(f"cfg.yaml:{line}: ")


def test_plain_documents_still_load_with_lines() -> None:
    doc = parse_yaml("a: 1\nb:\n  - x\n  - {c: 9223372036854775807}\nd: 2.5\ne: yes\n", "f.yaml")
    assert doc.data == {"a": 1, "b": ["x", {"c": 2**63 - 1}], "d": 2.5, "e": True}
    assert doc.line_of(("b", 1, "c")) == 4
    assert parse_yaml("", "f").data is None


def test_deeply_nested_flow_is_refused_not_a_recursion_error() -> None:
    text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ConfigError):
        parse_yaml(text[:MAX_YAML_BYTES])


def test_oversized_document_is_refused_before_parsing() -> None:
    with pytest.raises(ConfigError, match="too large"):
        parse_yaml("a: b\n" * (MAX_YAML_BYTES // 5 + 1))


def test_non_utf8_file_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_bytes(b"mode: dry-run\nname: caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8") as e:
        load_yaml(p)
    assert e.value.line == 2
    assert e.value.path == str(p)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:&*-[]{}?!<> ,\n'\"#|.0123456789e")), max_size=80))
def test_fuzz_only_config_errors(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_yaml(text)
