"""Insights in the tick: anomalies and right-sizing advice, in the analyse phase.

The tick calls ``Insights.analyse`` after the rules ran, before the leader gate: it adds
findings and changes nothing. Every ``every_minutes`` it extracts per-workload features from the window and
runs the anomaly detector and the advice; in between it repeats the findings of the last run
for the workloads still there, so an advice episode stays open instead of flickering. The
findings are advice (``RuleAction.ADVISE``): policy turns them into one notice per episode at
most (``Hold.ADVICE_ONLY``), and they land in the finding episodes the reports read.

It also keeps each workload's lifetime utilisation per GPU (for "request K GPUs"). The leader
saves the lifetimes as ledger marks (``life:<workload>``, see store/ledger.py) every few minutes
(``record``), and they are read back at start-up, so a restart goes on counting.

Nothing here may fail the tick: a missing optional dependency becomes a ``notes`` line (logged
once), any other error is logged and the tick goes on with the rules' findings alone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpusteward.analysis.advice import Lifetime, advise
from gpusteward.analysis.anomaly import AnomalyUnavailable, detect
from gpusteward.analysis.engine import AnalysisResult
from gpusteward.analysis.features import extract
from gpusteward.domain.models import Finding, Gpu, Metric, RuleAction, Workload
from gpusteward.domain.records import Mark
from gpusteward.domain.store_ports import HasLedger
from gpusteward.runtime.insights_settings import InsightsSettings
from gpusteward.store.window import WindowView

if TYPE_CHECKING:
    from gpusteward.runtime.config import Settings

log = logging.getLogger(__name__)


@dataclass
class _Life:
    """Running sums of one workload's utilisation per GPU since first seen."""

    incarnation: str
    util_sum: dict[str, float] = field(default_factory=dict)
    util_minutes: dict[str, float] = field(default_factory=dict)
    #: Counted up to here before a restart (read from the store); None once counting goes on.
    since: datetime | None = None


_LIFE = "life:"


@dataclass
class Lifetimes:
    """Per workload, the utilisation of each GPU over the life gpusteward has seen. With a
    ``store`` the sums are saved every ``save_every_s`` as ledger marks and read back at the
    first update, so a restart goes on counting."""

    store: HasLedger | None = None
    save_every_s: float = 300.0
    _lives: dict[str, _Life] = field(default_factory=dict)
    _last: datetime | None = None
    _loaded: bool = False
    _saved: datetime | None = None
    _gone: set[str] = field(default_factory=set)

    def update(self, view: WindowView, workloads: Sequence[Workload], now: datetime) -> None:
        """Add the time since the last update (the whole window the first time: it holds each
        GPU's current holder's history only; for a life read back, the time since it was saved)."""
        self._load()
        if self._last is not None and now <= self._last:
            return
        span = view.window_s if self._last is None else min((now - self._last).total_seconds(), view.window_s)
        self._last = now
        means: dict[float, tuple[Any, Any]] = {}
        alive = set()
        for w in workloads:
            alive.add(w.id)
            life = self._lives.get(w.id)
            if life is None or life.incarnation != w.incarnation:
                life = self._lives[w.id] = _Life(w.incarnation)
            s = span
            if life.since is not None:  # read back after a restart: count on from where it stopped
                s = min(max(0.0, (now - life.since).total_seconds()), view.window_s)
                life.since = None
            if s not in means:
                means[s] = (view.mean(Metric.GPU_UTIL, s), view.coverage(Metric.GPU_UTIL, s))
            util, cov = means[s]
            for u in w.gpu_uuids:
                i = view.index_of(u)
                if i is None or not math.isfinite(util[i]) or not cov[i] > 0:
                    continue  # no data: neither used nor unused
                m = float(cov[i]) * s / 60.0
                life.util_sum[u] = life.util_sum.get(u, 0.0) + float(util[i]) * m
                life.util_minutes[u] = life.util_minutes.get(u, 0.0) + m
        for gone in set(self._lives) - alive:
            del self._lives[gone]
            self._gone.add(gone)

    def save_due(self, now: datetime) -> None:
        """Save when ``save_every_s`` has passed: the leader's part (a follower only counts)."""
        if self._saved is None or (now - self._saved).total_seconds() >= self.save_every_s:
            self.save(now)

    def _load(self) -> None:
        if self._loaded or self.store is None:
            return
        self._loaded = True
        for key, m in self.store.ledger.marks().items():
            if key.startswith(_LIFE):
                d = m.data
                self._lives[key[len(_LIFE) :]] = _Life(
                    str(d["incarnation"]),
                    {str(u): float(v) for u, v in dict(d["util_sum"]).items()},
                    {str(u): float(v) for u, v in dict(d["util_minutes"]).items()},
                    since=m.until,
                )

    def save(self, now: datetime) -> None:
        """Save the lives counted up to ``now`` and forget those of workloads that are gone."""
        if self.store is None:
            return
        marks = [
            Mark(
                _LIFE + wid,
                now,
                {
                    "incarnation": life.incarnation,
                    "util_sum": life.util_sum,
                    "util_minutes": life.util_minutes,
                },
            )
            for wid, life in sorted(self._lives.items())
            if life.since is None  # one not seen since the restart keeps its mark as it was
        ]
        try:
            self.store.ledger.add({}, {}, marks, [_LIFE + g for g in sorted(self._gone)])
        except Exception:  # the sums stay in memory; the next save tries again
            log.exception("workload lifetimes not saved")
            return
        self._saved, self._gone = now, set()

    def snapshot(self) -> dict[str, Lifetime]:
        return {
            wid: Lifetime(
                wid,
                observed_hours=max(life.util_minutes.values(), default=0.0) / 60.0,
                util_mean={u: life.util_sum[u] / m for u, m in life.util_minutes.items() if m > 0},
            )
            for wid, life in self._lives.items()
        }


@dataclass
class Insights:
    """Anomalies and advice of the tick: findings only, never an action."""

    settings: InsightsSettings
    stale_after_s: float = 180.0
    lifetimes: Lifetimes = field(default_factory=Lifetimes)
    #: Why a part is not running (a missing optional dependency), for `scan` and the logs.
    notes: list[str] = field(default_factory=list)
    _cache: tuple[Finding, ...] = ()
    _last_run: datetime | None = None

    def analyse(
        self,
        now: datetime,
        view: WindowView,
        gpus: Mapping[str, Gpu],
        workloads: Sequence[Workload],
        analysis: AnalysisResult,
    ) -> AnalysisResult:
        """``analysis`` with this tick's anomaly and advice findings added."""
        try:
            extra = self.findings(view, gpus, workloads, now, analysis.findings)
        except Exception:
            log.exception("insights failed; the tick goes on with the rules' findings")
            return analysis
        if not extra:
            return analysis
        # Analysis findings are sorted by rule, then workload: keep that order.
        merged = sorted(
            (*analysis.findings, *extra), key=lambda f: (f.rule, f.workload_id or "", f.gpu_uuids)
        )
        return replace(analysis, findings=tuple(merged))

    def record(self, now: datetime) -> None:
        """The leader's part: save the lifetimes when due (a follower only counts them)."""
        self.lifetimes.save_due(now)

    def findings(
        self,
        view: WindowView,
        gpus: Mapping[str, Gpu],
        workloads: Sequence[Workload],
        now: datetime,
        rule_findings: Sequence[Finding] = (),
    ) -> tuple[Finding, ...]:
        """This tick's anomaly and advice findings (fresh every ``every_minutes``, else repeated)."""
        s = self.settings
        if not s.enabled:
            return ()
        self.lifetimes.update(view, workloads, now)
        due = self._last_run is None or now - self._last_run >= timedelta(minutes=s.every_minutes)
        if due:
            self._last_run = now
            self._cache = self._run(view, gpus, workloads, now, rule_findings)
        running = {w.id for w in workloads}
        # A workload a reclaim rule already names needs no advice on top (its notices say more).
        reclaim = {f.workload_id for f in rule_findings if f.action is RuleAction.RECLAIM}
        return tuple(
            replace(f, at=now)
            for f in self._cache
            if f.workload_id in running and f.workload_id not in reclaim
        )

    def _run(
        self,
        view: WindowView,
        gpus: Mapping[str, Gpu],
        workloads: Sequence[Workload],
        now: datetime,
        rule_findings: Sequence[Finding],
    ) -> tuple[Finding, ...]:
        s = self.settings
        table = extract(
            view, gpus, workloads, window_s=s.window_minutes * 60, stale_after_s=self.stale_after_s
        )
        out: list[Finding] = []
        if s.anomalies:
            try:
                result = detect(table, now, s.anomaly())
                out.extend(result.findings)
            except AnomalyUnavailable as e:
                self._note(str(e))
        # The rule pack's window-based advice already covers these workloads: say it once.
        advised = {f.workload_id for f in rule_findings if f.kind == "overprovisioned"}
        for f in advise(table, self.lifetimes.snapshot(), gpus, now, s.advice.thresholds()):
            if not (f.rule == "right-size-gpus" and f.workload_id in advised):
                out.append(f)
        return tuple(out)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            log.warning("%s", text)


def build_insights(settings: Settings, store: HasLedger | None) -> Insights | None:
    """The insights for ``settings`` (None when they are off)."""
    if not settings.insights.enabled:
        return None
    return Insights(
        settings.insights,
        stale_after_s=settings.analysis.stale_after_seconds,
        lifetimes=Lifetimes(store=store),
    )
