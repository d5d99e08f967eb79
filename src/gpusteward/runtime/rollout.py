"""The roll-out's records in the state store, for the tick, the CLI and the web.

Each document has one kind of writer, so no read-modify-write of one crosses another's:
``rollout.config`` (the leader: when it first saw each configured mode), ``rollout.stages``
(``rollout promote``), ``rollout.watch`` (the leader: recent stops, false kills, counts),
``rollout.verdicts`` (admins settling false kills) and ``rollout.appeals`` (owners' appeals).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpusteward.domain.errors import ControlError
from gpusteward.domain.records import AuditNote
from gpusteward.domain.store_ports import Docs
from gpusteward.policy import rollout as ro
from gpusteward.policy.rollout import Appeal, FalseKill, Readiness, StageEntry, Watch
from gpusteward.policy.scope_settings import Stage
from gpusteward.policy.scopes import configured_stage, scope_names
from gpusteward.policy.settings import PolicySettings

CONFIG_KEY, STAGES_KEY, WATCH_KEY = "rollout.config", "rollout.stages", "rollout.watch"
VERDICTS_KEY, APPEALS_KEY = "rollout.verdicts", "rollout.appeals"
#: Settled false kills and appeals kept (the newest); unsettled ones are always kept.
KEEP = 500


@dataclass(frozen=True, slots=True)
class ScopeStatus:
    name: str
    stage: Stage
    since: datetime | None
    findings: int
    #: Ladder step → workloads that a stage below enforce held at it (what enforce would have done).
    would: Mapping[str, int]
    false_kills: int
    appeals: int
    readiness: Readiness
    slowed: float

    def row(self) -> dict[str, Any]:
        """As ``rollout status --json`` and ``/api/v1/rollout`` show it."""
        return {
            "scope": self.name,
            "stage": self.stage.value,
            "since": self.since.isoformat() if self.since else None,
            "days": round(self.readiness.days, 2),
            "findings": self.findings,
            "enforce_would_have": dict(self.would),
            "false_kills": self.false_kills,
            "appeals": self.appeals,
            "ready_to_promote": self.readiness.ready,
            "criteria": self.readiness.why,
            "slowdown": self.slowed,
        }


class RolloutBook:
    def __init__(self, store: Docs, policy: PolicySettings) -> None:
        self.store = store
        self.policy = policy

    def _list(self, key: str) -> list[Any]:
        value = self.store.load_doc(key)
        return list(value) if isinstance(value, list) else []

    def history(self) -> list[StageEntry]:
        return [ro.stage_entry(d) for d in self._list(CONFIG_KEY) + self._list(STAGES_KEY)]

    def stages(self) -> dict[str, tuple[Stage, datetime | None]]:
        config = {n: s for n in scope_names(self.policy) if (s := configured_stage(self.policy, n))}
        return ro.current_stages(config, self.history())

    def watch(self) -> Watch:
        return ro.watch(self.store.load_doc(WATCH_KEY))

    def verdicts(self) -> dict[str, Any]:
        value = self.store.load_doc(VERDICTS_KEY)
        return dict(value) if isinstance(value, dict) else {}

    def false_kills(self, watch: Watch | None = None) -> list[FalseKill]:
        return ro.settled((watch or self.watch()).false_kills, self.verdicts())

    def safety(self) -> dict[str, Any]:
        """The false-kill ratio and reclaim success rate (``policy.rollout.safety_figures``)."""
        watch = self.watch()
        return ro.safety_figures(self.false_kills(watch), watch.reclaim)

    def appeals(self) -> list[Appeal]:
        return [ro.appeal(d) for d in self._list(APPEALS_KEY)]

    def inputs(self) -> tuple[dict[str, Stage], dict[str, float]]:
        """What policy needs: the stage of every scope, and the scopes slowed by false kills."""
        stages = {name: stage for name, (stage, _) in self.stages().items()}
        return stages, ro.slowed(self.false_kills(), self.policy.rollout.false_kill_slowdown)

    # -- the leader's writes -------------------------------------------------------------------
    def note_config(self, now: datetime) -> None:
        """Record when each scope's configured mode was first seen (its stage's start)."""
        entries = self._list(CONFIG_KEY)
        last = {d["scope"]: d["stage"] for d in entries}
        fresh = [
            ro.to_json(StageEntry(n, s, now, "config"))
            for n in scope_names(self.policy)
            if (s := configured_stage(self.policy, n)) is not None and last.get(n) != s.value
        ]
        if fresh:
            self.store.save_doc(CONFIG_KEY, entries + fresh, at=now)

    def save_watch(self, watch: Watch, now: datetime, *, read: Any = None) -> None:
        """Written unless it is still ``read``, the document as read this tick (most ticks: no
        stop, no false kill, no count changed)."""
        settled = [f for f in watch.false_kills if f.status != ro.SUSPECTED]
        open_ = [f for f in watch.false_kills if f.status == ro.SUSPECTED]
        watch.false_kills = sorted(open_ + settled[-KEEP:], key=lambda f: f.id)
        doc = ro.to_json(watch)
        if read is None or doc != read:
            self.store.save_doc(WATCH_KEY, doc, at=now)

    # -- admins' and owners' writes ------------------------------------------------------------
    def readiness(self, now: datetime) -> dict[str, ScopeStatus]:
        stages, watch = self.stages(), self.watch()
        fks = self.false_kills(watch)
        slow = ro.slowed(fks, self.policy.rollout.false_kill_slowdown)
        out: dict[str, ScopeStatus] = {}
        for name, (stage, since) in stages.items():
            mine = [
                f
                for f in fks
                if f.scope == name and f.status != ro.DISMISSED and (since is None or f.found_at >= since)
            ]
            appeals = sum(1 for f in mine if f.why.startswith("appealed"))
            ready = ro.readiness(since, now, len(mine), appeals, self.policy.rollout.promote_when)
            c = watch.counts.get(f"{name}|{stage.value}", {})
            would = {k: int(v) for k, v in c.get("would", {}).items()}
            out[name] = ScopeStatus(
                name,
                stage,
                since,
                int(c.get("findings", 0)),
                would,
                len(mine),
                appeals,
                ready,
                slow.get(name, 1.0),
            )
        return out

    def promote(self, scope: str, now: datetime, *, by: str, force: bool, reason: str) -> ScopeStatus:
        """Move ``scope`` one stage on; ``ControlError`` when it cannot. Audited either way."""
        status = self.readiness(now).get(scope)
        if status is None:
            raise ControlError(f"no scope {scope!r} (known: {', '.join(scope_names(self.policy))})")
        nxt = status.stage.next()
        payload = {"scope": scope, "from": status.stage.value, "by": by, "reason": reason, "forced": force}
        refusal = ""
        if nxt is None:
            refusal = f"scope {scope} is already at enforce"
        elif not status.readiness.ready and not (force and reason.strip()):
            refusal = f"scope {scope} does not meet the promotion criteria: {status.readiness.why}"
            refusal += " (--force --reason to promote anyway)"
        if refusal or nxt is None:
            self.store.save_doc(
                STAGES_KEY,
                self._list(STAGES_KEY),
                at=now,
                audit=AuditNote("rollout.promote_refused", {**payload, "why": refusal}),
            )
            raise ControlError(refusal)
        entry = StageEntry(scope, nxt, now, by, reason, forced=not status.readiness.ready)
        note = AuditNote("rollout.promoted", {**payload, "to": nxt.value, "criteria": status.readiness.why})
        self.store.save_doc(STAGES_KEY, [*self._list(STAGES_KEY), ro.to_json(entry)], at=now, audit=note)
        return self.readiness(now)[scope]

    def verdict(self, fk_id: int, *, confirm: bool, by: str, reason: str, now: datetime) -> FalseKill:
        known = {f.id: f for f in self.false_kills()}
        fk = known.get(fk_id)
        if fk is None:
            raise ControlError(f"no suspected false kill {fk_id}")
        if fk.status != ro.SUSPECTED:
            raise ControlError(f"false kill {fk_id} was already {fk.status} by {fk.by}")
        status = ro.CONFIRMED if confirm else ro.DISMISSED
        verdicts = {
            **self.verdicts(),
            str(fk_id): {"status": status, "by": by, "reason": reason, "at": now.isoformat()},
        }
        note = AuditNote(
            f"rollout.false_kill_{status}", {"id": fk_id, "by": by, "reason": reason, "scope": fk.scope}
        )
        self.store.save_doc(VERDICTS_KEY, verdicts, at=now, audit=note, workload_id=fk.workload_id)
        return ro.settled([fk], verdicts)[0]

    def appeal(self, workload_id: str, *, by: str, reason: str, now: datetime) -> None:
        horizon = timedelta(hours=self.policy.rollout.false_kill_horizon_hours)
        kept = [d for d in self._list(APPEALS_KEY) if now - datetime.fromisoformat(d["at"]) <= horizon]
        entry = ro.to_json(Appeal(workload_id, now, by, reason))
        note = AuditNote("workload.appeal", {"by": by, "reason": reason})
        self.store.save_doc(APPEALS_KEY, [*kept, entry][-KEEP:], at=now, audit=note, workload_id=workload_id)
