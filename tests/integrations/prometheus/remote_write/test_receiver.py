"""Decoding remote-write bodies built from real dcgm-exporter series, the receiver's order rules
and buffer bound, and the source's mapping (the same as the prometheus source's)."""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta

import cramjam
import pytest

from gpusteward.domain.integration import BuildContext
from gpusteward.domain.models import Metric, WorkloadKind, utc
from gpusteward.integrations.prometheus.assemble import Assembler
from gpusteward.integrations.prometheus.parse import DEFAULT_SPECS, LabelMap
from gpusteward.integrations.prometheus.query import RawSeries
from gpusteward.integrations.prometheus.remote_write import (
    BadBody,
    BufferFull,
    Receiver,
    TooLarge,
    decode,
    encode,
)
from gpusteward.integrations.prometheus.remote_write.build import build
from gpusteward.integrations.prometheus.remote_write.proto.remote_pb2 import WriteRequest
from gpusteward.integrations.prometheus.remote_write.settings import RemoteWriteSettings
from gpusteward.integrations.prometheus.remote_write.wire import labels as label_dict
from gpusteward.integrations.sim import SimClock

Scraped = list[tuple[dict[str, str], float]]
T0 = 1_760_000_000_000  # ms
NOW = datetime(2025, 10, 9, 9, 0, tzinfo=utc(0).tzinfo)


def _receiver(max_samples: int = 1_000_000, **kw: object) -> Receiver:
    return Receiver(DEFAULT_SPECS, max_samples=max_samples, clock=lambda: T0 / 1000 + 60, **kw)  # type: ignore[arg-type]


def test_a_body_of_real_dcgm_series_decodes_to_the_same_series(dcgm: Scraped) -> None:
    body = encode((labels, [(T0, v)]) for labels, v in dcgm)
    req = decode(body, 1 << 24)
    assert len(req.labels) == len(dcgm)
    assert req.counts.tolist() == [1] * len(dcgm)
    got = {
        tuple(sorted(label_dict(key).items())): (t, v)
        for key, t, v in zip(req.labels, req.t_ms.tolist(), req.values.tolist(), strict=True)
    }
    for labels, v in dcgm:
        key = tuple(sorted(labels.items()))
        assert got[key][0] == T0
        assert got[key][1] == v or (math.isnan(v) and math.isnan(got[key][1]))


def test_malformed_bodies_are_bad_requests(dcgm: Scraped) -> None:
    good = encode((labels, [(T0, v)]) for labels, v in dcgm[:5])
    with pytest.raises(BadBody, match="snappy"):
        decode(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 1 << 24)
    with pytest.raises(BadBody, match="snappy"):
        decode(good[:-7], 1 << 24)  # cut short
    junk = bytes(cramjam.snappy.compress_raw(b"\x0a\xff\xff\xff\x0f not protobuf"))
    with pytest.raises(BadBody, match="WriteRequest"):
        decode(junk, 1 << 24)
    # Uncompressed protobuf, as a sender that forgot snappy would send it.
    plain = WriteRequest()
    plain.ParseFromString(bytes(cramjam.snappy.decompress_raw(good)))
    with pytest.raises(BadBody):
        decode(plain.SerializeToString(), 1 << 24)


def test_what_a_body_declares_it_expands_to_is_checked_before_expanding() -> None:
    bomb = bytes(cramjam.snappy.compress_raw(b"\x00" * 5_000_000))
    assert len(bomb) < 300_000
    with pytest.raises(TooLarge, match="5000000"):
        decode(bomb, 1_000_000)


def test_exact_duplicates_are_ignored_and_older_samples_dropped_as_prometheus_orders_them(
    dcgm: Scraped,
) -> None:
    util = next(labels for labels, _ in dcgm if labels["__name__"] == "DCGM_FI_DEV_GPU_UTIL")
    rx = _receiver()
    first = rx.push(decode(encode([(util, [(T0, 10.0), (T0 + 1000, 20.0)])]), 1 << 24))
    assert (first.accepted, first.duplicates, first.out_of_order) == (2, 0, 0)
    # A resend (same timestamp, same value), an older sample, one at the newest timestamp with
    # another value, and a new one: Prometheus would answer 400 and keep none of them.
    again = rx.push(
        decode(
            encode([(util, [(T0 + 1000, 20.0), (T0 + 500, 15.0), (T0 + 1000, 99.0), (T0 + 2000, 30.0)])]),
            1 << 24,
        )
    )
    assert (again.accepted, again.duplicates, again.out_of_order) == (1, 1, 2)
    (series,) = rx.drain()
    assert [p[1] for p in series.points] == [10.0, 20.0, 30.0]
    assert [p[0] for p in series.points] == [T0 / 1000, T0 / 1000 + 1, T0 / 1000 + 2]
    # The order is remembered across drains: the next tick's late sample is still dropped.
    late = rx.push(decode(encode([(util, [(T0 + 1500, 1.0)])]), 1 << 24))
    assert late.out_of_order == 1
    assert rx.drain() == []
    assert rx.stats.out_of_order == 3
    assert rx.stats.duplicates == 1
    assert rx.stats.accepted == 3


def test_a_series_twice_in_one_request_is_one_series_in_order(dcgm: Scraped) -> None:
    # New the first time the receiver sees it, and sent twice in that request (a sender that
    # split its samples): one series, the second part's older sample out of order.
    util = next(labels for labels, _ in dcgm if labels["__name__"] == "DCGM_FI_DEV_GPU_UTIL")
    rx = _receiver()
    got = rx.push(
        decode(encode([(util, [(T0, 1.0), (T0 + 2000, 3.0)]), (util, [(T0 + 1000, 2.0)])]), 1 << 24)
    )
    assert (got.accepted, got.out_of_order) == (2, 1)
    (series,) = rx.drain()
    assert [v for _, v in series.points] == [1.0, 3.0]
    assert rx.stats.series == 1


def _prune_before_the_lock(rx: Receiver, now: float) -> None:
    """The next ``push`` finds, when it takes the lock, that a drain on another thread has just
    looked for silent series (as of ``now``): after its look-up, before its lock."""
    lock = rx._lock

    class PruneFirst:
        def __enter__(self) -> None:
            rx._lock = lock
            with lock:
                rx._prune(now)
            lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            lock.__exit__(*exc)

    rx._lock = PruneFirst()  # type: ignore[assignment]


def test_a_series_forgotten_between_its_look_up_and_the_lock_is_made_again(dcgm: Scraped) -> None:
    # push looks a known series up outside the lock; a drain may forget it (silent for
    # forget_after_s) before push takes the lock. Then it is known again, as a new series.
    util = next(labels for labels, _ in dcgm if labels["__name__"] == "DCGM_FI_DEV_GPU_UTIL")
    now = [T0 / 1000]
    rx = Receiver(DEFAULT_SPECS, clock=lambda: now[0], forget_after_s=60)
    rx.push(decode(encode([(util, [(T0, 1.0)])]), 1 << 24))
    rx.drain()
    now[0] += 3600
    _prune_before_the_lock(rx, now[0])
    got = rx.push(decode(encode([(util, [(T0 + 3_600_000, 2.0)])]), 1 << 24))
    assert got.accepted == 1
    (series,) = rx.drain()
    assert series.labels == util
    assert series.points == [(T0 / 1000 + 3600, 2.0)]
    # Known again, order and all: a resend of an older sample is dropped.
    assert rx.stats.series == 1
    assert rx.push(decode(encode([(util, [(T0 + 1_000_000, 9.0)])]), 1 << 24)).out_of_order == 1


def test_a_series_numbered_again_between_its_look_up_and_the_lock_keeps_its_own_samples(
    dcgm: Scraped,
) -> None:
    # Two series; the first falls silent. A drain on another thread forgets it and numbers the
    # second again (1 -> 0) after push looked the second up (as 1) and before it took the lock.
    util, used = (
        next(labels for labels, _ in dcgm if labels["__name__"] == name)
        for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED")
    )
    now = [T0 / 1000]
    rx = Receiver(DEFAULT_SPECS, clock=lambda: now[0], forget_after_s=60)
    rx.push(decode(encode([(util, [(T0, 1.0)]), (used, [(T0, 5.0)])]), 1 << 24))
    rx.drain()
    now[0] += 50
    rx.push(decode(encode([(used, [(T0 + 50_000, 6.0)])]), 1 << 24))
    rx.drain()
    now[0] += 30
    _prune_before_the_lock(rx, now[0])
    got = rx.push(decode(encode([(used, [(T0 + 80_000, 7.0)])]), 1 << 24))
    assert got.accepted == 1
    batch = rx.drain_batch()
    assert batch.labels == [used]
    assert batch.values.tolist() == [7.0]
    assert rx.stats.series == 1


def test_samples_far_ahead_of_the_clock_are_dropped(dcgm: Scraped) -> None:
    util = next(labels for labels, _ in dcgm if labels["__name__"] == "DCGM_FI_DEV_GPU_UTIL")
    rx = _receiver()
    got = rx.push(decode(encode([(util, [(T0, 1.0), (T0 + 3_600_000, 2.0)])]), 1 << 24))
    assert (got.accepted, got.too_new) == (1, 1)


def test_only_series_gpusteward_reads_are_kept(dcgm: Scraped) -> None:
    rx = _receiver()
    rx.push(decode(encode((labels, [(T0, v)]) for labels, v in dcgm), 1 << 24))
    kept = {s.name for s in rx.drain()}
    assert kept == {labels["__name__"] for labels, _ in dcgm if labels["__name__"] in DEFAULT_SPECS}
    assert "DCGM_FI_DEV_SM_CLOCK" not in kept  # read by no rule
    # Known by their encoded labels the next time: the same series kept, the others skipped.
    again = rx.push(decode(encode((labels, [(T0 + 1000, v)]) for labels, v in dcgm), 1 << 24))
    assert again.accepted == sum(1 for labels, _ in dcgm if labels["__name__"] in DEFAULT_SPECS)
    assert {s.name for s in rx.drain()} == kept


def test_a_request_past_the_buffer_bound_is_refused_whole_until_the_tick_drains(dcgm: Scraped) -> None:
    wanted = [(labels, v) for labels, v in dcgm if labels["__name__"] in DEFAULT_SPECS]
    rx = _receiver(max_samples=len(wanted) + 2)
    rx.push(decode(encode((labels, [(T0, v)]) for labels, v in wanted), 1 << 24))
    with pytest.raises(BufferFull) as refused:
        rx.push(decode(encode((labels, [(T0 + 1000, v)]) for labels, v in wanted), 1 << 24))
    assert refused.value.retry_after_s == 5
    assert rx.buffered == len(wanted)
    assert rx.stats.refused == 1
    assert sum(len(s.points) for s in rx.drain()) == len(wanted)
    # The retry after the tick is taken, all of it.
    assert rx.push(
        decode(encode((labels, [(T0 + 1000, v)]) for labels, v in wanted), 1 << 24)
    ).accepted == len(wanted)


def test_pushes_from_many_threads_while_the_tick_drains_lose_nothing(dcgm: Scraped) -> None:
    util = next(labels for labels, _ in dcgm if labels["__name__"] == "DCGM_FI_DEV_GPU_UTIL")
    rx = _receiver()
    bodies = [
        encode([({**util, "UUID": f"GPU-{w}"}, [(T0 + i * 1000, float(i))])])
        for w in range(8)
        for i in range(200)
    ]
    drained: list[RawSeries] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            drained.extend(rx.drain())

    def send(w: int) -> None:
        for body in bodies[w * 200 : (w + 1) * 200]:
            rx.receive(body)

    ticker = threading.Thread(target=tick)
    ticker.start()
    senders = [threading.Thread(target=send, args=(w,)) for w in range(8)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    stop.set()
    ticker.join()
    drained.extend(rx.drain())
    per_gpu: dict[str, list[float]] = {}
    for s in drained:
        per_gpu.setdefault(s.labels["UUID"], []).extend(float(v) for _, v in s.points)
    assert {k: len(v) for k, v in per_gpu.items()} == {f"GPU-{w}": 200 for w in range(8)}
    assert all(v == sorted(v) for v in per_gpu.values())


def _holders(dcgm: Scraped) -> list[tuple[dict[str, str], float]]:
    """The T4's series as held by a pod (dcgm-exporter's pod labels with honor_labels), and
    `gpusteward exporter` series of a GPU held by a Slurm job's process."""
    t4 = [
        ({**labels, "pod": "train-0", "namespace": "ml", "container": "main"}, v)
        for labels, v in dcgm
        if labels.get("UUID", "").startswith("GPU-20c5")
    ]
    own = {"UUID": "GPU-i2", "Hostname": "node-i", "gpu": "1", "modelName": "NVIDIA H100"}
    job = {**own, "pid": "4712", "user": "bob", "slurm_job": "9001", "type": "compute"}
    ours = [
        ({"__name__": "gpusteward_gpu_utilization_percent", **own}, 0.0),
        ({"__name__": "gpusteward_gpu_memory_used_bytes", **own}, 30.0 * 2**30),
        ({"__name__": "gpusteward_gpu_memory_total_bytes", **own}, 80.0 * 2**30),
        ({"__name__": "gpusteward_process_gpu_memory_used_bytes", **job}, 30.0 * 2**30),
    ]
    return t4 + ours


def test_series_become_the_samples_gpus_and_workloads_the_prometheus_source_makes(dcgm: Scraped) -> None:
    clock = SimClock(NOW)
    integration = build(RemoteWriteSettings(), BuildContext(clock=clock, tick_s=30, window_s=3600))
    source = integration.source
    rx = integration.parts
    assert isinstance(rx, Receiver)
    held = _holders(dcgm)
    t_ms = int((NOW - timedelta(seconds=20)).timestamp() * 1000)
    rx.clock = lambda: NOW.timestamp()
    rx.receive(encode((labels, [(t_ms, v)]) for labels, v in held))
    obs = source.observe(NOW)
    # The pull path: the same points, as an API answer carries them (values as text).
    asm = Assembler(DEFAULT_SPECS, LabelMap(), 30, None)
    for labels, v in held:
        asm.add(RawSeries(labels, [(t_ms / 1000, repr(v))]))
    expected = [s for slot in asm.slots() for s in slot.samples]
    assert sorted(obs.samples, key=lambda s: s.gpu_uuid) == sorted(expected, key=lambda s: s.gpu_uuid)
    by_gpu = {s.gpu_uuid: s for s in obs.samples}
    assert by_gpu["GPU-i2"].gpu_util_pct == 0.0
    assert by_gpu["GPU-i2"].mem_used_mib == 30 * 1024
    assert by_gpu["GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"].value(Metric.GPU_UTIL) == 0.0
    gpus = {g.uuid: g for g in obs.gpus}
    assert gpus["GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"].model == "Tesla T4"
    assert gpus["GPU-i2"].memory_total_mib == 80 * 1024
    workloads = {w.id: w for w in obs.workloads}
    assert set(workloads) == {"pod/ml/train-0", "job/9001"}
    assert workloads["pod/ml/train-0"].kind is WorkloadKind.POD
    assert workloads["job/9001"].owner.user == "bob"
    # The next tick with nothing new: no samples, the same GPUs and holders.
    later = source.observe(NOW + timedelta(seconds=30))
    assert len(later.samples) == 0
    assert {w.id for w in later.workloads} == set(workloads)
