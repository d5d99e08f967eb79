"""The roll-out as plain data for the Roll-out page, the Settings page, the overview and the JSON
API: the same rows ``gpusteward rollout status`` and ``rollout false-kills`` print."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpusteward.domain.store_ports import Docs
from gpusteward.policy import rollout as ro
from gpusteward.policy.scopes import DEFAULT
from gpusteward.policy.settings import PolicySettings
from gpusteward.runtime.rollout import RolloutBook
from gpusteward.web.filters import FalseKillQuery


def status(store: Docs, policy: PolicySettings, now: datetime) -> list[dict[str, Any]]:
    """Per scope: stage, days in it, findings, what enforce would have done, false kills,
    appeals, promotion readiness."""
    return [s.row() for s in RolloutBook(store, policy).readiness(now).values()]


def false_kills(store: Docs, policy: PolicySettings, query: FalseKillQuery) -> dict[str, Any]:
    """Suspected false kills (newest first) matching the query, and reclaim counts per executor."""
    book = RolloutBook(store, policy)
    watch = book.watch()
    rows = [
        ro.to_json(f)
        for f in sorted(book.false_kills(watch), key=lambda f: f.id, reverse=True)
        if (not query.status or f.status == query.status) and (not query.scope or f.scope == query.scope)
    ]
    reclaim = {k: {"attempted": v[0], "freed": v[1]} for k, v in sorted(watch.reclaim.items())}
    return {"false_kills": rows[: query.limit], "reclaim": reclaim}


def figures(store: Docs, policy: PolicySettings) -> dict[str, Any]:
    """The overview's false-kill ratio and reclaim success rate (``policy.rollout.safety_figures``)."""
    return RolloutBook(store, policy).safety()


def scopes(store: Docs, policy: PolicySettings) -> list[dict[str, Any]]:
    """The configured scopes in match order, the default last: selector, configured mode, the
    stage now (a promotion overrides the mode), max level and ladder overrides."""
    stages = RolloutBook(store, policy).stages()
    cap = policy.max_level
    listed: list[tuple[str, dict[str, Any], Any]] = [
        (s.name, s.match.model_dump(mode="json", exclude_defaults=True), s) for s in policy.scopes
    ]
    listed.append((DEFAULT, {}, policy.default_scope))
    out = []
    for name, match, s in listed:
        stage = stages.get(name, (s.mode, None))[0]
        out.append(
            {
                "scope": name,
                "match": match,
                "match_text": _match_text(match),
                "mode": s.mode.value,
                "stage": stage.value,
                # policy.max_level caps every scope's own.
                "max_level": (cap if s.max_level is None else min(s.max_level, cap)).label,
                "ladder": s.ladder.model_dump(exclude_none=True),
            }
        )
    return out


def _match_text(match: dict[str, Any]) -> str:
    """``teams: nlp, vision; labels: tier=gold`` (every field given must match)."""
    parts = []
    for key, value in match.items():
        items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, dict) else list(value)
        parts.append(f"{key}: {', '.join(str(v) for v in items)}")
    return "; ".join(parts)
