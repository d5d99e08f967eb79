"""The owner's notice when the workload's GPU failed (issue 16): it explains, in English and
Chinese on every channel, and never offers a snooze or threatens a stop."""

from __future__ import annotations

import pytest
from tests.notify.test_apprise import ALICE, T, _notice, _notifier, store  # noqa: F401 (store: a fixture)

from gpusteward.domain.models import Finding, RuleAction
from gpusteward.notify.apprise_notifier import CHANNELS, Templates
from gpusteward.store.db import StateStore

XID79 = "node-7/gpu3: Xid 79 (GPU has fallen off the bus)"


def _fail(st: StateStore, wid: str = "job/42") -> None:
    st.record_findings(
        [
            Finding(
                rule="gpu-failed",
                kind="health",
                action=RuleAction.REPAIR,
                at=T,
                gpu_uuids=("GPU-a",),
                workload_id=wid,
                evidence={"max(xid_fatal, 30m)": {"GPU-a": 1.0}},
                wasted_minutes=10,
                wasted_gpu_hours=0.17,
                wasted_cost=0.5,
                message=XID79,
            )
        ],
        T,
    )


@pytest.mark.parametrize("channel", sorted(set(CHANNELS.values()) | {"md"}))
def test_a_failed_gpu_notice_explains_and_offers_no_snooze(store: StateStore, channel: str) -> None:  # noqa: F811
    plain = _notifier(store).context(_notice(ALICE))
    assert plain["fault"] is False
    _fail(store)
    ctx = _notifier(store).context(_notice(ALICE))
    assert ctx["fault"] is True
    assert ctx["finding"]["rule"] == "gpu-failed"  # the fault is what the notice is about, not the zombie
    en = Templates().render("owner", channel, "en", ctx).body
    zh = Templates().render("owner", channel, "zh", ctx).body
    assert XID79 in en
    assert "its GPU failed, so its low utilisation is the fault's" in en
    assert "GPU 发生了故障" in zh
    for body in (en, zh):
        assert ctx["snooze_url"] not in body  # a snooze would make no sense: nothing will stop it
        assert "gpusteward.io/protect=true" not in body
    # The same context without the fault keeps the usual way to object.
    usual = Templates().render("owner", channel, "en", plain).body
    assert "gpusteward.io/protect=true" in usual
