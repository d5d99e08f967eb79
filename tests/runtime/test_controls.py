"""Owner snoozes through ``runtime.controls`` and in the loop, on the small simulated cluster."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpusteward.analysis.rules import RuleSpec, compile_rule
from gpusteward.domain.errors import ControlError
from gpusteward.domain.models import Hold, Level
from gpusteward.integrations.sim.behaviours import Behaviour
from gpusteward.runtime.owner_controls import snooze_workload


def _zombie(cluster) -> str:
    (wid,) = {t.workload_id for t in cluster.truths() if t.behaviour is Behaviour.ZOMBIE and not t.protected}
    return wid


def test_a_snoozed_workload_is_left_alone_until_the_snooze_ends(make_steward, run_for):
    steward, integration, clock, notifier = make_steward()
    zombie = _zombie(integration.ground_truth)
    run_for(steward, clock, minutes=5)  # seen, so it is known and running
    record = snooze_workload(
        steward.store,
        steward.policy,
        steward.rules,
        zombie,
        hours=3,
        by="alice",
        reason="debugging",
        now=clock.now(),
    )
    assert record.until == clock.now() + timedelta(hours=3)
    reports = run_for(steward, clock, minutes=170)
    held = [d for r in reports for d in r.decisions if d.workload_id == zombie]
    assert held
    assert {d.hold for d in held} == {Hold.SNOOZED}
    assert not steward.store.actions(limit=1000, workload_id=zombie)
    assert not [n for n in notifier.sent if n.workload_id == zombie]
    # After the snooze its ladder starts again from a first warning.
    run_for(steward, clock, minutes=20)
    steps = [a.step for a in steward.store.actions(limit=1000, workload_id=zombie)]
    assert steps[:1] == ["warn-1"]
    assert "snooze.set" in [r.event for r in steward.store.audit_log(limit=1000, workload_id=zombie)]


def test_snooze_refusals_are_clear(make_steward, run_for):
    steward, integration, clock, _ = make_steward()
    zombie = _zombie(integration.ground_truth)
    run_for(steward, clock, minutes=20)  # found (stalled, after 7 min), warned, not yet stopped
    store, policy, now = steward.store, steward.policy, clock.now()

    def snooze(wid: str = zombie, hours: float = 2, rules=steward.rules, at=now):
        return snooze_workload(store, policy, rules, wid, hours=hours, by="alice", reason="", now=at)

    with pytest.raises(ControlError, match="no workload 'nope'"):
        snooze("nope")
    with pytest.raises(ControlError, match=r"at most 24 h \(policy.snooze.max_hours\), not 25 h"):
        snooze(hours=25)
    with pytest.raises(ControlError, match="more than 0 hours"):
        snooze(hours=0)
    with pytest.raises(ControlError, match="has finished"):
        snooze(at=now + timedelta(hours=2))
    # Admins made the rule that found it non-snoozable: the owner cannot snooze it.
    open_rules = {e.finding.rule for e in store.findings_for(zombie) if e.ended_at is None}
    assert open_rules
    fixed = [
        compile_rule(RuleSpec(**{**r.spec.model_dump(), "snoozable": False})) if r.name in open_rules else r
        for r in steward.rules
    ]
    with pytest.raises(ControlError, match="non-snoozable"):
        snooze(rules=fixed)
    assert store.snoozes() == []
    assert snooze().workload_id == zombie


def test_a_non_snoozable_rule_keeps_its_ladder_through_a_snooze(make_steward, run_for):
    steward, integration, clock, _ = make_steward()
    zombie = _zombie(integration.ground_truth)
    run_for(steward, clock, minutes=5)
    steward.store.snooze(
        zombie, until=clock.now() + timedelta(hours=4), by="alice", reason="", at=clock.now()
    )
    steward.unsnoozable_rules = frozenset(r.name for r in steward.rules)  # as if every rule were fixed
    run_for(steward, clock, minutes=120)
    levels = {a.level for a in steward.store.actions(limit=1000, workload_id=zombie)}
    assert Level.GRACEFUL_STOP in levels
