"""The Philly per-job windows and the Helios cluster series, read directly (fixtures cut from them)."""

from __future__ import annotations

import csv
import json
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from gpusteward.domain.errors import ConfigError
from gpusteward.integrations.replay import load_trace, sniff
from gpusteward.integrations.replay.helios import parse_helios, vc_name
from gpusteward.integrations.replay.philly import load_philly, parse_philly

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "replay"
PHILLY = FIXTURES / "philly_windows_sample.csv"
HELIOS = FIXTURES / "earth_vc3sl_cluster_sequence_vc_2020-05_240_minutes.csv"


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def _jobs() -> list[dict[str, object]]:
    jobs: list[dict[str, object]] = json.loads((FIXTURES / "sampled_jobs.json").read_text())
    return jobs


def test_philly_windows_become_jobs_holding_their_gpus_from_their_start() -> None:
    assert sniff(PHILLY) == "philly"
    tr = load_trace(PHILLY, gpu_model="Tesla P100")
    jobs = {j["jobid"]: j for j in _jobs()}
    assert {w.id for w in tr.workloads} == set(jobs)
    rows = _rows(PHILLY)[1:]
    for w in tr.workloads:
        job = jobs[w.id]
        start = datetime.fromisoformat(str(job["start_time"])).replace(tzinfo=UTC).timestamp()
        assert (w.owner.user, w.owner.team) == (job["user"], job["vc"])
        assert w.started_at == start
        assert w.first_t == start - start % 60  # minute 0 is the start, rounded down
        assert w.last_t == w.first_t + 180  # minutes 0..3
        assert w.requested == sum(len(d["gpus"]) for d in job["detail"])  # type: ignore[union-attr]
        assert len(w.gpus) == sum(1 for r in rows if r[0] == w.id)
    assert {g.model for g in tr.gpus} == {"Tesla P100"}
    first = tr.gpus[tr.workloads[0].gpus[0]]
    assert first.node == first.uuid.rsplit("_", 1)[0]
    assert tr.mem is not None
    assert np.isnan(tr.mem).all()


def test_philly_minutes_before_the_start_are_nobodys_and_values_are_verbatim() -> None:
    tr = load_trace(PHILLY)
    header, row = _rows(PHILLY)[0], _rows(PHILLY)[1]
    job = next(j for j in _jobs() if j["jobid"] == row[0])
    t0 = datetime.fromisoformat(str(job["start_time"])).replace(tzinfo=UTC).timestamp() // 60 * 60
    g = next(i for i, gpu in enumerate(tr.gpus) if gpu.uuid == row[1])
    for minute, value in zip(header[4:], row[4:], strict=True):
        t = t0 + 60 * int(minute)
        (i,) = np.flatnonzero((tr.gpu == g) & (tr.t == t))
        expected = float(value) if value else math.nan
        assert tr.util[i] == pytest.approx(expected, nan_ok=True)
        assert (tr.wl[i] >= 0) == (int(minute) >= 0)


def test_philly_empty_cells_are_missing_and_overlapping_windows_go_to_the_job() -> None:
    tr = load_trace(PHILLY)
    assert np.isnan(tr.util).any()
    # One GPU minute inside two jobs' windows: a single row, held by the job that started.
    pairs = tr.gpu.astype(np.int64) * 10**10 + tr.t.astype(np.int64)
    assert len(np.unique(pairs)) == len(tr)
    starts = {(g, w.first_t) for w in tr.workloads for g in w.gpus}
    held = {(int(g), float(t)) for g, t, w in zip(tr.gpu, tr.t, tr.wl, strict=True) if w >= 0}
    assert starts <= held


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda rows, jobs: ([["id", *rows[0][1:]], *rows[1:]], jobs), "not a Philly window file"),
        (lambda rows, jobs: (rows, jobs[1:]), "is not in sampled_jobs.json"),
        (lambda rows, jobs: ([rows[0], rows[1][:-1], *rows[2:]], jobs), "the row is short"),
        (lambda rows, jobs: (rows, [{**jobs[0], "start_time": "soon"}, *jobs[1:]]), "bad start_time"),
    ],
)
def test_philly_errors(mutate, problem) -> None:  # type: ignore[no-untyped-def]
    rows, jobs = mutate(_rows(PHILLY), _jobs())
    with pytest.raises(ConfigError, match=problem):
        parse_philly(rows, jobs, path="w.csv")


def test_philly_needs_its_jobs_file(tmp_path: Path) -> None:
    lonely = tmp_path / "w.csv"
    lonely.write_text(PHILLY.read_text())
    with pytest.raises(ConfigError, match="cannot read the Philly trace"):
        load_philly(lonely)


def test_helios_allocation_becomes_gpus_held_minute_by_minute() -> None:
    assert sniff(HELIOS) == "helios"
    tr = load_trace(HELIOS, gpu_model="NVIDIA V100")
    rows = _rows(HELIOS)
    header = rows[0]
    running = [int(r[header.index("running_gpu_num")]) for r in rows[1:]]
    total = int(rows[1][header.index("total_gpu_num")])
    assert len(tr.gpus) == total == 64
    assert tr.gpus[9].node == "vc3sl-n1"
    assert tr.gpus[9].index == 1
    assert len(tr) == sum(running)  # one row per held GPU per minute
    counts = np.unique(tr.t, return_counts=True)[1]
    assert list(counts) == running
    assert np.isnan(tr.util).all()  # allocation only: utilisation unknown, never 0
    assert tr.held_gpu_hours() == 0  # no sample had data
    # A GPU that is released and taken again is two workloads.
    per_gpu: dict[int, list[float]] = {}
    for w in tr.workloads:
        per_gpu.setdefault(w.gpus[0], []).extend([w.first_t, w.last_t])
    toggling = [g for g, times in per_gpu.items() if len(times) > 2]
    assert toggling  # allocation goes up and down in these four hours
    assert all(times == sorted(times) for times in per_gpu.values())  # stretches never overlap
    assert {w.owner.team for w in tr.workloads} == {"vc3sl"}


def test_helios_errors_and_names() -> None:
    assert vc_name("earth_vc3sl_cluster_sequence.csv") == "vc3sl"
    assert vc_name("cluster_sequence.csv") == "helios"
    with pytest.raises(ConfigError, match="missing running_gpu_num"):
        parse_helios([["time", "total_gpu_num"], ["2020-05-01 00:00:00", "64"]])
    with pytest.raises(ConfigError, match="bad row") as e:
        parse_helios([["time", "total_gpu_num", "running_gpu_num"], ["2020-05-01 00:00:00", "64", "x"]])
    assert e.value.line == 2
    with pytest.raises(ConfigError, match="must increase"):
        parse_helios(
            [
                ["time", "total_gpu_num", "running_gpu_num"],
                ["2020-05-01 00:01:00", "4", "1"],
                ["2020-05-01 00:00:00", "4", "1"],
            ]
        )
