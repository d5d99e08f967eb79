"""GPU health from dcgm-exporter through a real Prometheus: a scrape extended with the health
fields (``dcgm_health_derived.txt``, labelled DERIVED) is backfilled, and each GPU comes out
with what its series say, or None where it has none."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpusteward.domain.integration import BuildContext
from gpusteward.domain.models import HEALTH_METRICS, Metric, Sample, utc
from gpusteward.domain.ports import SystemClock
from gpusteward.integrations.prometheus.build import build_source
from gpusteward.integrations.prometheus.client import ClientOptions, PrometheusClient
from gpusteward.integrations.prometheus.localserver import LocalPrometheus, Series
from gpusteward.integrations.prometheus.parse import derive_health
from gpusteward.integrations.prometheus.settings import PrometheusSourceSettings
from gpusteward.integrations.prometheus.source import PrometheusSource

from .conftest import FIXTURES, StartProm

HEALTHY = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"  # the real T4
FAILING = "GPU-00000000-0000-0000-0000-0000000000f1"
BARE = "GPU-00000000-0000-0000-0000-0000000000f2"
REMAPPED = "GPU-00000000-0000-0000-0000-0000000000f3"


def scrape_series(end_s: float, minutes: int = 20, step_s: int = 10) -> list[Series]:
    """Every sample of the derived scrape, held constant every ``step_s`` up to ``end_s``."""
    times = [end_s - i * step_s for i in range(minutes * 60 // step_s, -1, -1)]
    out: list[Series] = []
    for fam in text_string_to_metric_families((FIXTURES / "dcgm_health_derived.txt").read_text()):
        for s in fam.samples:
            # The parser names a counter's sample <family>_total; Prometheus stores the text
            # format's line under the name it carries, which dcgm-exporter gives without it.
            name = fam.name if fam.type == "counter" else s.name
            out.append((name, dict(s.labels), [(t, float(s.value)) for t in times]))
    return out


@pytest.fixture(scope="module")
def health_prom(prom_factory: StartProm, end_s: float) -> LocalPrometheus:
    return prom_factory(scrape_series(end_s), name="health")


def newest(samples: tuple[Sample, ...] | list[Sample]) -> dict[str, Sample]:
    out: dict[str, Sample] = {}
    for s in samples:
        if s.gpu_uuid not in out or s.at >= out[s.gpu_uuid].at:
            out[s.gpu_uuid] = s
    return out


def health(s: Sample) -> dict[str, float | None]:
    return {m.value: s.value(m) for m in sorted(HEALTH_METRICS)}


def source(prom: LocalPrometheus, **kw: object) -> PrometheusSource:
    return PrometheusSource(PrometheusClient(ClientOptions(prom.url)), interval_s=30, window_s=3600, **kw)  # type: ignore[arg-type]


def check(by_gpu: dict[str, Sample]) -> None:
    assert health(by_gpu[FAILING]) == {
        "xid_code": 79.0,
        "xid_fatal": 1.0,
        "ecc_dbe_count": 2.0,
        "ecc_sbe_count": 118.0,
        "retired_pages": 4.0,
        "row_remap_failure": 1.0,  # a retirement is pending
        "throttled": 1.0,
        "pcie_replay_count": 37.0,
    }
    assert health(by_gpu[HEALTHY]) == {
        "xid_code": 0.0,
        "xid_fatal": 0.0,
        "ecc_dbe_count": 0.0,
        "ecc_sbe_count": 0.0,
        "retired_pages": 0.0,
        "row_remap_failure": 0.0,
        "throttled": 0.0,  # 1 = GPU idle: not a slowdown
        "pcie_replay_count": 0.0,
    }
    assert health(by_gpu[REMAPPED]) == {
        "xid_code": 13.0,
        "xid_fatal": 0.0,  # the application's fault
        "ecc_dbe_count": 0.0,
        "ecc_sbe_count": 4.0,
        "retired_pages": 3.0,  # remapped rows
        "row_remap_failure": 1.0,
        "throttled": 1.0,  # SW thermal slowdown
        "pcie_replay_count": 0.0,
    }
    # No health series: every field None, and the GPU is read as before.
    assert set(health(by_gpu[BARE]).values()) == {None}
    assert by_gpu[BARE].gpu_util_pct is not None


def test_a_tick_reads_health_and_leaves_it_missing_where_absent(
    health_prom: LocalPrometheus, end_s: float
) -> None:
    src = source(health_prom)
    obs = src.observe(utc(end_s + 5))
    assert obs.errors == ()
    check(newest(obs.samples))
    assert src.queries == 1  # the health metrics ride in the tick's one query


def test_the_backfill_reads_health_too(health_prom: LocalPrometheus, end_s: float) -> None:
    history = source(health_prom).history(utc(end_s - 1200), utc(end_s + 5), 30)
    assert history
    check(newest([s for o in history for s in o.samples]))


def test_health_metrics_can_be_disabled_or_remapped(health_prom: LocalPrometheus, end_s: float) -> None:
    # As a user would in source.prometheus: disabled_metrics, and metrics for a new meaning.
    cfg = PrometheusSourceSettings(
        url=health_prom.url,
        disabled_metrics=["DCGM_FI_DEV_XID_ERRORS"],
        metrics={"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": {"field": "pcie_replay_count", "scale": 0.5}},  # type: ignore[dict-item]
    )
    src = build_source(cfg, BuildContext(clock=SystemClock(), tick_s=30, window_s=3600))
    failing = newest(src.observe(utc(end_s + 5)).samples)[FAILING]
    assert failing.xid_code is None
    assert failing.xid_fatal is None
    assert failing.ecc_dbe_count == 2.0
    assert failing.pcie_replay_count == 18.5  # 37 replays, scaled as configured
    src.close()


def test_derive_health_only_fills_what_series_gave() -> None:
    assert _derived({}) == {}
    assert _derived({"xid_code": 48.0}) == {"xid_code": 48.0, "xid_fatal": 1.0}
    assert _derived({"retired_sbe_pages": 2.0}) == {"retired_sbe_pages": 2.0, "retired_pages": 2.0}
    # Remapped rows win over retired pages where a GPU reports both (Ampere reports 0 retired).
    both = {"retired_sbe_pages": 0.0, "remapped_rows_correctable": 5.0, "remapped_rows_uncorrectable": 1.0}
    assert _derived(both)["retired_pages"] == 6.0
    assert _derived({"clock_event_reasons": 4.0})["throttled"] == 0.0  # SW power cap: a choice
    assert _derived({"clock_event_reasons": 128.0})["throttled"] == 1.0  # HW power brake
    assert _derived({"retired_pending": 0.0, "row_remap_failure": 1.0})["row_remap_failure"] == 1.0


def _derived(values: dict[str, float]) -> dict[str, float]:
    """``derive_health`` over one reading: its columns, one row each (NaN: not read)."""
    cols = {k: np.array([v]) for k, v in values.items()}
    derive_health(cols, 1)
    return {k: float(c[0]) for k, c in cols.items() if not np.isnan(c[0])}


def test_a_field_name_for_health_is_accepted_in_overrides() -> None:
    for name in ("xid_code", "clock_event_reasons", "retired_pending", Metric.THROTTLED.value):
        PrometheusSourceSettings(metrics={"x": {"field": name}})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="unknown field"):
        PrometheusSourceSettings(metrics={"x": {"field": "xid"}})  # type: ignore[dict-item]
