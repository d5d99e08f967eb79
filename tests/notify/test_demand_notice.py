"""The owner's notice under demand (issue 16): it names the waiting jobs and when the idle GPU
is reclaimed, in English and Chinese, on every channel."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tests.notify.test_apprise import ALICE, T, _notifier, _workload, store  # noqa: F401 (store: a fixture)
from tests.policy.test_decide import finding

from gpusteward.domain.models import Decision, Gpu, Level, Notice
from gpusteward.domain.queue import PendingJob, Queue
from gpusteward.notify import notice_for
from gpusteward.notify.apprise_notifier import CHANNELS, Templates
from gpusteward.policy import PolicyInput, PolicySettings, decide
from gpusteward.policy.demand import Demand, said, sentence
from gpusteward.store.db import StateStore

GPUS = {"GPU-a": Gpu("GPU-a", "node-7", 3, "NVIDIA H100 80GB HBM3", 81920.0, 2.0)}


def _decision(st: StateStore, queue: Queue | None) -> tuple[Decision, Notice]:
    w = _workload("job/42", ALICE)
    states = st.load_ladders(False)
    inp = PolicyInput(
        T, [finding(w.id, w.gpu_uuids, at=T)], {w.id: w}, states, frozenset(), GPUS, queue=queue
    )
    d = next(d for d in decide(inp, PolicySettings()).decisions if d.workload_id == w.id)
    return d, notice_for(d, w, dry_run=False)


def _waiting() -> Queue:
    jobs = [PendingJob(f"j{i}", "gpu", 4, T - timedelta(hours=1), "Resources", "h100") for i in range(12)]
    return Queue(T, tuple(jobs))


@pytest.mark.parametrize("channel", sorted(set(CHANNELS.values()) | {"md"}))
def test_the_notice_names_the_waiting_jobs_and_the_reclaim_time(store: StateStore, channel: str) -> None:  # noqa: F811
    d, notice = _decision(store, _waiting())
    # Warned at 11:55: the second warning is due at 11:58:45 under demand, the stop 3.75 min after it.
    assert (d.step, d.level) == ("warn-2", Level.NOTIFY)
    assert "12 jobs are waiting for 48 free H100 80GB HBM3 GPUs, so the ladder moves 4x faster" in notice.body
    assert "your idle H100 80GB HBM3 will be reclaimed in 4 min, at 12:04 UTC." in notice.body
    ctx = _notifier(store).context(notice)
    assert ctx["next_at"] == datetime(2026, 1, 5, 12, 4, tzinfo=UTC)
    en = Templates().render("owner", channel, "en", ctx).body
    zh = Templates().render("owner", channel, "zh", ctx).body
    assert (
        "12 jobs are waiting for 48 free H100 80GB HBM3 GPUs; your idle H100 80GB HBM3 will be reclaimed "
        "at 12:04 UTC." in en
    )
    assert (
        "有 12 个作业正在等待 48 块空闲的 H100 80GB HBM3 GPU;您空闲的 H100 80GB HBM3 将于 12:04 UTC 被回收。"
        in zh
    )
    assert "2026-01-05 12:04" in en
    assert "2026-01-05 12:04" in zh


def test_without_a_queue_the_notice_keeps_its_wording(store: StateStore) -> None:  # noqa: F811
    d, notice = _decision(store, None)
    assert d.step == ""  # the second warning is 15 min after the first: not yet
    ctx = _notifier(store).context(notice)
    assert ctx["demand"] is None
    assert ctx["next_at"] == datetime(2026, 1, 5, 12, 25, tzinfo=UTC)
    assert "waiting" not in Templates().render("owner", "md", "en", ctx).body


@pytest.mark.parametrize(
    ("d", "reclaim", "at"),
    [
        (
            Demand("NVIDIA H100 80GB HBM3", 12, 48, 0.25),
            "in 7 min, at 14:20 UTC",
            datetime(2026, 1, 5, 14, 20),
        ),
        (
            Demand("NVIDIA A100-SXM4-80GB", 1, 1, 0.906),
            "in 5 min, at 00:02 UTC on 2026-01-06",
            datetime(2026, 1, 6, 0, 2),
        ),
        (Demand("NVIDIA L4", 3, 2, 0.9), "", None),
    ],
)
def test_a_demand_sentence_reads_back(d: Demand, reclaim: str, at: datetime | None) -> None:
    said_now = sentence(d, reclaim, slowed=False)
    text = f"idle for 45 min. Next: graceful stop {reclaim}.{said_now} Approved by bob."
    got = said(text, datetime(2026, 1, 5, 23, 57, tzinfo=UTC))
    assert got is not None
    assert (got.jobs, got.gpus, got.reclaim_at) == (d.jobs, d.gpus, at.replace(tzinfo=UTC) if at else None)
    assert got.model in d.model
    assert said("idle for 45 min. Nobody is waiting for L4 GPUs, so the ladder moves 2x slower.", T) is None
