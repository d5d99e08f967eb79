"""``gpusteward backtest --sweep``: a parameter grid over a cut of the shipped serving trace."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpusteward.cli import app
from gpusteward.domain.errors import ConfigError
from gpusteward.integrations.replay.load import load_trace
from gpusteward.runtime.config import Settings
from gpusteward.scenarios.sweep import Point, estimate, fill, frontier, load_spec, with_setting

TRACE = Path(__file__).parents[1] / "fixtures" / "traces" / "gentd26_pods_dev_half.csv.gz"
QUIET = """\
rules:
  quiet-service:
    when: >
      (watched_for(gpu_util_pct) >= {window} and busy_share(gpu_util_pct, 1, {window}m) <= {busy})
      or zero_for(gpu_util_pct) >= {floor}
grid:
  window: [210]
  busy: [0.05, 0.6]
  floor: [90]
"""


def cut(tmp_path: Path) -> Path:
    """Five pods (a bursty one, one idle all day, three ordinary), hours 13 to 20: the evening."""
    with gzip.open(TRACE, "rt", encoding="utf-8") as f:
        header, *lines = f.read().splitlines()
    rows = [r.split(",") for r in lines]
    t0 = min(float(r[0]) for r in rows)
    pods = sorted({r[2] for r in rows})
    keep = {p for p in pods if p[:6] in ("2a2ad1", "3de9cc", "87b924")} | set(pods[:2])
    out = tmp_path / "cut.csv"
    kept = [",".join(r) for r in rows if r[2] in keep and 13 * 3600 <= float(r[0]) - t0 <= 20 * 3600]
    out.write_text("\n".join([header, *kept]) + "\n", encoding="utf-8")
    return out


def test_sweep_prints_the_frontier_as_json_and_svg(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(QUIET, encoding="utf-8")
    svg = tmp_path / "frontier.svg"
    args = ["backtest", "--trace", str(cut(tmp_path)), "--sweep", str(grid), "--jobs", "2"]
    res = CliRunner().invoke(app, [*args, "--tick-seconds", "300", "--json", "--svg", str(svg)])
    assert res.exit_code == 0, res.output
    # How long it will take is said (on stderr) before it starts.
    said = r"sweep: 3 points on 2 processes, about ([\d,]+) (s|min) \(timed on the first (\d+)%"
    plan = re.search(said, res.stderr)
    assert plan is not None, res.stderr
    assert 0 < int(plan.group(3)) < 100
    points = {p["name"]: p for p in json.loads(res.stdout)["points"]}
    assert set(points) == {"configured", "window=210 busy=0.05 floor=90", "window=210 busy=0.6 floor=90"}
    # The grid point that spells out the default rule scores exactly as the default pack.
    same = points["window=210 busy=0.05 floor=90"]
    assert [same[k] for k in ("stops", "regrets", "reclaimed_gpu_hours")] == [
        points["configured"][k] for k in ("stops", "regrets", "reclaimed_gpu_hours")
    ]
    # Calling a pod busy 60 % of the time "quiet" stops the bursty one while it still serves.
    loose = points["window=210 busy=0.6 floor=90"]
    assert loose["regrets"] > 0
    assert loose["stops"] > same["stops"]
    assert points["configured"]["frontier"]  # a tie: the first by name speaks for both
    assert not same["frontier"]
    assert loose["frontier"] == (loose["reclaimed_gpu_hours"] > same["reclaimed_gpu_hours"])
    text = svg.read_text(encoding="utf-8")
    assert text.startswith("<svg")
    assert text.count('class="point"') == 3
    dots = dict(re.findall(r'data-label="([^"]+)" data-x="[^"]+" data-y="(\d+)"', text))
    assert dots == {name: str(p["regrets"]) for name, p in points.items()}


def test_sweep_table_and_refusals(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("grid:\n  policy.ladder.graceful_stop_after_minutes: [30]\n", encoding="utf-8")
    trace = cut(tmp_path)
    res = CliRunner().invoke(
        app, ["backtest", "--trace", str(trace), "--sweep", str(grid), "--tick-seconds", "600"]
    )
    assert res.exit_code == 0, res.output
    assert "policy.ladder.graceful" in res.stdout  # a narrow terminal cuts the rest
    assert "configured" in res.stdout
    res = CliRunner().invoke(app, ["backtest", "--trace", str(trace), "--svg", str(tmp_path / "x.svg")])
    assert res.exit_code != 0
    assert "--sweep" in res.output


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "rules:\n  quiet-service:\n    when: 'zero_for(gpu_util_pct) >= {floor}'\n",
            "without values under grid: floor",
        ),
        ("grid:\n  floor: [90]\n", "grid keys no rule uses"),
        ("grid:\n  window: []\n", "at least one value"),
        ("grids: {}\n", "grids"),
    ],
)
def test_spec_errors_name_the_problem(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "grid.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=error):
        load_spec(path)


def test_fill_leaves_message_placeholders() -> None:
    assert fill("{gpu} at {busy} for {floor}", {"busy": 0.05, "floor": 90}) == "{gpu} at 0.05 for 90"


def test_with_setting_validates_and_keeps_the_rest() -> None:
    base = Settings()
    cfg = with_setting(base, "policy.ladder.graceful_stop_after_minutes", 45)
    assert cfg.policy.ladder.graceful_stop_after_minutes == 45
    assert cfg.policy.ladder.warn_again_after_minutes == base.policy.ladder.warn_again_after_minutes
    assert base.policy.ladder.graceful_stop_after_minutes == 30
    with pytest.raises(ConfigError, match="graceful_stop_after_minutes"):
        with_setting(base, "policy.ladder.graceful_stop_after_minutes", -1)
    with pytest.raises(ConfigError, match="no setting 'nope'"):
        with_setting(base, "policy.ladder.nope", 1)


@pytest.mark.parametrize(
    ("points", "on"),
    [
        # (name, false kills, GPU-h) -> names on the frontier
        ([("a", 0, 10.0), ("b", 0, 12.0), ("c", 1, 11.0), ("d", 2, 30.0)], {"b", "d"}),
        ([("a", 0, 10.0), ("b", 0, 10.0)], {"a"}),  # a tie: the first by name speaks for both
        ([("a", 3, 5.0), ("b", 1, 5.0)], {"b"}),  # as much for fewer false kills
        ([("a", 0, 0.0)], {"a"}),
    ],
)
def test_frontier(points: list[tuple[str, int, float]], on: set[str]) -> None:
    marked = frontier([Point(n, {}, 0, k, h) for n, k, h in points])
    assert {p.name for p in marked if p.frontier} == on
    assert [(p.regrets, -p.reclaimed_gpu_hours) for p in marked] == sorted(
        (p.regrets, -p.reclaimed_gpu_hours) for p in marked
    )


def test_policies_are_read_beside_the_sweep_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "grid.yaml"
    path.write_text("policies: [strict.yaml, /abs/other.yaml]\n", encoding="utf-8")
    assert load_spec(path).policies == [tmp_path / "sub" / "strict.yaml", Path("/abs/other.yaml")]


def test_the_estimate_times_a_head_of_the_trace(tmp_path: Path) -> None:
    trace = load_trace(cut(tmp_path))
    head = trace.head(3600)
    assert 0 < len(head) < len(trace)
    assert head.t.max() < trace.start + 3600 <= trace.t[len(head)]
    np.testing.assert_array_equal(head.util, trace.util[: len(head)])
    assert (head.gpus, head.workloads, head.interval_s) == (trace.gpus, trace.workloads, trace.interval_s)
    plan = estimate(trace, Settings(), points=5, processes=2, tick_s=300)
    assert (plan.points, plan.processes) == (5, 2)
    assert plan.estimate_s > 0
    assert plan.timed_share == pytest.approx(max(0.02, 20 * 300 / (trace.end - trace.start)))
