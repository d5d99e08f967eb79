"""Roll-out scopes and the live false-kill figure on the simulated cluster (seed fixed)."""

from __future__ import annotations

from pathlib import Path

from tests.runtime.conftest import small_settings

from gpusteward.domain.models import ActionStatus, Hold, Level
from gpusteward.integrations.sim.resubmit import ResubmittingSource
from gpusteward.runtime.rollout import RolloutBook
from gpusteward.web.metrics import StewardMetrics

SCOPES = {
    "scopes": [
        {"name": "pilot-speech", "match": {"teams": ["speech"]}, "mode": "observe"},
        {"name": "pilot-platform", "match": {"teams": ["platform"]}, "mode": "notify"},
    ],
    "default_scope": {"mode": "enforce"},
}


def _teams(store, cluster) -> dict[str, str]:
    teams = {}
    for t in cluster.truths():
        info = store.workload_info(t.workload_id)
        if info is not None:
            teams[t.workload_id] = info.owner.team
    return teams


def test_three_scopes_at_three_stages(make_steward, run_for, tmp_path: Path) -> None:
    steward, integration, clock, notifier = make_steward(small_settings(tmp_path / "s.db", policy=SCOPES))
    cluster = integration.ground_truth
    run_for(steward, clock, minutes=4 * 60)
    store = steward.store
    actions = store.actions(limit=10_000)
    teams = _teams(store, cluster)
    told = {n.workload_id for n in notifier.sent if n.owner is not None}
    stopped = {
        a.workload_id
        for a in actions
        if a.level >= Level.GRACEFUL_STOP and a.status is ActionStatus.SUCCEEDED
    }
    warned = {
        a.workload_id for a in actions if a.level is Level.NOTIFY and a.status is ActionStatus.SUCCEEDED
    }

    speech = {w for w, t in teams.items() if t == "speech"}
    platform = {w for w, t in teams.items() if t == "platform"}
    # observe: recorded with the scope named, nobody told, nothing done.
    assert not speech & (told | stopped | warned)
    held = [d for w in speech for d in store.decisions_for(w) if d.hold is Hold.SCOPE]
    assert held
    assert all("scope pilot-speech is in observe" in d.reason for d in held)
    # notify: warnings only.
    assert platform & warned
    assert not platform & stopped
    # enforce: the wasteful notebook is stopped; the protected zombie is told and not stopped.
    protected = {t.workload_id for t in cluster.truths() if t.protected}
    assert protected & told
    assert not protected & stopped
    assert stopped
    assert all(teams[w] not in ("speech", "platform") for w in stopped)
    status = RolloutBook(store, steward.policy).readiness(clock.now())
    # Each workload held at a step is counted once for that step, at every step it reaches.
    reached = {(d.workload_id, d.step) for d in held if d.step}
    expected = {step: sum(1 for _, s in reached if s == step) for _, step in reached}
    assert len(expected) > 1
    assert dict(status["pilot-speech"].would) == expected
    assert status["pilot-speech"].false_kills == 0


# A careless rule: anything under 60 % for 3 minutes is "idle", so useful work gets stopped too.
CARELESS = """rules:
  - name: careless
    kind: idle
    action: reclaim
    when: below_for(gpu_util_pct, 60) >= 3
    message: "{gpu} under 60% for {minutes} min"
"""


def test_the_live_false_kill_figure_finds_every_resubmission_and_nothing_else(
    make_steward, run_for, tmp_path: Path
) -> None:
    rules = tmp_path / "careless.yaml"
    rules.write_text(CARELESS)
    policy = {
        "startup_grace_minutes": 0,
        "ladder": {"warn_again_after_minutes": 1, "graceful_stop_after_minutes": 2, "force_after_minutes": 2},
        "budget": {"max_actions_per_hour": 1000, "max_gpu_share_per_hour": 1.0},
        "rollout": {"false_kill_slowdown": 1},
    }
    settings = small_settings(
        tmp_path / "s.db", policy=policy, rules={"files": [str(rules)], "use_default_pack": False}
    )
    steward, integration, clock, _ = make_steward(settings)
    cluster = integration.ground_truth
    steward.source = ResubmittingSource(steward.source, cluster, delay_minutes=15)
    run_for(steward, clock, minutes=6 * 60)
    wrong = {e.workload_id for e in cluster.endings() if e.stop_at is not None and e.productive_at_stop}
    right = {e.workload_id for e in cluster.endings() if e.stop_at is not None and not e.productive_at_stop}
    assert right  # stops of real waste were made too, and must not count
    fks = RolloutBook(steward.store, steward.policy).false_kills()
    assert wrong
    assert {f.workload_id for f in fks} == wrong
    assert all("resubmitted as" in f.why for f in fks)
    # /metrics: the false kills by rule and scope, and the share of stops that freed their GPUs.
    metrics = StewardMetrics()
    metrics.record(steward, steward.tick(), 0.1)
    text = metrics.render().decode()
    assert f'gpusteward_false_kills_total{{rule="careless",scope="default"}} {len(wrong)}.0' in text
    assert 'gpusteward_reclaim_success_ratio{executor="SimExecutor"}' in text
