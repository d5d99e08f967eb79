"""``backtest --sweep``: a grid of policy parameters over one history, and its frontier.

A sweep file says which rule fields to template, the grid of values, and optionally whole
policy files to score beside them::

    rules:                 # fields of rules (the default pack's, by name) with {placeholders}
      quiet-service:
        when: >
          (watched_for(gpu_util_pct) >= {window} and busy_share(gpu_util_pct, 1, {window}m) <= {busy})
          or zero_for(gpu_util_pct) >= {floor}
    grid:                  # every combination is one point; a dotted key is a setting
      window: [180, 210, 240]
      busy: [0.03, 0.05]
      floor: [90, 120]
      policy.ladder.graceful_stop_after_minutes: [30]
    policies: [strict.yaml]  # optional, relative to the sweep file

Each point is a full backtest (the real tick over the replay), run in worker processes. The
frontier is the points no other point beats on both false kills (fewer) and reclaimed GPU-hours
(more): the choices worth an operator's look.
"""

from __future__ import annotations

import itertools
import math
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpusteward.analysis.rules import RulePack, compile_rules, default_rule_pack, load_rule_pack
from gpusteward.domain.errors import ConfigError
from gpusteward.domain.yamlload import load_yaml
from gpusteward.integrations.replay import Trace
from gpusteward.runtime.config import Settings
from gpusteward.scenarios.backtest import policy_settings, run_backtest
from gpusteward.scenarios.scoring import DEFAULT_SCORING, Scoring

#: Most points one sweep may run (each is a full backtest).
MAX_POINTS = 1000
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
Value = float | int | str | bool


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Rule name -> field -> text with {placeholders} from the grid."
    )
    grid: dict[str, list[Value]] = Field(
        default_factory=dict, description="Placeholder or dotted setting -> the values to try."
    )
    policies: list[Path] = Field(default_factory=list, description="Whole policy files scored as points.")


@dataclass(frozen=True)
class Point:
    """One backtest of the sweep and its score."""

    name: str
    params: Mapping[str, Value]
    stops: int
    regrets: int
    reclaimed_gpu_hours: float
    frontier: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": dict(self.params),
            "stops": self.stops,
            "regrets": self.regrets,
            "reclaimed_gpu_hours": self.reclaimed_gpu_hours,
            "frontier": self.frontier,
        }


@dataclass
class Sweep:
    """The points to run: (name, params, settings) each."""

    points: list[tuple[str, dict[str, Value], Settings]] = field(default_factory=list)


def load_spec(path: Path) -> SweepSpec:
    doc = load_yaml(path)
    try:
        spec = SweepSpec.model_validate(doc.data or {})
    except ValidationError as e:
        first = e.errors()[0]
        where = tuple(str(x) for x in first["loc"])
        raise ConfigError(
            f"{'.'.join(where)}: {first['msg']}", path=str(path), line=doc.line_of(where)
        ) from None
    for key, values in spec.grid.items():
        if not values:
            raise ConfigError(f"grid.{key}: give at least one value", path=str(path))
    used = {
        m for fields in spec.rules.values() for text in fields.values() for m in _PLACEHOLDER.findall(text)
    }
    plain = {k for k in spec.grid if "." not in k}
    if missing := sorted(used - plain):
        raise ConfigError(f"placeholders without values under grid: {', '.join(missing)}", path=str(path))
    if unused := sorted(plain - used):
        raise ConfigError(
            f"grid keys no rule uses (a setting needs a dotted path): {', '.join(unused)}", path=str(path)
        )
    base = path.parent
    return spec.model_copy(update={"policies": [p if p.is_absolute() else base / p for p in spec.policies]})


def fill(text: str, params: Mapping[str, Value]) -> str:
    """``{name}`` -> its value; other braces (a message's ``{gpu}``) are left alone."""
    return _PLACEHOLDER.sub(lambda m: str(params[m.group(1)]) if m.group(1) in params else m.group(0), text)


def with_setting(settings: Settings, dotted: str, value: Value) -> Settings:
    """``settings`` with ``dotted`` (e.g. ``policy.ladder.graceful_stop_after_minutes``) set, validated."""
    *path, leaf = dotted.split(".")
    models: list[BaseModel] = [settings]
    for part in path:
        nxt = getattr(models[-1], part, None)
        if not isinstance(nxt, BaseModel):
            raise ConfigError(f"grid.{dotted}: no settings section {part!r}")
        models.append(nxt)
    section = models[-1]
    if leaf not in type(section).model_fields:
        raise ConfigError(f"grid.{dotted}: no setting {leaf!r} in {'.'.join(path) or 'the config'}")
    try:
        new: BaseModel = type(section).model_validate({**section.model_dump(), leaf: value})
    except ValidationError as e:
        raise ConfigError(f"grid.{dotted} = {value!r}: {e.errors()[0]['msg']}") from None
    for parent, part in zip(reversed(models[:-1]), reversed(path), strict=True):
        new = parent.model_copy(update={part: new})
    assert isinstance(new, Settings)
    return new


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # the bounded loader refuses anchors
        return True


def _pack(base: RulePack, spec: SweepSpec, params: Mapping[str, Value]) -> RulePack:
    names = {r.name for r in base.rules}
    if unknown := sorted(set(spec.rules) - names):
        raise ConfigError(f"rules: no rule named {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    rules = []
    for r in base.rules:
        fields = spec.rules.get(r.name, {})
        rules.append(r.model_copy(update={k: fill(v, params) for k, v in fields.items()}) if fields else r)
    # Validate (and compile) the filled rules as a pack would be.
    return RulePack.model_validate({"rules": [r.model_dump(mode="json", exclude_none=True) for r in rules]})


def build_points(base: Settings, spec: SweepSpec, folder: Path) -> Sweep:
    """Every point of ``spec`` over ``base``; rule packs are written into ``folder``."""
    sweep = Sweep()
    sweep.points.append(("configured", {}, base))
    keys = list(spec.grid)
    combos = list(itertools.product(*(spec.grid[k] for k in keys)))
    if len(combos) + len(spec.policies) > MAX_POINTS:
        raise ConfigError(f"the sweep has {len(combos) + len(spec.policies)} points; at most {MAX_POINTS}")
    if spec.rules:
        packs = [default_rule_pack()] if base.rules.use_default_pack else []
        packs += [load_rule_pack(f) for f in base.rules.files]
        base_pack = RulePack(rules=[r for p in packs for r in p.rules])
    for i, values in enumerate(combos if keys else []):
        params = dict(zip(keys, values, strict=True))
        cfg = base
        for k, v in params.items():
            if "." in k:
                cfg = with_setting(cfg, k, v)
        if spec.rules:
            pack = _pack(base_pack, spec, params)
            window_s = max((r.window_s for r in compile_rules(pack)), default=0.0)
            file = folder / f"point-{i}.rules.yaml"
            dumped = {"rules": [r.model_dump(mode="json", exclude_none=True) for r in pack.rules]}
            file.write_text(yaml.dump(dumped, Dumper=_NoAliases, sort_keys=False), encoding="utf-8")
            rules = cfg.rules.model_copy(update={"use_default_pack": False, "files": [file]})
            # Keep enough history for the longest window of the point's rules.
            minutes = max(cfg.store.window_minutes, math.ceil(window_s / 60) + 10)
            cfg = cfg.model_copy(
                update={"rules": rules, "store": cfg.store.model_copy(update={"window_minutes": minutes})}
            )
        name = " ".join(f"{k}={v}" for k, v in params.items())
        sweep.points.append((name, params, cfg))
    for p in spec.policies:
        sweep.points.append((p.stem, {"policy": str(p)}, policy_settings(base, p)))
    return sweep


# -- running -------------------------------------------------------------------------------

# Each worker process loads the trace once (the initializer), not once per point.
_TRACE: Trace | None = None
_SCORING: Scoring = DEFAULT_SCORING
_TICK_S: float | None = None


def _init(trace: Trace, scoring: Scoring, tick_s: float | None) -> None:
    global _TRACE, _SCORING, _TICK_S
    _TRACE, _SCORING, _TICK_S = trace, scoring, tick_s


def _score(name: str, cfg: Settings) -> tuple[int, int, float]:
    assert _TRACE is not None
    s = run_backtest(_TRACE, cfg, policy=name, tick_s=_TICK_S, scoring=_SCORING).summary
    return int(s["stops"]), int(s["regrets"]), float(s["reclaimed_gpu_hours"])


def frontier(points: Sequence[Point]) -> list[Point]:
    """``points`` marked: on the frontier when no other has as few false kills and more GPU-hours
    (or fewer false kills and as many). Sorted by false kills, then GPU-hours, most first."""
    ordered = sorted(points, key=lambda p: (p.regrets, -p.reclaimed_gpu_hours, p.name))
    best = -math.inf
    out = []
    for p in ordered:
        on = p.reclaimed_gpu_hours > best
        best = max(best, p.reclaimed_gpu_hours)
        out.append(Point(p.name, p.params, p.stops, p.regrets, p.reclaimed_gpu_hours, on))
    return out


@contextmanager
def _pool(jobs: int, trace: Trace, scoring: Scoring, tick_s: float | None) -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=(trace, scoring, tick_s)) as pool:
        yield pool


@dataclass(frozen=True)
class Plan:
    """What a sweep will do and about how long it will take, said before it starts."""

    points: int
    processes: int
    estimate_s: float  # wall-clock, from a timed run of the first point over ``timed_share``
    timed_share: float  # of the trace


def estimate(trace: Trace, cfg: Settings, points: int, processes: int, tick_s: float | None) -> Plan:
    """Times the first point over the first 2 % of ``trace`` (at least 20 ticks) here, and scales
    it to every point spread over ``processes``. A rough figure: it assumes every point costs what
    the first does and that the rest of the trace costs what its start does."""
    span = max(trace.end - trace.start, 1e-9)
    tick = float(tick_s or max(1.0, trace.interval_s))
    cut = min(span, max(0.02 * span, 20 * tick))
    started = time.perf_counter()
    run_backtest(trace.head(cut), cfg, policy="timing", tick_s=tick_s)
    per_point = (time.perf_counter() - started) * span / cut
    rounds = math.ceil(points / max(1, processes))
    return Plan(points, processes, per_point * rounds, cut / span)


def run_sweep(
    trace: Trace,
    base: Settings,
    spec: SweepSpec,
    *,
    jobs: int,
    scoring: Scoring = DEFAULT_SCORING,
    tick_s: float | None = None,
    on_done: Callable[[int, int], None] | None = None,
    on_plan: Callable[[Plan], None] | None = None,
) -> list[Point]:
    """Every point of ``spec`` backtested over ``trace`` in up to ``jobs`` processes, then marked.
    ``on_plan`` hears how long that will take before the first point starts."""
    with tempfile.TemporaryDirectory(prefix="gpusteward-sweep-") as tmp:
        sweep = build_points(base, spec, Path(tmp))
        results: dict[int, tuple[int, int, float]] = {}
        processes = max(1, min(jobs, len(sweep.points)))
        if on_plan is not None:
            on_plan(estimate(trace, sweep.points[0][2], len(sweep.points), processes, tick_s))
        with _pool(processes, trace, scoring, tick_s) as pool:
            futures = {pool.submit(_score, name, cfg): i for i, (name, _, cfg) in enumerate(sweep.points)}
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                if on_done is not None:
                    on_done(len(results), len(futures))
    points = [Point(name, params, *results[i]) for i, (name, params, _) in enumerate(sweep.points)]
    return frontier(points)
