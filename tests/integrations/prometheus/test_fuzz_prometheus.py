"""Fuzzing the Prometheus side: API answers (real scrapes turned into ``query``/``query_range``
JSON, then mutated, and arbitrary JSON) are series or a ``SourceError``; whatever series come
out, and whatever labels a mangled exposition carries, the assembler folds them into GPUs,
samples and workloads without a Python exception."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from tests.fuzzing import JSON, mutated_json, mutated_lines

from gpusteward.domain.errors import SourceError
from gpusteward.integrations.prometheus.assemble import Assembler
from gpusteward.integrations.prometheus.parse import DEFAULT_SPECS, LabelMap
from gpusteward.integrations.prometheus.query import RawSeries, parse_api_result
from gpusteward.integrations.prometheus.workloads import build_workloads

FIXTURES = Path(__file__).parents[2] / "fixtures" / "prometheus"
SCRAPES = {
    name: (FIXTURES / name).read_text()
    for name in (
        "dcgm_datadog_metrics.txt",
        "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.prom.txt",
        "linux-x86_64__nvidia-h100-mig__590.48.01__idle.prom.txt",
    )
}
IGNORE = re.compile("(nvidia-)?dcgm-exporter.*")


def _families(text: str) -> list[tuple[dict[str, str], float]]:
    return [
        ({"__name__": s.name, **s.labels}, s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]


def _answer(text: str, kind: str) -> dict[str, Any]:
    """A real scrape as Prometheus would answer a query over it (a few points per series)."""
    result: list[dict[str, Any]] = []
    for labels, value in _families(text)[:40]:
        if kind == "vector":
            result.append({"metric": labels, "value": [1_700_000_000.0, repr(value)]})
        else:
            result.append(
                {"metric": labels, "values": [[1_700_000_000.0 + 60 * i, repr(value)] for i in range(3)]}
            )
    return {"status": "success", "data": {"resultType": kind, "result": result}}


ANSWERS = [_answer(text, kind) for text in SCRAPES.values() for kind in ("vector", "matrix")]


def _assemble(series: list[RawSeries]) -> None:
    asm = Assembler(DEFAULT_SPECS, LabelMap(), 60.0, IGNORE)
    for s in series:
        asm.add(s)
    holders: dict[str, Any] = {}
    for slot in asm.slots():
        holders.update(slot.holders)
        for sample in slot.samples:
            asm.gpu(sample.gpu_uuid)
    started = {h.id: datetime(2024, 1, 1, tzinfo=UTC) for h in holders.values() if h is not None}
    build_workloads(holders, started, {u: g.node for u, g in asm.gpus.items()})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.sampled_from(range(len(ANSWERS))).flatmap(lambda i: mutated_json(ANSWERS[i])), JSON))
@example(
    {"status": "success", "data": {"resultType": "vector", "result": [{"metric": [], "value": [1, "1"]}]}}
)
@example(
    {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"UUID": "g"}, "values": [[1e308, "1"]]}]},
    }
)
@example(
    {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": ["nan", "1"]}]}}
)
@example({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}})
def test_fuzz_api_answers_only_source_errors(body: Any) -> None:
    try:
        series, _ = parse_api_result(body)
    except SourceError:
        return
    _assemble(series)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(SCRAPES)).flatmap(lambda n: mutated_lines(SCRAPES[n])))
def test_fuzz_exposition_labels_and_values_assemble(text: str) -> None:
    # Prometheus refuses a scrape its parser cannot read; what it accepts reaches the assembler.
    try:
        samples = _families(text + "\n")
    except (ValueError, IndexError, KeyError, TypeError):
        return
    _assemble(
        [
            RawSeries({k: str(v) for k, v in labels.items()}, [(1_700_000_000.0, repr(value))])
            for labels, value in samples
        ]
    )


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": [1]}]}},
            "metric is not an object",
        ),
        (
            {"status": "success", "data": {"resultType": "matrix", "result": [{"values": [[1e308, "1"]]}]}},
            "out of range",
        ),
        (
            {"status": "success", "data": {"resultType": "vector", "result": [{"value": ["nan", "1"]}]}},
            "out of range",
        ),
        (
            {"status": "success", "data": {"resultType": "vector", "result": [{}]}},
            "not a \\[time, value\\] pair",
        ),
        (
            {"status": "success", "data": {"resultType": "matrix", "result": [{"values": [[None, 1]]}]}},
            "not a number",
        ),
    ],
)
def test_misshapen_answers_are_source_errors(body: Any, problem: str) -> None:
    with pytest.raises(SourceError, match=problem):
        parse_api_result(body)
