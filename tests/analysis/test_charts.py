"""Inline SVG charts: valid XML, one bar per value, heights to scale, text escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from gpusteward.report.charts import bar_chart, fmt, hbar_chart, nice_max

SVG = "{http://www.w3.org/2000/svg}"


def bars(svg: str) -> list[ET.Element]:
    return [r for r in ET.fromstring(svg).iter(f"{SVG}rect") if r.get("class") == "bar"]


@pytest.mark.parametrize(
    ("value", "top"),
    [
        (0.3, 0.5),
        (1, 1),
        (1.01, 2),
        (3, 5),
        (7, 10),
        (10, 10),
        (11, 20),
        (240, 250),
        (0, 1),
        (-5, 1),
        (float("nan"), 1),
    ],
)
def test_nice_max(value: float, top: float) -> None:
    assert nice_max(value) == top


@pytest.mark.parametrize(
    ("value", "text"), [(0, "0"), (2.0, "2"), (0.25, "0.25"), (12.345, "12.35"), (1234.5, "1,234")]
)
def test_fmt(value: float, text: str) -> None:
    assert fmt(value) == text


def test_bar_chart_draws_each_value_to_scale() -> None:
    svg = bar_chart(
        ["mon", "tue", "wed"], {"waste": [10, 20, 0], "saved": [5, 0, 2.5]}, title="Per day", unit="USD"
    )
    root = ET.fromstring(svg)
    assert root.get("data-chart") == "bar"
    assert root.find(f"{SVG}title").text == "Per day"  # type: ignore[union-attr]
    drawn = bars(svg)
    assert [(b.get("data-series"), b.get("data-label"), float(b.get("data-value", ""))) for b in drawn] == [
        ("waste", "mon", 10),
        ("saved", "mon", 5),
        ("waste", "tue", 20),
        ("saved", "tue", 0),
        ("waste", "wed", 0),
        ("saved", "wed", 2.5),
    ]
    heights = {(b.get("data-series"), b.get("data-label")): float(b.get("height", "")) for b in drawn}
    assert heights[("waste", "tue")] == pytest.approx(2 * heights[("waste", "mon")], abs=0.15)
    assert heights[("saved", "mon")] == pytest.approx(2 * heights[("saved", "wed")], abs=0.15)
    assert heights[("waste", "wed")] == 0
    assert drawn[0].find(f"{SVG}title").text == "mon · waste: 10 USD"  # type: ignore[union-attr]
    assert "saved" in {t.text for t in root.iter(f"{SVG}text")}  # a legend for two series


def test_text_is_escaped() -> None:
    svg = hbar_chart(['<script>alert("x")</script> & co'], [3.0], title="A & <B>", unit="€")
    root = ET.fromstring(svg)  # parses: nothing leaked into the markup
    assert root.find(f"{SVG}title").text == "A & <B>"  # type: ignore[union-attr]
    (bar,) = bars(svg)
    assert bar.get("data-label") == '<script>alert("x")</script> & co'
    assert "<script>" not in svg


def test_hbar_chart() -> None:
    svg = hbar_chart(["alice", "bob"], [5.0, 2.5], title="Top", unit="GPU-h")
    drawn = bars(svg)
    assert [b.get("data-label") for b in drawn] == ["alice", "bob"]
    assert float(drawn[0].get("width", "")) == pytest.approx(2 * float(drawn[1].get("width", "")), abs=0.15)
    assert ET.fromstring(svg).get("data-chart") == "hbar"


def test_empty_and_bad_input() -> None:
    for svg in (
        bar_chart([], {}, title="t"),
        bar_chart(["a"], {"s": [0]}, title="t"),
        hbar_chart([], [], title="t"),
    ):
        assert bars(svg) == []
        assert "no data" in svg
        ET.fromstring(svg)
    with pytest.raises(ValueError, match="one value per category"):
        bar_chart(["a", "b"], {"s": [1]}, title="t")
    with pytest.raises(ValueError, match="one value per label"):
        hbar_chart(["a"], [1, 2], title="t")
