"""The owner's notice of a spot interruption: its own template (English and Chinese, every
channel), saying what gpusteward did (a checkpoint signal, a requeue, or only a notice) and when
the node is taken; never the waste ladder's words (no snooze, no "stopping")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.notify.test_apprise import ALICE, T, _notifier, _workload, store  # noqa: F401 (store: a fixture)

from gpusteward.domain.cloud import INTERRUPTION_CHECKPOINT_STEP
from gpusteward.domain.models import Decision, Level, Notice
from gpusteward.notify.apprise_notifier import CHANNELS, Templates
from gpusteward.notify.templates import is_interruption, notice_for
from gpusteward.store.db import StateStore

REASON = (
    "The cloud (aws, via imds) takes node spot-1's instance i-0abc at 12:02:00 UTC (spot interruption): "
    "its checkpoint signal is sent now so that its work can be saved; gpusteward does not stop it."
)


def _interruption(step: str = INTERRUPTION_CHECKPOINT_STEP, level: Level = Level.GRACEFUL_STOP) -> Notice:
    w = _workload("job/42", ALICE)
    d = Decision(w.id, T, level, step, REASON, rule="spot-interruption", idempotency_key=f"{step}:k:{w.id}:1")
    return notice_for(d, w, dry_run=False)


def test_the_notice_says_spot_interruption_and_not_stopping() -> None:
    n = _interruption()
    assert is_interruption(n)
    assert n.subject.startswith("Spot interruption: ")
    assert "does not stop this workload" in n.body
    assert "gpusteward.io/protect" not in n.body


@pytest.mark.parametrize("channel", sorted(set(CHANNELS.values()) | {"md"}))
def test_rendered_in_english_and_chinese_on_every_channel(store: StateStore, channel: str) -> None:  # noqa: F811
    notifier = _notifier(store)
    n = _interruption()
    assert notifier.route_for(n)[1] == "interruption"
    ctx = notifier.context(n)
    assert ctx["deadline"] == "12:02:00 UTC"
    en = Templates().render("interruption", channel, "en", ctx)
    zh = Templates().render("interruption", channel, "zh", ctx)
    assert en.title == "Checkpoint before a spot interruption: train-alice"
    assert "sent the workload its checkpoint signal" in en.body
    assert "i-0abc at 12:02:00 UTC" in en.body
    assert zh.title.startswith("抢占中断前的检查点")
    assert "截止时间 12:02:00 UTC" in zh.body
    assert "已向任务发送检查点信号" in zh.body
    for body in (en.body, zh.body):
        assert ctx["snooze_url"] not in body
        assert "SIGTERM" not in body


def test_requeue_and_notify_only_say_so(store: StateStore) -> None:  # noqa: F811
    notifier = _notifier(store)
    requeued = notifier.context(_interruption("requeue-before-interruption", Level.FORCE))
    assert requeued["requeue"] is True
    assert "starts it again on another node" in Templates().render("interruption", "md", "en", requeued).body
    told = notifier.context(_interruption(level=Level.NOTIFY))
    assert "Nothing: this is a notice" in Templates().render("interruption", "md", "en", told).body
    assert "仅为通知" in Templates().render("interruption", "md", "zh", told).body


def test_other_notices_keep_their_own_template(store: StateStore) -> None:  # noqa: F811
    w = _workload("job/42", ALICE)
    d = Decision(
        w.id, T - timedelta(minutes=1), Level.NOTIFY, "warn-1", "idle", idempotency_key="job/42:1:warn-1"
    )
    assert _notifier(store).route_for(notice_for(d, w, dry_run=False))[1] == "owner"
