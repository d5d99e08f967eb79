"""Roll-out scopes: which scope holds a workload, and what each stage lets the ladder do."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.policy.test_decide import STARTED, T0, finding, gpus, workload

from gpusteward.domain.errors import ConfigError
from gpusteward.domain.models import PROTECT_KEY, Hold, LadderState, Level, Owner, Workload, WorkloadKind
from gpusteward.policy import PolicyInput, PolicySettings, decide
from gpusteward.policy.scope_settings import Stage
from gpusteward.policy.scopes import scope_for
from gpusteward.runtime.config import load_settings


def _slurm(
    user: str = "bob", account: str = "vision", partition: str = "gpu", qos: str = "normal"
) -> Workload:
    ref = {"job_id": "7", "account": account, "partition": partition, "qos": qos}
    return Workload(
        "slurm:7", WorkloadKind.JOB, "train", Owner(user, account), 1, ("GPU-0",), STARTED, ref=ref
    )


def _pod(ns: str = "nlp", kind: str = "Deployment") -> Workload:
    ref = {"namespace": ns, "kind": kind, "name": "serve"}
    return Workload("k8s:x", WorkloadKind.POD, "serve", Owner("ann", ns), 1, ("GPU-9",), STARTED, ref=ref)


def _settings(*scopes: dict[str, Any], **more: Any) -> PolicySettings:
    return PolicySettings.model_validate({"scopes": list(scopes), **more})


@pytest.mark.parametrize(
    ("match", "w", "hit"),
    [
        ({}, _slurm(), True),
        ({"teams": ["vision"]}, _slurm(), True),
        ({"teams": ["nlp"]}, _slurm(), False),
        ({"users": ["bob"], "accounts": ["vision"]}, _slurm(), True),
        ({"users": ["bob"], "accounts": ["other"]}, _slurm(), False),
        ({"partitions": ["gpu"], "qos": ["normal"]}, _slurm(), True),
        ({"qos": ["high"]}, _slurm(), False),
        ({"namespaces": ["nlp"]}, _pod(), True),
        ({"namespaces": ["nlp"]}, _slurm(), False),
        ({"classes": ["service"]}, _pod(), True),
        ({"classes": ["batch"]}, _pod(), False),
        ({"pools": ["pool-b"]}, _pod(), True),  # GPU-9 is in pool-b below
        ({"pools": ["pool-b"]}, _slurm(), False),
        ({"labels": {"tier": "Gold"}}, _slurm(), False),
    ],
)
def test_selector(match: dict[str, Any], w: Workload, hit: bool) -> None:
    g = {**gpus(8), **gpus(2, pool="pool-b", prefix="GPU-8-")}
    g["GPU-9"] = g.pop("GPU-8--1")
    settings = _settings({"name": "s", "match": match, "mode": "observe"})
    assert (scope_for(w, g, settings).name == "s") is hit


def test_first_match_wins_and_the_default_holds_the_rest() -> None:
    settings = _settings(
        {"name": "a", "match": {"teams": ["vision"]}, "mode": "notify"},
        {"name": "b", "match": {"users": ["bob"]}, "mode": "observe"},
        default_scope={"mode": "observe"},
    )
    assert scope_for(_slurm(), gpus(), settings).name == "a"
    assert scope_for(_slurm(account="x"), gpus(), settings).name == "b"
    rest = scope_for(_pod(), gpus(), settings)
    assert (rest.name, rest.stage) == ("default", Stage.OBSERVE)
    # A promoted stage overrides the configured mode.
    assert scope_for(_slurm(), gpus(), settings, {"a": Stage.ENFORCE}).stage is Stage.ENFORCE


def _ladder(settings: PolicySettings, w: Workload, minutes: int = 180, **inp: Any) -> list[tuple[str, Hold]]:
    """Every decision's (step, hold) over ``minutes`` of steady waste, ladders carried over."""
    states: dict[str, LadderState] = {}
    out: list[tuple[str, Hold]] = []
    for minute in range(0, minutes, 5):
        now = T0 + timedelta(minutes=minute)
        result = decide(
            PolicyInput(
                now, [finding(w.id, w.gpu_uuids, at=now)], {w.id: w}, states, frozenset(), gpus(), **inp
            ),
            settings,
        )
        (d,) = result.decisions
        out.append((d.step, d.hold))
        states = {**states, **result.states}
    return out


def _taken(seen: list[tuple[str, Hold]]) -> list[str]:
    return [s for s, h in seen if h is Hold.NONE and s]


def test_observe_records_what_enforce_would_do_and_tells_nobody() -> None:
    w = workload("w", ["GPU-0"])
    seen = _ladder(_settings(default_scope={"mode": "observe"}), w)
    assert _taken(seen) == []
    held = [s for s, h in seen if h is Hold.SCOPE]
    # The recorded step follows enforce's timings: warn-1 at once, the stop after 30 min, then force.
    assert held[0] == "warn-1"
    assert "graceful-stop" in held
    assert held[-1] == "force"


def test_notify_gives_warnings_only_and_enforce_runs_to_max_level() -> None:
    w = workload("w", ["GPU-0"])
    notify = _ladder(_settings(default_scope={"mode": "notify"}), w)
    assert _taken(notify) == ["warn-1", "warn-2"]
    assert ("graceful-stop", Hold.SCOPE) in notify
    enforce = _ladder(_settings(default_scope={"mode": "enforce", "max_level": "L2"}), w)
    assert _taken(enforce) == ["warn-1", "warn-2", "graceful-stop"]


def test_protected_in_observe_is_only_recorded_and_in_enforce_is_told_not_stopped() -> None:
    w = workload("w", ["GPU-0"], labels={PROTECT_KEY: "true"})
    assert _taken(_ladder(_settings(default_scope={"mode": "observe"}), w)) == []
    seen = _ladder(_settings(), w)
    assert _taken(seen) == ["warn-1", "warn-2"]
    assert ("graceful-stop", Hold.PROTECTED) in seen


def test_scope_timings_and_the_false_kill_slowdown() -> None:
    w = workload("w", ["GPU-0"])

    def stop_minute(seen: list[tuple[str, Hold]]) -> int:
        return 5 * [s for s, h in seen].index("graceful-stop")

    assert stop_minute(_ladder(_settings(), w)) == 30
    own = _settings(default_scope={"ladder": {"graceful_stop_after_minutes": 60}})
    assert stop_minute(_ladder(own, w)) == 60
    assert stop_minute(_ladder(_settings(), w, slowed={"default": 3.0})) == 90
    # The second warning moves from 15 to 45 min.
    assert _taken(_ladder(_settings(), w, slowed={"default": 3.0}, minutes=45)) == ["warn-1"]
    assert _taken(_ladder(_settings(), w, slowed={"default": 3.0}, minutes=50)) == ["warn-1", "warn-2"]


def test_a_scope_max_level_is_capped_by_policy_max_level() -> None:
    settings = _settings({"name": "p", "max_level": "L4"}, max_level="L2")
    assert scope_for(_slurm(), gpus(), settings).max_level is Level.GRACEFUL_STOP


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("policy:\n  scopes:\n    - name: a\n      mode: shout\n", 4, "mode"),
        ("policy:\n  scopes:\n    - name: a\n      match:\n        nodes: [x]\n", 5, "unknown key"),
        ("policy:\n  scopes:\n    - name: Bad Name\n", 3, "lower case"),
        ("policy:\n  scopes:\n    - name: a\n    - name: a\n", 2, "twice"),
        ("policy:\n  scopes:\n    - name: a\n      max_level: L9\n", 4, "max_level"),
        ("policy:\n  rollout:\n    false_kill_slowdown: 50\n", 3, "false_kill_slowdown"),
    ],
)
def test_bad_scope_config_names_the_line(tmp_path: Path, text: str, line: int, words: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_settings(f)
    assert e.value.line == line
    assert words in str(e.value)


def test_a_scopes_timings_are_merged_once_and_follow_new_settings() -> None:
    """A scope's timings (the class's, the scope's over them) are kept by the settings objects
    they came from: the same objects give the same merged timings; settings loaded anew (a
    reload) give theirs, never the kept ones."""
    ladder = {"graceful_stop_after_minutes": 30, "by_class": {"service": {"graceful_stop_after_minutes": 90}}}
    scope = {"name": "s", "match": {"namespaces": ["nlp"]}, "ladder": {"force_after_minutes": 7}}
    first = _settings(scope, ladder=ladder)
    a, b = scope_for(_pod(), gpus(), first).timings, scope_for(_pod(), gpus(), first).timings
    assert a is b  # kept
    assert (a.graceful_stop_after_minutes, a.force_after_minutes) == (90, 7)  # the class's, the scope's
    batch = scope_for(_slurm(), gpus(), first).timings  # the default scope, batch: the ladder's own
    assert batch.graceful_stop_after_minutes == 30
    assert batch.force_after_minutes == first.ladder.force_after_minutes
    service = scope_for(_pod(ns="other"), gpus(), first).timings  # the same scope, another class
    assert service.graceful_stop_after_minutes == 90
    reloaded = _settings({**scope, "ladder": {"force_after_minutes": 9}}, ladder={**ladder, "by_class": {}})
    c = scope_for(_pod(), gpus(), reloaded).timings
    assert (c.graceful_stop_after_minutes, c.force_after_minutes) == (30, 9)


def test_a_resolved_scope_follows_its_stage_and_slowdown_under_the_same_settings() -> None:
    """Scopes resolved without a queue are kept per stage and slowdown: a promotion or a suspected
    false kill between two ticks with the very same settings objects changes what comes back."""
    settings, w = _settings(), workload("w", ["GPU-0"])
    plain = scope_for(w, gpus(), settings)
    assert scope_for(w, gpus(), settings) is plain  # kept
    slowed = scope_for(w, gpus(), settings, slowed={"default": 3.0})
    assert (slowed.slowdown, slowed.timings.graceful_stop_after_minutes) == (3.0, 90)
    observe = scope_for(w, gpus(), settings, stages={"default": Stage.OBSERVE})
    assert (observe.stage, observe.cap) == (Stage.OBSERVE, Level.NONE)
    assert scope_for(w, gpus(), settings) is plain
