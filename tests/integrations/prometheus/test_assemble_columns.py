"""The assembler folds series as columns; the reference (``reference_assembler``, the per-point
fold it replaced) must give exactly the same slots, samples, holders, GPUs and memory totals:
over real scrapes (DCGM with pods and health counters, MIG, nvidia_gpu_exporter), with points
at colliding times, unreadable and sentinel values, and the same series filed twice."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from tests.integrations.prometheus.reference_assembler import ReferenceAssembler

from gpusteward.integrations.prometheus.assemble import Assembler
from gpusteward.integrations.prometheus.parse import DEFAULT_SPECS, LabelMap
from gpusteward.integrations.prometheus.query import RawSeries

FIXTURES = Path(__file__).parents[2] / "fixtures" / "prometheus"
IGNORE = re.compile("(nvidia-)?dcgm-exporter.*")
T0 = 1_700_000_000.0


def _labels(name: str) -> list[dict[str, str]]:
    text = (FIXTURES / name).read_text()
    return [
        {"__name__": s.name, **{k: str(v) for k, v in s.labels.items()}}
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]


LABELS = [
    labels
    for name in (
        "dcgm_datadog_metrics.txt",
        "dcgm_health_derived.txt",
        "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.prom.txt",
        "linux-x86_64__nvidia-h100-mig__590.48.01__idle.prom.txt",
    )
    for labels in _labels(name)
    if labels["__name__"] in DEFAULT_SPECS  # the rest are skipped the same way by both
]
_first = [lb for lb in LABELS if lb.get("UUID") == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"]
# The same GPU's series as two pods see them: holders from several series, and changing.
LABELS += [{**lb, "pod": pod, "namespace": "ml"} for lb in _first for pod in ("train-0", "serve-1")]
# Two MIG instances of it: its own series (the parent's) are dropped once they are seen.
LABELS += [{**lb, "GPU_I_ID": gi, "GPU_I_PROFILE": "3g.40gb"} for lb in _first for gi in ("1", "2")]

_raw = st.one_of(
    st.floats(min_value=0, max_value=1e6, allow_nan=False).map(lambda v: round(v, 2)),
    st.floats(min_value=0, max_value=100, allow_nan=False).map(repr),
    st.sampled_from(
        ["NaN", "+Inf", "-1", "-0.0", "9223372036854775794", str(0x7FFFFFF0), "junk", "0", "140737488355328"]
    ),
)
# Times on slot bounds, a hair before one (the fold adds 1e-6 s) and between.
_time = st.tuples(st.integers(0, 8), st.sampled_from([0.0, -5e-7, 4.5])).map(
    lambda k: T0 + 10.0 * k[0] + k[1]
)
_points = st.lists(st.tuples(_time, _raw), max_size=5).map(lambda ps: sorted(ps, key=lambda p: p[0]))
_series = st.tuples(st.integers(0, len(LABELS) - 1), _points)


def _slots(asm: Any) -> list[tuple[float, list[Any], dict[str, Any]]]:
    return [(s.start_s, list(s.samples), dict(s.holders)) for s in asm.slots()]


def _check(series: list[RawSeries], interval_s: float) -> None:
    new = Assembler(DEFAULT_SPECS, LabelMap(), interval_s, IGNORE)
    ref = ReferenceAssembler(DEFAULT_SPECS, LabelMap(), interval_s, IGNORE)
    for s in series:
        assert new.add(s) == ref.add(s)
    assert _slots(new) == _slots(ref)
    assert new.gpus == ref.gpus
    assert new.mem_total == ref.mem_total
    assert new.series == ref.series


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_series, max_size=40), st.sampled_from([10.0, 30.0, 60.0]))
def test_columns_fold_as_the_per_point_reference(
    drawn: list[tuple[int, list[tuple[float, Any]]]], interval_s: float
) -> None:
    _check([RawSeries(LABELS[i], points) for i, points in drawn], interval_s)


def test_whole_real_scrapes_fold_as_the_reference() -> None:
    # Every series of the real scrapes, three scrapes each, with its own value as text.
    series = [
        RawSeries(lb, [(T0 + 10.0 * k, str(1.5 * k + j % 7)) for k in range(3)])
        for j, lb in enumerate(LABELS)
    ]
    _check(series, 30.0)
    _check(series + series[:50], 10.0)  # the same series again (a backfill's second chunk)
    # Falling readings: a GPU's memory total is its largest over the slots, not its last.
    falling = [
        RawSeries(s.labels, [(t, str(900.0 - 1.5 * k)) for k, (t, _) in enumerate(s.points)]) for s in series
    ]
    _check(falling, 10.0)
