"""The remote-write source's ``Fold`` keeps what each series and GPU is between ticks; this holds
it to the plain way it replaces: an ``Assembler`` made afresh for every drain, taken in by the
same book. Over several ticks, with series coming and going, pods changing, identities filled
in by later series, MIG instances, memory totals growing, the book forgetting GPUs that went
silent and the receiver numbering its series again, both give the same observations."""

from __future__ import annotations

from datetime import datetime

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusteward.domain.models import Observation, utc
from gpusteward.domain.sample_table import SampleTable
from gpusteward.integrations.prometheus.remote_write import Receiver, RemoteWriteSource, decode, encode
from gpusteward.integrations.prometheus.source import PrometheusSource

T0 = 1_760_000_000  # s
TICK = 30
_METRICS = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",  # with used: a memory total
    "nvidia_smi_gpu_info",  # info: names a GPU, nothing to fold
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
)


class _Afresh(RemoteWriteSource):
    """The source as it was: every drain assembled from nothing by the book's ``Assembler``."""

    def observe(self, now: datetime) -> Observation:
        book = self.book
        asm = book._assembler()
        asm.add_batch(self.receiver.drain_batch())
        slots = asm.slots()
        book._absorb_gpus(asm)
        changed = False
        for slot in slots:
            changed = book._apply(slot) or changed
        book._forget(now.timestamp() - book.window_s)
        return Observation(
            at=now,
            gpus=book._gpu_list(),
            samples=SampleTable.concat([slot.samples for slot in slots]),
            workloads=book._workloads(changed),
        )


def _labels(metric: int, gpu: int, pod: int, shape: int) -> dict[str, str]:
    """A series of GPU ``gpu`` (3 is a MIG instance of GPU 0) held by pod ``pod`` (0: none);
    ``shape`` says which identity labels it carries: the whole identity, no model, no index,
    another node."""
    labels = {"__name__": _METRICS[metric], "UUID": f"GPU-{gpu % 3}", "Hostname": "n1"}
    if gpu == 3:
        labels |= {"GPU_I_ID": "1", "GPU_I_PROFILE": "1g.10gb"}
    if shape != 1:
        labels["modelName"] = "NVIDIA A100"
    if shape != 2:
        labels["gpu"] = str(gpu % 3)
    if shape == 3:
        labels["Hostname"] = "n2"
    if pod:
        labels |= {"pod": f"p{pod}", "namespace": "ml"}
    return labels


_point = st.tuples(
    st.integers(0, len(_METRICS) - 1),
    st.integers(0, 3),  # GPU
    st.integers(0, 2),  # pod
    st.sampled_from([0, 0, 0, 1, 2, 3]),  # identity labels
    st.integers(0, TICK - 1),  # seconds into the tick
    st.sampled_from([0.0, 5.0, 40000.0, 80000.0, float("nan")]),
)
# A tick: its requests, and how long before it the book forgets a silent GPU (its window).
_tick = st.tuples(st.lists(st.lists(_point, max_size=8), max_size=3), st.sampled_from([TICK, 3600]))


def _bodies(tick: int, requests: list[list[tuple[int, int, int, int, int, float]]]) -> list[bytes]:
    start = T0 + tick * TICK
    return [
        encode((_labels(m, g, p, shape), [((start + dt) * 1000, v)]) for m, g, p, shape, dt, v in req)
        for req in requests
    ]


def _source(cls: type[RemoteWriteSource], now: list[float], renumber: bool) -> RemoteWriteSource:
    book = PrometheusSource(client=None, interval_s=10, window_s=3600)  # type: ignore[arg-type]
    receiver = Receiver(book.specs, clock=lambda: now[0], forget_after_s=2 * TICK if renumber else 1e9)
    if renumber:  # series silent for two ticks are forgotten, and the others numbered again, every tick
        receiver._pruned_at = -np.inf
    return cls(receiver, book)


@settings(max_examples=200, deadline=None)
@given(st.lists(_tick, min_size=1, max_size=6), st.booleans())
def test_the_fold_observes_as_assembling_each_drain_afresh(
    ticks: list[tuple[list[list[tuple[int, int, int, int, int, float]]], int]], renumber: bool
) -> None:
    now = [float(T0)]
    kept, afresh = _source(RemoteWriteSource, now, renumber), _source(_Afresh, now, renumber)
    for k, (requests, window) in enumerate(ticks):
        for body in _bodies(k, requests):
            for src in (kept, afresh):
                src.receiver.push(decode(body, 1 << 24))
        now[0] = T0 + (k + 1) * TICK
        for src in (kept, afresh):
            src.book.window_s = window
        got, want = kept.observe(utc(now[0])), afresh.observe(utc(now[0]))
        assert list(got.gpus) == list(want.gpus)
        assert list(got.samples) == list(want.samples)
        assert got.workloads == want.workloads
        assert kept.book._holders == afresh.book._holders


def test_the_steady_state_hands_the_book_nothing_it_has() -> None:
    """A tick that brings the same series as the last hands over no GPU: the book is not asked
    to look at them again; a memory total that grows is handed over, with only that GPU."""
    now = [float(T0)]
    src = _source(RemoteWriteSource, now, renumber=False)
    series = [(m, g, 1, 0, 5, 40000.0) for m in (0, 1, 2) for g in (0, 1, 2)]
    for k in range(3):
        for body in _bodies(k, [series]):
            src.receiver.push(decode(body, 1 << 24))
        now[0] = T0 + (k + 1) * TICK
        if k == 2:  # the receiver looks for silent series, finds none: the numbers stand
            src.receiver._pruned_at = -np.inf
        obs = src.observe(utc(now[0]))
        assert [g.uuid for g in obs.gpus] == ["GPU-0", "GPU-1", "GPU-2"]
        assert list(src.fold.gpus) == (["GPU-0", "GPU-1", "GPU-2"] if k == 0 else [])
    assert src.receiver._epoch == 0
    grown = [(2, 1, 1, 0, 5, 80000.0)]  # GPU-1's free memory read higher: its total grows
    for body in _bodies(3, [series[:5] + grown]):
        src.receiver.push(decode(body, 1 << 24))
    obs = src.observe(utc(T0 + 4 * TICK))
    assert list(src.fold.gpus) == ["GPU-1"]
    assert {g.uuid: g.memory_total_mib for g in obs.gpus}["GPU-1"] == 120000.0


def test_a_pod_back_on_a_gpu_the_book_forgot_starts_again() -> None:
    """Pod p1 holds GPU-0, whose exporter then goes silent for longer than the window while the
    other GPUs report as before (no holder changes); when GPU-0 comes back with p1, p1 started
    then, not when the book first saw it."""
    now = [float(T0)]
    src = _source(RemoteWriteSource, now, renumber=False)
    src.book.window_s = 2 * TICK
    for k in range(5):
        gpus = (0, 1) if k in (0, 4) else (1,)
        for body in _bodies(k, [[(0, g, g + 1, 0, 5, 50.0) for g in gpus]]):
            src.receiver.push(decode(body, 1 << 24))
        now[0] = T0 + (k + 1) * TICK
        obs = src.observe(utc(now[0]))
    started = {w.id: w.started_at for w in obs.workloads}
    assert started["pod/ml/p2"] == utc(T0)
    assert started["pod/ml/p1"] == utc(T0 + 4 * TICK)
