"""A metric the source never reported (health readings a replay lacks) is skipped by views:
every aggregate must be exactly what the full scan of its all-NaN ring gives."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np

from gpusteward.analysis.trends import counter_increase
from gpusteward.domain.models import Metric, Sample
from gpusteward.store.window import WindowStore
from gpusteward.store.window_view import WindowView

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _store() -> WindowStore:
    store = WindowStore(window_s=3600, interval_s=60, metrics=(Metric.GPU_UTIL, Metric.XID, Metric.ECC_SBE))
    for i in range(50):
        at = T0 + timedelta(minutes=i)
        util = None if i % 7 == 3 else float(i % 13)
        store.ingest(at, [Sample("a", at, gpu_util_pct=util), Sample("b", at, gpu_util_pct=5.0)])
    return store


def _everything(view: WindowView, m: Metric) -> list[list[float]]:
    return [
        a.tolist()
        for a in (
            view.mean(m, 1800),
            view.min(m, 1800),
            view.max(m, 600),
            view.coverage(m, 1800),
            view.coverage(m, 7200),
            view.fraction_below(m, 1.0, 1800),
            view.last(m),
            view.below_for_s(m, 1.0),
            view.watched_s(m),
            view.slope(m, 1800),
            counter_increase(view, m, 1800),
        )
    ]


def test_holds_data_only_once_a_value_was_stored() -> None:
    store = _store()
    assert store.holds_data(Metric.GPU_UTIL)
    assert not store.holds_data(Metric.XID)  # only None so far
    at = T0 + timedelta(minutes=50)
    store.ingest_arrays(at, {Metric.ECC_SBE: [math.nan, 2.0]})
    assert store.holds_data(Metric.ECC_SBE)
    assert not store.holds_data(Metric.XID)


def test_a_blank_metric_gives_what_scanning_its_all_nan_ring_gives() -> None:
    store = _store()
    now = T0 + timedelta(minutes=49)
    skipped = store.view(now)
    assert np.isnan(store._rings[Metric.XID]).all()
    store._written.add(Metric.XID)  # the same all-NaN ring, now scanned in full
    scanned = store.view(now)
    fast, full = _everything(skipped, Metric.XID), _everything(scanned, Metric.XID)
    assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(fast, full, strict=True))
    assert skipped.age_s().tolist() == scanned.age_s().tolist()
    assert skipped.coverage(Metric.XID, 1800).tolist() == [0.0, 0.0]  # no data is known, not NaN
