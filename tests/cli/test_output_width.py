"""Tables outside a terminal (CI logs, a pipe): a fixed wide layout, ids whole, prose wrapped at spaces."""

from __future__ import annotations

import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpusteward.analysis.rules import default_rule_pack
from gpusteward.cli import app, output

runner = CliRunner()


def _rows(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    """The header and the body lines (cells, stripped) of the table printed under ``title``."""
    lines = text.splitlines()
    start = lines.index(title)
    header = [c.strip() for c in lines[start + 2].strip("┃").split("┃")]
    body = []
    for line in lines[start + 4 :]:
        if not line.startswith("│"):
            break
        body.append([c.strip() for c in line.strip("│").split("│")])
    return header, body


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> str:
    env = {"COLUMNS": None, "LINES": None, "XDG_STATE_HOME": str(tmp_path_factory.mktemp("state"))}
    result = runner.invoke(app, ["demo", "--hours", "4"], env=env)  # stdout is not a terminal here
    assert result.exit_code == 0, result.output
    return result.stdout


def test_without_a_terminal_the_demo_uses_the_wide_layout(demo):
    text = demo
    widths = {len(line) for line in text.splitlines() if line.startswith(("┏", "└"))}
    assert widths
    assert max(widths) <= output.PIPE_WIDTH
    assert max(widths) > 100  # not Rich's 80-column fallback


def test_no_id_or_name_is_cut_and_no_line_is_a_lone_word_fragment(demo):
    text = demo
    header, body = _rows(text, "Findings (episodes)")
    assert header[:2] == ["rule", "workload"]
    rules = {r.name for r in default_rule_pack().rules}
    assert body
    for row in body:  # one line per finding: a whole rule name and a whole workload id
        assert row[0] in rules, row
        assert re.fullmatch(r"[a-z]+-\d{4}", row[1]), row
    header, body = _rows(text, "Stops (L2 and above)")
    assert body
    detail = header.index("detail")
    for row in body:
        if row[0]:  # a row's first line: every short column is whole on it
            assert all(row[i] for i in range(detail)), row
            continue
        # A continuation line holds prose only, and more than one broken-off word of it.
        assert not any(row[:detail]), row
        words = row[detail].split()
        assert len(words) > 1 or len(row[detail]) >= output.PROSE_MIN_WIDTH - 4, row


def test_in_a_narrow_terminal_ids_stay_whole_and_prose_takes_the_rest():
    table = output.table("Stops", "time", "workload", "level", "step", "status", "detail")
    table.add_row("2026-01-05 00:37", "process-0013", "L2", "graceful-stop", "succeeded", "word " * 30)
    console = Console(width=100, force_terminal=True, record=True)
    console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "process-0013" in text
    assert "graceful-stop" in text
