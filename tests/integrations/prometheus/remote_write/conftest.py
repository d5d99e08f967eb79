"""Series from real dcgm-exporter scrapes (tests/fixtures/prometheus, see its SOURCES.md), as a
remote-write sender would send them."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytest.importorskip("cramjam")
pytest.importorskip("google.protobuf")

FIXTURES = Path(__file__).parents[3] / "fixtures" / "prometheus"


Scraped = list[tuple[dict[str, str], float]]


def scrape(file: str) -> Scraped:
    """Every sample of a scrape as (labels with ``__name__``, value)."""
    out = []
    for fam in text_string_to_metric_families((FIXTURES / file).read_text()):
        for s in fam.samples:
            out.append(({"__name__": s.name, **s.labels}, float(s.value)))
    return out


@pytest.fixture
def dcgm() -> Scraped:
    """A real dcgm-exporter scrape: a Tesla T4 and an A10G held by a pod."""
    return scrape("dcgm_datadog_metrics.txt")
