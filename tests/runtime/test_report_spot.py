"""The report's Spot savings and Interruptions sections (issues 18 and 19), on a real SQLite file:
per team the GPU-hours on spot and reserved and the money saved against the on-demand price of the
same GPU-hours, and from the audit the notices, the workloads signalled, the slowest notice → last
signal share of the warning, and the advice of workloads interrupted often that never checkpoint."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from gpusteward.analysis.cost import PriceTable
from gpusteward.domain.records import DailyAmounts, DailyKey, ShowbackAmounts, ShowbackKey
from gpusteward.report import write_reports
from gpusteward.runtime.interruption_advice import ADVISE_AFTER, DOC_KEY
from gpusteward.store.db import StateStore

PRICES = PriceTable(per_model={"a100": 2.0, "h100": 4.0}, spot_discount=0.7, reserved_per_model={"h100": 2.5})
A100, H100 = "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"


def row(
    day: str, team: str, user: str, model: str, rate: str, hours: float
) -> tuple[ShowbackKey, ShowbackAmounts]:
    # Spend at the row's own price, as the recorder writes it.
    spend = hours * PRICES.price(model, rate)  # type: ignore[arg-type]
    return ShowbackKey(day, team, user, model, rate, "USD"), ShowbackAmounts(hours, hours / 2, 0, 0, spend)


@pytest.fixture
def store(tmp_path: Path) -> StateStore:
    s = StateStore(f"sqlite:///{tmp_path / 's.db'}")
    s.create_schema()
    s.ledger.add(
        {  # team pages are those of teams with ledger rows
            DailyKey("2026-03-02", "USD", "ann", "nlp", "idle"): DailyAmounts(waste_cost=1.0),
            DailyKey("2026-03-02", "USD", "cy", "vision", "idle"): DailyAmounts(waste_cost=1.0),
        },
        {},
        showback=dict(
            [
                row("2026-03-02", "nlp", "ann", A100, "spot", 10),
                row("2026-03-03", "nlp", "bo", H100, "reserved", 4),
                row("2026-03-03", "nlp", "bo", H100, "on-demand", 6),
                row("2026-03-04", "vision", "cy", A100, "on-demand", 8),
                row("2026-02-20", "nlp", "ann", A100, "spot", 100),  # before the period
            ]
        ),
    )
    return s


LINE = (
    r'data-who="([^"]*)" data-spot-gpu-hours="([^"]*)" '
    r'data-reserved-gpu-hours="([^"]*)" data-saved="([^"]*)"'
)


def section(page: str, name: str) -> str:
    return page.split(f'<section id="{name}">', 1)[1].split("</section>", 1)[0]


def test_spot_savings_per_team_against_the_on_demand_price(store: StateStore, tmp_path: Path) -> None:
    out = tmp_path / "r"
    written = write_reports(
        store, out, period="week", end=date(2026, 3, 5), currency="USD", rate="on-demand", prices=PRICES
    )
    spot = section((out / "index.html").read_text(), "spot")
    found = re.findall(LINE, spot)
    # nlp: 10 A100-hours on spot (2.00 → 0.60: 14.00 saved), 4 H100-hours reserved (4.00 → 2.50: 6.00).
    assert found == [
        ("nlp", "10.00", "4.00", "20.00"),
        ("vision", "0.00", "0.00", "0.00"),
        ("all", "10.00", "4.00", "20.00"),
    ]
    assert "36 % of the 28.0 GPU-hours held ran on spot" in spot
    assert "16.00 USD instead of 36.00 USD on demand: 20.00 USD saved" in spot
    nlp = next(w for w in written if w.scope == "nlp").path.read_text()
    owners = [(w, saved) for w, _, _, saved in re.findall(LINE, section(nlp, "spot"))]
    assert owners == [("ann", "14.00"), ("bo", "6.00"), ("all", "20.00")]
    vision = next(w for w in written if w.scope == "vision").path.read_text()
    assert 'id="spot"' not in vision  # all on demand: nothing saved, no section


def test_without_a_price_table_or_spot_rows_no_section(store: StateStore, tmp_path: Path) -> None:
    write_reports(
        store, tmp_path / "a", period="week", end=date(2026, 3, 5), currency="USD", rate="on-demand"
    )
    assert 'id="spot"' not in (tmp_path / "a" / "index.html").read_text()
    assert 'id="interruptions"' not in (tmp_path / "a" / "index.html").read_text()


def test_interruptions_from_the_audit(store: StateStore, tmp_path: Path) -> None:
    at = datetime(2026, 3, 3, 12, tzinfo=UTC)
    for day, node, share, seconds in ((2, "n1", 0.004, 0.48), (3, "n2", 0.0125, 1.5), (4, "n1", 0.002, 0.24)):
        t = at.replace(day=day)
        store.audit("interruption.notice", t, None, key=f"k{day}", node=node, seconds_left=120.0)
        store.audit(
            "interruption.checkpoints",
            t,
            None,
            key=f"k{day}",
            node=node,
            workloads=3,
            signalled=2,
            not_signalled=1,
            since_notice_seconds=seconds,
            share_of_warning=share,
        )
    # Outside the period (before it), and a notice acted on no further (a rebalance hint).
    store.audit("interruption.notice", datetime(2026, 2, 1, tzinfo=UTC), None, key="old", node="n9")
    store.audit(
        "interruption.checkpoints",
        datetime(2026, 2, 1, tzinfo=UTC),
        None,
        workloads=9,
        signalled=9,
        share_of_warning=0.9,
    )
    store.audit("interruption.rebalance", at, None, key="r", node="n3")
    store.save_doc(
        DOC_KEY,
        {
            "ann/job/train": {"interrupted": ADVISE_AFTER + 1, "checkpointed": 0},
            "bo/job/eval": {"interrupted": ADVISE_AFTER + 2, "checkpointed": 1},
            "cy/job/tune": {"interrupted": ADVISE_AFTER - 1, "checkpointed": 0},
        },
        at=at,
    )
    write_reports(
        store, tmp_path / "r", period="week", end=date(2026, 3, 5), currency="USD", rate="on-demand"
    )
    part = section((tmp_path / "r" / "index.html").read_text(), "interruptions")
    assert re.search(r'id="interruption-notices" data-value="3"', part)
    assert re.search(r'id="interruption-signalled" data-value="6">6 / 9<', part)
    assert re.search(r'id="interruption-slowest" data-value="0.01250">1.2 %<', part)
    assert "(n2, 1.5 s)" in part
    advice = re.findall(r"<li>([^<]*)</li>", part)
    assert len(advice) == 1
    assert advice[0].startswith(f"ann/job/train: interrupted {ADVISE_AFTER + 1} times")
