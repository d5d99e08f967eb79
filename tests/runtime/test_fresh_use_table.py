"""Showback's per-GPU use of a tick read from columns (a trace, a remote-write batch) is the use
read from the same samples as objects, to the last bit: the same GPUs, order, means and powers."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.domain.models import Sample
from gpusteward.domain.sample_table import SampleTable
from gpusteward.runtime.fresh_use import UseReader, fresh_use

T0 = datetime(2026, 12, 1, tzinfo=UTC)
_value = st.one_of(st.none(), st.floats(min_value=-5.0, max_value=130.0, allow_nan=False))
_sample = st.builds(
    Sample,
    gpu_uuid=st.sampled_from(["GPU-a", "GPU-b", "GPU-c", "GPU-d"]),
    at=st.integers(0, 3).map(lambda k: T0 + timedelta(seconds=10 * k)),
    gpu_util_pct=_value,
    power_w=_value,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_sample, max_size=16), st.integers(-1, 3), st.booleans())
def test_use_from_a_table_is_use_from_its_rows(samples: list[Sample], k: int, unique: bool) -> None:
    if unique:  # one sample per GPU: the fast path
        samples = list({s.gpu_uuid: s for s in samples}.values())
    prev = T0 + timedelta(seconds=10 * k)
    expected = fresh_use(samples, prev)
    table = SampleTable.of(samples)
    got = fresh_use(SampleTable(table.uuids, table.at_s, table.columns), prev)
    assert list(got.items()) == list(expected.items())


def test_three_scrapes_of_a_gpu_are_held_once_at_their_means() -> None:
    samples = [
        Sample("GPU-a", T0 + timedelta(seconds=s), gpu_util_pct=u, power_w=p)
        for s, u, p in [(10, 30.0, 100.0), (20, 150.0, None), (30, 60.0, 200.0)]
    ]
    assert fresh_use(SampleTable.of(samples), T0) == {"GPU-a": (190.0 / 3, 150.0)}


@settings(max_examples=200, deadline=None)
@given(st.lists(_sample, max_size=16), st.lists(_value, min_size=16, max_size=16), st.integers(-1, 3))
def test_a_reader_keeps_its_numbering_while_the_same_gpus_come(
    samples: list[Sample], utils: list[float | None], k: int
) -> None:
    """Two ticks naming the same GPUs in the same order, with other figures: the second is
    read with the first's numbering (the same ``uuids`` list), and still as its rows say."""
    prev = T0 + timedelta(seconds=10 * k)
    later = [replace(s, gpu_util_pct=u) for s, u in zip(samples, utils, strict=False)]
    reader = UseReader()
    first = reader.read(SampleTable.of(samples), prev)
    second = reader.read(SampleTable.of(later), prev)
    assert list(first.items()) == list(fresh_use(samples, prev).items())
    assert list(second.items()) == list(fresh_use(later, prev).items())
    fresh_rows = [s.gpu_uuid for s in later if s.gpu_util_pct is not None and s.at > prev]
    if fresh_rows and fresh_rows == [
        s.gpu_uuid for s in samples if s.gpu_util_pct is not None and s.at > prev
    ]:
        assert second.uuids is first.uuids
