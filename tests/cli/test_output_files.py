"""Files the CLI writes (audit exports, HTML reports): one page per team however the teams are
named, all or nothing on a full disk, and one red line (never a traceback) when the output
cannot be written."""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator
from datetime import UTC, date, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.report import write_reports
from gpusteward.report.render import team_files
from gpusteward.store.db import StateStore
from gpusteward.store.ledger import DailyAmounts, DailyKey, LedgerStore

runner = CliRunner()
#: Pairs of team names that one slug used to give the same file.
CLASHING = ["a/b", "a-b", "..", "team", "NLP", "nlp"]


def invoke(*args: str | Path) -> tuple[int, str]:
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback is a failure of its own
    return result.exit_code, result.output


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StateStore]:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    monkeypatch.setenv("GPUSTEWARD_STORE__URL", url)
    monkeypatch.setenv("COLUMNS", "300")
    s = StateStore(url)
    s.create_schema()
    yield s
    s.close()


@contextlib.contextmanager
def disk_full_after(size: int) -> Iterator[None]:
    """Files may not grow past ``size`` bytes (as on a full disk): writes fail with EFBIG."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def with_teams(store: StateStore, teams: list[str]) -> None:
    daily = {
        DailyKey("2025-03-04", "USD", f"u{i}", t, "idle"): DailyAmounts(1.0 + i, 3.0)
        for i, t in enumerate(teams)
    }
    LedgerStore(store).add(daily, {})


class Links(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v or "" for k, v in attrs if k == "href"]


def test_teams_whose_names_slug_alike_get_their_own_pages(store: StateStore, tmp_path: Path) -> None:
    with_teams(store, CLASHING)
    out = tmp_path / "html"
    written = write_reports(store, out, period="day", end=date(2025, 3, 5), currency="USD", rate="on-demand")
    pages = {w.scope: w.path for w in written}
    assert set(pages) == {"cluster", *CLASHING}
    names = [p.name.lower() for p in pages.values()]
    assert len(set(names)) == len(names)  # distinct even on a case-insensitive file system
    assert all(p.parent == out for p in pages.values())
    for team in CLASHING:
        assert f"u{CLASHING.index(team)}" in pages[team].read_text()  # each page is its own team's
    hrefs = Links(pages["cluster"].read_text()).hrefs
    assert sorted(hrefs) == sorted(pages[t].name for t in CLASHING)
    assert team_files(["nlp", "vision"]) == {"nlp": "team-nlp.html", "vision": "team-vision.html"}


def audit_records(store: StateStore, n: int) -> None:
    for i in range(n):
        store.audit("test.event", datetime(2025, 3, 4, tzinfo=UTC), workload_id=f"w{i}", note="x" * 200)


def test_audit_export_on_a_full_disk_keeps_the_old_file_and_says_so(
    store: StateStore, tmp_path: Path
) -> None:
    audit_records(store, 60)
    target = tmp_path / "audit.jsonl"
    target.write_text("the previous export\n")
    with disk_full_after(4096):
        code, out = invoke("audit", "export", "--output", target)
    assert code == 1
    assert out.startswith("error: cannot write")
    assert out.count("\n") == 1
    assert target.read_text() == "the previous export\n"
    assert [p.name for p in tmp_path.iterdir() if "audit" in p.name] == ["audit.jsonl"]  # no temporary left
    code, _ = invoke("audit", "export", "--output", target)
    assert code == 0
    assert len(target.read_text().splitlines()) == 60


@pytest.mark.parametrize("where", ["missing/audit.jsonl", "."])
def test_audit_export_to_a_missing_folder_or_a_folder_is_one_line(
    store: StateStore, tmp_path: Path, where: str
) -> None:
    code, out = invoke("audit", "export", "--output", tmp_path / where)
    assert code == 1
    assert out.startswith("error: ")
    assert out.count("\n") == 1


def test_report_on_a_full_disk_leaves_no_empty_index(store: StateStore, tmp_path: Path) -> None:
    with_teams(store, ["nlp", "vision"])
    out = tmp_path / "html"
    out.mkdir()
    with disk_full_after(2048):
        code, text = invoke("report", "--out", out, "--period", "day", "--end", "2025-03-04")
    assert code == 1
    assert text.startswith("error: cannot write")
    assert text.count("\n") == 1
    assert list(out.iterdir()) == []


def test_report_into_an_existing_file_is_one_line(store: StateStore, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("not a folder")
    code, text = invoke("report", "--out", out)
    assert code == 1
    assert text == f"error: {out}: exists and is not a folder\n"
